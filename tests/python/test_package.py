"""The package as pip installs it: metadata, the `mlprof` console script and
command it ships, `python -m mlprof run` with no build tree, one recorder per
process, the type stub."""
import ast
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

HEADER = os.path.join(ROOT, "include", "mlprof.h")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh `pip install --target` of ./python: the directory."""
    target = str(tmp_path_factory.mktemp("site"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", target,
                    os.path.join(ROOT, "python")], check=True, timeout=600)
    return target


def installed_env(target):
    """The environment of a user with only the installed package: no build
    tree, no override of the command or library."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MLPROF_")}
    env["PYTHONPATH"] = target
    return env


def run(args, target, cwd, **kw):
    return subprocess.run(args, env=installed_env(target), cwd=str(cwd),
                          capture_output=True, text=True, timeout=120, **kw)


def header_version():
    with open(HEADER) as f:
        parts = dict(re.findall(
            r"#define MLPROF_VERSION_(MAJOR|MINOR|PATCH) (\d+)", f.read()))
    return "%s.%s.%s" % (parts["MAJOR"], parts["MINOR"], parts["PATCH"])


def bundled_library(target):
    return os.path.join(target, "mlprof", "_lib", "libmlprof.so")


def test_installed_package_has_the_header_version(installed, tmp_path):
    r = run([sys.executable, "-c",
             "import mlprof; print(mlprof.__version__, mlprof.__file__, "
             "mlprof._mlprof.LIBRARY)"], installed, tmp_path)
    assert r.returncode == 0, r.stderr
    version, path, library = r.stdout.split()
    assert version == header_version()
    assert path.startswith(installed)
    assert os.path.samefile(library, bundled_library(installed))
    for f in ("py.typed", "_mlprof.pyi"):
        assert os.path.isfile(os.path.join(installed, "mlprof", f))


def test_console_script_runs_the_packaged_command(installed, tmp_path):
    r = run([os.path.join(installed, "bin", "mlprof"), "--version"],
            installed, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:2] == ["mlprof", header_version()]
    r = run([os.path.join(installed, "bin", "mlprof"), "report",
             str(tmp_path / "missing")], installed, tmp_path)
    assert r.returncode != 0 and "missing" in r.stderr


def test_python_m_mlprof_run_from_the_installed_package(installed, tmp_path):
    code = ("import mlprof\n"
            "prof = mlprof.Profiler().start()\n"
            "for i in range(5):\n"
            "    with prof.zone('installed_zone'):\n"
            "        pass\n"
            "print('library', mlprof._mlprof.LIBRARY)\n")
    out = tmp_path / "run"
    r = run([sys.executable, "-m", "mlprof", "run", "-q", "-o", str(out),
             "-c", code], installed, tmp_path)
    assert r.returncode == 0, r.stderr
    # The packaged command preloaded the packaged library.
    library = r.stdout.split("library ")[1].split()[0]
    assert os.path.samefile(library, bundled_library(installed))
    r = run([sys.executable, "-c",
             "import mlprof, sys, json; "
             "print(json.dumps(mlprof.report([sys.argv[1]])))", str(out)],
            installed, tmp_path)
    assert r.returncode == 0, r.stderr
    assert '"installed_zone"' in r.stdout


C_LIBRARY = """
#include <mlprof.h>
void c_work(int n) {
  for (int i = 0; i < n; i++) {
    MLPROF_ZONE("c_zone");
  }
}
"""

# A Python script that records zones itself and through a C library that
# links libmlprof.so.0 (loaded after the package, as ctypes or an extension
# would load it).
MIXED = textwrap.dedent("""
    import ctypes, sys, mlprof
    prof = mlprof.Profiler(output=sys.argv[2]).start()
    c = ctypes.CDLL(sys.argv[1])
    for i in range(3):
        with prof.zone("py_zone"):
            c.c_work(2)
    prof.stop()
    print("path", prof.path)
""")


@pytest.mark.parametrize("under_run", [False, True])
def test_one_recorder_per_process(installed, tmp_path, under_run):
    src = tmp_path / "czone.c"
    src.write_text(C_LIBRARY)
    lib = tmp_path / "libczone.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-I", os.path.join(ROOT,
                                                                 "include"),
                    str(src), "-o", str(lib), bundled_library(installed)],
                   check=True)
    script = tmp_path / "mixed.py"
    script.write_text(MIXED)
    out = tmp_path / "out"
    out.mkdir()
    args = [str(script), str(lib), str(out / "own.mlprof")]
    if under_run:
        args = ["-m", "mlprof", "run", "-q", "-o", str(out)] + args
    r = run([sys.executable] + args, installed, tmp_path)
    assert r.returncode == 0, r.stderr
    path = r.stdout.split("path ")[1].split()[0]
    files = [f for f in os.listdir(out) if not f.startswith("mlprof-")]
    assert files == [os.path.basename(path)], files
    r = run([sys.executable, "-c",
             "import mlprof, sys\n"
             "z = {z['name']: z['count'] for z in "
             "mlprof.report([sys.argv[1]])['zones']}\n"
             "print(z['py_zone'], z['c_zone'])", path], installed, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["3", "6"]


def stub_names(tree):
    return {n.name for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | \
        {t.id for n in tree.body if isinstance(n, ast.AnnAssign)
         for t in [n.target]}


def test_stub_names_every_public_name_of_the_extension(installed, tmp_path):
    with open(os.path.join(ROOT, "python", "mlprof", "_mlprof.pyi")) as f:
        tree = ast.parse(f.read())
    r = run([sys.executable, "-c",
             "import mlprof._mlprof as m; "
             "print(' '.join(n for n in dir(m) if not n.startswith('_')))"],
            installed, tmp_path)
    assert r.returncode == 0, r.stderr
    public = set(r.stdout.split())
    assert public and public == stub_names(tree)


def test_import_without_the_library_says_why(installed, tmp_path):
    broken = tmp_path / "site"
    shutil.copytree(installed, str(broken))
    os.unlink(bundled_library(str(broken)))
    r = run([sys.executable, "-c", "import mlprof"], str(broken), tmp_path)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: mlprof: cannot load ") and \
        bundled_library(str(broken)) in last, r.stderr
