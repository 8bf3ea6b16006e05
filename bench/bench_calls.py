"""Cost of Profiler(backend="calls") and of line timings beside the peers a
user would try instead, every way of running interleaved in rounds on the
same workload in the same process, medians of process CPU time beside the
baseline (no profiler) of the same run:

  - added ns per Python call on a recursive fib and on a flat loop of calls
    to a small function: mlprof's call tracer (budget: <= 0.6x cProfile's
    added cost), its profile-function path (on Python 3.9-3.11
    builtins=True: neither fib nor the loop calls a builtin, so only the
    mechanism differs; on 3.12+ with sys.monitoring's PROFILER_ID held by
    another tool, as cProfile holds it) and its hook alone (include
    matching nothing: every call seen, none recorded),
    beside cProfile, VizTracer, yappi and pyinstrument (a sampler);
  - bytes per traced call in mlprof's profile file;
  - line timings, mlprof's ways of choosing a function beside
    line_profiler's (its decorator; kernprof -l): the cost on the chosen
    function, and on the rest of the program while a function is chosen
    (budget: the rest within 5% of untraced).

usage: python3 bench/bench_calls.py [--quick]
Needs the package importable (make bench-python installs it) and the peers
(tests/requirements.txt)."""
import cProfile
import os
import statistics
import sys
import tempfile

import yappi
from line_profiler import LineProfiler
from pyinstrument import Profiler as PyinstrumentProfiler
from viztracer import VizTracer

import mlprof
from mlprof import _mlprof
from side_by_side import cpu_ns, interleaved, medians, table, version

QUICK = "--quick" in sys.argv
FIB = 20 if QUICK else 23
FLAT = 100_000 if QUICK else 200_000
ROUNDS = 3 if QUICK else 9
BEST_OF = 1 if QUICK else 3  # runs in a round, the least taken
# Python 3.12+: the tracer is a sys.monitoring tool (so is cProfile).
MONITORING = sys.version_info >= (3, 12)
mon = getattr(sys, "monitoring", None)
HOW = "process CPU time, median of %d interleaved rounds (least of %d " \
    "runs each)" % (ROUNDS, BEST_OF)


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def fib_calls(n):
    a, b = 1, 1  # calls of fib(0), fib(1)
    for _ in range(n - 1):
        a, b = b, a + b + 1
    return b


def leaf(i):
    return i


def flat(n):
    for i in range(n):
        leaf(i)


def chosen(n):
    t = 0
    for i in range(n):
        t += i
    return t


def bench_calls(name, fn, arg, calls):
    """Each way of running fn once per round, the rounds interleaved (a
    loaded machine slows them alike): HOW, per call."""
    d = tempfile.mkdtemp(prefix="mlprof-bench-calls-")
    cprofile = cProfile.Profile()
    # Each peer as its documentation starts it in a program: VizTracer with
    # its default buffer (1 M entries), yappi on the wall clock (mlprof's
    # and the others' clock), pyinstrument at its default 1 ms interval.
    viz = VizTracer(verbose=0, register_global=False)
    yappi.set_clock_type("wall")
    r = [0]

    def mlprof_run(key, held=False, **calls_options):
        r[0] += 1
        out = os.path.join(d, "%s%d.mlprof" % (key, r[0]))
        if held:
            mon.use_tool_id(mon.PROFILER_ID, "bench")
        try:
            with mlprof.Profiler(output=out, sample_interval=0,
                                 memory_cap=1 << 30, backend="calls",
                                 calls_options=calls_options):
                return cpu_ns(fn, arg, BEST_OF)
        finally:
            if held:
                mon.free_tool_id(mon.PROFILER_ID)

    def around(start, stop):
        def run():
            start()
            try:
                return cpu_ns(fn, arg, BEST_OF)
            finally:
                stop()
        return run

    def viz_stop():
        viz.stop()
        viz.clear()

    def yappi_stop():
        yappi.stop()
        yappi.clear_stats()

    pyinst = []

    def pyinst_start():
        pyinst[:] = [PyinstrumentProfiler(interval=0.001)]
        pyinst[0].start()

    ways = {
        "plain": lambda: cpu_ns(fn, arg, BEST_OF),
        "mlprof": lambda: mlprof_run("c"),
        "profile_fn": (lambda: mlprof_run("p", held=True)) if MONITORING
        else lambda: mlprof_run("p", builtins=True),
        "alone": lambda: mlprof_run("n", include=["no.such.module"]),
        "cprofile": around(cprofile.enable, cprofile.disable),
        "viztracer": around(viz.start, viz_stop),
        "yappi": around(lambda: yappi.start(builtins=False), yappi_stop),
        "pyinstrument": around(pyinst_start, lambda: pyinst[0].stop()),
    }
    t = medians(interleaved(ways, ROUNDS))
    with mlprof.Profiler(output=os.path.join(d, "mech.mlprof"),
                         sample_interval=0, backend="calls") as p:
        pass
    mechanism = p.summary()["calls"]["mechanism"]
    empty = os.path.join(d, "e.mlprof")
    with mlprof.Profiler(output=empty, sample_interval=0, backend="calls"):
        pass
    size = os.path.getsize(os.path.join(d, "c1.mlprof")) - \
        os.path.getsize(empty)
    ns = {k: v / calls for k, v in t.items()}
    budget = "budget: added <= 0.60x cProfile's (here %.2fx)" % (
        (ns["mlprof"] - ns["plain"]) / (ns["cprofile"] - ns["plain"]))
    table("%s, %d calls: %s" % (name, calls, HOW), "ns/call", [
              ("no profiler (baseline)", ns["plain"], ""),
              ("mlprof Profiler(backend='calls') (%s)" % mechanism,
               ns["mlprof"], budget),
              ("  its profile function path (%s)" % (
                  "PROFILER_ID held" if MONITORING else "builtins=True"),
               ns["profile_fn"], ""),
              ("  its hook alone (include matching nothing)", ns["alone"],
               ""),
              ("cProfile", ns["cprofile"], ""),
              ("VizTracer %s" % version("viztracer"), ns["viztracer"],
               "buffer only, save() not timed"),
              ("yappi %s (wall clock)" % version("yappi"), ns["yappi"], ""),
              ("pyinstrument %s (a sampler, 1 ms)" % version("pyinstrument"),
               ns["pyinstrument"], "not a tracer: sees no single call"),
          ])
    print("  mlprof's profile: %.1f bytes per call" % (size / calls / BEST_OF))


