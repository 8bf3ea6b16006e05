"""mlprof's own descriptors are out of the program's reach (docs/guide.md,
"Descriptors"): a program sees only its own, closing every descriptor never
costs it a byte of its files, and mlprof's are never inherited."""
import concurrent.futures
import os
import random
import subprocess
import sys
import textwrap

import pytest

from conftest import BUILD, LIBRARY, MLPROF, mlprof, program, report_json

PYTHON = "/usr/bin/python3"  # Debian's, with libpython3.11-testsuite

# The library as busy with descriptors as it gets: a sample (a dozen /proc
# reads) and a flush every millisecond.
BUSY = ["--sample-ms", "1", "--flush-ms", "1"]


def delays(n, seed):
    """n start delays in microseconds: a quarter within the first
    millisecond (the library's start-up), the rest spread over 30 ms."""
    rng = random.Random(seed)
    return [rng.randrange(0, 1000) if i % 4 == 0 else rng.randrange(0, 30000)
            for i in range(n)]


def run_many(make_cmd, n, seed, env=None):
    """Runs make_cmd(i, delay) n times, two at a time; returns the failures
    as (i, delay, returncode, stderr)."""
    def one(args):
        i, delay = args
        p = subprocess.run(make_cmd(i, delay), capture_output=True, text=True,
                           errors="replace", timeout=60, env=env)
        return (i, delay, p.returncode, p.stderr[-500:])
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, enumerate(delays(n, seed))))
    return [r for r in results if r[2] != 0]


@pytest.mark.parametrize("how", ["close", "range"])
def test_closing_every_descriptor_keeps_every_byte_preloaded(tmp_path, how):
    # Before mlprof kept its descriptors in tables of its own, 14 of 40 such
    # runs lost their file: the sampler's /proc descriptor, closed by the
    # loop, came back as the program's file, which the sampler then closed.
    n = 240 if how == "close" else 80

    def cmd(i, delay):
        return [MLPROF, "run", "-q", "-o", tmp_path / f"run{i}", *BUSY, "--",
                program("close_all"), tmp_path / f"file{i}", str(delay), "3",
                how]
    failures = run_many(cmd, n, seed=20 if how == "close" else 21)
    assert not failures, f"{len(failures)} of {n} runs failed: {failures[:5]}"
    # mlprof's own file went on undisturbed through the program's closing.
    for i in range(3):
        rep = report_json(tmp_path / f"run{i}")
        assert rep["processes"], rep


def test_closing_every_descriptor_keeps_every_byte_linked(tmp_path):
    # Started by MLPROF_OUTPUT (linked, not preloaded): the same.
    n = 160
    env = dict(os.environ, MLPROF_SAMPLE_MS="1", MLPROF_FLUSH_MS="1")

    def cmd(i, delay):
        env_i = f"MLPROF_OUTPUT={tmp_path / f'linked{i}.mlprof'}"
        return ["env", env_i, program("close_all"),
                tmp_path / f"file{i}", str(delay), "3"]
    failures = run_many(cmd, n, seed=22, env=env)
    assert not failures, f"{len(failures)} of {n} runs failed: {failures[:5]}"
    rep = report_json(tmp_path / "linked0.mlprof")
    assert rep["processes"], rep


LIST_FDS = textwrap.dedent("""
    import os, subprocess, sys
    def mine():
        # what a test suite or sandbox checks: an fstat of every number
        out = []
        for fd in range(os.sysconf("SC_OPEN_MAX")):
            try:
                os.fstat(fd)
                out.append(fd)
            except OSError:
                pass
        return out
    listed = sorted(int(f) for f in os.listdir("/proc/self/fd"))
    print("fstat", mine())
    print("proc", listed)
    child = subprocess.run([sys.executable, "-c",
        "import os; print(sorted(int(f) for f in os.listdir('/proc/self/fd')))"],
        capture_output=True, text=True, close_fds=False)
    print("child", child.stdout.strip())
    r, w = os.pipe()
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    print("after", mine())
""")


def test_program_sees_only_its_own_descriptors(tmp_path):
    script = tmp_path / "fds.py"
    script.write_text(LIST_FDS)
    r = mlprof("run", "-q", "-o", tmp_path / "run", *BUSY, "--", PYTHON,
               script)
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert lines["fstat"] == "[0, 1, 2]", r.stdout
    # listdir's own descriptor is the one more
    assert lines["proc"] == "[0, 1, 2, 3]", r.stdout
    assert lines["child"] == "[0, 1, 2, 3]", r.stdout  # nothing inherited
    assert lines["after"] == "[0, 1, 2]", r.stdout  # closerange closed all
    rep = report_json(tmp_path / "run")
    assert len(rep["processes"]) >= 2, rep["processes"]  # and the child


def test_cpython_pass_fds_under_mlprof_run(tmp_path):
    # CPython's own check: a child given pass_fds lists exactly what it
    # was passed (it found the preloaded library's descriptor too).
    r = mlprof("run", "-q", "-o", tmp_path / "run", "--", PYTHON, "-m",
               "test", "test_subprocess", "-m", "test_pass_fds", "-m",
               "test_pass_fds_redirected", check=False, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "Tests result: SUCCESS" in r.stdout, r.stdout[-3000:]
