"""Where memory goes (docs/memory.md): allocations of known sizes in known
zones and threads (tests/programs/alloc_known.c) recorded by `mlprof run`,
exactly with --memory=all and within statistical bounds when sampled; leaks
named; forks, SIGKILL, signal handlers and constructors survived."""
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import MLPROF, mlprof, program, report_json

MIB = 1 << 20

# zone -> (bytes, count, freed bytes, freed count) asked by alloc_known.
KNOWN = {
    "alpha": (1000 * 4096, 1000, 0, 0),
    "beta": (50 * MIB, 50, 50 * MIB, 50),
    "gamma": (2000 * 1000, 2000, 0, 0),
    "chain": (sum(1 << k for k in range(17)), 17,
              sum(1 << k for k in range(17)), 17),
    "aligned": (4 * 65536, 4, 4 * 65536, 4),
    "mapped": (16 * MIB, 1, 16 * MIB, 1),
    "leak": (40 * MIB, 40, 20 * MIB, 20),
}


def run(tmp_path, *args, memory=None, name="run", check=True):
    out = tmp_path / name
    flags = ["--memory=" + memory] if memory else []
    r = mlprof("run", "-q", *flags, "-o", out, "--",
               program("alloc_known"), *map(str, args), check=False)
    if check:
        assert r.returncode == 0, r.stderr
    return out, r


def own(report):
    """The memory of the profiled program's processes (not mlprof run's)."""
    pids = {p["pid"] for p in report["processes"]
            if not p["cmdline"].startswith(MLPROF)}
    mem = report["memory"]
    return ([p for p in mem["processes"] if p["pid"] in pids],
            [s for s in mem["sites"] if s["pid"] in pids])


def zones(report):
    return {z["zone"]: z for z in report["memory"]["zones"]}


def test_every_allocation_exact_per_zone_and_thread(tmp_path):
    out, r = run(tmp_path, "zones", memory="all")
    assert r.stdout == "done\n"
    rep = report_json(out)
    z = zones(rep)
    for name, (nbytes, count, freed, nfreed) in KNOWN.items():
        got = z[name]
        assert (got["allocated_bytes"], got["count"]) == (nbytes, count), name
        assert (got["freed_bytes"], got["freed_count"]) == (freed, nfreed), \
            name
    # The zone's own high-water mark: beta held one MiB at a time; the
    # realloc chain its largest block; leak 20 kept + 1 transient.
    assert z["beta"]["peak_bytes"] == MIB
    assert z["chain"]["peak_bytes"] == 65536
    assert z["leak"]["peak_bytes"] == 21 * MIB
    procs, sites = own(rep)
    assert len(procs) == 1 and procs[0]["exact"]
    # The peak: what alpha, gamma and the leak held at the end of the run.
    assert procs[0]["peak_bytes"] >= 4096000 + 2000000 + 21 * MIB
    leaks = [s for s in sites if s["leak"]]
    assert [s["zone"] for s in leaks] == ["leak"]
    assert leaks[0]["bytes_per_step"] == pytest.approx(MIB, rel=0.01)
    assert leaks[0]["native"].startswith("alloc_known+0x")
    # 21 step marks: a peak per step, growing a MiB each step.
    peaks = procs[0]["step_peak_bytes"]
    assert len(peaks) == 21
    assert peaks[10] - peaks[9] == MIB
    # The Chrome trace's live-bytes counter reaches the same peak.
    trace = tmp_path / "trace.json"
    mlprof("trace", out, "-o", trace)
    with open(trace) as f:
        ev = [e for e in json.load(f)["traceEvents"]
              if e.get("name") == "live bytes (allocations)"]
    assert ev and all(e["ph"] == "C" for e in ev)
    assert max(e["args"]["bytes"] for e in ev) == procs[0]["peak_bytes"]
    # The text report says the same.
    text = mlprof("report", out).stdout
    assert "Memory (every allocation recorded)" in text
    assert "Leaks (live bytes of a site growing step after step)" in text


