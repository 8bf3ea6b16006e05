"""Stack samples attributed to the steps (docs/stacks.md): Hot functions per
step part, the step's "other" time explained by the samples of that time
alone, and a zone whose time is mostly under one callee."""
import json
import os
import re
import subprocess

import pytest

from test_stacks import SPIN, mlprof_cmd, run  # noqa: F401 (SPIN: the spin())

# A slow start-up (an import's busy loop) before steps whose "other" time
# (in the step, outside forward) is in clip_metric.
STEPS = """
import mlprof

def heavy_import():
    end = time.perf_counter() + 0.6
    while time.perf_counter() < end:
        pass

def fwd():
    end = time.perf_counter() + 0.04
    while time.perf_counter() < end:
        pass

def clip_metric():
    end = time.perf_counter() + 0.03
    while time.perf_counter() < end:
        pass

heavy_import()
prof = mlprof.Profiler().start()
for _ in range(8):
    %s
prof.step()
prof.stop()
"""

BODY = {
    "marks": """prof.step()
    with prof.zone("forward"):
        fwd()
    clip_metric()""",
    "zone": """with prof.zone("train_step"):
        with prof.zone("forward"):
            fwd()
        clip_metric()""",
}


def names(rows):
    return [r["function"] for r in rows if r["file"].endswith("run.py")]


@pytest.mark.parametrize("steps", ["marks", "zone"])
def test_other_is_explained_by_its_own_samples(build_dir, tmp_path, steps):
    _, out = run(build_dir, tmp_path, STEPS % BODY[steps], "--stacks", "200")
    rep = json.loads(mlprof_cmd(build_dir, "report", "-f", "json", out))
    h = rep["hot"]
    # The whole run is dominated by the start-up...
    assert names(h["functions"])[0] == "heavy_import", h["functions"][:3]
    # ...which lies outside the steps.
    assert h["outside_steps"]["on_cpu_ns"] >= 0.4e9, h["outside_steps"]
    other = names(h["parts"]["other"]["functions"])
    assert other[0] == "clip_metric", other
    assert "heavy_import" not in other, other
    # A sample read as a zone begins or ends may land on its other side
    # (the sample's time is taken before the walk): a few, no more.
    def share(part, name):
        p = h["parts"][part]
        return sum(r["self_cpu_ns"] for r in p["functions"]
                   if r["function"] == name) / p["on_cpu_ns"]
    assert share("other", "clip_metric") >= 0.85, h["parts"]["other"]
    assert share("other", "fwd") <= 0.1, h["parts"]["other"]
    fwd = names(h["parts"]["forward"]["functions"])
    assert fwd[0] == "fwd", fwd
    assert share("forward", "clip_metric") <= 0.1, h["parts"]["forward"]
    assert 0.15e9 <= h["parts"]["other"]["on_cpu_ns"] <= 0.4e9, h["parts"]
    text = mlprof_cmd(build_dir, "report", out)
    line = next(l for l in text.splitlines()
                if l.startswith("  other, by stack samples"))
    assert re.search(r"clip_metric \([^ ]*run\.py:\d+\) \d+%", line), line
    assert "heavy_import" not in line, line
    assert "Hot functions by step part" in text
    assert "the whole run, start-up included" in text


def test_zone_mostly_under_one_callee_says_so(build_dir, tmp_path):
    """"work" spends 80% under slow(): its finding names slow with its
    file:line; "spread" splits its time three ways: no callee named."""
    _, out = run(build_dir, tmp_path, """
        import mlprof
        prof = mlprof.Profiler().start()
        def small(): spin(0.02)
        def slow(): spin(0.16)
        def a(): spin(0.06)
        def b(): spin(0.06)
        def c(): spin(0.06)
        for _ in range(5):
            with prof.zone("work"):
                small(); slow(); small()
            with prof.zone("spread"):
                a(); b(); c()
        prof.stop()
    """, "--stacks", "200")
    src = (tmp_path / "run.py").read_text().splitlines()
    def_line = 1 + next(i for i, l in enumerate(src)
                        if l.startswith("def slow"))
    rep = json.loads(mlprof_cmd(build_dir, "report", "-f", "json", out))
    work = [x for x in rep["findings"] if x["zone"] == "work"]
    assert work, rep["findings"]
    m = re.search(r"; (\d+)% of its sampled time under slow \([^ ]*run\.py:(\d+)\)",
                  work[0]["summary"])
    assert m, work[0]["summary"]
    assert 65 <= int(m.group(1)) <= 95 and int(m.group(2)) == def_line
    ev = work[0]["evidence"]
    share = ev["callee_share"] if isinstance(ev, dict) else next(
        e["value"] for e in ev if e["key"] == "callee_share")
    assert 0.65 <= share <= 0.95, share
    for x in rep["findings"]:
        if x["zone"] == "spread":
            assert " under " not in x["summary"], x
    text = mlprof_cmd(build_dir, "report", out)
    assert re.search(r"under slow \([^ ]*run\.py:%d\)" % def_line, text), text


DIFF = """
import os
import mlprof
SLOW = float(os.environ.get("SLOW", "1"))
prof = mlprof.Profiler().start()
def steady():
    end = time.perf_counter() + 0.02
    while time.perf_counter() < end:
        pass
def changing():
    end = time.perf_counter() + 0.02 * SLOW
    while time.perf_counter() < end:
        pass
STEPS = os.environ.get("STEPS") == "1"
for _ in range(20):
    if STEPS:
        prof.step()
    with prof.zone("train_step"):
        steady()
        changing()
if STEPS:
    prof.step()
prof.stop()
"""


def diff(build_dir, base, new):
    r = subprocess.run([os.path.join(build_dir, "mlprof"), "diff", "-f",
                        "json", str(base), str(new)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 1), r.stderr
    text = subprocess.run([os.path.join(build_dir, "mlprof"), "diff",
                           str(base), str(new)], capture_output=True,
                          text=True, timeout=300).stdout
    return json.loads(r.stdout), text


@pytest.mark.parametrize("steps", ["1", "0"])
def test_diff_names_the_function_made_slower(build_dir, tmp_path,
                                             monkeypatch, steps):
    """One script run three times: as is twice (A/A), then with changing()
    twice as slow; the runs are in two directories, as two checkouts. Per
    step with step marks, per run without."""
    monkeypatch.setenv("STEPS", steps)
    outs = {}
    for name, slow in (("base", "1"), ("same", "1"), ("slow", "2")):
        monkeypatch.setenv("SLOW", slow)
        where = tmp_path / ("a" if name == "base" else "b")
        where.mkdir(exist_ok=True)
        outs[name] = run(build_dir, where, DIFF, "--stacks", "200",
                         name="train")[1]
        outs[name] = outs[name].rename(tmp_path / name)
    d, text = diff(build_dir, outs["base"], outs["slow"])
    funcs = d["functions"]
    assert funcs["per"] == ("step" if steps == "1" else "run")
    rows = {r["function"]: r for r in funcs["rows"]
            if r["file"] == "train.py"}
    assert rows["changing"]["verdict"] == "slower", funcs
    assert 1.3 <= rows["changing"]["ratio"] <= 2.6, rows["changing"]
    assert rows["changing"]["p"] <= 0.01
    assert rows["steady"]["verdict"] == "unchanged", rows["steady"]
    assert re.search(r"changing .* slower", text), text
    # A/A: nothing significant.
    d, text = diff(build_dir, outs["base"], outs["same"])
    bad = [r for r in d["functions"]["rows"] if r["verdict"] != "unchanged"]
    assert not bad, bad
    assert "0 changed of" in text, text
