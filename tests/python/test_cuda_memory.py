"""CUDA memory snapshots (docs/memory.md, "CUDA memory snapshots"): files in
the format torch.cuda.memory._dump_snapshot writes (no GPU here: the
fixtures are built from torch's documented format, _snapshot's docstring and
_memory_viz.py), read by mlprof.cuda_memory and `python -m mlprof
memory-snapshot`; hostile and damaged pickles refused with a clear error and
exit status 2, nothing in them run."""
import copy
import json
import os
import pickle
import subprocess
import sys
import types

import pytest

from mlprof import cuda_memory as cm

MIB = 1 << 20


def frame(filename, line, name):
    return {"filename": filename, "line": line, "name": name}


# Frames as torch records them, innermost first: the allocator's C++, then
# torch's Python, then the program's own lines.
CXX = [frame("??", 0, "c10::cuda::CUDACachingAllocator::malloc"),
       frame("/pytorch/torch/csrc/Register.cpp", 10, "wrapper_empty"),
       frame("ceval.c", 1, "_PyEval_EvalFrameDefault")]
TORCH = frame("/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py",
              125, "forward")


def site_frames(line, fn):
    return CXX + [TORCH, frame("/home/u/train.py", line, fn),
                  frame("/home/u/train.py", 90, "main")]


def entry(action, addr, size, t, frames=()):
    return {"action": action, "addr": addr, "size": size, "stream": 0,
            "time_us": t, "frames": list(frames)}


SEG = 0x7f0000000000


def snapshot():
    """Device 0: a 20 MiB segment. Before the history, 2 MiB live (one block
    freed during it, at 0x...000). The history: activations of 4 MiB at
    train.py:50 forward (three of them), a 1 MiB workspace at train.py:60,
    freed; then the activations are freed; a 3 MiB block stays live.
    Live: pre 2 MiB; +4 +4 +1 -1 +4 = peak 2 + 12 = 14 MiB at t=5,
    then -2 (pre freed) -4 -4 -4 +3."""
    act, ws, keep = site_frames(50, "forward"), site_frames(60, "step"), \
        site_frames(70, "cache")
    trace = [
        entry("segment_alloc", SEG, 20 * MIB, 0),
        entry("alloc", SEG + 2 * MIB, 4 * MIB, 1, act),
        entry("alloc", SEG + 6 * MIB, 4 * MIB, 2, act),
        entry("alloc", SEG + 10 * MIB, MIB, 3, ws),
        entry("free_requested", SEG + 10 * MIB, MIB, 4, ws),
        entry("free_completed", SEG + 10 * MIB, MIB, 4, ws),
        entry("alloc", SEG + 10 * MIB, 4 * MIB, 5, act),
        entry("free_completed", SEG, 2 * MIB, 6),   # allocated before
        entry("free_completed", SEG + 2 * MIB, 4 * MIB, 7, act),
        entry("free_completed", SEG + 6 * MIB, 4 * MIB, 8, act),
        entry("free_completed", SEG + 10 * MIB, 4 * MIB, 9, act),
        entry("alloc", SEG + 14 * MIB, 3 * MIB, 10, keep),
        {"action": "oom", "size": 64 * MIB, "device_free": 0, "stream": 0,
         "time_us": 11, "frames": []},
    ]
    blocks = [
        {"address": SEG, "size": 14 * MIB, "requested_size": 0,
         "state": "inactive", "frames": []},
        {"address": SEG + 14 * MIB, "size": 3 * MIB,
         "requested_size": 3 * MIB, "state": "active_allocated",
         "frames": keep},
        {"address": SEG + 17 * MIB, "size": 3 * MIB, "requested_size": 0,
         "state": "inactive", "frames": []},
    ]
    return copy.deepcopy({"segments": [{"device": 0, "address": SEG,
                          "total_size": 20 * MIB, "stream": 0,
                          "segment_type": "large",
                          "segment_pool_id": (0, 0),
                          "allocated_size": 3 * MIB, "active_size": 3 * MIB,
                          "blocks": blocks}],
            "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": None,
                                   "expandable_segments": False,
                                   "garbage_collection_threshold": 0.0}})


