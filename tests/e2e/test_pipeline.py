"""Profiles made through the library, then read by report and trace:
hostile names, damaged files, the trace format, installing."""
import csv
import io
import json
import os
import subprocess

from conftest import BUILD, LIBRARY, lib, mlprof, report_json, start, zone  # noqa: F401

HOSTILE = [
    b'quote"and\\backslash',
    b"ctrl\x01\x02\x1f\ttab\nnewline",
    b"bad utf8 \xff\xfe \xc3(",
    b"<script>alert(1)</script>&amp;",
    b"=cmd|' /C calc'!A0",
    "unicode \u00e9\u4e2d\U0001f600".encode(),
]


def record_hostile(so, path):
    start(so, path)
    for name in HOSTILE:
        for _ in range(3):
            so.mlprof_zone_begin(name)
            so.mlprof_zone_meta(b"k\"<>", name)
            so.mlprof_units_add(name, 2)
            so.mlprof_zone_end()
        so.mlprof_gauge_set(name, 1.5)
    so.mlprof_thread_name(b'thr"\xff<b>')
    assert so.mlprof_shutdown() == 0


def test_hostile_names_give_valid_json_csv_and_trace(lib, tmp_path):
    path = tmp_path / "hostile.mlprof"
    record_hostile(lib, path)
    rep = report_json(path)
    names = {z["name"] for z in rep["zones"]}
    assert len(names) == len(HOSTILE)
    for raw in HOSTILE:
        assert raw.decode("utf-8", "replace") in names
        assert zone(rep, raw.decode("utf-8", "replace"))["count"] == 3
    assert "<script>" not in mlprof("report", path, "--format", "json").stdout

    rows = list(csv.reader(io.StringIO(
        mlprof("report", path, "--format", "csv", "--top", "0").stdout)))
    assert len(rows) == 1 + len(HOSTILE)
    width = len(rows[0])
    assert all(len(r) == width for r in rows)

    trace = tmp_path / "t.json"
    mlprof("trace", path, "-o", trace)
    events = json.loads(trace.read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert len(spans) == 3 * len(HOSTILE)
    assert {e["name"] for e in spans} == {n.decode("utf-8", "replace") for n in HOSTILE}
    mlprof("report", path)  # the text table does not choke either


def test_trace_event_format(lib, tmp_path):
    path = tmp_path / "p.mlprof"
    start(lib, path)
    lib.mlprof_thread_name(b"main-thread")
    for i in range(5):
        lib.mlprof_zone_begin(b"outer")
        lib.mlprof_zone_begin(b"inner")
        lib.mlprof_zone_end()
        lib.mlprof_zone_end()
        lib.mlprof_gauge_set(b"loss", 1.0 / (i + 1))
        lib.mlprof_step()
    assert lib.mlprof_shutdown() == 0
    trace = tmp_path / "t.json"
    mlprof("trace", path, "-o", trace)
    doc = json.loads(trace.read_text())
    ev = doc["traceEvents"]
    meta = [e for e in ev if e["ph"] == "M"]
    assert any(e["name"] == "process_name" for e in meta)
    assert any(e["name"] == "thread_name" and e["args"]["name"] == "main-thread"
               for e in meta)
    spans = [e for e in ev if e["ph"] == "X"]
    assert len(spans) == 10
    for e in spans:
        assert {"name", "ts", "dur", "pid", "tid"} <= e.keys()
        assert e["dur"] >= 0
    inner = sorted((e for e in spans if e["name"] == "inner"), key=lambda e: e["ts"])
    outer = sorted((e for e in spans if e["name"] == "outer"), key=lambda e: e["ts"])
    for i, o in zip(inner, outer):  # nesting survives the export
        assert o["ts"] <= i["ts"] and i["ts"] + i["dur"] <= o["ts"] + o["dur"] + 0.002
    counters = [e for e in ev if e["ph"] == "C"]
    assert [c["args"]["value"] for c in counters if c["name"] == "loss"] == \
        [1.0 / (i + 1) for i in range(5)]
    assert len([e for e in ev if e["ph"] == "i"]) == 5
    r = mlprof("trace", path, "-o", "-")
    assert json.loads(r.stdout)["traceEvents"]


def make_profile(lib, path, zones=100):
    start(lib, path)
    for i in range(zones):
        lib.mlprof_zone_begin(b"work")
        lib.mlprof_zone_end()
        if i % 10 == 9:
            assert lib.mlprof_flush() == 0  # one EVENTS chunk per 10 zones
    assert lib.mlprof_shutdown() == 0


def test_truncated_profile_keeps_whole_chunks(lib, tmp_path):
    path = tmp_path / "p.mlprof"
    make_profile(lib, path)
    data = path.read_bytes()
    cut = tmp_path / "cut.mlprof"
    cut.write_bytes(data[: len(data) * 2 // 3])
    rep = report_json(cut)
    kept = zone(rep, "work")["count"]
    assert 30 <= kept < 100 and kept % 10 == 0
    proc = rep["processes"][0]
    assert proc["read"]["truncated_bytes"] > 0 or proc["clean_end"] is False
    # The copy has this test process's pid, which is alive: the warning says
    # "still running" rather than "killed"; either way it says the file has
    # no closing chunk, or that its tail was cut.
    text = mlprof("report", cut).stdout
    assert "closing chunk" in text or "truncated" in text


def test_bit_flip_skips_one_chunk(lib, tmp_path):
    path = tmp_path / "p.mlprof"
    make_profile(lib, path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    bad = tmp_path / "flip.mlprof"
    bad.write_bytes(bytes(data))
    r = mlprof("report", bad, "--format", "json", "--top", "0")
    rep = json.loads(r.stdout)
    assert 80 <= zone(rep, "work")["count"] <= 90  # one chunk of 10 lost (or less)
    assert rep["processes"][0]["read"]["damaged_chunks"] >= 1
    assert "damaged" in mlprof("report", bad).stdout + mlprof("report", bad).stderr


def test_not_a_profile_is_a_clear_error(tmp_path):
    junk = tmp_path / "junk.mlprof"
    junk.write_bytes(os.urandom(4096))
    r = mlprof("report", junk, check=False)
    assert r.returncode == 2
    assert "not an mlprof profile" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = mlprof("report", tmp_path / "missing.mlprof", check=False)
    assert r.returncode == 2 and "no such file" in r.stderr.lower()
    r = mlprof("trace", junk, "-o", tmp_path / "t.json", check=False)
    assert r.returncode == 2
    assert not (tmp_path / "t.json").exists()  # no partial output


def test_report_options(lib, tmp_path):
    path = tmp_path / "p.mlprof"
    start(lib, path)
    for name, n in ((b"many", 50), (b"few", 2)):
        for _ in range(n):
            lib.mlprof_zone_begin(name)
            lib.mlprof_zone_end()
    assert lib.mlprof_shutdown() == 0
    rep = json.loads(mlprof("report", path, "--format", "json", "--sort", "count",
                            "--top", "1").stdout)
    assert [z["name"] for z in rep["zones"]] == ["many"]
    for bad in (["--format", "xml"], ["--sort", "bogus"], ["--top", "-3"]):
        r = mlprof("report", path, *bad, check=False)
        assert r.returncode == 2 and r.stderr.startswith("mlprof report:")


def test_install_and_build_with_pkg_config(tmp_path):
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", BUILD, "--prefix", str(prefix)],
                   check=True, capture_output=True)
    src = tmp_path / "prog.c"
    src.write_text('#include <mlprof.h>\nint main(void){MLPROF_ZONE("hi");return 0;}\n')
    pcdirs = [str(p.parent) for p in prefix.rglob("mlprof.pc")]
    env = dict(os.environ, PKG_CONFIG_PATH=":".join(pcdirs))
    # the .pc file was generated for the configured prefix: point it here
    flags = subprocess.run(["pkg-config", "--define-prefix", "--cflags", "--libs",
                            "mlprof"], env=env, check=True, capture_output=True,
                           text=True).stdout.split()
    exe = tmp_path / "prog"
    subprocess.run(["cc", str(src), "-o", str(exe), *flags], check=True)
    out = tmp_path / "out"
    r = subprocess.run([str(prefix / "bin" / "mlprof"), "run", "-q", "-o", str(out),
                        "--", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert zone(report_json(out), "hi")["count"] == 1
    check_abi(prefix, flags, tmp_path)


ABI = os.path.join(os.path.dirname(__file__), "..", "abi")


def check_abi(prefix, flags, tmp_path):
    """The installed library's ABI is the one in tests/abi/abi.txt: the
    layout of every struct callers allocate, the error codes and categories,
    and the exported symbols. A change to it is a decision (and, past 1.0, a
    new major version): regenerate the file with MLPROF_UPDATE_GOLDEN=1 and
    review its diff."""
    exe = tmp_path / "layout"
    subprocess.run(["cc", os.path.join(ABI, "layout.c"), "-o", str(exe),
                    *flags], check=True)
    # A sanitizer build's library cannot run in a plain program built
    # against the header (its malloc runs before the sanitizer's runtime is
    # set up): the layouts are run against the uninstrumented build's
    # library the sanitizer run names, the symbols still read from this one.
    libdirs = ([os.path.dirname(LIBRARY)] if os.environ.get("MLPROF_LIB") else
               [str(p.parent) for p in prefix.rglob("libmlprof.so")])
    env = dict(os.environ, LD_LIBRARY_PATH=":".join(libdirs))
    got = subprocess.run([str(exe)], env=env, check=True, capture_output=True,
                         text=True).stdout
    so = next(prefix.rglob("libmlprof.so"))
    syms = subprocess.run(["nm", "-D", "--defined-only", str(so)], check=True,
                          capture_output=True, text=True).stdout.split("\n")
    got += "".join(sorted("symbol %s\n" % line.split()[-1] for line in syms
                          if line.strip()))
    path = os.path.join(ABI, "abi.txt")
    if os.environ.get("MLPROF_UPDATE_GOLDEN"):
        with open(path, "w") as f:
            f.write(got)
    with open(path) as f:
        assert got == f.read(), "the ABI changed: see check_abi's docstring"
