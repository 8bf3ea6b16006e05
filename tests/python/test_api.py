"""The Python API: zones, metadata, metrics, throughput, schedule, summary,
export, clear, threads, fork, joining a session under `mlprof run`."""
import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import mlprof
from mlprof import _mlprof
from conftest import child_env


@pytest.fixture
def prof(tmp_path):
    p = mlprof.Profiler(output=str(tmp_path / "p.mlprof"))
    p.start()
    yield p
    p.stop()


def zones_by_name(summary):
    return {z["name"]: z for z in summary["zones"]}


def by_name(rows, key="name"):
    return {r[key]: r for r in rows}


def spans(prof, name=None):
    _mlprof.flush()
    ev = mlprof.read_events(prof.path)
    return [s for s in ev["spans"] if name is None or s["name"] == name]


def test_zone_object_is_cached_and_reusable(prof):
    assert prof.zone("a") is prof.zone("a")
    assert prof.zone("a") is not prof.zone("b")
    assert prof.zone("a", "forward") is not prof.zone("a")
    assert prof.zone("a", batch=1) is not prof.zone("a", batch=1)
    z = prof.zone("a")
    for _ in range(3):
        with z:
            with z:  # reentrant
                pass
    assert zones_by_name(prof.summary())["a"]["count"] == 6


def test_nesting_counts_and_self_time(prof):
    for _ in range(20):
        with prof.zone("outer"):
            with prof.zone("inner"):
                time.sleep(0.001)
    s = prof.summary()
    z = zones_by_name(s)
    assert z["outer"]["count"] == 20 and z["inner"]["count"] == 20
    assert z["inner"]["total_ns"] >= 20 * 1_000_000
    assert z["outer"]["total_ns"] >= z["inner"]["total_ns"]
    assert z["outer"]["self_ns"] < z["inner"]["total_ns"]
    assert z["inner"]["min_ns"] <= z["inner"]["p50_ns"] <= z["inner"]["max_ns"]
    depths = {sp["name"]: sp["depth"] for sp in spans(prof)}
    assert depths == {"outer": 0, "inner": 1}


def test_exception_inside_zone_closes_it(prof):
    with pytest.raises(KeyError):
        with prof.zone("fails"):
            with prof.zone("fails_inner", step=3):
                raise KeyError("x")
    assert _mlprof.open_depth() == 0
    with prof.zone("after"):
        pass
    d = {sp["name"]: sp["depth"] for sp in spans(prof)}
    assert d == {"fails_inner": 1, "fails": 0, "after": 0}


def test_gauges_and_units_land_in_innermost_zone(prof):
    for i in range(5):
        with prof.zone("step_zone"):
            with prof.zone("batch_zone"):
                prof.units("samples", 32)
                mlprof.units("tokens", 1000)  # whatever session runs
                prof.gauge("loss", 0.5)
            prof.units("bytes", 2)
        mlprof.gauge("lr", 0.25 * i)
    z = zones_by_name(prof.summary())
    batch = by_name(z["batch_zone"]["units"], "unit")
    step = by_name(z["step_zone"]["units"], "unit")
    assert batch["samples"]["n"] == 160 and batch["tokens"]["n"] == 5000
    assert "samples" not in step and step["bytes"]["n"] == 10
    assert batch["samples"]["per_s"] > 0
    for sp in spans(prof, "batch_zone"):
        assert sp["meta"] == {}
        assert sp["units"] == {"samples": 32, "tokens": 1000}
    gauges = by_name(prof.summary()["counters"])
    assert gauges["loss"]["count"] == 5 and gauges["loss"]["mean"] == 0.5
    assert gauges["lr"]["count"] == 5 and gauges["lr"]["last"] == 1.0


