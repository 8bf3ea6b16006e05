"""mlprof diff and compare under machine noise (issue #21, item 8), on
profiles written byte by byte (craft.py) so that the load is known, not
hoped for: the machine's run-queue wait and CPU steal as the sampler records
them, a uniform shift of every zone, several runs a side, a preempted step.
"""
import json
import re
import random

from conftest import mlprof  # noqa: F401
import craft

ZONES = ["load", "forward", "backward", "optimizer"]
SPANS = 300
PID = 100


def write(path, factors, wait=0.0, steal=None, seed=1, step_ns=None,
          spikes=0):
    """A profile of pid PID: SPANS spans of each zone (zone k lasts about
    (k + 1) x 100 µs, times factors[k], with a 5% jitter of seed), back to
    back on one thread; process samples every 100 ms whose run-queue wait
    is the share wait of the CPU time wanted, and system samples with
    cpu_steal_pct = steal x 100 when steal is given; step_ns: the intervals
    of step marks on a thread of their own; spikes: every spikes-th span
    of the first zone 200 times longer, as preemption makes it."""
    rng = random.Random(seed)
    ns = [(k + 1, craft.ZONE, 0, z) for k, z in enumerate(ZONES)]
    ns += [(10, craft.MEASURE, 0, "cpu_pct"),
           (11, craft.MEASURE, 0, "runq_wait_pct"),
           (12, craft.MEASURE, 0, "cpu_steal_pct")]
    recs, t = [], 0
    gap = 0
    for i in range(SPANS):
        for k in range(len(ZONES)):
            dur = int((k + 1) * 100_000 * factors[k] *
                      (1 + 0.05 * rng.random()))
            if spikes and k == 0 and i % spikes == 0:
                dur *= 200  # preempted
            recs.append(craft.span(k + 1, gap, dur))
            gap = dur
            t += dur
    mark = [craft.step(0)] + [craft.step(d) for d in step_ns or []]
    if step_ns:
        t = max(t, sum(step_ns))
    rows, first = [], True
    for tick in range(0, t, 100_000_000):
        cpu = 100 * (1 - wait)
        m = [(10, cpu), (11, 100 * wait)]
        rows.append((craft.SUBJECT_PROCESS, PID, 0 if first else 100_000_000,
                     m))
        if steal is not None:
            rows.append((craft.SUBJECT_SYSTEM, 0, 0, [(12, 100 * steal)]))
        first = False
    chunks = [craft.header(pid=PID), craft.names(ns),
              craft.events(recs)]
    if step_ns:
        chunks.append(craft.events(mark, tid=2))
    chunks += [craft.sources([("proc", True, ""), ("system", True, "")]),
               craft.samples(1_000_000, rows), craft.end(t + 1)]
    path.write_bytes(craft.profile(*chunks))
    return path


def diff(*args):
    r = mlprof("diff", *args, check=False)
    assert r.returncode in (0, 1), r.stderr
    return r


def diff_json(*args):
    r = diff("--format", "json", *args)
    return r.returncode, json.loads(r.stdout)


def test_a_loaded_machine_is_no_regression(tmp_path):
    """NEW ran on a machine loaded by busy loops: its process waited for a
    CPU half the time it wanted one, and every zone took twice as long.
    Not a regression: the report says the machine was slower, and by how
    much. A zone 30% slower beyond that, under the same load, still is."""
    base = write(tmp_path / "base.mlprof", [1, 1, 1, 1], wait=0.1, seed=1)
    loaded = write(tmp_path / "loaded.mlprof", [1.8] * 4, wait=0.5, seed=2)
    code, doc = diff_json(base, loaded)
    assert code == 0, doc
    assert doc["regression"] is False
    m = doc["machine"]
    assert m["slower"] is True
    assert abs(m["new_wait_share"] - 0.5) < 1e-9
    assert all(z["machine_explains"] for z in doc["zones"])
    text = diff(base, loaded).stdout
    assert "run-queue wait 5.0x higher" in text
    assert "no regression: the machine was slower" in text
    assert "REGRESSION" not in text

    worse = write(tmp_path / "worse.mlprof", [1.8, 1.8 * 1.3, 1.8, 1.8],
                  wait=0.5, seed=3)
    code, doc = diff_json(base, worse)
    assert code == 1
    fwd = next(z for z in doc["zones"] if z["name"] == "forward")
    assert fwd["verdict"] == "slower" and not fwd["machine_explains"]
    others = [z for z in doc["zones"] if z["name"] != "forward"]
    assert all(z["machine_explains"] for z in others)
    assert "REGRESSION: 1 zone" in diff(base, worse).stdout


