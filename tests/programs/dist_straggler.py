"""One rank of a torch.distributed gloo job with a straggler, for
tests/python/test_distributed.py: DistributedDataParallel trains a small
model for STEPS steps, and rank SLOW sleeps DELAY_MS milliseconds in each
step's forward; each step ends with a blocking all_reduce of the loss (a
metric, 4 bytes). Run under torchrun (or with RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT set):

    dist_straggler.py STEPS SLOW DELAY_MS

No mlprof import: `mlprof run` records it with no code change, and
dist_profiled.py runs main() under the Python Profiler. Every size here is
what the test expects: change them together."""
import sys
import time

import torch
import torch.distributed as dist

# 32*64 + 64 + 64*8 + 8 = 2632 float32 parameters: one DDP bucket of 10528
# bytes
PARAMS = 2632


def main(steps, slow, delay_ms, on_step=lambda: None):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)))
    assert sum(p.numel() for p in model.parameters()) == PARAMS
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
