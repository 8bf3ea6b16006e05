"""Native stacks (`--stacks HZ,native`, docs/stacks.md) and the GIL's state
in stack samples: a C function's time lands on its native frame under the
Python line that called it; the program's signals, masks, forks and short
threads are left alone; two CPU-bound threads are named in a GIL contention
finding."""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

import mlprof

STARTUP = os.path.join(os.path.dirname(mlprof.__file__), "_startup")

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="the stack walker reads CPython 3.11+ frames")

# A C function that spins for secs seconds, reading the clock rarely so
# that its own loop is where the time goes. Wall time, as py_spin below: the
# shares a loaded machine leaves them are the shares asked for.
SPIN_C = r"""
#include <signal.h>
#include <time.h>
static double cpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
volatile unsigned long sink;
void c_spin(double secs) {
  double end = cpu() + secs;
  while (cpu() < end)
    for (int i = 0; i < 2000000; i++) sink += i;
}
/* rounds times: 0.2 ms with every signal let through, then 10 ms with
 * every signal blocked; the rounds whose end finds sig pending. */
int masked_spins(int rounds, int sig) {
  sigset_t all, none, pending;
  sigfillset(&all);
  sigemptyset(&none);
  int found = 0;
  for (int k = 0; k < rounds; k++) {
    double end = cpu() + 0.0002;
    while (cpu() < end) sink++;
    pthread_sigmask(SIG_SETMASK, &all, NULL);
    end = cpu() + 0.01;
    while (cpu() < end) sink++;
    sigpending(&pending);
    found += sigismember(&pending, sig);
    pthread_sigmask(SIG_SETMASK, &none, NULL);
  }
  return found;
}
"""

PRELUDE = """
import ctypes, os, signal, sys, threading, time
lib = ctypes.CDLL(sys.argv[1])
lib.c_spin.argtypes = [ctypes.c_double]

def py_spin(t):
    end = time.perf_counter() + t
    while time.perf_counter() < end:
        pass
"""


@pytest.fixture(scope="module")
def spin_lib(tmp_path_factory):
    d = tmp_path_factory.mktemp("spinlib")
    (d / "spin.c").write_text(SPIN_C)
    lib = d / "libspin.so"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(lib),
                    str(d / "spin.c")], check=True)
    return str(lib)


