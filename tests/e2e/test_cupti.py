"""CUPTI activity capture against the test double tests/fake_cupti (no GPU
here): tests/programs/cupti_demo does what the CUDA driver does when
CUDA_INJECTION64_PATH names libmlprof, then makes a kernel, a copy, a
memset, a runtime call and a synchronisation per step through the fake,
in CUPTI's clock. Records of each kind must land on their tracks at their
mapped times; a missing or failing libcupti, or no driver, must be
reported with the reason; nothing may crash."""
import json
import os
import subprocess

from conftest import LIBRARY, clean_env, mlprof, program, report_json

FAKE = program(os.path.join("fake_cupti", "libcupti.so"))  # loaded by DEMO
DEMO = program("cupti_demo")
# CUPTI's clock 1000 s ahead of CLOCK_MONOTONIC: unmapped, every record
# would land far past the end of the run.
OFFSET_NS = 1000 * 10**9


def env_for(tmp_path, script="", **extra):
    env = clean_env("FAKE_CUPTI", "CUDA_INJECTION64_PATH",
                    "NVTX_INJECTION64_PATH")
    path = tmp_path / "cupti.script"
    path.write_text(script)
    env.update(FAKE_CUPTI_SCRIPT=str(path), MLPROF_CUPTI_LIB=FAKE,
               MLPROF_FLUSH_MS="50", MLPROF_CUPTI="1",
               MLPROF_CUDA_LIB=FAKE)  # a library that loads: "a driver"
    env.update(extra)
    return env


def run_demo(tmp_path, steps=3, **kw):
    out = tmp_path / "run"
    r = mlprof("run", "-o", out, "--", DEMO, steps, check=False,
               env=env_for(tmp_path, **kw))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"cupti_demo: {steps} steps"), r.stdout
    return out, r


def trace_of(out):
    path = str(out) + ".json"
    mlprof("trace", out, "-o", path)
    with open(path) as f:
        return json.load(f)["traceEvents"]


def spans_by_thread(events):
    pid = next(e["pid"] for e in events if e.get("name") == "process_name"
               and e["args"]["name"].startswith("cupti_demo"))
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"
             and e["pid"] == pid}
    out = {}
    for e in events:
        if e.get("ph") == "X" and e["pid"] == pid:
            out.setdefault(names.get(e["tid"], str(e["tid"])), []).append(e)
    return out


def sources(out):
    return {s["name"]: s for s in report_json(out)["resources"]["sources"]}


def test_records_land_on_their_tracks_at_mapped_times(tmp_path):
    out, r = run_demo(tmp_path, steps=3, script=f"offset {OFFSET_NS}\n")
    assert "periodic flushes seen" in r.stdout  # flushed on the writer's beat
    threads = spans_by_thread(trace_of(out))
    steps = sorted(threads["cupti_demo"], key=lambda e: e["ts"])
    assert [e["name"] for e in steps] == ["step"] * 3
    main_tid = steps[0]["tid"]
    expect = {
        "cuda:0 stream 7": {"gemm_kernel", "memcpy HtoD"},
        "cuda:1 stream 8": {"memset"},
        f"cuda api {main_tid}": {"cudaLaunchKernel_v7000"},
        "cuda:ctx 1 sync": {"cudaStreamSynchronize"},
    }
    for track, names in expect.items():
        assert track in threads, (track, sorted(threads))
        spans = threads[track]
        assert {e["name"] for e in spans} == names, (track, spans)
        assert len(spans) == 3 * len(names)
        # Each record was made inside a step, in CUPTI's clock: mapped, it
        # lies inside that step's zone (1 µs of rounding either side).
        for e in spans:
            assert any(s["ts"] - 1 <= e["ts"] and
                       e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1
                       for s in steps), (track, e, steps)
    kernels = sorted(threads["cuda:0 stream 7"], key=lambda e: e["ts"])
    assert all(e["dur"] > 400 for e in kernels if e["name"] == "gemm_kernel")

    rep = report_json(out)
    zones = {z["name"]: z for z in rep["zones"]}
    assert zones["gemm_kernel"]["count"] == 3
    assert zones["memcpy HtoD"]["count"] == 3
    assert zones["memcpy HtoD"]["units"][0]["unit"] == "bytes"
    assert zones["memcpy HtoD"]["units"][0]["n"] == 3 * 4096
    assert zones["memset"]["units"][0]["n"] == 3 * 512
    src = sources(out)
    assert src["cupti"]["available"] is True, src


def test_missing_libcupti_says_why(tmp_path):
    out, _ = run_demo(tmp_path, steps=1,
                      MLPROF_CUPTI_LIB=str(tmp_path / "no" / "libcupti.so"))
    src = sources(out)["cupti"]
    assert src["available"] is False
    assert src["reason"].startswith("no CUPTI: ") and "libcupti.so" in src["reason"]
    threads = spans_by_thread(trace_of(out))
    assert set(threads) == {"cupti_demo"}, threads.keys()


def test_library_without_cupti_symbols_says_why(tmp_path):
    out, _ = run_demo(tmp_path, steps=1, MLPROF_CUPTI_LIB=LIBRARY)
    src = sources(out)["cupti"]
    assert src["available"] is False
    assert src["reason"] == f"no CUPTI: {LIBRARY} has no cuptiGetResultString"


def test_failing_enable_says_why(tmp_path):
    out, _ = run_demo(tmp_path, steps=1, script="fail enable 10 999\n")
    src = sources(out)["cupti"]
    assert (src["available"], src["reason"]) == (
        False, "cuptiActivityEnable(CONCURRENT_KERNEL): CUPTI_ERROR_UNKNOWN")
    assert set(spans_by_thread(trace_of(out))) == {"cupti_demo"}


def test_optional_kind_refused_still_captures(tmp_path):
    out, _ = run_demo(tmp_path, steps=2, script="fail enable 38 15\n")
    threads = spans_by_thread(trace_of(out))
    assert "cuda:0 stream 7" in threads
    assert "cuda:ctx 1 sync" not in threads


def test_no_driver_said_by_the_run(tmp_path):
    out, _ = run_demo(tmp_path, steps=1,
                      MLPROF_CUDA_LIB=str(tmp_path / "libcuda.so.1"))
    reasons = [s for s in report_json(out)["resources"]["sources"]
               if s["name"] == "cupti" and not s["available"]]
    assert any(s["reason"].startswith("no CUDA driver: ") for s in reasons), reasons


def test_off_unless_asked(tmp_path):
    """Without MLPROF_CUPTI=1, mlprof run leaves CUDA_INJECTION64_PATH unset:
    the driver (here the demo) loads nothing, and no CUDA track appears."""
    env = env_for(tmp_path)
    del env["MLPROF_CUPTI"]
    out = tmp_path / "run"
    r = mlprof("run", "-o", out, "--", DEMO, "1", check=False, env=env)
    assert r.returncode == 0, r.stderr
    assert set(spans_by_thread(trace_of(out))) == {"cupti_demo"}


def test_declarations_match_the_toolkit():
    """tests/programs/cupti_abi.c compiles only where every offset and value
    of src/intercept/cupti_abi.h matches the CUDA toolkit's CUPTI headers;
    the toolkit is on every machine these tests run on."""
    abi = program("cupti_abi")
    assert os.path.exists(abi), (
        f"{abi} was not built: CMake found no CUDA toolkit with "
        "cupti_activity.h (set CUDA_HOME and configure again)")
    r = subprocess.run([abi], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "match cupti_abi.h" in r.stdout, r
