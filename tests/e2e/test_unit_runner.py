"""The C unit test runner: each test in its own process with a deadline, so a
crash, a hang or a failed check fails that test alone and says why."""
import os
import subprocess

from conftest import BUILD

UNIT = os.path.join(BUILD, "mlprof_unit")


def unit(*args, **env):
    # ASan would turn the segfault into exit status 1; the runner must see it.
    env = {**os.environ, "ASAN_OPTIONS": "handle_segv=0", **env}
    return subprocess.run([UNIT, *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_crash_hang_and_failure_each_fail_one_test_and_the_run_goes_on():
    r = unit("selftest/crash", "selftest/hang", "selftest/fail", "wire/",
             MLPROF_TEST_TIMEOUT="1")
    lines = r.stdout.splitlines()
    assert r.returncode == 1
    assert "FAIL selftest/crash: killed by signal 11 (Segmentation fault)" in lines
    assert "FAIL selftest/hang: timed out after 1 s" in lines
    assert "FAIL selftest/fail: assertion failed (above)" in lines
    assert "1 + 1 == 3: 2 != 3" in r.stderr
    wire = [l for l in lines if l.startswith("ok   wire/")]
    assert wire, r.stdout
    assert lines[-1] == f"{len(wire)} passed, 3 failed"


def test_self_tests_run_only_when_named_in_full():
    r = unit("selftest")
    assert "selftest/" not in r.stdout
    assert r.stdout.splitlines()[-1] == "0 passed, 0 failed"
    assert r.returncode == 1  # a filter that selects nothing is an error


def test_a_passing_selection_exits_0():
    r = unit("wire/crc32")
    assert r.returncode == 0
    assert r.stdout.splitlines() == ["ok   wire/crc32", "1 passed, 0 failed"]


def test_bad_timeout_is_a_usage_error():
    r = unit("wire/crc32", MLPROF_TEST_TIMEOUT="soon")
    assert r.returncode == 2
    assert "MLPROF_TEST_TIMEOUT" in r.stderr
