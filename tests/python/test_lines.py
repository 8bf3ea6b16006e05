"""Line timings of chosen functions: Profiler(lines=[fn]), prof.lines(fn),
@mlprof.lines, `python -m mlprof run --lines MODULE:FUNCTION`."""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

import mlprof
from mlprof import _mlprof
from conftest import child_env


@pytest.fixture(autouse=True)
def fresh_lines():
    _mlprof.lines_clear()
    yield
    _mlprof.lines_clear()


def callee():
    time.sleep(0.06)


def sleeper():
    time.sleep(0.08)
    time.sleep(0.04)
    callee()
    time.sleep(0.02)


def rows_of(summary, fn):
    first = fn.__code__.co_firstlineno
    return {r["line"] - first: r for r in summary.get("lines", ())
            if r["function"] == fn.__qualname__}


def run(tmp_path, **kw):
    with mlprof.Profiler(output=str(tmp_path / "l.mlprof"),
                         sample_interval=0, **kw) as p:
        sleeper()
        return p.summary()


def test_shares_within_five_points_and_callee_excluded(tmp_path):
    s = run(tmp_path, lines=[sleeper])
    r = rows_of(s, sleeper)
    assert set(r) == {1, 2, 3, 4}
    assert all(x["hits"] == 1 for x in r.values())
    for off, ms in {1: 40, 2: 20, 3: 30, 4: 10}.items():
        assert abs(r[off]["share"] - ms) <= 5, (off, r[off])
    # the callee's 60 ms are in the line's total, not in its exclusive time
    assert r[3]["total_ns"] >= 60_000_000
    assert r[3]["exclusive_ns"] < 5_000_000
    assert r[1]["exclusive_ns"] >= 80_000_000
    assert r[3]["source"].strip() == "callee()"
    # only the chosen function is timed
    assert {x["function"] for x in s["lines"]} == {"sleeper"}


def test_lines_at_run_time_and_with_calls(tmp_path):
    with mlprof.Profiler(output=str(tmp_path / "l.mlprof"),
                         sample_interval=0, backend="calls") as p:
        sleeper()
        assert not rows_of(p.summary(), sleeper)
        assert p.lines(sleeper) is sleeper
        sleeper()
        r = rows_of(p.summary(), sleeper)
    assert r[2]["hits"] == 1 and abs(r[1]["share"] - 40) <= 5


def looped(n):
    total = 0
    for i in range(n):
        total += i
    return total


def lines_traced():
    """Whether this frame gets line events (the trace function switches
    them off in frames it sees and does not time)."""
    return sys._getframe(1).f_trace_lines


def probe():
    return lines_traced()


def test_decorator_hits_and_only_its_calls_traced(tmp_path):
    wrapped = mlprof.lines(looped)
    assert wrapped is looped  # its calls are intercepted, not wrapped

    @mlprof.lines
    def calls_probe():
        return probe()

    with mlprof.Profiler(output=str(tmp_path / "l.mlprof"),
                         sample_interval=0) as p:
        wrapped(5)
        assert probe() is True            # outside: no trace function
        assert calls_probe() is False     # inside: seen, not timed
        assert probe() is True
        r = rows_of(p.summary(), looped)
    assert r[3]["hits"] == 5  # total += i
    assert r[2]["hits"] == 6  # the for line: 5 iterations and the exit


def test_not_a_function():
    with pytest.raises(TypeError):
        mlprof.Profiler(lines=[42])
    with pytest.raises(ValueError):
        mlprof.lines("no-colon")


def test_run_lines_module_function(tmp_path, build_dir):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import json, time

        def main():
            time.sleep(0.09)
            time.sleep(0.03)

        main()
        import mlprof
        print(json.dumps(mlprof.line_table()))
    """))
    r = subprocess.run([sys.executable, "-m", "mlprof", "run", "--lines",
                        "prog:main", "-q", "-o", str(tmp_path / "o") + "/",
                        str(script)],
                       env=child_env(MLPROF_CLI=os.path.join(build_dir,
                                                             "mlprof")),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    import json
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    shares = [x["share"] for x in rows if x["function"] == "main"]
    assert len(shares) == 2 and abs(shares[0] - 75) <= 5, rows


def never_run():
    return 1


def test_summary_is_the_report_when_chosen_lines_did_not_run(tmp_path):
    """A function chosen for line timing earlier in the process that did not
    run in a Profiler gives its summary no "lines", as its report has none:
    summary() stays the report's document plus "session"."""
    mlprof.lines(never_run)
    with mlprof.Profiler(output=str(tmp_path / "n.mlprof"),
                         sample_interval=0) as p:
        with p.zone("z"):
            pass
    s, r = p.summary(), mlprof.report(p.path)
    assert "lines" not in r
    assert set(s) - set(r) == {"session"}, set(s) - set(r)


