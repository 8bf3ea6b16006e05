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

With `growth` first, the size of the profile instead (docs/memory.md, "File
growth"): each workload run at two lengths (the second twice the first)
under `mlprof run --no-torch --stacks off`, sampled at the default mean,
with the sampled allocations freed within a flush folded into per-site sums
(the default) and written one by one (MLPROF_MEMORY_FOLD=0), interleaved in
the same run. It prints the ALLOCS chunks' bytes (the allocation records)
and the whole profile's, per second of the workload's CPU time or per step,
and what the longer run added over the shorter: folded, that grows with the
sites and the blocks that outlive a flush, not with the allocations.

    PYTHONPATH=build/python python3 bench/bench_memory.py growth [ROUNDS]
"""
import os
import statistics
import struct
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


ALLOCS = 11  # chunk type (docs/format.md)


def profile_bytes(out):
    """(ALLOCS chunks' bytes, whole file's) of the workload's profile in run
    directory out: the largest file there (the other is mlprof run's)."""
    paths = [os.path.join(out, f) for f in os.listdir(out)
             if f.endswith(".mlprof")]
    path = max(paths, key=os.path.getsize)
    data = open(path, "rb").read()
    at, allocs = 16, 0  # file header, then chunks of a 16-byte header
    while at + 16 <= len(data):
        kind, n = struct.unpack_from("<H2xI", data, at + 4)
        if kind == ALLOCS:
            allocs += 16 + n
        at += 16 + n
    return allocs, len(data)


def growth(rounds):
    py = sys.executable
    run = [MLPROF, "run", "-q", "--no-torch", "--stacks", "off", "-o"]
    ways = {"one record a sample (MLPROF_MEMORY_FOLD=0)": "0",
            "folded (the default)": "1"}
    work = {  # title: (command at length n, its two lengths, figure, unit)
        "allocation-heavy Python": (
            lambda n: [os.path.join(HERE, "alloc_heavy.py"), str(n)],
            (20, 40), "cpu_ns", "s"),
        "small CNN training steps": (
            lambda n: [os.path.join(HERE, "train_cnn.py"), str(n)],
            (100, 200), "step_cpu_ns", "step"),
    }
    with tempfile.TemporaryDirectory() as tmp:
        n = [0]

        def one(way, args, key):
            n[0] += 1
            out = os.path.join(tmp, "g%d" % n[0])
            env = dict(os.environ, MLPROF_MEMORY_FOLD=ways[way])
            r = subprocess.run(run + [out, "--", py] + args, env=env,
                               capture_output=True, text=True, cwd=tmp)
            if r.returncode != 0:
                sys.exit("%s failed: %s" % (args, r.stderr[-2000:]))
            fig = [int(line.split()[1]) for line in r.stdout.splitlines()
                   if line.startswith(key + " ")][-1]
            allocs, whole = profile_bytes(out)
            subprocess.run(["rm", "-rf", out])
            return allocs, whole, fig

        for title, (cmd, lengths, key, unit) in work.items():
            got = interleaved(
                {(w, k): (lambda w=w, k=k: one(w, cmd(k), key))
                 for w in ways for k in lengths}, rounds)
            med = {c: [statistics.median(r[i] for r in v) for i in range(3)]
                   for c, v in got.items()}
            short, long_ = lengths
            print("%s: %d and %d %s, median of %d rounds (ALLOCS: the "
                  "allocation records; file: the whole profile)"
                  % (title, short, long_, "rounds" if unit == "s" else
                     "steps", rounds))
            print("  %-44s %12s %12s %14s %14s" % (
                "", "ALLOCS B", "file B", "ALLOCS B/" + unit,
                "added by x2"))
            for w in ways:
                for k in lengths:
                    a, f, fig = med[(w, k)]
                    # cpu_ns: the rounds' CPU time; step_cpu_ns: per step.
                    per = a / (fig / 1e9) if unit == "s" else a / k
                    print("  %-44s %12d %12d %14.0f %14s" % (
                        "%s, %d" % (w, k), a, f, per,
                        "%+d" % (a - med[(w, short)][0]) if k == long_
                        else ""))
            d = {w: med[(w, long_)][0] - med[(w, short)][0] for w in ways}
            one_by_one, folded = d[list(ways)[0]], d[list(ways)[1]]
            print("  doubling the run added %d ALLOCS bytes folded, %d one "
                  "by one (x%.3f)\n" % (folded, one_by_one,
                                         folded / max(one_by_one, 1)))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "growth":
        growth(int(sys.argv[2]) if len(sys.argv) > 2 else 3)
    else:
        main()
