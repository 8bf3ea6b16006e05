"""Host syncs on 2 gloo ranks for tests/python/test_host_sync.py: `python
dist_host_sync.py OUT every|rare` (RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set). 20 steps of 5 ms of work and an all-reduce of 40000 bytes;
a metric read with .item() twice a step (every) or once every 10 steps
(rare). There is no GPU: the metric is a tensor that says it is not on the
CPU (is_cpu False) and whose .item() stalls 3 ms, as a device's would."""
import sys
import time

import torch
import torch.distributed as dist

import mlprof


class OnDevice(torch.Tensor):
    @property
    def is_cpu(self):
        return False

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "item":
            time.sleep(0.003)
        return super().__torch_function__(func, types, args, kwargs or {})


out, mode = sys.argv[1], sys.argv[2]
prof = mlprof.Profiler(output=out).start()
dist.init_process_group("gloo")
metric = torch.zeros(1).as_subclass(OnDevice)
grad = torch.ones(10000)
for step in range(20):
    prof.step()
    time.sleep(0.005)
    dist.all_reduce(grad)
    if mode == "every" or step % 10 == 0:
        for _ in range(2 if mode == "every" else 1):
            metric.item()
dist.destroy_process_group()
prof.stop()
