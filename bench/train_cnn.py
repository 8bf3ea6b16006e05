"""A small CNN trained on CPU from a DataLoader with SGD: the workload of
bench_auto.py, and a script of its own, importing nothing of mlprof, so that
a whole run of it can be timed as a user runs it: plain, under `mlprof run`,
or with torch.profiler.profile() (default settings) around its training
loop and its table of operators printed at the end, as torch's docs show.

usage: python bench/train_cnn.py STEPS [--torch-profiler]
Prints on its last line `step_cpu_ns N`: the process CPU time per step of
the STEPS steps after 5 of warm-up (all threads: a profiler's count)."""
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

WARM_UP = 5


def setup(tiny=False):
    """(model, loss, optimizer, loader): the small CNN, or a model so tiny
    that a profiler's own cost per step shows above the noise."""
    torch.manual_seed(0)
    torch.set_num_threads(1)  # less noise on a small machine
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


def timed_training(parts, steps):
    """Process CPU ns per step of `steps` steps after the warm-up."""
    train(*parts, WARM_UP)
    t0 = time.process_time_ns()
    train(*parts, steps)
    return (time.process_time_ns() - t0) / steps


def main():
    if len(sys.argv) < 2 or not sys.argv[1].isdigit() or \
            sys.argv[2:] not in ([], ["--torch-profiler"]):
        sys.exit("usage: python train_cnn.py STEPS [--torch-profiler]")
    steps = int(sys.argv[1])
    parts = setup()
    if sys.argv[2:]:
        with torch.profiler.profile() as prof:
            per_step = timed_training(parts, steps)
        print(prof.key_averages().table(sort_by="self_cpu_time_total",
                                        row_limit=10))
    else:
        per_step = timed_training(parts, steps)
    print("step_cpu_ns %d" % per_step)


if __name__ == "__main__":
    main()