def chosen_name(n):
    t = 0
    for i in range(n):
        t += i
    return t


def chosen_deco(n):
    t = 0
    for i in range(n):
        t += i
    return t


def chosen_lp(n):
    t = 0
    for i in range(n):
        t += i
    return t


def chosen_kernprof(n):
    t = 0
    for i in range(n):
        t += i
    return t


def chosen_gen(n):
    yield n


def bench_lines():
    """Each way of choosing a function, mlprof's and line_profiler's: the
    chosen function's loop per line and the rest of the program (fib, not
    chosen) against both untraced, interleaved rounds, medians."""
    n = FLAT
    d = tempfile.mkdtemp(prefix="mlprof-bench-lines-")
    mlprof.lines("%s:chosen_name" % __name__)
    deco = mlprof.lines(chosen_deco)
    # line_profiler as its docs show: the decorator of a LineProfiler
    # (tracing on during the chosen function's calls only), and as
    # `kernprof -l script.py` runs a script: the decorator, and tracing on
    # for the whole script (LineProfiler.runctx).
    lp = LineProfiler()
    lp_chosen = lp(chosen_lp)
    kp = LineProfiler()
    kp_chosen = kp(chosen_kernprof)
    r = [0]

    def both(fn):
        """ns of fn(n) (None: not run) and of fib(FIB)."""
        return (cpu_ns(fn, n, BEST_OF) if fn else None,
                cpu_ns(fib, FIB, BEST_OF))

    def under_mlprof(fn, **kw):
        def run():
            r[0] += 1
            with mlprof.Profiler(output=os.path.join(d, "%d.mlprof" % r[0]),
                                 sample_interval=0, **kw):
                return both(fn)
        return run

    def under_kernprof():
        kp.enable_by_count()
        try:
            return both(kp_chosen)
        finally:
            kp.disable_by_count()

    ways = {
        "plain": lambda: both(chosen),
        "lines": under_mlprof(chosen, lines=[chosen]),
        "name": under_mlprof(chosen_name),
        "deco": under_mlprof(deco),
        "gen": under_mlprof(None, lines=[chosen_gen]),
        "lp": lambda: both(lp_chosen),
        "kernprof": under_kernprof,
    }
    got = interleaved(ways, ROUNDS)
    med = statistics.median
    chosen_ns = {k: med(c for c, _ in v) / n for k, v in got.items()
                 if k != "gen"}
    rest_ms = {k: med(rest for _, rest in v) / 1e6 for k, v in got.items()}
    labels = [
        ("plain", "no profiler (baseline)", ""),
        ("lines", "mlprof Profiler(lines=[fn])", ""),
        ("name", "mlprof.lines('module:function')", ""),
        ("deco", "@mlprof.lines", ""),
        ("gen", "mlprof, a generator function chosen", "trace function on "
         "every thread"),
        ("lp", "line_profiler %s: @LineProfiler()" % version("line_profiler"),
         "tracing on in its calls"),
        ("kernprof", "line_profiler: kernprof -l script.py",
         "tracing on for the whole script"),
    ]
    table("Line timings, the chosen function (a %d-iteration loop): %s"
          % (n, HOW),
          "ns/line", [(label, chosen_ns[k], note) for k, label, note
                      in labels if k in chosen_ns])
    table("Line timings, the rest of the program (fib(%d), not chosen), "
          "same rounds" % FIB, "ms", [
              (label, rest_ms[k], note or ("budget: x none <= 1.05" if k in (
                  "lines", "name", "deco") else ""))
              for k, label, note in labels], ours=None, fmt="%.2f")


def main():
    print("mlprof %s, Python %s" % (mlprof.version(), sys.version.split()[0]))
    bench_calls("fib(%d)" % FIB, fib, FIB, fib_calls(FIB))
    bench_calls("flat loop", flat, FLAT, FLAT + 1)
    bench_lines()
    _mlprof.lines_clear()


if __name__ == "__main__":
    main()
