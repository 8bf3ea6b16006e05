"""Profiler(memory=...) (docs/memory.md): the mode it sets is what the
preloaded library records under `mlprof run`; outside it, a warning says
nothing is captured; a bad mode is refused."""
import json
import os
import subprocess
import sys

import pytest

import mlprof
from conftest import child_env

SCRIPT = """
import sys, mlprof
p = mlprof.Profiler(memory=sys.argv[1]).start()
with mlprof.zone("big"):
    blocks = [bytearray(1 << 16) for _ in range(64)]  # 4 MiB kept
p.stop()
print("active", mlprof._mlprof.memory_active())
"""


def test_bad_modes_are_refused():
    for bad in ("some", "sampled:", "sampled:0", "sampled:-5", 3, "ALL"):
        with pytest.raises(ValueError):
            mlprof.Profiler(memory=bad)


def test_outside_mlprof_run_a_warning_says_nothing_is_captured(tmp_path):
    with pytest.warns(UserWarning, match="captured only where libmlprof"):
        p = mlprof.Profiler(output=str(tmp_path / "p.mlprof"), memory="all")
        p.start()
    p.stop()
    assert not mlprof._mlprof.memory_active()


def test_memory_all_under_mlprof_run_is_exact(tmp_path, build_dir):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    out = {}
    for mode in ("all", "off"):
        run_dir = tmp_path / mode
        r = subprocess.run([os.path.join(build_dir, "mlprof"), "run", "-q",
                            "--no-torch", "-o", str(run_dir), "--",
                            sys.executable, str(script), mode],
                           env=child_env(), capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        assert ("active %s" % (mode == "all")) in r.stdout
        out[mode] = json.loads(subprocess.run(
            [os.path.join(build_dir, "mlprof"), "report", "-f", "json",
             str(run_dir)], capture_output=True, text=True).stdout)
    zones = {z["zone"]: z for z in out["all"]["memory"]["zones"]}
    # 64 blocks of 64 KiB (and their headers, less than a KiB each).
    assert 64 << 16 <= zones["big"]["allocated_bytes"] < (64 << 16) + 65536
    assert "big" not in {z["zone"] for z in out["off"]["memory"]["zones"]}
