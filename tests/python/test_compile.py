"""torch.compile under `mlprof run` (mlprof.auto) and mlprof.torch's
per-layer hooks on compiled models: zones at the compiled module's boundary,
step marks, and no graph break or recompilation added, asserted through
torch's own counters against the same script run without mlprof."""
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

import mlprof
from test_auto import report, run, zone_names

import torch

# torch.compile came with torch 2: make python-test-oldest (torch 1.13)
# deselects these.
pytestmark = pytest.mark.torch2

# Inductor compiles in this process rather than in a pool of worker
# processes (the test machines have 2 cores; the FX graph cache in
# /tmp/torchinductor_$USER makes later runs cheaper). It needs g++.
ENV = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="1")

# An unmodified training script: a torch.compile'd CNN (default backend:
# inductor), a slow dataset read by 2 DataLoader workers, AdamW. It prints
# torch's own compilation counters as JSON.
TRAIN = """
import json, os, sys, time
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torch._dynamo.utils import counters

class Slow(Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, i):
        time.sleep(0.15)
        return torch.randn(1, 16, 16), i % 10

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.fc = nn.Linear(4 * 14 * 14, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))

model, loss_fn = torch.compile(Net()), nn.CrossEntropyLoss()
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
for x, y in DataLoader(Slow(), batch_size=4, num_workers=2):
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    opt.step()
print(json.dumps({"graph_breaks": sum(counters["graph_break"].values()),
                  "stats": dict(counters["stats"])}))
"""

# A compiled training step (a function, not a module; backend "eager":
# dynamo's tracing is what is tested, not a code generator): torch.compile
# traces mlprof's wrappers of zero_grad and step.
STEP_FN = """
import json, torch
from torch import nn
from torch._dynamo.utils import counters
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
loss_fn = nn.CrossEntropyLoss()
opt = torch.optim.AdamW(model.parameters(), lr=0.01)

@torch.compile(backend="eager")
def train_step(x, y):
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss

# No graph break of torch's own here (the optimizer's step has some).
@torch.compile(backend="eager")
def loss_of(x, y):
    model.zero_grad()
    return loss_fn(model(x), y)

for i in range(5):
    train_step(torch.randn(4, 8), torch.randint(0, 2, (4,)))
for i in range(3):
    loss_of(torch.randn(4, 8), torch.randint(0, 2, (4,))).backward()
head = nn.Linear(8, 2)
head.compile(backend="eager")  # in place: a compiled module, not a function
head(torch.randn(4, 8))
print(json.dumps({"graph_breaks": sum(counters["graph_break"].values()),
                  "stats": dict(counters["stats"])}))
"""