def test_lines_in_the_profile(tmp_path, build_dir):
    """The line timings of a Profiler's functions are in its profile file:
    `mlprof report` shows them (JSON key lines, a text table), the same as
    summary()["lines"]; without timed lines the report has no such key."""
    with mlprof.Profiler(output=str(tmp_path / "p.mlprof"),
                         lines=[sleeper]) as prof:
        sleeper()
    cli = os.path.join(build_dir, "mlprof")
    rep = subprocess.run([cli, "report", "-f", "json", prof.path],
                         capture_output=True, text=True, check=True).stdout
    import json
    got = {r["line"]: r for r in json.loads(rep)["lines"]}
    want = {r["line"]: r for r in mlprof.line_table()}
    assert set(got) == set(want) and len(got) == 4, (got, want)
    for line, r in want.items():
        for k in ("function", "file", "hits", "total_ns", "exclusive_ns",
                  "source"):
            assert got[line][k] == r[k], (k, got[line], r)
    text = subprocess.run([cli, "report", prof.path], capture_output=True,
                          text=True, check=True).stdout
    assert "Lines of sleeper (" in text and "callee()" in text, text
    _mlprof.lines_clear()
    with mlprof.Profiler(output=str(tmp_path / "q.mlprof")) as prof:
        pass
    rep = subprocess.run([cli, "report", "-f", "json", prof.path],
                         capture_output=True, text=True, check=True).stdout
    assert "lines" not in json.loads(rep)


def test_exclusive_above_total_is_shown_at_most_the_total(tmp_path,
                                                         build_dir):
    """A line table from the C API whose exclusive time is above its total
    (an engine's own timer that underflowed: 2^64 - 5 ns, or just larger)
    is read with the exclusive time at most the total: `mlprof report`
    never shows 18446744074 s."""
    out = tmp_path / "c.mlprof"
    code = textwrap.dedent("""
        import ctypes, sys
        lib = ctypes.CDLL(sys.argv[1])
        class Line(ctypes.Structure):
            _fields_ = [("line", ctypes.c_uint32),
                        ("hits", ctypes.c_uint64),
                        ("total_ns", ctypes.c_uint64),
                        ("exclusive_ns", ctypes.c_uint64),
                        ("source", ctypes.c_char_p),
                        ("reserved", ctypes.c_uint64 * 2)]
        rows = (Line * 2)(Line(10, 1, 5000, 2**64 - 5, b"x = f()"),
                          Line(11, 2, 7000, 9000, b"y = g()"))
        assert lib.mlprof_lines_set(b"f", b"f.c", 10, rows, 2) == 0
    """)
    env = child_env(MLPROF_OUTPUT=str(out))
    subprocess.run([sys.executable, "-c", code,
                    os.path.join(build_dir, "libmlprof.so")], env=env,
                   check=True, timeout=60)
    cli = os.path.join(build_dir, "mlprof")
    rep = subprocess.run([cli, "report", "-f", "json", str(out)],
                         capture_output=True, text=True, check=True).stdout
    got = {r["line"]: r for r in json.loads(rep)["lines"]}
    assert got[10]["exclusive_ns"] == 5000 and got[10]["total_ns"] == 5000
    assert got[11]["exclusive_ns"] == 7000 and got[11]["total_ns"] == 7000
    text = subprocess.run([cli, "report", str(out)], capture_output=True,
                          text=True, check=True).stdout
    assert "Lines of f (f.c:10)" in text and "18446744074" not in text, text


def test_lines_record_takes_counts_only():
    """What the package hands to the profile is checked: an exclusive time
    above the total, or a negative or too large count, is an error rather
    than a wrapped number in the profile."""
    for row, err in (((1, 1, 10, 20, "x"), ValueError),
                     ((1, 1, 10, -1, "x"), OverflowError),
                     ((1, -1, 10, 5, "x"), OverflowError),
                     ((1, 1, 2**64, 5, "x"), OverflowError),
                     ((1, 1, 10.0, 5, "x"), TypeError)):
        with pytest.raises(err):
            _mlprof.lines_record("f", "f.py", 1, [row])