def run(build_dir, tmp_path, spin_lib, script, *flags, name="run"):
    path = tmp_path / (name + ".py")
    path.write_text(textwrap.dedent(PRELUDE) + textwrap.dedent(script))
    out = tmp_path / name
    env = dict(os.environ, MLPROF_PY_STARTUP=STARTUP)
    env.pop("MLPROF_OUTPUT", None)
    r = subprocess.run([os.path.join(build_dir, "mlprof"), "run", "-q", "-o",
                        str(out), *flags, "--", sys.executable, str(path),
                        spin_lib],
                       capture_output=True, text=True, env=env, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    return r, out


def mlprof_cmd(build_dir, *args):
    r = subprocess.run([os.path.join(build_dir, "mlprof"), *map(str, args)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def report(build_dir, out):
    return json.loads(mlprof_cmd(build_dir, "report", "-f", "json", out))


def row(h, name, file_end):
    for r in h["functions"]:
        if r["function"] == name and r["file"].endswith(file_end):
            return r
    return None


def test_c_callee_lands_on_its_native_frame(build_dir, tmp_path, spin_lib):
    """60% of the time in a C function called through ctypes, 40% in
    Python: the C function's native frame has 60% (±3 points), on top of the
    Python function that called it."""
    _, out = run(build_dir, tmp_path, spin_lib, """
        def c_caller():
            lib.c_spin(0.3)
        def py_caller():
            py_spin(0.2)
        for _ in range(5):
            c_caller(); py_caller()
    """, "--stacks", "200,native")
    h = report(build_dir, out)["hot"]
    native = row(h, "c_spin", "libspin.so")
    assert native, [r["function"] for r in h["functions"]][:30]
    c, p = row(h, "c_caller", "run.py"), row(h, "py_caller", "run.py")
    whole = c["total_ns"] + p["total_ns"]
    assert abs(100 * native["total_ns"] / whole - 60) <= 3, (native, c, p)
    # Nearly all of c_caller's time is in its native callee.
    assert native["total_ns"] >= 0.9 * c["total_ns"]
    folded = mlprof_cmd(build_dir, "report", "-f", "folded", out)
    lines = [l for l in folded.splitlines() if "c_spin (libspin.so" in l]
    assert lines
    for l in lines:
        frames = l.rsplit(" ", 1)[0].split(";")
        names = [f.split(" (")[0] for f in frames]
        # Python caller, then (ctypes, libffi) the native callee.
        assert "c_caller" in names, l
        assert names.index("c_caller") < names.index("c_spin"), l
        assert "_PyEval_EvalFrameDefault" not in names, l


def test_native_frames_never_under_the_wrong_caller(build_dir, tmp_path,
                                                    spin_lib):
    """Short calls in turn (0.3 ms in C under c_caller, 0.2 ms in Python),
    sampled at 1 kHz: the Python frames are read a moment before the native
    ones, and a thread that called or returned in between must not give a
    sample whose C frames sit under the wrong Python caller (without the
    check, 3% of them did; once, on 3.13, 1 sample in some 300 still came
    under CDLL.__getattr__, not understood yet: at most 1% is let pass)."""
    _, out = run(build_dir, tmp_path, spin_lib, """
        def c_caller():
            lib.c_spin(0.0003)
        def py_caller():
            py_spin(0.0002)
        for _ in range(3000):
            c_caller(); py_caller()
    """, "--stacks", "1000,native")
    folded = mlprof_cmd(build_dir, "report", "-f", "folded", out)
    lines = [l for l in folded.splitlines() if "c_spin (libspin.so" in l]
    total = sum(int(l.rsplit(" ", 1)[1]) for l in lines)
    assert total > 200, lines
    wrong = [l for l in lines if "c_caller (" not in l]
    assert sum(int(l.rsplit(" ", 1)[1]) for l in wrong) <= total / 100, wrong


def test_python_only_without_native(build_dir, tmp_path, spin_lib):
    _, out = run(build_dir, tmp_path, spin_lib, """
        def c_caller():
            lib.c_spin(0.3)
        c_caller()
    """, "--stacks", "200")
    h = report(build_dir, out)["hot"]
    assert row(h, "c_spin", "libspin.so") is None
    assert row(h, "c_caller", "run.py")["self_ns"] > 0


def test_program_signals_are_left_alone(build_dir, tmp_path, spin_lib):
    """The program takes every real-time signal, mlprof's included, while
    native stacks run: none of its handlers runs but for the signals it
    sends itself, each once; its sleep is not cut short."""
    _, out = run(build_dir, tmp_path, spin_lib, """
        counts = {}
        def handler(sig, frame):
            counts[sig] = counts.get(sig, 0) + 1
        lib.c_spin(0.3)  # native stacks running
        sigs = [s for s in range(signal.SIGRTMIN, signal.SIGRTMAX + 1)
                if signal.getsignal(s) == signal.SIG_DFL]
        for s in sigs + [signal.SIGUSR1]:
            signal.signal(s, handler)
        lib.c_spin(0.3)
        t0 = time.monotonic()
        time.sleep(0.3)
        assert time.monotonic() - t0 >= 0.29
        assert counts == {}, counts
        for s in sigs + [signal.SIGUSR1]:
            os.kill(os.getpid(), s)
        assert counts == {s: 1 for s in sigs + [signal.SIGUSR1]}, counts
        print("ok", len(sigs))
    """, "--stacks", "200,native")
    assert row(report(build_dir, out)["hot"], "c_spin", "libspin.so")


def test_signal_sent_by_others_keeps_its_default(build_dir, tmp_path,
                                                  spin_lib):
    """The real-time signal native stacks took, sent by someone else (here
    kill() from the program itself), ends the process as SIG_DFL does
    without mlprof: same status, the lines after it never run."""
    path = tmp_path / "rt.py"
    path.write_text(textwrap.dedent(PRELUDE) + textwrap.dedent("""
        lib.c_spin(0.3)  # native stacks running: the signal is ours
        os.kill(os.getpid(), signal.SIGRTMAX)
        time.sleep(0.5)
        print("survived")
    """))
    plain = subprocess.run([sys.executable, str(path), spin_lib],
                           capture_output=True, text=True, timeout=300)
    assert plain.returncode == -signal.SIGRTMAX
    env = dict(os.environ, MLPROF_PY_STARTUP=STARTUP)
    env.pop("MLPROF_OUTPUT", None)
    out = tmp_path / "rt"
    r = subprocess.run([os.path.join(build_dir, "mlprof"), "run", "-q", "-o",
                        str(out), "--stacks", "200,native", "--",
                        sys.executable, str(path), spin_lib],
                       capture_output=True, text=True, env=env, timeout=300)
    assert "survived" not in r.stdout
    assert r.returncode == 128 + signal.SIGRTMAX, (r.returncode, r.stderr)
    # What was sampled before it is kept.
    assert row(report(build_dir, out)["hot"], "c_spin", "libspin.so")


def test_program_blocking_signals_runs(build_dir, tmp_path, spin_lib):
    """A program that blocks every signal runs as without mlprof (nothing
    left pending for it) and gets Python-only stacks; a thread that does not
    block them gets native ones."""
    r, out = run(build_dir, tmp_path, spin_lib, """
        def blocked():
            lib.c_spin(0.4)
        def open_thread():
            lib.c_spin(0.4)
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        blocked()
        assert signal.sigpending() == set(), signal.sigpending()
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        t = threading.Thread(target=open_thread)
        t.start(); t.join()
        print("pending", sorted(signal.sigpending()))
    """, "--stacks", "200,native")
    assert "pending []" in r.stdout
    folded = mlprof_cmd(build_dir, "report", "-f", "folded", out)
    blocked = [l for l in folded.splitlines() if "blocked (" in l]
    opened = [l for l in folded.splitlines() if "open_thread (" in l]
    assert blocked and not any("c_spin" in l for l in blocked), blocked
    assert any("c_spin (libspin.so" in l for l in opened), opened


def test_signal_never_left_pending_when_blocked_late(build_dir, tmp_path,
                                                     spin_lib):
    """A thread that blocks every signal just after the sampler read its
    mask (so that the sampler's signal arrives blocked) never finds it
    pending once the sampler's wait is over: sigpending and sigwait stay the
    program's. The thread blocks and unblocks 300 times, sampled at 1 kHz."""
    r, out = run(build_dir, tmp_path, spin_lib, """
        lib.masked_spins.argtypes = [ctypes.c_int, ctypes.c_int]
        def toggling():
            print("found", lib.masked_spins(300, signal.SIGRTMAX))
        toggling()
    """, "--stacks", "1000,native")
    assert "found 0" in r.stdout, r.stdout


def test_fork_and_short_threads(build_dir, tmp_path, spin_lib):
    """A forked child samples its native stacks into its own profile;
    threads that end between samples leave the sampler well."""
    r, out = run(build_dir, tmp_path, spin_lib, """
        def short():
            lib.c_spin(0.005)
        for _ in range(40):
            t = threading.Thread(target=short)
            t.start(); t.join()
        def child_work():
            lib.c_spin(0.5)
        pid = os.fork()
        if pid == 0:
            child_work()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert status == 0, status
        print("done")
    """, "--stacks", "200,native")
    assert "done" in r.stdout
    files = sorted(os.listdir(out))
    assert len(files) >= 2, files
    folded = mlprof_cmd(build_dir, "report", "-f", "folded", out)
    assert any("child_work (" in l and "c_spin (libspin.so" in l
               for l in folded.splitlines()), folded[-2000:]


def test_bad_stacks_option(build_dir):
    for bad in ("100,nativ", "x,native", ",native"):
        r = subprocess.run([os.path.join(build_dir, "mlprof"), "run",
                            "--stacks", bad, "--", "true"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "--stacks" in r.stderr, (bad, r.stderr)


def test_profiler_stacks_argument():
    assert mlprof._stacks_setting("native") == (0, True)
    assert mlprof._stacks_setting("50,native") == (50, True)
    assert mlprof._stacks_setting(50) == (50, False)
    assert mlprof._stacks_setting(False) == (-1, False)
    for bad in ("nativ", "50,x", -1, 20000, True):
        with pytest.raises(ValueError):
            mlprof.Profiler(stacks=bad)


GIL_SCRIPT = """
def burn(t):
    end = time.thread_time() + t
    x = 0
    while time.thread_time() < end:
        x += 1
def worker():
    burn(1.0)
def sleeper():
    time.sleep(1.5)
def in_c():
    lib.c_spin(1.0)
ts = [threading.Thread(target=f) for f in (%s)]
for t in ts: t.start()
for t in ts: t.join()
"""


def gil_findings(build_dir, out):
    return [f for f in report(build_dir, out)["findings"]
            if f["type"] == "gil_contention"]


def test_gil_contention_names_threads(build_dir, tmp_path, spin_lib):
    """Two CPU-bound Python threads take turns on the GIL: the finding
    names both and the function that held the GIL."""
    _, out = run(build_dir, tmp_path, spin_lib,
                 GIL_SCRIPT % "worker, worker",
                 "--stacks", "200")
    found = gil_findings(build_dir, out)
    assert len(found) == 1, found
    f = found[0]
    assert f["evidence"]["threads_waiting"] == 2, f
    assert f["evidence"]["gil_wait_share"] >= 0.2, f
    assert "burn (run.py:" in f["summary"], f["summary"]
    # Named as Python names them ("Thread-1 (worker)"), not by their OS name.
    assert len(re.findall(r"Thread-\d+ \(worker\) \d+", f["summary"])) == 2, \
        f["summary"]
    assert f["evidence"]["top_holder_share"] >= 0.8, f
    text = mlprof_cmd(build_dir, "report", out)
    assert "GIL contention in process" in text
    # The samples say it too: the GIL's state of each, in the trace.
    trace = tmp_path / "t.json"
    mlprof_cmd(build_dir, "trace", out, "-o", trace)
    states = [e["args"].get("gil")
              for e in json.loads(trace.read_text())["traceEvents"]
              if e.get("cat") == "stack" and e["name"].startswith("burn (")]
    assert states.count("held") >= 10 and states.count("waiting") >= 10, \
        {s: states.count(s) for s in set(states)}


def test_no_gil_contention_for_one_busy_thread(build_dir, tmp_path, spin_lib):
    """One CPU-bound thread beside a sleeping one and a thread in C (GIL
    released): nobody waits for the GIL."""
    _, out = run(build_dir, tmp_path, spin_lib,
                 GIL_SCRIPT % "worker, sleeper, in_c",
                 "--stacks", "200")
    assert gil_findings(build_dir, out) == []


def test_profiler_native_left_by_a_program_taking_the_signal(
        build_dir, tmp_path, spin_lib):
    """mlprof.Profiler(stacks="200,native") without `mlprof run` (the
    package's libmlprof, loaded with dlopen: the program's sigaction is not
    interposed): a program that takes every free real-time signal afterwards
    never sees mlprof's, and its sampled C call has native frames before."""
    script = tmp_path / "prog.py"
    out = tmp_path / "p.mlprof"
    script.write_text(textwrap.dedent(PRELUDE) + textwrap.dedent("""
        import mlprof
        prof = mlprof.Profiler(output=sys.argv[2], stacks="200,native")
        prof.start()
        def c_caller():
            lib.c_spin(0.5)
        c_caller()
        counts = {}
        def handler(sig, frame):
            counts[sig] = counts.get(sig, 0) + 1
        sigs = [s for s in range(signal.SIGRTMIN, signal.SIGRTMAX + 1)
                if signal.getsignal(s) == signal.SIG_DFL]
        for s in sigs:
            signal.signal(s, handler)
        lib.c_spin(0.5)
        prof.stop()
        assert counts == {}, counts
        print("ok")
    """))
    env = dict(os.environ)
    env.pop("MLPROF_OUTPUT", None)
    r = subprocess.run([sys.executable, str(script), spin_lib, str(out)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
    folded = mlprof_cmd(build_dir, "report", "-f", "folded", out)
    assert any("c_caller (" in l and "c_spin (libspin.so" in l
               for l in folded.splitlines()), folded[-2000:]
