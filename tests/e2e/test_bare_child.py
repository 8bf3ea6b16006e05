"""Children made without fork handlers, and where profiles land
(tests/programs/bare_child.c; issue 20, items 4 and 8).

A child made by _Fork(), clone() or a raw fork system call has no session of
its own (its parent's writer thread does not run there); one made by vfork()
shares its parent's memory. Either may call exit(): it must end as it would
without mlprof, and the parent's profile keep all its zones. A relative
MLPROF_OUTPUT is resolved once, where the session starts, and passed on so
to the programs it execs."""
import os
import subprocess

import pytest

from conftest import LIBRARY, MLPROF, mlprof, program, report_json, zone

HOWS = ["_Fork", "clone", "sys_fork", "sys_clone", "vfork"]


@pytest.mark.parametrize("how", HOWS)
def test_child_without_fork_handlers_exits(tmp_path, how):
    cmd = [program("bare_child"), how, "300"]
    plain = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert (plain.returncode, plain.stdout) == (0, "child 0\n")
    out = tmp_path / "run"
    r = subprocess.run([MLPROF, "run", "-q", "-o", str(out), "--", *cmd],
                       capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, "child 0\n"), r.stderr
    procs = [p for p in report_json(out)["processes"]
             if not p["cmdline"].startswith(MLPROF)]
    (parent,) = procs  # the child recorded nothing: no profile of its own
    assert (parent["end"], parent["status"], parent["spans"]) == \
        ("exit", 0, 600)
    assert "killed" not in mlprof("report", out).stdout


def run_in(tmp_path, output, *args):
    """bare_child run in tmp_path with MLPROF_OUTPUT=output (no mlprof run,
    so nothing makes it absolute beforehand)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLPROF_")}
    env["MLPROF_OUTPUT"] = output
    return subprocess.run([program("bare_child"), *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True,
                          timeout=60)


def test_relative_output_directory_is_resolved_once(tmp_path):
    r = run_in(tmp_path, "rel/", "chdir", "50")
    assert (r.returncode, r.stdout, r.stderr) == (0, "child 0\n", "")
    assert not (tmp_path / "elsewhere" / "rel").exists()
    rep = report_json(tmp_path / "rel")
    assert len(rep["processes"]) == 2
    assert zone(rep, "child")["count"] == 50
    assert zone(rep, "work")["count"] == 100


def test_relative_output_file_is_resolved_once(tmp_path):
    r = run_in(tmp_path, "p.mlprof", "chdir", "50")
    assert (r.returncode, r.stderr) == (0, "")
    assert os.listdir(tmp_path / "elsewhere") == []
    files = sorted(f for f in os.listdir(tmp_path) if f.startswith("p"))
    assert len(files) == 2 and files[1] == "p.mlprof", files
    rep = report_json(*(tmp_path / f for f in files))
    assert zone(rep, "child")["count"] == 50


def test_device_output_records_nothing(tmp_path):
    """MLPROF_OUTPUT=/dev/null switches recording off: nothing is written,
    neither to the device nor beside it, and nothing is said."""
    beside = "/dev/null.1"
    was = os.path.exists(beside)
    try:
        r = run_in(tmp_path, "/dev/null", "_Fork", "50")
        assert (r.returncode, r.stdout, r.stderr) == (0, "child 0\n", "")
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        r = run_in(tmp_path, str(fifo), "_Fork", "50")
        assert (r.returncode, r.stdout, r.stderr) == (0, "child 0\n", "")
        assert os.listdir(tmp_path) == ["fifo"]
    finally:
        made = not was and os.path.exists(beside)
        if made:
            os.remove(beside)
    assert not made, "a profile was written beside /dev/null"


def test_relative_output_is_passed_on_resolved(tmp_path):
    """A program that changes directory and then execs another passes the
    output on absolute: the chain's profiles land together."""
    (tmp_path / "sub").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLPROF_")}
    env.update(MLPROF_OUTPUT="out/", LD_PRELOAD=LIBRARY)
    r = subprocess.run(["sh", "-c", f'cd sub && exec {program("life")} '
                        "_exit 10 0"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr) == (0, "")
    assert not (tmp_path / "sub" / "out").exists()
    assert zone(report_json(tmp_path / "out"), "work")["count"] == 10
