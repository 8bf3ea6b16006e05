"""The layers of src/ include only the layers they may use
(scripts/check-layers.py, docs/architecture.md)."""
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
SCRIPT = os.path.join(ROOT, "scripts", "check-layers.py")


def check(root):
    return subprocess.run([sys.executable, SCRIPT, root],
                          capture_output=True, text=True)


def test_this_tree_keeps_its_layers():
    r = check(ROOT)
    assert r.returncode == 0, r.stderr


def copy_src(tmp_path):
    shutil.copytree(os.path.join(ROOT, "src"), tmp_path / "src")
    return tmp_path


def add_include(path, line):
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(line + "\n" + text)


def test_an_include_up_the_stack_fails(tmp_path):
    root = copy_src(tmp_path)
    add_include(root / "src" / "sample" / "sampler.c",
                '#include "../record/internal.h"')
    add_include(root / "src" / "analyze" / "tree.c",
                '#include "../sample/sample.h"')
    r = check(str(root))
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert len(lines) == 2, r.stderr
    assert "src/analyze/tree.c:1: analyze includes sample/sample.h" in lines[0]
    assert "sample may not use record" in lines[1]


def test_a_private_header_fails_through_the_include_path(tmp_path):
    root = copy_src(tmp_path)
    add_include(root / "src" / "cli" / "run.c", '#include "record/internal.h"')
    r = check(str(root))
    assert r.returncode == 1
    assert "cli includes record/internal.h, private to record" in r.stderr


def test_an_unknown_layer_fails(tmp_path):
    root = copy_src(tmp_path)
    os.mkdir(root / "src" / "gizmo")
    (root / "src" / "gizmo" / "g.c").write_text("int g;\n")
    r = check(str(root))
    assert r.returncode == 1
    assert "src/gizmo: a layer this script does not know" in r.stderr


def copy_python(root):
    shutil.copytree(os.path.join(ROOT, "python", "mlprof"),
                    root / "python" / "mlprof",
                    ignore=shutil.ignore_patterns("__pycache__"))


def test_the_python_extension_is_checked(tmp_path):
    # The extension's C sources are a front end: a header private to a
    # layer fails through either spelling, and so does a layer it may not
    # use; the package's own headers and the reading side pass.
    root = copy_src(tmp_path)
    copy_python(root)
    assert check(str(root)).returncode == 0
    add_include(root / "python" / "mlprof" / "_mlprof.c",
                '#include "record/internal.h"')
    add_include(root / "python" / "mlprof" / "_hooks.c",
                '#include "../../src/record/internal.h"')
    add_include(root / "python" / "mlprof" / "_calls.h",
                '#include "sample/sample.h"')
    r = check(str(root))
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert len(lines) == 3, r.stderr
    assert ("python/mlprof/_calls.h:1: python includes sample/sample.h: "
            "python may not use sample") in lines[0]
    assert ("python/mlprof/_hooks.c:1: python includes record/internal.h, "
            "private to record") in lines[1]
    assert ("python/mlprof/_mlprof.c:1: python includes record/internal.h, "
            "private to record") in lines[2]


def test_a_build_copy_under_python_is_not_checked(tmp_path):
    root = copy_src(tmp_path)
    build = root / "python" / "build" / "lib"
    os.makedirs(build)
    (build / "x.c").write_text('#include "record/internal.h"\n')
    assert check(str(root)).returncode == 0


def test_the_server_may_not_use_the_command_line(tmp_path):
    root = copy_src(tmp_path)
    add_include(root / "src" / "serve" / "serve.c", '#include "../cli/cli.h"')
    r = check(str(root))
    assert r.returncode == 1
    assert "serve includes cli/cli.h: serve may not use cli" in r.stderr
