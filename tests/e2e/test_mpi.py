"""MPI capture (src/intercept/mpi.c): 4 ranks of tests/programs/mpi_ops.c
under `mlprof run`, in both launch orders, with each MPI of
tests/e2e/mpi_flavours.py (Open MPI, MPICH). Each rank's profile holds its
rank, every operation with its exact bytes, peers and sequence numbers, and
its clock offset to rank 0."""
import glob
import json
import os
import re
import shutil
import subprocess
from collections import Counter

import pytest

from conftest import MLPROF, mlprof, program, report_json
from mpi_flavours import FLAVOURS


@pytest.fixture(params=FLAVOURS)
def mpi(request):
    request.param.require("mpi_ops")
    return request.param


def ranks(out, mpi, np=4, base="mpi_ops"):
    """{rank: (zones, track spans, meta)} of the profiles of test program
    base in out, read through `mlprof trace`."""
    found = {}
    name = os.path.basename(mpi.program(base))
    for path in glob.glob(os.path.join(out, name + "-*.mlprof")):
        trace = path + ".json"
        mlprof("trace", path, "-o", trace)
        with open(trace) as f:
            d = json.load(f)
        name = [e for e in d["traceEvents"] if e.get("name") == "process_name"]
        rank = int(name[0]["args"]["name"].split()[1])
        spans = [e for e in d["traceEvents"] if e["ph"] == "X"]
        zones = sorted((e for e in spans if e["tid"] < 2**31),
                       key=lambda e: e["ts"])
        track = [e for e in spans if e["tid"] >= 2**31]
        found[rank] = (zones, track, d["otherData"]["meta"])
    assert sorted(found) == list(range(np))
    return found


@pytest.mark.parametrize("order", ["mlprof_outside", "mlprof_inside"])
def test_every_operation_with_its_bytes(tmp_path, order, mpi):
    out = str(tmp_path / "run")
    if order == "mlprof_outside":
        mpi.run([MLPROF, "run", "-q", "-o", out, "--",
                 *mpi.mpirun(), mpi.program("mpi_ops")])
    else:
        mpi.run([*mpi.mpirun(), MLPROF, "run", "-q", "-o",
                 out, "--", mpi.program("mpi_ops")])
    world_seqs = []
    for rank, (zones, track, meta) in ranks(out, mpi).items():
        assert (meta["dist.rank"], meta["dist.world_size"]) == (str(rank), "4")
        assert meta["dist.backend"] == "mpi"
        got = Counter((z["name"], z.get("args", {}).get("bytes"))
                      for z in zones)
        assert got == Counter({
            ("MPI_Allreduce", 8000): 3, ("MPI_Allreduce", 400): 1,
            ("MPI_Allreduce", 128): 1, ("MPI_Bcast", 1024): 1,
            ("MPI_Reduce", 400): 1, ("MPI_Allgather", 40): 1,
            ("MPI_Alltoall", 80): 1, ("MPI_Barrier", 0): 2,
            ("MPI_Send", 123): 1, ("MPI_Recv", 123): 1,
            ("MPI_Irecv", 512): 1, ("MPI_Isend", 512): 1,
            ("MPI_Iallreduce", 128): 1, ("MPI_Waitall", None): 1}), rank
        assert all(z["cat"] == "communication" for z in zones)
        by = {z["name"]: z["args"] for z in zones if "args" in z}
        nxt, prev = (rank + 1) % 4, (rank + 3) % 4
        assert (by["MPI_Send"]["peer"], by["MPI_Send"]["tag"]) == (str(nxt), "7")
        # Received from MPI_ANY_SOURCE: the peer is the rank that sent.
        assert (by["MPI_Recv"]["peer"], by["MPI_Recv"]["tag"]) == (str(prev), "7")
        assert by["MPI_Irecv"]["peer"] == str(prev)
        assert by["MPI_Bcast"]["root"] == "1"
        half = [z["args"] for z in zones
                if z.get("args", {}).get("comm", "world") != "world"]
        assert half == [{"comm": "ranks 0,2" if rank % 2 == 0 else "ranks 1,3",
                         "bytes": 128, "seq": 1}]
        world_seqs.append([(z["name"], z["args"]["seq"]) for z in zones
                           if z.get("args", {}).get("comm") == "world"
                           and "seq" in z["args"]])
        # Nonblocking operations: a span from the start to the completion.
        done = {s["name"]: s for s in track}
        assert sorted(done) == ["MPI_Iallreduce done", "MPI_Irecv done",
                                "MPI_Isend done"]
        wait = next(z for z in zones if z["name"] == "MPI_Waitall")
        for s in done.values():
            assert s["ts"] + s["dur"] >= wait["ts"] - 0.002
    # The same collectives carry the same numbers on every rank.
    assert world_seqs[0] == [(n, i + 1) for i, (n, _) in enumerate(world_seqs[0])]
    assert len(world_seqs[0]) == 11
    assert all(s == world_seqs[0] for s in world_seqs)


