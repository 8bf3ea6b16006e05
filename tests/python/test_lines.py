"""Line timings of chosen functions: Profiler(lines=[fn]), prof.lines(fn),
@mlprof.lines, `python -m mlprof run --lines MODULE:FUNCTION`."""
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
