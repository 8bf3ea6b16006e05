"""pytest setup for the Python package's tests.

`make test` installs the package into $(BUILD)/python and puts it on
PYTHONPATH. Run alone (pytest tests/python), the package is built into a
temporary directory first (pip, offline: --no-build-isolation)."""
import os
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
BUILD = os.environ.get("MLPROF_BUILD", os.path.join(ROOT, "build"))


def _ensure_package():
    try:
        import mlprof  # noqa: F401
        return
    except ImportError:
        pass
    target = tempfile.mkdtemp(prefix="mlprof-pkg-")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", target,
                    os.path.join(ROOT, "python")], check=True)
    sys.path.insert(0, target)
    os.environ["PYTHONPATH"] = target + os.pathsep + os.environ.get(
        "PYTHONPATH", "")


_ensure_package()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "torch2: needs torch 2 (make python-test-oldest, with "
        "Debian's torch 1.13, leaves it out)")


@pytest.fixture
def build_dir():
    """The CMake build with the mlprof command and libmlprof.so."""
    cli = os.path.join(BUILD, "mlprof")
    assert os.access(cli, os.X_OK), "build the project first (make): " + cli
    return BUILD


def child_env(**extra):
    """Environment for a child Python that imports this package."""
    import mlprof
    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(mlprof.__file__))
    env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("MLPROF_OUTPUT", None)
    env.update(extra)
    return env