def add(a, b):
    return a + b


class Adder:
    def plus(self, a):
        return a + 1


def add_loop(n, fn):
    t = 0
    for i in range(n):
        t += fn(i, 1)  # one call site, specialised by CPython after a few
    return t


def test_every_reference_and_specialised_call_site_counted(tmp_path):
    """A function chosen by object is reached through the function object:
    a call site CPython specialised for it before it was chosen, a
    reference taken before, and bound methods count every hit; the rest of
    the program gets no line events; stop restores the function."""
    before = add
    code = add.__code__
    add_loop(1000, add)  # specialises the call site
    with mlprof.Profiler(output=str(tmp_path / "l.mlprof"),
                         sample_interval=0, lines=[add, Adder.plus]) as p:
        add_loop(1000, add)
        add_loop(500, before)
        a = Adder()
        for i in range(300):
            a.plus(i)
        assert probe() is True  # not chosen: no trace function here
        r = rows_of(p.summary(), add)
        m = rows_of(p.summary(), Adder.plus)
    assert r[1]["hits"] == 1500, r
    assert m[1]["hits"] == 300, m
    assert add.__code__ is code and Adder.plus.__code__ is not None
    add_loop(1000, add)
    assert rows_of({"lines": mlprof.line_table()}, add)[1]["hits"] == 1500


def test_trampoline_keeps_signature_and_closure(tmp_path):
    k = 10

    def sig(a, /, b, c=3, *rest, d, e=5, **kw):
        return (a, b, c, rest, d, e, kw, k)

    with mlprof.Profiler(output=str(tmp_path / "l.mlprof"),
                         sample_interval=0, lines=[sig]) as p:
        assert sig(1, 2, d=4) == (1, 2, 3, (), 4, 5, {}, 10)
        assert sig(1, b=2, c=0, d=4, z=9) == (1, 2, 0, (), 4, 5, {"z": 9}, 10)
        assert sig(1, 2, 3, 6, 7, d=4) == (1, 2, 3, (6, 7), 4, 5, {}, 10)
        with pytest.raises(TypeError):
            sig(a=1, b=2, d=4)  # a is positional-only
        k = 11
        assert sig(1, 2, d=4)[-1] == 11  # the same cell
        r = rows_of(p.summary(), sig)
    assert r[1]["hits"] == 4, r


def gen_fn(n):
    for i in range(n):
        yield i


def test_generator_through_the_trace_function(tmp_path):
    with mlprof.Profiler(output=str(tmp_path / "l.mlprof"),
                         sample_interval=0, lines=[gen_fn]) as p:
        assert sum(gen_fn(4)) == 6
        assert probe() is False  # the trace function on every thread
        r = rows_of(p.summary(), gen_fn)
    assert r[2]["hits"] == 4, r
    assert probe() is True


def run_child(tmp_path, build_dir, src, *args):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(src))
    return subprocess.run(
        [sys.executable, "-m", "mlprof", "run", *args, "-q", "-o",
         str(tmp_path / "o") + "/", str(script)],
        env=child_env(MLPROF_CLI=os.path.join(build_dir, "mlprof")),
        capture_output=True, text=True, timeout=120)


def test_name_of_a_module_imported_later(tmp_path, build_dir):
    """A name whose module is imported after the choice is reached through
    the function object when the import runs: no trace function at any
    time, every call counted."""
    (tmp_path / "later_mod.py").write_text(textwrap.dedent("""
        def work(n):
            t = 0
            for i in range(n):
                t += i
            return t
    """))
    r = run_child(tmp_path, build_dir, """
        import json, sys

        def traced():  # whether the trace function saw this frame
            return not sys._getframe().f_trace_lines

        assert not traced()
        from later_mod import work
        assert not traced()
        for _ in range(7):
            work(3)
        import mlprof
        print(json.dumps(mlprof.line_table()))
    """, "--lines", "later_mod:work")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    hits = {x["line"]: x["hits"] for x in rows if x["function"] == "work"}
    assert hits == {3: 7, 4: 28, 5: 21, 6: 7}, rows


