"""Cost of PyTorch's steps recorded with no code change (mlprof.auto, what
`mlprof run` loads into Python programs that import torch) beside
torch.profiler.profile() with its default settings on the same training
steps: a small CNN trained on CPU from a DataLoader (bench/train_cnn.py).

  - Whole runs, what users pay: `python train_cnn.py`, `mlprof run --
    python train_cnn.py` (its summary printed at the end) and the script
    with torch.profiler.profile() around its loop (its table printed at the
    end), in interleaved rounds: the script's CPU time per step, and the
    wall and CPU time of the whole run (every process of it).
  - A profiler's own cost per step, which a few percent of noise on the
    CNN's step would hide: a tiny model's steps timed in blocks, each block
    in a child forked from one warmed-up process, in interleaved rounds:
    without a profiler (the baseline), with a session recording and torch
    instrumented as under `mlprof run`, and under torch.profiler. Time is
    the CPU time of the child (all its threads: the library's writer too),
    which other jobs on a shared machine disturb less than wall time.
    Budget (DESIGN.md): at most 2% of the CNN's step.

    make bench-python      or
    PYTHONPATH=build/python python3 bench/bench_auto.py [ROUNDS]

ROUNDS (default 9) of blocks; a third of them (3 at least) of whole runs.
"""
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import torch

import mlprof
from mlprof import auto
from mlprof.__main__ import find_cli
from side_by_side import interleaved, medians, table
from train_cnn import setup, train

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "train_cnn.py")


def block(parts, steps, mode, out_dir):
    """CPU ns per step of a block, timed in a forked child: mode None (the
    baseline), "mlprof" (a session writing into out_dir, torch instrumented
    as under mlprof run) or "torch" (torch.profiler.profile() with its
    default settings)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        if mode == "mlprof":
            mlprof.Profiler(output=out_dir + "/", sample_interval=0).start()
            auto.install()  # torch is imported: instrumented right away
        elif mode == "torch":
            torch.profiler.profile().start()
        train(*parts, 3)  # warm-up after the fork
        t0 = time.process_time()
        train(*parts, steps)
        os.write(w, struct.pack("d", (time.process_time() - t0) / steps * 1e9))
        os._exit(0)
    os.close(w)
    data = os.read(r, 8)
    os.close(r)
    os.waitpid(pid, 0)
    return struct.unpack("d", data)[0]


def rounds_of_blocks(tiny, steps, rounds, tmp):
    """{mode: median CPU ns per step} of blocks in interleaved rounds."""
    parts = setup(tiny)
    train(*parts, 10)
    n = [0]

    def way(mode):
        def run():
            n[0] += 1
            return block(parts, steps, mode,
                         os.path.join(tmp, "%d-%d" % (tiny, n[0])))
        return run
    return medians(interleaved({m: way(m) for m in (None, "mlprof",
                                                     "torch")}, rounds))


def whole_run(argv):
    """(step CPU ns the script printed, wall s, CPU s of every process) of
    one run of argv."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [x for x in p.stdout.splitlines() if x.startswith("step_cpu_ns")]
    if p.returncode != 0 or not lines:
        sys.exit("bench_auto: %s failed (%d):\n%s" % (" ".join(argv),
                                                      p.returncode,
                                                      p.stderr[-2000:]))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime -
                                                before.ru_stime)
    return float(lines[-1].split()[1]), wall, cpu


def whole_runs(steps, rounds, tmp):
    """{way: (step ns, wall s, CPU s)}: medians of interleaved rounds."""
    script = [sys.executable, SCRIPT, str(steps)]
    n = [0]

    def under_mlprof():
        n[0] += 1
        return whole_run([find_cli(), "run", "-o",
                          os.path.join(tmp, "run-%d" % n[0]), "--"] + script)
    got = interleaved({
        "none": lambda: whole_run(script),
        "mlprof": under_mlprof,
        "torch": lambda: whole_run(script + ["--torch-profiler"]),
    }, rounds)
    return {k: tuple(statistics.median(r[i] for r in v) for i in range(3))
            for k, v in got.items()}


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    tmp = tempfile.mkdtemp(prefix="mlprof-bench-auto-")
    runs, steps = max(3, rounds // 3), 100
    w = whole_runs(steps, runs, tmp)
    rows = [("python train_cnn.py (baseline)", "none", ""),
            ("mlprof run -- python train_cnn.py", "mlprof",
             "summary printed"),
            ("the script in torch.profiler.profile()", "torch",
             "its table printed")]
    table("PyTorch steps with no code change: whole runs of "
          "bench/train_cnn.py %d (small CNN, batch 32, CPU, 1 thread), "
          "median of %d interleaved rounds; the script's CPU time per step"
          % (steps, runs), "ms/step",
          [(label, w[k][0] / 1e6, "budget: +2%" if k == "mlprof" else "")
           for label, k, _ in rows], fmt="%.3f")
    table("  the whole run, wall time", "s",
          [(label, w[k][1], note) for label, k, note in rows], fmt="%.2f")
    table("  the whole run, CPU time of every process", "s",
          [(label, w[k][2], note) for label, k, note in rows], fmt="%.2f")
    tiny = rounds_of_blocks(True, 1000, rounds, tmp)
    table("A profiler's own cost per step, on a step too short to hide it "
          "(Linear(4, 2), batch 4): %d interleaved rounds of blocks of 1000 "
          "steps in forked children, medians, CPU time" % rounds, "us/step", [
              ("no profiler (baseline)", tiny[None] / 1e3, ""),
              ("mlprof: torch instrumented as under mlprof run",
               tiny["mlprof"] / 1e3, ""),
              ("torch.profiler.profile(), default settings",
               tiny["torch"] / 1e3, "records every operator"),
          ])
    for label, k in (("mlprof's", "mlprof"), ("torch.profiler's", "torch")):
        print("  %s cost per step is %.2f%% of the small CNN's step above%s"
              % (label, 100 * (tiny[k] - tiny[None]) / w["none"][0],
                 " (budget 2%)" if k == "mlprof" else ""))


if __name__ == "__main__":
    main()
