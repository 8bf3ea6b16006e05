"""Cost of recording allocations (docs/memory.md) beside memray, on two
workloads run as a user runs them, each a whole process:
  - bench/alloc_heavy.py: allocation-heavy Python (every size from 600
    bytes to 256 KiB, growing lists and dicts, strings, JSON);
  - bench/train_cnn.py: a small CNN's training steps on CPU.
Conditions, in interleaved rounds: untraced (the baseline); `mlprof run
--no-torch --stacks off` (allocations alone) with --memory=off (the rest of mlprof: sessions, the writer),
--memory=sampled (the default: a sample every 512 KiB on average) and
--memory=all (every allocation); `memray run` and `memray run --native`.
The figure is the workload's own process CPU time (all threads) for its
timed part, which the interpreter's start and the profilers' exit work
(memray's or mlprof's summary) do not enter. Budgets (DESIGN.md): sampled
at most 3% over untraced on the allocation-heavy workload, 1% on the CNN;
every allocation at most memray's cost.

    PYTHONPATH=build/python python3 bench/bench_memory.py [ROUNDS]
"""
import os
import subprocess
import sys
import tempfile

from side_by_side import interleaved, medians, table, version

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MLPROF = os.environ.get("MLPROF", os.path.join(ROOT, "build", "mlprof"))
MEMRAY = os.path.join(os.path.dirname(sys.executable), "memray")

WORKLOADS = {k: v for k, v in {
    "allocation-heavy Python (12 rounds)": (
        [os.path.join(HERE, "alloc_heavy.py"), "12"], "cpu_ns", 1e6, "ms"),
    "small CNN training step (40 steps)": (
        [os.path.join(HERE, "train_cnn.py"), "40"], "step_cpu_ns", 1e6,
        "ms/step"),
}.items() if not os.environ.get("ONLY") or os.environ["ONLY"] in k}


def figure(cmd, key, tmp, n=[0]):
    n[0] += 1
    out = os.path.join(tmp, "r%d" % n[0])
    cmd = [c.replace("{out}", out) for c in cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
    if r.returncode != 0:
        sys.exit("%s failed: %s" % (" ".join(cmd), r.stderr[-2000:]))
    for line in reversed(r.stdout.splitlines()):
        if line.startswith(key + " "):
            return int(line.split()[1])
    sys.exit("%s printed no %s" % (" ".join(cmd), key))


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    py = sys.executable
    # Allocations alone: no torch steps, no stack sampler.
    run = [MLPROF, "run", "-q", "--no-torch", "--stacks", "off", "-o",
           "{out}"]
    ways = {
        "untraced": [py],
        "mlprof run --memory=off": run + ["--memory=off", "--", py],
        "mlprof run (sampled, the default)": run + ["--", py],
        "mlprof run --memory=all": run + ["--memory=all", "--", py],
        "memray run %s" % version("memray"): [MEMRAY, "run", "-q", "-o",
                                              "{out}.bin"],
        "memray run --native": [MEMRAY, "run", "-q", "--native", "-o",
                                "{out}.bin"],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for title, (args, key, scale, unit) in WORKLOADS.items():
            got = interleaved(
                {k: (lambda c=c: figure(c + args, key, tmp) / scale)
                 for k, c in ways.items()}, rounds)
            m = medians(got)
            rows = [(k, m[k], "") for k in ways]
            rows[2] = (rows[2][0], rows[2][1],
                       "budget: %s over untraced" %
                       ("3%" if "Python" in title else "1%"))
            table("%s, median of %d rounds" % (title, rounds), unit, rows,
                  ours=2, fmt="%.2f")
            print()
            # Other jobs on a shared machine only ever add time: the best
            # round of each is the steadier figure there.
            table("%s, best of %d rounds" % (title, rounds), unit,
                  [(k, min(got[k]), "") for k in ways], ours=2, fmt="%.2f")
            print()


if __name__ == "__main__":
    main()
