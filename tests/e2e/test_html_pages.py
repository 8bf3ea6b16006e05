"""mlprof html's pages beyond the dashboard: --diff (the verdicts of mlprof
diff with each zone's distributions) and the distributions of --compare, on
runs of tests/programs/workload.c (see test_compare.py)."""
import json

import pytest

from conftest import interleaved_runs, mlprof  # noqa: F401
from test_html import check_self_contained, page_data

STEPS = 600


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The base and a run whose forward does 40% more work, interleaved."""
    d = tmp_path_factory.mktemp("pages")
    jobs = [(d / "base",), (d / "slow", "forward=40")]
    interleaved_runs(*jobs, steps=STEPS // 3, rounds=3)
    return {path.name: path for path, *_ in jobs}


def test_html_diff_holds_mlprof_diff_and_distributions(runs, tmp_path):
    out = tmp_path / "diff.html"
    p = mlprof("html", "--diff", runs["base"], runs["slow"], "-o", out)
    assert p.returncode == 0  # a page, not a gate: 0 despite the regression
    text = out.read_text()
    check_self_contained(text)
    d = page_data(text)
    doc = json.loads(mlprof("diff", runs["base"], runs["slow"], "--format", "json",
                            check=False).stdout)
    assert d["diff"] == doc
    assert {z["name"]: z["verdict"] for z in d["diff"]["zones"]}["forward"] == "slower"
    assert d["diff"]["regression"] is True
    # One [base, new] pair of distributions per zone, in the diff's order.
    assert len(d["diff_dist"]) == len(doc["zones"])
    for z, (qb, qn) in zip(doc["zones"], d["diff_dist"]):
        for q, side in ((qb, z["base"]), (qn, z["new"])):
            assert len(q) == 21 and q == sorted(q)
            assert q[10] <= side["median_ns"] + 1 and q[20] >= side["p99_ns"]
    fw = [q for z, q in zip(doc["zones"], d["diff_dist"]) if z["name"] == "forward"][0]
    assert fw[1][10] > fw[0][10] * 1.2
    # The dashboard is NEW's; no comparison of several runs.
    assert all("forward=40" in p["cmdline"] for p in d["report"]["processes"])
    assert d["compare"] is None and d["compare_dist"] == []
    assert d["title"] == str(runs["slow"])


def test_html_diff_distribution_is_the_durations_percentiles(tmp_path, lib):
    # The percentiles the report computes by the same rule (stats.h).
    from test_html import record
    a, b = tmp_path / "a.mlprof", tmp_path / "b.mlprof"
    record(lib, a, [b"z"], spans=7)
    record(lib, b, [b"z"], spans=9)
    out = tmp_path / "d.html"
    mlprof("html", "--diff", a, b, "-o", out)
    d = page_data(out.read_text())
    names = [z["name"] for z in d["diff"]["zones"]]
    for side, path in ((0, a), (1, b)):
        rep = json.loads(mlprof("report", path, "--format", "json").stdout)
        for z in rep["zones"]:
            q = d["diff_dist"][names.index(z["name"])][side]
            assert (q[0], q[10], q[18], q[20]) == (z["min_ns"], z["p50_ns"], z["p90_ns"],
                                                   z["max_ns"])


def test_html_no_diff_has_empty_diff(runs, tmp_path):
    out = tmp_path / "plain.html"
    mlprof("html", runs["base"], "-o", out)
    d = page_data(out.read_text())
    assert d["diff"] is None and d["diff_dist"] == []


def test_html_diff_usage_errors(runs, tmp_path):
    out = tmp_path / "x.html"
    a, b = runs["base"], runs["slow"]
    junk = tmp_path / "junk.mlprof"
    junk.write_bytes(b"not a profile at all")
    for args, why in [(("--diff", a), "two runs"), (("--diff", a, b, a), "two runs"),
                      (("--diff", "--compare", a, b), "--compare"),
                      (("--diff", "--labels", "x,y", a, b), "--compare"),
                      (("--diff", a, tmp_path / "missing"), "missing"),
                      (("--diff", junk, b), "junk"),
                      (("--diff", a, b, "--zone", "nothing*"), "match no zone of this run")]:
        p = mlprof("html", *args, "-o", out, check=False)
        assert p.returncode == 2, (args, p.stderr)
        assert p.stderr.startswith("mlprof html: ") and why in p.stderr, (args, p.stderr)
        assert not out.exists()
    # -o naming a profile of BASE is refused.
    prof = next(a.glob("*.mlprof"))
    before = prof.read_bytes()
    p = mlprof("html", "--diff", a, b, "-o", prof, check=False)
    assert p.returncode == 2 and "choose another -o" in p.stderr
    assert prof.read_bytes() == before
    assert "--diff" in mlprof("html", "--help").stdout


def test_html_compare_has_distributions(runs, tmp_path):
    out = tmp_path / "cmp.html"
    mlprof("html", "--compare", runs["base"], runs["slow"], "-o", out)
    d = page_data(out.read_text())
    c = d["compare"]
    assert len(d["compare_dist"]) == len(c["zones"])
    for z, qs in zip(c["zones"], d["compare_dist"]):
        assert len(qs) == 2
        for q, s in zip(qs, z["runs"]):
            assert len(q) == 21 and q[10] == s["p50_ns"] and q[0] <= s["mean_ns"] <= q[20]
    assert d["diff"] is None
