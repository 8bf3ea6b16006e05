"""mlprof run: when no profile arrives, the reason given is the real one."""
import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest

from conftest import LIBRARY, MLPROF, mlprof, program

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
as_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"),
    reason="needs root and setpriv to run as another user")


def run_as_nobody(*args):
    return subprocess.run([*NOBODY, MLPROF, "run", "-q", "--sample-ms", "0",
                           *map(str, args)], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def shared():
    """A directory that user nobody can reach (pytest's are root's alone)."""
    d = tempfile.mkdtemp(prefix="mlprof-hints-")
    os.chmod(d, 0o777)
    yield pathlib.Path(d)
    shutil.rmtree(d)


@as_root
def test_unwritable_run_directory(shared):
    out = shared / "ro"
    out.mkdir(mode=0o755)  # root's: nobody cannot write there
    r = run_as_nobody("-o", out, "--", program("inference_loop"), "5")
    assert (f"mlprof run: no profile was written to {out}: the run "
            "directory is not writable (Permission denied)") in r.stderr
    assert "statically" not in r.stderr


@as_root
def test_setuid_program(shared):
    prog = shared / "suid-true"
    shutil.copy("/usr/bin/true", prog)
    os.chmod(prog, 0o4755)
    r = run_as_nobody("-o", shared / "out", "--", prog)
    assert r.returncode == 0
    assert (f"'{prog}' is set-user-ID or set-group-ID, and the loader does "
            "not preload libraries into such programs") in r.stderr


def test_static_program(tmp_path):
    src = tmp_path / "s.c"
    src.write_text("int main(void) { return 0; }\n")
    prog = tmp_path / "static"
    if subprocess.run(["cc", "-static", src, "-o", prog]).returncode != 0:
        pytest.skip("no static C library to link a static program")
    r = mlprof("run", "-q", "--sample-ms", "0", "-o", tmp_path / "out", "--",
               prog)
    assert (f"'{prog}' is statically linked, so libmlprof cannot be "
            "preloaded into it") in r.stderr


def test_python_without_the_start_up_module_says_so(tmp_path):
    """An mlprof with no Python package beside it (a build without `make
    python-install`): a Python program still runs, and the report says why
    it got no Python instrumentation and how to build it; a C program's
    report says nothing of Python."""
    lone = tmp_path / "bin"
    lone.mkdir()
    shutil.copy(MLPROF, lone / "mlprof")
    env = dict(os.environ, MLPROF_LIB=LIBRARY)
    env.pop("MLPROF_PY_STARTUP", None)
    for out, cmd in [("py", ["/usr/bin/python3", "-c", "pass"]),
                     ("c", [program("workload"), "20"])]:
        subprocess.run([lone / "mlprof", "run", "-q", "--sample-ms", "0",
                        "-o", tmp_path / out, "--", *cmd], check=True,
                       env=env, capture_output=True, timeout=120)
    py = mlprof("report", tmp_path / "py").stdout
    assert "python instrumentation not loaded: mlprof run found no Python " \
        "start-up module" in py and "make python-install" in py, py
    assert "python instrumentation" not in mlprof("report",
                                                  tmp_path / "c").stdout
