"""Profiler(backend="calls"): every Python call a zone, on its thread's
timeline, nested with the user's zones; generators, exceptions, coroutines,
threads, builtins, filters, depth and minimum duration; `python -m mlprof
run --calls` with forked workers."""
import asyncio
import collections
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import mlprof
from conftest import child_env


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def fib_calls(n):
    return 1 if n < 2 else 1 + fib_calls(n - 1) + fib_calls(n - 2)


def traced(tmp_path, body, **opts):
    """Runs body() under a calls Profiler; the profile's spans."""
    out = str(tmp_path / "c.mlprof")
    with mlprof.Profiler(output=out, backend="calls", sample_interval=0,
                         **opts) as prof:
        body()
    # A second run in the same directory gets a free name (c.1.mlprof).
    return mlprof.read_events(prof.path)["spans"]


def names(spans):
    return collections.Counter(s["name"] for s in spans)


def test_recursion_exact_count_with_file_and_line(tmp_path):
    spans = traced(tmp_path, lambda: fib(12))
    assert names(spans)["test_calls.fib"] == fib_calls(12) == 465
    s = next(s for s in spans if s["name"] == "test_calls.fib")
    assert s["file"] == fib.__code__.co_filename
    assert s["line"] == fib.__code__.co_firstlineno
    depths = sorted({s["depth"] for s in spans
                     if s["name"] == "test_calls.fib"})
    assert len(depths) == 12  # fib(12) down to fib(1)/fib(0): 12 levels


def test_nested_under_user_zone_and_user_zone_inside(tmp_path):
    def inner():
        with mlprof.zone("user-in"):
            pass

    def body():
        with mlprof.zone("user-out"):
            inner()

    spans = traced(tmp_path, body)
    by = {s["name"]: s for s in spans}
    out, call, uin = (by["user-out"], by["test_calls.test_nested_under_user_"
                      "zone_and_user_zone_inside.<locals>.inner"],
                      by["user-in"])
    assert out["depth"] < call["depth"] < uin["depth"]
    assert out["begin_ns"] <= call["begin_ns"] <= uin["begin_ns"]
    assert uin["end_ns"] <= call["end_ns"] <= out["end_ns"]


def worker(n, ready, go):
    ready.set()
    go.wait()
    fib(n)


def test_threads_started_before_and_after_start(tmp_path):
    ready1, go = threading.Event(), threading.Event()
    early = threading.Thread(target=worker, args=(5, ready1, go))
    early.start()
    ready1.wait()

    def body():
        ready2 = threading.Event()
        late = threading.Thread(target=worker, args=(6, ready2, go))
        late.start()
        ready2.wait()
        go.set()
        late.join()
        early.join()

    spans = traced(tmp_path, body)
    per_tid = collections.Counter(s["tid"] for s in spans
                                  if s["name"] == "test_calls.fib")
    assert sorted(per_tid.values()) == [fib_calls(5), fib_calls(6)]


def gen(n):
    for i in range(n):
        time.sleep(0.001)
        yield i


def test_generator_one_span_per_resume(tmp_path):
    spans = traced(tmp_path, lambda: list(gen(4)))
    # 4 yields and the final resume that ends the loop
    assert names(spans)["test_calls.gen"] == 5


def boom(n):
    if n == 0:
        raise ValueError("x")
    boom(n - 1)


def test_exceptions_close_spans(tmp_path):
    def body():
        with mlprof.zone("after-catch"):
            try:
                boom(3)
            except ValueError:
                pass
        with mlprof.zone("later"):
            pass

    spans = traced(tmp_path, body)
    assert names(spans)["test_calls.boom"] == 4
    by = {s["name"]: s for s in spans}
    assert by["later"]["depth"] == by["after-catch"]["depth"]


async def tick(n):
    for _ in range(n):
        await asyncio.sleep(0)


def test_async_function_spans_per_resume(tmp_path):
    spans = traced(tmp_path, lambda: asyncio.run(tick(3)),
                   calls_options={"include": ["test_calls"]})
    # the first run, three resumes after each sleep(0)
    assert names(spans)["test_calls.tick"] == 4
    assert set(names(spans)) == {"test_calls.tick",
                                 "test_calls.test_async_function_spans_per_"
                                 "resume.<locals>.<lambda>"}


def test_builtins_off_by_default_on_when_asked(tmp_path):
    def body():
        for _ in range(3):
            sorted([3, 1, 2])

    off = traced(tmp_path, body)
    assert "builtins.sorted" not in names(off)
    on = traced(tmp_path, body, calls_options={"builtins": True})
    assert names(on)["builtins.sorted"] == 3


