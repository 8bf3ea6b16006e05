"""NVTX capture: a program annotated with NVTX only (tests/programs/nvtx_demo.c,
built against the CUDA toolkit's NVTX v3 headers) shows its ranges as zones,
with their nesting, names, categories and threads, under `mlprof run` and with
NVTX_INJECTION64_PATH alone; without mlprof it runs unchanged."""
import json
import os
import subprocess

from conftest import LIBRARY, clean_env, mlprof, program, report_json

DEMO = program("nvtx_demo")


def demo_path():
    # Built by CMake when it finds the toolkit's nvtx3/nvToolsExt.h; the
    # toolkit is on every machine these tests run on, so its absence fails.
    assert os.path.exists(DEMO), (
        f"{DEMO} was not built: CMake found no CUDA toolkit NVTX headers "
        "(nvtx3/nvToolsExt.h under $CUDA_HOME/include, /usr/local/cuda/include "
        "or /usr/local/cuda-*/include); install the CUDA toolkit or set "
        "CUDA_HOME, then configure again")
    return DEMO


def plain_env():
    return clean_env("NVTX_INJECTION64_PATH")


def trace_of(path):
    out = str(path) + ".json"
    mlprof("trace", path, "-o", out)
    with open(out) as f:
        return json.load(f)["traceEvents"]


def threads_of(events, pid):
    """{thread name: [(name, cat, parent name chain, ts, end)]} of pid."""
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"
             and e["pid"] == pid}
    by_tid = {}
    for e in events:
        if e.get("ph") == "X" and e["pid"] == pid:
            by_tid.setdefault(e["tid"], []).append(e)
    out = {}
    for tid, spans in by_tid.items():
        spans.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack, rows = [], []
        for e in spans:
            end = e["ts"] + e["dur"]
            while stack and e["ts"] >= stack[-1][1] - 1e-3:
                stack.pop()
            rows.append((e["name"], e.get("cat"), tuple(s[0] for s in stack),
                         e["ts"], end))
            stack.append((e["name"], end))
        out[names.get(tid, str(tid))] = rows
    return out


def demo_pid(events):
    return next(e["pid"] for e in events if e.get("name") == "process_name"
                and e["args"]["name"].startswith("nvtx_demo"))


def check_ranges(events, steps):
    threads = threads_of(events, demo_pid(events))
    assert {"nvtx-main", "nvtx-worker-0", "nvtx-worker-1", "nvtx"} <= set(threads), threads.keys()
    main = threads["nvtx-main"]
    rows = {(n, c, p) for n, c, p, *_ in main}
    assert rows == {
        ("step", None, ()),
        ("forward_pass", "forward", ("step",)),
        ("matmul", None, ("step", "forward_pass")),
        ("demo_io:load_batch", "data", ("step",)),
        ("checkpoint", None, ("step",)),
        ("wide_range", None, ()),
    }, rows
    count = lambda name: sum(1 for r in main if r[0] == name)
    assert [count(n) for n in ("step", "forward_pass", "matmul",
                               "demo_io:load_batch", "checkpoint",
                               "wide_range")] == [steps] * 5 + [1]
    for w in ("nvtx-worker-0", "nvtx-worker-1"):
        assert sorted((n, p) for n, _, p, *_ in threads[w]) == (
            [("worker_inner", ("worker_task",))] * 3 + [("worker_task", ())] * 3)
    # The start/end range started on the main thread and ended by worker 0.
    [epoch] = threads["nvtx"]
    assert epoch[0] == "epoch"
    assert epoch[3] <= min(r[3] for r in main)
    assert epoch[4] >= max(r[4] for r in threads["nvtx-worker-0"])


def test_ranges_are_zones_under_mlprof_run(tmp_path):
    out = tmp_path / "run"
    r = mlprof("run", "-o", out, "--", demo_path(), "4", check=False,
               env=plain_env())
    assert r.returncode == 3, r.stderr
    assert r.stdout == "nvtx_demo: 4 steps, 2 workers\n"
    check_ranges(trace_of(out), 4)
    rep = report_json(out)
    loss = [c for c in rep["counters"] if c["name"] == "loss"]
    assert loss and loss[0]["min"] == -0.5 and loss[0]["max"] == 2.5, loss


def test_library_alone_with_nvtx_injection_path(tmp_path):
    env = plain_env()
    env["NVTX_INJECTION64_PATH"] = LIBRARY
    env["MLPROF_OUTPUT"] = str(tmp_path) + "/"
    r = subprocess.run([demo_path(), "2"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 3, r.stderr
    check_ranges(trace_of(tmp_path), 2)


def test_runs_unchanged_without_mlprof(tmp_path):
    plain = subprocess.run([demo_path(), "2"], capture_output=True,
                           text=True, timeout=120, env=plain_env())
    out = tmp_path / "run"
    under = mlprof("run", "-o", out, "--", demo_path(), "2", check=False,
                   env=plain_env())
    assert (plain.returncode, plain.stdout, plain.stderr) == (
        3, "nvtx_demo: 2 steps, 2 workers\n", "")
    assert (under.returncode, under.stdout) == (plain.returncode, plain.stdout)


def test_users_own_tool_is_kept(tmp_path):
    """A NVTX_INJECTION64_PATH the user set is left alone: here a library
    that does not exist, so NVTX stays a no-op and only mlprof's own
    recording (none in this program) remains."""
    env = plain_env()
    env["NVTX_INJECTION64_PATH"] = str(tmp_path / "no-such-tool.so")
    out = tmp_path / "run"
    r = mlprof("run", "-o", out, "--", demo_path(), "2", check=False, env=env)
    assert (r.returncode, r.stdout) == (3, "nvtx_demo: 2 steps, 2 workers\n")
    events = trace_of(out)
    assert not [e for e in events if e.get("ph") == "X"
                and e["pid"] == demo_pid(events)]


def test_odd_calls_neither_crash_nor_stop_recording(tmp_path):
    """Pops with nothing pushed, unknown range ids, empty or missing
    attributes, NULL names and handles, an unknown thread id: the program
    runs as it would without mlprof, and recording goes on after them."""
    plain = subprocess.run([demo_path(), "--edge"], capture_output=True,
                           text=True, timeout=60, env=plain_env())
    out = tmp_path / "run"
    r = mlprof("run", "-o", out, "--", demo_path(), "--edge", check=False,
               env=plain_env())
    assert (r.returncode, r.stdout) == (plain.returncode, plain.stdout) == (
        0, "nvtx_demo: edge cases done\n")
    zones = {z["name"]: z["count"] for z in report_json(out)["zones"]}
    assert zones == {"(unnamed)": 4, "after_edge": 1}, zones
