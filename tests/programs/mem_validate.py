"""A training loop whose validation keeps each output with its autograd
graph (issue #23): validate() leaks what its forward keeps alive, about
2 MiB a step (input 0.5 MiB, hidden activation 1 MiB, output 0.5 MiB),
while every other allocation is transient. With "clean" it keeps only the
output's mean as a float: no leak. The batches come from a DataLoader with
2 worker processes; a cache filled in the first 5 steps, the imports and
the warm-up must not be taken for a leak.
    mem_validate.py [leak|clean] [STEPS]"""
import sys

import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
history = []
cache = {}


def validate(x, keep):
    out = model(x)
    if keep:
        history.append(out)  # the leak: the output and its graph
    else:
        history.append(float(out.detach().mean()))


def train_step(x):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()


def main():
    keep = (sys.argv[1] if len(sys.argv) > 1 else "leak") == "leak"
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    data = torch.utils.data.TensorDataset(torch.randn(steps * 256, 512))
    loader = torch.utils.data.DataLoader(data, batch_size=256, num_workers=2)
    for step, (x,) in enumerate(loader):
        if step < 5:  # a cache filled once
            cache[step] = torch.randn(256, 1024)
        train_step(x)
        validate(x, keep)
    print("done", len(history))


main()
