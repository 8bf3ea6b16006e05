"""The stack sampler (docs/stacks.md) under `mlprof run`: every Python
thread's stack read from inside the process, reported as Hot functions and
folded stacks."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import mlprof
from mlprof import _mlprof

STARTUP = os.path.join(os.path.dirname(mlprof.__file__), "_startup")

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="the stack walker reads CPython 3.11+ frames")

SPIN = """
import time

def spin(t):
    end = time.perf_counter() + t
    while time.perf_counter() < end:
        pass
"""


def run(build_dir, tmp_path, script, *flags, name="run"):
    """`mlprof run FLAGS -- python script`; returns (CompletedProcess, run
    directory)."""
    path = tmp_path / (name + ".py")
    path.write_text(textwrap.dedent(SPIN) + textwrap.dedent(script))
    out = tmp_path / name
    env = dict(os.environ, MLPROF_PY_STARTUP=STARTUP)
    env.pop("MLPROF_OUTPUT", None)
    r = subprocess.run([os.path.join(build_dir, "mlprof"), "run", "-q", "-o",
                        str(out), *flags, "--", sys.executable, str(path)],
                       capture_output=True, text=True, env=env, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return r, out


def mlprof_cmd(build_dir, *args):
    r = subprocess.run([os.path.join(build_dir, "mlprof"), *map(str, args)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def hot(build_dir, out):
    rep = json.loads(mlprof_cmd(build_dir, "report", "-f", "json", out))
    assert "hot" in rep, "no stack samples in the profiles"
    return rep["hot"]


def func(h, name, rows=None):
    """The row of function name of the test's script (run.py)."""
    for row in rows if rows is not None else h["functions"]:
        if row["function"] == name and row["file"].endswith("run.py"):
            return row
    raise AssertionError("no function %r among %s" % (
        name, [r["function"] for r in (rows or h["functions"])][:30]))


def test_walker_is_registered():
    assert _mlprof.STACKS


def test_known_shares_within_three_points(build_dir, tmp_path):
    _, out = run(build_dir, tmp_path, """
        def twenty(): spin(0.2)
        def thirty(): spin(0.3)
        def fifty(): spin(0.5)
        for _ in range(3):
            twenty(); thirty(); fifty()
    """, "--stacks", "500")
    h = hot(build_dir, out)
    assert h["interval_ns"] == 2e6
    totals = {n: func(h, n)["total_ns"]
              for n in ("twenty", "thirty", "fifty")}
    whole = sum(totals.values())
    assert 2.7e9 < whole < 3.3e9, totals
    for n, want in (("twenty", 20), ("thirty", 30), ("fifty", 50)):
        assert abs(100 * totals[n] / whole - want) <= 3, (totals, n)
    # Self time is spin's, at the line of its loop.
    assert func(h, "spin")["self_ns"] >= 0.95 * whole
    assert func(h, "spin")["line"] in (6, 7)
    text = mlprof_cmd(build_dir, "report", out)
    assert "Hot functions (stack samples at 500 Hz" in text
    assert "fifty" in text and "run.py:" in text


def test_lock_waiter_and_sleeper_are_off_cpu(build_dir, tmp_path):
    """A thread waiting on a lock and one sleeping show as off a CPU (wall
    time, no CPU time); the spinning one on a CPU."""
    _, out = run(build_dir, tmp_path, """
        import threading
        lock = threading.Lock()
        lock.acquire()
        def waiter():
            lock.acquire()
        def sleeper():
            time.sleep(1.0)
        def spinner():
            spin(1.2)
        ts = [threading.Thread(target=f) for f in (waiter, sleeper)]
        for t in ts: t.start()
        spinner()
        lock.release()
        for t in ts: t.join()
    """, "--stacks", "200")
    h = hot(build_dir, out)
    for name in ("waiter", "sleeper"):
        row = func(h, name)
        assert 0.8e9 <= row["self_ns"] <= 1.5e9, row  # about a second
        assert row["self_cpu_ns"] <= 0.1 * row["self_ns"], row
    spinner = func(h, "spinner")
    assert spinner["total_cpu_ns"] >= 0.9 * spinner["total_ns"], spinner
    # CPU time is the spinner's, not the waiting threads' wall time.
    assert h["cpu_ns"] < 2.5e9, h["cpu_ns"]
    text = mlprof_cmd(build_dir, "report", out)
    assert "off a CPU (waiting" in text


