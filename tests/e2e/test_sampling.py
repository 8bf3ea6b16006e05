"""Sampling through the real `mlprof run`: peak RSS, children that start
mid-run, GPUs through a scripted fake NVML, and sources that are missing."""
import csv
import io
import json
import os

from conftest import BUILD, mlprof, report_json

FAKE_NVML = os.path.join(BUILD, "fake_nvml", "libnvidia-ml.so.1")
PYTHON = "/usr/bin/python3"


def subject(rep, kind, ident):
    for s in rep["resources"]["subjects"]:
        if s["subject"] == kind and s["id"] == ident:
            return s
    raise AssertionError(f"no {kind} {ident} in "
                         f"{[(s['subject'], s['id']) for s in rep['resources']['subjects']]}")


def measure(subj, name):
    return next(m for m in subj["measures"] if m["name"] == name)


def test_peak_rss_of_a_500_mb_process(tmp_path):
    script = (
        "import os, resource, time\n"
        "b = bytearray(500 * 2**20)\n"
        "for i in range(0, len(b), 4096): b[i] = 1\n"
        "time.sleep(0.35)\n"
        "print(os.getpid(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)\n")
    out = tmp_path / "run"
    r = mlprof("run", "-q", "-o", out, "--", PYTHON, "-c", script)
    pid, truth = map(int, r.stdout.split())
    rep = report_json(out)
    peak = measure(subject(rep, "process", pid), "peak_rss_bytes")["max"]
    assert abs(peak - truth) <= 0.05 * truth, (peak, truth)
    assert rep["resources"]["tree"]["measures"]


def test_child_started_mid_run_is_in_the_tree(tmp_path):
    child = ("import os, time\n"
             "b = bytearray(64 * 2**20)\n"
             "for i in range(0, len(b), 4096): b[i] = 1\n"
             "print(os.getpid(), flush=True)\n"
             "time.sleep(0.5)\n")
    script = ("import subprocess, sys, time\n"
              "time.sleep(0.3)\n"
              f"subprocess.run([sys.executable, '-c', {child!r}], check=True)\n"
              "time.sleep(0.2)\n")
    out = tmp_path / "run"
    r = mlprof("run", "-q", "-o", out, "--", PYTHON, "-c", script)
    child_pid = int(r.stdout.split()[0])
    rep = report_json(out)
    tree = rep["resources"]["tree"]
    assert tree["processes"] >= 2
    kid = subject(rep, "process", child_pid)
    assert measure(kid, "rss_bytes")["max"] >= 64 * 2**20
    tree_rss = next(m for m in tree["measures"] if m["name"] == "rss_bytes")
    assert tree_rss["max"] >= measure(kid, "rss_bytes")["max"]  # the sum includes it


def test_missing_sources_say_why(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, MLPROF_NVML_LIB=str(tmp_path / "no-such-libnvidia-ml.so.1"))
    mlprof("run", "-q", "-o", out, "--", "sleep", "0.3", env=env)
    res = report_json(out)["resources"]
    by_name = {s["name"]: s for s in res["sources"]}
    assert by_name["proc"]["available"] and by_name["system"]["available"]
    assert not by_name["nvml"]["available"]
    assert "no NVML" in by_name["nvml"]["reason"]
    assert "no NVML" in res["gpu_absent"]
    for name in ("thermal", "energy"):  # this machine has neither; others may
        assert by_name[name]["available"] or by_name[name]["reason"]
    if not by_name["energy"]["available"]:
        assert res["energy"]["cpu_j"] is None and res["energy"]["cpu_absent"]
    text = mlprof("report", out).stdout
    assert "no NVML" in text


def write_script(tmp_path, text):
    path = tmp_path / "nvml.script"
    path.write_text(text)
    return path


def test_fake_gpus_reported_exactly(tmp_path):
    script = write_script(tmp_path, """
devices 4
name * Fake GPU 80GB
util * 40 20
util 2 75 30
memory * 1000000000 8000000000
temp * 61
power * 150000
energy * 1000000 0
clock * 1410
throttle * 0
fail 3 power 3
""")
    env = dict(os.environ, MLPROF_NVML_LIB=FAKE_NVML, FAKE_NVML_SCRIPT=str(script))
    out = tmp_path / "run"
    mlprof("run", "-q", "-o", out, "--", "sleep", "0.5", env=env)
    rep = report_json(out)
    res = rep["resources"]
    assert res["gpus"] == 4 and res["gpu_absent"] is None
    for i in range(4):
        gpu = subject(rep, "gpu", i)
        assert gpu["label"] == "Fake GPU 80GB"
        util = measure(gpu, "gpu_util_pct")
        want = 75 if i == 2 else 40
        assert util["min"] == util["max"] == want
        assert measure(gpu, "gpu_mem_used_bytes")["max"] == 1e9
        assert measure(gpu, "gpu_mem_total_bytes")["max"] == 8e9
        assert measure(gpu, "gpu_temp_c")["mean"] == 61
        assert measure(gpu, "gpu_sm_clock_mhz")["mean"] == 1410
    assert measure(subject(rep, "gpu", 0), "gpu_power_w")["mean"] == 150
    power3 = measure(subject(rep, "gpu", 3), "gpu_power_w")
    assert power3["count"] == 0 and "not supported" in power3["absent"]
    trace = tmp_path / "t.json"
    mlprof("trace", out, "-o", trace)
    counters = [e for e in json.loads(trace.read_text())["traceEvents"]
                if e["ph"] == "C" and e["name"] == "gpu_util_pct"]
    assert {e["args"]["value"] for e in counters} == {40, 75}


def test_gpu_lost_mid_run_stops_gpu_sampling_once(tmp_path):
    script = write_script(tmp_path, "devices 1\nname 0 Doomed\nutil 0 50 50\nlost 0 2\n")
    env = dict(os.environ, MLPROF_NVML_LIB=FAKE_NVML, FAKE_NVML_SCRIPT=str(script))
    out = tmp_path / "run"
    r = mlprof("run", "-q", "-o", out, "--sample-ms", "50", "--", "sleep", "0.6", env=env)
    assert r.returncode == 0
    assert r.stderr.count("sampling source nvml stopped") == 1
    rep = report_json(out)
    nvml = next(s for s in rep["resources"]["sources"] if s["name"] == "nvml")
    assert not nvml["available"] and "lost" in nvml["reason"]
    gpu = subject(rep, "gpu", 0)
    assert measure(gpu, "gpu_util_pct")["count"] == 2
    sysrows = subject(rep, "system", 0)["rows"]
    assert sysrows > 5  # the rest of the sampling went on


def test_samples_csv(tmp_path):
    out = tmp_path / "run"
    r = mlprof("run", "-q", "-o", out, "--", PYTHON, "-c",
               "import os, time; print(os.getpid()); time.sleep(0.3)")
    pid = r.stdout.strip()
    rows = list(csv.DictReader(io.StringIO(
        mlprof("report", out, "--format", "csv", "--table", "samples").stdout)))
    mine = [row for row in rows if row["subject"] == "process" and row["id"] == pid
            and row["measure"] == "rss_bytes"]
    assert len(mine) >= 2 and all(float(row["value"]) > 0 for row in mine)
    times = [int(row["time_ns"]) for row in mine]
    assert times == sorted(times)
    r = mlprof("report", out, "--table", "samples", check=False)
    assert r.returncode == 2
