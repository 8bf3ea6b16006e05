"""mlprof export --format parquet (docs/parquet.md), read back by the engines
users run: DuckDB and PySpark read every table of a multi-process,
multi-rank run, their counts, sums and percentiles equal mlprof report's,
pyarrow checks the schema and types; a real MPI run; damage; bad arguments.
"""
import glob
import importlib.util
import json
import os
import random
import subprocess
import sys

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import craft
from conftest import MLPROF, mlprof, program, report_json, zone
from mpi_flavours import OPEN_MPI

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

RANKS = 4
STEPS = 40
CAT_DATA, CAT_FORWARD, CAT_BACKWARD = 1, 2, 3


def rank_main(rank, seed, fwd_scale=1.0):
    """The profile of one rank's training process: per step a mark, then a
    train_step zone holding forward, backward and an all_reduce (group
    "world", seq = the step, 4096 bytes) on thread 1, and h2d copies on
    thread 2; the last rank computes slower (the straggler). Thread 1's
    events come in two chunks, thread 2's between them, the metadata of
    step 5's all_reduce at the start of the second."""
    rnd = random.Random(seed)
    ns = [(1, craft.ZONE, 0, "train_step"),
          (2, craft.ZONE, CAT_FORWARD, "forward"),
          (3, craft.ZONE, CAT_BACKWARD, "backward"),
          (4, craft.ZONE, craft.CAT_COMM, "all_reduce"),
          (5, craft.STRING, 0, "group"), (6, craft.STRING, 0, "world"),
          (7, craft.UNITS, 0, "seq"), (8, craft.UNITS, 0, "bytes"),
          (9, craft.ZONE, CAT_DATA, "h2d_copy"),
          (10, craft.ZONE, 0, b"bad\xff\x00name")]
    slow = 3.0 if rank == RANKS - 1 else 1.0
    main, copies = [], []
    t = 0       # the stream's time on thread 1
    t2 = 0      # on thread 2
    step_t = 1_000_000
    for k in range(STEPS):
        fwd = int(rnd.randint(200_000, 400_000) * slow * fwd_scale)
        bwd = int(rnd.randint(300_000, 600_000) * slow)
        comm = rnd.randint(50_000, 150_000)
        b_fwd = step_t + 10_000
        b_bwd = b_fwd + fwd + 5_000
        b_comm = b_bwd + bwd + 5_000
        end = b_comm + comm + 7_000
        main.append(craft.step(step_t - t))
        t = step_t
        for name, begin, dur in ((2, b_fwd, fwd), (3, b_bwd, bwd),
                                 (4, b_comm, comm)):
            main.append(craft.span(name, begin - t, dur, depth=1))
            t = begin
            if name == 4 and k == 5:
                split = (len(main), t)  # its metadata in the next chunk
            if name == 4:
                main.append(craft.span_meta(5, 6) + craft.span_units(7, k) +
                            craft.span_units(8, 4096))
        main.append(craft.span(1, step_t - t, end - step_t, depth=0))
        t = step_t
        c_begin = step_t + rnd.randint(0, 100_000)
        copies.append(craft.span(9, c_begin - t2, rnd.randint(1_000, 90_000)))
        t2 = c_begin
        step_t = end + 100_000
    main.append(craft.span(10, step_t - t, 1234))
    return craft.profile(
        craft.header(pid=1000 + rank, rank=rank, world=RANKS, host="node",
                     argv=("train.py",)),
        craft.names(ns), craft.events(main[:split[0]], tid=1),
        craft.events(copies, tid=2),
        craft.events(main[split[0]:], tid=1, base=split[1]),
        craft.meta([("dist.rank", str(rank)),
                    ("dist.world_size", str(RANKS))]),
        craft.end(step_t + 1))


def rank_worker(rank, seed):
    """A DataLoader worker of the rank: load_batch zones."""
    rnd = random.Random(seed)
    recs, t = [], 0
    for k in range(STEPS * 2):
        begin = 1_000_000 + k * 900_000
        recs.append(craft.span(1, begin - t, rnd.randint(100_000, 800_000)))
        t = begin
    return craft.profile(
        craft.header(pid=2000 + rank, rank=rank, world=RANKS, host="node",
                     argv=("pt_data_worker",)),
        craft.names([(1, craft.ZONE, CAT_DATA, "load_batch")]),
        craft.events(recs, tid=7), craft.end(t + 1_000_000))


