"""One rank of a 2-rank gloo job for tests/python/test_distributed.py: the
collectives torch 2 added, under the Python Profiler. Run with RANK,
WORLD_SIZE=2, MASTER_ADDR and MASTER_PORT set, and the profile directory
as argument:

    dist_torch2.py OUT

all_gather_into_tensor, reduce_scatter_tensor, batch_isend_irecv, then the
functional collectives (imported after the profiler started, as DTensor
would import them): one, an all-gather and a barrier unrecorded, then an all_reduce that rank 1 enters
DELAY_S late
(rank 0's wait for it is in its completion, not in its call), an
all_gather_tensor and a reduce_scatter_tensor on a group given as ranks.
Every size here is what the test expects: change them together."""
import sys
import time

import torch
import torch.distributed as dist

import mlprof

DELAY_S = 0.3

with mlprof.Profiler(output=sys.argv[1] + "/") as prof:
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    assert size == 2
    gathered = torch.zeros(size * 10)
    dist.all_gather_into_tensor(gathered, torch.full((10,), float(rank)))  # 40
    assert gathered.tolist() == [0.0] * 10 + [1.0] * 10
    part = torch.zeros(6, dtype=torch.float64)
    dist.reduce_scatter_tensor(part, torch.ones(size * 6,
                                                dtype=torch.float64))  # 96
    assert part.tolist() == [2.0] * 6
    other = 1 - rank
    got = torch.zeros(7)
    works = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, torch.full((7,), float(rank)), other),
        dist.P2POp(dist.irecv, got, other)])                    # 28 + 28
    for w in works:
        w.wait()
    assert got.tolist() == [float(other)] * 7

    import torch.distributed._functional_collectives as funcol
    # torch's first functional collective imports much of torch (seconds
    # on a busy machine): made while recording is off, numbered all the same
    prof.set_enabled(False)
    funcol.all_reduce(torch.ones(1), "sum", dist.group.WORLD).wait()
    dist.all_gather_into_tensor(gathered, torch.zeros(10))  # seq 4, once
    dist.barrier()  # the ranks together again, then rank 1 late
    prof.set_enabled(True)
    if rank == 1:
        time.sleep(DELAY_S)
    reduced = funcol.all_reduce(torch.ones(25), "sum", dist.group.WORLD)  # 100
    assert reduced.sum().item() == 50  # its first use waits for it
    rows = funcol.all_gather_tensor(torch.arange(3) + 3 * rank, 0,
                                    dist.group.WORLD)             # 24
    shard = funcol.reduce_scatter_tensor(torch.ones(size * 8), "sum", 0,
                                         [0, 1])                  # 64
    assert rows.wait().tolist() == list(range(6))
    assert shard.wait().tolist() == [2.0] * 8

    # DTensor: a scatter from the mesh's rank 0 (group_src), a functional
    # all-gather of the two shards
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (size,))
    sharded = distribute_tensor(torch.ones(4, 6), mesh, [Shard(0)])  # 48
    assert sharded.full_tensor().tolist() == [[1.0] * 6] * 4            # 48
    dist.destroy_process_group()
