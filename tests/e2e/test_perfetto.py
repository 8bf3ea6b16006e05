"""mlprof trace --format perfetto: Perfetto's protobuf trace, decoded by a
real protobuf decoder (Debian's protoc, against tests/e2e/perfetto_trace.proto
written from Perfetto's documented field numbers) and checked against the
Chrome trace and the report of the same run."""
import collections
import json
import os
import re
import subprocess

import pytest

import craft
from conftest import mlprof, program, report_json

HERE = os.path.dirname(os.path.abspath(__file__))


def decode(path):
    """The trace at path as protoc's text format, parsed into nested dicts:
    each field a list of values (messages are dicts, strings bytes)."""
    with open(path, "rb") as f:
        r = subprocess.run(["protoc", f"--proto_path={HERE}",
                            "--decode=perfetto.protos.Trace",
                            "perfetto_trace.proto"], stdin=f,
                           capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert b"Failed to parse" not in r.stderr, r.stderr
    root = {}
    stack = [root]
    for line in r.stdout.split(b"\n"):
        line = line.strip()
        if not line:
            continue
        if line == b"}":
            stack.pop()
        elif line.endswith(b"{"):
            msg = {}
            stack[-1].setdefault(line[:-1].strip().decode(), []).append(msg)
            stack.append(msg)
        else:
            key, _, value = line.partition(b": ")
            stack[-1].setdefault(key.decode(), []).append(scalar(value))
    assert len(stack) == 1
    return root.get("packet", [])


ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b'"': b'"', b"'": b"'",
           b"\\": b"\\"}


def scalar(v):
    if v.startswith(b'"'):
        out = bytearray()
        body = v[1:-1]
        i = 0
        while i < len(body):
            if body[i:i + 1] != b"\\":
                out += body[i:i + 1]
                i += 1
            elif re.match(rb"[0-7]{3}", body[i + 1:i + 4]):
                out.append(int(body[i + 1:i + 4], 8))
                i += 4
            elif body[i + 1:i + 2] == b"x":
                m = re.match(rb"[0-9a-fA-F]{1,2}", body[i + 2:i + 4])
                out.append(int(m.group(0), 16))
                i += 2 + len(m.group(0))
            else:
                out += ESCAPES[body[i + 1:i + 2]]
                i += 2
        return bytes(out)
    if v in (b"true", b"false"):
        return v == b"true"
    if re.fullmatch(rb"-?[0-9]+", v):
        return int(v)
    try:
        return float(v)
    except ValueError:
        return v.decode()  # an enum value's name


def one(msg, key, default=None):
    return msg.get(key, [default])[0]