def test_clock_offsets_match_shifted_clocks(tmp_path, mpi):
    """Each rank's CLOCK_MONOTONIC is moved by 7 s x rank (a time namespace):
    the offsets recorded at MPI_Init and MPI_Finalize are those shifts, within
    the uncertainty each states."""
    if subprocess.run(["unshare", "--time", "--fork", "true"],
                      capture_output=True).returncode != 0:
        pytest.skip("no time namespaces here (needs root and Linux 5.6)")
    out = str(tmp_path / "run")
    shifted = (f"exec unshare --time --monotonic $(({mpi.rank_var} * 7))"
               f" --fork {mpi.program('mpi_ops')}")
    mpi.run([MLPROF, "run", "-q", "-o", out, "--",
             *mpi.mpirun(), "sh", "-c", shifted])
    for rank, (_, _, meta) in ranks(out, mpi).items():
        for key in ("dist.clock.init", "dist.clock.final"):
            offset, uncertainty, at = map(int, meta[key].split())
            want = -7 * rank * 10**9
            assert abs(offset - want) <= uncertainty, (rank, key, meta[key])
            assert uncertainty < 10**8 and at > 0
            if rank == 0:
                assert (offset, uncertainty) == (0, 0)


def report_dist(out):
    r = subprocess.run([MLPROF, "report", "--format", "json", out],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def straggler(mpi, mode="straggler"):
    """mpi_ops straggler: 20 steps, rank 2 % np 10 ms late in each, on as
    many ranks (np) as leave a collective together (mpi_flavours.py)."""
    return [mpi.program("mpi_ops"), mode, "20", "10"]


def work(out, mpi, report, base="mpi_ops"):
    """{rank: [(begin, end) µs]} of the zones "work" that test program base
    records around each step's sleep (what a rank really worked: a loaded
    machine wakes it milliseconds late), in step order, on the clocks the
    report states. The job's trace aligns each rank by the offset it
    measured at MPI_Init; under load that is off by milliseconds (within
    its uncertainty) and the report narrows it by the collectives."""
    d = report["distributed"]
    np = len(d["ranks"])
    events, rank_of = job_trace(out)
    init = {r: int(meta["dist.clock.init"].split()[0])
            for r, (_, _, meta) in ranks(out, mpi, np, base).items()}
    narrowed = {x["rank"]: (x["offset_ns"] - init[x["rank"]]) / 1000
                for x in d["ranks"]}
    found = {r: [] for r in range(np)}
    for e in events:
        if e["ph"] == "X" and e["name"] == "work":
            r = rank_of[e["pid"]]
            b = e["ts"] + narrowed[r]
            found[r].append((b, b + e["dur"]))
    return {r: sorted(w) for r, w in found.items()}


def worked(out, mpi, report):
    """What the straggler run in out should report, from its work (work()):
    (straggler, delay_ns, {rank: wait_ns}). The straggler is the rank that
    worked longest in most steps; its delay, its work over the others' mean
    in those steps; a rank's waiting, from the end of its work to the end of
    the last rank's, each step."""
    w = work(out, mpi, report)
    np = len(w)
    assert all(len(x) == 20 for x in w.values()), w
    steps = [[w[r][k] for r in range(np)] for k in range(20)]
    slowest = [max(range(np), key=lambda r: s[r][1] - s[r][0]) for s in steps]
    late = Counter(slowest).most_common(1)[0][0]
    delays = [(s[late][1] - s[late][0]) -
              sum(e - b for r, (b, e) in enumerate(s) if r != late) / (np - 1)
              for s, k in zip(steps, slowest) if k == late]
    waits = {r: sum(max(e for _, e in s) - s[r][1] for s in steps) * 1000
             for r in range(np)}
    return late, sum(delays) / len(delays) * 1000, waits


# What the analysis adds to the recorded work: each step a rank's compute
# also holds its step mark, the work zone's edges and the call into
# the collective, and its waiting starts at that call, not at the work's
# end: microseconds, unless the scheduler takes the rank off its core there.
# Over 20 steps: 0.5 ms on the mean delay, 5 ms on a rank's waiting (0.4 ms
# seen with 6 busy loops on 2 cores).
DELAY_SLACK_NS, WAIT_SLACK_NS = 0.5e6, 5e6


def check_straggler(report, out, mpi, np):
    d = report["distributed"]
    assert len(d["ranks"]) == np and len(d["steps"]) == 20
    late, delay, waits = worked(out, mpi, report)
    assert d["straggler"]["rank"] == late
    assert abs(d["straggler"]["delay_ns"] - delay) < DELAY_SLACK_NS, \
        (d["straggler"], delay)
    [ar] = [c for c in d["collectives"] if c["op"] == "all_reduce"]
    assert (ar["count"], ar["bytes"], ar["ranks"]) == (20, 20 * 8000, np)
    for r in d["ranks"]:
        assert abs(r["wait_ns"] - waits[r["rank"]]) < WAIT_SLACK_NS, (r, waits)
    assert any(f["type"] == "straggler" for f in report["findings"])
    # Its extra time is in its zone "work", named first, per step.
    first = d["straggler"]["zones"][0]
    assert first["zone"] == "work" and not first["outside_zones"], d
    assert abs(first["extra_per_step_ns"] - delay) < 0.2 * delay, (first,
                                                                   delay)
    [f] = [f for f in report["findings"] if f["type"] == "straggler"]
    assert 'per step it spends' in f["summary"], f
    assert 'in zone "work"' in f["summary"], f
    # The ranks waiting in MPI_* wait for communication, not I/O.
    assert not [f for f in report["findings"] if f["type"] == "io_wait" and
                (f.get("zone") or "").startswith("MPI_")], report["findings"]


@pytest.mark.parametrize("order", ["mlprof_outside", "mlprof_inside"])
def test_straggler_named(tmp_path, order, mpi):
    """Rank 2 (of 2 ranks, 0) works 10 ms longer each of 20 steps: the report
    names it, its delay, the others' waiting and the all-reduces' exact
    bytes."""
    out = str(tmp_path / "run")
    np = mpi.lockstep_np()
    if order == "mlprof_outside":
        mpi.run([MLPROF, "run", "-q", "-o", out, "--", *mpi.mpirun(np),
                 *straggler(mpi)])
    else:
        mpi.run([*mpi.mpirun(np), MLPROF, "run", "-q", "-o", out, "--",
                 *straggler(mpi)])
    check_straggler(report_dist(out), out, mpi, np)


def test_nonblocking_straggler_waits(tmp_path, mpi):
    """MPI_Iallreduce then MPI_Wait, rank 2 (of 2 ranks, 0) 10 ms late each
    of 20 steps: each rank's waiting, from its MPI_Iallreduce to the
    completion MPI_Wait saw, is what check_straggler finds from the work
    recorded: the others wait for the straggler, which hardly waits, and
    their waiting is not taken for transfer (which left them 6 µs of
    waiting a step)."""
    out = str(tmp_path / "run")
    np = mpi.lockstep_np()
    mpi.run([MLPROF, "run", "-q", "-o", out, "--", *mpi.mpirun(np),
             *straggler(mpi, "istraggler")])
    check_straggler(report_dist(out), out, mpi, np)


def test_straggler_on_shifted_clocks(tmp_path, mpi):
    """The same with each rank's CLOCK_MONOTONIC moved by 7 s x rank: the
    report's offsets are the shifts within their uncertainty, and the
    straggler and waits are as on one clock."""
    if subprocess.run(["unshare", "--time", "--fork", "true"],
                      capture_output=True).returncode != 0:
        pytest.skip("no time namespaces here (needs root and Linux 5.6)")
    out = str(tmp_path / "run")
    shifted = (f"exec unshare --time --monotonic $(({mpi.rank_var} * 7))"
               f" --fork {' '.join(straggler(mpi))}")
    np = mpi.lockstep_np()
    mpi.run([MLPROF, "run", "-q", "-o", out, "--",
             *mpi.mpirun(np), "sh", "-c", shifted])
    report = report_dist(out)
    check_straggler(report, out, mpi, np)
    for r in report["distributed"]["ranks"]:
        assert abs(r["offset_ns"] + 7e9 * r["rank"]) <= r["uncertainty_ns"] + 1


def job_trace(out):
    """The Chrome trace of the whole run directory: (events, {pid: rank})."""
    trace = os.path.join(out, "job.json")
    mlprof("trace", out, "-o", trace)
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    rank_of = {}
    for e in events:
        if (e.get("name") == "process_name"
                and e["args"]["name"].startswith("rank ")):
            rank_of[e["pid"]] = int(e["args"]["name"].split()[1])
    return events, rank_of


def test_trace_aligns_shifted_clocks(tmp_path, mpi):
    """Each rank's CLOCK_MONOTONIC is moved by 7 s x rank: in the job's trace
    the ranks are put on rank 0's clock, so the participants of each
    barrier are in it together, to 1 ms (assert_barriers_together)."""
    if subprocess.run(["unshare", "--time", "--fork", "true"],
                      capture_output=True).returncode != 0:
        pytest.skip("no time namespaces here (needs root and Linux 5.6)")
    out = str(tmp_path / "run")
    shifted = (f"exec unshare --time --monotonic $(({mpi.rank_var} * 7))"
               f" --fork {mpi.program('mpi_ops')}")
    np = mpi.lockstep_np()
    mpi.run([MLPROF, "run", "-q", "-o", out, "--",
             *mpi.mpirun(np), "sh", "-c", shifted])
    assert_barriers_together(out, np)


def assert_barriers_together(out, np):
    """In the job's trace of out, the spans of each barrier's np
    participants hold a common instant to 1 ms: no one leaves before the
    last has come. Each zone opens before its call enters the barrier and
    closes after it left, by however long the machine took to run the rank
    again (on a loaded one, milliseconds: the exits alone spread over
    1 ms), so load only widens these spans; a clock offset wrong by over
    1 ms moves a span past the others'."""
    events, rank_of = job_trace(out)
    spans = {}
    for e in events:
        if e["ph"] == "X" and e["name"] == "MPI_Barrier":
            spans.setdefault(rank_of[e["pid"]], []).append(
                (e["ts"], e["ts"] + e["dur"]))
    assert sorted(spans) == list(range(np))
    for one in zip(*(sorted(v) for v in spans.values())):
        assert max(b for b, _ in one) - min(e for _, e in one) < 1000, one


FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


@pytest.mark.skipif(not os.path.exists(FAKETIME),
                    reason="no libfaketime (Debian package faketime)")
def test_faketime_offsets_and_aligned_barriers(tmp_path, mpi):
    """Every rank under libfaketime, the odd ones 50 ms ahead
    (FAKETIME=+0.05). libfaketime moves CLOCK_MONOTONIC too, onto the wall
    clock's origin, in each process from the real clocks read at its start:
    the ranks' clocks differ by the 50 ms only (to the few µs of those
    reads, allowed beside the stated uncertainty). The offsets recorded at
    MPI_Init and MPI_Finalize are -50 ms on the odd ranks and 0 on the even
    ones, and in the job's trace every barrier's participants are in it
    together, to 1 ms (assert_barriers_together). libfaketime goes first in
    LD_PRELOAD: after libmlprof it crashes the program at exit (its fstat,
    which mlprof's last write calls, uses a semaphore its exit handler has
    closed)."""
    out = str(tmp_path / "run")
    shifted = (f"LD_PRELOAD={FAKETIME}:$LD_PRELOAD "
               f"FAKETIME=+0.0$(({mpi.rank_var} % 2 * 5)) "
               f"exec {mpi.program('mpi_ops')}")
    np = mpi.lockstep_np()
    mpi.run([MLPROF, "run", "-q", "-o", out, "--",
             *mpi.mpirun(np), "sh", "-c", shifted])
    for rank, (_, _, meta) in ranks(out, mpi, np).items():
        for key in ("dist.clock.init", "dist.clock.final"):
            offset, uncertainty, _ = map(int, meta[key].split())
            want = -50 * 10**6 * (rank % 2)
            assert abs(offset - want) <= uncertainty + 20000, (rank, meta[key])
    assert_barriers_together(out, np)


def test_trace_links_collectives(tmp_path, mpi):
    """The job's trace has a process "rank N (host)" per rank, sorted by
    rank, and a flow arrow from one participant of each collective to every
    other, bound to the collective's slices (matched by comm and seq)."""
    out = str(tmp_path / "run")
    mpi.run([MLPROF, "run", "-q", "-o", out, "--", *mpi.mpirun(),
             mpi.program("mpi_ops")])
    events, rank_of = job_trace(out)
    host = os.uname().nodename
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("name") == "process_name" and e["pid"] in rank_of}
    assert sorted(names.values()) == [f"rank {r} ({host})" for r in range(4)]
    order = {e["pid"]: e["args"]["sort_index"] for e in events
             if e.get("name") == "process_sort_index" and e["pid"] in rank_of}
    assert sorted(order, key=order.get) == sorted(rank_of, key=rank_of.get)
    slices = [e for e in events if e["ph"] == "X" and e["pid"] in rank_of]
    coll = {}
    for e in slices:
        if "seq" in e.get("args", {}):
            coll.setdefault((e["args"]["comm"], e["args"]["seq"]), []).append(e)

    def slice_at(f):
        [s] = [e for e in coll_slices
               if (e["pid"], e["tid"]) == (f["pid"], f["tid"])
               and e["ts"] == f["ts"]]
        return s

    coll_slices = [e for v in coll.values() for e in v]
    flows = {}
    for e in events:
        if e["ph"] in "sf" and e.get("cat") == "collective":
            flows.setdefault(e["id"], {})[e["ph"]] = e
    # Every collective of n participants has n - 1 arrows.
    assert len(flows) == sum(len(v) - 1 for v in coll.values()) > 0
    for f in flows.values():
        a, b = slice_at(f["s"]), slice_at(f["f"])
        assert rank_of[a["pid"]] != rank_of[b["pid"]]
        assert (a["args"]["comm"], a["args"]["seq"]) == (
            b["args"]["comm"], b["args"]["seq"])