def write(tmp_path, obj, name="snap.pickle", protocol=4):
    p = tmp_path / name
    with open(p, "wb") as f:
        pickle.dump(obj, f, protocol=protocol)
    return p


def cli(*args):
    return subprocess.run([sys.executable, "-m", "mlprof", "memory-snapshot",
                           *map(str, args)], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_peak_sites_and_timeline_of_a_known_history(tmp_path, protocol):
    d, = cm.analyze(cm.load(write(tmp_path, snapshot(),
                                  protocol=protocol)))["devices"]
    assert d["reserved_bytes"] == 20 * MIB and d["segments"] == 1
    assert d["allocated_bytes"] == 3 * MIB and d["active_blocks"] == 1
    assert d["peak_bytes"] == 14 * MIB
    assert d["peak_time_us"] == 5 and d["peak_entry"] == 6
    assert d["before_history_bytes"] == 2 * MIB
    assert d["ooms"] == 1
    act = "/home/u/train.py:50 forward < /home/u/train.py:90 main"
    assert d["sites_at_peak"] == [
        {"site": act, "bytes": 12 * MIB},
        {"site": "(allocated before the history began)", "bytes": 2 * MIB}]
    alloc = {r["site"]: (r["bytes"], r["count"])
             for r in d["sites_allocated"]}
    assert alloc == {act: (12 * MIB, 3),
                     "/home/u/train.py:70 cache < /home/u/train.py:90 main":
                     (3 * MIB, 1),
                     "/home/u/train.py:60 step < /home/u/train.py:90 main":
                     (MIB, 1)}
    assert d["sites_now"] == [
        {"site": "/home/u/train.py:70 cache < /home/u/train.py:90 main",
         "bytes": 3 * MIB}]
    # Live bytes at each alloc / free_completed (time from the first).
    assert d["timeline"] == [[1, 6 * MIB], [2, 10 * MIB], [3, 11 * MIB],
                             [4, 10 * MIB], [5, 14 * MIB], [6, 12 * MIB],
                             [7, 8 * MIB], [8, 4 * MIB], [9, 0],
                             [10, 3 * MIB]]
    # Downsampled: the largest of each interval, so the peak stays.
    small = cm.analyze(cm.load(write(tmp_path, snapshot())),
                       points=3)["devices"][0]["timeline"]
    assert len(small) == 3 and [5, 14 * MIB] in small


def test_only_torch_frames_and_no_frames(tmp_path):
    s = snapshot()
    for e in s["device_traces"][0]:
        if e.get("frames"):
            e["frames"] = CXX + [TORCH]
    s["device_traces"][0][1]["frames"] = []
    d, = cm.analyze(s)["devices"]
    sites = {r["site"] for r in d["sites_allocated"]}
    # No frame of the program's: torch's own Python line; none at all: said.
    assert TORCH["filename"] + ":125 forward < ??:0 " \
        "c10::cuda::CUDACachingAllocator::malloc" not in sites
    assert any(x.startswith(TORCH["filename"] + ":125 forward")
               or x.startswith("??:0 c10") for x in sites), sites
    assert "(no frames: recorded without context)" in sites


def test_snapshot_without_history_and_several_devices(tmp_path):
    s = snapshot()
    s["device_traces"] = [[], []]
    seg1 = dict(s["segments"][0], device=1, total_size=8 * MIB)
    s["segments"].append(seg1)
    devs = cm.analyze(s)["devices"]
    assert [d["device"] for d in devs] == [0, 1]
    assert devs[1]["reserved_bytes"] == 8 * MIB
    assert devs[0]["peak_bytes"] == 3 * MIB  # live now: all that is known
    assert devs[0]["timeline"] == []
    assert "no history" in cm.format_text(cm.analyze(s))


def test_cli_text_and_json(tmp_path):
    p = write(tmp_path, snapshot())
    r = cli(p)
    assert r.returncode == 0, r.stderr
    assert "device 0: 21.0 MB reserved in 1 segments" in r.stdout
    assert "peak 14.7 MB live at 5 µs" in r.stdout
    assert "/home/u/train.py:50 forward < /home/u/train.py:90 main" \
        in r.stdout
    assert "1 out-of-memory errors" in r.stdout
    r = cli(p, "--json", "--top", "1")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["file"] == str(p) and j["devices"][0]["peak_bytes"] == 14 * MIB
    assert len(j["devices"][0]["sites_allocated"]) == 1


class Evil:
    """Unpickling this runs os.system: the reader must refuse it."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, ("touch %s" % self.marker,))


def crafted(tmp_path):
    """(name, bytes) of files that are not snapshots."""
    good = pickle.dumps(snapshot(), protocol=4)
    marker = tmp_path / "ran"
    s = snapshot()
    s["device_traces"][0][1]["frames"][0] = Evil(marker)
    bad_types = snapshot()
    bad_types["device_traces"][0][2]["size"] = "4 MiB"
    neg = snapshot()
    neg["segments"][0]["total_size"] = -1
    no_name = snapshot()
    del no_name["device_traces"][0][1]["frames"][3]["name"]
    huge_int = snapshot()
    huge_int["device_traces"][0][1]["size"] = 1 << 10000
    return marker, [
        ("empty", b""),
        ("truncated", good[:len(good) // 2]),
        ("one byte short", good[:-1]),
        ("trailing data", good + b"junk"),
        ("not a pickle", b"GIF89a\x00\x00\x00\x00"),
        ("code execution", pickle.dumps(s, protocol=4)),
        ("global by protocol 0", b"cos\nsystem\n(S'true'\ntR."),
        ("persistent id", b"Pfoo\n."),
        ("a list", pickle.dumps([1, 2, 3])),
        ("no fields", pickle.dumps({"a": 1})),
        ("size not a number", pickle.dumps(bad_types)),
        ("negative size", pickle.dumps(neg)),
        ("frame without name", pickle.dumps(no_name)),
        ("huge integer", pickle.dumps(huge_int)),
        # A string claiming 4 GiB that the file does not hold.
        ("huge length", b"\x80\x04\x8d" + (4 << 30).to_bytes(8, "little")
         + b"abc."),
        ("deep nesting", b"\x80\x02" + b"]" * 200000 + b"a" * 199999 + b"."),
    ]


def test_crafted_files_give_a_clear_error_and_run_nothing(tmp_path):
    marker, files = crafted(tmp_path)
    for name, data in files:
        p = tmp_path / ("f-" + name.replace(" ", "-"))
        p.write_bytes(data)
        with pytest.raises(cm.SnapshotError):
            cm.analyze(cm.load(p))
        r = cli(p)
        assert r.returncode == 2, (name, r.stdout, r.stderr)
        assert r.stderr.startswith("mlprof memory-snapshot: "), (name,
                                                               r.stderr)
        assert len(r.stderr.splitlines()) == 1, (name, r.stderr)
        assert "Traceback" not in r.stderr, name
    assert not marker.exists()


def test_refusals_name_what_is_wrong(tmp_path):
    _, files = crafted(tmp_path)
    want = {"code execution": "posix.system",
            "size not a number": "device_traces[0][2].size is not an "
                                 "integer",
            "huge integer": "device_traces[0][1].size",
            "negative size": "segments[0].total_size",
            "frame without name": "device_traces[0][1].frames[3].name",
            "trailing data": "after the end of the pickle",
            "truncated": "not a readable pickle"}
    for name, data in files:
        if name not in want:
            continue
        p = tmp_path / "x"
        p.write_bytes(data)
        with pytest.raises(cm.SnapshotError) as e:
            cm.analyze(cm.load(p))
        assert want[name] in str(e.value), (name, str(e.value))


def test_size_cap_and_usage(tmp_path):
    p = write(tmp_path, snapshot())
    r = cli(p, "--max-mb", "0")
    assert r.returncode == 2
    with pytest.raises(cm.SnapshotError, match="larger than"):
        cm.load(p, max_bytes=100)
    for args in ([], [p, p], [p, "--top"], [p, "--top", "x"], [p, "--bad"]):
        r = cli(*args)
        assert r.returncode == 2 and "mlprof memory-snapshot:" in r.stderr, \
            (args, r.stderr)
    r = cli(tmp_path / "missing.pickle")
    assert r.returncode == 2 and "No such file" in r.stderr


def test_random_damage_never_escapes_as_another_error(tmp_path):
    import random
    rnd = random.Random(7)
    good = pickle.dumps(snapshot(), protocol=4)
    p = tmp_path / "fuzz"
    for _ in range(300):
        b = bytearray(good)
        for _ in range(rnd.randint(1, 8)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        p.write_bytes(bytes(b[:rnd.randint(1, len(b))]))
        try:
            cm.analyze(cm.load(p))
        except cm.SnapshotError:
            pass


class FakeMemory:
    """A stand-in for torch.cuda.memory: its history is `snap`."""

    def __init__(self, snap=None):
        self.calls = []
        self.snap = snap if snap is not None else snapshot()

    def _record_memory_history(self, enabled, **kw):
        self.calls.append(("record", enabled, kw))

    def _snapshot(self):
        self.calls.append(("snapshot",))
        return self.snap


def fake_torch(available):
    mem = FakeMemory()
    cuda = types.SimpleNamespace(is_available=lambda: available, memory=mem)
    return types.SimpleNamespace(cuda=cuda), mem


def test_history_start_on_torch_api(monkeypatch, tmp_path):
    registered = []
    monkeypatch.setattr("atexit.register", registered.append)
    torch, mem = fake_torch(True)
    env = {cm.HISTORY_ENV: "1"}
    prof = str(tmp_path / "123.mlprof")
    path, why = cm.history_start(torch, prof, env)
    assert (path, why) == (prof + ".cuda-memory.pickle", "recording")
    assert mem.calls == [("record", "all",
                          {"max_entries": cm.HISTORY_ENTRIES})]
    registered[0]()  # no session here: the profile takes none, said nowhere
    assert mem.calls[1:] == [("snapshot",), ("record", None, {})]
    # The file torch's _dump_snapshot would have written.
    assert cm.analyze(cm.load(path))["devices"][0]["peak_bytes"] == 14 * MIB
    torch, mem = fake_torch(True)
    assert cm.history_start(torch, "/p", {cm.HISTORY_ENV: "500"})[0]
    assert mem.calls[0][2] == {"max_entries": 500}
    assert cm.history_start(torch, "/p", {})[1] == "off"
    assert "entries" in cm.history_start(torch, "/p",
                                         {cm.HISTORY_ENV: "x"})[1]
    torch, mem = fake_torch(False)
    assert cm.history_start(torch, "/p", env) == (None, "no CUDA device")
    assert mem.calls == []


def test_history_never_writes_through_a_planted_link(monkeypatch, tmp_path):
    """The profile's folder may be shared: a link put at the snapshot's name
    by someone else is not followed, its target not overwritten."""
    registered = []
    monkeypatch.setattr("atexit.register", registered.append)
    torch, mem = fake_torch(True)
    prof = str(tmp_path / "123.mlprof")
    target = tmp_path / "victim"
    target.write_text("keep me")
    os.symlink(target, prof + ".cuda-memory.pickle")
    path, why = cm.history_start(torch, prof, {cm.HISTORY_ENV: "1"})
    registered[0]()
    assert target.read_text() == "keep me"
    assert ("snapshot",) in mem.calls  # the history is still taken


def test_console_script_runs_it_in_python(tmp_path, monkeypatch, capsys):
    from mlprof import __main__ as entry
    p = write(tmp_path, snapshot())
    monkeypatch.setattr(sys, "argv", ["mlprof", "memory-snapshot", str(p),
                                      "--json"])
    assert entry.command() == 0
    assert json.loads(capsys.readouterr().out)["devices"][0][
        "peak_bytes"] == 14 * MIB


def test_one_huge_string_shared_by_every_frame(tmp_path):
    """The pickle's memo lets one string be every frame's file name: sites
    are made of cut names, so the work stays proportional to the file."""
    big = "/x" * (8 << 20)
    s = snapshot()
    for e in s["device_traces"][0]:
        for f in e.get("frames", []):
            f["filename"] = big
    p = write(tmp_path, s)
    assert p.stat().st_size < 20 << 20
    d, = cm.analyze(cm.load(p))["devices"]
    assert all(len(r["site"]) < 4 * cm.MAX_NAME + 100
               for r in d["sites_allocated"])


# ---- brought into the profile ---------------------------------------------

def test_profile_records_replay_as_the_reader_does():
    """The records handed to the profile: what was allocated before the
    history first (at its start), the history's allocs and frees in order,
    times moved from Unix µs to CLOCK_MONOTONIC ns."""
    s = snapshot()
    for e in s["device_traces"][0]:
        e["time_us"] = 1_700_000_000_000_000 + 1000 * e["time_us"]
    unix0 = 1_700_000_000_000_000 * 1000
    recs = cm.profile_records(s, now_mono_ns=5_000_000_000,
                              now_unix_ns=unix0 + 20_000_000)
    stacks, allocs = recs[0]
    mono0 = 5_000_000_000 - 20_000_000  # the history's time 0
    assert allocs[0] == (mono0 + 1_000_000, SEG, 2 * MIB, -1)
    assert [(t - mono0, a - SEG, n) for t, a, n, k in allocs[1:]] == [
        (1_000_000, 2 * MIB, 4 * MIB), (2_000_000, 6 * MIB, 4 * MIB),
        (3_000_000, 10 * MIB, MIB), (4_000_000, 10 * MIB, 0),
        (5_000_000, 10 * MIB, 4 * MIB), (6_000_000, 0, 0),
        (7_000_000, 2 * MIB, 0), (8_000_000, 6 * MIB, 0),
        (9_000_000, 10 * MIB, 0), (10_000_000, 14 * MIB, 3 * MIB)]
    # Python frames only, innermost first; one stack per distinct site.
    assert stacks[allocs[1][3]] == (
        (TORCH["filename"], 125, "forward"),
        ("/home/u/train.py", 50, "forward"), ("/home/u/train.py", 90, "main"))
    assert len(stacks) == 3
    # Live bytes replayed from the records: the reader's peak.
    live, cur, peak = {}, 0, 0
    for t, a, n, k in allocs:
        if n:
            live[a] = n
            cur += n
        else:
            cur -= live.pop(a, 0)
        peak = max(peak, cur)
    assert peak == 14 * MIB and cur == 3 * MIB
    # Without Unix times: every entry at the moment of recording, in order.
    s = snapshot()
    _, allocs = cm.profile_records(s, 77, unix0)[0]
    assert {t for t, *_ in allocs} == {77}
    with pytest.raises(cm.SnapshotError):
        cm.profile_records({"segments": 3}, 0, 0)


PROGRAM = """
import pickle, sys, time, types
import mlprof
from mlprof import auto

with open(sys.argv[1], "rb") as f:
    snap = pickle.load(f)
base = time.time_ns() // 1000
for e in snap["device_traces"][0]:
    e["time_us"] = base + 1000 * e["time_us"]


class Memory:  # torch.cuda.memory as tests/python/test_cuda_memory.py fakes it
    def _record_memory_history(self, enabled, **kw):
        pass

    def _snapshot(self):
        return snap


torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
    is_available=lambda: True, memory=Memory()))