def test_deprecated_names_still_record(prof):
    """record_throughput(n, unit), record_metric (a gauge and the value on
    the innermost zone) and counter: docs/python.md, Deprecated names."""
    for i in range(5):
        with prof.zone("step_zone"):
            with prof.zone("batch_zone"):
                prof.record_throughput(32)
                prof.record_throughput(1000, unit="tokens")
                prof.record_metric("loss", 0.5)
            prof.counter("lr", 0.25)
    z = zones_by_name(prof.summary())
    batch = by_name(z["batch_zone"]["units"], "unit")
    assert batch["samples"]["n"] == 160 and batch["tokens"]["n"] == 5000
    for sp in spans(prof, "batch_zone"):
        assert sp["meta"] == {"loss": "0.5"}
    for sp in spans(prof, "step_zone"):
        assert sp["meta"] == {}
    gauges = by_name(prof.summary()["counters"])
    assert gauges["loss"]["count"] == 5 and gauges["lr"]["count"] == 5


def test_zone_metadata_and_category(prof):
    with prof.zone("load", "data", path="/x.bin", shard=3):
        pass
    sp = spans(prof, "load")[0]
    assert sp["meta"] == {"path": "/x.bin", "shard": "3"}
    assert zones_by_name(prof.summary())["load"]["category"] == "data"


def test_decorators(prof):
    @prof.function
    def work(x):
        return x * 2

    @prof.function(name="named_work", category="optimizer")
    def work2():
        raise ValueError("boom")

    @mlprof.profile
    def global_work():
        return 7

    assert work(4) == 8 and global_work() == 7
    with pytest.raises(ValueError):
        work2()
    z = zones_by_name(prof.summary())
    assert z["test_api.test_decorators.<locals>.work"]["count"] == 1
    assert z["named_work"]["category"] == "optimizer"
    assert z["test_api.test_decorators.<locals>.global_work"]["count"] == 1
    assert _mlprof.open_depth() == 0


def test_bad_arguments(prof):
    with pytest.raises(TypeError):
        prof.zone(123)
    with pytest.raises(ValueError):
        prof.zone("x", "no-such-category")
    with pytest.raises(ValueError):
        prof.zone("a\0b")
    with pytest.raises(ValueError):
        prof.units("samples", -1)
    with pytest.raises(TypeError):
        prof.gauge("m", "not a number")
    with pytest.raises(TypeError):
        prof.units(3, "samples")  # the name comes first, as in C
    with pytest.raises(ValueError):
        prof.record_throughput(-1)
    with pytest.raises(TypeError):
        prof.record_metric("m", "not a number")
    with pytest.raises(ValueError):
        mlprof.schedule(wait=-1)
    with pytest.raises(ValueError):
        prof.export(str(prof.path) + ".out", formats=["pdf"])


def test_zone_skipped_while_disabled_does_not_close_outer(prof):
    with prof.zone("outer"):
        prof.set_enabled(False)
        with prof.zone("hidden"):
            pass
        prof.set_enabled(True)
        time.sleep(0.005)
    z = zones_by_name(prof.summary())
    assert "hidden" not in z
    # outer ended at its own end, not at hidden's end
    assert z["outer"]["total_ns"] >= 5_000_000


def test_schedule_matches_torch_profiler_semantics():
    sch = mlprof.schedule(skip_first=1, wait=1, warmup=1, active=2, repeat=2)
    got = [sch(i) for i in range(12)]
    assert got == ["none", "none", "warmup", "record", "record", "none",
                   "warmup", "record", "record", "none", "none", "none"]
    forever = mlprof.schedule(wait=2, warmup=0, active=1)
    assert [forever(i) for i in range(6)] == ["none", "none", "record"] * 2


def test_schedule_records_only_active_steps(tmp_path):
    sch = mlprof.schedule(wait=1, warmup=1, active=2, repeat=1)
    with mlprof.Profiler(output=str(tmp_path / "s.mlprof"),
                         schedule=sch) as prof:
        for i in range(8):
            with prof.zone("train", step=i):
                pass
            prof.step()
    ev = mlprof.read_events(prof.path)
    steps = sorted(int(s["meta"]["step"]) for s in ev["spans"]
                   if s["name"] == "train")
    assert steps == [2, 3]
    assert zones_by_name(prof.summary())["train"]["count"] == 2


