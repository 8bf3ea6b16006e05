"""CPython's own regression tests of signals, generators and subprocesses
pass under `mlprof run` as they pass without it (issue 20): they read and set
signal dispositions, expect KeyboardInterrupt from SIGINT, send signals to
children and count the descriptors a child inherits, all of which a
preloaded library can disturb. Debian's libpython3.11-testsuite provides them
for /usr/bin/python3 (scripts/install-deps.sh installs it).

On a failure, the failing tests are run again without mlprof, so the message
says whether mlprof is the cause."""
import os
import re
import subprocess

from conftest import MLPROF, clean_env, report_json

PYTHON = "/usr/bin/python3"
SUITES = ["test_signal", "test_generators", "test_subprocess"]
IGNORED = [
    # Waits 30 s for a read that SIGALRM must not interrupt: mlprof never
    # takes SIGALRM, and the suite stays under two minutes without it.
    "test_siginterrupt_off",
]


def regrtest(*args, under=None):
    cmd = [PYTHON, "-m", "test", "-v", *args]
    for name in IGNORED:
        cmd += ["--ignore", name]
    if under:
        cmd = [MLPROF, "run", "-q", "-o", str(under), "--", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True,
                          errors="replace", env=clean_env("PYTHON"),
                          timeout=600)


def test_cpython_signal_generators_subprocess_pass_under_run(tmp_path):
    assert os.path.isfile("/usr/lib/python3.11/test/test_signal.py"), \
        "CPython's test suite is missing: scripts/install-deps.sh installs " \
        "libpython3.11-testsuite"
    out = tmp_path / "run"
    r = regrtest(*SUITES, under=out)
    if r.returncode != 0:
        failed = sorted(set(re.findall(r"^(?:FAIL|ERROR): (\w+) \(",
                                       r.stdout, re.M)))
        plain = regrtest(*SUITES, *[a for n in failed for a in ("-m", n)])
        raise AssertionError(
            f"under mlprof run: exit {r.returncode}, failed {failed}; "
            f"the same tests without mlprof: exit {plain.returncode}\n"
            + r.stdout[-6000:] + r.stderr[-2000:])
    assert "Tests result: SUCCESS" in r.stdout
    # The interpreter running the suites was recorded, and ended as it
    # would have without mlprof.
    procs = [p for p in report_json(out)["processes"]
             if p["cmdline"].startswith(PYTHON + " -m test")]
    assert [(p["end"], p["status"]) for p in procs] == [("exit", 0)], procs
