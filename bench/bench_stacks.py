"""Cost of the stack sampler (docs/stacks.md) beside py-spy on the same
workloads, in the same run, in interleaved rounds:

  - a pure-Python workload (recursive calls, loops, a generator) and
  - a small CNN's training steps on CPU (bench/train_cnn.py's model),

each run whole as a user runs it: plain (the baseline), under `mlprof run
--stacks off` and `mlprof run --stacks 100` (the sampler's cost is the
difference of the two), under `mlprof run --stacks 100,native` (native
frames too: a signal and an unwind per sample of a running thread), and
under `py-spy record -r 100`, with --nonblocking, with its default (it
stops the program for each sample) and with --native (native frames; it
stops the program too).
The figures, medians of the rounds, over the workload's own loop, timed
inside the program (start-up and reports at exit excluded): the CPU time
of its main thread (the program's own work: what the sampler slows down),
of its whole process (all its threads: the sampler's own too), and the
loop's wall time (which other jobs on a shared machine move by tens of
percent);
and the CPU time of the whole run, every process of it (py-spy's and
mlprof's own included), from the rusage of children. Budget (DESIGN.md):
the sampler at 100 Hz adds at most 1%.
And the sampler thread's own CPU time over the loop (its
/proc/self/task/TID/schedstat, read by the workload), against the loop's
wall time (share of a core) and the process's CPU time.
Then the bytes one sample takes on disk (the STACKS chunks of the 100 Hz
runs over their samples, definitions included).

Last, the sampler's cost while it runs, finely: one process alternates
sessions with --stacks 100 and with none over the same unit of work,
MLPROF_BENCH_PAIRS (150) times, beside none against none (the machine's
own spread between equal settings).

    make bench-python      or
    PYTHONPATH=build/python python3 bench/bench_stacks.py [ROUNDS [pure|torch]]
"""
import json
import os
import resource
import shutil
import statistics
import string
import struct
import subprocess
import sys
import tempfile

from mlprof.__main__ import find_cli
from side_by_side import version

HERE = os.path.dirname(os.path.abspath(__file__))

SAMPLER = r"""
def main_thread():
    # The main thread's involuntary context switches and page faults: how
    # often something took its CPU or stopped it.
    import resource
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_nivcsw, r.ru_minflt
def sampler_ns():
    import os
    for t in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/" + t + "/comm") as f:
                if f.read().strip() != "mlprof-stacks":
                    continue
            with open("/proc/self/task/" + t + "/schedstat") as f:
                return int(f.read().split()[0])
        except OSError:
            pass
    return 0
"""

PURE = SAMPLER + r"""
import time
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
def squares(n):
    for i in range(n):
        yield i * i
def work():
    total = 0
    for _ in range(%d):
        total += fib(18) + sum(squares(2000))
        total += sum(len(str(i)) for i in range(500))
    return total
work()  # warm-up
t0, c0, m0, s0, i0 = (time.perf_counter(), time.process_time(),
                      time.thread_time(), sampler_ns(), main_thread())
work()
print("work_ns", int((time.perf_counter() - t0) * 1e9),
      int((time.process_time() - c0) * 1e9),
      int((time.thread_time() - m0) * 1e9), sampler_ns() - s0,
      *[b - a for a, b in zip(i0, main_thread())])
"""

TORCH = SAMPLER + r"""
import sys, time
sys.path.insert(0, %r)
from train_cnn import setup, train
parts = setup()
train(*parts, 5)
t0, c0, m0, s0, i0 = (time.perf_counter(), time.process_time(),
                      time.thread_time(), sampler_ns(), main_thread())
train(*parts, %d)
print("work_ns", int((time.perf_counter() - t0) * 1e9),
      int((time.process_time() - c0) * 1e9),
      int((time.thread_time() - m0) * 1e9), sampler_ns() - s0,
      *[b - a for a, b in zip(i0, main_thread())])
"""


# The sampler's cost while it runs, measured finely: one process times the
# same unit of work under sessions with --stacks 100 and with none, in
# alternation (a third session, none again, gives this machine's own spread
# between two equal settings). A whole run's rounds move by several percent
# on a shared VM; hundreds of short phases of one process tell 1% apart.
ALTERNATE = string.Template(r"""
import os, sys, time
sys.path.insert(0, $here)
import mlprof
$setup
out, pairs = $out, $pairs
for i in range(pairs):
    ways = [100, 0, -1]
    ways = ways[i % 3:] + ways[:i % 3]
    for hz in ways:
        path = os.path.join(out, "p%d_%d.mlprof" % (i, hz))
        with mlprof.Profiler(output=path, stacks=max(hz, 0), sample_interval=0.1):
            unit()  # the session's threads are up
            t = time.thread_time_ns()
            unit()
            print("phase", hz, time.thread_time_ns() - t)
        os.unlink(path)
""")

