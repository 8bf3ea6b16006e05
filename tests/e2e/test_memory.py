"""Where memory goes (docs/memory.md): allocations of known sizes in known
zones and threads (tests/programs/alloc_known.c) recorded by `mlprof run`,
exactly with --memory=all and within statistical bounds when sampled; leaks
named; forks, SIGKILL, signal handlers and constructors survived."""
import json
import xml.etree.ElementTree as ET
import math
import os
import struct
import subprocess
import sys

import pytest

from conftest import MLPROF, mlprof, program, report_json

# The Python package: the build's own, or the one MLPROF_PY_STARTUP lies in
# (make sanitize runs these tests with a build that has none).
PKG = (os.path.dirname(os.path.dirname(os.environ["MLPROF_PY_STARTUP"]))
       if os.environ.get("MLPROF_PY_STARTUP")
       else os.path.join(os.path.dirname(MLPROF), "python"))

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
    # The allocating function, by name: a static one, from the program's
    # own symbol table (dladdr alone gave "alloc_known+0x...").
    assert leaks[0]["native"].startswith("zones+0x")
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


def allocs_bytes(out):
    """Bytes of the ALLOCS chunks (type 11: the allocation records) in the
    profile of alloc_known in run directory out."""
    [path] = [p for p in out.iterdir() if p.name.startswith("alloc_known")]
    data = path.read_bytes()
    at, n = 16, 0  # the file header, then chunks with a 16-byte header
    while at + 16 <= len(data):
        kind, size = struct.unpack_from("<H2xI", data, at + 4)
        n += (16 + size) if kind == 11 else 0
        at += 16 + size
    return n


def test_sampled_file_grows_with_sites_not_allocations(tmp_path):
    """Sampled allocations freed within a flush are folded into per-site
    sums (docs/memory.md, "File growth"): running a steady loop twice as
    long adds a small part of what one record per sample adds
    (MLPROF_MEMORY_FOLD=0), and the totals are the same estimates."""
    mean, grown, totals = 16384, {}, {}
    for fold in ("1", "0"):
        for steps in (50, 100):
            out = tmp_path / f"fold{fold}-{steps}"
            mlprof("run", "-q", f"--memory=sampled:{mean}", "--flush-ms", "20",
                   "-o", out, "--", program("alloc_known"), "work", 1, steps,
                   2, env=dict(os.environ, MLPROF_MEMORY_FOLD=fold))
            grown[fold, steps] = allocs_bytes(out)
            totals[fold, steps] = zones(report_json(out))
    folded = grown["1", 100] - grown["1", 50]
    whole = grown["0", 100] - grown["0", 50]
    # 50 more steps of about 60 samples each: some 80 kB one by one.
    assert whole > 50000, grown
    assert folded < 0.1 * whole, grown
    # Each zone's bytes: within the sampling error of what was asked.
    asked = {"fwd": [16384] * 64, "grow": [131072] * 8, "small": [100] * 2000}
    for (fold, steps), z in totals.items():
        for name, ss in asked.items():
            sigma = sampled_sigma(ss * steps, mean)
            got = z[name]["allocated_bytes"]
            assert abs(got - sum(ss) * steps) <= 4 * sigma, (fold, name, got)
            assert z[name]["freed_bytes"] == got
        # Held to the step's end: each step's 8 blocks, never more at once
        # (each sampled with probability 0.99966, weighing a little more).
        w = int(131072 / -math.expm1(-131072 / mean) + 0.5)
        assert z["grow"]["peak_bytes"] == 8 * w, (fold, z["grow"])