class Trace:
    """What a decoded trace says: tracks, slices per track (rebuilt as
    Perfetto does: events sorted by time, then file order), counters."""

    def __init__(self, path):
        self.packets = decode(path)
        self.processes, self.threads, self.counters = {}, {}, {}
        self.tracks = {}
        names = collections.defaultdict(dict)  # seq -> iid -> name
        cats = collections.defaultdict(dict)
        anames = collections.defaultdict(dict)
        self.events = collections.defaultdict(list)  # track -> events
        self.counter_values = collections.defaultdict(list)
        self.first_of_seq = {}
        for i, p in enumerate(self.packets):
            seq = one(p, "trusted_packet_sequence_id")
            assert seq, p
            if seq not in self.first_of_seq:
                self.first_of_seq[seq] = p
            for idata in p.get("interned_data", []):
                for e in idata.get("event_names", []):
                    names[seq][one(e, "iid")] = one(e, "name")
                for e in idata.get("event_categories", []):
                    cats[seq][one(e, "iid")] = one(e, "name")
                for e in idata.get("debug_annotation_names", []):
                    anames[seq][one(e, "iid")] = one(e, "name")
            td = one(p, "track_descriptor")
            if td:
                u = one(td, "uuid")
                if "process" in td:
                    pd = td["process"][0]
                    self.processes[u] = (one(pd, "pid"),
                                         one(pd, "process_name"))
                elif "thread" in td:
                    th = td["thread"][0]
                    old = self.threads.get(u, (0, 0, None))
                    self.threads[u] = (one(th, "pid"), one(th, "tid"),
                                       one(th, "thread_name", old[2]))
                    assert one(td, "parent_uuid") is not None
                elif "counter" in td:
                    self.counters[u] = (one(td, "parent_uuid"),
                                        one(td, "name"))
                else:  # a track of spans measured elsewhere: (process, name)
                    old = self.tracks.get(u, (0, None))
                    self.tracks[u] = (one(td, "parent_uuid"),
                                      one(td, "name", old[1]))
            te = one(p, "track_event")
            if not te:
                continue
            ts = one(p, "timestamp")
            assert ts is not None
            track = one(te, "track_uuid")
            kind = one(te, "type")
            if kind == "TYPE_COUNTER":
                v = one(te, "double_counter_value", one(te, "counter_value"))
                self.counter_values[track].append((ts, v))
                continue
            ev = {"ts": ts, "type": kind, "order": i}
            if "name_iid" in te:
                ev["name"] = names[seq][one(te, "name_iid")]
            ev["cats"] = [cats[seq][c] for c in te.get("category_iids", [])]
            ev["flows"] = te.get("flow_ids", [])
            ev["args"] = {}
            for da in te.get("debug_annotations", []):
                key = anames[seq][one(da, "name_iid")]
                for f in ("string_value", "uint_value", "bool_value"):
                    if f in da:
                        ev["args"][key] = da[f][0]
            self.events[track].append(ev)

    def slices(self):
        """Per thread track: (name, begin, end, depth, cats, args, flows),
        rebuilt from begin and end events in Perfetto's order; asserts that
        begins and ends balance, each end closing the latest open begin."""
        out = {}
        for track, evs in self.events.items():
            assert track in self.threads or track in self.tracks, \
                f"events on undescribed {track}"
            stack, done = [], []
            for ev in sorted(evs, key=lambda e: (e["ts"], e["order"])):
                if ev["type"] == "TYPE_SLICE_BEGIN":
                    stack.append(ev)
                elif ev["type"] == "TYPE_SLICE_END":
                    assert stack, f"end without begin on track {track}"
                    b = stack.pop()
                    done.append((b["name"], b["ts"], ev["ts"], len(stack),
                                 b["cats"], b["args"], b["flows"]))
            assert not stack, f"begins left open on track {track}"
            out[track] = done
        return out


def chrome(path):
    with open(path) as f:
        return json.load(f)["traceEvents"]


def ns(us):
    return round(us * 1000)


def both(run, tmp_path, *args, check=True):
    """The JSON and the Perfetto trace of run with args."""
    j, p = tmp_path / "t.json", tmp_path / "t.pftrace"
    rj = mlprof("trace", *run, "-o", j, *args, check=check)
    rp = mlprof("trace", *run, "-o", p, "--format", "perfetto", *args,
                check=check)
    return j, p, rj, rp


TRACK_TID_BASE = 2**31


def thread_key(trace, track):
    """(pid, tid) of a thread track; (pid, name) of a track of spans
    measured elsewhere."""
    if track in trace.tracks:
        parent, name = trace.tracks[track]
        return trace.processes[parent][0], name.decode()
    pid, tid, _ = trace.threads[track]
    return pid, tid


