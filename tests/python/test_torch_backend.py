"""backend="torch" and mlprof.torch.import_profile: torch.profiler's
operators and kernels on tracks of the profile, beside mlprof's zones; the
track_spans binding under them."""
import json
import os
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import mlprof
import mlprof.torch as mt
from mlprof import _mlprof
from conftest import child_env

TOLERANCE_NS = 5_000  # torch 1.x stamps events in whole microseconds
BATCH, K, N = 4, 32, 16  # the custom module's matmul: (BATCH, K) @ (K, N)
FC_IN = 4 * 8 * 8


class MatMix(nn.Module):
    """A custom module whose forward is a bare torch.matmul: the hook-based
    FLOP counter has no formula for it, torch.profiler counts aten::mm."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(K, N))

    def forward(self, x):
        return torch.matmul(x, self.w)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.act = nn.ReLU()
        self.flat = nn.Flatten()
        self.fc = nn.Linear(FC_IN, K)
        self.mix = MatMix()

    def forward(self, x):
        return self.mix(self.fc(self.flat(self.act(self.conv(x)))))


def train(prof, steps, model=None):
    torch.manual_seed(0)
    model = model or Net()
    x = torch.randn(BATCH, 3, 8, 8)
    with mt.profile_model(model, prof, backward_every=1):
        for _ in range(steps):
            with prof.zone("train_step"):
                model(x).sum().backward()
            prof.step()
    return model


def zones(summary):
    return {z["name"]: z for z in summary["zones"]}


def spans_named(events, *names):
    return [s for s in events["spans"] if s["name"] in names]


def assert_inside(inner, outer):
    """Every inner span begins and ends within some outer span."""
    assert inner and outer
    for s in inner:
        assert any(o["begin_ns"] - TOLERANCE_NS <= s["begin_ns"] and
                   s["end_ns"] <= o["end_ns"] + TOLERANCE_NS
                   for o in outer), (s, outer)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Three training steps of Net, hooks and backend="torch"."""
    path = str(tmp_path_factory.mktemp("torch") / "run.mlprof")
    with mlprof.Profiler(output=path, backend="torch") as prof:
        train(prof, 3)
    return prof, prof.summary(), mlprof.read_events(path)


def test_operator_rows_beside_module_zones(trained):
    _, s, ev = trained
    z = zones(s)
    for name in ("train_step", "conv (Conv2d):forward", "fc (Linear):backward", "mix (MatMix):forward",
                 "aten::conv2d", "aten::addmm", "aten::mm", "aten::matmul"):
        assert name in z, name
    assert z["aten::conv2d"]["count"] == z["conv (Conv2d):forward"]["count"] == 3
    assert not any(n.startswith("ProfilerStep") for n in z)
    tracks = [t for t in s["threads"] if t["name"] == mt.MAIN_TRACK]
    assert len(tracks) == 1 and tracks[0]["spans"] > 0
    assert mt.MAIN_TRACK in ev["threads"].values()


def test_matmul_flops_of_a_custom_module(trained):
    # aten::mm per step: the forward matmul and the two of its backward,
    # each 2*BATCH*K*N, and the two of Linear's backward, 2*BATCH*FC_IN*K.
    _, s, ev = trained
    per_call = {2 * BATCH * K * N: 3, 2 * BATCH * FC_IN * K: 2}
    calls = [sp["units"].get("flops") for sp in spans_named(ev, "aten::mm")]
    assert sorted(calls) == sorted(f for f, n in per_call.items()
                                   for _ in range(3 * n))
    mm = zones(s)["aten::mm"]
    assert mm["count"] == 15
    assert mt._unit(mm, "flops")["n"] == sum(3 * n * f
                                             for f, n in per_call.items())
    assert mt._unit(mm, "flops")["per_s"] > 0
    assert mt._unit(zones(s)["aten::addmm"], "flops")["n"] == \
        3 * 2 * BATCH * FC_IN * K


