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
    if s:  # time.sleep(0) yields the CPU: on a loaded machine, for >5 ms
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
    spans = mlprof.read_events(out)["spans"]
    naps = [s["end_ns"] - s["begin_ns"] for s in spans
            if s["name"] == "test_calls.nap"]
    # Every call is either kept, lasting the minimum, or dropped and
    # counted; the short ones (a few µs) are dropped unless the machine
    # took the CPU away from them in the middle.
    assert all(d >= 5_000_000 for d in naps) and max(naps) >= 20_000_000
    assert dropped == 11 - len(naps) and dropped >= 5, (dropped, naps)
    long = [s for s in spans if s["name"] == "test_calls.nap"][0]
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


def python_m_mlprof_run_calls(tmp_path, script, build_dir):
    """Runs `python -m mlprof run --calls script`; returns its directory."""
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "mlprof", "run", "--calls",
                        "-q", "-o", str(out) + "/", str(script)],
                       env=child_env(MLPROF_CLI=os.path.join(build_dir,
                                                             "mlprof")),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out


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
    out = python_m_mlprof_run_calls(tmp_path, script, build_dir)
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


def test_run_calls_leaves_out_the_start_up(tmp_path, build_dir):
    """`mlprof run --calls` (the start-up module starts the tracer): neither
    mlprof's start-up module nor the program's own sitecustomize, which it
    runs, is traced; the program is."""
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text(textwrap.dedent("""
        import os
        def mark():
            os.environ["OWN_SITECUSTOMIZE"] = "ran"
        mark()
    """))
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import os
        def main():
            print(os.environ.get("OWN_SITECUSTOMIZE"))
        main()
    """))
    startup = os.path.join(os.path.dirname(mlprof.__file__), "_startup")
    env = child_env(MLPROF_PY_STARTUP=startup)
    env["PYTHONPATH"] = str(own) + os.pathsep + env["PYTHONPATH"]
    out = tmp_path / "run"
    r = subprocess.run([os.path.join(build_dir, "mlprof"), "run", "--calls",
                        "-q", "-o", str(out) + "/", "--", sys.executable,
                        str(script)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ran\n"
    spans = [s for f in os.listdir(out)
             for s in mlprof.read_events(str(out / f))["spans"]]
    assert names(spans)["main"] == 1
    assert not [s["name"] for s in spans
                if s["name"].startswith("sitecustomize")
                or s["file"].startswith((startup, str(own)))]


def test_python_m_mlprof_run_calls_traces_the_program_not_runpy(tmp_path,
                                                                build_dir):
    """`python -m mlprof run --calls script.py`: the modules runpy imports
    to run the script (pkgutil, and typing through it) are imported before
    the tracer starts, so their import is not traced as the program's."""
    script = tmp_path / "prog.py"
    script.write_text("def main():\n    return 1\n\nmain()\n")
    out = python_m_mlprof_run_calls(tmp_path, script, build_dir)
    spans = [s for f in os.listdir(out)
             for s in mlprof.read_events(str(out / f))["spans"]]
    assert names(spans)["main"] == 1
    assert not [s["name"] for s in spans
                if s["name"].startswith("typing.")
                or s["name"] in ("pkgutil", "typing")]


needs_hook = pytest.mark.skipif(
    sys.version_info >= (3, 12),
    reason="the frame evaluation hook is used on Python 3.9-3.11")


@needs_hook
def test_mechanism_eval_frame_unless_builtins(tmp_path):
    def run(**opts):
        with mlprof.Profiler(output=str(tmp_path / "m.mlprof"),
                             backend="calls", sample_interval=0,
                             calls_options=opts) as p:
            fib(5)
        return p.summary()["calls"]["mechanism"]

    assert run() == "eval_frame"
    assert run(builtins=True) == "profile"


needs_monitoring = pytest.mark.skipif(
    sys.version_info < (3, 12),
    reason="sys.monitoring is used on Python 3.12+ (make python-test-versions)")


@needs_monitoring
@pytest.mark.parametrize("builtins", [False, True])
def test_monitoring_holds_the_profiler_tool_id_while_tracing(tmp_path,
                                                            builtins):
    mon = sys.monitoring
    seen = []
    with mlprof.Profiler(output=str(tmp_path / "m.mlprof"), backend="calls",
                         sample_interval=0,
                         calls_options={"builtins": builtins}) as p:
        seen.append(mon.get_tool(mon.PROFILER_ID))
        fib(5)
        calls = p.summary()["calls"]
    assert seen == ["mlprof"]
    assert calls["mechanism"] == "monitoring" and calls["fallback"] is None
    assert mon.get_tool(mon.PROFILER_ID) is None  # freed at stop
    spans = mlprof.read_events(p.path)["spans"]
    assert names(spans)["test_calls.fib"] == fib_calls(5)