def write_job(d, seed=0, fwd_scale=1.0):
    """A run directory of 4 ranks, each a training process and a worker."""
    d.mkdir(parents=True)
    for r in range(RANKS):
        (d / f"train-{1000 + r}.mlprof").write_bytes(
            rank_main(r, seed + r, fwd_scale))
        (d / f"worker-{2000 + r}.mlprof").write_bytes(
            rank_worker(r, seed + 10 + r))
    return str(d)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return write_job(tmp_path_factory.mktemp("job") / "run")


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    """What docs/parquet.md's queries assume: runs/DATE/ exports of three
    nightly runs, base/ and new/ exports of two builds, new's forward 30%
    slower."""
    root = tmp_path_factory.mktemp("layout")
    for i, night in enumerate(("2026-11-01", "2026-11-02", "2026-11-03")):
        run = write_job(root / "profiles" / night, seed=100 * i)
        mlprof("export", run, "-o", root / "runs" / night)
    mlprof("export", write_job(root / "profiles" / "base"), "-o",
           root / "base")
    mlprof("export", write_job(root / "profiles" / "new", fwd_scale=1.3),
           "-o", root / "new")
    return root


def doc_blocks(lang):
    """The ```lang code blocks of docs/parquet.md."""
    text = open(os.path.join(ROOT, "docs", "parquet.md")).read()
    return [b.split("\n", 1)[1] for b in text.split("```")[1::2]
            if b.startswith(lang + "\n")]


@pytest.fixture(scope="module")
def exported(job, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("out") / "tables")
    proc = mlprof("export", "--format", "parquet", job, "-o", out)
    assert "8 profiles" in proc.stderr, proc.stderr
    return out


@pytest.fixture(scope="module")
def report(job):
    return report_json(job)


def con(out):
    """A DuckDB connection with a view per table of export out."""
    c = duckdb.connect()
    c.execute(f"create view spans as select * from "
              f"read_parquet('{out}/spans/*.parquet')")
    for t in TABLES:
        c.execute(f"create view {t} as select * from '{out}/{t}.parquet'")
    return c


def nearest_rank(p):
    """DuckDB: the nearest-rank percentile p of dur_ns (docs/json-schema.md:
    the value of rank ceil(p/100 n) of the sorted durations)."""
    return (f"list_sort(list(dur_ns))[greatest(1, ceil({p} / 100.0 * "
            f"count(*))::bigint)]")


def test_duckdb_spans_equal_the_report(exported, report):
    c = con(exported)
    rows = c.execute(
        f"select zone, any_value(category), count(*), sum(dur_ns), "
        f"sum(self_ns), min(dur_ns), max(dur_ns), {nearest_rank(50)}, "
        f"{nearest_rank(90)}, {nearest_rank(95)}, {nearest_rank(99)} "
        f"from spans group by zone").fetchall()
    got = {r[0]: r[1:] for r in rows}
    want = {z["name"]: (z["category"], z["count"], z["total_ns"],
                        z["self_ns"], z["min_ns"], z["max_ns"], z["p50_ns"],
                        z["p90_ns"], z["p95_ns"], z["p99_ns"])
            for z in report["zones"]}
    assert got == want
    assert "bad\ufffd\x00name" in got  # invalid UTF-8 made valid, NUL kept
    assert c.execute("select count(*) from spans").fetchone()[0] == \
        report["spans"]
    # 8 processes, 4 ranks, 3 threads per rank.
    assert c.execute("select count(distinct pid), count(distinct rank), "
                     "count(distinct (pid, thread)) from spans").fetchone() \
        == (8, RANKS, 12)


def test_duckdb_zones_table_is_the_report(exported, report):
    c = con(exported)
    cols = ("count", "total_ns", "self_ns", "mean_ns", "std_ns", "min_ns",
            "max_ns", "p50_ns", "p90_ns", "p95_ns", "p99_ns")
    rows = c.execute(f"select zone, category, {', '.join(cols)}, share "
                     f"from zones").fetchall()
    # In the report's order (by total), every field equal.
    assert [r[0] for r in rows] == [z["name"] for z in report["zones"]]
    for r, z in zip(rows, report["zones"]):
        assert r[1] == z["category"]
        assert r[2:13] == tuple(z[k] for k in cols), z["name"]
        assert r[13] == pytest.approx(z["share"], rel=1e-9)


