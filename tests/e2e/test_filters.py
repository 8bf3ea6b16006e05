"""Filters (docs/guide.md, "Filters") in every front end: report, trace,
html, compare and diff, on a real run of tests/programs/findings_pipeline
(nested: each step is "schedule" holding "forward" and "loss", then a step
mark)."""
import json
import os
import subprocess

import pytest

from conftest import MLPROF, mlprof, program, zone

STEPS = 10


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("filters") / "run"
    mlprof("run", "-o", out, "--", program("findings_pipeline"), "nested",
           STEPS)
    return out


def report(*args):
    return json.loads(mlprof("report", "--format", "json", "--top", "0",
                             *args).stdout)


def test_report_steps_select_those_steps(run):
    full = report(run)
    assert full["steps"]["count"] == STEPS - 1  # intervals between marks
    r = report(run, "--steps", "2:5")
    assert zone(r, "schedule")["count"] == 3
    assert zone(r, "forward")["count"] == 3
    assert r["steps"]["count"] == 3
    warm = report(run, "--skip-warmup", "8")
    assert zone(warm, "schedule")["count"] == 1
    assert warm["warnings"] == []  # mlprof run's own process has no spans


def test_report_wall_is_the_selections(run):
    """With --skip-warmup the header's wall time and every zone's share of
    it are the selection's, not the whole run's (issue #21, item 14)."""
    full = report(run)
    warm = report(run, "--skip-warmup", str(STEPS - 2))
    sched = zone(warm, "schedule")
    assert sched["count"] == 1
    assert warm["wall_ns"] < full["wall_ns"] / 3
    assert warm["wall_ns"] >= sched["total_ns"]
    assert sched["share"] > 0.95


def test_report_zone_filters_keep_self_time(run):
    full = report(run)
    r = report(run, "--exclude", "loss")
    assert [z["name"] for z in r["zones"]] == ["schedule", "forward"]
    assert zone(r, "schedule")["self_ns"] == zone(full, "schedule")["self_ns"]
    assert r["steps"] == full["steps"]
    cat = report(run, "--category", "forward")
    assert [z["name"] for z in cat["zones"]] == ["forward"]
    only = report(run, "--zone", "sch*")
    assert [z["name"] for z in only["zones"]] == ["schedule"]


def test_report_window_and_processes(run):
    full = report(run)
    first = zone(full, "schedule")
    # The first 250 ms hold fewer schedules than the whole run.
    r = report(run, "--window", ":250ms")
    assert 0 < zone(r, "schedule")["count"] < first["count"]
    by_name = report(run, "--process", "findings_pipeline")
    assert zone(by_name, "schedule")["count"] == first["count"]