@needs_monitoring
def test_tool_id_held_by_another_is_left_alone(tmp_path):
    """Another tool (cProfile on 3.12 is one) holds PROFILER_ID: it keeps
    it, and the calls are traced through the profile function instead."""
    mon = sys.monitoring
    mon.use_tool_id(mon.PROFILER_ID, "another")
    try:
        with mlprof.Profiler(output=str(tmp_path / "o.mlprof"),
                             backend="calls", sample_interval=0,
                             calls_options={"include": ["test_calls"]}) as p:
            assert mon.get_tool(mon.PROFILER_ID) == "another"
            fib(6)
            calls = p.summary()["calls"]
        assert calls["mechanism"] == "profile"
        assert "held by 'another'" in calls["fallback"]
        assert mon.get_tool(mon.PROFILER_ID) == "another"
        spans = mlprof.read_events(p.path)["spans"]
        assert names(spans)["test_calls.fib"] == fib_calls(6)
    finally:
        mon.free_tool_id(mon.PROFILER_ID)


def gen_raises(n):
    for i in range(n):
        yield i
    raise KeyError("end")


async def co_raises():
    await asyncio.sleep(0)
    raise ValueError("co")


def balanced_body():
    """Generators, a throw(), coroutines, exceptions out of Python and C
    functions, each between two zones at the same depth."""
    with mlprof.zone("before"):
        pass
    try:
        list(gen_raises(3))
    except KeyError:
        pass
    g = catcher()
    next(g)
    assert g.throw(KeyError) == "caught"
    g.close()
    try:
        asyncio.run(co_raises())
    except ValueError:
        pass
    try:
        sorted([2, 1], key=lambda x: boom(0))  # out of a C call's callback
    except ValueError:
        pass
    "1".zfill(3)  # a method descriptor called with its self
    import types
    types.MethodType(divmod, 7)(2)  # its CALL and C_RETURN name two callables
    try:
        boom(2)
    except ValueError:
        pass
    with mlprof.zone("after"):
        pass


@pytest.mark.parametrize("builtins", [False, True])
def test_generators_coroutines_exceptions_give_balanced_zones(tmp_path,
                                                              builtins):
    spans = traced(tmp_path, balanced_body,
                   calls_options={"builtins": builtins})
    by = {s["name"]: s for s in spans}
    assert by["after"]["depth"] == by["before"]["depth"]
    n = names(spans)
    assert n["test_calls.gen_raises"] == 4  # three yields, the raise
    assert n["test_calls.catcher"] == 3  # next, throw, close
    assert n["test_calls.co_raises"] == 2
    assert n["test_calls.boom"] == 1 + 3
    body = [s for s in spans if s["name"] == "test_calls.balanced_body"]
    assert len(body) == 1
    inside = [s for s in spans if s["depth"] > body[0]["depth"]]
    assert all(body[0]["begin_ns"] <= s["begin_ns"] and
               s["end_ns"] <= body[0]["end_ns"] for s in inside)
    if builtins:
        assert n["builtins.sorted"] == 1
        assert n["str.zfill"] == 1
        assert n["builtins.divmod"] == 1


