"""profile_model's layer data (issue #11): the hooks' own time kept out of
the modules' zones, modules that never ran (PyTorch's fast paths), layer
names with their type, backward FLOPs of the gradients computed."""
import json

import pytest
import torch
from torch import nn

import mlprof
import mlprof.torch as mt


def zones(summary):
    return {z["name"]: z for z in summary["zones"]}


def test_hooks_time_is_its_own_zone_not_the_containers_self_time(tmp_path):
    """The walk of the autograd graph and the hooks put on it after each
    forward ran inside the enclosing module's zone, as its self time (50
    tiny layers: the container's self time exceeded its children's)."""
    steps, n = 4, 50
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(n)])
    with mlprof.Profiler(output=str(tmp_path / "o.mlprof")) as prof:
        with mt.profile_model(model, prof, backward_every=1):
            for _ in range(steps):
                model(torch.randn(4, 8)).sum().backward()
        z = zones(prof.summary())
    seq = z["Sequential:forward"]
    children = sum(z["%d (Linear):forward" % i]["total_ns"]
                   for i in range(n))
    assert seq["self_ns"] < children, (seq, children)
    hooks = z[mt.OVERHEAD_ZONE]
    assert hooks["count"] == steps * (n + 1)  # every module, every step
    assert hooks["category"] == "none"


def test_fast_path_modules_that_never_ran_are_not_zero(tmp_path):
    """nn.TransformerEncoder in eval mode under no_grad runs each layer as
    one fused operator: the layers' children never run. They are reported
    as not run, the layers (not leaves) are the slowest, and the layers'
    FLOPs are those of their own operators, as torch counts them."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2).eval()
    x = torch.randn(2, 8, 32)
    with mlprof.Profiler(output=str(tmp_path / "t.mlprof")) as prof:
        mp = mt.profile_model(enc, prof)
        with torch.no_grad():
            for _ in range(3):
                enc(x)
        s = prof.summary()
        rows = {r["path"]: r for r in mp.layers(s)}
        slowest = [r["path"] for r in mp.slowest(3, s)]
        report = mp.report(3, s)
        mp.remove()
    with torch.no_grad(), torch.autograd.profiler.profile(
            with_flops=True) as tp:
        enc(x)
    torch_flops = sum(e.flops for e in tp.function_events)

    assert sorted(slowest) == ["layers.0", "layers.1"]
    for p in ("layers.0", "layers.1"):
        assert rows[p]["ran"] and rows[p]["innermost"] and not rows[p]["leaf"]
        assert rows[p]["forward"]["count"] == 3
    idle = [p for p, r in rows.items() if not r["ran"]]
    assert "layers.0.linear1" in idle and "layers.1.self_attn" in idle
    for p in idle:
        assert rows[p]["forward"] is None and rows[p]["backward"] is None
        assert rows[p]["flops"] == 0 and not rows[p]["innermost"]
    assert "never ran (16)" in report
    assert "layers" not in rows  # a ModuleList is never called
    assert torch_flops > 0
    assert mp.total_flops == torch_flops
    assert mp.flops["layers.0"] + mp.flops["layers.1"] == torch_flops


def test_layer_names_carry_the_module_type(tmp_path):
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(),
                          nn.Sequential(nn.Linear(4 * 6 * 6, 5)))
    with mlprof.Profiler(output=str(tmp_path / "n.mlprof")) as prof:
        with mt.profile_model(model, prof) as mp:
            model(torch.randn(2, 3, 8, 8)).sum().backward()
        s = prof.summary()
    names = set(zones(s))
    for name in ("Sequential:forward", "0 (Conv2d):forward",
                 "1 (ReLU):forward", "3 (Sequential):backward",
                 "3.0 (Linear):forward", "3.0 (Linear):backward"):
        assert name in names, name
    row = next(r for r in mp.layers(s) if r["path"] == "3.0")
    assert (row["name"], row["type"]) == ("3.0 (Linear)", "Linear")
    root = next(r for r in mp.layers(s) if r["path"] == "")
    assert (root["name"], root["type"]) == ("Sequential", "Sequential")


def test_backward_flops_count_only_the_gradients_computed(tmp_path):
    """The first layer's input needs no gradient: its backward computes the
    weights' gradient only (once its forward FLOPs, not twice). A frozen
    layer computes only its input's gradient."""
    model = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 32),
                          nn.Linear(32, 8))
    for p in model[2].parameters():
        p.requires_grad_(False)
    with mlprof.Profiler(output=str(tmp_path / "b.mlprof")) as prof:
        with mt.profile_model(model, prof) as mp:
            model(torch.randn(4, 16)).sum().backward()
        z = zones(prof.summary())

    def bwd(i):
        return mt._unit(z["%d (Linear):backward" % i], "flops")["n"]
    assert bwd(0) == mp.flops["0"]
    assert bwd(1) == 2 * mp.flops["1"]
    assert bwd(2) == mp.flops["2"]


def test_backward_zones_every_nth_forward(tmp_path):
    """backward_every=3: the model's forwards 0, 3 and 6 of 7 get backward
    zones (the hooks on the autograd graph cost most, issue #11); every
    forward gets its forward zone."""
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
    with mlprof.Profiler(output=str(tmp_path / "e.mlprof")) as prof:
        with mt.profile_model(model, prof, backward_every=3):
            for _ in range(7):
                model(torch.randn(4, 8)).sum().backward()
        z = zones(prof.summary())
    for name in ("Sequential", "0 (Linear)", "1 (Tanh)", "2 (Linear)"):
        assert z[name + ":forward"]["count"] == 7, name
        assert z[name + ":backward"]["count"] == 3, name
    assert z[mt.OVERHEAD_ZONE]["count"] == 3 * 4


def test_backward_every_must_be_a_positive_integer(tmp_path):
    model = nn.Linear(2, 2)
    with mlprof.Profiler(output=str(tmp_path / "v.mlprof")) as prof:
        for bad in (0, -1, 1.5, True, "2"):
            with pytest.raises(ValueError, match="backward_every"):
                mt.profile_model(model, prof, backward_every=bad)


def test_hooked_modules_are_in_the_session_metadata(tmp_path):
    """Which modules were hooked, with their parameters, reaches the profile
    (session metadata), so that mlprof html marks those that never ran."""
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    enc = nn.TransformerEncoder(layer, 1).eval()
    out = str(tmp_path / "m.mlprof")
    with mlprof.Profiler(output=out) as prof:
        mp = mt.profile_model(enc, prof)
        with torch.no_grad():
            enc(torch.randn(2, 4, 16))
        rows = {r["path"]: r for r in mp.layers(prof.summary())}
        mp.remove()
    meta = mlprof.report(out)["processes"][0]["meta"]
    layers = json.loads(meta[mt.LAYERS_META + "TransformerEncoder"])
    assert [m["zone"] for m in layers] == [r["name"] for r in rows.values()]
    by_path = {m["path"]: m for m in layers}
    assert by_path["layers.0.linear1"] == {
        "zone": "layers.0.linear1 (Linear)", "path": "layers.0.linear1",
        "type": "Linear", "leaf": True, "params": 16 * 32 + 32}
    assert by_path[""]["params"] == sum(p.numel() for p in enc.parameters())
    assert not by_path["layers.0"]["leaf"]
    # Never ran: hooked, yet no zone in the profile.
    names = {z["name"] for z in mlprof.report(out)["zones"]}
    assert "layers.0.linear1 (Linear):forward" not in names
    assert not rows["layers.0.linear1"]["ran"]