def test_preempted_spinner_is_on_a_cpu(build_dir, tmp_path):
    """A busy thread that shares its one CPU with three busy loops gets
    about a quarter of it and waits for it the rest of the time: runnable,
    so on a CPU, however long it waits between two samples; never off a
    CPU as if it slept (a loaded machine's spinners were)."""
    cpu = min(os.sched_getaffinity(0))
    loops = [subprocess.Popen(["taskset", "-c", str(cpu), "sh", "-c",
                               "while :; do :; done"]) for _ in range(3)]
    try:
        _, out = run(build_dir, tmp_path, f"""
            import os
            os.sched_setaffinity(0, {{{cpu}}})
            def spinner():
                spin(1.0)
            spinner()
        """, "--stacks", "200")
    finally:
        for p in loops:
            p.kill()
            p.wait()
    h = hot(build_dir, out)
    spinner = func(h, "spinner")
    # It did wait for its CPU: its process ran well under a core.
    assert h["cpu_ns"] < 0.7 * spinner["total_ns"], (h["cpu_ns"], spinner)
    assert spinner["total_cpu_ns"] >= 0.9 * spinner["total_ns"], spinner


def test_recursion_500_deep(build_dir, tmp_path):
    _, out = run(build_dir, tmp_path, """
        import sys
        sys.setrecursionlimit(5000)
        def rec(n):
            if n == 0:
                spin(0.5)
            else:
                rec(n - 1)
        rec(500)
    """, "--stacks", "200")
    folded = mlprof_cmd(build_dir, "report", "-f", "folded", out)
    deepest = max(line.count("rec (") for line in folded.splitlines())
    assert deepest == 501, deepest
    h = hot(build_dir, out)
    rec = func(h, "rec")
    # Counted once per sample in total, however deep.
    assert rec["total_ns"] <= h["wall_ns"], (rec, h["wall_ns"])
    assert rec["total_ns"] >= 0.4e9, rec


def test_odd_names_stay_text(build_dir, tmp_path):
    """A function whose name holds ';', a control character and a lone
    surrogate (as surrogateescape leaves in file names): the folded lines
    stay valid UTF-8 (read strictly here), one frame per name."""
    _, out = run(build_dir, tmp_path, """
        def odd():
            spin(0.4)
        odd.__code__ = odd.__code__.replace(co_qualname="odd;name\\x01\\udcff")
        odd()
    """, "--stacks", "200")
    folded = mlprof_cmd(build_dir, "report", "-f", "folded", out)
    assert any(";odd:name\ufffd\ufffd (" in l and l.count(";") == 2
               for l in folded.splitlines()), folded[:2000]


def test_generators_and_coroutines(build_dir, tmp_path):
    _, out = run(build_dir, tmp_path, """
        import asyncio
        def gen():
            for _ in range(5):
                spin(0.08)
                yield 1
        def consume():
            return sum(gen())
        async def work():
            spin(0.4)
            await asyncio.sleep(0)
        async def main():
            await asyncio.gather(work())
        consume()
        asyncio.run(main())
    """, "--stacks", "200")
    folded = mlprof_cmd(build_dir, "report", "-f", "folded", out)
    assert any("consume (" in l and ";gen (" in l and ";spin (" in l
               for l in folded.splitlines()), folded[:2000]
    assert any(";work (" in l and ";spin (" in l
               for l in folded.splitlines()), folded[:2000]


def test_threads_ending_between_samples(build_dir, tmp_path):
    """Hundreds of threads that start and end between samples: the program
    runs to its end and the profile reads clean. (A thread state freed while
    it was read once gave an address that wrapped into the walker's copy of
    the data stack: about one run in twenty crashed here.)"""
    r, out = run(build_dir, tmp_path, """
        import threading
        def short():
            spin(0.002)
        for _ in range(400):
            t = threading.Thread(target=short)
            t.start()
            t.join()
        print("done")
    """, "--stacks", "2000")
    assert r.stdout == "done\n"
    rep = json.loads(mlprof_cmd(build_dir, "report", "-f", "json", out))
    assert not rep.get("warnings"), rep.get("warnings")
    assert rep["hot"]["samples"] > 0


def test_forked_child_samples_itself(build_dir, tmp_path):
    _, out = run(build_dir, tmp_path, """
        import os
        def in_child():
            spin(0.5)
        def in_parent():
            spin(0.5)
        pid = os.fork()
        if pid == 0:
            in_child()
            os._exit(0)
        in_parent()
        os.waitpid(pid, 0)
    """, "--stacks", "200")
    profiles = sorted(p for p in os.listdir(out) if p.startswith("python"))
    assert len(profiles) == 2, profiles
    seen = {}
    for p in profiles:
        h = hot(build_dir, out / p)
        seen[p] = {r["function"] for r in h["functions"]
                   if r["total_ns"] >= 0.25e9}
    assert sorted(("in_child" in s, "in_parent" in s)
                  for s in seen.values()) == [(False, True), (True, False)], \
        seen