def test_duckdb_steps_collectives_findings(exported, report):
    c = con(exported)
    # Steps: each training process's complete steps (mark to next mark;
    # the last mark's step never ends), their mean the report's.
    steps = c.execute("select pid, rank, count(*), avg(dur_ns) from steps "
                      "group by pid, rank order by pid").fetchall()
    threads = {t["pid"]: t for t in report["threads"] if t["steps"]}
    assert [(p, r, n) for p, r, n, _ in steps] == [
        (1000 + r, r, STEPS - 1) for r in range(RANKS)]
    for pid, _, n, mean in steps:
        assert threads[pid]["steps"] == STEPS  # marks
        assert mean == pytest.approx(threads[pid]["step_mean_ns"], abs=1)
    # Every span of a training thread after the first mark has its step;
    # the spans of step k begin inside steps row k.
    bad = c.execute(
        "select count(*) from spans s join steps t on s.pid = t.pid "
        "and s.step = t.step where s.start_ns < t.start_ns "
        "or s.start_ns >= t.end_ns").fetchone()[0]
    assert bad == 0
    assert c.execute("select count(*) from spans where thread = 1 and "
                     "step is null and zone <> 'bad\ufffd\x00name'"
                     ).fetchone()[0] == 0
    # Collectives: one row per rank and step, matched by (grp, seq).
    coll = c.execute("select grp, seq, count(*), count(distinct rank), "
                     "min(bytes), max(bytes), any_value(op) "
                     "from collectives group by grp, seq order by seq"
                     ).fetchall()
    assert coll == [("world", k, RANKS, RANKS, 4096, 4096, "all_reduce")
                    for k in range(STEPS)]
    # The slowest rank per step: the one made slow.
    slowest = c.execute(
        "select step, arg_max(rank, dur_ns) from steps group by step"
    ).fetchall()
    assert {r for _, r in slowest} == {RANKS - 1}
    # Findings: the report's, in its order, with their evidence as JSON.
    f = c.execute("select rank, type, zone, severity, evidence "
                  "from findings order by rank").fetchall()
    assert [(x[0], x[1], x[2]) for x in f] == [
        (x["rank"], x["type"], x["zone"]) for x in report["findings"]]
    for got, want in zip(f, report["findings"]):
        assert got[3] == pytest.approx(want["severity"])
        assert json.loads(got[4]).keys() == want["evidence"].keys()
    assert c.execute("select count(*) from samples").fetchone()[0] == 0


SCHEMA = {
    "spans": [("process", pa.string(), False), ("pid", pa.int64(), False),
              ("rank", pa.int64(), True), ("host", pa.string(), False),
              ("thread", pa.int64(), False),
              ("thread_name", pa.string(), True),
              ("zone", pa.string(), False), ("category", pa.string(), False),
              ("start_ns", pa.int64(), False), ("dur_ns", pa.int64(), False),
              ("self_ns", pa.int64(), False), ("step", pa.int64(), True),
              ("depth", pa.int32(), False), ("meta", pa.string(), True)],
    "zones": [("zone", pa.string(), False), ("category", pa.string(), False)]
    + [(k, pa.int64(), False) for k in (
        "count", "total_ns", "self_ns", "mean_ns", "std_ns", "min_ns",
        "max_ns", "p50_ns", "p90_ns", "p95_ns", "p99_ns")]
    + [("share", pa.float64(), False), ("outer_ns", pa.int64(), False)],
    "steps": [("process", pa.string(), False), ("pid", pa.int64(), False),
              ("rank", pa.int64(), True), ("host", pa.string(), False),
              ("thread", pa.int64(), False), ("step", pa.int64(), False),
              ("start_ns", pa.int64(), False), ("end_ns", pa.int64(), False),
              ("dur_ns", pa.int64(), False)],
    "samples": [("process", pa.string(), False), ("pid", pa.int64(), False),
                ("rank", pa.int64(), True), ("host", pa.string(), False),
                ("time_ns", pa.int64(), False),
                ("subject", pa.string(), False), ("id", pa.int64(), False),
                ("label", pa.string(), True),
                ("measure", pa.string(), False),
                ("value", pa.float64(), True), ("absent", pa.string(), True)],
    "collectives": [
        ("process", pa.string(), False), ("pid", pa.int64(), False),
        ("rank", pa.int64(), True), ("host", pa.string(), False),
        ("thread", pa.int64(), False), ("zone", pa.string(), False),
        ("op", pa.string(), False), ("grp", pa.string(), True),
        ("seq", pa.int64(), True), ("bytes", pa.int64(), True),
        ("peer", pa.int64(), True), ("root", pa.int64(), True),
        ("start_ns", pa.int64(), False), ("end_ns", pa.int64(), False),
        ("dur_ns", pa.int64(), False), ("step", pa.int64(), True)],
    "findings": [("rank", pa.int32(), False), ("severity", pa.float64(), False),
                 ("type", pa.string(), False), ("zone", pa.string(), True),
                 ("flagged", pa.string(), True),
                 ("summary", pa.string(), False),
                 ("evidence", pa.string(), False),
                 ("recommendation", pa.string(), True),
                 ("note", pa.string(), True)],
    "memory_sites": [("pid", pa.int64(), False), ("zone", pa.string(), False),
                     ("stack", pa.int64(), True),
                     ("python", pa.string(), False),
                     ("native", pa.string(), False),
                     ("allocated_bytes", pa.int64(), False),
                     ("count", pa.int64(), False),
                     ("at_peak_bytes", pa.int64(), False),
                     ("live_end_bytes", pa.int64(), False),
                     ("leak", pa.int32(), False),
                     ("bytes_per_step", pa.float64(), False)],
    "allocations": [
        ("process", pa.string(), False), ("pid", pa.int64(), False),
        ("rank", pa.int64(), True), ("host", pa.string(), False),
        ("thread", pa.int64(), False), ("time_ns", pa.int64(), False),
        ("size", pa.int64(), False), ("weight", pa.int64(), False),
        ("address", pa.int64(), False), ("zone", pa.string(), True),
        ("stack", pa.int64(), True), ("step", pa.int64(), True),
        ("count", pa.int64(), False)],
    "stack_samples": [
        ("process", pa.string(), False), ("pid", pa.int64(), False),
        ("rank", pa.int64(), True), ("host", pa.string(), False),
        ("thread", pa.int64(), False), ("time_ns", pa.int64(), False),
        ("weight_ns", pa.int64(), False), ("on_cpu", pa.int32(), False),
        ("cpu_ns", pa.int64(), True), ("stack", pa.int64(), True),
        ("step", pa.int64(), True)],
    "stacks": [
        ("process", pa.string(), False), ("pid", pa.int64(), False),
        ("rank", pa.int64(), True), ("host", pa.string(), False),
        ("stack", pa.int64(), False), ("parent", pa.int64(), True),
        ("depth", pa.int32(), False), ("function", pa.string(), False),
        ("file", pa.string(), False), ("line", pa.int64(), True),
        ("native", pa.int32(), False), ("folded", pa.string(), False)],
}