FOREIGN_HOOK = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#if PY_VERSION_HEX >= 0x030B0000
typedef struct _PyInterpreterFrame frame;
#else
typedef struct _frame frame;
#endif
static long evals;
static PyObject *hook(PyThreadState *ts, frame *f, int exc) {
  evals++;
  return _PyEval_EvalFrameDefault(ts, f, exc);
}
static PyInterpreterState *interp(void) {
  return PyThreadState_GetInterpreter(PyThreadState_Get());
}
static PyObject *set(PyObject *m, PyObject *on) {
  _PyInterpreterState_SetEvalFrameFunc(
      interp(), PyObject_IsTrue(on) ? hook : _PyEval_EvalFrameDefault);
  Py_RETURN_NONE;
}
static PyObject *state(PyObject *m, PyObject *unused) {
  return Py_BuildValue("(Nl)", PyBool_FromLong(
      _PyInterpreterState_GetEvalFrameFunc(interp()) == hook), evals);
}
static PyMethodDef methods[] = {{"set", set, METH_O, NULL},
                                {"state", state, METH_NOARGS, NULL},
                                {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "foreign_hook", NULL,
                                 -1, methods};
PyMODINIT_FUNC PyInit_foreign_hook(void) { return PyModule_Create(&def); }
"""


def foreign_hook(tmp_path):
    """A module whose set(True) puts a frame evaluation hook of its own in
    place (as torch.compile does), built with the C compiler."""
    import importlib.util
    import shutil
    import sysconfig
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    src = tmp_path / "foreign_hook.c"
    src.write_text(FOREIGN_HOOK)
    so = tmp_path / ("foreign_hook" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run([cc, "-shared", "-fPIC", "-I",
                    sysconfig.get_paths()["include"], str(src), "-o",
                    str(so)], check=True)
    spec = importlib.util.spec_from_file_location("foreign_hook", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@needs_hook
def test_hook_of_another_is_kept_and_calls_still_traced(tmp_path):
    fh = foreign_hook(tmp_path)
    fh.set(True)
    try:
        out = str(tmp_path / "f.mlprof")
        with mlprof.Profiler(output=out, backend="calls", sample_interval=0,
                             calls_options={"include": ["test_calls"]}) as p:
            fib(8)
        assert p.summary()["calls"]["mechanism"] == "profile"
        assert names(mlprof.read_events(out)["spans"])["test_calls.fib"] == \
            fib_calls(8)
        on, before = fh.state()
        fib(3)
        on, after = fh.state()
        assert on and after - before == fib_calls(3)
    finally:
        fh.set(False)


@needs_hook
def test_hook_set_by_another_while_tracing_is_not_removed(tmp_path):
    fh = foreign_hook(tmp_path)
    try:
        with mlprof.Profiler(output=str(tmp_path / "g.mlprof"),
                             backend="calls", sample_interval=0):
            fh.set(True)  # replaces the tracer's hook (calls untraced since)
        assert fh.state()[0]
    finally:
        fh.set(False)


def catcher():
    try:
        yield 1
    except KeyError:
        yield "caught"


def test_generator_throw_delivers_the_exception(tmp_path):
    g = catcher()
    next(g)  # the first resume under the tracer is the throw

    def body():
        assert g.throw(KeyError) == "caught"

    spans = traced(tmp_path, body)
    assert names(spans)["test_calls.catcher"] == 1


def deep(n):
    return deep(n + 1)


def down(n):
    return down(n - 1) if n else 0


@pytest.mark.parametrize("min_duration", [0, 1e-9])
def test_deep_recursion_every_call_kept_or_counted(tmp_path, min_duration):
    """5001 nested calls, past the tracer's first 1024 places: each is a
    span, or counted as dropped where the library drops it (zones nested
    past its 256 levels); with a minimum duration, each lasting it is a span
    of the calls track. None is lost unseen."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(limit + 6000)
    try:
        out = str(tmp_path / "d.mlprof")
        with mlprof.Profiler(output=out, backend="calls", sample_interval=0,
                             calls_options={"include": ["test_calls"],
                                            "min_duration": min_duration}
                             ) as p:
            down(5000)
            calls = p.summary()["calls"]
    finally:
        sys.setrecursionlimit(limit)
    spans = names(mlprof.read_events(out)["spans"])["test_calls.down"]
    dropped = mlprof.report([out])["processes"][0]["dropped"]
    assert spans + dropped + calls["dropped_short"] == 5001, (spans, dropped)
    assert calls["dropped_no_memory"] == 0
    if min_duration:
        assert dropped == 0
    else:
        assert spans == 256 and dropped == 5001 - 256


def test_recursion_error_closes_every_span(tmp_path):
    def body():
        with mlprof.zone("before"):
            pass
        try:
            deep(0)
        except RecursionError:
            pass
        with mlprof.zone("after"):
            pass

    spans = traced(tmp_path, body,
                   calls_options={"include": ["test_calls"]})
    by = {s["name"]: s for s in spans}
    assert by["after"]["depth"] == by["before"]["depth"]
    n = names(spans)["test_calls.deep"]
    assert 100 < n <= sys.getrecursionlimit()
    assert len({s["depth"] for s in spans
                if s["name"] == "test_calls.deep"}) == n
