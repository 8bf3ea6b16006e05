"""mlprof run: exit codes, process trees, crashes and signals."""
import json
import os
import signal
import subprocess
import time

from conftest import mlprof, program, report_json, zone


def test_exit_status_is_the_commands(tmp_path):
    assert mlprof("run", "-q", "-o", tmp_path / "t", "--", "true").returncode == 0
    r = mlprof("run", "-q", "-o", tmp_path / "f", "--", "false", check=False)
    assert r.returncode == 1
    r = mlprof("run", "-q", "-o", tmp_path / "s", "--", "sh", "-c", "exit 7",
               check=False)
    assert r.returncode == 7


def test_missing_command_is_127_with_a_clear_error(tmp_path):
    r = mlprof("run", "-o", tmp_path / "x", "--", "no-such-command-xyz",
               check=False)
    assert r.returncode == 127
    assert "cannot run 'no-such-command-xyz'" in r.stderr
    assert "No such file" in r.stderr
    assert not (tmp_path / "x").exists()  # no empty run directory left behind


def test_output_parents_are_made(tmp_path):
    """-o runs/a works when runs does not exist yet, as mkdir -p; a parent
    that is a file is a clear error (issue #21)."""
    mlprof("run", "-q", "-o", tmp_path / "runs" / "a", "--", "true")
    assert any(tmp_path.joinpath("runs", "a").glob("true-*.mlprof"))
    (tmp_path / "file").write_text("mine")
    r = mlprof("run", "-q", "-o", tmp_path / "file" / "a", "--", "true",
               check=False)
    assert r.returncode == 2
    assert f"cannot create {tmp_path / 'file'}: not a directory" in r.stderr
    assert (tmp_path / "file").read_text() == "mine"


def test_usage_errors(tmp_path):
    r = mlprof("run", check=False)
    assert r.returncode == 2 and "no command" in r.stderr
    r = mlprof("run", "--flush-ms", "abc", "--", "true", check=False)
    assert r.returncode == 2 and "--flush-ms" in r.stderr
    r = mlprof("frobnicate", check=False)
    assert r.returncode == 2 and "unknown command" in r.stderr
    mlprof("run", "-q", "-o", tmp_path / "d", "--", "true")
    r = mlprof("run", "-o", tmp_path / "d", "--", "true", check=False)
    assert r.returncode == 2 and "already holds" in r.stderr


def test_help_and_version():
    for cmd in (["--help"], ["run", "--help"], ["report", "--help"],
                ["trace", "--help"]):
        r = mlprof(*cmd)
        assert "usage: mlprof" in r.stdout
    assert mlprof("--version").stdout.startswith("mlprof 0.1.0")


def test_inference_example_report(tmp_path):
    out = tmp_path / "run"
    r = mlprof("run", "-o", out, "--", program("inference_loop"), "40")
    assert "served 40 requests" in r.stdout
    assert "decode_token" in r.stderr  # the summary table
    rep = report_json(out)
    prompts = sum(16 + i % 17 for i in range(40))
    answers = sum(24 + (i * 7) % 40 for i in range(40))
    tokens = prompts + answers
    assert zone(rep, "decode_token")["count"] == tokens
    assert zone(rep, "attention")["count"] == tokens
    assert zone(rep, "request")["count"] == 40
    assert zone(rep, "load_weights")["count"] == 1
    assert zone(rep, "decode_token")["category"] == "forward"
    dt = zone(rep, "decode_token")
    assert dt["min_ns"] <= dt["p50_ns"] <= dt["p90_ns"] <= dt["p99_ns"] <= dt["max_ns"]
    assert dt["self_ns"] < dt["total_ns"]  # attention, mlp, sample are inside
    units = {u["name"]: u for u in rep["units"]}
    assert units["tokens"]["total"] == answers
    assert units["prompt_tokens"]["total"] == prompts
    # the command, under the root that sampled it: mlprof itself
    root, cmd = split_root(rep)
    assert cmd[0]["parent"] == root["index"] and len(cmd) == 1
    names = {t["name"] for t in rep["threads"]}
    assert {"worker-0", "worker-1"} <= names
    assert sum(t["steps"] for t in rep["threads"]) == 40


