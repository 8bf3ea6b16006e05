"""Activation memory per layer (docs/memory.md, "Activation memory per
layer"): the bytes each layer's forward saves for backward, exact from the
shapes of a small MLP and CNN; the program's own saved-tensor hooks
(activation checkpointing) left as they are; nothing left pushed after a
forward that raised."""
import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import mlprof
import mlprof.torch as mt

# Saved bytes need torch 2's view of the saved-tensor hooks in force
# (torch._C._autograd._top_saved_tensors_default_hooks): without it mlprof
# cannot tell it would replace the program's own, and counts nothing.
torch2 = pytest.mark.torch2

F32 = 4


def saved(mp):
    return {r["name"]: r["saved_bytes"] for r in mp.memory()}


def no_hooks():
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is None


@torch2
def test_mlp_saved_bytes_from_shapes(tmp_path):
    n, i, h, o = 32, 64, 128, 10
    model = nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, o))
    with mlprof.Profiler(output=str(tmp_path / "p.mlprof")) as prof:
        with mt.profile_model(model, prof, memory=True) as mp:
            for _ in range(5):
                model(torch.randn(n, i)).sum().backward()
            got = saved(mp)
    assert no_hooks()
    assert got == {
        "Sequential": 0,
        # addmm keeps its input for the weight's gradient (the weight,
        # a parameter, is not counted)...
        "0 (Linear)": n * i * F32,
        # ...ReLU its result; the second Linear's input is that same
        # storage, counted once.
        "1 (ReLU)": n * h * F32,
        "2 (Linear)": 0}