def same_spans(j, p):
    """Every span of the Chrome trace is a slice of the Perfetto one, on the
    same process and thread, with the same name, times (ns), category and
    args; returns the Perfetto trace."""
    t = Trace(p)
    got = collections.Counter()
    for track, slices in t.slices().items():
        pid, tid = thread_key(t, track)
        for name, b, e, depth, cats, args, flows in slices:
            got[(pid, tid, name, b, e - b, tuple(cats),
                 tuple(sorted((k.decode(), v if not isinstance(v, bytes)
                               else v.decode()) for k, v in args.items())))] += 1
    want = collections.Counter()
    events = chrome(j)
    track_names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
                   if e["ph"] == "M" and e["name"] == "thread_name"
                   and e["tid"] >= TRACK_TID_BASE}
    for e in events:
        if e["ph"] != "X":
            continue
        args = e.get("args", {})
        tid = track_names.get((e["pid"], e["tid"]), e["tid"])
        want[(e["pid"], tid, e["name"].encode(), ns(e["ts"]),
              ns(e["dur"]), (e["cat"].encode(),) if "cat" in e else (),
              tuple(sorted((k, (1 if v is True else v))
                           for k, v in args.items())))] += 1
    assert got == want
    return t


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    out = tmp_path_factory.mktemp("perfetto") / "run"
    # Every allocation recorded, so that the live bytes counter is always
    # there (sampled, it was only when an allocation happened to be drawn:
    # once in a CI run, which found the Perfetto trace without it).
    mlprof("run", "-o", out, "--sample-ms", "5", "--memory", "all", "--",
           program("findings_pipeline"), "nested", 20)
    return out


def test_spans_counters_and_tracks_match_the_json_trace(pipeline, tmp_path):
    j, p, _, rp = both([pipeline], tmp_path)
    assert "events from" in rp.stderr
    t = same_spans(j, p)
    events = chrome(j)
    # Processes and threads: the same pids, names and thread names.
    want_procs = {(e["pid"], e["args"]["name"]) for e in events
                  if e["ph"] == "M" and e["name"] == "process_name"}
    got_procs = {(pid, name.decode()) for pid, name in t.processes.values()}
    assert got_procs == want_procs
    want_threads = {(e["pid"], e["tid"], e["args"]["name"]) for e in events
                    if e["ph"] == "M" and e["name"] == "thread_name"
                    and e["tid"] < TRACK_TID_BASE}
    got_threads = {(pid, tid, name.decode())
                   for pid, tid, name in t.threads.values() if name}
    assert got_threads == want_threads
    # Counters (sampled measures and gauges): every value of the JSON's
    # counter events, under the same process and name, at the same time.
    want = collections.Counter()
    for e in events:
        if e["ph"] == "C":
            (v,) = e["args"].values()
            want[(e["pid"], e["name"], ns(e["ts"]), float(v))] += 1
    got = collections.Counter()
    pid_of = {u: pid for u, (pid, _) in t.processes.items()}
    for track, values in t.counter_values.items():
        parent, name = t.counters[track]
        for ts, v in values:
            got[(pid_of[parent], name.decode(), ts, float(v))] += 1
    assert sum(want.values()) > 100
    assert any(name == "live bytes (allocations)" for _, name, _, _ in want)
    assert got == want
    # Step marks: instants on their thread with their number.
    want_steps = sorted((e["tid"], ns(e["ts"]), e["args"]["step"])
                        for e in events if e["ph"] == "i")
    got_steps = sorted((thread_key(t, track)[1], ev["ts"], ev["args"][b"step"])
                       for track, evs in t.events.items() for ev in evs
                       if ev["type"] == "TYPE_INSTANT")
    assert len(want_steps) == 20 and got_steps == want_steps
    # Smaller than the JSON.
    assert os.path.getsize(p) < os.path.getsize(j) / 2


def test_each_profile_is_a_sequence_of_its_own(tmp_path):
    run = tmp_path / "run"
    mlprof("run", "-o", run, "--", program("fork_child"))
    j, p, _, _ = both([run], tmp_path)
    t = same_spans(j, p)
    profiles = len(os.listdir(run))
    assert profiles >= 2
    assert sorted(t.first_of_seq) == list(range(1, profiles + 1))
    for seq, first in t.first_of_seq.items():
        assert one(first, "sequence_flags") == 1  # incremental state cleared
        assert one(first, "track_descriptor")  # its process
    # Names are interned per sequence (Trace resolves each iid on its own
    # sequence only): a sequence's packets are whole alone.