def test_schedule_steps_are_the_active_steps(tmp_path):
    """Each active step is a step of the breakdown, the first one included
    (its beginning falls while recording is still off)."""
    sch = mlprof.schedule(wait=2, warmup=1, active=3, repeat=1)
    with mlprof.Profiler(output=str(tmp_path / "s.mlprof"),
                         schedule=sch) as prof:
        for i in range(8):
            with prof.zone("train", "forward", step=i):
                time.sleep(0.001)
            prof.step()
    s = prof.summary()
    assert zones_by_name(s)["train"]["count"] == 3
    assert s["steps"]["count"] == 3
    # A mark begins steps 3, 4 and 5; a step end closes the window.
    assert s["threads"][0]["steps"] == 3


def test_schedule_windows_are_steps_and_gaps_are_not(tmp_path, build_dir):
    """With repeat=2 the time between the two windows is no step: exactly
    active x repeat steps, none as long as a gap."""
    sch = mlprof.schedule(wait=2, warmup=1, active=3, repeat=2)
    with mlprof.Profiler(output=str(tmp_path / "s.mlprof"),
                         schedule=sch) as prof:
        for i in range(14):
            with prof.zone("train", "forward", step=i):
                time.sleep(0.002)
            if sch(i) != "record":
                time.sleep(0.05)  # a gap far longer than any step
            prof.step()
    s = prof.summary()
    assert zones_by_name(s)["train"]["count"] == 6
    assert s["steps"]["count"] == 6
    assert s["steps"]["p90_ns"] < 40e6
    assert s["threads"][0]["steps"] == 6  # a mark begins each step
    r = json.loads(subprocess.run(
        [os.path.join(build_dir, "mlprof"), "report", prof.path, "--format",
         "json"],
        check=True, capture_output=True, text=True).stdout)
    assert r["steps"]["count"] == 6
    assert r["steps"]["p90_ns"] < 40e6


def test_threads_are_recorded_with_names(prof):
    def worker(i):
        prof.thread_name("worker-%d" % i)
        for _ in range(10):
            with prof.zone("thread_zone"):
                pass

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    s = prof.summary()
    names = {t["name"] for t in s["threads"] if t["spans"]}
    assert {"worker-0", "worker-1", "worker-2"} <= names
    assert zones_by_name(s)["thread_zone"]["count"] == 30


def test_export_formats(prof, tmp_path):
    for i in range(5):
        with prof.zone("exported", i=i):
            prof.units("samples", 3)
        prof.step()
    out = prof.export(str(tmp_path / "rep"))
    assert set(out) == {"json", "csv", "text", "trace"}
    j = json.load(open(out["json"]))
    assert any(z["name"] == "exported" for z in j["zones"])
    assert open(out["csv"]).readline().startswith("zone")
    assert "exported" in open(out["text"]).read()
    t = json.load(open(out["trace"]))
    assert any(e.get("name") == "exported" for e in t["traceEvents"])
    only = prof.export(str(tmp_path / "dir") + "/", formats=["json"])
    assert only == {"json": str(tmp_path / "dir" / "summary.json")}


def test_every_report_format_through_export(prof, tmp_path):
    # The extension reaches each of the report's formats through export/'s
    # one list (src/export/formats.c), the one mlprof report uses.
    with prof.zone("listed"):
        pass
    _mlprof.flush()
    paths = prof.profile_paths()
    for fmt, head in [("text", "mlprof report"), ("json", "{"),
                      ("csv", "zone,"), ("findings-csv", "rank,")]:
        out = tmp_path / ("r." + fmt)
        _mlprof.export(paths, str(out), fmt)
        assert out.read_text().startswith(head), (fmt, out.read_text()[:80])
    with pytest.raises(ValueError, match="findings-csv"):
        _mlprof.export(paths, str(tmp_path / "x"), "yaml")
    out = prof.export(str(tmp_path / "p"), formats=["findings-csv"])
    assert out == {"findings-csv": str(tmp_path / "p.findings.csv")}
    assert open(out["findings-csv"]).readline().startswith("rank,")