def test_include_and_exclude(tmp_path):
    import json

    def body():
        json.dumps({"a": 1})
        fib(3)

    inc = traced(tmp_path, body, calls_options={"include": ["json"]})
    assert inc and all(n.startswith("json.") for n in names(inc))
    exc = traced(tmp_path, body, calls_options={"exclude": ["json"]})
    assert names(exc)["test_calls.fib"] == fib_calls(3)
    assert not any(n.startswith("json.") for n in names(exc))
    path = traced(tmp_path, body,
                  calls_options={"include": [os.path.dirname(__file__)]})
    assert set(names(path)) == {
        "test_calls.fib",
        "test_calls.test_include_and_exclude.<locals>.body"}


def test_max_depth(tmp_path):
    spans = traced(tmp_path, lambda: fib(10),
                   calls_options={"include": ["test_calls"], "max_depth": 3})
    # the lambda, fib(10), and fib(9)/fib(8) at the third level
    assert names(spans)["test_calls.fib"] == 1 + 2
    assert max(s["depth"] for s in spans) - min(
        s["depth"] for s in spans) == 2


def nap(s):
    time.sleep(s)


def test_min_duration_drops_short_calls_and_counts_them(tmp_path):
    out = str(tmp_path / "m.mlprof")
    with mlprof.Profiler(output=out, backend="calls", sample_interval=0,
                         calls_options={"include": ["test_calls"],
                                        "min_duration": 0.005}) as p:
        def body():
            nap(0.02)
            for _ in range(10):
                nap(0)
        body()
        dropped = p.summary()["calls"]["dropped_short"]
    assert dropped >= 10
    spans = mlprof.read_events(out)["spans"]
    assert names(spans)["test_calls.nap"] == 1
    long = [s for s in spans if s["name"] == "test_calls.nap"][0]
    assert long["end_ns"] - long["begin_ns"] >= 20_000_000
    # the kept call nests in its caller on the thread's calls track
    outer = [s for s in spans if s["name"].endswith("<locals>.body")][0]
    assert outer["tid"] == long["tid"] and outer["depth"] < long["depth"]


def test_bad_options():
    with pytest.raises(ValueError):
        mlprof.Profiler(calls_options={"builtins": True})
    with pytest.raises(ValueError):
        mlprof.Profiler(backend="calls", calls_options={"nope": 1})
    with pytest.raises(ValueError):
        mlprof.Profiler(backend=("calls", "bogus"))
    p = mlprof.Profiler(backend=("calls", "mlprof"))
    assert p.backends == {"calls"}


def test_run_calls_with_forked_workers(tmp_path, build_dir):
    script = tmp_path / "forky.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing as mp, os, sys

        def leaf(n):
            return n

        def work(n):
            return sum(leaf(i) for i in range(n))

        if __name__ == "__main__":
            pool = mp.get_context("fork").Pool(2)
            print(sum(pool.map(work, [50, 50, 50, 50])))
            pool.close()
            pool.join()
            pid = os.fork()
            if pid == 0:
                work(7)
                sys.exit(0)
            os.waitpid(pid, 0)
    """))
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "mlprof", "run", "--calls",
                        "-q", "-o", str(out) + "/", str(script)],
                       env=child_env(MLPROF_CLI=os.path.join(build_dir,
                                                             "mlprof")),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    leafs = {}
    for f in os.listdir(out):
        ev = mlprof.read_events(str(out / f))
        n = names(ev["spans"])
        leafs[ev["header"]["pid"]] = n["leaf"]
    # the parent runs no leaf; the pool's workers and the forked child do
    assert sum(leafs.values()) == 4 * 50 + 7, leafs
    assert sum(1 for v in leafs.values() if v) >= 2, leafs


def test_min_duration_forked_child_leaves_kept_calls_to_parent(tmp_path):
    out = tmp_path / "f.mlprof"
    with mlprof.Profiler(output=str(out), backend="calls", sample_interval=0,
                         calls_options={"include": ["test_calls"],
                                        "min_duration": 0.005}):
        def body():
            nap(0.01)  # kept, waiting for body to end
            pid = os.fork()
            if pid == 0:
                from mlprof import _mlprof
                _mlprof.calls_stop()  # ends body here: sends its tree
                _mlprof.shutdown()
                os._exit(0)
            os.waitpid(pid, 0)
            return pid
        pid = body()
    child = tmp_path / ("f-%d.mlprof" % pid)
    assert names(mlprof.read_events(str(out))["spans"])["test_calls.nap"] == 1
    assert "test_calls.nap" not in names(
        mlprof.read_events(str(child))["spans"])


def test_calls_with_torch_backend(tmp_path):
    torch = pytest.importorskip("torch")

    def step():
        return torch.ones(8, 8) @ torch.ones(8, 8)

    out = str(tmp_path / "t.mlprof")
    with mlprof.Profiler(output=out, backend=("calls", "torch"),
                         sample_interval=0,
                         calls_options={"include": ["test_calls"]}) as p:
        assert p.backends == {"calls", "torch"}
        step()
    n = names(mlprof.read_events(out)["spans"])
    assert n["test_calls.test_calls_with_torch_backend.<locals>.step"] == 1
    assert n["aten::matmul"] >= 1