def test_nesting_and_counts_match_the_report(pipeline, tmp_path):
    _, p, _, _ = both([pipeline], tmp_path)
    t = Trace(p)
    counts = collections.Counter()
    depth = {}
    for slices in t.slices().values():
        for name, b, e, d, *_ in slices:
            counts[name.decode()] += 1
            depth.setdefault(name.decode(), set()).add(d)
    rep = report_json(pipeline)
    assert counts == {z["name"]: z["count"] for z in rep["zones"]}
    # findings_pipeline nested: "schedule" holds "forward" and "loss".
    assert depth["schedule"] == {0} and depth["forward"] == {1}
    total = collections.Counter()
    for slices in t.slices().values():
        for name, b, e, *_ in slices:
            total[name.decode()] += e - b
    for z in rep["zones"]:
        assert total[z["name"]] == z["total_ns"], z["name"]


def test_equal_begin_times_nest_parent_first(tmp_path):
    """A parent and its first child that begin in the same nanosecond, and
    a child ending with its parent: Perfetto orders equal times by file
    order, so the parent's begin must come first and its end last."""
    ns_ = [(1, craft.ZONE, 0, "outer"), (2, craft.ZONE, 0, "inner"),
           (3, craft.ZONE, 0, "leaf")]
    recs = [craft.span(3, 1000, 0, depth=2),  # leaf [1000, 1000]
            craft.span(2, 0, 500, depth=1),  # inner [1000, 1500]
            craft.span(1, 0, 500, depth=0),  # outer [1000, 1500]
            craft.span(2, 1000, 10, depth=0)]  # a later top-level one
    path = tmp_path / "p.mlprof"
    path.write_bytes(craft.profile(craft.header(), craft.names(ns_),
                                   craft.events(recs), craft.end(5000)))
    _, p, _, _ = both([path], tmp_path)
    (slices,) = Trace(p).slices().values()
    assert sorted((n.decode(), b, e, d) for n, b, e, d, *_ in slices) == [
        ("inner", 1000, 1500, 1), ("inner", 2000, 2010, 0),
        ("leaf", 1000, 1000, 2), ("outer", 1000, 1500, 0)]


def test_open_zones_last_to_the_end(tmp_path):
    """Zones still open when the profile ended (a killed process): slices to
    the profile's end with open = true, nested as they were."""
    ns_ = [(1, craft.ZONE, 0, "train"), (2, craft.ZONE, 0, "epoch"),
           (3, craft.ZONE, 0, "step")]
    # step [100, 400] inside epoch (open from 100) inside train (open at 0).
    recs = [craft.span(3, 100, 300, depth=2),
            bytes([7]) + craft.uv(1) + craft.uv(0) + craft.sv(-100),
            bytes([7]) + craft.uv(2) + craft.uv(1) + craft.sv(100)]
    path = tmp_path / "p.mlprof"
    path.write_bytes(craft.profile(craft.header(), craft.names(ns_),
                                   craft.events(recs)))
    j, p, _, rp = both([path], tmp_path)
    assert "ended without a closing chunk" in rp.stderr
    t = same_spans(j, p)
    (slices,) = t.slices().values()
    assert sorted((n.decode(), b, e, d, a.get(b"open"))
                  for n, b, e, d, _, a, _ in slices) == [
        ("epoch", 100, 400, 1, 1), ("step", 100, 400, 2, None),
        ("train", 0, 400, 0, 1)]