TABLES = ("zones", "steps", "samples", "collectives", "findings",
          "memory_sites", "allocations", "stack_samples", "stacks")


def table_files(out):
    yield from (("spans", f) for f in sorted(glob.glob(f"{out}/spans/*")))
    for t in TABLES:
        yield t, f"{out}/{t}.parquet"


def check_schema(table, path):
    """The file's schema, metadata and encodings are docs/parquet.md's."""
    f = pq.ParquetFile(path)
    want = pa.schema([pa.field(n, t, nullable=null)
                      for n, t, null in SCHEMA[table]])
    assert f.schema_arrow.remove_metadata().equals(want), (
        path, f.schema_arrow)
    meta = f.metadata.metadata
    assert meta[b"mlprof.schema"] == b"mlprof.parquet/1"
    assert meta[b"mlprof.table"] == table.encode()
    f.read().validate(full=True)


def test_pyarrow_schema_and_types(exported):
    files = list(table_files(exported))
    assert len(files) == 8 + len(TABLES)
    for table, path in files:
        f = pq.ParquetFile(path)
        want = pa.schema([pa.field(n, t, nullable=null)
                          for n, t, null in SCHEMA[table]])
        assert f.schema_arrow.remove_metadata().equals(want), (
            path, f.schema_arrow)
        meta = f.metadata.metadata
        assert meta[b"mlprof.schema"] == b"mlprof.parquet/1"
        assert meta[b"mlprof.table"] == table.encode()
        t = f.read()
        t.validate(full=True)
        for i in range(f.metadata.num_row_groups):
            rg = f.metadata.row_group(i)
            for k in range(rg.num_columns):
                col = rg.column(k)
                assert col.compression == "ZSTD"
                enc = set(col.encodings)
                if SCHEMA[table][k][1] == pa.string() and \
                        SCHEMA[table][k][0] not in (
                            "meta", "summary", "evidence", "folded",
                            "python", "native"):
                    assert "RLE_DICTIONARY" in enc, (path, col)
                if SCHEMA[table][k][0] in ("start_ns", "end_ns", "time_ns"):
                    assert "DELTA_BINARY_PACKED" in enc, (path, col)
    spans = pq.read_table(f"{exported}/spans").to_pylist()
    comm = [s for s in spans if s["zone"] == "all_reduce"]
    assert comm and all(json.loads(s["meta"]) == {
        "group": "world", "seq": json.loads(s["meta"])["seq"],
        "bytes": 4096} for s in comm)
    assert all(s["meta"] is None for s in spans if s["zone"] != "all_reduce")


def test_row_groups_bound_memory_same_rows(job, exported, tmp_path):
    out = str(tmp_path / "small")
    mlprof("export", job, "-o", out, "--row-group-rows", "50")
    for (_, a), (_, b) in zip(table_files(exported), table_files(out)):
        fa, fb = pq.ParquetFile(a), pq.ParquetFile(b)
        assert fb.metadata.num_rows == fa.metadata.num_rows
        assert all(fb.metadata.row_group(i).num_rows <= 50
                   for i in range(fb.metadata.num_row_groups))
        assert fb.read().equals(fa.read()), b
    f = pq.ParquetFile(f"{out}/spans/part-00000.parquet")
    assert f.metadata.num_row_groups > 3


