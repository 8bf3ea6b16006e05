"""The dashboard's stack samples (docs/guide.md, Stacks view): the page's
data carries the sampled stacks, interned, with the zone, step, process and
thread of each group of samples, and the samples for the span timeline."""
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAM = os.path.join(ROOT, "tests", "programs", "stack_shares.py")

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="the stack walker reads CPython 3.11+ frames")


def mlprof_cmd(build_dir, *args):
    r = subprocess.run([os.path.join(build_dir, "mlprof"), *map(str, args)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def page_stacks(build_dir, tmp_path, prof):
    page = tmp_path / "page.html"
    mlprof_cmd(build_dir, "html", prof, "-o", page)
    text = page.read_text()
    m = re.search(r'<script id="mlprof-data" type="application/json">(.*?)</script>', text, re.S)
    return json.loads(m.group(1))["stacks"]


def decode(st):
    """Rows as dicts with each row's functions from the outermost."""
    funcs = [st["funcs"][i:i + 3] for i in range(0, len(st["funcs"]), 3)]
    nodes = [st["nodes"][i:i + 3] for i in range(0, len(st["nodes"]), 3)]
    for parent, _, _ in nodes:
        assert parent < len(nodes)
    rows = []
    for i in range(0, len(st["rows"]), 8):
        node, zone, thread, step, n, n_cpu, wall, cpu = st["rows"][i:i + 8]
        path = []
        k = node
        while k >= 0:
            path.append(funcs[nodes[k][1]][1])
            k = nodes[k][0]
        rows.append(dict(path=path[::-1], zone=st["zones"][zone], thread=st["threads"][thread],
                         step=step, n=n, n_cpu=n_cpu, wall=wall, cpu=cpu))
    return rows


def totals(rows, names, pick=lambda r: True, key="cpu"):
    out = {n: 0 for n in names}
    for r in rows:
        if pick(r):
            for n in set(r["path"]) & set(names):
                out[n] += r[key]
    return out


def test_page_data_carries_the_stacks_by_zone_step_thread(build_dir, tmp_path):
    prof = tmp_path / "shares.mlprof"
    env = dict(os.environ)
    env.pop("MLPROF_OUTPUT", None)
    subprocess.run([sys.executable, PROGRAM, str(prof), "30", "200"], check=True, env=env,
                   timeout=300)
    st = page_stacks(build_dir, tmp_path, prof)
    assert st is not None, "no stacks in the page's data"
    assert st["interval_ns"] == 5000000
    assert st["steps"] == 30 and st["step_width"] == 1
    assert st["mark_stride"] == 1 and st["merged"] == 0 and st["dropped"] == 0
    assert any(f.endswith("stack_shares.py") for f in st["files"])
    rows = decode(st)
    assert sum(r["n"] for r in rows) == st["samples"]
    three = ("twenty", "thirty", "fifty")
    t = totals(rows, three)
    whole = sum(t.values())
    assert 2.4e9 < whole < 3.6e9, t
    # In about their shares (the sampler's accuracy, ±3 points on a quiet
    # machine, is test_stacks.py's; this one may be loaded).
    for name, want in zip(three, (20, 30, 50)):
        assert abs(100 * t[name] / whole - want) <= 5, (t, name)
    # Each sample under the innermost zone open on its thread (a sample
    # taken as a zone ends may see the next function's frame).
    big = totals(rows, three, lambda r: r["zone"] == "big")
    small = totals(rows, three, lambda r: r["zone"] == "small")
    assert big["twenty"] + big["thirty"] <= 0.03 * whole and big["fifty"] >= 0.95 * t["fifty"], big
    assert small["fifty"] <= 0.03 * whole, small
    assert small["twenty"] + small["thirty"] >= 0.95 * (t["twenty"] + t["thirty"]), small
    # Steps 0 to 29 of the main thread, for every thread of the process.
    steps = {r["step"] for r in rows if r["n"]}
    assert steps <= set(range(-1, 30)) and len(steps & set(range(30))) >= 28, steps
    five = totals(rows, three, lambda r: 10 <= r["step"] < 15)
    assert abs(sum(five.values()) / whole - 5 / 30) <= 0.05, five
    # The sleeping thread: wall time, hardly any CPU.
    sleeper = [r for r in rows if r["thread"][2] == "sleeper"]
    assert sleeper, [r["thread"] for r in rows]
    wall = sum(r["wall"] for r in sleeper)
    assert wall >= 0.8 * whole and sum(r["cpu"] for r in sleeper) <= 0.1 * wall
    assert all(r["thread"][0] == 0 for r in rows)
    pid, rank, name = st["procs"][0]
    assert rank == -1 and pid > 0 and name
    # Every sample on the timeline (under the cap), each thread's in time
    # order, naming a node of the page.
    marks = st["marks"]
    assert sum((len(m) - 1) // 2 for m in marks) == st["samples"]
    for m in marks:
        assert m[0] < len(st["threads"])
        assert all(dt >= 0 for dt in m[3::2])
        assert all(0 <= (c >> 1) - 1 < len(st["nodes"]) or c < 2 for c in m[2::2])


def test_page_without_stack_samples_has_none(build_dir, tmp_path):
    prof = tmp_path / "none.mlprof"
    env = dict(os.environ)
    env.pop("MLPROF_OUTPUT", None)
    subprocess.run([sys.executable, "-c",
                    "import sys, mlprof\n"
                    "p = mlprof.Profiler(sys.argv[1], stacks=0).start()\n"
                    "with p.zone('z'): pass\n"
                    "p.stop(); mlprof._mlprof.shutdown()", str(prof)],
                   check=True, env=env, timeout=120)
    assert page_stacks(build_dir, tmp_path, prof) is None