def test_sampling_churn_never_breaks_the_program(build_dir, tmp_path):
    """Frames made and freed as fast as Python can while the sampler reads
    them at 2 kHz: the program runs to its end with its own result."""
    r, out = run(build_dir, tmp_path, """
        import random, threading
        def churn(n):
            return 0 if n == 0 else 1 + churn(n - 1)
        def gen(n):
            yield from (churn(k % 40) for k in range(n))
        def worker(seed):
            rnd = random.Random(seed)
            total = 0
            end = time.perf_counter() + 1.5
            while time.perf_counter() < end:
                total += churn(rnd.randrange(300)) + sum(gen(20))
            return total
        ts = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
        for t in ts: t.start()
        worker(9)
        for t in ts: t.join()
        print("ok", churn(250))
    """, "--stacks", "2000")
    assert r.stdout == "ok 250\n"
    h = hot(build_dir, out)
    assert func(h, "churn")["total_ns"] > 0


def test_stacks_off(build_dir, tmp_path):
    _, out = run(build_dir, tmp_path, "spin(0.2)\n", "--stacks", "off")
    rep = json.loads(mlprof_cmd(build_dir, "report", "-f", "json", out))
    assert "hot" not in rep


def test_hot_functions_by_zone(build_dir, tmp_path):
    _, out = run(build_dir, tmp_path, """
        import mlprof
        prof = mlprof.Profiler().start()
        def load(): spin(0.3)
        def compute(): spin(0.6)
        for _ in range(2):
            with prof.zone("data"):
                load()
            with prof.zone("step"):
                compute()
            spin(0.15)  # in no zone
        prof.stop()
    """, "--stacks", "200")
    h = hot(build_dir, out)
    zones = {z["zone"]: z for z in h["zones"]}
    load = func(h, "load", zones["data"]["functions"])["total_ns"]
    compute = func(h, "compute", zones["step"]["functions"])["total_ns"]
    assert 0.45e9 <= load <= 0.75e9, load
    assert 1.0e9 <= compute <= 1.4e9, compute
    assert not any(r["function"] == "compute"
                   for r in zones["data"]["functions"])
    assert func(h, "<module>", zones[None]["functions"])["total_ns"] >= 0.2e9
    text = mlprof_cmd(build_dir, "report", out)
    assert "Hot functions by zone" in text
    folded = mlprof_cmd(build_dir, "report", "-f", "folded", "--by-zone", out)
    assert any(l.startswith("[step];") and "compute (" in l
               for l in folded.splitlines())


def test_profiler_stacks_option(tmp_path):
    """Profiler(stacks=HZ) outside mlprof run; stacks=False: none."""
    script = tmp_path / "p.py"
    script.write_text(textwrap.dedent(SPIN) + textwrap.dedent("""
        import sys, mlprof
        prof = mlprof.Profiler(sys.argv[1], stacks=int(sys.argv[2]))
        prof.start()
        spin(0.4)
        prof.stop()
        mlprof._mlprof.shutdown()
    """))
    env = dict(os.environ)
    env.pop("MLPROF_OUTPUT", None)
    build = os.environ.get("MLPROF_BUILD")
    for hz, want in ((300, True), (0, False)):
        path = tmp_path / ("p%d.mlprof" % hz)
        subprocess.run([sys.executable, str(script), str(path), str(hz)],
                       check=True, env=env, timeout=120)
        r = subprocess.run([os.path.join(build, "mlprof"), "report", "-f",
                            "json", str(path)], capture_output=True,
                           text=True, check=True)
        rep = json.loads(r.stdout)
        assert ("hot" in rep) == want, rep.keys()
        if want:
            assert rep["hot"]["interval_ns"] == pytest.approx(1e9 / 300)
    with pytest.raises(ValueError):
        mlprof.Profiler(stacks=-1)