def test_docs_duckdb_queries(layout, monkeypatch):
    """Every SQL query of docs/parquet.md runs on the layout it describes,
    and the ones with a known answer give it."""
    monkeypatch.chdir(layout)
    blocks = doc_blocks("sql")
    assert len(blocks) == 9  # the last two: test_docs_memory_stack_queries
    blocks = blocks[:7]
    c = duckdb.connect()
    results = [c.execute(q).fetchall() for q in blocks]
    assert all(results)
    slowest, counts, p99_spans, p99_zones, regressed, waits, parts = results
    assert {r[1] for r in slowest} == {RANKS - 1}
    assert counts == [(RANKS - 1, STEPS - 1)]
    assert [r[0] for r in p99_spans] == [r[0] for r in p99_zones] == [
        "2026-11-01", "2026-11-02", "2026-11-03"]
    # The spans' p99 is the zones table's (and the report's) p99.
    assert [r[1:] for r in p99_spans] == [r[1:] for r in p99_zones]
    assert regressed[0][0] == "forward" and regressed[0][3] > 0.2
    assert {r[0] for r in waits} == set(range(RANKS))
    assert {r[1] for r in parts} >= {"forward", "backward", "communication"}


def test_to_duckdb(exported, tmp_path):
    spec = importlib.util.spec_from_file_location(
        "mlprof_tables", os.path.join(ROOT, "python", "mlprof", "tables.py"))
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    con = tables.to_duckdb(exported)
    for t in tables.TABLES:
        n = con.execute(f"select count(*) from {t}").fetchone()[0]
        assert n == duckdb.execute(
            f"select count(*) from read_parquet('{exported}/"
            f"{'spans/*' if t == 'spans' else t}.parquet')").fetchone()[0]
    with pytest.raises(FileNotFoundError, match="no mlprof export here"):
        tables.to_duckdb(str(tmp_path))