UNITS = {
    "pure Python": """
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
def unit():
    for _ in range(400):
        fib(18)
""",
    "torch CNN steps": """
from train_cnn import setup, train
parts = setup()
train(*parts, 5)
def unit():
    train(*parts, 8)
""",
}


def alternate(label, pairs, tmp):
    """Per pair, --stacks 100's main-thread CPU time over none's, and none
    again over none: their medians and quartiles, in %."""
    body = ALTERNATE.substitute(here=repr(HERE), setup=UNITS[label],
                                out=repr(tmp), pairs=pairs)
    script = os.path.join(tmp, "alternate.py")
    with open(script, "w") as f:
        f.write(body)
    p = subprocess.run([sys.executable, script], capture_output=True,
                       text=True, timeout=3600)
    if p.returncode != 0:
        raise SystemExit("alternation failed: " + p.stderr[-500:])
    got = {100: [], 0: [], -1: []}
    for line in p.stdout.splitlines():
        if line.startswith("phase "):
            _, hz, ns = line.split()
            got[int(hz)].append(int(ns))
    return ([paired(got[a], got[b]) for a, b in ((100, 0), (-1, 0))],
            statistics.median(got[0]) / 1e6)


def paired(xs, ys):
    """The median of x / y - 1 over the pairs, and its quartiles, in %."""
    r = sorted(100 * (x / y - 1) for x, y in zip(xs, ys))
    q = len(r) // 4
    return statistics.median(r), r[q], r[-1 - q]


def tlb_shootdowns():
    """TLB shootdowns so far, all CPUs (/proc/interrupts; the machine's,
    so other jobs' count too): each one an interrupt of a running thread
    of the process that unmapped or changed a page."""
    try:
        with open("/proc/interrupts") as f:
            for line in f:
                if line.split(":")[0].strip() == "TLB":
                    return sum(int(x) for x in line.split()[1:]
                               if x.isdigit())
    except OSError:
        pass
    return 0