def test_steal_is_the_machine_too(tmp_path):
    """A hypervisor that gave 40% of the CPU to other guests: the process
    was never on a run queue, but steal explains a 1.6x slowdown."""
    base = write(tmp_path / "base.mlprof", [1] * 4, steal=0.0, seed=4)
    stolen = write(tmp_path / "stolen.mlprof", [1.6] * 4, steal=0.4, seed=5)
    code, doc = diff_json(base, stolen)
    assert code == 0
    assert doc["machine"]["new_steal_share"] == 0.4
    assert "CPU steal 0% -> 40%" in doc["machine"]["note"]


def test_uniform_shift_is_reported_as_the_machine(tmp_path):
    """Every zone 10% slower together, no load recorded: a machine change,
    not four regressions; a zone 30% beyond the shift stays one."""
    base = write(tmp_path / "base.mlprof", [1] * 4, seed=6)
    shifted = write(tmp_path / "shifted.mlprof", [1.1] * 4, seed=7)
    code, doc = diff_json(base, shifted)
    assert code == 0, doc
    assert doc["uniform_shift"]["detected"] is True
    assert doc["uniform_shift"]["explained"] == 4
    assert all(z["explained_by"] == "uniform_shift" for z in doc["zones"])
    text = diff(base, shifted).stdout
    assert "4 moved with the machine" in text
    assert re.search(r"all 4 zones are (9|10)\.\d% slower together", text)
    assert "the machine was slower" in text
    for z in ZONES:
        line = next(x for x in text.splitlines()
                    if x.strip().startswith(z + " "))
        assert " machine " in line and " slower " not in line

    beyond = write(tmp_path / "beyond.mlprof", [1.1, 1.1, 1.1 * 1.3, 1.1],
                   seed=8)
    code, doc = diff_json(base, beyond)
    assert code == 1
    bw = next(z for z in doc["zones"] if z["name"] == "backward")
    assert bw["verdict"] == "slower" and not bw["machine_explains"]
    assert bw["vs_shift"]["verdict"] == "slower"


# Each run's own speed, zone by zone: runs of one program on a shared
# machine differ by several percent, each zone its own way.
# Pooled, NEW looks 7% slower at load and backward, 6% faster at forward
# and optimizer: no uniform shift, but verdicts the runs do not bear out.
AA = [[0.95, 1.05, 1.01, 0.97], [1.00, 0.95, 1.06, 1.02],
      [1.05, 1.00, 0.96, 1.07], [1.12, 0.94, 1.02, 0.95],
      [1.02, 0.99, 1.12, 0.90], [1.07, 0.89, 1.07, 1.00]]


def test_a_a_with_three_runs_a_side_is_no_regression(tmp_path):
    """Three runs of one program a side: the runs' medians vary by up to
    10%, which the pooled spans alone would call significant; between-run
    variance (pyperf's way) says it is noise."""
    paths = [write(tmp_path / f"r{i}.mlprof", AA[i], seed=20 + i)
             for i in range(6)]
    code, doc = diff_json(*paths[:3], "--", *paths[3:])
    assert code == 0, [(z["name"], z["verdict"], z["between_runs"])
                       for z in doc["zones"]]
    assert doc["base_runs"] == 3 and doc["new_runs"] == 3
    assert all(z["between_runs"]["base_runs"] == 3 for z in doc["zones"])
    # The pooled test alone flags some of them: the between-run test is what
    # keeps them unchanged.
    assert doc["uniform_shift"]["detected"] is False
    assert any(z["runs_vary"] for z in doc["zones"])
    text = diff(*paths[:3], "--", *paths[3:]).stdout
    assert "and 2 more runs" in text and "the runs vary" in text

    # A real 30% slowdown of one zone over three runs a side still is one.
    slow = [write(tmp_path / f"s{i}.mlprof",
                  [f * (1.3 if k == 1 else 1) for k, f in enumerate(AA[i])],
                  seed=40 + i) for i in range(3, 6)]
    code, doc = diff_json(*paths[:3], "--", *slow)
    assert code == 1
    fwd = next(z for z in doc["zones"] if z["name"] == "forward")
    assert fwd["verdict"] == "slower"
    assert fwd["between_runs"]["p"] < 0.05


def test_several_runs_bad_usage(tmp_path):
    a = write(tmp_path / "a.mlprof", [1] * 4)
    for args in (["--", a], [a, "--"], [a, a, a]):
        r = mlprof("diff", *args, check=False)
        assert r.returncode == 2, args
        assert "mlprof diff:" in r.stderr