auto._cuda_history(torch)
with mlprof.zone("host"):
    keep = bytearray(8 << 20)
time.sleep(0.02)
"""


def test_history_in_the_profile_beside_cpu_memory(tmp_path, build_dir):
    """Under mlprof run with MLPROF_CUDA_MEMORY_HISTORY=1, the snapshot taken
    at exit goes into the process's profile: the report's Memory section
    has the process's CUDA memory (its peak, its sites by Python line, zone
    cuda:0) beside its own, JSON a process entry with cuda_device, the
    dashboard's memory data too. (torch.cuda.memory is a stand-in: no GPU
    here.)"""
    from conftest import child_env
    snap = write(tmp_path, snapshot())
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    run_dir = tmp_path / "run"
    mlprof_bin = os.path.join(build_dir, "mlprof")
    r = subprocess.run([mlprof_bin, "run", "-q", "--no-torch", "-o",
                        str(run_dir), "--", sys.executable, str(script),
                        str(snap)],
                       env=child_env(**{cm.HISTORY_ENV: "1"}),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    text = subprocess.run([mlprof_bin, "report", str(run_dir)],
                          capture_output=True, text=True).stdout
    assert " cuda:0: peak 14.7 MB live at " in text, text
    assert "(CUDA, torch's allocator history)" in text
    # The history's track holds no span: no row of the thread table, which
    # still has the process's own thread.
    threads = text.split("\nThreads (")[1].split("\n\n")[0]
    assert "CUDA memory" not in threads and "track" not in threads, threads
    assert len(threads.splitlines()) >= 3, threads
    act = "/home/u/train.py:50 forward < /home/u/train.py:90 main"
    rows = [line.split() for line in text.splitlines() if act in line]
    # pid, zone, at peak, allocated, count, live at end: the reader's.
    assert any(r[1:10] == ["cuda:0", "12.6", "MB", "12.6", "MB", "3", "0",
                           "B", act.split()[0]] for r in rows), rows
    j = json.loads(subprocess.run([mlprof_bin, "report", "-f", "json",
                                   str(run_dir)],
                                  capture_output=True, text=True).stdout)
    procs = j["memory"]["processes"]
    cuda = [p for p in procs if p.get("cuda_device") == 0]
    host = [p for p in procs if "cuda_device" not in p]
    assert len(cuda) == 1 and len(host) == 1, procs
    assert cuda[0]["pid"] == host[0]["pid"]
    assert cuda[0]["peak_bytes"] == 14 * MIB
    assert cuda[0]["allocated_bytes"] == 18 * MIB
    assert cuda[0]["live_end_bytes"] == 3 * MIB
    assert cuda[0]["exact"] is True
    track = [t for t in j["threads"] if t["name"] == "CUDA memory cuda:0"]
    assert len(track) == 1 and track[0]["track"] and track[0]["spans"] == 0
    sites = {(s["zone"], s["python"]): s for s in j["memory"]["sites"]}
    fwd = sites[("cuda:0", act)]
    assert (fwd["allocated_bytes"], fwd["count"], fwd["at_peak_bytes"]) == \
        (12 * MIB, 3, 12 * MIB)
    assert sites[("cuda:0", "/home/u/train.py:70 cache < "
                  "/home/u/train.py:90 main")]["live_end_bytes"] == 3 * MIB
    # The CPU allocations stay the process's own, apart from the device's.
    big = [s for s in j["memory"]["sites"] if s["zone"] == "host"]
    assert big and big[0]["allocated_bytes"] >= 8 << 20
    assert host[0]["peak_bytes"] < 14 * MIB + (8 << 20)
    zones = {z["zone"]: z for z in j["memory"]["zones"]}
    assert zones["cuda:0"]["peak_bytes"] == 14 * MIB
    html = tmp_path / "d.html"
    r = subprocess.run([mlprof_bin, "html", str(run_dir), "-o", str(html)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert '"cuda_device":0' in html.read_text()
    # The Chrome trace's live-bytes counter is the process's own memory.
    trace = tmp_path / "t.json"
    r = subprocess.run([mlprof_bin, "trace", str(run_dir), "-o", str(trace)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    ev = json.loads(trace.read_text())
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    live = [e["args"]["bytes"] for e in ev
            if e.get("name") == "live bytes (allocations)"]
    assert max(live) == host[0]["peak_bytes"]
