"""mlprof.torch on Debian's python3-torch (CPU): per-module zones, FLOPs,
training breakdown, DataLoader workers."""
import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import mlprof
import mlprof.torch as mt
from mlprof import _mlprof


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8),
            nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(16 * 8 * 8, 32),
                                  nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x):
        return self.head(self.features(x))


LEAVES = ["features.0", "features.1", "features.2", "features.3",
          "features.4", "features.5", "head.0", "head.1", "head.2", "head.3"]


def make_loader(workers=2, n=192, bs=16):
    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(n, 3, 16, 16), torch.randint(0, 10, (n,)))
    return DataLoader(ds, batch_size=bs, num_workers=workers)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small CNN trained for 8 steps with num_workers=2, hooks on."""
    out = str(tmp_path_factory.mktemp("cnn")) + "/"
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with mlprof.Profiler(output=out) as prof:
        mp = mt.profile_model(model, prof, backward_every=1)
        res = mt.profile_training(model, make_loader(), opt,
                                  nn.CrossEntropyLoss(), 8, prof=prof,
                                  model_profile=mp)
        data = mt.profile_data_loading(make_loader(), 6, prof=prof)
    return prof, mp, res, data


def test_a_zone_for_every_leaf_forward_and_backward(trained):
    prof, mp, res, _ = trained
    z = {x["name"]: x for x in res["summary"]["zones"]}
    assert mp.leaves == set(LEAVES)
    for leaf in LEAVES:
        name = mp.labels[leaf]
        assert z[name + ":forward"]["count"] == 8, leaf
        assert z[name + ":forward"]["category"] == "forward"
        if leaf == "features.2":
            # ReLU(inplace=True) returns its input: its backward is inside
            # the zone of features.1 (test_torch_backward.py).
            assert name + ":backward" not in z
            continue
        assert z[name + ":backward"]["count"] == 8, leaf
        assert z[name + ":backward"]["category"] == "backward"
    for module in ("SmallCNN", "features (Sequential)", "head (Sequential)"):
        assert z[module + ":forward"]["count"] == 8
        assert z[module + ":backward"]["count"] == 8
    assert z["SmallCNN:backward"]["total_ns"] <= \
        z["train_backward"]["total_ns"]
    # forward zones nest inside the model's forward, inside train_forward
    assert z["SmallCNN:forward"]["total_ns"] <= z["train_forward"]["total_ns"]
    assert _mlprof.open_depth() == 0


def test_breakdown_sums_to_step_time_within_5_percent(trained):
    _, mp, res, _ = trained
    assert res["steps"] == 8
    assert 0.95 <= res["parts_share"] <= 1.0, res["parts_share"]
    total = sum(p["total_ns"] for p in res["parts"].values())
    assert abs(total - res["step_total_ns"]) <= 0.05 * res["step_total_ns"]
    assert res["samples_per_s"] > 0
    assert 0 < res["data_wait_share"] < 1
    text = mt.format_training(res)
    assert "waiting for data" in text and "slowest layers" in text
    assert set(res["slowest_layers"]) <= {mp.labels[n] for n in LEAVES}


def test_dataloader_workers_write_their_own_profiles(trained):
    _, _, res, data = trained
    assert data["num_workers"] == 2 and data["batches"] == 6
    assert data["batch_size"] == 16
    assert data["samples_per_s"] > 0 and data["wait_mean_ns"] > 0
    assert data["bytes_per_batch"] == 16 * 3 * 16 * 16 * 4 + 16 * 8
    workers = data["worker_processes"]
    assert len(workers) >= 2
    assert all(w["clean_end"] and w["spans"] > 0 for w in workers)
    assert data["worker_fetch"]["count"] >= 6
    names = {t["name"] for t in data["summary"]["threads"]}
    assert {"DataLoader worker 0", "DataLoader worker 1"} <= names


def test_flops_land_in_layer_zones(trained):
    _, mp, res, _ = trained
    z = {x["name"]: x for x in res["summary"]["zones"]}
    f = mp.flops["head.1"]
    assert f == 2 * 16 * 1024 * 32 + 16 * 32
    assert mt._unit(z["head.1 (Linear):forward"], "flops")["n"] == 8 * f
    assert mt._unit(z["head.1 (Linear):backward"], "flops")["n"] == 8 * 2 * f
    rows = {r["path"]: r for r in mp.layers(res["summary"])}
    assert rows["head.1"]["forward"]["flop_per_s"] > 0
    assert mp.total_flops == sum(mp.flops[n] for n in LEAVES)


def test_linear_and_conv_flops_are_analytical():
    x = torch.randn(4, 20)
    lin = nn.Linear(20, 30)
    assert mt.module_flops(lin, (x,), lin(x)) == 2 * 4 * 20 * 30 + 4 * 30
    lin_nb = nn.Linear(20, 30, bias=False)
    x3 = torch.randn(2, 5, 20)
    assert mt.module_flops(lin_nb, (x3,), lin_nb(x3)) == 2 * 10 * 20 * 30
    img = torch.randn(2, 3, 16, 16)
    conv = nn.Conv2d(3, 8, 3, padding=1)
    out = conv(img)
    assert mt.module_flops(conv, (img,), out) == \
        2 * 8 * 16 * 16 * (2 * 3 * 9) + 2 * 8 * 16 * 16
    g = nn.Conv2d(8, 8, 3, stride=2, groups=4, bias=False)
    y = g(out)
    assert y.shape == (2, 8, 7, 7)
    assert mt.module_flops(g, (out,), y) == 2 * 8 * 7 * 7 * (2 * 2 * 9)
    c1 = nn.Conv1d(4, 6, 5)
    s = torch.randn(3, 4, 20)
    assert mt.module_flops(c1, (s,), c1(s)) == 3 * 6 * 16 * (2 * 4 * 5) + \
        3 * 6 * 16
    c3 = nn.Conv3d(2, 4, (1, 3, 3), bias=False)
    v = torch.randn(1, 2, 4, 8, 8)
    assert mt.module_flops(c3, (v,), c3(v)) == 4 * 4 * 6 * 6 * (2 * 2 * 9)


def test_other_flop_formulas():
    assert mt.matmul_flops((8, 16, 32), (8, 32, 4)) == 2 * 8 * 16 * 32 * 4
    assert mt.matmul_flops((16, 32), (32,)) == 2 * 16 * 32
    mha = nn.MultiheadAttention(16, 4, batch_first=True)
    q = torch.randn(2, 10, 16)
    f = mt.module_flops(mha, (q, q, q), mha(q, q, q))
    n, l, e = 2, 10, 16
    assert f == 4 * 2 * n * l * e * e + 2 * 2 * n * l * l * e + \
        5 * n * 4 * l * l
    x = torch.randn(4, 8, 5, 5)
    assert mt.module_flops(nn.BatchNorm2d(8), (x,), x) == 5 * x.numel()
    assert mt.module_flops(nn.LayerNorm(5), (x,), x) == 5 * x.numel()
    assert mt.module_flops(nn.ReLU(), (x,), x) == x.numel()
    assert mt.module_flops(nn.GELU(), (x,), x) == 8 * x.numel()
    assert mt.module_flops(nn.Dropout(), (x,), x) == 0


def test_attention_is_profiled_as_one_layer(tmp_path):
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
    mha = nn.MultiheadAttention(16, 4, batch_first=True)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = mha
            self.mlp = model

        def forward(self, x):
            return self.mlp(self.attn(x, x, x)[0])

    b = Block()
    with mlprof.Profiler(output=str(tmp_path / "a.mlprof")) as prof:
        mp = mt.profile_model(b, prof)
        b(torch.randn(2, 10, 16)).sum().backward()
        s = prof.summary()
    z = {x["name"] for x in s["zones"]}
    assert "attn (MultiheadAttention):forward" in z
    assert "attn (MultiheadAttention):backward" in z
    assert "attn.out_proj:forward" not in mp.names
    assert mp.flops["attn"] > 0


def test_hooks_remove_and_exceptions_recover(tmp_path):
    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    model = nn.Sequential(nn.Linear(4, 4), Boom())
    with mlprof.Profiler(output=str(tmp_path / "h.mlprof")) as prof:
        mp = mt.profile_model(model, prof, backward=False)
        with pytest.raises(RuntimeError):
            model(torch.randn(2, 4))
        model[1] = nn.Identity()
        model(torch.randn(2, 4))  # the next forward closes stale zones
        assert _mlprof.open_depth() == 0
        mp.remove()
        model(torch.randn(2, 4))
        s = prof.summary()
    z = {x["name"]: x for x in s["zones"]}
    assert z["Sequential:forward"]["count"] == 2
    assert z["0 (Linear):forward"]["count"] == 2


def test_depth_limits_the_modules_hooked(tmp_path):
    model = SmallCNN()
    with mlprof.Profiler(output=str(tmp_path / "d.mlprof")) as prof:
        with mt.profile_model(model, prof, depth=1) as mp:
            model(torch.randn(2, 3, 16, 16)).sum().backward()
        s = prof.summary()
    assert set(mp.names) == {"SmallCNN", "features", "head"}
    z = {x["name"] for x in s["zones"]}
    assert "features (Sequential):backward" in z
    assert not any(n.startswith("features.0") for n in z)


def test_profile_preprocessing(tmp_path):
    with mlprof.Profiler(output=str(tmp_path / "p.mlprof")) as prof:
        res = mt.profile_preprocessing(lambda x: x * 2, range(50), prof=prof)
    assert res["samples"] == 50 and res["results"][3] == 6
    assert res["samples_per_s"] > 0 and res["p50_ns"] > 0