def test_read_events_gives_the_folded_sums(tmp_path):
    """mlprof.read_events lists the folded allocations apart (alloc_sums):
    with the allocation records they make the report's allocations."""
    out = tmp_path / "run"
    mlprof("run", "-q", "--memory=sampled:16384", "--flush-ms", "20", "-o",
           out, "--", program("alloc_known"), "work", 1, 40, 2)
    [prof] = [p for p in out.iterdir() if p.name.startswith("alloc_known")]
    code = ("import json, sys, mlprof\n"
            "e = mlprof.read_events(sys.argv[1])\n"
            "print(json.dumps([sum(1 for a in e['allocs'] if a[3]),"
            " [list(u[4:7]) for u in e['alloc_sums']]]))")
    env = dict(os.environ, PYTHONPATH=PKG)
    r = subprocess.run([sys.executable, "-c", code, str(prof)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    records, sums = json.loads(r.stdout)
    procs, _ = own(report_json(out))
    assert sums and all(n >= 1 and w >= s for n, s, w in sums)
    assert records + sum(n for n, _, _ in sums) == procs[0]["allocs"]
    assert sum(w for _, _, w in sums) < procs[0]["allocated_bytes"]


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


def test_child_cloned_without_fork_handlers_never_hangs(tmp_path):
    # Raw clone system calls (no fork handlers run) while a thread allocates,
    # sampled so often that the table of sampled addresses is nearly always
    # locked: a child that copied the lock held must not wait for a thread
    # it does not have (nor for the buffer pool's lock). alloc_known gives
    # a child 5 s, then counts it hung (status 6).
    _, r = run(tmp_path, "clone", 200, memory="sampled:4096", check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "done\n"


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


def leak_floor(steps, mean):
    """docs/memory.md: the least steady leak the detector can tell over
    steps step marks, sampled with that mean (0: every allocation)."""
    span, need = steps - 1, MIB
    if not mean:
        return need / span
    points = min(steps, 256)
    k = 4
    while 1.5 * math.sqrt(points) * k / (k + 1) < 3 or k * mean < need:
        k += 1

    def at_least(lam):  # P(Poisson(lam) >= k)
        term, below = math.exp(-lam), 0.0
        for i in range(k):
            below += term
            term *= lam / (i + 1)
        return 1 - below
    lo, hi = 0.0, 10.0 * k + 20
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if at_least(mid) >= 0.95 else (mid, hi)
    return max(need, hi * mean) / span


def test_report_says_the_least_leak_it_can_see(tmp_path):
    for memory, mean in (("sampled", 524288), ("sampled:65536", 65536),
                         ("sampled:4194304", 4194304), ("all", 0)):
        out, _ = run(tmp_path, "leak", 262144, 100, memory=memory,
                     name=memory.replace(":", "_"))
        procs, _ = own(report_json(out))
        p = procs[0]
        assert len(p["step_peak_bytes"]) == 101
        assert p["sampling_mean_bytes"] == mean
        assert p["leak_floor_bytes_per_step"] == pytest.approx(
            leak_floor(101, mean), rel=1e-6), memory
        text = mlprof("report", out).stdout
        flag = "--memory=all" if not mean else f"--memory=sampled:{mean}"
        assert f"a step over 101 steps may go unseen at {flag}" in text
    # A larger mean sees less; more steps see smaller leaks.
    assert leak_floor(101, 4194304) > leak_floor(101, 524288) > \
        leak_floor(101, 65536) > leak_floor(101, 0)
    assert leak_floor(1001, 524288) < leak_floor(101, 524288)
    # Too few steps: said, no figure.
    out, _ = run(tmp_path, "leak", 262144, 5, memory="all", name="short")
    procs, _ = own(report_json(out))
    assert procs[0]["leak_floor_bytes_per_step"] is None
    assert "6 step marks: leaks by site need 8 at least" in \
        mlprof("report", out).stdout


# ---- mlprof diff on memory ----------------------------------------------


def diff_memory(base, new, *args):
    r = mlprof("diff", base, new, "--format", "json", *args, check=False)
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)["memory"]


def test_diff_names_the_site_that_allocates_twice_as_much(tmp_path):
    # 120 steps: about 240 and 480 samples of the site at the default
    # mean, z about 7.8 (40 steps gave about 4.5: named 9 times in 10).
    base, _ = run(tmp_path, "work", 1, 120, name="base")
    new, _ = run(tmp_path, "work", 2, 120, name="new")
    mem = diff_memory(base, new)
    assert mem["regression"] is True
    grew = [i for i in mem["items"] if i["verdict"] == "grew"]
    assert grew and all(i["zone"] == "grow" for i in grew), grew
    step = [i for i in grew if i["kind"] == "site a step"]
    assert len(step) == 1 and step[0]["per_step"] is True
    # 8 and 16 blocks of 128 KiB a step, within the estimates' errors.
    assert step[0]["base_bytes"] == pytest.approx(MIB, abs=4 * step[0]["base_se_bytes"])
    assert step[0]["new_bytes"] == pytest.approx(2 * MIB, abs=4 * step[0]["new_se_bytes"])
    assert 0 < step[0]["base_se_bytes"] < 0.3 * MIB  # sampled: an error
    assert step[0]["p_holm"] <= 0.01
    # No other site or zone grew.
    for i in mem["items"]:
        if i.get("zone") != "grow":
            assert i["verdict"] == "unchanged", i
    text = mlprof("diff", base, new, check=False).stdout
    assert "REGRESSION: 1 memory figure" in text or \
        "memory figures significantly larger" in text
    line = next(l for l in text.splitlines() if l.startswith("  site a step"))
    assert "grew" in line and "grow:" in line
    junit = mlprof("diff", base, new, "--format", "junit", check=False).stdout
    root = ET.fromstring(junit)
    cases = [c for c in root.iter("testcase")
             if c.get("classname") == "mlprof.diff.memory"]
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    assert failed and all("grow" in n for n in failed), failed
    # Every allocation recorded: exact figures, no sampling error.
    base, _ = run(tmp_path, "work", 1, 40, memory="all", name="base_all")
    new, _ = run(tmp_path, "work", 2, 40, memory="all", name="new_all")
    mem = diff_memory(base, new)
    step = [i for i in mem["items"]
            if i["kind"] == "site a step" and i["zone"] == "grow"]
    assert len(step) == 1 and step[0]["verdict"] == "grew"
    assert step[0]["base_se_bytes"] == step[0]["new_se_bytes"] == 0
    assert step[0]["new_bytes"] == 2 * step[0]["base_bytes"]
    # 40 MiB over the run's 41 step marks.
    assert step[0]["base_bytes"] == pytest.approx(40 * MIB / 41)


def test_diff_of_the_same_program_names_no_memory(tmp_path):
    # A/A: sampling differs from run to run, the program does not.
    runs = [run(tmp_path, "work", 1, 120, name=f"aa{i}")[0] for i in range(4)]
    for a, b in zip(runs, runs[1:]):
        mem = diff_memory(a, b)
        assert mem["regression"] is False
        assert mem["summary"]["grew"] == mem["summary"]["shrank"] == 0, \
            [i for i in mem["items"] if i["verdict"] != "unchanged"]
        # Estimates do differ: their errors say by how much they may.
        assert any(i["base_bytes"] != i["new_bytes"] for i in mem["items"])
    a, _ = run(tmp_path, "work", 1, memory="all", name="aa_all0")
    b, _ = run(tmp_path, "work", 1, memory="all", name="aa_all1")
    mem = diff_memory(a, b)
    assert mem["exact"] == [True, True]
    assert mem["summary"]["grew"] == mem["summary"]["shrank"] == 0


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
    # Each site points at the report's own and names it as the report
    # does: the page carries its lines, not the report's sites.
    for s in mine:
        r = rep["memory"]["sites"][s[8]]
        assert (r["zone"], r["at_peak_bytes"], r["allocated_bytes"]) == \
            (mem["zones"][s[1]], s[2], s[3])
        assert (s[9], s[10]) == (r["python"], r["native"])
    assert "sites" not in html_data(page)["report"]["memory"]


def many_sites(tmp_path, n):
    """A Python program allocating 2 kB from each of n distinct lines, every
    allocation recorded: (its JSON report, its page)."""
    script = tmp_path / ("many%d.py" % n)
    script.write_text("kept = []\n" + "kept.append(bytearray(2048))\n" * n +
                      "print('done', len(kept))\n")
    out = tmp_path / ("many%d" % n)
    r = mlprof("run", "-q", "--memory=all", "-o", out, "--",
               sys.executable, script)
    assert r.stdout == "done %d\n" % n, r.stderr
    page = tmp_path / ("many%d.html" % n)
    mlprof("html", out, "-o", page)
    return report_json(out), page


def test_html_stays_bounded_whatever_the_number_of_sites(tmp_path):
    """The page holds at most 2000 sites (MLPROF__HTML_MEM_SITES) with what
    it shows of them, and the report it embeds none: four times the sites
    make the JSON report about four times larger, not the page."""
    small_rep, small = many_sites(tmp_path, 2500)
    big_rep, big = many_sites(tmp_path, 10000)
    for rep, page, n in ((small_rep, small, 2500), (big_rep, big, 10000)):
        _, sites = own(rep)
        assert len(sites) >= n  # mlprof report keeps every site
        data = html_data(page)
        mem = data["memory"]
        assert len(mem["sites"]) == 2000 and mem["other_sites"] >= n - 2000
        assert "sites" not in data["report"]["memory"]
        # The page's sites name their lines as the report does.
        for s in mem["sites"]:
            r = rep["memory"]["sites"][s[8]]
            assert (s[9], s[10]) == (r["python"], r["native"])
        script = str(page.with_suffix(".py")) + ":"
        assert sum(s[9].startswith(script) for s in mem["sites"]) > 1000
    grown = big.stat().st_size - small.stat().st_size
    assert len(json.dumps(big_rep)) > 3 * len(json.dumps(small_rep))
    assert grown < 0.1 * small.stat().st_size, (small.stat().st_size, grown)


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


def test_memory_viz_snapshot_of_a_known_workload(tmp_path):
    """`mlprof memory-snapshot --from PROFILE -o OUT` writes the recorded
    allocations as a snapshot in torch's format (docs/memory.md): alloc and
    free entries with the sizes, zones and native frames alloc_known made,
    which torch's own memory_viz code (torch.cuda._memory_viz, no GPU
    needed) reads."""
    import glob
    import pickle
    import time
    before = time.time_ns() // 1000
    out, _ = run(tmp_path, "zones", memory="all")
    after = time.time_ns() // 1000
    prof, = glob.glob(str(out / "alloc_known-*.mlprof"))
    snap_path = tmp_path / "cpu.pickle"
    env = dict(os.environ, PYTHONPATH=PKG)
    r = subprocess.run([sys.executable, "-m", "mlprof", "memory-snapshot",
                        "--from", prof, "-o", str(snap_path)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with open(snap_path, "rb") as f:
        snap = pickle.load(f)
    assert snap["segments"] == [] and len(snap["device_traces"]) == 1
    assert snap["mlprof_profile"] == os.path.abspath(prof)
    trace = snap["device_traces"][0]
    by_zone = {}
    for e in trace:
        assert set(e) == {"action", "addr", "size", "stream", "time_us",
                          "frames"}, e
        assert before <= e["time_us"] <= after
        zone = e["frames"][-1]["name"] if e["frames"] and \
            e["frames"][-1]["filename"] == "<mlprof zone>" else ""
        by_zone.setdefault((zone, e["action"]), []).append(e)
    times = [e["time_us"] for e in trace]
    assert times == sorted(times)
    for name, (nbytes, count, freed, nfreed) in KNOWN.items():
        allocs = by_zone.get((name, "alloc"), [])
        frees = by_zone.get((name, "free_completed"), [])
        assert (sum(e["size"] for e in allocs), len(allocs)) == \
            (nbytes, count), name
        assert (sum(e["size"] for e in frees), len(frees)) == \
            (freed, nfreed), name
        assert len(by_zone.get((name, "free_requested"), [])) == nfreed
    # The allocating frame: alloc_known's own code, innermost.
    for e in by_zone[("alpha", "alloc")]:
        inner = e["frames"][0]
        assert inner["filename"].endswith("alloc_known"), inner
        assert inner["name"].startswith("zones+0x") and \
            inner["line"] == 0
    # A free carries its allocation's size and frames, at its address.
    alloc_at = {}
    for e in trace:
        if e["action"] == "alloc":
            alloc_at[e["addr"]] = e
        elif e["action"] == "free_completed":
            a = alloc_at.pop(e["addr"])
            assert (e["size"], e["frames"]) == (a["size"], a["frames"])
    # torch's memory_viz reads it: its text trace names every allocation.
    from torch.cuda import _memory_viz
    text = _memory_viz.trace(snap)
    allocs = sum(e["action"] == "alloc" for e in trace)
    assert text.startswith("Device 0 ----------------\n%d entries\n"
                           % len(trace))
    assert text.count(" = MEM[") == allocs
    assert text.count("# free completed for ") == \
        sum(e["action"] == "free_completed" for e in trace)
    assert _memory_viz.segsum(snap).startswith("Summary of segments")
    assert "Active Memory Timeline" in _memory_viz.trace_plot(snap)
    # mlprof's own reader of snapshots takes it too.
    r = subprocess.run([sys.executable, "-m", "mlprof", "memory-snapshot",
                        str(snap_path), "--json"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    d, = json.loads(r.stdout)["devices"]
    assert d["allocated_bytes"] == 0 and d["trace_entries"] == len(trace)
    assert json.loads(r.stdout)["mlprof_profile"] == os.path.abspath(prof)
    # Read as text, it says what it is: a profile's CPU memory.
    r = subprocess.run([sys.executable, "-m", "mlprof", "memory-snapshot",
                        str(snap_path)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    head = r.stdout.splitlines()[:2]
    assert head == [
        "Memory snapshot %s: the CPU allocations recorded in the mlprof "
        "profile %s (mlprof memory-snapshot --from), not CUDA memory"
        % (snap_path, os.path.abspath(prof)),
        "process memory (device 0 of the snapshot; no segments)"], head
    assert "CUDA memory snapshot" not in r.stdout
    # A directory, or a file that is no profile: one line, exit 2.
    for bad in (out, snap_path):
        r = subprocess.run([sys.executable, "-m", "mlprof",
                            "memory-snapshot", "--from", str(bad), "-o",
                            str(tmp_path / "x.pickle")], env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, \
            r.stderr
