"""One rank of a torch.distributed gloo job for tests/python/test_distributed.py:
run with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, and the profile
directory as argument. A small DDP model trains for 3 steps, then known
collectives and point-to-point operations run, synchronous and asynchronous.
Every size here is what the test expects: change them together."""
import sys

import torch
import torch.distributed as dist

import mlprof

with mlprof.Profiler(output=sys.argv[1] + "/") as prof:
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    # 10*20 + 20 + 20*1 + 1 = 241 float32 parameters: one bucket of 964 bytes
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        with prof.zone("step"):
            opt.zero_grad()
            model(torch.randn(8, 10)).sum().backward()
            opt.step()
    t = torch.ones(1000)                                     # 4000 bytes
    dist.all_reduce(t)
    dist.broadcast(torch.zeros(100, dtype=torch.float64), src=1)  # 800
    dist.all_gather([torch.zeros(5, dtype=torch.int32) for _ in range(size)],
                    torch.zeros(5, dtype=torch.int32))       # 20
    prof.set_enabled(rank != 0)  # rank 0 does not record this one
    dist.all_reduce(torch.ones(2))                           # 8
    prof.set_enabled(True)
    work = dist.all_reduce(torch.ones(300), async_op=True)   # 1200
    work.wait()
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    ops = [dist.P2POp(dist.isend, torch.ones(7), nxt),       # 28 + 28
           dist.P2POp(dist.irecv, torch.zeros(7), prev)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    if rank % 2 == 0:
        dist.send(torch.ones(3, dtype=torch.int64), nxt)     # 24
    else:
        dist.recv(torch.zeros(3, dtype=torch.int64))         # from any rank
    even = dist.new_group([0, 2])
    odd = dist.new_group([1, 3])
    dist.all_reduce(torch.ones(4), group=even if rank % 2 == 0 else odd)  # 16
    dist.barrier()
    dist.destroy_process_group()