@pytest.mark.parametrize("args, message", [
    (["--steps", "5:3"], "--steps wants A:B"),
    (["--steps", "x"], "--steps wants A:B"),
    (["--window", "10:20"], "--window wants T0:T1"),
    (["--category", "gpu"], "unknown category 'gpu'"),
    (["--track", "main"], "--track wants PROCESS/THREAD"),
    (["--rank", "-1"], "--rank wants a rank"),
    (["--skip-warmup", "-2"], "--skip-warmup wants a number"),
])
def test_bad_filters_are_usage_errors(run, args, message, tmp_path):
    for cmd in ("report", "trace", "html", "compare", "diff", "export"):
        paths = [run, run] if cmd in ("compare", "diff") else \
            [run, "-o", str(tmp_path / "tables")] if cmd == "export" else [run]
        p = mlprof(cmd, *args, *paths, check=False)
        assert p.returncode == 2, (cmd, p.stderr)
        assert message in p.stderr
        assert len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, message", [
    (["--zone", "nomatch"], "match no zone of"),
    (["--category", "io"], "match no zone of this run"),
    (["--process", "nosuch"], "--process/--rank match no process of this "
     "run: "),
    (["--rank", "3"], "--rank: this run has no ranks"),
    (["--steps", "100:200"], "select no step: this run has 10 steps (0:10)"),
    (["--skip-warmup", "40"], "select no step: this run has 10 steps"),
    (["--thread", "nosuch"], "--thread/--track match no thread"),
])
def test_filters_matching_nothing_say_so(run, args, message, tmp_path):
    """A filter that matches nothing is the user's mistake: a one-line error
    naming the options and what the run has, exit 2 — never an empty
    report that reads as "no zones recorded" (issue #21)."""
    for cmd in ("report", "trace", "html", "compare", "diff", "export"):
        paths = [run, run] if cmd in ("compare", "diff") else \
            [run, "-o", str(tmp_path / "tables")] if cmd == "export" else [run]
        p = mlprof(cmd, *args, *paths, check=False)
        assert p.returncode == 2, (cmd, p.returncode, p.stderr)
        assert message in p.stderr, (cmd, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1, (cmd, p.stderr)
        assert "No zones recorded" not in p.stdout
    assert not (tmp_path / "tables").exists()


def test_a_zone_filter_matching_nothing_names_the_zones(run):
    p = mlprof("report", run, "--zone", "shedule", check=False)
    assert p.returncode == 2 and '"schedule"' in p.stderr, p.stderr


def test_filters_matching_part_of_the_run_are_no_error(run):
    assert mlprof("report", run, "--process", "findings_pipeline",
                  "--zone", "forward", "--steps", "9:").returncode == 0


def trace_events(path):
    with open(path) as f:
        return json.load(f)["traceEvents"]


def test_trace_filters(run, tmp_path):
    out = tmp_path / "t.json"
    p = mlprof("trace", run, "-o", out, "--zone", "forward", "--steps", "2:5")
    spans = [e for e in trace_events(out) if e["ph"] == "X"]
    assert [e["name"] for e in spans] == ["forward"] * 3
    steps = [e for e in trace_events(out) if e["ph"] == "i"]
    assert len(steps) == 4  # marks 2 to 5
    assert "warning" not in p.stderr


def test_trace_max_mb_keeps_the_longest_spans(tmp_path):
    run = tmp_path / "run"
    mlprof("run", "-o", run, "--", program("inference_loop"), 300)
    full, small = tmp_path / "full.json", tmp_path / "small.json"
    mlprof("trace", run, "-o", full)
    size = os.path.getsize(full)
    limit = size / 2 / 1e6
    p = mlprof("trace", run, "-o", small, "--max-mb", f"{limit:.6f}")
    assert os.path.getsize(small) <= limit * 1e6
    assert "kept the spans of" in p.stderr
    kept = [e["dur"] for e in trace_events(small) if e["ph"] == "X"]
    every = [e["dur"] for e in trace_events(full) if e["ph"] == "X"]
    assert 0 < len(kept) < len(every)
    # The longest ones: nothing left out is longer than what was kept.
    assert sorted(every)[-len(kept):] == sorted(kept)


def test_trace_size_warning(run, tmp_path):
    out = tmp_path / "t.json"
    p = mlprof("trace", run, "-o", out, "--warn-mb", "0.001")
    assert "warning: the trace is" in p.stderr
    assert "chrome://tracing fails above ~256 MB" in p.stderr
    assert "--window T0:T1" in p.stderr
    quiet = mlprof("trace", run, "-o", out)
    assert "warning: the trace is" not in quiet.stderr


def test_html_takes_filters(run, tmp_path):
    out = tmp_path / "r.html"
    mlprof("html", run, "-o", out, "--steps", "1:3", "--exclude", "loss")
    assert out.stat().st_size > 0


def tree_paths(data):
    """The page's call tree as {"a/b": (total_ns, count)}."""
    nodes, names = data["tree"]["nodes"], data["tree"]["names"]
    paths = {}
    for i, n in enumerate(nodes):
        path, k = [], i
        while k >= 0:
            path.insert(0, names[nodes[k][0]])
            k = nodes[k][1]
        paths["/".join(path)] = (n[2], n[3])
    return paths


def test_html_tree_narrowed_by_zone_filters(run, tmp_path):
    import test_html  # its page_data (a module attribute: not collected again)
    full = report(run)
    out = tmp_path / "r.html"

    def tree(*args):
        mlprof("html", run, "-o", out, *args)
        return tree_paths(test_html.page_data(out.read_text()))

    fwd = zone(full, "forward")
    assert tree("--zone", "forward") == {
        "forward": (fwd["total_ns"], fwd["count"])}
    assert tree("--category", "forward") == tree("--zone", "forward")
    # An excluded root: its children become the roots.
    assert set(tree("--exclude", "schedule")) == {"forward", "loss"}
    # Inside a zone's subtree, an excluded zone goes, the parent stays whole.
    sched = zone(full, "schedule")
    assert tree("--zone", "schedule", "--exclude", "loss") == {
        "schedule": (sched["total_ns"], sched["count"]),
        "schedule/forward": (fwd["total_ns"], fwd["count"])}


def test_compare_and_diff_restricted(run):
    c = json.loads(mlprof("compare", run, run, "-f", "json", "-l", "a,b",
                          "--exclude", "loss").stdout)
    assert sorted(z["name"] for z in c["zones"]) == ["forward", "schedule"]
    d = json.loads(mlprof("diff", run, run, "-f", "json", "--steps",
                          "0:3").stdout)
    for z in d["zones"]:
        assert z["base"]["count"] == 3 and z["new"]["count"] == 3


def test_serve_applies_filters_to_every_run(run):
    import test_html  # its Server (a module attribute: not collected again)
    whole = test_html.Server(run.parent)
    srv = test_html.Server(run.parent, "--zone", "forward", "--steps", "2:5")
    try:
        st, _, body = srv.get("/data/" + run.name)
        assert st == 200
        r = json.loads(body)["report"]
        assert [(z["name"], z["count"]) for z in r["zones"]] == [("forward", 3)]
        assert {p: c for p, (_, c) in tree_paths(json.loads(body)).items()} \
            == {"forward": 3}
        assert r["steps"]["count"] == 3
        st, _, body = srv.get("/metrics")
        counts = [line for line in body.decode().splitlines()
                  if line.startswith("mlprof_zone_duration_seconds_count")]
        assert len(counts) == 1 and 'zone="forward"' in counts[0]
        assert counts[0].endswith(" 3")
        # The timeline is the analysis's too: steps 2 to 5 only.
        window = "?t0=0&t1=100000000000&res=0"
        st, _, some = srv.get("/timeline/" + run.name + window)
        st2, _, every = whole.get("/timeline/" + run.name + window)
        assert st == st2 == 200
        assert 0 < len(some) < len(every)
    finally:
        assert srv.stop() == 0
        assert whole.stop() == 0


def test_serve_bad_filter_is_a_usage_error(run):
    p = mlprof("serve", run, "--steps", "5:3", check=False)
    assert p.returncode == 2
    assert "mlprof serve: --steps wants A:B" in p.stderr
    assert "--skip-warmup N" in mlprof("serve", "--help").stdout
