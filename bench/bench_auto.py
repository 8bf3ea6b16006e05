"""Cost of PyTorch's steps recorded with no code change (mlprof.auto, what
`mlprof run` loads into Python programs that import torch): a small CNN
trained on CPU from a DataLoader, its steps timed in blocks, each block in a
child forked from one warmed-up process, in turns: without mlprof (the
baseline), then with a session recording and torch instrumented as under
`mlprof run`; then the same for a tiny model, whose step is short enough
for the instrumentation's own cost (a few zones a step) to show above the
noise. Time is the CPU time of the child (all its threads: the
library's writer too), which other jobs on a shared machine disturb less
than wall time. Budget (DESIGN.md): at most 2% of the step.

    make bench-python      or
    PYTHONPATH=build/python python3 bench/bench_auto.py [PAIRS]
"""
import os
import statistics
import struct
import sys
import tempfile
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import mlprof
from mlprof import auto



def setup(tiny):
    """(model, loss, optimizer, loader): the small CNN, or a model so tiny
    that the instrumentation's own cost per step shows above the noise."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if tiny:
        model = nn.Linear(4, 2)
        data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    else:
        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 8 * 8, 10))
        data = TensorDataset(torch.randn(512, 3, 32, 32),
                             torch.randint(0, 10, (512,)))
    return (model, nn.CrossEntropyLoss(),
            torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
            DataLoader(data, batch_size=32 if not tiny else 4))


def train(model, loss_fn, opt, loader, steps):
    n = 0
    while n < steps:
        for x, y in loader:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            n += 1
            if n == steps:
                return


def block(parts, steps, out_dir):
    """CPU ns per step of a block, timed in a forked child; out_dir: None
    for the baseline, else where the child's session writes."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        if out_dir:
            mlprof.Profiler(output=out_dir + "/", sample_interval=0).start()
            auto.install()  # torch is imported: instrumented right away
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


def pairs_of_blocks(tiny, steps, pairs, tmp):
    """Per-step CPU ns of the baseline and instrumented blocks, in turns."""
    parts = setup(tiny)
    train(*parts, 10)
    base, inst = [], []
    for i in range(pairs):
        base.append(block(parts, steps, None))
        inst.append(block(parts, steps, os.path.join(tmp, "%d-%d" % (tiny,
                                                                     i))))
    return base, inst


def main():
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    tmp = tempfile.mkdtemp(prefix="mlprof-bench-auto-")
    base, inst = pairs_of_blocks(False, 30, pairs, tmp)
    tbase, tinst = pairs_of_blocks(True, 1000, pairs, tmp)
    med = statistics.median
    ratio = med(a / b for a, b in zip(inst, base))
    added = med(a - b for a, b in zip(tinst, tbase))
    print("PyTorch steps with no code change (mlprof.auto), CPU, 1 thread; "
          "%d pairs of blocks in turns, medians" % pairs)
    print("  small CNN, batch 32   without mlprof (baseline) %9.1f us CPU "
          "per step, torch instrumented %9.1f us: %+.2f%%"
          % (med(base) / 1e3, med(inst) / 1e3, 100 * (ratio - 1)))
    print("  Linear(4, 2), batch 4 without mlprof (baseline) %9.1f us CPU "
          "per step, torch instrumented %9.1f us: %+.1f us per step"
          % (med(tbase) / 1e3, med(tinst) / 1e3, added / 1e3))
    print("  the instrumentation's cost per step (from the tiny model) is "
          "%.2f%% of the CNN's step (budget 2%%)" % (100 * added / med(base)))


if __name__ == "__main__":
    main()