def test_trace_has_sample_events(build_dir, tmp_path):
    _, out = run(build_dir, tmp_path, """
        def inner(): spin(0.3)
        def outer(): inner()
        outer()
    """, "--stacks", "100")
    trace = tmp_path / "t.json"
    mlprof_cmd(build_dir, "trace", out, "-o", trace)
    events = [e for e in json.loads(trace.read_text())["traceEvents"]
              if e.get("cat") == "stack"]
    mine = [e for e in events if e["name"].startswith("spin (")]
    assert len(mine) >= 15, len(events)
    e = mine[len(mine) // 2]
    assert e["ph"] == "i" and e["args"]["on_cpu"] in (True, False)
    frames = e["args"]["stack"].split(";")
    assert [f.split(" (")[0] for f in frames[-3:]] == ["outer", "inner",
                                                         "spin"], frames


def test_dataloader_worker_samples_itself(build_dir, tmp_path):
    """A DataLoader worker (num_workers=1) samples itself into its own
    profile: the function its dataset runs is hot there, not in the main
    process's."""
    pytest.importorskip("torch")
    _, out = run(build_dir, tmp_path, """
        import torch
        from torch.utils.data import DataLoader, Dataset
        def in_worker():
            spin(0.05)
        class Items(Dataset):
            def __len__(self):
                return 12
            def __getitem__(self, i):
                in_worker()
                return torch.tensor([i])
        if __name__ == "__main__":
            got = [int(b) for b in DataLoader(Items(), num_workers=1)]
            assert got == list(range(12)), got
    """, "--stacks", "200")
    seen = {}
    for p in sorted(os.listdir(out)):
        if p.startswith("python"):
            h = hot(build_dir, out / p)
            seen[p] = {r["function"]: r["total_ns"] for r in h["functions"]
                       if r["file"].endswith("run.py")}
    assert len(seen) == 2, seen  # the main process and its worker
    workers = [s for s in seen.values() if s.get("in_worker", 0) >= 0.3e9]
    assert len(workers) == 1, seen
    assert "Items.__getitem__" in workers[0], seen
    main = [s for s in seen.values() if s is not workers[0]][0]
    assert main.get("in_worker", 0) == 0, seen


def test_gloo_ranks_sample_with_their_rank(build_dir, tmp_path):
    """Each rank of a 2-rank gloo job (RANK/WORLD_SIZE, as torchrun sets
    them) under `mlprof run` samples itself: its profile carries its rank
    and the function it spun in."""
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available() or \
            not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(SPIN) + textwrap.dedent("""
        import os
        import torch
        import torch.distributed as dist
        def rank_work():
            spin(0.5)
        dist.init_process_group("gloo")
        rank_work()
        t = torch.ones(4)
        dist.all_reduce(t)
        assert t.tolist() == [2.0] * 4
        dist.destroy_process_group()
    """))
    procs = []
    for rank in range(2):
        env = dict(os.environ, MLPROF_PY_STARTUP=STARTUP, RANK=str(rank),
                   WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   OMP_NUM_THREADS="1")
        env.pop("MLPROF_OUTPUT", None)
        procs.append(subprocess.Popen(
            [os.path.join(build_dir, "mlprof"), "run", "-q", "-o",
             str(tmp_path / ("rank%d" % rank)), "--stacks", "200", "--",
             sys.executable, str(script)],
            env=env, cwd=tmp_path, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    for p in procs:
        output = p.communicate(timeout=240)[0]
        assert p.returncode == 0, output[-3000:]
    for rank in range(2):
        rep = json.loads(mlprof_cmd(build_dir, "report", "-f", "json",
                                    tmp_path / ("rank%d" % rank)))
        ranks = {p["rank"] for p in rep["processes"]
                 if "python" in os.path.basename(p["path"])}
        assert ranks == {rank}, rep["processes"]
        assert "hot" in rep, "rank %d has no stack samples" % rank
        assert func(rep["hot"], "rank_work")["total_ns"] >= 0.3e9, rank


def test_thread_started_before_the_profiler(tmp_path):
    """A thread the program started before Profiler(stacks=...).start() is
    sampled as the others (the walker reads the interpreter's thread list,
    not threads it saw start)."""
    script = tmp_path / "early.py"
    script.write_text(textwrap.dedent(SPIN) + textwrap.dedent("""
        import sys, threading, mlprof
        go = threading.Event()
        def early_worker():
            go.wait()
            spin(0.6)
        t = threading.Thread(target=early_worker)
        t.start()
        prof = mlprof.Profiler(sys.argv[1], stacks=200)
        prof.start()
        go.set()
        t.join()
        prof.stop()
        mlprof._mlprof.shutdown()
    """))
    env = dict(os.environ)
    env.pop("MLPROF_OUTPUT", None)
    path = tmp_path / "early.mlprof"
    subprocess.run([sys.executable, str(script), str(path)], check=True,
                   env=env, timeout=120)
    h = hot(os.environ.get("MLPROF_BUILD"), path)
    rows = [r for r in h["functions"] if r["function"] == "early_worker"]
    assert rows and rows[0]["total_ns"] >= 0.3e9, rows


def test_python_subprocess_samples_itself(build_dir, tmp_path):
    """A Python program started by another (subprocess, not fork) under
    mlprof run gets its own profile with its own stacks."""
    child = tmp_path / "child.py"
    child.write_text(textwrap.dedent(SPIN) + textwrap.dedent("""
        def in_subprocess():
            spin(0.5)
        in_subprocess()
    """))
    _, out = run(build_dir, tmp_path, """
        import subprocess, sys
        def in_parent():
            subprocess.run([sys.executable, %r], check=True)
        in_parent()
    """ % str(child), "--stacks", "200")
    profiles = sorted(p for p in os.listdir(out) if p.startswith("python"))
    assert len(profiles) == 2, profiles
    found = [p for p in profiles
             if any(r["function"] == "in_subprocess" and r["total_ns"] >= 0.25e9
                    for r in hot(build_dir, out / p)["functions"])]
    assert len(found) == 1, profiles