def test_compare_ranks_by_median_step_and_says_when_indistinct(tmp_path):
    """Two configurations of equal steps, one of whose runs had one step
    preempted for 2 s: the means say it is 3x slower, the medians that
    the two cannot be told apart. A configuration 30% slower per step is
    told apart."""
    rng = random.Random(9)
    steady = [int(10e6 * (1 + 0.02 * rng.random())) for _ in range(60)]
    hit = [int(10e6 * (1 + 0.02 * rng.random())) for _ in range(60)]
    hit[30] = 2_000_000_000
    slow = [int(13e6 * (1 + 0.02 * rng.random())) for _ in range(60)]
    a = write(tmp_path / "a.mlprof", [1] * 4, step_ns=steady)
    b = write(tmp_path / "b.mlprof", [1] * 4, step_ns=hit, spikes=20)
    c = write(tmp_path / "c.mlprof", [1] * 4, step_ns=slow)
    doc = json.loads(mlprof("compare", "-f", "json", a, b, c).stdout)
    runs = doc["runs"]
    assert runs[1]["step_mean_ns"] > 3 * runs[0]["step_mean_ns"]
    assert abs(runs[1]["step_p50_ns"] / runs[0]["step_p50_ns"] - 1) < 0.02
    assert runs[2]["rank_step"] == 3
    best = doc["fastest"]["run"]
    other = 1 - best
    assert best in (0, 1) and runs[other]["indistinct"] is True
    assert runs[2]["indistinct"] is False
    assert "within noise of it" in doc["recommendation"]
    lo, hi = runs[0]["step_p50_interval_ns"]
    assert lo <= runs[0]["step_p50_ns"] <= hi
    two = json.loads(mlprof("compare", "-f", "json", a, b).stdout)
    assert "indistinguishable" in two["recommendation"]
    # A zone with a few preempted spans in b: its mean is 10x a's, its
    # median the same: a tie, not a fastest run.
    load = next(z for z in two["zones"] if z["name"] == "load")
    assert load["runs"][1]["mean_ns"] > 5 * load["runs"][0]["mean_ns"]
    assert load["tie"] is True


def test_compare_with_repeated_runs_per_configuration(tmp_path):
    """Three runs of each configuration, separated by --: zones pooled,
    step time the median of the runs' medians. Runs of one program whose
    steps vary run to run by 6% are indistinguishable; a configuration 30%
    slower a step is not."""
    def steps(scale, seed):
        rng = random.Random(seed)
        return [int(10e6 * scale * (1 + 0.02 * rng.random()))
                for _ in range(40)]
    a = [write(tmp_path / f"a{i}.mlprof", [1] * 4, seed=60 + i,
               step_ns=steps(s, 70 + i)) for i, s in enumerate((1, 1.06, 0.97))]
    b = [write(tmp_path / f"b{i}.mlprof", [1] * 4, seed=80 + i,
               step_ns=steps(s, 90 + i)) for i, s in enumerate((1.03, 0.98, 1.04))]
    c = [write(tmp_path / f"c{i}.mlprof", [1] * 4, seed=100 + i,
               step_ns=steps(1.3 * s, 110 + i))
         for i, s in enumerate((1, 1.06, 0.97))]
    doc = json.loads(mlprof("compare", "-f", "json", "-l", "a,b,c", *a, "--",
                            *b, "--", *c).stdout)
    runs = doc["runs"]
    assert [r["repeats"] for r in runs] == [3, 3, 3]
    assert [r["label"] for r in runs] == ["a", "b", "c"]
    z = next(z for z in doc["zones"] if z["name"] == "load")
    assert [r["count"] for r in z["runs"]] == [3 * SPANS] * 3
    assert runs[2]["rank_step"] == 3 and not runs[2]["indistinct"]
    assert runs[0]["indistinct"] or runs[1]["indistinct"]
    assert "within noise of it" in doc["recommendation"]
    lo, hi = runs[0]["step_p50_interval_ns"]
    assert lo < 10e6 * 0.98 and hi > 10e6 * 1.06  # the runs' spread
    text = mlprof("compare", *a, "--", *b).stdout
    assert "a0.mlprof +2 runs" in text
    assert "indistinguishable" in text
    for args in ([a[0], "--"], ["--", a[0]], [a[0], "--", "--", b[0]],
                 ["-l", "x", a[0], "--", b[0]]):
        r = mlprof("compare", *args, check=False)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("mlprof compare: ")
