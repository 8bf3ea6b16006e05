"""Findings on a run with backend="torch": torch.profiler keeps its events in
the process's memory until it stops, and its operators are not the user's
code (issue #11)."""
import json
import os
import subprocess

import pytest

torch = pytest.importorskip("torch")

import mlprof  # noqa: E402


def test_torch_profiler_buffers_are_not_blamed_on_operators(tmp_path,
                                                            build_dir):
    out = tmp_path / "ops.mlprof"
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    with mlprof.Profiler(output=str(out), backend="torch",
                         sample_interval=0.01) as prof:
        for _ in range(300):
            with prof.zone("step"):
                model(torch.randn(32, 256)).sum().backward()
            prof.step()
    rep = json.loads(subprocess.run(
        [os.path.join(build_dir, "mlprof"), "report", str(out), "--format",
         "json"], check=True, capture_output=True, text=True).stdout)
    assert any(t["track"] for t in rep["threads"]), "no torch ops track"
    for leak in rep["leaks"]:
        assert not [z for z in leak["zones"] if "::" in z["name"]], leak
    for f in rep["findings"]:
        if f["type"] == "memory_leak":
            assert not (f["zone"] or "").startswith("aten::"), f
            assert "another profiler" in f["summary"], f
            assert "torch.profiler" in f["recommendation"], f
            assert f["evidence"]["other_profiler_spans"] > 0, f