def test_metrics_per_rank(tmp_path, mpi):
    """mlprof serve's /metrics on the straggler run: every figure per rank,
    the straggler (rank 2 % np unless load woke another later still) flagged
    and the waits those found from the work recorded (worked), valid for
    promtool."""
    from test_html import Server
    out = str(tmp_path / "run")
    np = mpi.lockstep_np()
    mpi.run([MLPROF, "run", "-q", "-o", out, "--", *mpi.mpirun(np),
             *straggler(mpi)])
    srv = Server(tmp_path)
    try:
        st, _, body = srv.get("/metrics", timeout=120)
    finally:
        assert srv.stop() == 0
    assert st == 200
    text = body.decode()
    flags = dict(re.findall(
        r'^mlprof_rank_straggler\{run="run",rank="(\d)",host="[^"]*"\} (\S+)$',
        text, re.M))
    late, _, want = worked(out, mpi, report_dist(out))
    assert flags == {str(r): str(int(r == late)) for r in range(np)}
    steps = re.findall(r'^mlprof_rank_steps\{run="run",rank="\d",[^}]*\} (\S+)$',
                       text, re.M)
    assert steps == ["20"] * np
    waits = dict(re.findall(
        r'^mlprof_rank_wait_seconds\{run="run",rank="(\d)",[^}]*\} (\S+)$',
        text, re.M))
    assert all(abs(float(waits[str(r)]) * 1e9 - want[r]) < WAIT_SLACK_NS
               for r in range(np)), (waits, want)
    assert re.search(r'^mlprof_dist_load_balance\{run="run"\} 0\.\d+$', text,
                     re.M)
    promtool = shutil.which("promtool")
    if promtool:
        check = subprocess.run([promtool, "check", "metrics"], input=body,
                               capture_output=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr


def test_unknown_abi_passed_on_unrecorded(tmp_path):
    """An MPI library of neither ABI mlprof knows (tests/programs/fake_mpi.c,
    int handles but no MPICH symbol): every call reaches it, none is
    recorded, and one warning says so."""
    out = str(tmp_path / "run")
    r = mlprof("run", "-q", "-o", out, "--", program("mpi_unknown"))
    assert r.stdout.split() == ["3"], r.stdout
    assert r.stderr.count("MPI calls not recorded") == 1, r.stderr
    assert "neither Open MPI's nor MPICH's ABI" in r.stderr
    assert not [z for z in report_json(out)["zones"]
                if z["name"].startswith("MPI_")]


def test_abi_dependent_calls(tmp_path, mpi):
    """tests/programs/mpi_abi.c on 2 ranks: what the ABIs spell differently
    (MPI_IN_PLACE, MPI_STATUS_IGNORE, MPI_ANY_SOURCE, MPI_PROC_NULL, request
    arrays) is recorded alike: the bytes of an in-place all-gather are the
    receive part's, an ignored status still gives what was received, and
    special ranks are -1 (any source) and -2 (no process)."""
    mpi.require("mpi_abi")
    out = str(tmp_path / "run")
    mpi.run([MLPROF, "run", "-q", "-o", out, "--", *mpi.mpirun(2),
             mpi.program("mpi_abi")])
    name = os.path.basename(mpi.program("mpi_abi"))
    paths = glob.glob(os.path.join(out, name + "-*.mlprof"))
    assert len(paths) == 2
    for path in paths:
        mlprof("trace", path, "-o", path + ".json")
        with open(path + ".json") as f:
            d = json.load(f)
        rank = int(d["otherData"]["meta"]["dist.rank"])
        other = str(1 - rank)
        spans = sorted((e for e in d["traceEvents"] if e["ph"] == "X"),
                       key=lambda e: e["ts"])
        zones = [(e["name"], e.get("args", {}))
                 for e in spans if e["tid"] < 2**31]
        assert zones == [
            ("MPI_Allgather", {"comm": "world", "bytes": 12, "seq": 1}),
            ("MPI_Sendrecv", {"source": other, "recvtag": "5",
                              "comm": "world", "bytes": 32, "peer": other,
                              "tag": "5"}),
            ("MPI_Irecv", {"comm": "world", "bytes": 8, "peer": "-1",
                           "tag": "6"}),
            ("MPI_Isend", {"comm": "world", "bytes": 8, "peer": "-2",
                           "tag": "6"}),
            ("MPI_Send", {"comm": "world", "bytes": 8, "peer": other,
                          "tag": "6"}),
        ], rank
        assert sorted(e["name"] for e in spans if e["tid"] >= 2**31) == [
            "MPI_Irecv done", "MPI_Isend done"]
