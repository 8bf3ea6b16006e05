"""How the extension mlprof._mlprof is built, shared by setup.py and the
in-tree PEP 517 backend (build_backend.py).

The extension compiles the project's C library sources into itself (the
recording library, reader, statistics, exporters), so nothing else needs
installing. The source list is read from CMakeLists.txt, so the package
builds exactly what the libraries build."""
import glob
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# MLPROF_SOURCE_ROOT: build against another checkout of the C sources.
ROOT = os.path.abspath(os.environ.get("MLPROF_SOURCE_ROOT") or REPO)
SRC = os.path.join(ROOT, "src")


def check_tree():
    if not os.path.isfile(os.path.join(ROOT, "include", "mlprof.h")):
        raise SystemExit("mlprof: build the package from the mlprof source "
                         "tree (python/ next to include/ and src/); not "
                         "found under %s" % ROOT)


def c_sources():
    """Absolute paths of the C files of the extension."""
    files = []
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        for tok in re.findall(r"src/[A-Za-z0-9_]+/[A-Za-z0-9_]+\.c", f.read()):
            if not tok.startswith("src/cli/") and tok not in files:
                files.append(tok)
    if not files:  # an unusual CMakeLists: every library directory
        for part in ("record", "sample", "format", "model", "analyze",
                     "export"):
            files += sorted(os.path.relpath(p, ROOT) for p in
                            glob.glob(os.path.join(SRC, part, "*.c")))
    return [os.path.join(HERE, "mlprof", f) for f in ("_mlprof.c", "_calls.c")] + \
        [os.path.join(ROOT, f) for f in files]


def version():
    v = {"MAJOR": "0", "MINOR": "0", "PATCH": "0"}
    with open(os.path.join(ROOT, "include", "mlprof.h")) as f:
        for line in f:
            m = re.match(r"#define MLPROF_VERSION_(MAJOR|MINOR|PATCH) (\d+)",
                         line)
            if m:
                v[m.group(1)] = m.group(2)
    return "%s.%s.%s" % (v["MAJOR"], v["MINOR"], v["PATCH"])


INCLUDE_DIRS = [os.path.join(ROOT, "include"), SRC]
DEFINES = [("_GNU_SOURCE", None), ("MLPROF_BUILDING", None),
           ("MLPROF_SOURCE_ROOT", '"%s"' % REPO.replace('"', ""))]
CFLAGS = ["-std=gnu11", "-O2", "-fvisibility=hidden", "-Wall",
          "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
LIBS = ["m", "dl", "pthread"]