def test_tracks_of_spans_measured_elsewhere(tmp_path):
    """A track (mlprof_track_spans: tid 2^31 and above) is a named track
    under its process, not a thread; its spans nest there."""
    ns_ = [(1, craft.ZONE, 0, "main_loop"), (2, craft.ZONE, 0, "gemm"),
           (3, craft.ZONE, 0, "relu")]
    track = TRACK_TID_BASE + 1
    path = tmp_path / "p.mlprof"
    path.write_bytes(craft.profile(
        craft.header(), craft.names(ns_),
        craft.events([craft.span(1, 0, 5000)], tid=7),
        craft.events([craft.span(3, 1200, 100, depth=1),
                      craft.span(2, -200, 900)], tid=track),
        craft.chunk(craft.THREAD, craft.uv(track) + craft.s("cuda:0 stream 7")),
        craft.end(6000)))
    j, p, _, _ = both([path], tmp_path)
    t = same_spans(j, p)
    assert [n for _, n in t.tracks.values()] == [b"cuda:0 stream 7"]
    assert [tid for _, tid, _ in t.threads.values()] == [7]
    (u,) = t.tracks
    assert sorted((n, b, e, d) for n, b, e, d, *_ in t.slices()[u]) == [
        (b"gemm", 1000, 1900, 0), (b"relu", 1200, 1300, 1)]


def test_collectives_are_flows(tmp_path):
    for r in range(3):
        (tmp_path / f"r{r}.mlprof").write_bytes(
            craft.rank_profile(r, 3, collectives=4, seq0=1))
    paths = [tmp_path / f"r{r}.mlprof" for r in range(3)]
    j, p, _, _ = both(paths, tmp_path)
    t = same_spans(j, p)
    flows = collections.Counter()
    for sl in t.slices().values():
        for name, *_, flow_ids in sl:
            if name == b"all_reduce":
                assert len(flow_ids) == 1
                flows[flow_ids[0]] += 1
    # One flow per collective, through its three ranks; the JSON draws two
    # arrows per collective (from the first rank to each other).
    assert sorted(flows.values()) == [3] * 4
    arrows = sum(1 for e in chrome(j) if e["ph"] == "s")
    assert arrows == sum(n - 1 for n in flows.values())
    # Ranks are processes named with their rank.
    names = sorted(n.decode() for _, n in t.processes.values())
    assert names == ["rank 0 (h)", "rank 1 (h)", "rank 2 (h)"]


@pytest.mark.parametrize("args", [
    ("--zone", "forward", "--steps", "2:5"),
    ("--exclude", "loss"),
    ("--category", "forward"),
])
def test_filters_as_for_json(pipeline, tmp_path, args):
    j, p, _, _ = both([pipeline], tmp_path, *args)
    t = same_spans(j, p)
    steps = sum(1 for e in chrome(j) if e["ph"] == "i")
    assert steps == sum(1 for evs in t.events.values() for ev in evs
                        if ev["type"] == "TYPE_INSTANT")


def test_window_as_for_json(pipeline, tmp_path):
    j, _, _, _ = both([pipeline], tmp_path)
    spans = [e for e in chrome(j) if e["ph"] == "X"]
    t0 = min(e["ts"] for e in spans)
    t1 = max(e["ts"] + e["dur"] for e in spans)
    a, b = t0 + (t1 - t0) * 0.3, t0 + (t1 - t0) * 0.6
    j, p, _, _ = both([pipeline], tmp_path, "--window", f"{a:.0f}us:{b:.0f}us")
    t = same_spans(j, p)
    kept = sum(len(s) for s in t.slices().values())
    assert 0 < kept < len(spans)


def test_filter_matching_nothing_is_an_error(pipeline, tmp_path):
    out = tmp_path / "t.pftrace"
    r = mlprof("trace", pipeline, "-f", "perfetto", "-o", out, "--zone",
               "no_such_zone", check=False)
    assert r.returncode == 2 and "match no zone" in r.stderr
    assert not out.exists()


