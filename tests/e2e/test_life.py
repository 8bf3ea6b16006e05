"""How a process ends: exec, _exit, signals, stack overflow (tests/programs/
life.c). Whatever the ending, the zones recorded before it are in the profile,
the process dies or exits as it would without mlprof, and the report says
how it ended."""
import os
import signal
import subprocess
import textwrap

import pytest

from conftest import LIBRARY, MLPROF, mlprof, program, report_json, zone


def processes(run):
    """The processes of the report but mlprof run's own sampling session."""
    return [p for p in report_json(run)["processes"]
            if not p["cmdline"].startswith(MLPROF)]


def run(tmp_path, *cmd, name="run"):
    out = tmp_path / name
    r = mlprof("run", "-q", "-o", out, "--", *cmd, check=False)
    return out, r


def test_exec_keeps_the_zones_and_a_chain_is_one_process(tmp_path):
    life = program("life")
    out, r = run(tmp_path, "sh", "-c", f"exec {life} exec 1000 sh -c 'exit 5'")
    assert r.returncode == 5, r.stderr
    rep = report_json(out)
    assert zone(rep, "work")["count"] == 1000
    procs = [p for p in rep["processes"] if not p["cmdline"].startswith(MLPROF)]
    # sh -> life -> sh: three profiles of one pid, chained.
    assert len({p["pid"] for p in procs}) == 1 and len(procs) == 3
    last = [p for p in procs if p["exec_into"] is None]
    assert len(last) == 1
    assert (last[0]["end"], last[0]["status"]) == ("exit", 5)
    assert last[0]["cmdline"] == "sh -c exit 5"
    assert last[0]["spans"] == 1000
    assert all(p["end"] == "exec" for p in procs if p["exec_into"] is not None)
    text = mlprof("report", out).stdout
    assert "killed" not in text and "without a closing chunk" not in text
    rows = text.split("\nProcesses\n")[1].split("\n\n")[0].splitlines()[1:]
    assert len([l for l in rows if l.split()[0] == str(last[0]["pid"])]) == 1
    assert "exit 5" in text


def test_execl_variant_and_failed_exec(tmp_path):
    out, r = run(tmp_path, program("life"), "exec", "300", "/bin/sh", "-l",
                 "-c", name="l")
    assert r.returncode == 2, r.stderr  # sh -c with no command string
    assert zone(report_json(out), "work")["count"] == 300
    out, r = run(tmp_path, program("life"), "execfail", "400", name="f")
    assert r.returncode == 0, r.stderr
    (p,) = processes(out)
    assert (p["end"], p["status"], p["clean_end"]) == ("exit", 0, True)
    assert zone(report_json(out), "work")["count"] == 800


def test_exit_status_of_underscore_exit(tmp_path):
    out, r = run(tmp_path, program("life"), "_exit", "1000", "3")
    assert r.returncode == 3
    (p,) = processes(out)
    assert (p["end"], p["status"], p["spans"]) == ("exit", 3, 1000)
    assert "exit 3" in mlprof("report", out).stdout


ZONES_PY = textwrap.dedent("""
    import ctypes, os, sys
    lib = ctypes.CDLL(sys.argv[1])
    lib.mlprof_zone_begin.argtypes = [ctypes.c_char_p]
    def work(n):
        for _ in range(n):
            lib.mlprof_zone_begin(b"work")
            lib.mlprof_zone_end()
""")


def test_python_os_exit(tmp_path):
    script = ZONES_PY + "work(1000)\nos._exit(0)\n"
    out, r = run(tmp_path, "/usr/bin/python3", "-c", script, LIBRARY)
    assert r.returncode == 0, r.stderr
    (p,) = processes(out)
    assert (p["end"], p["status"]) == ("exit", 0)
    assert zone(report_json(out), "work")["count"] == 1000