def test_pyspark_reads_every_table(exported, report, layout, python_run):
    os.environ.setdefault("JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64")
    from pyspark.sql import SparkSession, functions as F
    spark = (SparkSession.builder.master("local[1]").appName("mlprof-test")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    try:
        spans = spark.read.parquet(f"{exported}/spans")
        got = {r["zone"]: (r["n"], r["total"], r["self"]) for r in
               spans.groupBy("zone").agg(
                   F.count("*").alias("n"), F.sum("dur_ns").alias("total"),
                   F.sum("self_ns").alias("self")).collect()}
        assert got == {z["name"]: (z["count"], z["total_ns"], z["self_ns"])
                       for z in report["zones"]}
        c = con(exported)
        for t in ("zones", "steps", "samples", "collectives", "findings"):
            df = spark.read.parquet(f"{exported}/{t}.parquet")
            assert df.count() == \
                c.execute(f"select count(*) from {t}").fetchone()[0], t
        # The memory and stack tables, from a run that has them.
        _, py_tables = python_run
        pc = con(py_tables)
        for t in ("memory_sites", "allocations", "stack_samples", "stacks"):
            df = spark.read.parquet(f"{py_tables}/{t}.parquet")
            n = pc.execute(f"select count(*) from {t}").fetchone()[0]
            assert n > 0 and df.count() == n, t
        joined = spark.read.parquet(f"{py_tables}/stack_samples.parquet").join(
            spark.read.parquet(f"{py_tables}/stacks.parquet"), ["pid", "stack"])
        assert joined.count() == pc.execute(
            "select count(*) from stack_samples join stacks using (pid, stack)"
        ).fetchone()[0]
        # The slowest rank per step, as in docs/parquet.md.
        steps = spark.read.parquet(f"{exported}/steps.parquet")
        slow = steps.groupBy("step").agg(
            F.max_by("rank", "dur_ns").alias("slowest")).collect()
        assert {r["slowest"] for r in slow} == {RANKS - 1}
        # docs/parquet.md's PySpark block on the layout it describes (the
        # JVM kept the directory it started in: absolute paths).
        (block,) = [b for b in doc_blocks("python") if "SparkSession" in b]
        for d in ("base/", "new/", "runs/"):
            block = block.replace(f'"{d}', f'"{layout}/{d}')
        scope = {}
        exec(block, scope)
        assert {r["slowest_rank"] for r in scope["slowest"].collect()} == \
            {RANKS - 1}
        assert sorted(r["run"] for r in scope["p99"].collect()) == [
            "2026-11-01", "2026-11-02", "2026-11-03"]
        assert scope["regressed"].first()["zone"] == "forward"
        assert scope["waits"].count() == RANKS
    finally:
        spark.stop()


def test_mpi_run_tables(tmp_path):
    """A real run: mlprof run around mpirun of 2 ranks of mpi_ops (Open
    MPI), with samples."""
    OPEN_MPI.require("mpi_ops")
    run = str(tmp_path / "run")
    OPEN_MPI.run([MLPROF, "run", "-q", "-o", run, "--",
                  *OPEN_MPI.mpirun(2), OPEN_MPI.program("mpi_ops")])
    out = str(tmp_path / "tables")
    mlprof("export", run, "-o", out)
    rep = report_json(run)
    c = con(out)
    got = {r[0]: r[1:] for r in c.execute(
        "select zone, count(*), sum(dur_ns), sum(self_ns) from spans "
        "group by zone").fetchall()}
    assert got == {z["name"]: (z["count"], z["total_ns"], z["self_ns"])
                   for z in rep["zones"]}
    # Both ranks' all-reduces, matched by communicator and sequence number.
    pairs = c.execute(
        "select grp, seq, count(distinct rank) n from collectives "
        "where op = 'all_reduce' and grp = 'world' group by grp, seq"
    ).fetchall()
    assert pairs and all(n == 2 for _, _, n in pairs)
    assert c.execute("select count(*) from collectives where zone = "
                     "'MPI_Allreduce' and bytes = 8000").fetchone()[0] == 6
    # Samples: every row of the CSV table, the same measures.
    csv = mlprof("report", run, "--format", "csv", "--table",
                 "samples").stdout.splitlines()
    assert c.execute("select count(*) from samples").fetchone()[0] == \
        len(csv) - 1 > 0


def test_damaged_profile_exports_what_is_readable(job, tmp_path):
    d = tmp_path / "damaged"
    d.mkdir()
    for f in sorted(os.listdir(job)):
        data = bytearray(open(os.path.join(job, f), "rb").read())
        if f.startswith("train-1000"):
            # A byte flipped inside the thread-2 events chunk, and the END
            # chunk cut short.
            at = data.index(b"MPCK", data.index(b"MPCK", 200) + 1)
            data[at + 40] ^= 0xFF
            data = data[:-3]
        (d / f).write_bytes(bytes(data))
    out = str(tmp_path / "tables")
    proc = mlprof("export", str(d), "-o", out)
    assert "train-1000.mlprof: damage found: 1 damaged chunks skipped" in \
        proc.stderr, proc.stderr
    assert "exported what is readable" in proc.stderr
    rep = report_json(str(d))
    c = con(out)
    got = dict(c.execute("select zone, count(*) from spans group by zone"
                         ).fetchall())
    assert got == {z["name"]: z["count"] for z in rep["zones"]}
    assert c.execute("select count(*) from spans where pid = 1000"
                     ).fetchone()[0] > 0


def test_export_again_into_the_same_directory(job, tmp_path):
    """A later export of fewer processes leaves no spans part of the
    earlier one for a reader's glob to take."""
    out = str(tmp_path / "t")
    mlprof("export", job, "-o", out)
    assert len(glob.glob(f"{out}/spans/*.parquet")) == 8
    one = sorted(glob.glob(f"{job}/*.mlprof"))[:2]
    mlprof("export", *one, "-o", out)
    assert sorted(os.listdir(f"{out}/spans")) == [
        "part-00000.parquet", "part-00001.parquet"]
    c = con(out)
    assert c.execute("select count(distinct pid) from spans").fetchone()[0] \
        == 2


def test_file_is_not_a_profile(tmp_path):
    bad = tmp_path / "x.mlprof"
    bad.write_bytes(b"not a profile at all")
    r = mlprof("export", str(bad), "-o", str(tmp_path / "o"), check=False)
    assert r.returncode == 2 and "mlprof export:" in r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args,message", [
    ([], "no profile given"),
    (["RUN"], "no output directory given (-o DIR)"),
    (["--format", "csv", "RUN", "-o", "O"], "unknown format 'csv'"),
    (["--row-group-rows", "0", "RUN", "-o", "O"],
     "--row-group-rows wants a whole number"),
    (["--bogus", "RUN", "-o", "O"], "unknown option '--bogus'"),
    (["RUN", "-o"], "-o needs a value"),
    (["RUN", "-o", "FILE"], "is not a directory"),
    (["MISSING", "-o", "O"], "MISSING"),
])
def test_bad_arguments(job, tmp_path, args, message):
    (tmp_path / "FILE").write_text("x")
    sub = {"RUN": job, "O": str(tmp_path / "O"), "FILE": str(tmp_path / "FILE"),
           "MISSING": str(tmp_path / "MISSING")}
    r = subprocess.run([MLPROF, "export", *[sub.get(a, a) for a in args]],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and r.stderr.startswith("mlprof export: ")
    assert not (tmp_path / "O").exists()


def test_help_lists_tables():
    r = mlprof("export", "--help")
    assert "spans/part-NNNNN.parquet" in r.stdout
    assert "export" in mlprof("--help").stdout


def peak_rss_kb(args):
    """Runs mlprof with args under GNU time (Debian's time, which
    scripts/install-deps.sh installs): its peak resident memory in kB. Not
    through wait4 here: a child forked from this big interpreter keeps the
    interpreter's peak across exec."""
    r = subprocess.run(["/usr/bin/time", "-f", "%M", MLPROF, *map(str, args)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    assert r.returncode == 0, r.stderr
    return int(r.stderr.strip().splitlines()[-1])


def test_memory_within_twice_the_reports(tmp_path):
    """The spans are streamed row group by row group: on 1.5 M spans the
    export's peak memory stays within 2x mlprof report's (docs/parquet.md),
    and shrinks with the row groups."""
    run = tmp_path / "run"
    mlprof("run", "-q", "-o", run, "--", program("workload"), "--after",
           "300000")
    report = peak_rss_kb(["report", run, "--format", "json", "--top", "0"])
    export = peak_rss_kb(["export", run, "-o", tmp_path / "t"])
    small = peak_rss_kb(["export", run, "-o", tmp_path / "s",
                         "--row-group-rows", "1000"])
    assert export <= 2 * report, (export, report)
    if not os.environ.get("MLPROF_LIB"):  # no sanitizer's allocator
        assert small < export, (small, export)
    rows = sum(pq.ParquetFile(p).metadata.num_rows
               for p in glob.glob(f"{tmp_path}/t/spans/*.parquet"))
    assert rows == 1_500_000


def test_interrupted_export_leaves_no_temporary(tmp_path):
    """SIGINT while a spans file is being written: the unfinished files are
    removed and mlprof dies of the signal."""
    run = tmp_path / "run"
    mlprof("run", "-q", "-o", run, "--", program("workload"), "--after",
           "400000")
    out = tmp_path / "t"
    p = subprocess.Popen([MLPROF, "export", str(run), "-o", str(out)],
                         stderr=subprocess.PIPE, text=True)
    import signal
    import time
    deadline = time.monotonic() + 60
    while not glob.glob(f"{out}/spans/part-00001.parquet.tmp-*"):
        assert p.poll() is None, "the export ended before it was interrupted"
        assert time.monotonic() < deadline
        time.sleep(0.001)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=60)
    assert p.returncode == -signal.SIGINT, p.stderr.read()
    left = [f for f in glob.glob(f"{out}/**", recursive=True) if ".tmp-" in f]
    assert left == []
    assert not os.path.exists(f"{out}/spans/part-00001.parquet")


# ---- memory and stack tables (a real Python run) -----------------------------

MEM_STACKS = """
import time

def spin(t):
    end = time.perf_counter() + t
    while time.perf_counter() < end:
        pass

def grow(n):
    return [bytearray(64 * 1024) for _ in range(n)]

kept = []
for _ in range(4):
    spin(0.1)
    kept.append(grow(16))
    del kept[0:len(kept) // 2]
"""


@pytest.fixture(scope="module")
def python_run(tmp_path_factory):
    """`mlprof run --memory=all --stacks 500` of a Python program that
    spins and allocates: its run directory and its export."""
    d = tmp_path_factory.mktemp("pyrun")
    (d / "prog.py").write_text(MEM_STACKS)
    out = str(d / "run")
    mlprof("run", "-q", "--memory=all", "--stacks", "500", "-o", out, "--",
           sys.executable, str(d / "prog.py"))
    tables = str(d / "tables")
    mlprof("export", out, "-o", tables)
    return out, tables


def test_folded_allocations_are_rows_with_their_count(tmp_path):
    """Sampled, the allocations freed within a flush are one row per site
    and flush (address 0, count: how many): the sums still give the
    report's allocations and bytes."""
    run, out = tmp_path / "run", tmp_path / "tables"
    mlprof("run", "-q", "--memory=sampled:16384", "--flush-ms", "20", "-o",
           run, "--", program("alloc_known"), "work", 1, 40, 2)
    mlprof("export", run, "-o", out)
    mem = report_json(run)["memory"]
    c = con(str(out))
    got = {pid: (n, b) for pid, n, b in c.execute(
        "select pid, sum(count), sum(weight) from allocations group by pid"
    ).fetchall()}
    want = {p["pid"]: (p["allocs"], p["allocated_bytes"])
            for p in mem["processes"] if p["allocs"]}
    assert want and got == want
    folded, n = c.execute("select count(*), sum(count) from allocations "
                          "where count > 1").fetchone()
    assert folded > 0 and n > 2 * folded
    assert c.execute("select count(*) from allocations where count > 1 "
                     "and address != 0").fetchone()[0] == 0


def test_memory_and_stack_tables_equal_the_report(python_run):
    run, out = python_run
    rep = report_json(run)
    mem, hot = rep["memory"], rep["hot"]
    c = con(out)
    # allocations: per process, the records and their bytes.
    got = {pid: (n, b) for pid, n, b in c.execute(
        "select pid, sum(count), sum(weight) from allocations group by pid"
    ).fetchall()}
    want = {p["pid"]: (p["allocs"], p["allocated_bytes"])
            for p in mem["processes"] if p["allocs"]}
    assert want and got == want
    # memory_sites: the report's sites, row for row.
    rows = c.execute(
        "select pid, zone, coalesce(stack, 0), allocated_bytes, count, "
        "at_peak_bytes, live_end_bytes, leak = 1, python, native "
        "from memory_sites").fetchall()
    assert sorted(rows) == sorted(
        (s["pid"], s["zone"], s["stack"], s["allocated_bytes"], s["count"],
         s["at_peak_bytes"], s["live_end_bytes"], s["leak"], s["python"],
         s["native"]) for s in mem["sites"])
    assert c.execute("select sum(allocated_bytes) from memory_sites"
                     ).fetchone()[0] == sum(
                         p["allocated_bytes"] for p in mem["processes"])
    # stack_samples: count, time and CPU as the hot functions count them.
    n, on_cpu, wall, on_cpu_ns = c.execute(
        "select count(*), sum(on_cpu), sum(weight_ns), "
        "sum(weight_ns) filter (where on_cpu = 1) from stack_samples"
    ).fetchone()
    assert n > 50
    assert (n, on_cpu, wall, on_cpu_ns) == (
        hot["samples"], hot["on_cpu"], hot["wall_ns"], hot["on_cpu_ns"])
    # stacks: every sample's stack is defined; spin's self time is the
    # time of the samples whose leaf is spin.
    assert c.execute(
        "select count(*) from stack_samples x left join stacks s "
        "on x.pid = s.pid and x.stack = s.stack "
        "where x.stack is not null and s.stack is null").fetchone()[0] == 0
    spin = [f for f in hot["functions"]
            if f["function"] == "spin" and f["file"].endswith("prog.py")]
    assert len(spin) == 1
    self_ns, folded = c.execute(
        "select sum(x.weight_ns), any_value(s.folded) from stack_samples x "
        "join stacks s on x.pid = s.pid and x.stack = s.stack "
        "where s.function = 'spin' and s.file like '%prog.py'").fetchone()
    assert self_ns == spin[0]["self_ns"]
    assert folded.endswith(";spin (%s:7)" % spin[0]["file"]) or \
        ";spin (" in folded, folded
    assert "<module> (" in folded.split(";")[0]
    for t in ("memory_sites", "allocations", "stack_samples", "stacks"):
        check_schema(t, f"{out}/{t}.parquet")


def test_docs_memory_stack_queries(python_run, monkeypatch):
    """docs/parquet.md's queries of the stack and allocation tables run on
    an export of a Python run and name its functions."""
    run, out = python_run
    monkeypatch.chdir(os.path.dirname(out))
    os.symlink(out, "base")
    hot_rows, alloc_rows = [duckdb.connect().execute(q).fetchall()
                            for q in doc_blocks("sql")[7:]]
    assert hot_rows[0][0] == "spin" and hot_rows[0][1].endswith("prog.py")
    assert alloc_rows and all(";" in r[1] or "(" in r[1] for r in alloc_rows)
    assert any("grow (" in r[1] for r in alloc_rows), alloc_rows


def export_filtered(job, tmp_path, *args):
    out = str(tmp_path / "f")
    r = mlprof("export", job, "-o", out, *args, check=False)
    return r, out


def test_filters_keep_what_report_keeps(job, tmp_path):
    r, out = export_filtered(job, tmp_path, "--rank", "1", "--zone",
                             "forward", "--steps", "5:10")
    assert r.returncode == 0, r.stderr
    rep = report_json(job, "--rank", "1", "--zone", "forward",
                      "--steps", "5:10")
    c = con(out)
    assert c.execute("select distinct rank from spans").fetchall() == [(1,)]
    assert c.execute("select distinct zone from spans").fetchall() == [
        ("forward",)]
    z = zone(rep, "forward")
    assert c.execute("select count(*), sum(dur_ns) from spans").fetchone() \
        == (z["count"], z["total_ns"])
    assert c.execute("select zone, count from zones").fetchall() == [
        ("forward", z["count"])]
    # Steps 5 to 9 of the run, numbered from the first kept (as the
    # filtered report numbers them).
    assert c.execute("select min(step), max(step) from spans").fetchone() \
        == (0, 4)
    assert c.execute("select distinct rank, step from steps order by step"
                     ).fetchall() == [(1, k) for k in range(5)]


def test_filter_matching_nothing_fails(job, tmp_path):
    r, out = export_filtered(job, tmp_path, "--rank", "99")
    want = subprocess.run([MLPROF, "report", job, "--rank", "99"],
                          capture_output=True, text=True)
    assert r.returncode == 2 and want.returncode == 2
    msg = want.stderr.split("mlprof report: ", 1)[1]
    assert r.stderr == "mlprof export: " + msg
    assert not os.path.exists(out)
