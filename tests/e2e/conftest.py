"""Shared helpers: where the build is, and running the real mlprof binary."""
import contextlib
import ctypes
import json
import os
import signal
import subprocess

import pytest

# A suite started in the background by a non-interactive shell (`make test &`)
# inherits SIGINT ignored, as would every program it runs; the tests that
# interrupt a program need it to die as it would at a terminal. A handler,
# unlike SIG_IGN, is not inherited across exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

BUILD = os.environ.get("MLPROF_BUILD") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build")
BUILD = os.path.abspath(BUILD)
MLPROF = os.path.join(BUILD, "mlprof")
# The library loaded into this interpreter and preloaded by `mlprof run`. A
# sanitizer build sets it to an uninstrumented build's library, since an ASan
# library cannot be loaded into an uninstrumented process.
LIBRARY = os.environ.get("MLPROF_LIB") or os.path.join(BUILD, "libmlprof.so")
# Likewise the programs run under `mlprof run` (examples, test programs).
PROGRAMS = os.environ.get("MLPROF_PROGRAMS") or BUILD


def clean_env(*drop):
    """This environment without the test run's mlprof settings (nor the
    names or prefixes in drop), but for which library and start-up module
    `mlprof run` loads: a sanitizer build names uninstrumented ones."""
    keep = ("MLPROF_LIB", "MLPROF_PY_STARTUP")
    return {k: v for k, v in os.environ.items()
            if k in keep or not k.startswith(("MLPROF_", *drop))}


def mlprof(*args, check=True, **kw):
    """Runs mlprof with args; returns the CompletedProcess (text mode)."""
    proc = subprocess.run([MLPROF, *map(str, args)], capture_output=True,
                          text=True, errors="replace", timeout=300, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"mlprof {' '.join(map(str, args))} exited {proc.returncode}\n"
            f"stdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}")
    return proc


def report_json(*paths):
    return json.loads(mlprof("report", *paths, "--format", "json",
                             "--top", "0").stdout)


def zone(report, name):
    """The zone row called name (raises if absent)."""
    for z in report["zones"]:
        if z["name"] == name:
            return z
    raise AssertionError(f"no zone {name!r} in {[z['name'] for z in report['zones']]}")


def program(name):
    return os.path.join(PROGRAMS, name)


def interleaved_runs(*jobs, steps, rounds):
    """Runs of tests/programs/workload.c for compare and diff: jobs are
    (directory, ZONE=PERCENT...) each. They are recorded in one process,
    round by round in turn (workload --interleave), rounds x steps steps each:
    runs made apart or side by side differ by several percent on a shared
    2-vCPU machine; interleaved, only their work differs."""
    specs = []
    for path, *factors in jobs:
        os.makedirs(path)
        specs.append(str(path) + (":" + ",".join(factors) if factors else ""))
    r = subprocess.run([program("workload"), "--interleave", str(rounds),
                        str(steps), *specs], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return [path for path, *_ in jobs]


@pytest.fixture
def lib():
    """libmlprof loaded in this interpreter through ctypes (for tests that
    need names no C literal would hold), with a fresh session per test."""
    so = ctypes.CDLL(LIBRARY)
    so.mlprof_zone_begin.argtypes = [ctypes.c_char_p]
    so.mlprof_gauge_set.argtypes = [ctypes.c_char_p, ctypes.c_double]
    so.mlprof_units_add.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
    # The deprecated names, still exported.
    so.mlprof_counter.argtypes = [ctypes.c_char_p, ctypes.c_double]
    so.mlprof_count.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
    so.mlprof_zone_meta.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    so.mlprof_thread_name.argtypes = [ctypes.c_char_p]
    yield so
    so.mlprof_shutdown()


class Config(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("output", ctypes.c_char_p),
                ("flush_interval_ms", ctypes.c_uint32),
                ("memory_cap", ctypes.c_size_t), ("enabled", ctypes.c_int),
                ("sample_interval_ms", ctypes.c_int), ("no_gpu", ctypes.c_int),
                ("stacks_hz", ctypes.c_int),
                ("reserved", ctypes.c_uint64 * 6)]


def start(so, path, sample_ms=-1):
    """Starts a session writing to path (no sampling unless sample_ms > 0)."""
    cfg = Config()
    so.mlprof_config_init(ctypes.byref(cfg))
    cfg.output = str(path).encode()
    cfg.sample_interval_ms = sample_ms
    rc = so.mlprof_init(ctypes.byref(cfg))
    assert rc == 0, f"mlprof_init: {rc}"


@contextlib.contextmanager
def busy_loops(cpu, n):
    """n shell loops that never sleep, pinned to cpu, while the block runs
    (taskset execs the shell: killing it stops the loop)."""
    loops = [subprocess.Popen(["taskset", "-c", str(cpu), "sh", "-c",
                               "while :; do :; done"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in loops:
            p.kill()
            p.wait()
