"""Cost of Profiler(backend="calls") and of line timings, every figure beside
a baseline measured in the same run:

  - added ns per Python call, against plain Python and against cProfile's
    added cost on the same code (budget: <= 0.6x cProfile's), on a
    recursive fib and on a flat loop of calls to a small function; beside
    it, the profile-function path (builtins=True: neither fib nor the loop
    calls a builtin, so only the mechanism differs) and the mechanism alone
    (include matching nothing: every call seen, none recorded);
  - bytes per traced call in the profile file;
  - line timings: the cost on the chosen function, and on the rest of the
    program while a chosen function exists (budget: rest within 5% of
    untraced).

usage: python3 bench/bench_calls.py [--quick]
Needs the package importable (make bench-python installs it)."""
import cProfile
import os
import sys
import tempfile
import time

import mlprof
from mlprof import _mlprof

QUICK = "--quick" in sys.argv
FIB = 20 if QUICK else 23
FLAT = 100_000 if QUICK else 500_000
REPEAT = 3 if QUICK else 7


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


def best(fn, arg):
    b = float("inf")
    for _ in range(REPEAT):
        t0 = time.perf_counter_ns()
        fn(arg)
        b = min(b, time.perf_counter_ns() - t0)
    return b


def timed(fn, arg):
    t0 = time.perf_counter_ns()
    fn(arg)
    return time.perf_counter_ns() - t0


def bench_calls(name, fn, arg, calls):
    """Each way of running fn once per round, the rounds interleaved (a
    loaded machine slows them alike); the best round of each."""
    d = tempfile.mkdtemp(prefix="mlprof-bench-calls-")
    cprofile = cProfile.Profile()

    def mlprof_run(key, r, **calls_options):
        out = os.path.join(d, "%s%d.mlprof" % (key, r))
        with mlprof.Profiler(output=out, sample_interval=0,
                             memory_cap=1 << 30, backend="calls",
                             calls_options=calls_options):
            return timed(fn, arg)

    def cprofile_run(r):
        cprofile.enable()
        try:
            return timed(fn, arg)
        finally:
            cprofile.disable()

    ways = {
        "plain": lambda r: timed(fn, arg),
        "cprofile": cprofile_run,
        "mlprof": lambda r: mlprof_run("c", r),
        "profile_fn": lambda r: mlprof_run("p", r, builtins=True),
        "alone": lambda r: mlprof_run("n", r, include=["no.such.module"]),
    }
    t = {k: float("inf") for k in ways}
    for r in range(REPEAT):
        for k, way in ways.items():
            t[k] = min(t[k], way(r))
    with mlprof.Profiler(output=os.path.join(d, "mech.mlprof"),
                         sample_interval=0, backend="calls") as p:
        pass
    mechanism = p.summary()["calls"]["mechanism"]
    empty = os.path.join(d, "e.mlprof")
    with mlprof.Profiler(output=empty, sample_interval=0, backend="calls"):
        pass
    size = os.path.getsize(os.path.join(d, "c0.mlprof")) - \
        os.path.getsize(empty)
    added = {k: (t[k] - t["plain"]) / calls for k in t}
    print("%-22s plain %5.1f ns/call  cProfile +%5.1f  mlprof calls (%s) "
          "+%5.1f ns/call = %.2fx cProfile's (budget <= 0.60)  %.1f "
          "bytes/call\n%22s [mechanism alone +%5.1f; profile function path "
          "+%5.1f = %.2fx]"
          % (name, t["plain"] / calls, added["cprofile"], mechanism,
             added["mlprof"], added["mlprof"] / added["cprofile"],
             size / calls, "", added["alone"], added["profile_fn"],
             added["profile_fn"] / added["cprofile"]))


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


def chosen_gen(n):
    yield n


def bench_lines():
    """Each way of choosing a function: its loop's cost per line and fib's
    (not chosen) against both untraced, in the same run."""
    n = FLAT
    plain_chosen = best(chosen, n)
    plain_rest = best(fib, FIB)
    d = tempfile.mkdtemp(prefix="mlprof-bench-lines-")
    rows = []

    def measure(label, fn, **kw):
        with mlprof.Profiler(output=os.path.join(d, "%d.mlprof" % len(rows)),
                             sample_interval=0, **kw):
            rows.append((label, best(fn, n) if fn else None, best(fib, FIB)))

    measure("Profiler(lines=[fn])", chosen, lines=[chosen])
    mlprof.lines("%s:chosen_name" % __name__)
    measure("mlprof.lines('module:function')", chosen_name)
    measure("@mlprof.lines", mlprof.lines(chosen_deco))
    measure("a generator function (trace function on every thread)", None,
            lines=[chosen_gen])
    plain_rest = min(plain_rest, best(fib, FIB))  # before and after: noise
    print("lines: untraced, the chosen loop %.1f ns per line, the rest of the "
          "program (fib(%d), not chosen) %.2f ms"
          % (plain_chosen / n, FIB, plain_rest / 1e6))
    for label, chosen_ns, rest_ns in rows:
        print("lines, %s: %srest %.2f ms (%+.1f%%, budget <= +5%%)"
              % (label, "chosen %.1f ns per line (x%.1f); "
                 % (chosen_ns / n, chosen_ns / plain_chosen)
                 if chosen_ns else "", rest_ns / 1e6,
                 100.0 * (rest_ns - plain_rest) / plain_rest))


def main():
    print("mlprof %s, Python %s, best of %d" % (mlprof.version(),
                                                sys.version.split()[0], REPEAT))
    bench_calls("fib(%d)" % FIB, fib, FIB, fib_calls(FIB))
    bench_calls("flat loop %d calls" % FLAT, flat, FLAT, FLAT + 1)
    bench_lines()
    _mlprof.lines_clear()


if __name__ == "__main__":
    main()