def test_max_mb_keeps_the_longest_spans(tmp_path):
    run = tmp_path / "run"
    mlprof("run", "-o", run, "--", program("inference_loop"), 300)
    full, small = tmp_path / "full.pftrace", tmp_path / "small.pftrace"
    mlprof("trace", run, "-f", "perfetto", "-o", full)
    limit = os.path.getsize(full) / 2 / 1e6
    r = mlprof("trace", run, "-f", "perfetto", "-o", small, "--max-mb",
               f"{limit:.6f}")
    assert os.path.getsize(small) <= limit * 1e6
    assert "kept the spans of" in r.stderr

    def durations(path):
        return sorted(e - b for sl in Trace(path).slices().values()
                      for _, b, e, *_ in sl)
    kept, every = durations(small), durations(full)
    assert 0 < len(kept) < len(every)
    assert every[-len(kept):] == kept


def test_damaged_profile_exports_what_is_readable(pipeline, tmp_path):
    (prof,) = [f for f in os.listdir(pipeline)
               if f.startswith("findings_pipeline")]
    data = (pipeline / prof).read_bytes()
    bad = bytearray(data)
    mid = len(bad) // 2
    bad[mid:mid + 64] = b"\xff" * 64  # a damaged chunk in the middle
    cut = tmp_path / "damaged.mlprof"
    cut.write_bytes(bytes(bad[:len(bad) - 100]))  # and a cut-short tail
    j, p, rj, rp = both([cut], tmp_path)
    assert "damage found" in rp.stderr and "damage found" in rj.stderr
    t = same_spans(j, p)
    assert sum(len(s) for s in t.slices().values()) > 0


def test_hostile_names_stay_inert(tmp_path):
    hostile = [b'quote" brace} \\back', b"new\nline\ttab\x1b[31mred",
               b"bad \xff\xfe utf8 \xc3", b"nul\x00byte", "ünï ✓ 🚀".encode(),
               b"</script><x>" + b"A" * 5000]
    ns_ = [(i + 1, craft.ZONE, 0, n) for i, n in enumerate(hostile)]
    ns_.append((50, craft.STRING, 0, b"key\xff\""))
    ns_.append((51, craft.STRING, 0, b"value\n\xc0"))
    recs = []
    for i in range(len(hostile)):
        recs.append(craft.span(i + 1, 1000 if i else 0, 100))
    recs.append(craft.span_meta(50, 51))
    path = tmp_path / "h.mlprof"
    path.write_bytes(craft.profile(
        craft.header(argv=("prog\xff".encode("latin-1"), "--x=\"1\"")),
        craft.names(ns_), craft.events(recs), craft.end(10**6)))
    j, p, _, _ = both([path], tmp_path)
    t = same_spans(j, p)  # the names decode to what the JSON's decode to
    names = [n for sl in t.slices().values() for n, *_ in sl]
    assert len(names) == len(hostile)
    for n in names:
        n.decode("utf-8")  # valid UTF-8 everywhere
    assert "bad \ufffd\ufffd utf8 \ufffd".encode() in names
    assert b"nul\x00byte" in names
    for _, name in t.processes.values():
        name.decode("utf-8")


def test_size_warning_names_perfettos_limit(pipeline, tmp_path):
    out = tmp_path / "t.pftrace"
    r = mlprof("trace", pipeline, "-f", "perfetto", "-o", out, "--warn-mb",
               "0.001")
    assert "Perfetto's UI has ~2 GB" in r.stderr
    assert "warning:" not in mlprof("trace", pipeline, "-f", "perfetto", "-o",
                                   out).stderr


def test_bad_format_is_a_usage_error(pipeline, tmp_path):
    r = mlprof("trace", pipeline, "--format", "protobuf", "-o",
               tmp_path / "x", check=False)
    assert r.returncode == 2 and "json or perfetto" in r.stderr


def test_default_output_name(pipeline, tmp_path):
    mlprof("trace", pipeline, "-f", "perfetto", cwd=tmp_path)
    assert (tmp_path / "trace.pftrace").exists()
    assert not (tmp_path / "trace.json").exists()
