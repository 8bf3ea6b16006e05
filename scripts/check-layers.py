#!/usr/bin/env python3
"""Checks that every layer of src/ includes only the layers it may use.

The layers (docs/architecture.md): base < format < sample < record, and
format < model < analyze < export < serve < cli; a layer may use those
before it, never those after. intercept is part of the recording library.
The Python extension's C sources (python/, PYTHON_LAYER) are a front end
beside cli: they may use the reading side and the recording library's
public header, never a header private to a layer.
The sources include each other by relative paths ("../format/wire.h"), which
include directories cannot forbid, so this script is the check: it reads
every #include "..." of src/LAYER/*.[ch] and fails, one line per include,
when one reaches a layer LAYER may not use or a header private to another
layer. Usage: check-layers.py [SOURCE_ROOT] (default: this checkout)."""
import os
import re
import sys

USES = {
    "base": [],
    "format": ["base"],
    "sample": ["base", "format"],
    "record": ["base", "format", "sample"],
    "intercept": ["base", "format", "record"],
    "model": ["base", "format"],
    "analyze": ["base", "format", "model"],
    "export": ["base", "format", "model", "analyze"],
    "serve": ["base", "format", "model", "analyze", "export"],
    "cli": ["base", "format", "model", "analyze", "export", "serve",
            "record"],
    "python": ["base", "format", "model", "analyze", "export", "record"],
}
# The tree outside src/ that is checked as a layer of its own, and what of
# it is no source (a build's copies).
PYTHON_LAYER = "python"
NOT_SOURCES = {"build", "dist"}
# Headers only their own layer (and the layers named) may include.
PRIVATE = {"record/internal.h": ["record", "intercept"]}
# The source lists (src/sources/) are no layer.
NOT_LAYERS = {"sources"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def check(root):
    src = os.path.join(root, "src")
    errors = []
    for layer in sorted(os.listdir(src)):
        top = os.path.join(src, layer)
        if not os.path.isdir(top) or layer in NOT_LAYERS:
            continue
        if layer not in USES:
            errors.append("src/%s: a layer this script does not know; add it "
                          "to USES in scripts/check-layers.py" % layer)
            continue
        errors += check_tree(src, layer, top)
    python = os.path.join(root, PYTHON_LAYER)
    if os.path.isdir(python):
        errors += check_tree(src, PYTHON_LAYER, python)
    return errors


def check_tree(src, layer, top):
    """The includes of every C source under top, judged as layer's."""
    errors = []
    for dirpath, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs
                         if d not in NOT_SOURCES and not d.endswith(".egg-info"))
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, f)
            with open(path, encoding="utf-8", errors="replace") as fh:
                for n, line in enumerate(fh, 1):
                    m = INCLUDE.match(line)
                    if m:
                        errors += judge(src, layer, path, n, m.group(1))
    return errors


def judge(src, layer, path, n, name):
    where = "%s:%d" % (os.path.relpath(path, os.path.dirname(src)), n)
    target = os.path.normpath(os.path.join(os.path.dirname(path), name))
    if not os.path.exists(target):  # "layer/x.h" found through -Isrc
        target = os.path.normpath(os.path.join(src, name))
    if not os.path.exists(target):
        return []  # the public header (include/), generated files
    rel = os.path.relpath(target, src)
    if rel.startswith(".."):
        return []
    to = rel.split(os.sep)[0]
    if to == layer:
        return []
    if to not in USES[layer]:
        return ["%s: %s includes %s: %s may not use %s (it may use: %s)"
                % (where, layer, rel, layer, to,
                   ", ".join(USES[layer]) or "nothing")]
    if rel in PRIVATE and layer not in PRIVATE[rel]:
        return ["%s: %s includes %s, private to %s"
                % (where, layer, rel, ", ".join(PRIVATE[rel]))]
    return []


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else \
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    errors = check(root)
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
