"""Cost of Profiler(backend="calls") and of line timings, every figure beside
a baseline measured in the same run:

  - added ns per Python call, against plain Python and against cProfile's
    added cost on the same code (budget: <= 0.6x cProfile's), on a
    recursive fib and on a flat loop of calls to a small function;
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


def under_cprofile(fn, arg):
    p = cProfile.Profile()
    p.enable()
    try:
        return best(fn, arg)
    finally:
        p.disable()


def under_mlprof(fn, arg, out, **kw):
    with mlprof.Profiler(output=out, sample_interval=0, memory_cap=1 << 30,
                         **kw):
        return best(fn, arg)


def bench_calls(name, fn, arg, calls):
    d = tempfile.mkdtemp(prefix="mlprof-bench-calls-")
    plain = best(fn, arg)
    cprof = under_cprofile(fn, arg)
    out = os.path.join(d, "c.mlprof")
    ml = under_mlprof(fn, arg, out, backend="calls")
    empty = os.path.join(d, "e.mlprof")
    under_mlprof(lambda _: None, None, empty, backend="calls")
    size = os.path.getsize(out) - os.path.getsize(empty)
    added_c = (cprof - plain) / calls
    added_m = (ml - plain) / calls
    print("%-22s plain %6.1f ns/call  cProfile +%6.1f  mlprof calls +%6.1f "
          "ns/call  ratio %.2fx cProfile's (budget <= 0.60)  %.1f bytes/call"
          % (name, plain / calls, added_c, added_m, added_m / added_c,
             size / (calls * REPEAT)))


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