def plain(tmp_path, script):
    """torch's counters of the script run without mlprof."""
    path = tmp_path / "plain.py"
    path.write_text(textwrap.dedent(script))
    r = subprocess.run([sys.executable, str(path)], capture_output=True,
                       text=True, env=ENV, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def counters_of(r):
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def main_meta(rep):
    return [p["meta"] for p in rep["processes"]
            if p["meta"].get("mlprof.torch", "").startswith("instrumented")
            and "mlprof.torch.compile" in p["meta"]]


@pytest.fixture(scope="module")
def plain_train(tmp_path_factory):
    return plain(tmp_path_factory.mktemp("plain"), TRAIN)


def test_compiled_model_training(build_dir, tmp_path, plain_train):
    r, out = run(build_dir, tmp_path, TRAIN, env=ENV)
    got = counters_of(r)
    # Compiled as without mlprof: one graph, no break, no recompilation.
    assert plain_train["graph_breaks"] == 0, plain_train
    assert plain_train["stats"]["unique_graphs"] == 1, plain_train
    assert got == plain_train
    rep = report(build_dir, out)
    counts = {z["name"]: z["count"] for z in rep["zones"]}
    # The compiled model's calls, named by the class it compiles.
    assert counts["Net"] == 12 and "OptimizedModule" not in counts, counts
    for name in ("backward", "optimizer_step", "zero_grad", "data_fetch",
                 "CrossEntropyLoss"):
        assert counts[name] == 12, (name, counts)
    assert counts["data_wait"] == 13, counts  # and the end of the loader
    # The compilation, a zone inside the model's first call.
    assert counts["torch.compile"] >= 1, counts
    comp = [z for z in rep["zones"] if z["name"] == "torch.compile"][0]
    net = [z for z in rep["zones"] if z["name"] == "Net"][0]
    # A second compilation (AOTAutograd's backward graph, compiled lazily)
    # runs inside backward's first call.
    bw = [z for z in rep["zones"] if z["name"] == "backward"][0]
    assert comp["total_ns"] <= net["max_ns"] + bw["max_ns"] + \
        1000 * counts["torch.compile"]
    steps = rep["steps"]
    assert steps["source"] == "marks" and steps["count"] == 11
    parts = {p["part"]: p["total_ns"] for p in steps["parts"]}
    for part in ("data", "forward", "backward", "optimizer"):
        assert parts[part] > 0, (part, parts)
    # The parts cover the step: what no zone holds ("other") is small.
    assert abs(sum(parts.values()) - steps["total_ns"]) <= \
        0.01 * steps["total_ns"], (parts, steps)
    assert parts["other"] < 0.05 * steps["total_ns"], parts
    assert "data_bound" in [f["type"] for f in rep["findings"]]
    meta = main_meta(rep)
    assert len(meta) == 1, rep["processes"]
    assert meta[0]["mlprof.torch.compile"].startswith(
        "compiled modules: Net (one zone per call at their boundary")


def test_layers_on_compiled_model(build_dir, tmp_path, plain_train):
    """python -m mlprof run --layers on a compiled model: its calls are one
    layer (hooks inside compiled code would break its graph), said in the
    metadata, with the graph as without mlprof."""
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    env = dict(ENV, MLPROF_CLI=os.path.join(build_dir, "mlprof"))
    env.pop("MLPROF_PY_STARTUP", None)
    env.pop("MLPROF_OUTPUT", None)
    r = subprocess.run([sys.executable, "-m", "mlprof", "run", "-q", "-o",
                        str(tmp_path / "run"), "--layers", str(script)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert counters_of(r) == plain_train
    assert "RuntimeWarning" not in r.stderr  # said in the profile instead
    rep = report(build_dir, tmp_path / "run")
    names = zone_names(rep)
    assert {"Net", "Net:forward", "Net:backward"} <= names, names
    assert not [n for n in names if "conv" in n or "fc" in n], names
    meta = main_meta(rep)[0]
    assert [x["zone"] for x in json.loads(meta["mlprof.layers:Net"])] \
        == ["Net"]
    assert "no per-layer zones inside compiled code" in \
        meta["mlprof.torch.compile"]


def test_compiled_step_function(build_dir, tmp_path):
    """mlprof's wrappers traced by torch.compile step aside: the same graphs
    and breaks as without mlprof, and the metadata names what is not
    recorded inside compiled code."""
    want = plain(tmp_path, STEP_FN)
    r, out = run(build_dir, tmp_path, STEP_FN, env=ENV)
    assert counters_of(r) == want
    rep = report(build_dir, out)
    assert {"backward", "optimizer_step", "zero_grad"} <= zone_names(rep)
    note = main_meta(rep)[0]["mlprof.torch.compile"]
    assert note.startswith("compiled modules: Linear (one zone per call"), note
    assert "; compiled functions: train_step, loss_of (no zone" in note, note
    assert note.endswith("compiled: zero_grad, optimizer_step (and its "
                         "step mark)"), note


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.fc = torch.nn.Linear(4 * 14 * 14, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def _train(model, steps=3):
    for _ in range(steps):
        model(torch.randn(2, 1, 16, 16)).sum().backward()


def test_profile_model_on_compiled_modules(tmp_path):
    """profile_model on torch.compile(model), on a model with a compiled
    submodule and on a model compiled in place: no hook inside compiled
    code (no graph break), a RuntimeWarning naming the compiled modules."""
    from torch._dynamo.utils import counters
    import mlprof.torch as mt
    torch._dynamo.reset()
    counters.clear()
    _train(torch.compile(Net(), backend="eager"))
    want = sum(counters["graph_break"].values())
    with mlprof.Profiler(output=str(tmp_path / "c.mlprof")) as prof:
        torch._dynamo.reset()
        counters.clear()
        whole = torch.compile(Net(), backend="eager")
        with pytest.warns(RuntimeWarning, match="'Net' compiled by torch"):
            mp = mt.profile_model(whole, prof)
        assert mp.names == ["Net"] and mp.compiled == [""]
        _train(whole)
        assert sum(counters["graph_break"].values()) == want == 0

        part = Net()
        part.fc = torch.compile(part.fc, backend="eager")
        with pytest.warns(RuntimeWarning, match="'fc' compiled"):
            mp = mt.profile_model(part, prof)
        assert mp.names == ["Net", "conv", "fc"], mp.names
        assert mp.labels["fc"] == "fc (Linear)" and "fc" in mp.leaves
        _train(part)
        assert sum(counters["graph_break"].values()) == 0

        inplace = Net()
        inplace.compile(backend="eager")
        with pytest.warns(RuntimeWarning, match="'Net' compiled"):
            mp = mt.profile_model(inplace, prof)
        assert mp.names == []
        _train(inplace)
        assert sum(counters["graph_break"].values()) == 0
        s = prof.summary()
    counts = {z["name"]: z["count"] for z in s["zones"]}
    assert counts["Net:forward"] == 6 and counts["fc (Linear):forward"] == 3
    assert counts["conv (Conv2d):forward"] == 3


def test_uncompiled_model_keeps_its_layers(tmp_path):
    """No warning and every layer hooked when nothing is compiled."""
    import mlprof.torch as mt
    with mlprof.Profiler(output=str(tmp_path / "u.mlprof")) as prof:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            mp = mt.profile_model(Net(), prof)
    assert mp.names == ["Net", "conv", "fc"] and mp.compiled == []