def sampled_sigma(sizes, mean):
    """The standard deviation of the sampled estimate of sum(sizes)."""
    var = 0.0
    for s in sizes:
        p = -math.expm1(-s / mean)
        var += s * s * (1 - p) / p
    return math.sqrt(var)


def test_sampled_estimates_within_statistical_bounds(tmp_path):
    mean = 16384
    out, _ = run(tmp_path, "zones", memory=f"sampled:{mean}")
    z = zones(report_json(out))
    sizes = {
        "alpha": [4096] * 1000,
        "beta": [MIB] * 50,
        "gamma": [1000] * 2000,
        "leak": [MIB] * 40,
    }
    for name, ss in sizes.items():
        sigma = sampled_sigma(ss, mean)
        got = z[name]["allocated_bytes"] if name in z else 0
        assert abs(got - sum(ss)) <= 4 * sigma + 1, (name, got, sum(ss), sigma)
    # Far fewer records than allocations.
    assert z["gamma"]["count"] < 400


def test_default_is_sampled_and_off_records_nothing(tmp_path):
    out, _ = run(tmp_path, "zones", name="default")
    procs, _ = own(report_json(out))
    assert procs and not procs[0]["exact"]
    assert 0 < procs[0]["allocs"] < 1000
    out, _ = run(tmp_path, "zones", memory="off", name="off")
    procs, _ = own(report_json(out))
    assert procs == []


def test_output_and_status_unchanged(tmp_path):
    plain = subprocess.run([program("alloc_known"), "zones"],
                           capture_output=True, text=True)
    for mode in ("all", "sampled"):
        out, r = run(tmp_path, "zones", memory=mode, name=mode)
        assert (r.stdout, r.returncode) == (plain.stdout, plain.returncode)
    r = mlprof("run", "-q", "--memory=bogus", "--", "true", check=False)
    assert r.returncode == 2 and "--memory=bogus" in r.stderr


def test_fork_child_has_its_own_memory(tmp_path):
    out, _ = run(tmp_path, "fork", memory="all")
    rep = report_json(out)
    procs, sites = own(rep)
    assert len(procs) == 2
    child = [s for s in sites if s["zone"] == "child"]
    assert len(child) == 1 and child[0]["allocated_bytes"] == 3 * MIB
    parent_pids = {s["pid"] for s in sites if s["zone"] == "alpha"}
    assert child[0]["pid"] not in parent_pids


def test_sigkill_keeps_what_was_flushed(tmp_path):
    out = tmp_path / "killed"
    r = mlprof("run", "-q", "--memory=all", "--flush-ms", "50", "-o", out,
               "--", program("alloc_known"), "kill", "800", check=False)
    assert r.returncode in (-9, 137), r.returncode
    z = zones(report_json(out))
    # About 60 steps of a MiB each were made; the last flush interval may
    # be lost.
    assert z["doomed"]["count"] >= 20
    assert z["doomed"]["allocated_bytes"] == z["doomed"]["count"] * MIB


def test_signal_handler_and_constructor_allocations(tmp_path):
    # Sampled often, so that handlers interrupt the live table's lock too.
    _, r = run(tmp_path, "signal", memory="sampled:4096", name="sampled")
    assert r.stdout == "done\n"
    out, r = run(tmp_path, "signal", memory="all")
    assert r.stdout == "done\n"
    # The constructor's block, allocated before main, is recorded.
    z = zones(report_json(out))
    assert z[""]["allocated_bytes"] >= 12345
    procs, sites = own(report_json(out))
    assert any(s["allocated_bytes"] == 12345 for s in sites if s["zone"] == "")


VALIDATE = os.path.realpath(os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "programs",
    "mem_validate.py"))


def python_run(tmp_path, mode):
    out = tmp_path / mode
    script = VALIDATE
    r = mlprof("run", "-q", "--memory=sampled:65536", "-o", out, "--",
               sys.executable, script, mode, "40")
    assert r.stdout == "done 40\n"
    return report_json(out)


