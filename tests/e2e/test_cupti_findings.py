"""Findings from CUDA activity (src/analyze/gpu.c), against the test double
tests/fake_cupti (no GPU here): tests/programs/cupti_demo in mode "gaps"
leaves the GPU idle while the step's thread waits in a zone "data_wait",
launches its kernel from a zone "forward", copies 1 MB to the device and
synchronises in every step; in mode "busy" its kernels run back to back
over each whole step, which must give no finding about the GPU (the
false-positive test)."""
from conftest import mlprof, report_json
from test_cupti import DEMO, env_for


def findings_of(tmp_path, mode, steps=6, script=""):
    out = tmp_path / "run"
    r = mlprof("run", "-o", out, "--", DEMO, steps, mode, check=False,
               env=env_for(tmp_path, script=script))
    assert r.returncode == 0, r.stderr
    rep = report_json(out)
    return {f["type"]: f for f in rep["findings"]}, rep


def test_idle_gaps_copies_and_syncs_per_step(tmp_path):
    found, rep = findings_of(tmp_path, "gaps")
    idle = found["gpu_idle"]
    ev = idle["evidence"]
    # Per step: 4 ms in data_wait with nothing on the GPU, then 1.8 ms of
    # kernel and copy, 0.6 ms of synchronisation: the GPU is idle about
    # 70% of a step (sleeps on a shared machine run long, so a range).
    assert ev["gpu"] == 0 and ev["steps"] == 6
    assert 0.4 < ev["idle_share"] < 0.9, ev
    assert idle["zone"] == "data_wait", idle
    # The gaps were data_wait's and the step's own time (the sync): all of
    # them under a zone, data_wait's the most.
    assert ev["top_zone_gap_share"] > 0.6, ev
    assert ev["no_zone_gap_share"] == 0, ev
    assert "data_wait" in idle["summary"]
    assert "DataLoader" in idle["recommendation"]
    assert idle["severity"] > 30

    copies = found["host_device_copies"]["evidence"]
    assert copies["copies_per_step"] == 1
    assert copies["copy_bytes_per_step"] == 1 << 20
    assert copies["htod_count"] == 6 and copies["dtoh_count"] == 0
    assert 0.05 <= copies["copy_share"] < 0.5, copies
    assert "non_blocking" in found["host_device_copies"]["recommendation"]

    sync = found["host_sync"]
    assert sync["evidence"]["syncs_per_step"] == 1
    assert sync["evidence"]["sync_per_step_ns"] >= 600_000
    assert ".item()" in sync["recommendation"]

    text = mlprof("report", tmp_path / "run").stdout
    assert "gpu_idle" in text and "GPU 0 idle" in text

    # Each kernel goes to the zone its launching call was made in, by
    # CUPTI's correlation id; the id is no unit of work.
    kernels = next(z for z in rep["zones"] if z["name"] == "gemm_kernel")
    assert rep["gpu_launched"] == {
        "unattributed_kernels": 0, "unattributed_ns": 0,
        "zones": [{"zone": "forward", "kernels": 6,
                   "gpu_ns": kernels["total_ns"]}]}, rep["gpu_launched"]
    assert "GPU time launched by zone" in text
    assert [u["name"] for u in rep["units"]] == ["bytes"], rep["units"]
    assert "units" not in kernels or not kernels["units"], kernels


def test_launch_not_seen_is_unattributed(tmp_path):
    # CUPTI refuses the runtime API records (kind 5): the kernels still
    # carry their correlation ids, but no launch is there to match.
    found, rep = findings_of(tmp_path, "gaps", script="fail enable 5 15\n")
    launched = rep["gpu_launched"]
    assert launched["zones"] == [] and launched["unattributed_kernels"] == 6
    assert "gpu_idle" in found


def test_busy_gpu_gives_no_gpu_finding(tmp_path):
    found, rep = findings_of(tmp_path, "busy")
    # The steps are there and the kernels ran in them ...
    assert rep["steps"]["count"] == 6, rep["steps"]
    zones = {z["name"]: z for z in rep["zones"]}
    assert zones["gemm_kernel"]["count"] == 24
    # ... but the GPU never waited, nothing was copied or synchronised.
    for kind in ("gpu_idle", "host_device_copies", "host_sync"):
        assert kind not in found, found[kind]
    # Kernels without a correlation id are tied to no launch: no table.
    assert "gpu_launched" not in rep


def test_communication_not_overlapped(tmp_path):
    # Each step: a compute kernel over "forward", then an NCCL all-reduce
    # over "backward" with nothing beside it: half the step exposed.
    found, _ = findings_of(tmp_path, "comm")
    f = found["communication_exposed"]
    ev = f["evidence"]
    assert ev["nccl_kernels"] == 6 and ev["steps"] == 6
    assert 0.3 < ev["exposed_share"] < 0.7, ev
    assert ev["overlap_share"] < 0.05, ev
    assert "bucket_cap_mb" in f["recommendation"]
    assert "gpu_idle" not in found  # the GPU was busy throughout


def test_overlapped_communication_gives_no_finding(tmp_path):
    # The same all-reduce, run beside the compute kernel.
    found, rep = findings_of(tmp_path, "overlap")
    assert rep["steps"]["count"] == 6
    assert "communication_exposed" not in found, found["communication_exposed"]
