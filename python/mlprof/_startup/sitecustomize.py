"""mlprof's start-up module: `mlprof run` puts this directory first on
PYTHONPATH, so every Python process of the run imports it before the
program's code runs (docs/python.md, "Python under mlprof run").

It runs the program's own sitecustomize, if one is on the path, as Python
would have, then loads mlprof.auto into the session that the preloaded
library runs in this process, with the options of `mlprof run`'s Python
flags (MLPROF_PY_OPTIONS). It never stops the program: when this
interpreter cannot load mlprof (another Python version, no package), the
profile's session metadata says why (key "mlprof.python") and the report
shows it."""
import os
import sys


def _here():
    return os.path.dirname(os.path.realpath(__file__))


def _not_loaded(reason):
    """Records why in the preloaded library's session, through ctypes (the
    mlprof package is what could not be loaded)."""
    try:
        import ctypes
        meta = ctypes.CDLL(None).mlprof_meta
        meta.argtypes = (ctypes.c_char_p, ctypes.c_char_p)
        meta.restype = None
        meta(b"mlprof.python", ("not loaded: %s" % reason).encode(
            "utf-8", "replace"))
    except Exception:
        pass  # no ctypes, or no preloaded library: nothing to record into


def _load(here):
    # Inside an installed package (mlprof/_startup), the package's parent
    # comes right after this directory, before another mlprof on the path.
    parent = os.path.dirname(os.path.dirname(here))
    if os.path.isfile(os.path.join(parent, "mlprof", "__init__.py")):
        real = [os.path.realpath(p or ".") for p in sys.path]
        if parent not in real:
            at = real.index(here) + 1 if here in real else len(sys.path)
            sys.path.insert(at, parent)
    try:
        from mlprof import auto
        auto.install(os.environ.get("MLPROF_PY_OPTIONS", ""))
    except Exception as e:
        _not_loaded("%s (Python %d.%d): %s: %s" % (
            sys.executable, sys.version_info[0], sys.version_info[1],
            type(e).__name__, e))


def _chain(here):
    """Runs the next sitecustomize on the path (the program's own, or the
    system's) in place of this one."""
    import importlib.machinery
    import importlib.util
    path = [p for p in sys.path if os.path.realpath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)  # its errors are reported as Python would


# The program's own sitecustomize first, so that what mlprof records (the
# call tracer of --calls included) starts with the program and not with
# this start-up work; mlprof loads even when that module fails.
try:
    _chain(_here())
finally:
    _load(_here())