def test_validate_keeping_outputs_is_the_leak_at_its_rate(tmp_path):
    rep = python_run(tmp_path, "leak")
    _, sites = own(rep)
    leaks = [s for s in sites if s["leak"]]
    assert leaks, sites[:5]
    # The hidden activation (1 MiB) and the output (0.5 MiB) of each step's
    # validation forward stay alive with the kept graph.
    rate = sum(s["bytes_per_step"] for s in leaks)
    assert rate == pytest.approx(1.5 * MIB, rel=0.25), leaks
    assert all(s["zone"] == "Sequential" for s in leaks), leaks
    # Named by the line of validate() that runs the forward whose graph is
    # kept, innermost of the program's own lines.
    with open(VALIDATE) as f:
        line = 1 + f.read().split("\n").index("    out = model(x)")
    for s in leaks:
        assert s["python"].startswith(
            "%s:%d validate < " % (VALIDATE, line)), s


def test_no_leak_from_imports_warmup_cache_or_workers(tmp_path):
    rep = python_run(tmp_path, "clean")
    procs, sites = own(rep)
    # The DataLoader's two workers wrote their own profiles.
    assert len(procs) >= 3
    assert [s for s in sites if s["leak"]] == []


SITES = '''\
def two_lines():
    a = bytearray(1 << 20)
    b = bytearray(1 << 20)
    return len(a) + len(b)


def inner():
    return len(bytearray(1 << 20))


def left():
    return inner()


def right():
    return inner()


def main():
    for _ in range(200):
        two_lines()
        left()
        right()
    print("done")


main()
'''


def test_repeated_sites_keep_their_lines_and_callers(tmp_path):
    # Sites recur step after step, and are looked up through the walker's
    # and each thread's caches: two lines of one function, and one line
    # reached from two callers, must stay four sites.
    script = tmp_path / "sites.py"
    script.write_text(SITES)
    out = tmp_path / "out"
    r = mlprof("run", "-q", "--memory=all", "-o", out, "--",
               sys.executable, script)
    assert r.stdout == "done\n"
    _, sites = own(report_json(out))
    by = {}
    for s in sites:
        by[s["python"]] = by.get(s["python"], 0) + s["allocated_bytes"]
    top = "%s:21 main < %s:27 <module>" % (script, script)
    want = ["%s:2 two_lines < %s" % (script, top),
            "%s:3 two_lines < %s" % (script, top),
            # (the report names three of the program's frames)
            "%s:8 inner < %s:12 left < %s:22 main" % (script, script, script),
            "%s:8 inner < %s:16 right < %s:23 main" % (script, script, script)]
    for w in want:
        assert 200 * MIB <= by.get(w, 0) < 201 * MIB, (w, sorted(by))


def html_data(path):
    """The data a dashboard page carries (its mlprof-data script)."""
    text = path.read_text()
    start = text.index('<script id="mlprof-data" type="application/json">')
    start = text.index(">", start) + 1
    return json.loads(text[start:text.index("</script>", start)])


