"""A gauge set per request (latency_ms) gets percentiles in the report, and
`mlprof report --slo GAUGE=NUMBER` is an objective on its values (issue #21,
item 12)."""
import json
import os
import subprocess
import sys

from conftest import BUILD

# 200 requests: latency_ms = 1, 2, ..., 200 (in shuffled order), one a
# millisecond; and a loss gauge nobody targets.
PROGRAM = """
import random, sys, time, mlprof
values = list(range(1, 201))
random.Random(7).shuffle(values)
with mlprof.Profiler(output=sys.argv[1]) as prof:
    for v in values:
        prof.gauge("latency_ms", float(v))
        time.sleep(0.001)
    prof.gauge("loss", 0.5)
"""


def mlprof(*args):
    return subprocess.run([os.path.join(BUILD, "mlprof"), *args],
                          capture_output=True, text=True, timeout=60)


def test_gauge_percentiles_and_objective(tmp_path):
    prog = tmp_path / "serve.py"
    prog.write_text(PROGRAM)
    out = str(tmp_path / "serve.mlprof")
    subprocess.run([sys.executable, str(prog), out], check=True, timeout=60)
    r = mlprof("report", "-f", "json", "--slo", "latency_ms=190", out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    [lat] = [c for c in doc["counters"] if c["name"] == "latency_ms"]
    # Nearest rank over 1..200: p50 the 100th value, p90 the 180th, p99 the
    # 198th.
    assert (lat["count"], lat["p50"], lat["p90"], lat["p99"]) == \
        (200, 100, 180, 198), lat
    [slo] = doc["slo"]
    assert slo["gauge"] == "latency_ms" and slo["zone"] is None, slo
    assert (slo["objective"], slo["count"], slo["over"]) == (190, 200, 10)
    assert (slo["p50"], slo["p95"], slo["p99"], slo["max"]) == \
        (100, 190, 198, 200), slo
    assert sum(w["count"] for w in slo["windows"]) == 200
    assert sum(w["over"] for w in slo["windows"]) == 10
    text = mlprof("report", "--slo", "latency_ms=190", out).stdout
    assert "Latency objectives" in text and "latency_ms" in text
    row = [ln for ln in text.splitlines()
           if ln.strip().startswith("latency_ms") and " of " in ln]
    assert row and row[0].split()[1:4] == ["190", "200", "10"], row
    # --slo-fail: exit 1 when a value went over, 0 when none did.
    assert mlprof("report", "--slo", "latency_ms=190", "--slo-fail",
                  out).returncode == 1
    assert mlprof("report", "--slo", "latency_ms=200", "--slo-fail",
                  out).returncode == 0
    # A value with a unit is a zone's objective, not the gauge's: no zone
    # latency_ms, so no calls.
    doc = json.loads(mlprof("report", "-f", "json", "--slo", "latency_ms=190ms",
                            out).stdout)
    assert doc["slo"][0]["zone"] == "latency_ms" and doc["slo"][0]["count"] == 0
    bad = mlprof("report", "--slo", "latency_ms=fast", out)
    assert bad.returncode == 2 and "neither a duration" in bad.stderr