def test_fork_child_is_its_own_process(tmp_path):
    out = tmp_path / "run"
    mlprof("run", "-q", "-o", out, "--", program("fork_child"))
    files = sorted(os.listdir(out))
    assert len(files) == 3, files  # parent, child, and mlprof's samples
    rep = report_json(out)
    root, procs = split_root(rep)
    assert len(procs) == 2
    parent = next(p for p in procs if p["parent"] == root["index"])
    child = next(p for p in procs if p["parent"] == parent["index"])
    assert child["ppid"] == parent["pid"]
    assert child["threads"] == 2
    assert zone(rep, "parent_before_fork")["count"] == 10
    assert zone(rep, "parent_after_fork")["count"] == 5
    assert zone(rep, "child_work")["count"] == 20
    assert zone(rep, "child_thread_work")["count"] == 50
    assert zone(rep, "spawn")["count"] == 1  # the parent's; not inherited
    helper = [t for t in rep["threads"] if t["name"] == "child-helper"]
    assert len(helper) == 1 and helper[0]["pid"] == child["pid"]


def test_fork_child_starts_with_its_environment_unreadable(tmp_path):
    """A forked child's profile starts on its first recorded allocation,
    which may come from inside setenv, the environment array half replaced
    (MPICH's launcher: a crash, once). fork_env's child points environ at an
    unreadable page before it allocates: the library reads the copy its fork
    handler took, in which the parent's RANK and WORLD_SIZE are."""
    out = tmp_path / "run"
    mlprof("run", "-q", "--memory", "all", "-o", out, "--",
           program("fork_env"))
    rep = report_json(out)
    root, procs = split_root(rep)
    parent = next(p for p in procs if p["parent"] == root["index"])
    child = next(p for p in procs if p["parent"] == parent["index"])
    assert (child["rank"], child["world_size"], child["status"]) == (5, 8, 0)
    assert child["clean_end"]


def test_a_crowded_environment_is_read_as_far_as_it_fits(tmp_path):
    """The library's copy of its variables holds 64 KiB: a larger MLPROF_
    variable is left out, said once, and the ones that fit still count."""
    path = tmp_path / "p.mlprof"
    env = dict(os.environ, MLPROF_JUNK="x" * 70000, MLPROF_OUTPUT=str(path),
               **{"MLPROF_J%d" % i: "1" for i in range(300)})
    r = subprocess.run([program("fork_child")], env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("ignoring MLPROF_JUNK: the MLPROF_ variables are "
                          "more than mlprof keeps (64 KiB in all)") == 1
    assert r.stderr.count("mlprof[") == 1, r.stderr
    assert path.exists()


def split_root(rep):
    """The profile `mlprof run` wrote itself (the tree's root), and the
    profiles of the command's processes."""
    roots = [p for p in rep["processes"] if p["exe"].endswith("/mlprof")]
    assert len(roots) == 1, [p["exe"] for p in rep["processes"]]
    assert roots[0]["parent"] is None
    return roots[0], [p for p in rep["processes"] if p is not roots[0]]


def run_ticks(tmp_path, sig, ticks=400, flush_ms=100):
    """Starts crash_child, lets it end `ticks` zones, sends sig. Returns the
    profile path and the last tick the program said had ended."""
    path = tmp_path / "crash.mlprof"
    env = dict(os.environ, MLPROF_OUTPUT=str(path), MLPROF_FLUSH_MS=str(flush_ms))
    proc = subprocess.Popen([program("crash_child")], stdout=subprocess.PIPE,
                            text=True, env=env)
    last = 0
    for line in proc.stdout:
        last = int(line)
        if last >= ticks:
            break
    proc.send_signal(sig)
    proc.wait(timeout=30)
    return path, last, proc.returncode


def test_sigkill_keeps_all_but_the_last_flush_interval(tmp_path):
    path, last, rc = run_ticks(tmp_path, signal.SIGKILL)
    assert rc == -signal.SIGKILL
    rep = report_json(path)
    kept = zone(rep, "tick")["count"]
    # A tick takes a little over 1 ms: 100 ms of flush interval is at most
    # ~100 ticks; allow scheduling slack on a loaded machine.
    assert last - 150 <= kept <= last + 1, (kept, last)
    proc = rep["processes"][0]
    assert proc["clean_end"] is False
    text = mlprof("report", path).stdout
    assert "killed" in text


def test_sigterm_flushes_everything_and_finishes_the_file(tmp_path):
    path, last, rc = run_ticks(tmp_path, signal.SIGTERM, ticks=100)
    assert rc == -signal.SIGTERM  # the program still dies of it
    rep = report_json(path)
    assert zone(rep, "tick")["count"] >= last
    assert rep["processes"][0]["clean_end"] is True
    assert "whole_run" in [z["name"] for z in rep["open_zones"]]
