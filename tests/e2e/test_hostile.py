"""Hostile files: what a profile claims (a world size, name ids, clock
offsets) sizes nothing and breaks nothing. Reading a job uses at most a
small multiple of its files' size and answers in seconds, and an id no
entry announced costs only its own entry, the rest of the directory being
reported (docs/format.md, "Reading limits")."""
import json
import os
import resource
import subprocess
import tempfile
import threading
import time

import pytest

import craft
from conftest import MLPROF

# A sanitizer build (MLPROF_LIB set, conftest.py) reserves terabytes of
# address space for its shadow and runs several times slower.
SANITIZER = bool(os.environ.get("MLPROF_LIB"))
SECONDS = 60 if SANITIZER else 10


def _limit():
    if not SANITIZER:  # a safety net: the old tables took gigabytes
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def measured(*args):
    """Runs mlprof with args: (exit status, stdout, stderr, peak RSS in
    bytes, seconds)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        p = subprocess.Popen([MLPROF, *map(str, args)], stdout=out,
                             stderr=err, preexec_fn=_limit)
        timer = threading.Timer(4 * SECONDS, p.kill)
        timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        secs = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        return (p.returncode, out.read().decode(errors="replace"),
                err.read().decode(errors="replace"), ru.ru_maxrss * 1024,
                secs)


def size_of(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def check_bounded(d, *cmd):
    """mlprof CMD d (report as JSON; html, trace to a file) succeeds within
    SECONDS and a peak memory of 64 MB plus 16 times the files (four times
    that under a sanitizer). Returns the report (JSON) or None."""
    args = list(cmd) + [d]
    if cmd[0] == "report":
        args += ["--format", "json", "--top", "0"]
    else:
        args += ["-o", os.path.join(d, "..", f"out.{cmd[0]}")]
    rc, out, err, rss, secs = measured(*args)
    assert rc == 0, err
    budget = (64 << 20) + 16 * size_of(d)
    if SANITIZER:
        budget *= 4
    assert rss < budget, f"mlprof {cmd[0]}: peak {rss >> 20} MB"
    assert secs < SECONDS, f"mlprof {cmd[0]}: {secs:.1f} s"
    return json.loads(out) if cmd[0] == "report" else None


def write_job(d, ranks):
    os.makedirs(d)
    for name, data in ranks.items():
        (d / name).write_bytes(data)
    return d


@pytest.mark.parametrize("world,collectives", [(1 << 20, 200),
                                               (4096, 20000)])
@pytest.mark.parametrize("cmd", ["report", "html"])
def test_claimed_world_size_sizes_nothing(tmp_path, world, collectives, cmd):
    """Two ranks' profiles claiming 2^20 ranks (3 KB each), or 4096 with
    20 000 collectives as real files would hold (300 KB each): the job's
    tables are sized by the two profiles, not by the claim (they took
    3.4 GB and 17 s, and 1.3 GB)."""
    d = write_job(tmp_path / "job", {
        f"r{r}.mlprof": craft.rank_profile(r, world, collectives)
        for r in (0, 1)})
    rep = check_bounded(d, cmd)
    if rep:
        assert len(rep["processes"]) == 2
        counts = {z["name"]: z["count"] for z in rep["zones"]}
        assert counts["all_reduce"] == 2 * collectives


@pytest.mark.parametrize("bad_id", [150_000_000, 3_000_000_000, 2**32 - 1])
@pytest.mark.parametrize("ranks", [True, False])
def test_far_name_id_costs_only_its_entry(tmp_path, bad_id, ranks):
    """A span naming an id no NAMES entry announced, far past those the
    file holds (as one flipped byte can make it): it is kept as "name #ID"
    at the cost of that one entry, and the whole directory is reported
    (such an id cost 4 GB, or failed the report "out of memory"), as
    a rank of a job of two or as a lone process."""
    world = 2 if ranks else -1
    bad = craft.events([craft.span(bad_id, 5, 10)], tid=2)
    d = write_job(tmp_path / "job", {
        "r0.mlprof": craft.rank_profile(0 if ranks else -1, world, 5,
                                        pid=100, extra=[bad]),
        "r1.mlprof": craft.rank_profile(1 if ranks else -1, world, 5,
                                        pid=101)})
    rep = check_bounded(d, "report")
    counts = {z["name"]: z["count"] for z in rep["zones"]}
    assert counts[f"name #{bad_id}"] == 1
    assert counts["compute"] == 10 and counts["all_reduce"] == 10
    assert len(rep["processes"]) == 2
    check_bounded(d, "html")


def test_clock_offsets_at_the_ends_of_int64(tmp_path):
    """Clock offsets near +-2^63 (META dist.clock.init and .final): left
    out and said, no arithmetic overflows (the sanitizer build aborted),
    every profile reported."""
    big = 9223372036854775000
    d = write_job(tmp_path / "job", {
        "r0.mlprof": craft.rank_profile(
            0, 2, 5, extra=[craft.meta([("dist.clock.init", "0 0 0")])]),
        "r1.mlprof": craft.rank_profile(1, 2, 5, extra=[craft.meta([
            ("dist.clock.init", f"{big} 10 5"),
            ("dist.clock.final", f"-{big} 10 6")])])})
    rep = check_bounded(d, "report")
    assert len(rep["processes"]) == 2
    said = [w for w in rep["warnings"] if "clock offset to rank 0" in w]
    assert len(said) == 1 and said[0].startswith("process 101 "), \
        rep["warnings"]
    for cmd in ("html", "trace"):
        check_bounded(d, cmd)


def test_many_line_tables_answer_in_seconds(tmp_path):
    """Line timings of 100 000 functions in one file (3 MB), and two
    processes' tables of one function of 100 000 lines each: matched by a
    hash and merged by line, not by searching every function and line for
    each (which took minutes)."""
    one = craft.profile(craft.header(), *[
        craft.lines(f"f{i}", "x.py", 1, [(1, 1, 10, 5, "")])
        for i in range(100_000)], craft.end(100))
    rows = [(i, 1, 10, 5, "") for i in range(1, 100_001)]
    d = write_job(tmp_path / "job", {
        "a.mlprof": one,
        "b.mlprof": craft.profile(craft.header(pid=7),
                                  craft.lines("g", "g.py", 1, rows),
                                  craft.end(100)),
        "c.mlprof": craft.profile(craft.header(pid=8),
                                  craft.lines("g", "g.py", 1, rows[::-1]),
                                  craft.end(100))})
    rep = check_bounded(d, "report")
    by = {}
    for r in rep["lines"]:
        by.setdefault(r["function"], []).append(r)
    assert len(by) == 100_001
    assert len(by["g"]) == 100_000
    assert all(r["hits"] == 2 and r["total_ns"] == 20 for r in by["g"])
