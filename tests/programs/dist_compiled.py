"""torch.compile over torch.distributed's collectives and the functional
ones, under the Python Profiler, on a 1-rank gloo group, for
tests/python/test_distributed.py:

    dist_compiled.py OUT PORT

The functional collectives are imported before the profiler starts (the
order of imports decides which functions torch.compile recognises as
collectives). A function using both kinds is compiled with fullgraph=True
(a graph break would raise) and called three times, then called once
uncompiled. Prints torch._dynamo's counters as JSON."""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import mlprof

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2], RANK="0",
                  WORLD_SIZE="1")


def f(x):
    y = funcol.all_reduce(x * 2, "sum", dist.group.WORLD)
    dist.all_reduce(y)
    return y + 1


with mlprof.Profiler(output=sys.argv[1] + "/"):
    dist.init_process_group("gloo")
    compiled = torch.compile(f, backend="eager", fullgraph=True)
    for _ in range(3):
        assert compiled(torch.ones(4)).tolist() == [3.0] * 4
    assert f(torch.ones(4)).tolist() == [3.0] * 4
    dist.destroy_process_group()
counters = torch._dynamo.utils.counters
print(json.dumps({k: dict(counters[k]) for k in ("graph_break", "stats")}))
