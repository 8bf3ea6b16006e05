"""Backward zones of mlprof.torch.profile_model: one per module, leaves and
containers, nested as the modules are, whatever the model does in place."""
import re

import pytest
import torch
from torch import nn

import mlprof
import mlprof.torch as mt
from mlprof import _mlprof


class Block(nn.Module):
    """A residual block with an in-place ReLU, as torchvision's ResNets."""

    def __init__(self, d=32):
        super().__init__()
        self.a = nn.Linear(d, d)
        self.r = nn.ReLU(inplace=True)
        self.b = nn.Linear(d, d)

    def forward(self, x):
        return self.b(self.r(self.a(x))) + x


class Net(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.blocks = nn.Sequential(Block(d), Block(d))
        self.attn = nn.MultiheadAttention(d, 4)
        self.head = nn.Linear(d, 4)

    def forward(self, x):
        h = self.blocks(x)
        a, _ = self.attn(h, h, h)
        return self.head(a)


def spans_of(path):
    """The spans of a profile, layer zones named by path only
    ("blocks.0.a (Linear):backward" as "blocks.0.a:backward")."""
    ev = mlprof.read_events(path)
    for s in ev["spans"]:
        s["name"] = re.sub(r" \([^()]*\)(?=:(forward|backward)$)", "",
                           s["name"])
    return ev["spans"]


def inside(inner, outer):
    return (outer["tid"] == inner["tid"] and outer["depth"] < inner["depth"]
            and outer["begin_ns"] <= inner["begin_ns"]
            and inner["end_ns"] <= outer["end_ns"])


def record(tmp_path, model, steps=3, shape=(6, 32)):
    path = str(tmp_path / "bw.mlprof")
    with mlprof.Profiler(output=path, sample_interval=0) as prof:
        mp = mt.profile_model(model, prof, backward_every=1)
        for _ in range(steps):
            with prof.zone("train_step"):
                model(torch.randn(*shape)).sum().backward()
            assert _mlprof.open_depth() == 0
            prof.step()
        mp.remove()
    return spans_of(path)


def test_containers_and_leaves_get_nested_backward_zones(tmp_path):
    spans = record(tmp_path, Net())
    bwd = [s for s in spans if s["name"].endswith(":backward")]
    names = {s["name"] for s in bwd}
    for n in ("Net", "blocks", "blocks.0", "blocks.1", "blocks.0.a",
              "blocks.0.b", "blocks.1.a", "blocks.1.b", "attn", "head"):
        assert n + ":backward" in names, n
    # The in-place ReLU returns its input: its backward cannot be told
    # apart from the tensor's maker, so it has no zone (not a wrong one).
    assert "blocks.0.r:backward" not in names
    assert sum(s["name"] == "Net:backward" for s in bwd) == 3
    steps = [s for s in spans if s["name"] == "train_step"]
    parent = {"blocks": "Net", "attn": "Net", "head": "Net",
              "blocks.0": "blocks", "blocks.1": "blocks",
              "blocks.0.a": "blocks.0", "blocks.0.b": "blocks.0",
              "blocks.1.a": "blocks.1", "blocks.1.b": "blocks.1"}
    for s in bwd:
        module = s["name"][:-len(":backward")]
        outer = parent.get(module)
        if outer is None:  # the model: inside the step
            assert any(inside(s, t) for t in steps), s
            continue
        assert any(inside(s, o) for o in bwd
                   if o["name"] == outer + ":backward"), (module, outer)
    # The step's other zones were not closed early by a backward hook.
    for t in steps:
        assert any(inside(f, t) for f in spans if f["name"] == "Net:forward")


def test_composite_leaf_backward_covers_all_its_operations(tmp_path):
    """MultiheadAttention is one leaf of many autograd operations: its zone
    must span all of them (the output projection's alone is a fraction)."""
    d = 64
    model = nn.Sequential(nn.Linear(d, d), nn.MultiheadAttention(d, 4))

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.attn = model[0], model[1]
            self.out = nn.Linear(d, d)

        def forward(self, x):
            h = self.lin(x)
            a, _ = self.attn(h, h, h)
            return self.out(a)

    spans = record(tmp_path, Wrap(), steps=5, shape=(48, 4, d))
    attn = [s for s in spans if s["name"] == "attn:backward"]
    out = [s for s in spans if s["name"] == "out:backward"]
    assert len(attn) == 5 and len(out) == 5
    # Attention's backward (q/k/v and output projections, two batched
    # matmuls, softmax) costs several times a Linear of the same width.
    # The fastest of each: preemption only ever lengthens a span.
    fastest = lambda ss: min(s["end_ns"] - s["begin_ns"] for s in ss)
    assert fastest(attn) > 2 * fastest(out)


def test_partial_backward_leaves_no_zone_open_for_the_next_step(tmp_path):
    """torch.autograd.grad with respect to an input runs only part of the
    graph: zones whose end never comes are closed when the model runs
    again, so later zones nest as they should."""
    path = str(tmp_path / "partial.mlprof")
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    with mlprof.Profiler(output=path, sample_interval=0) as prof:
        mt.profile_model(model, prof)
        x = torch.randn(4, 8, requires_grad=True)
        y = model(x).sum()
        torch.autograd.grad(y, x)  # no parameter gradients
        model(torch.randn(4, 8)).sum().backward()
        assert _mlprof.open_depth() == 0
        with prof.zone("after"):
            pass
    spans = spans_of(path)
    after = [s for s in spans if s["name"] == "after"]
    assert len(after) == 1 and after[0]["depth"] == 0


def test_a_deep_model_has_its_backward_zone(tmp_path):
    """Hundreds of layers (over a thousand autograd operations): the model
    and each block still get a zone; each operation is walked once, inner
    blocks being crossed by the outer ones' walks."""
    blocks = [nn.Sequential(*[m for _ in range(10)
                              for m in (nn.Linear(8, 8), nn.Tanh())])
              for _ in range(30)]
    model = nn.Sequential(*blocks)
    spans = record(tmp_path, model, steps=2, shape=(4, 8))
    bwd = {s["name"]: s for s in spans if s["name"].endswith(":backward")}
    assert "Sequential:backward" in bwd
    assert "0:backward" in bwd and "29:backward" in bwd
    assert inside(bwd["29:backward"], bwd["Sequential:backward"])