def test_operators_lie_inside_the_zones_that_called_them(trained):
    _, _, ev = trained
    assert_inside(spans_named(ev, "aten::conv2d"),
                  spans_named(ev, "conv (Conv2d):forward"))
    assert_inside(spans_named(ev, "aten::addmm"),
                  spans_named(ev, "fc (Linear):forward"))
    assert_inside(spans_named(ev, "aten::matmul"),
                  spans_named(ev, "mix (MatMix):forward"))
    assert_inside(spans_named(ev, "aten::mm"), spans_named(
        ev, "mix (MatMix):forward", "mix (MatMix):backward", "fc (Linear):backward"))
    assert_inside(spans_named(ev, "aten::convolution_backward"),
                  spans_named(ev, "conv (Conv2d):backward"))


def test_operators_nest_on_their_track(trained):
    _, _, ev = trained
    conv = spans_named(ev, "aten::conv2d", "aten::convolution")
    assert {(s["name"], s["depth"]) for s in conv} == {
        ("aten::conv2d", 0), ("aten::convolution", 1)}


def test_mlprof_report_shows_operator_rows(trained, build_dir):
    prof, _, _ = trained
    r = subprocess.run([os.path.join(build_dir, "mlprof"), "report",
                        prof.path], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = [line.strip() for line in r.stdout.splitlines()]
    for name in ("aten::conv2d", "aten::mm", "conv (Conv2d):forward"):
        assert any(row.startswith(name + " ") for row in rows), name
    assert mt.MAIN_TRACK in r.stdout


def test_schedule_imports_only_active_steps(tmp_path):
    sched = mlprof.schedule(wait=1, active=2, repeat=1)
    with mlprof.Profiler(output=str(tmp_path / "s.mlprof"), schedule=sched,
                         backend="torch") as prof:
        train(prof, 4)  # steps 1 and 2 recorded
        during = zones(prof.summary())  # window over: imported already
        train(prof, 2)
    after = zones(prof.summary())
    for z in (during, after):
        assert z["conv (Conv2d):forward"]["count"] == 2
        assert z["aten::conv2d"]["count"] == 2
        assert z["aten::mm"]["count"] == 10
    ev = mlprof.read_events(prof.path)
    assert_inside(spans_named(ev, "aten::conv2d"),
                  spans_named(ev, "conv (Conv2d):forward"))


def test_a_failed_import_is_a_warning(tmp_path, monkeypatch):
    def full(track, spans):
        raise mlprof.Error("track_spans: out of memory")
    monkeypatch.setattr(_mlprof, "track_spans", full)
    with pytest.warns(RuntimeWarning, match="not all imported"):
        with mlprof.Profiler(output=str(tmp_path / "w.mlprof"),
                             backend="torch",
                             schedule=mlprof.schedule(active=1)) as prof:
            train(prof, 2)
    assert zones(prof.summary())["conv (Conv2d):forward"]["count"] == 2


def test_backend_choices():
    with pytest.raises(ValueError, match="'mlprof', 'torch'"):
        mlprof.Profiler(backend="bogus")
    with pytest.raises(ValueError):
        mlprof.Profiler(torch_options={"record_shapes": True})
    with pytest.raises(ValueError):
        mlprof.Profiler(backend="torch", torch_options={"schedule": None})
    assert mlprof.Profiler(backend="mlprof").backend == "mlprof"
    assert mlprof.Profiler().backend == "mlprof"


def test_backend_torch_without_torch_is_a_clear_error():
    code = textwrap.dedent("""
        import sys
        sys.modules["torch"] = None  # as if torch were not installed
        import mlprof
        try:
            mlprof.Profiler(backend="torch")
        except mlprof.Error as e:
            print("Error:", e)
    """)
    r = subprocess.run([sys.executable, "-c", code], env=child_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "Error: backend='torch' needs PyTorch" in r.stdout


def test_torch_options_reach_torch_profiler(tmp_path):
    with mlprof.Profiler(output=str(tmp_path / "o.mlprof"), backend="torch",
                         torch_options={"record_shapes": True}) as prof:
        assert prof._torch.record_shapes and prof._torch.with_flops
        train(prof, 1)
    assert "aten::conv2d" in zones(prof.summary())


# ---- import_profile with fake events: devices, threads, clocks -------------

class FakeEvent:
    """A _KinetoEvent of torch 1.x: wall-clock microseconds."""

    def __init__(self, name, begin_ns, dur_ns, tid=1, device="CPU", index=0,
                 stream=0, flops=0):
        self._name, self._begin, self._dur = name, begin_ns, dur_ns
        self._tid, self._index, self._stream = tid, index, stream
        self._device = getattr(torch._C._autograd.DeviceType, device)
        self._flops = flops

    def name(self):
        return self._name

    def start_us(self):
        return self._begin // 1000

    def duration_us(self):
        return self._dur // 1000

    def start_thread_id(self):
        return self._tid

    def device_type(self):
        return self._device

    def device_index(self):
        return self._index

    def device_resource_id(self):
        return self._stream

    def flops(self):
        return self._flops


class FakeNsEvent(FakeEvent):
    """A newer torch's event: nanosecond accessors."""

    def start_ns(self):
        return self._begin

    def duration_ns(self):
        return self._dur


def fake_profile(events):
    results = SimpleNamespace(events=lambda: events)
    return SimpleNamespace(profiler=SimpleNamespace(kineto_results=results))


def test_import_of_fake_events(tmp_path):
    prof = mlprof.Profiler(output=str(tmp_path / "f.mlprof")).start()
    time.sleep(0.02)  # the events below are from after the session's start
    wall, mono = time.time_ns(), time.monotonic_ns()
    w0 = wall - 5_000_000  # 5 ms ago, torch 1.x's clock: wall, in µs
    counts = mt.import_profile(fake_profile([
        FakeEvent("ProfilerStep#3", w0 - 1000, 900_000, tid=2),
        FakeEvent("aten::mm", w0, 100_000, tid=2, flops=1000),
        FakeEvent("aten::resolve_conj", w0 + 10_000, 1000, tid=2),
        # rounded to µs, a callee can seem to end after its caller
        FakeEvent("aten::t", w0 + 60_000, 41_000, tid=2),
        FakeEvent("[memory]", w0 + 20_000, 0, tid=2),
        FakeEvent("AddmmBackward0", w0 + 200_000, 50_000, tid=1),
        FakeEvent("sgemm_kernel", w0 + 50_000, 30_000, device="CUDA",
                  index=0, stream=7, flops=77),
        FakeEvent("sgemm_kernel", w0 + 60_000, 30_000, device="CUDA",
                  index=1, stream=3),
    ]), prof)
    assert counts == {"torch ops": 3, "torch ops (thread 1)": 1,
                      "cuda:0 stream 7": 1, "cuda:1 stream 3": 1}
    m0 = mono - 2_000_000  # a newer torch on the monotonic clock, in ns
    assert mt.import_profile(fake_profile([
        FakeNsEvent("aten::add", m0 + 123, 4567, tid=5)])) == {"torch ops": 1}
    prof.stop()
    ev = mlprof.read_events(prof.path)
    start = ev["header"]["start_mono_ns"]
    tracks = ev["threads"]
    by_name = {s["name"]: s for s in ev["spans"]}
    assert set(by_name) == {"aten::mm", "aten::resolve_conj", "aten::t",
                            "AddmmBackward0", "sgemm_kernel", "aten::add"}
    mm = by_name["aten::mm"]
    assert tracks[mm["tid"]] == "torch ops"
    # wall -> monotonic: within the µs torch 1.x keeps and the offset's read
    assert abs(start + mm["begin_ns"] - (mono - 5_000_000)) < 20_000
    assert mm["end_ns"] - mm["begin_ns"] == 100_000
    assert mm["units"] == {"flops": 1000}
    assert by_name["aten::resolve_conj"]["depth"] == 1
    assert by_name["aten::t"]["depth"] == 1
    assert by_name["aten::t"]["end_ns"] == mm["end_ns"]
    assert tracks[by_name["AddmmBackward0"]["tid"]] == "torch ops (thread 1)"
    kernels = {tracks[s["tid"]]: s for s in ev["spans"]
               if s["name"] == "sgemm_kernel"}
    assert set(kernels) == {"cuda:0 stream 7", "cuda:1 stream 3"}
    assert kernels["cuda:0 stream 7"]["units"] == {"flops": 77}
    add = by_name["aten::add"]  # monotonic ns: taken as they are
    assert (start + add["begin_ns"], start + add["end_ns"]) == \
        (m0 + 123, m0 + 123 + 4567)
    assert tracks[add["tid"]] == "torch ops"


def test_import_needs_a_finished_profile_and_a_running_session(tmp_path):
    prof = mlprof.Profiler(output=str(tmp_path / "e.mlprof"))
    with pytest.raises(mlprof.Error, match="not running"):
        mt.import_profile(fake_profile([]), prof)
    with pytest.raises(mlprof.Error, match="no results"):
        mt.import_profile(torch.profiler.profile())
    with torch.profiler.profile() as tp:
        torch.ones(2).sum()
    with pytest.raises(mlprof.Error, match="no session"):
        mt.import_profile(tp)
    with prof:
        assert mt.import_profile(tp, prof)["torch ops"] >= 2
    assert "aten::sum" in zones(prof.summary())


def test_track_spans_batches_keep_trees_whole(tmp_path):
    # More spans than one call takes, in a shuffled order: every tree
    # still nests, nothing is lost under a small memory cap.
    prof = mlprof.Profiler(output=str(tmp_path / "b.mlprof"),
                           memory_cap=1 << 20).start()
    t = _mlprof.monotonic_ns()
    spans = []
    for i in range(40_000):
        b = t + 1000 * i
        spans += [("parent", 0, b, b + 900), ("child", "forward", b + 100,
                                              b + 800, "flops", 3),
                  ("leaf", 0, b + 200, b + 300, None, 0)]
    spans = spans[1::2] + spans[::2]
    assert _mlprof.track_spans("batches", spans) == len(spans)
    with pytest.raises(ValueError):
        _mlprof.track_spans("batches", [("x", 0, 5, 4)])
    with pytest.raises(TypeError):
        _mlprof.track_spans("batches", [("x", 0, 5)])
    prof.stop()
    depth = {}
    for s in mlprof.read_events(prof.path)["spans"]:
        depth.setdefault((s["name"], s["depth"]), 0)
        depth[(s["name"], s["depth"])] += 1
    assert depth == {("parent", 0): 40_000, ("child", 1): 40_000,
                     ("leaf", 2): 40_000}
    z = zones(prof.summary())
    assert mt._unit(z["child"], "flops")["n"] == 120_000
    assert z["child"]["category"] == "forward"
    assert prof.summary()["dropped"] == 0



def test_track_spans_identical_intervals_keep_given_order(tmp_path):
    """Of two spans with the same times (an operator and the one it wraps,
    both under a microsecond), the one given first encloses the other."""
    prof = mlprof.Profiler(output=str(tmp_path / "t.mlprof")).start()
    t = _mlprof.monotonic_ns()
    _mlprof.track_spans("a", [("outer", 0, t + 10, t + 20),
                              ("inner", 0, t + 10, t + 20)])
    _mlprof.track_spans("b", [("inner", 0, t + 30, t + 40),
                              ("outer", 0, t + 30, t + 40)])
    prof.stop()
    ev = mlprof.read_events(prof.path)
    tracks = {tid: name for tid, name in ev["threads"].items()}
    got = {(tracks[s["tid"]], s["name"]): s["depth"] for s in ev["spans"]}
    assert got == {("a", "outer"): 0, ("a", "inner"): 1,
                   ("b", "inner"): 0, ("b", "outer"): 1}


JOINED = textwrap.dedent("""
    import torch, mlprof
    from torch import nn
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    with mlprof.Profiler(backend="torch") as prof:
        print("joined", prof.joined)
        for _ in range(3):
            with prof.zone("step"):
                model(torch.randn(4, 8)).sum().backward()
            prof.step()
""")


def test_backend_torch_in_a_joined_session(tmp_path, build_dir):
    script = tmp_path / "joined.py"
    script.write_text(JOINED)
    run_dir = tmp_path / "run"
    r = subprocess.run([os.path.join(build_dir, "mlprof"), "run", "-q", "-o",
                        str(run_dir), "--", sys.executable, str(script)],
                       env=child_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "joined True" in r.stdout
    rep = json.loads(subprocess.run(
        [os.path.join(build_dir, "mlprof"), "report", "-f", "json",
         str(run_dir)], capture_output=True, text=True).stdout)
    z = zones(rep)
    assert z["step"]["count"] == 3 and z["aten::addmm"]["count"] == 6
    assert any(t["name"] == mt.MAIN_TRACK for t in rep["threads"])
