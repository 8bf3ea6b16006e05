"""Damaged input and the CLI's own output files: empty and foreign files in a
run directory, one flipped bit in each chunk of a real profile, and a symlink
planted where the CLI writes."""
import json
import os
import shutil
import struct

import pytest

from conftest import mlprof, program

CHUNK_HEADER = 16
EVENTS = 4


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A real run: the inference loop's profile (HEADER, NAMES, THREAD,
    EVENTS, META, END) and the runner's sampling profile (SOURCES,
    SAMPLES)."""
    d = tmp_path_factory.mktemp("damage") / "run"
    mlprof("run", "-q", "-o", d, "--sample-ms", "20", "--",
           program("inference_loop"), "200")
    return d


def chunks(data):
    """(offset, type, payload length) of every chunk of a profile."""
    out, pos = [], 16
    while pos + CHUNK_HEADER <= len(data):
        ctype, _, length, _ = struct.unpack_from("<HHII", data, pos + 4)
        out.append((pos, ctype, length))
        pos += CHUNK_HEADER + length
    assert pos == len(data)
    return out


def uv(d, i):
    v = shift = 0
    while True:
        b = d[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def spans_in(payload):
    """Span records in an EVENTS payload (docs/format.md)."""
    i = 0
    for _ in range(3):  # tid, dropped, base
        _, i = uv(payload, i)
    n = 0
    # Varints after the tag, then trailing f64 bytes, per record tag.
    layout = {1: (4, 0), 2: (2, 8), 3: (3, 0), 4: (2, 0), 5: (2, 0),
              6: (1, 0), 7: (3, 0)}
    while i < len(payload):
        tag = payload[i]
        i += 1
        varints, raw = layout[tag]
        for _ in range(varints):
            _, i = uv(payload, i)
        i += raw
        n += tag == 1
    return n


def report(path):
    r = mlprof("report", path, "--format", "json", "--top", "0")
    return json.loads(r.stdout), r.stderr


def test_empty_and_foreign_files_are_skipped(run_dir, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(run_dir, d)
    for i in range(10000):
        (d / f"child-{i:05d}.mlprof").touch()  # a full disk's forked children
    (d / "zz-notes.mlprof").write_text("not a profile\n")
    want = ("skipped 10001 files: 10000 empty, 1 not an mlprof profile; "
            f"first: {d}/child-00000.mlprof")
    rep, err = report(d)
    assert err.splitlines() == [f"mlprof report: warning: {want}"]
    assert len(rep["processes"]) == 2 and rep["spans"] > 0
    for cmd, out in (("trace", "t.json"), ("html", "r.html")):
        r = mlprof(cmd, d, "-o", tmp_path / out)
        assert f"mlprof {cmd}: warning: {want}" in r.stderr.splitlines()
        assert (tmp_path / out).stat().st_size > 0


def test_nothing_readable_is_an_error(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "a.mlprof").touch()
    (d / "b.mlprof").write_bytes(b"\x7fELF" + bytes(100))
    for cmd in ("report", "trace", "html"):
        r = mlprof(cmd, d, "-o", tmp_path / "out", check=False) \
            if cmd != "report" else mlprof(cmd, d, check=False)
        assert r.returncode == 2
        assert r.stderr == (
            f"mlprof {cmd}: no readable mlprof profile: skipped 2 files: "
            f"1 empty, 1 not an mlprof profile; first: {d}/a.mlprof\n")
        assert not (tmp_path / "out").exists()
    # A file named on the command line is taken as meant: an error.
    r = mlprof("report", d / "a.mlprof", check=False)
    assert r.returncode == 2
    assert r.stderr == (f"mlprof report: {d}/a.mlprof: not an mlprof profile "
                        "(empty file)\n")


def test_bit_flip_in_every_chunk(run_dir, tmp_path):
    clean, _ = report(run_dir)
    total = sum(z["count"] for z in clean["zones"])
    kinds = set()
    for name in sorted(os.listdir(run_dir)):
        data = (run_dir / name).read_bytes()
        for off, ctype, length in chunks(data):
            if length == 0:
                continue
            kinds.add(ctype)
            payload = data[off + CHUNK_HEADER: off + CHUNK_HEADER + length]
            lost = spans_in(payload) if ctype == EVENTS else 0
            d = tmp_path / f"{name}-{off}"
            shutil.copytree(run_dir, d)
            bad = bytearray(data)
            bad[off + CHUNK_HEADER + length // 2] ^= 0x04
            (d / name).write_bytes(bytes(bad))
            rep, _ = report(d)
            where = f"chunk type {ctype} at byte {off} of {name}"
            damaged = {os.path.basename(p["path"]): p["read"]["damaged_chunks"]
                       for p in rep["processes"]}
            assert damaged == {n: int(n == name) for n in damaged}, where
            assert len(damaged) == 2, where
            kept = sum(z["count"] for z in rep["zones"])
            assert kept == total - lost, where
    assert kinds == set(range(1, 9))  # every chunk kind was hit


@pytest.mark.parametrize("cmd", ["trace", "html"])
def test_output_symlink_is_replaced_not_followed(run_dir, tmp_path, cmd):
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    os.chmod(victim, 0o644)
    out = tmp_path / "out"
    out.symlink_to(victim)
    mlprof(cmd, run_dir, "-o", out)
    assert victim.read_text() == "keep me\n"
    assert not out.is_symlink() and out.stat().st_size > 0
    assert sorted(os.listdir(tmp_path)) == ["out", "victim"]  # no temporary