def test_html_carries_the_live_bytes_series_and_sites(tmp_path):
    out, _ = run(tmp_path, "zones", memory="all")
    rep = report_json(out)
    procs, sites = own(rep)
    page = tmp_path / "page.html"
    mlprof("html", out, "-o", page)
    mem = html_data(page)["memory"]
    assert mem["exact"]
    p = next(x for x in mem["processes"] if x["pid"] == procs[0]["pid"])
    offset = next(x["offset_ns"] for x in rep["processes"]
                  if x["pid"] == p["pid"])
    # The series' highest point is the report's peak, at its time (on the
    # job's timeline), and it is bounded.
    assert p["peak_bytes"] == procs[0]["peak_bytes"]
    assert p["peak_ns"] == procs[0]["peak_ns"] + offset
    assert 10 < len(p["t"]) == len(p["v"]) <= 1001
    top = max(range(len(p["v"])), key=lambda i: p["v"][i])
    assert (p["t"][top], p["v"][top]) == (p["peak_ns"], p["peak_bytes"])
    assert p["t"] == sorted(p["t"])
    assert len(p["steps"]) == 21
    # Every site of the process, with its stack; what they held at the
    # peak adds up to the peak.
    k = mem["processes"].index(p)
    mine = [s for s in mem["sites"] if s[0] == k]
    assert len(mine) == len(sites)
    assert sum(s[2] for s in mine) + mem["other"][k][0] == p["peak_bytes"]
    leak = [s for s in mine if s[6] > 0]
    assert len(leak) == 1 and mem["zones"][leak[0][1]] == "leak"
    assert leak[0][6] == pytest.approx(MIB, rel=0.01)
    want = next(s for s in sites if s["leak"])["native"]
    assert [mem["frames"][f] for f in leak[0][7]] == ["[" + want + "]"]
    # Each site points at the report's own (its lines as the report says).
    for s in mine:
        r = rep["memory"]["sites"][s[8]]
        assert (r["zone"], r["at_peak_bytes"], r["allocated_bytes"]) == \
            (mem["zones"][s[1]], s[2], s[3])


def test_html_sites_carry_their_whole_python_stack(tmp_path):
    script = tmp_path / "sites.py"
    script.write_text(SITES)
    out = tmp_path / "out"
    mlprof("run", "-q", "--memory=all", "-o", out, "--", sys.executable,
           script)
    page = tmp_path / "page.html"
    mlprof("html", out, "-o", page)
    mem = html_data(page)["memory"]
    paths = {}
    for s in mem["sites"]:
        frames = [mem["frames"][f] for f in s[7]]
        # The program's frames, outermost first, then the native caller.
        own_frames = tuple(f for f in frames if f.startswith(str(script)))
        paths[own_frames] = paths.get(own_frames, 0) + s[3]
        if own_frames:
            assert frames[-1].startswith("[") and frames[-1].endswith("]")
    left = tuple("%s:%s" % (script, x) for x in
                 ("27 <module>", "22 main", "12 left", "8 inner"))
    assert 200 * MIB <= paths.get(left, 0) < 201 * MIB, sorted(paths)


SMALL = '''\
def small_objects(n):
    return [(i, -i) for i in range(n)]


kept = small_objects(100000)
print("done", len(kept))
'''


def small_object_sites(tmp_path, memory):
    script = tmp_path / "small.py"
    script.write_text(SMALL)
    out = tmp_path / memory.replace(",", "-")
    r = mlprof("run", "-q", "--memory=" + memory, "-o", out, "--",
               sys.executable, script)
    assert r.stdout == "done 100000\n", r.stderr
    _, sites = own(report_json(out))
    line = "%s:2 small_objects" % script
    return [s for s in sites if s["python"].startswith(line)]


def test_python_small_objects_seen_only_with_python_allocator(tmp_path):
    # pymalloc carves the 100,000 tuples (56 bytes each) from arenas the
    # hooks see whole, a few mmaps; PYTHONMALLOC=malloc makes each its own
    # malloc, recorded at the line that made it.
    pymalloc = small_object_sites(tmp_path, "all")
    assert sum(s["count"] for s in pymalloc) < 1000, pymalloc
    traced = small_object_sites(tmp_path, "all,python")
    assert sum(s["count"] for s in traced) >= 100000, traced
    assert sum(s["allocated_bytes"] for s in traced) >= 100000 * 56


def test_python_allocator_flag_is_checked(tmp_path):
    for bad in ("all,pyhton", "off,python", "all,python,python"):
        r = mlprof("run", "-q", "--memory=" + bad, "-o", tmp_path / "x",
                   "--", "true", check=False)
        assert r.returncode == 2 and "--memory=" + bad in r.stderr, r.stderr


def test_memory_snapshot_points_to_the_python_package(tmp_path):
    r = mlprof("memory-snapshot", tmp_path / "s.pickle", check=False)
    assert r.returncode == 2
    assert "python -m mlprof memory-snapshot FILE" in r.stderr
