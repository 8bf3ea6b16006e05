"""mlprof top on a running job: in a pseudo-terminal (tmux), read off the
screen, keys to sort and to quit; and as plain lines when stdout is not a
terminal."""
import os
import shutil
import subprocess
import time

import pytest

from conftest import MLPROF, mlprof, program


@pytest.fixture
def live(tmp_path):
    """findings_pipeline under mlprof run for ~10 s (100 steps of ~90 ms),
    once its profile is on disk."""
    out = tmp_path / "run"
    job = subprocess.Popen([MLPROF, "run", "-o", str(out), "--",
                            program("findings_pipeline"), "slow", "100"],
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if out.is_dir() and any(p.name.startswith("findings_pipeline")
                                and p.stat().st_size > 0
                                for p in out.iterdir()):
            break
        time.sleep(0.1)
    yield out
    job.terminate()
    job.wait(timeout=30)


def test_top_plain_lines(live):
    p = mlprof("top", live, "--count", "2", "--interval", "0.5")
    assert "\033" not in p.stdout
    assert p.stdout.count("mlprof top ") == 2
    assert "findings_pipeline" in p.stdout
    assert "zones of the last interval by total" in p.stdout
    assert "steps: " in p.stdout


def test_top_plain_lines_print_each_warning_once(live):
    """The job is still running: its warning ("still running") holds at
    every update, and plain lines print it once, not once an update."""
    p = mlprof("top", live, "--count", "3", "--interval", "0.3")
    assert p.stdout.count("mlprof top ") == 3
    warnings = [line for line in p.stdout.splitlines()
                if line.startswith("warning: ")]
    assert any("still running" in w for w in warnings), p.stdout
    assert len(warnings) == len(set(warnings)), warnings


@pytest.mark.skipif(not shutil.which("tmux"), reason="needs tmux")
def test_top_in_a_terminal(live, tmp_path):
    sock = f"mlprof-top-{os.getpid()}"
    tmux = ["tmux", "-L", sock]
    subprocess.run(tmux + ["new-session", "-d", "-x", "160", "-y", "50",
                           f"{MLPROF} top {live}"], check=True)
    try:
        def screen():
            return subprocess.run(tmux + ["capture-pane", "-p"],
                                  capture_output=True, text=True).stdout

        def wait_for(text):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                s = screen()
                if text in s:
                    return s
                time.sleep(0.2)
            raise AssertionError(f"{text!r} never on screen:\n{screen()}")

        s = wait_for("zones of the last interval by total")
        assert "findings_pipeline" in s
        s = wait_for("forward")
        assert "\x1b" not in s
        subprocess.run(tmux + ["send-keys", "c"], check=True)
        wait_for("zones of the last interval by count")
        subprocess.run(tmux + ["send-keys", "q"], check=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if subprocess.run(tmux + ["has-session"],
                              capture_output=True).returncode != 0:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("q did not quit mlprof top")
    finally:
        subprocess.run(tmux + ["kill-server"], capture_output=True)


def test_top_bad_usage(tmp_path):
    p = mlprof("top", tmp_path / "nope", check=False)
    assert p.returncode == 2 and "nope" in p.stderr
    p = mlprof("top", "--count", "0", tmp_path, check=False)
    assert p.returncode == 2 and "--count wants" in p.stderr
    p = mlprof("top", check=False)
    assert p.returncode == 2 and "no run directory" in p.stderr