def test_name_in_main_released_after_first_call(tmp_path, build_dir):
    """A function of the script (defined as it runs) is found by the trace
    function at its first call, and reached through the function object
    from then on: the trace function leaves, and every call is counted,
    the first one included."""
    r = run_child(tmp_path, build_dir, """
        import json, sys

        def traced():  # whether the trace function saw this frame
            return not sys._getframe().f_trace_lines

        def step(i):
            return i * 2

        assert traced()  # not found yet
        step(0)
        assert not traced()
        for i in range(99):
            step(i)
        import mlprof
        print(json.dumps(mlprof.line_table()))
    """, "--lines", "prog:step")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    hits = [x["hits"] for x in rows if x["function"] == "step"]
    assert hits == [100], rows


def test_killed_job_keeps_its_line_timings(tmp_path, build_dir):
    """Line timings reach the profile while the job runs: a process
    SIGKILLed while its chosen function runs has them in its report."""
    script = tmp_path / "killed.py"
    out = tmp_path / "k.mlprof"
    script.write_text(textwrap.dedent("""
        import os, signal, sys, time
        import mlprof

        def busy():
            time.sleep(0.01)
            return 1

        with mlprof.Profiler(output=sys.argv[1], sample_interval=0,
                             lines=[busy]):
            end = time.monotonic() + 2.5  # the timings go every second
            while time.monotonic() < end:
                busy()
            os.kill(os.getpid(), signal.SIGKILL)
    """))
    r = subprocess.run([sys.executable, str(script), str(out)],
                       env=child_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == -9, r.stderr
    assert busy_hits(build_dir, out).get(6, 0) > 10


def busy_hits(build_dir, path):
    """{line: hits} of busy() in `mlprof report -f json path`."""
    rep = subprocess.run([os.path.join(build_dir, "mlprof"), "report", "-f",
                          "json", str(path)], capture_output=True, text=True)
    return {x["line"]: x["hits"] for x in json.loads(rep.stdout)["lines"]
            if x["function"] == "busy"}


def test_forked_worker_keeps_its_own_line_timings(tmp_path, build_dir):
    """A worker forked after its parent timed lines times its own from zero
    into its own profile, handed over while it runs: killed, it keeps
    them, and the parent's are not counted again in the worker's."""
    script = tmp_path / "worker.py"
    out = tmp_path / "w.mlprof"
    script.write_text(textwrap.dedent("""
        import os, signal, sys, time
        import mlprof

        def busy():
            time.sleep(0.001)
            return 1

        with mlprof.Profiler(output=sys.argv[1], sample_interval=0,
                             lines=[busy]):
            for _ in range(500):
                busy()
            pid = os.fork()
            if pid == 0:
                for _ in range(7):
                    busy()
                time.sleep(2.5)  # the timings go every second
                os.kill(os.getpid(), signal.SIGKILL)
            os.waitpid(pid, 0)
            print(pid)
    """))
    r = subprocess.run([sys.executable, str(script), str(out)],
                       env=child_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    child = tmp_path / ("w-%s.mlprof" % r.stdout.split()[-1])
    assert busy_hits(build_dir, out)[6] == 500
    assert busy_hits(build_dir, child)[6] == 7


def fact(n):
    return 1 if n <= 1 else n * fact(n - 1)


def test_recursion_by_name_with_calls(tmp_path):
    """The trampoline has its function's name but is neither timed nor a
    zone: a recursive function chosen by name has one table, and each call
    one zone."""
    mlprof.lines("%s:fact" % __name__)
    with mlprof.Profiler(output=str(tmp_path / "l.mlprof"),
                         sample_interval=0, backend="calls") as p:
        assert fact(5) == 120
        s = p.summary()
    rows = [r for r in s["lines"] if r["function"] == "fact"]
    assert [r["hits"] for r in rows] == [5], rows
    zones = [z for z in s["zones"] if z["name"].endswith(".fact")]
    assert [z["count"] for z in zones] == [5], zones


def by_code(a):
    return a * 3


def test_code_object_reached_through_its_function(tmp_path):
    """A code object is reached through the function found for it: no
    trace function on every thread."""
    with mlprof.Profiler(output=str(tmp_path / "l.mlprof"),
                         sample_interval=0, lines=[by_code.__code__]) as p:
        for i in range(50):
            by_code(i)
        assert probe() is True
        r = rows_of(p.summary(), by_code)
    assert r[1]["hits"] == 50, r
