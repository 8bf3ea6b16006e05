"""One rank of a torch.distributed gloo job with a straggler, for
tests/python/test_distributed.py: FSDP2 (fully_shard, torch 2) trains a
small model on the CPU for STEPS steps, and rank SLOW sleeps DELAY_MS
milliseconds in each step's forward; each step ends with a blocking
all_reduce of the loss (a metric, 4 bytes). Run under torchrun (or with
RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set):

    dist_fsdp2.py STEPS SLOW DELAY_MS

No mlprof import: `mlprof run` records it with no code change, and
dist_profiled.py runs main() under the Python Profiler. Each Linear is
sharded on its own: its forward all-gathers its parameters, its backward
all-gathers them again (resharded after forward) and reduce-scatters their
gradients. Every size here is what the test expects: change them
together."""
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

# (in, out) of each Linear: 32*64 + 64 and 64*8 + 8 float32 parameters
LAYERS = ((32, 64), (64, 8))


def main(steps, slow, delay_ms, on_step=lambda: None):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(*LAYERS[0]), torch.nn.ReLU(),
                                torch.nn.Linear(*LAYERS[1]))
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32)
    for _ in range(steps):
        opt.zero_grad()
        loss = model(x).square().mean()
        if rank == slow:
            time.sleep(delay_ms / 1000)
        loss.backward()
        opt.step()
        dist.all_reduce(loss.detach())
        on_step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*map(int, sys.argv[1:4]))
