"""A program's signals under `mlprof run` are what they are without it
(issue 20, item 1): Python installs its SIGINT handler and raises
KeyboardInterrupt, a C program reads back the dispositions it set
(tests/programs/signals.c), an ignored SIGTERM is ignored, a handled one is
handled, and a death by signal keeps what was recorded before it."""
import signal
import subprocess
import textwrap

import pytest

from conftest import LIBRARY, MLPROF, mlprof, program, report_json, zone


def processes(run):
    """The processes of the report but mlprof run's own sampling session."""
    return [p for p in report_json(run)["processes"]
            if not p["cmdline"].startswith(MLPROF)]


def both(tmp_path, *cmd, name="run"):
    """cmd run plainly and under `mlprof run`: (plain, under, run dir); the
    plain status as mlprof run and a shell give it (128 + N for signal N)."""
    plain = subprocess.run(list(cmd), capture_output=True, text=True,
                           timeout=60)
    if plain.returncode < 0:
        plain.returncode = 128 - plain.returncode
    out = tmp_path / name
    under = subprocess.run([MLPROF, "run", "-q", "-o", str(out), "--", *cmd],
                           capture_output=True, text=True, timeout=60)
    return plain, under, out


CHECKPOINT = textwrap.dedent("""
    import ctypes, os, signal, sys
    lib = ctypes.CDLL(sys.argv[1])
    lib.mlprof_zone_begin.argtypes = [ctypes.c_char_p]
    print(signal.getsignal(signal.SIGINT) is signal.default_int_handler,
          signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, flush=True)
    for _ in range(100):
        lib.mlprof_zone_begin(b"work")
        lib.mlprof_zone_end()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        signal.pause()
    except KeyboardInterrupt:
        print("checkpoint saved", flush=True)
        if sys.argv[2] == "reraise":
            raise
""")


@pytest.mark.parametrize("then", ["exit", "reraise"])
def test_python_gets_keyboard_interrupt(tmp_path, then):
    """A training script that saves a checkpoint on Ctrl-C does, then exits
    or dies of SIGINT as it would without mlprof."""
    plain, under, out = both(tmp_path, "/usr/bin/python3", "-c", CHECKPOINT,
                             LIBRARY, then)
    assert plain.stdout == "True True\ncheckpoint saved\n", plain
    assert (under.returncode, under.stdout) == (plain.returncode,
                                                plain.stdout), under.stderr
    (p,) = processes(out)
    if then == "exit":
        assert (p["end"], p["status"], p["spans"]) == ("exit", 0, 100)
    else:
        assert plain.returncode == 128 + signal.SIGINT
        assert (p["end"], p["status"], p["spans"]) == ("signal", 2, 100)


def test_c_program_reads_back_what_it_set(tmp_path):
    """Every disposition read through sigaction, signal(), sysv_signal(),
    siginterrupt(), sigignore() and sigset() is the same, byte for byte:
    SIG_DFL (not mlprof's handler) at start, with the flags and mask the
    program gave it."""
    plain, under, _ = both(tmp_path, program("signals"), "show")
    assert plain.returncode == 0 and "start 2: DFL" in plain.stdout
    assert (under.returncode, under.stdout) == (0, plain.stdout), under.stderr


def test_ignored_sigterm_is_ignored(tmp_path):
    plain, under, out = both(tmp_path, program("signals"), "ignore", "100")
    assert (plain.returncode, plain.stdout) == (0, "survived\n")
    assert (under.returncode, under.stdout) == (0, "survived\n")
    (p,) = processes(out)
    assert (p["end"], p["status"], p["spans"]) == ("exit", 0, 200)


def test_handled_sigterm_is_handled(tmp_path):
    plain, under, out = both(tmp_path, program("signals"), "handled", "100")
    assert (plain.returncode, plain.stdout) == (3, "handled 15\n")
    assert (under.returncode, under.stdout) == (3, "handled 15\n")
    (p,) = processes(out)
    assert (p["end"], p["status"], p["spans"]) == ("exit", 3, 100)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT,
                                 signal.SIGSEGV], ids=lambda s: s.name)
def test_default_set_again_still_flushes(tmp_path, sig):
    """A program that had a handler and sets SIG_DFL again dies of the
    signal as without mlprof, with what it recorded before in the profile."""
    plain, under, out = both(tmp_path, program("signals"), "redefault",
                             "100", str(int(sig)))
    assert plain.returncode == 128 + sig and "STILL ALIVE" not in plain.stdout
    assert under.returncode == 128 + sig and "STILL ALIVE" not in under.stdout
    (p,) = processes(out)
    assert (p["end"], p["status"], p["spans"]) == ("signal", int(sig), 100)


def test_sigterm_from_outside_keeps_python_zones(tmp_path):
    """Python leaves SIGTERM at SIG_DFL: killed with it, the process keeps
    every zone recorded before."""
    script = textwrap.dedent("""
        import ctypes, sys, time
        lib = ctypes.CDLL(sys.argv[1])
        lib.mlprof_zone_begin.argtypes = [ctypes.c_char_p]
        for _ in range(300):
            lib.mlprof_zone_begin(b"work")
            lib.mlprof_zone_end()
        print("ready", flush=True)
        time.sleep(60)
    """)
    out = tmp_path / "run"
    p = subprocess.Popen([MLPROF, "run", "-q", "-o", str(out), "--",
                          "/usr/bin/python3", "-c", script, LIBRARY],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "ready\n"
        (pid,) = [int(f.name.split("-")[1].split(".")[0])
                  for f in out.iterdir() if f.name.startswith("python")]
        subprocess.run(["kill", "-TERM", str(pid)], check=True)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 128 + signal.SIGTERM
    (q,) = processes(out)
    assert (q["end"], q["status"]) == ("signal", int(signal.SIGTERM))
    assert zone(report_json(out), "work")["count"] == 300
    assert "killed" not in mlprof("report", out).stdout
