"""mlprof trace interrupted by SIGINT or SIGTERM in the middle of writing.

The trace is written to FILE.tmp.XXXXXX and renamed when complete; a signal
must not leave that temporary behind, nor touch a FILE already there, and
the command must die of the signal (a shell then reports 128 + N).

The profile is big enough that the export cannot finish before the signal:
tests/programs/workload with MLPROF_WORK=0 records 4 empty zones a step, so
1,000,000 steps make 4 million spans (~22 MB of profile, ~0.15 s to record),
whose export writes ~480 MB of JSON in about a second (the trace exporter
runs at ~5 million events/s). The test waits until the temporary holds data
(the first 1 MiB buffer was flushed: the export is under way), polling every
millisecond, and signals at once: the export is then a few percent done, with
hundreds of milliseconds to go even on a fast machine. Should it ever finish
first, the test says so rather than pass."""
import os
import signal
import subprocess
import time

import pytest

from conftest import MLPROF, program

STEPS = 1_000_000


@pytest.fixture(scope="module")
def big_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("big") / "run"
    env = dict(os.environ, MLPROF_WORK="0")
    r = subprocess.run([MLPROF, "run", "-q", "-o", run, "--",
                        program("workload"), str(STEPS)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return run


def temporaries(d):
    return sorted(f.name for f in d.iterdir() if ".tmp." in f.name)


def interrupt(run, out, sig):
    """Starts mlprof trace RUN -o OUT, sends sig once the temporary holds
    data, and returns (returncode, stderr)."""
    p = subprocess.Popen([MLPROF, "trace", run, "-o", out],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    started = False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and p.poll() is None:
            tmp = [f for f in out.parent.iterdir() if ".tmp." in f.name]
            try:
                started = bool(tmp) and tmp[0].stat().st_size > 0
            except FileNotFoundError:
                started = False
            if started:
                p.send_signal(sig)
                break
            time.sleep(0.001)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert started, ("the export ended before it could be interrupted "
                     f"(exit {p.returncode}): make the profile bigger")
    return p.returncode, err.decode(errors="replace")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_trace_keeps_the_old_file(big_run, tmp_path, sig):
    out = tmp_path / "trace.json"
    old = b'{"traceEvents":[],"note":"an earlier, complete trace"}\n'
    out.write_bytes(old)
    rc, err = interrupt(big_run, out, sig)
    assert rc == -sig, (rc, err)  # died of the signal: 128 + sig in a shell
    assert temporaries(tmp_path) == []
    assert out.read_bytes() == old


def test_interrupted_trace_leaves_nothing(big_run, tmp_path):
    out = tmp_path / "trace.json"
    rc, err = interrupt(big_run, out, signal.SIGINT)
    assert rc == -signal.SIGINT, (rc, err)
    assert list(tmp_path.iterdir()) == []


def test_shell_sees_128_plus_signal(big_run, tmp_path):
    """Through a shell, as a CI script would run it: status 143 for SIGTERM,
    and still no temporary."""
    out = tmp_path / "trace.json"
    script = (f'"{MLPROF}" trace "{big_run}" -o "{out}" 2>/dev/null & pid=$!\n'
              f'while ! ls "{tmp_path}" | grep -q "\\.tmp\\."; do :; done\n'
              'sleep 0.02\nkill -TERM $pid\nwait $pid\necho "status $?"\n')
    r = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                       timeout=120)
    assert r.stdout.strip() == "status 143", (r.stdout, r.stderr)
    assert temporaries(tmp_path) == []
    assert not out.exists()