def py_spy():
    """py-spy next to this Python (the venv's, from PyPI), or on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.path.exists(here) else shutil.which("py-spy")


def stacks_bytes(run_dir):
    """Bytes of the STACKS chunks (headers included) of run_dir's
    profiles."""
    total = 0
    for name in os.listdir(run_dir):
        with open(os.path.join(run_dir, name), "rb") as f:
            data = f.read()
        p = 16
        while p + 16 <= len(data):
            kind, = struct.unpack_from("<H", data, p + 4)
            n, = struct.unpack_from("<I", data, p + 8)
            if kind == 10:
                total += 16 + n
            p += 16 + n
    return total


def count_samples(cli, run_dir):
    r = subprocess.run([cli, "report", "-f", "json", run_dir],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout).get("hot", {}).get("samples", 0)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    only = sys.argv[2] if len(sys.argv) > 2 else None
    cli = find_cli()
    spy = py_spy()
    tmp = tempfile.mkdtemp(prefix="mlprof-bench-stacks-")
    n = [0]

    def out_dir():
        n[0] += 1
        return os.path.join(tmp, "run%d" % n[0])

    scripts = {"pure Python": PURE % 1000, "torch CNN steps": TORCH % (HERE, 60)}
    if only:
        scripts = {k: v for k, v in scripts.items() if k.startswith(only)}
    stacks_disk = []
    try:
        for label, body in scripts.items():
            script = os.path.join(tmp, "w.py")
            with open(script, "w") as f:
                f.write(body)
            py = [sys.executable, script]

            ways = {
                "no profiler": lambda: py,
                "mlprof run --stacks off": lambda: [
                    cli, "run", "-q", "-o", out_dir(), "--stacks", "off",
                    "--"] + py,
                "mlprof run --stacks 100": lambda: [
                    cli, "run", "-q", "-o", out_dir(), "--stacks", "100",
                    "--"] + py,
                "mlprof run --stacks 100,native": lambda: [
                    cli, "run", "-q", "-o", out_dir(), "--stacks",
                    "100,native", "--"] + py,
            }
            if spy:
                ways["py-spy record -r 100 --nonblocking"] = lambda: [
                    spy, "record", "-r", "100", "--nonblocking", "-f", "raw",
                    "-o", os.path.join(tmp, "spy.txt"), "--"] + py
                ways["py-spy record -r 100 (pauses)"] = lambda: [
                    spy, "record", "-r", "100", "-f", "raw", "-o",
                    os.path.join(tmp, "spy.txt"), "--"] + py
                ways["py-spy record -r 100 --native"] = lambda: [
                    spy, "record", "-r", "100", "--native", "-f", "raw",
                    "-o", os.path.join(tmp, "spy.txt"), "--"] + py
            got = {k: [] for k in ways}
            names = list(ways)
            for r in range(rounds):
                i = r % len(names)
                for k in names[i:] + names[:i]:
                    if k not in names:
                        continue
                    cmd = ways[k]()
                    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    tlb0 = tlb_shootdowns()
                    p = subprocess.run(cmd, capture_output=True, text=True,
                                       timeout=600)
                    tlb = tlb_shootdowns() - tlb0
                    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    run_cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime -
                               r0.ru_stime) * 1e9
                    if p.returncode != 0 and k.startswith("py-spy"):
                        # py-spy --native needs ptrace rights, which a
                        # container may refuse: left out, said so.
                        print("  (%s failed here: %s)" % (
                            k, (p.stderr.strip().splitlines() or [""])[0][:200]))
                        names.remove(k)
                        del got[k]
                        continue
                    if p.returncode != 0:
                        raise SystemExit("%s failed: %s" % (k, p.stderr[-500:]))
                    line = [ln for ln in p.stdout.splitlines()
                            if ln.startswith("work_ns ")][-1]
                    _, wall, cpu, main, smp, nivcsw, minflt = line.split()
                    got[k].append((int(main), int(cpu), int(wall), run_cpu,
                                   int(smp), int(nivcsw), int(minflt), tlb))
                    if k == "mlprof run --stacks 100":
                        d = cmd[cmd.index("-o") + 1]
                        stacks_disk.append((stacks_bytes(d),
                                            count_samples(cli, d)))
            med = {k: [statistics.median(x[i] for x in v) for i in range(8)]
                   for k, v in got.items()}
            off = med["mlprof run --stacks off"]
            print("%s: medians of %d interleaved rounds, ms; in [], vs "
                  "--stacks off" % (label, rounds))
            print("  %-38s %17s %17s %17s %9s" % (
                "", "loop, main thread", "loop, process", "loop wall",
                "run CPU"))
            for k in names:
                cells = []
                for i in range(3):
                    vs = " [%+.1f%%]" % (100 * (med[k][i] / off[i] - 1)) \
                        if k.startswith("mlprof run --stacks 100") else ""
                    cells.append("%.1f%s" % (med[k][i] / 1e6, vs))
                print("  %-38s %17s %17s %17s %9.1f" % (
                    k, cells[0], cells[1], cells[2], med[k][3] / 1e6))
            # Each round's own ratio to --stacks off in that round: a
            # machine whose speed drifts between rounds moves both alike.
            for k in ("mlprof run --stacks 100",
                      "mlprof run --stacks 100,native"):
                cells = []
                for i, what in ((0, "main thread"), (1, "process")):
                    off = got["mlprof run --stacks off"]
                    cells.append("%s %+.1f%% (quartiles %+.1f%% .. %+.1f%%)"
                                 % ((what,) + paired(
                                     [x[i] for x in got[k]],
                                     [x[i] for x in off])))
                print("  %s, paired by round against --stacks off: %s" % (
                    k, ", ".join(cells)))
            print("  what interrupted the program, medians: the main thread's "
                  "involuntary context switches and page faults over the "
                  "loop, the machine's TLB shootdowns over the whole run")
            for k in names:
                print("  %-38s %6d switches %8d faults %8d shootdowns" % (
                    k, med[k][5], med[k][6], med[k][7]))
            for k in ("mlprof run --stacks 100",
                      "mlprof run --stacks 100,native"):
                s = med[k]
                print("  %s: the sampler thread's own CPU time (its "
                      "schedstat) over the loop: %.1f ms, %.2f%% of a core, "
                      "%.2f%% of the process's" % (
                          k, s[4] / 1e6, 100 * s[4] / s[2],
                          100 * s[4] / s[1]))
            print()
        pairs = int(os.environ.get("MLPROF_BENCH_PAIRS", "150"))
        for label in scripts:
            (on, aa), unit_ms = alternate(label, pairs, tmp)
            print("%s, one process, %d alternated phases each of %.1f ms "
                  "(main thread's CPU): --stacks 100 against none %+.2f%% "
                  "(quartiles %+.1f%% .. %+.1f%%); none against none, this "
                  "machine's spread, %+.2f%% (quartiles %+.1f%% .. %+.1f%%)"
                  % ((label, pairs, unit_ms) + on + aa))
        print()
        b = sum(x for x, _ in stacks_disk)
        s = sum(y for _, y in stacks_disk)
        if s:
            print("bytes per sample on disk (STACKS chunks of the 100 Hz runs, "
                  "definitions included): %.1f (%d samples)" % (b / s, s))
        if spy:
            print("py-spy %s" % version("py-spy"))
        print("budget: mlprof run --stacks 100 at most 1% over --stacks off")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