def sampled_resources(tmp_path, **kw):
    os.makedirs(tmp_path)
    p = mlprof.Profiler(output=str(tmp_path / "s.mlprof"), **kw)
    with p:
        time.sleep(0.25)
    out = p.export(str(tmp_path / "s-report"), formats=["json"])
    with open(out["json"]) as f:
        return json.load(f)["resources"]


def test_sample_interval_and_gpu_switch(tmp_path):
    res = sampled_resources(tmp_path / "a", sample_interval=0.02, gpu=False)
    system = next(s for s in res["subjects"] if s["subject"] == "system")
    assert system["rows"] >= 8  # 0.25 s at 20 ms
    nvml = next(s for s in res["sources"] if s["name"] == "nvml")
    assert not nvml["available"] and "switched off" in nvml["reason"]
    assert sampled_resources(tmp_path / "b", sample_interval=0) is None


def test_summary_has_the_findings(tmp_path):
    """A loop that mostly waits for its data: the summary breaks the steps
    down and names the data wait as the top finding, as mlprof report does."""
    p = mlprof.Profiler(output=str(tmp_path / "f.mlprof"), sample_interval=0.01)
    with p:
        for _ in range(30):
            with p.zone("next_batch", category="data"):
                time.sleep(0.01)
            with p.zone("forward", category="forward"):
                sum(i * i for i in range(3000))
            p.step()
        s = p.summary()
    assert s["steps"]["count"] >= 29
    parts = {x["part"]: x["share"] for x in s["steps"]["parts"]}
    assert parts["data"] > 0.5 and parts["forward"] > 0
    assert s["findings"] and s["findings"][0]["type"] == "data_bound"
    assert s["findings"][0]["recommendation"]
    out = p.export(str(tmp_path / "rep"), formats=["json", "text"])
    assert json.load(open(out["json"]))["findings"][0]["type"] == "data_bound"
    assert "Findings" in open(out["text"]).read()


def test_clear_forgets_what_was_recorded(prof):
    with prof.zone("before"):
        pass
    prof.clear()
    with prof.zone("after"):
        pass
    z = zones_by_name(prof.summary())
    assert "before" not in z and z["after"]["count"] == 1


def test_summary_has_resources_and_session(prof):
    with prof.zone("x"):
        sum(range(10000))
    s = prof.summary()
    assert s["session"]["process"]["max_rss_bytes"] > 0
    assert s["session"]["joined"] is False
    assert s["processes"][0]["pid"] == os.getpid()
    assert s["warnings"] == []


def _child_work(n):
    z = mlprof.zone("child_zone")
    for _ in range(n):
        with z:
            pass


def test_forked_child_writes_its_own_profile(tmp_path):
    out = str(tmp_path / "run") + "/"
    with mlprof.Profiler(output=out) as prof:
        with prof.zone("parent_zone"):
            pass
        ctx = multiprocessing.get_context("fork")
        p = ctx.Process(target=_child_work, args=(7,))
        p.start()
        p.join()
        assert p.exitcode == 0
        s = prof.summary()
    files = os.listdir(out)
    assert len(files) == 2
    procs = {p["pid"]: p for p in s["processes"]}
    assert len(procs) == 2
    child = [p for p in procs.values() if p["ppid"] == os.getpid()][0]
    assert child["clean_end"] and child["spans"] == 7
    assert zones_by_name(s)["child_zone"]["count"] == 7


