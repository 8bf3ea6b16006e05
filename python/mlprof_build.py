"""What the `mlprof` package is built from, for setup.py.

The C source lists are the project's own, src/sources/NAME.txt (one path a
line), which CMakeLists.txt reads too. The package holds three programs:
the extension mlprof._mlprof (its own files below, plus the analysis side:
ANALYSIS), the recording library mlprof/_lib/libmlprof.so (record, sample,
format, base; record built with MLPROF_AUTOSTART) and the command
mlprof/_bin/mlprof (cli, serve, parquet and both sides; parquet with
libzstd)."""
import os
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The extension's own C files (relative to python/); one line per file.
EXT_OWN = [
    "mlprof/_mlprof.c",
    "mlprof/_calls.c",
    "mlprof/_hooks.c",
    "mlprof/_stacks.c",
]


def check_tree():
    if not os.path.isfile(os.path.join(ROOT, "include", "mlprof.h")):
        raise SystemExit("mlprof: build the package from the mlprof source "
                         "tree (python/ next to include/ and src/); not "
                         "found under %s" % ROOT)


def sources(name):
    """Absolute paths of the C files listed in src/sources/NAME.txt."""
    with open(os.path.join(ROOT, "src", "sources", name + ".txt")) as f:
        return [os.path.join(ROOT, line.strip()) for line in f
                if line.strip() and not line.startswith("#")]


# The layers (src/sources/NAME.txt) of the analysis side.
ANALYSIS = ["export", "analyze", "model", "format", "base"]


def layers(names):
    """The C files of the named layers, each once, in order."""
    out = []
    for name in names:
        out += [s for s in sources(name) if s not in out]
    return out


def ext_sources():
    return [os.path.join(HERE, f) for f in EXT_OWN] + layers(ANALYSIS)


def version():
    """MAJOR.MINOR.PATCH from include/mlprof.h, the version's one source."""
    v = {}
    with open(os.path.join(ROOT, "include", "mlprof.h")) as f:
        for line in f:
            m = re.match(r"#define MLPROF_VERSION_(MAJOR|MINOR|PATCH) (\d+)",
                         line)
            if m:
                v[m.group(1)] = m.group(2)
    return "%s.%s.%s" % (v["MAJOR"], v["MINOR"], v["PATCH"])


def http_flags():
    """(cflags, libs) of libmicrohttpd, which `mlprof serve` uses."""
    try:
        out = [subprocess.run(["pkg-config", flag, "libmicrohttpd"],
                              check=True, capture_output=True,
                              text=True).stdout for flag in ("--cflags",
                                                             "--libs")]
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit("mlprof: libmicrohttpd not found by pkg-config "
                         "(Debian: apt-get install pkg-config "
                         "libmicrohttpd-dev)")
    return shlex.split(out[0]), shlex.split(out[1])


def zstd_flags():
    """(cflags, libs) of libzstd, which `mlprof export` (its Parquet pages)
    uses: linked into the command only."""
    try:
        out = [subprocess.run(["pkg-config", flag, "libzstd"], check=True,
                              capture_output=True, text=True).stdout
               for flag in ("--cflags", "--libs")]
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit("mlprof: libzstd not found by pkg-config "
                         "(Debian: apt-get install pkg-config libzstd-dev)")
    return shlex.split(out[0]), shlex.split(out[1])


def unwind_flags():
    """(cflags, libs) of libunwind, for the stack sampler's native frames
    (src/record/native.c); ([], []) without it: Python frames only."""
    try:
        out = [subprocess.run(["pkg-config", flag, "libunwind"], check=True,
                              capture_output=True, text=True).stdout
               for flag in ("--cflags", "--libs")]
    except (OSError, subprocess.CalledProcessError):
        return [], []
    return ["-DMLPROF_HAVE_LIBUNWIND"] + shlex.split(out[0]), \
        shlex.split(out[1])


def generate_assets(out_dir):
    """Writes out_dir/html_assets.h, which src/export/html.c includes: the
    dashboard's CSS and JavaScript as C strings (scripts/embed-assets.py,
    which CMake runs too)."""
    os.makedirs(out_dir, exist_ok=True)
    subprocess.run([sys.executable,
                    os.path.join(ROOT, "scripts", "embed-assets.py"),
                    os.path.join(out_dir, "html_assets.h")], check=True)


INCLUDE_DIRS = [os.path.join(ROOT, "include"), os.path.join(ROOT, "src")]
DEFINES = [("_GNU_SOURCE", None), ("MLPROF_BUILDING", None)]
CFLAGS = ["-std=gnu11", "-O2", "-fvisibility=hidden", "-Wall",
          "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
LIBS = ["m", "dl", "pthread"]