def test_python_multiprocessing_fork_workers(tmp_path):
    script = ZONES_PY + textwrap.dedent("""
        import multiprocessing as mp
        if __name__ == "__main__":
            ctx = mp.get_context("fork")
            ps = [ctx.Process(target=work, args=(500,)) for _ in range(4)]
            for p in ps: p.start()
            for p in ps: p.join()
            sys.exit(sum(p.exitcode for p in ps))
    """)
    out, r = run(tmp_path, "/usr/bin/python3", "-c", script, LIBRARY)
    assert r.returncode == 0, r.stderr
    workers = [p for p in processes(out) if p["spans"]]
    assert len(workers) == 4
    assert all((p["end"], p["status"]) == ("exit", 0) for p in workers)
    assert zone(report_json(out), "work")["count"] == 2000


FAULTS = [signal.SIGSEGV, signal.SIGFPE, signal.SIGBUS, signal.SIGILL,
          signal.SIGABRT, signal.SIGTERM, signal.SIGINT]


def plain_status(*cmd):
    """The status of cmd run without mlprof, as a shell reports it."""
    r = subprocess.run(["sh", "-c", '"$@"; echo $?', "sh", *cmd],
                       capture_output=True, text=True, timeout=60)
    return int(r.stdout.split()[-1])


@pytest.mark.parametrize("sig", FAULTS, ids=lambda s: s.name)
def test_raised_signal_kills_as_without_mlprof(tmp_path, sig):
    cmd = [program("life"), "raise", "200", str(int(sig))]
    want = plain_status(*cmd)
    assert want == 128 + sig
    out, r = run(tmp_path, *cmd)
    assert r.returncode == want and "STILL ALIVE" not in r.stdout
    (p,) = processes(out)
    assert (p["end"], p["status"], p["spans"]) == ("signal", int(sig), 200)


@pytest.mark.parametrize("sig", FAULTS, ids=lambda s: s.name)
def test_signal_sent_from_outside_kills(tmp_path, sig):
    out = tmp_path / "run"
    p = subprocess.Popen([MLPROF, "run", "-q", "-o", out, "--",
                          program("life"), "wait", "200"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline() == "ready\n"
    (prof,) = [q for q in processes_live(out)]
    os.kill(prof, sig)
    p.communicate(timeout=60)
    assert p.returncode == 128 + sig
    (q,) = processes(out)
    assert (q["end"], q["status"], q["spans"]) == ("signal", int(sig), 200)


def processes_live(out):
    """Pids of the command's profiles while it runs (from the file names)."""
    return [int(f.name.rsplit("-", 1)[1].split(".")[0])
            for f in out.iterdir() if f.name.startswith("life-")]


def test_program_handler_keeps_working(tmp_path):
    """A SIGTERM handler installed before mlprof starts runs as without it."""
    out = tmp_path / "h.mlprof"
    p = subprocess.Popen([program("life"), "handler", "100", out],
                         stdout=subprocess.PIPE, text=True,
                         env={k: v for k, v in os.environ.items()
                              if not k.startswith("MLPROF_")})
    assert p.stdout.readline() == "ready\n"
    p.send_signal(signal.SIGTERM)
    rest, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and rest == f"handled {int(signal.SIGTERM)}\n"
    rep = report_json(out)
    assert zone(rep, "work")["count"] == 100
    assert zone(rep, "after_signal")["count"] == 1
    (q,) = rep["processes"]
    assert (q["end"], q["status"]) == ("exit", 0)


def test_stack_overflow_keeps_the_zones(tmp_path):
    out, r = run(tmp_path, program("life"), "overflow", "300")
    assert r.returncode == 128 + signal.SIGSEGV
    (p,) = processes(out)
    assert (p["end"], p["status"], p["spans"]) == ("signal", 11, 300)


def test_running_process_is_not_called_killed(tmp_path):
    out = tmp_path / "run"
    p = subprocess.Popen([MLPROF, "run", "-q", "-o", out, "--flush-ms", "10",
                          "--", program("life"), "wait", "50"],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "ready\n"
        (pid,) = processes_live(out)
        text = mlprof("report", out).stdout + mlprof("report", out).stderr
        assert "still running" in text and "killed" not in text
        os.kill(pid, signal.SIGKILL)
        p.wait(timeout=60)
        text = mlprof("report", out).stdout + mlprof("report", out).stderr
        assert "process was killed" in text
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