SCRIPT = textwrap.dedent("""
    import os, sys, mlprof
    prof = mlprof.Profiler(output=sys.argv[1]).start()
    print("joined", prof.joined, prof.path)
    print("pid", os.getpid())
    for i in range(40):
        with prof.zone("script_zone"):
            prof.units("samples", 2)
        prof.step()
    s = prof.summary()
    print("zones", [(z["name"], z["count"]) for z in s["zones"]])
    prof.stop()
    sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
""")


def script_pid(stdout):
    return int(stdout.split("pid ")[1].split()[0])


def one_profile_of_script(run_dir, stdout):
    """Exactly one profile in the run belongs to the script's process (the
    run may hold others, e.g. mlprof run's own sampler profile)."""
    pid = script_pid(stdout)
    pids = [p["pid"] for p in mlprof._mlprof.profiles([str(run_dir)])]
    return pids.count(pid) == 1 and \
        sum(1 for f in os.listdir(run_dir) if f.startswith("python")) == 1


def test_joins_the_session_under_mlprof_run(tmp_path, build_dir):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    run_dir = tmp_path / "run"
    other = tmp_path / "elsewhere.mlprof"
    r = subprocess.run([os.path.join(build_dir, "mlprof"), "run", "-o",
                        str(run_dir), "--", sys.executable, str(script),
                        str(other)], env=child_env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "joined True" in r.stdout
    assert "('script_zone', 40)" in r.stdout
    assert not other.exists()
    assert one_profile_of_script(run_dir, r.stdout)
    assert "damage" not in r.stderr and "warning:" not in r.stderr, r.stderr
    rep = json.loads(subprocess.run(
        [os.path.join(build_dir, "mlprof"), "report", "-f", "json",
         str(run_dir)], capture_output=True, text=True).stdout)
    z = {z["name"]: z for z in rep["zones"]}
    assert z["script_zone"]["count"] == 40
    mine = [p for p in rep["processes"] if p["pid"] == script_pid(r.stdout)]
    assert len(mine) == 1 and mine[0]["clean_end"]


def test_python_m_mlprof_run(tmp_path, build_dir):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    run_dir = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "mlprof", "run", "-o",
                        str(run_dir), str(script), str(tmp_path / "x"), "3"],
                       env=child_env(MLPROF_CLI=os.path.join(build_dir,
                                                             "mlprof")),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr  # the script's own status
    assert "joined True" in r.stdout
    assert "script_zone" in r.stderr  # mlprof run's report
    assert one_profile_of_script(run_dir, r.stdout)
    r = subprocess.run([sys.executable, "-m", "mlprof", "run", str(script)],
                       env=child_env(MLPROF_CLI="/nonexistent/mlprof"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 127
    assert "cannot run the mlprof command /nonexistent/mlprof" in r.stderr


def test_mlprof_output_starts_a_session_at_import(tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    code = ("import mlprof\n"
            "with mlprof.zone('env_zone'):\n    pass\n")
    r = subprocess.run([sys.executable, "-c", code],
                       env=child_env(MLPROF_OUTPUT=str(out)),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    files = os.listdir(out)
    assert len(files) == 1
    s = mlprof.report([str(out)])
    assert s["zones"][0]["name"] == "env_zone"
    assert s["processes"][0]["clean_end"]


def test_names_that_are_not_utf8_never_raise(prof, recwarn):
    """A file name that is not UTF-8 (os.fsdecode gives surrogate escapes)
    or any other lone surrogate, as the name of a zone, decorated function,
    metric, counter, unit, thread, track or metadata, is recorded; the file
    holds the name's bytes."""
    name = os.fsdecode(b"img_\xff.jpg")
    odd = "half\ud800pair"
    with prof.zone(name):
        with prof.zone(odd, "data", **{name: name}):
            prof.gauge(name, 1.0)
            mlprof.zone_meta(name, 1)
            prof.units(name, 2)
    with mlprof.zone(name, category="io"):
        pass
    mlprof.profile(name=odd)(lambda: None)()
    prof.gauge(odd, 2.0)
    _mlprof.units(name, 3)
    prof.meta(name, odd)
    prof.thread_name(name)
    t0 = _mlprof.monotonic_ns()
    assert _mlprof.track_spans(name, [(odd, None, t0, t0 + 5, name, 7)]) == 1
    assert not recwarn.list
    bad = "img_\ufffd.jpg"  # how the bytes read back: U+FFFD
    got = spans(prof)
    assert sorted(s["name"] for s in got) == sorted([bad, bad] +
                                                    ["half?pair"] * 3)
    inner = [s for s in got if s["meta"]]
    assert [s["name"] for s in inner] == ["half?pair"]
    assert inner[0]["meta"] == {bad: "1"}  # the metric's value came last
    assert inner[0]["units"] == {bad: 2}
    assert bad in mlprof.read_events(prof.path)["threads"].values()
    s = prof.summary()
    assert {bad, "half?pair"} <= set(by_name(s["counters"]))
    assert s["processes"][0]["meta"] == {bad: "half?pair"}
    with open(prof.path, "rb") as f:
        assert b"img_\xff.jpg" in f.read()  # the bytes themselves


def test_a_joined_profiler_says_its_output_is_not_written(prof, tmp_path):
    with pytest.warns(RuntimeWarning, match="is not written"):
        with mlprof.Profiler(output=str(tmp_path / "b") + "/") as inner:
            with inner.zone("inner_zone"):
                pass
    assert inner.joined and not (tmp_path / "b").exists()
    with mlprof.Profiler(output=str(tmp_path / "b") + "/"):  # once
        pass
    with mlprof.Profiler(output=prof.path):  # the same file: nothing to say
        pass
    assert "inner_zone" in {s["name"] for s in spans(prof)}


def test_a_seventh_zone_metadata_key_is_not_dropped_silently(prof):
    six = dict(a=1, b=2, c=3, d=4, e=5, f=6)
    with prof.zone("six", **six):
        pass
    with pytest.warns(RuntimeWarning, match="at most 6 metadata keys"):
        with prof.zone("seven", **six):
            prof.record_metric("g", 7)
    with prof.zone("again", g=7, **six):  # once per process
        pass
    meta = {s["name"]: s["meta"] for s in spans(prof)}
    assert len(meta["six"]) == 6 and len(meta["seven"]) == 6


def test_report_and_summary_are_the_json_report(tmp_path, build_dir):
    """mlprof.report(paths), Profiler.summary() and `mlprof report -f json`
    give one document: statistics, resources, steps, findings and leaks."""
    p = mlprof.Profiler(output=str(tmp_path / "r.mlprof"), sample_interval=0.01)
    with p:
        for _ in range(5):
            with p.zone("load", "data"):
                time.sleep(0.002)
            p.step()
    s, r = p.summary(), mlprof.report(p.path)
    cli = json.loads(subprocess.run(
        [os.path.join(build_dir, "mlprof"), "report", "-f", "json", p.path],
        capture_output=True, text=True, check=True).stdout)
    assert r["schema"] == "mlprof.report/1"
    for k in ("steps", "findings", "leaks", "resources", "zones"):
        assert r[k] is not None and r[k] == s[k] == cli[k], k
    assert set(s) - set(r) == {"session"} and set(r) == set(cli)
    assert s["steps"]["count"] == 4
    assert s["session"]["path"] == p.path
    top = mlprof.report([p.path], sort="count", top=1)
    assert top["sort"] == "count" and len(top["zones"]) == 1


def test_summary_and_report_take_the_cli_filters(tmp_path, build_dir):
    """summary(...) and mlprof.report(...) filter as `mlprof report` does
    with the options of the same names: one parser of the specs."""
    p = mlprof.Profiler(output=str(tmp_path / "f.mlprof"))
    with p:
        for _ in range(8):
            with p.zone("load", "data"):
                pass
            with p.zone("fwd", "forward"):
                pass
            p.step()
        s = p.summary(zone="fwd", skip_warmup=2)
    assert [(z["name"], z["count"]) for z in s["zones"]] == [("fwd", 5)]
    cases = [
        ({"steps": "2:5", "exclude": ["load"]},
         ["--steps", "2:5", "--exclude", "load"]),
        ({"category": "data", "rank": None}, ["--category", "data"]),
        ({"window": "0s:3600s", "zone": ["f*", "l*"]},
         ["--window", "0s:3600s", "--zone", "f*", "--zone", "l*"]),
    ]
    for kw, args in cases:
        cli = json.loads(subprocess.run(
            [os.path.join(build_dir, "mlprof"), "report", "-f", "json", p.path,
             *args], capture_output=True, text=True, check=True).stdout)
        r = mlprof.report(p.path, **kw)
        for k in ("zones", "steps"):
            assert r[k] == cli[k], (kw, k)
    assert [z["name"] for z in mlprof.report(p.path, steps="2:5",
                                             exclude="load")["zones"]] == ["fwd"]
    with pytest.raises(ValueError, match="--steps wants A:B"):
        mlprof.report(p.path, steps="5:3")
    with pytest.raises(ValueError, match="unknown category 'gpu'"):
        p.summary(category="gpu")
    with pytest.raises(TypeError):
        mlprof.report(p.path, stpes="1:2")
    with pytest.raises(TypeError):
        mlprof.report(p.path, zone=1.5)


def test_overlapping_requests_through_track_spans(tmp_path, build_dir):
    """Requests a server handles at once overlap without nesting: handed
    over with prof.track_spans, each is a call of its zone with exact
    percentiles and units, and a latency objective judges them (issue #21,
    item 12)."""
    out = str(tmp_path / "serve.mlprof")
    with mlprof.Profiler(output=out) as prof:
        t0 = time.monotonic_ns()
        ms = 1_000_000
        # 100 requests a millisecond apart, each 5 to 14 ms long.
        spans = [("request", "user", t0 + i * ms, t0 + i * ms + (5 + i % 10)
                  * ms, "tokens", 8) for i in range(100)]
        assert prof.track_spans("requests", spans) == 100
        z = zones_by_name(prof.summary())["request"]
    assert z["count"] == 100
    assert z["min_ns"] == 5 * ms and z["max_ns"] == 14 * ms
    assert z["p50_ns"] == 9 * ms
    assert z["units"][0]["unit"] == "tokens" and z["units"][0]["n"] == 800
    r = subprocess.run([os.path.join(build_dir, "mlprof"), "report", out,
                        "--format", "json", "--slo", "request=10ms"],
                       capture_output=True, text=True, check=True)
    slo = json.loads(r.stdout)["slo"][0]
    assert slo["zone"] == "request" and slo["count"] == 100
    assert slo["over"] == 40  # 10 ms is not over: 11 to 14 ms, 4 in 10


def test_compare_ranks_batch_sizes_by_throughput(tmp_path, build_dir):
    """Batch 64 takes longer a step than batch 32 but does twice the work:
    compare ranks by samples per second and says so (issue #21, item 6)."""
    paths = []
    for bs in (32, 64):
        out = str(tmp_path / ("b%d.mlprof" % bs))
        with mlprof.Profiler(output=out) as p:
            for _ in range(20):
                with p.zone("train_step"):
                    p.units("samples", bs)
                    time.sleep(0.004 + bs * 0.00005)  # 5.6 vs 7.2 ms
                p.step()
        paths.append(out)
    r = subprocess.run([os.path.join(build_dir, "mlprof"), "compare", *paths,
                        "--labels", "b32,b64", "--format", "json"],
                       capture_output=True, text=True, check=True)
    doc = json.loads(r.stdout)
    assert doc["ranking"]["step_basis"] == "units"
    assert doc["ranking"]["unit"] == "samples"
    assert doc["ranking"]["step"] == [1, 0]  # b64 first
    runs = doc["runs"]
    assert runs[1]["units_per_s"] > runs[0]["units_per_s"]
    assert runs[0]["step_mean_ns"] < runs[1]["step_mean_ns"]
    assert doc["recommendation"].startswith(
        "use b64: fastest by samples per second")


OS_EXIT = textwrap.dedent("""
    import os, sys, mlprof
    prof = mlprof.Profiler(output=sys.argv[1]).start()
    for _ in range(1000):
        with prof.zone("work"):
            pass
    pid = os.fork()
    if pid == 0:
        for _ in range(1000):
            with prof.zone("child_work"):
                pass
        os._exit(4)
    os.waitpid(pid, 0)
    os._exit(3)
""")


def test_os_exit_keeps_every_zone(tmp_path):
    """os._exit() skips every exit handler; through the package's own
    library (not preloaded) the profile is still finished, in the process
    and in a forked child (issue 20, item 6)."""
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-c", OS_EXIT, str(out) + "/"],
                       env=child_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 3, r.stderr
    rep = mlprof.report([str(out)])
    ends = sorted((p["end"], p["status"], p["spans"])
                  for p in rep["processes"])
    assert ends == [("exit", 3, 1000), ("exit", 4, 1000)], ends
    assert "killed" not in r.stderr


def test_os_exit_is_os_exit():
    """The stand-in takes what os._exit takes, and refuses what it refuses."""
    code = ("import os, mlprof\n"
            "for bad in ('x', 2**40, None):\n"
            "    try:\n        os._exit(bad)\n"
            "    except (TypeError, OverflowError) as e:\n"
            "        print(type(e).__name__)\n"
            "os._exit(status=5)\n")
    r = subprocess.run([sys.executable, "-c", code], env=child_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 5, r.stderr
    assert r.stdout.split() == ["TypeError", "OverflowError", "TypeError"]


def test_relative_output_stays_where_it_was_given(tmp_path):
    """A relative output names a place from the directory the session
    started in: a process that changes directory later, and its forked
    children, still write there (issue 20, item 8)."""
    code = textwrap.dedent("""
        import os, mlprof
        prof = mlprof.Profiler(output="rel/").start()
        os.mkdir("elsewhere")
        os.chdir("elsewhere")
        pid = os.fork()
        if pid == 0:
            with prof.zone("child_work"):
                pass
            os._exit(0)
        os.waitpid(pid, 0)
        with prof.zone("parent_work"):
            pass
    """)
    r = subprocess.run([sys.executable, "-c", code], env=child_env(),
                       cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "elsewhere" / "rel").exists()
    assert len(os.listdir(tmp_path / "rel")) == 2
    rep = mlprof.report([str(tmp_path / "rel")])
    assert sorted(z["name"] for z in rep["zones"]) == ["child_work",
                                                       "parent_work"]


def test_a_device_output_is_refused(tmp_path):
    """A character device (or FIFO) cannot hold a profile: start() says so,
    and nothing is written beside it (issue 20, item 8)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = ("import sys, mlprof\n"
            "try:\n    mlprof.Profiler(output=sys.argv[1]).start()\n"
            "except mlprof.Error as e:\n    print(e)\n")
    beside = "/dev/null.1"
    was = os.path.exists(beside)
    try:
        for out in ("/dev/null", str(fifo)):
            r = subprocess.run([sys.executable, "-c", code, out],
                               env=child_env(), capture_output=True,
                               text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            assert r.stdout.startswith(f"cannot start profiling to {out}:")
        assert os.listdir(tmp_path) == ["fifo"]
    finally:
        made = not was and os.path.exists(beside)
        if made:
            os.remove(beside)
    assert not made, "a profile was written beside /dev/null"