@torch2
def test_cnn_saved_bytes_from_shapes(tmp_path):
    b, c, hw, k = 4, 8, 16, 10
    model = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(c * (hw // 2) ** 2, k))
    with mlprof.Profiler(output=str(tmp_path / "p.mlprof")) as prof:
        with mt.profile_model(model, prof, memory=True) as mp:
            for _ in range(3):
                model(torch.randn(b, 3, hw, hw)).sum().backward()
            got = saved(mp)
            text = mp.memory_report()
    act = b * c * hw * hw * F32
    assert got == {
        "Sequential": 0,
        "0 (Conv2d)": b * 3 * hw * hw * F32,        # its input
        # its input (the convolution's output), and the batch's mean and
        # inverse std per channel (the running statistics are buffers)
        "1 (BatchNorm2d)": act + 2 * c * F32,
        "2 (ReLU)": act,                              # its result
        "3 (MaxPool2d)": act // 4 * 2,                # int64 indices
        "4 (Flatten)": 0,
        "5 (Linear)": act // 4}                       # the pooled output
    assert text.splitlines()[1].startswith("1 (BatchNorm2d)")


@torch2
def test_without_memory_nothing_is_pushed_or_counted(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    pushed = []
    with mlprof.Profiler(output=str(tmp_path / "p.mlprof")) as prof:
        with mt.profile_model(model, prof) as mp:
            model.register_forward_hook(
                lambda *a: pushed.append(not no_hooks()))
            model(torch.randn(2, 4)).sum().backward()
            rows = mp.memory()
    assert pushed == [False]
    assert all(r["saved_bytes"] is None for r in rows)


@torch2
def test_checkpointing_keeps_its_own_hooks(tmp_path):
    """Non-reentrant checkpointing saves nothing inside the region (its own
    hooks); mlprof's must not replace them: the model called under
    checkpoint keeps checkpoint's hooks and is not counted."""
    inner = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
    seen = []

    def spy(module, args):
        seen.append(torch._C._autograd._top_saved_tensors_default_hooks(
            False))
    with mlprof.Profiler(output=str(tmp_path / "p.mlprof")) as prof:
        with mt.profile_model(inner, prof, memory=True) as mp:
            inner[0].register_forward_pre_hook(spy)
            x = torch.randn(8, 16, requires_grad=True)
            checkpoint(inner, x, use_reentrant=False).sum().backward()
            assert x.grad is not None
            # The forward, and its recomputation during backward.
            assert mp.saved.skipped == 2
            rows = saved(mp)
            # An ordinary forward afterwards is counted.
            inner(x).sum().backward()
            assert saved(mp)["1 (ReLU)"] > 0
    hooks = seen[0]
    assert hooks is not None and hooks[0] != mp.saved.pack
    assert set(rows.values()) == {0}
    assert no_hooks()


@torch2
def test_a_forward_that_raises_leaves_no_hooks(tmp_path):
    class Boom(nn.Module):
        def forward(self, x):
            raise ValueError("boom")
    model = nn.Sequential(nn.Linear(4, 4), Boom())
    with mlprof.Profiler(output=str(tmp_path / "p.mlprof")) as prof:
        with mt.profile_model(model, prof, memory=True):
            with pytest.raises(ValueError, match="boom"):
                model(torch.randn(2, 4))
            assert no_hooks()
            with torch.no_grad():
                model[0](torch.randn(2, 4))
    assert no_hooks()


def test_gradients_unchanged_by_the_hooks(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    x = torch.randn(5, 8)
    model(x).sum().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with mlprof.Profiler(output=str(tmp_path / "p.mlprof")) as prof:
        with mt.profile_model(model, prof, memory=True):
            model(x).sum().backward()
    for p, w in zip(model.parameters(), want):
        assert torch.equal(p.grad, w)


MLP_SCRIPT = """
import torch
from torch import nn
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(STEPS):
    opt.zero_grad()
    model(torch.randn(32, 64)).sum().backward()
    opt.step()
print("trained")
"""


def run_layers(build_dir, tmp_path, steps, *flags):
    """The MLP under `mlprof run --layers FLAGS` (this package's start-up
    module); returns the report's JSON."""
    import json
    import os
    import subprocess
    import sys
    script = tmp_path / "mlp.py"
    script.write_text(MLP_SCRIPT.replace("STEPS", str(steps)))
    out = tmp_path / "run"
    env = dict(os.environ, MLPROF_PY_STARTUP=os.path.join(
        os.path.dirname(mlprof.__file__), "_startup"))
    env.pop("MLPROF_OUTPUT", None)
    mlprof_bin = os.path.join(build_dir, "mlprof")
    r = subprocess.run([mlprof_bin, "run", "-q", "-o", str(out), "--layers",
                        *flags, "--", sys.executable, str(script)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout == "trained\n", r.stderr
    r = subprocess.run([mlprof_bin, "report", "-f", "json", "--top", "0",
                        str(out)], capture_output=True, text=True, check=True)
    text = subprocess.run([mlprof_bin, "report", str(out)],
                          capture_output=True, text=True, check=True).stdout
    return json.loads(r.stdout), text


@torch2
def test_under_mlprof_run_layers_allocated_and_saved(build_dir, tmp_path):
    steps = 12
    rep, text = run_layers(build_dir, tmp_path, steps, "--memory=all")
    units = {z["name"]: {u["unit"]: u["n"] for u in z["units"]}
             for z in rep["zones"]}
    relu, fc1 = "1 (ReLU):forward", "0 (Linear):forward"
    assert units[relu][mt.SAVED_UNIT] == steps * 32 * 128 * F32
    assert units[fc1][mt.SAVED_UNIT] == steps * 32 * 64 * F32
    assert mt.SAVED_UNIT not in units["2 (Linear):forward"]
    # Each forward of ReLU and of the first Linear allocates its output
    # (32 x 128 floats), in its own zone.
    mem = {z["zone"]: z for z in rep["memory"]["zones"]}
    for name in (relu, fc1):
        assert mem[name]["allocated_bytes"] >= steps * 32 * 128 * F32, \
            mem[name]
        assert mem[name]["count"] >= steps
    # The report's table: ReLU's 16.4 kB saved per call first, then the
    # first Linear's 8.19 kB, each with the bytes its calls allocated.
    table = text.split("Activation memory per layer")[1].splitlines()
    assert table[1].split() == ["zone", "calls", "saved/call", "allocated",
                                "high-water", "at", "peak"]
    relu_row, fc1_row = table[2].split(), table[3].split()
    assert relu_row[:6] == ["1", "(ReLU):forward", str(steps), "16.4",
                            "kB", "%.0f" % (mem[relu]["allocated_bytes"]
                                            / 1e3)], table[:4]
    assert fc1_row[:5] == ["0", "(Linear):forward", str(steps), "8.19",
                           "kB"], table[:4]


@pytest.mark.parametrize("memory", ["off", "sampled"])
def test_saved_bytes_only_with_every_allocation(build_dir, tmp_path, memory):
    # The saved-tensor hooks cost a few µs per module and step: counted
    # with --memory=all only.
    rep, text = run_layers(build_dir, tmp_path, 3, "--memory=" + memory)
    assert bool(rep["memory"]["processes"]) == (memory != "off")
    assert not any(u["unit"] == mt.SAVED_UNIT for z in rep["zones"]
                   for u in z["units"])
    assert "Activation memory" not in text


@torch2
def test_threads_count_their_own_forwards(tmp_path):
    """A forward of the model on another thread, run while this thread's
    forward is between ReLU's save and the second Linear's (the same
    storage), must not make this one count that storage twice."""
    import threading
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    other = []

    def meanwhile(module, inputs, output):
        if not other:
            other.append(threading.Thread(target=lambda: model(
                torch.randn(32, 64)).sum().backward()))
            other[0].start()
            other[0].join()
    with mlprof.Profiler(output=str(tmp_path / "p.mlprof")) as prof:
        with mt.profile_model(model, prof, memory=True) as mp:
            model[1].register_forward_hook(meanwhile)
            model(torch.randn(32, 64)).sum().backward()
            got = saved(mp)
    assert len(other) == 1
    assert got["1 (ReLU)"] == 32 * 128 * F32
    assert got["2 (Linear)"] == 0
    assert mp.saved.skipped == 0
