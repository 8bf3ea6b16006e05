"""Host syncs (mlprof/distributed.py, docs/distributed.md "Host syncs"):
.item(), .tolist() and .cpu() of a tensor not on the CPU are zones "host
sync ..."; of a CPU tensor, not. There is no GPU here: the device tensors
are a subclass that says it is not on the CPU (is_cpu False), which is what
the wrapper looks at; a real device's stall is not exercised. Then 2 gloo
ranks reading such a metric every step get a synchronisation_bound finding
that cites the syncs a step, and reading it every 10 steps get none."""
import json
import os
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or \
        not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available",
                allow_module_level=True)

from conftest import BUILD, ROOT  # noqa: E402

PROGRAM = os.path.join(ROOT, "tests", "programs", "dist_host_sync.py")

# Run in a process of its own: install() patches torch.Tensor for good.
WRAPPER = r"""
import json, sys
import torch, torch.distributed
import mlprof

class OnDevice(torch.Tensor):
    @property
    def is_cpu(self):
        return False

prof = mlprof.Profiler(output=sys.argv[1]).start()
dev = torch.arange(3.0).as_subclass(OnDevice)
cpu = torch.arange(3.0)
one = dev[:1]
got = [one.item() for _ in range(5)] + [dev.tolist() for _ in range(3)]
got += [dev.cpu().tolist() for _ in range(2)]
got += [cpu[:1].item() for _ in range(7)] + [cpu.tolist(), cpu.cpu().tolist()]
counts = {z["name"]: z["count"] for z in prof.summary()["zones"]}
prof.stop()
print(json.dumps({"got": got, "counts": counts}))
"""


def test_device_tensors_only(tmp_path):
    r = subprocess.run([sys.executable, "-c", WRAPPER, str(tmp_path / "p")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.splitlines()[-1])
    # The calls' results are torch's.
    assert out["got"] == [0.0] * 5 + [[0.0, 1.0, 2.0]] * 3 + \
        [[0.0, 1.0, 2.0]] * 2 + [0.0] * 7 + [[0.0, 1.0, 2.0]] * 2
    syncs = {k: v for k, v in out["counts"].items()
             if k.startswith("host sync")}
    # The subclass's __torch_function__ calls torch.Tensor.item again from
    # within: one zone a call, none for the CPU tensor's 9 calls.
    assert syncs == {"host sync .item()": 5, "host sync .tolist()": 5,
                     "host sync .cpu()": 2}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(out, mode):
    port = str(free_port())
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(
            [sys.executable, PROGRAM, out, mode], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for p in procs:
        output = p.communicate(timeout=240)[0]
        assert p.returncode == 0, output[-3000:]
    r = subprocess.run([os.path.join(BUILD, "mlprof"), "report", "--format",
                        "json", out], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_syncs_every_step_found(tmp_path):
    report = run_job(str(tmp_path / "run") + "/", "every")
    ranks = report["distributed"]["ranks"]
    assert [r["host_syncs"] for r in ranks] == [40, 40]
    [f] = [f for f in report["findings"]
           if f["type"] == "synchronisation_bound"]
    assert f["evidence"]["host_syncs_per_step"] >= 2, f
    assert "host syncs a step" in f["summary"], f
    assert "every N steps" in f["recommendation"]


def test_rare_syncs_no_finding(tmp_path):
    report = run_job(str(tmp_path / "run") + "/", "rare")
    ranks = report["distributed"]["ranks"]
    assert [r["host_syncs"] for r in ranks] == [2, 2]
    assert not [f for f in report["findings"]
                if f["type"] == "synchronisation_bound"], report["findings"]
