"""CUDA memory snapshots: the file torch.cuda.memory._dump_snapshot writes
(the pickle of torch.cuda.memory._snapshot(), with the history recorded by
torch.cuda.memory._record_memory_history), read without running anything it
holds, and summed up: per device, what is reserved and allocated, the peak
of live bytes over the recorded history and what held it, the allocation
sites by frames, and a live-bytes timeline (docs/memory.md, "CUDA memory
snapshots").

    python -m mlprof memory-snapshot snapshot.pickle [--json] [--top N]

Reading: a snapshot is a pickle, and a pickle can run code. This reader's
unpickler refuses every global (no class, no function can be named, so none
is called) and persistent ids: what it builds is only dicts, lists, tuples,
strings, bytes, numbers, booleans and None; the file is read whole up to a
cap first (MAX_BYTES; the pickle's own lengths are then checked against what
was read). The result is then checked field by field against torch's
format, and anything else is a SnapshotError naming the field.
"""
import io
import json
import os
import pickle
import sys

from . import Error

__all__ = ["SnapshotError", "load", "analyze", "format_text", "main",
           "MAX_BYTES", "history_start", "HISTORY_ENV", "record",
           "profile_records", "profile_snapshot"]

MAX_BYTES = 1 << 30   # default cap on the file read
FRAMES_LOOKED_AT = 64  # per allocation: a site is its first program frames
SITE_FRAMES = 3
MAX_NAME = 1000        # characters of a frame's file or function kept
TIMELINE_POINTS = 200


class SnapshotError(Error):
    """The file is not a torch CUDA memory snapshot this reader accepts."""


class _DataOnly(pickle.Unpickler):
    """An unpickler that builds plain data only: no global can be looked
    up, so no constructor or function of the pickle's choosing runs."""

    def find_class(self, module, name):
        raise SnapshotError(
            "the pickle names %.80s.%.80s: a memory snapshot holds plain "
            "data only (dicts, lists, strings, numbers), refused"
            % (module, name))

    def persistent_load(self, pid):
        raise SnapshotError("the pickle holds a persistent id: a memory "
                            "snapshot holds plain data only, refused")


def load(path, max_bytes=MAX_BYTES):
    """The snapshot in file `path`, as plain data (see the module's doc).
    Raises SnapshotError when it cannot be read, is larger than max_bytes,
    or is not a pickle of plain data."""
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise SnapshotError("%s: %s" % (path, e.strerror or e)) from None
    if len(data) > max_bytes:
        raise SnapshotError("%s: larger than %d MiB (raise the cap: "
                            "--max-mb)" % (path, max_bytes >> 20))
    if not data:
        raise SnapshotError("%s: empty file, not a memory snapshot" % path)
    buf = io.BytesIO(data)
    try:
        snap = _DataOnly(buf).load()
    except SnapshotError as e:
        raise SnapshotError("%s: %s" % (path, e)) from None
    except RecursionError:
        raise SnapshotError("%s: nested too deeply" % path) from None
    except MemoryError:
        raise SnapshotError("%s: out of memory while reading" % path) \
            from None
    except Exception as e:  # UnpicklingError, EOFError, ValueError...
        raise SnapshotError("%s: not a readable pickle (%s: %s)" % (
            path, type(e).__name__, str(e)[:200])) from None
    if buf.tell() != len(data):
        raise SnapshotError("%s: %d bytes after the end of the pickle"
                            % (path, len(data) - buf.tell()))
    return snap


# ---- checking the format --------------------------------------------------

def _need(cond, where, what):
    if not cond:
        raise SnapshotError("not a torch memory snapshot: %s %s"
                            % (where, what))


def _int(d, key, where, default=None):
    v = d.get(key, default)
    _need(type(v) is int and 0 <= v < 1 << 64, "%s.%s" % (where, key),
          "is not an integer from 0 to 2^64-1")
    return v


def _str(d, key, where, default=None):
    v = d.get(key, default)
    _need(type(v) is str, "%s.%s" % (where, key), "is not a string")
    return v


def _frames(d, where):
    """The first FRAMES_LOOKED_AT frames of an entry or block as
    (filename, line, name) tuples."""
    fr = d.get("frames", [])
    _need(type(fr) is list, where + ".frames", "is not a list")
    out = []
    for i, f in enumerate(fr[:FRAMES_LOOKED_AT]):
        w = "%s.frames[%d]" % (where, i)
        _need(type(f) is dict, w, "is not a dict")
        # Names cut: a crafted file may share one huge string everywhere.
        out.append((_str(f, "filename", w)[:MAX_NAME], _int(f, "line", w),
                    _str(f, "name", w)[:MAX_NAME]))
    return tuple(out)


# Frames of the machinery, left out of a site as torch's memory_viz does.
_OMIT_NAMES = ("unwind::unwind", "CapturedTraceback::gather",
               "gather_with_cpp", "_start", "__libc_start_main", "PyEval_",
               "PyObject_", "PyFunction_")
_OMIT_FILES = ("core/boxing", "/Register", "/Redispatch", "pythonrun.c",
               "Modules/main.c", "Objects/call.c", "Objects/methodobject.c",
               "pycore_ceval.h", "ceval.c", "cpython/abstract.h")
# Python files of the installation, of packages (torch's own) and mlprof's.
_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python", "/mlprof/")


def _site(frames):
    """A site as a person reads it: the program's own Python frames,
    innermost first ("file:line name", " < " between callers); when there
    is none, the innermost frames left after torch's machinery."""
    kept = [f for f in frames
            if not any(o in f[2] for o in _OMIT_NAMES)
            and not any(o in f[0] for o in _OMIT_FILES)]
    own = [f for f in kept if f[0].endswith(".py")
           and not any(p in f[0] for p in _LIBRARY) and f[0][:1] != "<"]
    chosen = (own or kept)[:SITE_FRAMES]
    if not chosen:
        return "(no frames: recorded without context)"
    return " < ".join("%s:%d %s" % f for f in chosen)


# ---- the analysis ---------------------------------------------------------

def _device(segments, trace, dev, top, points):
    where = "device_traces[%d]" % dev
    reserved = sum(s["total_size"] for s in segments)
    allocated = sum(s["allocated_size"] for s in segments)
    active = [b for s in segments for b in s["blocks"]
              if b["state"] == "active_allocated"]
    # The history, replayed: a block is live from its alloc to its
    # free_completed (free_requested: the program let go of it, the
    # allocator waits for the streams that used it).
    live = {}            # addr -> (size, site)
    # Live bytes: pre (allocated before the history: what it frees without
    # having allocated it, and what is live now that it never allocated)
    # plus cur (the history's allocations less every free it holds).
    cur = pre = 0
    peak, peak_at = 0, -1
    series = []          # (x, live of the trace's allocations)
    by_site = {}         # site -> [allocated bytes, count]
    ooms, times = 0, True
    entries = []
    for i, e in enumerate(trace):
        w = "%s[%d]" % (where, i)
        _need(type(e) is dict, w, "is not a dict")
        action = _str(e, "action", w)
        size = _int(e, "size", w, 0)
        t = e.get("time_us")
        if type(t) is not int:
            times = False
        if action == "oom":
            ooms += 1
            continue
        if action not in ("alloc", "free_completed"):
            continue  # free_requested, segment_*, snapshot, ...
        addr = _int(e, "addr", w)
        if action == "alloc":
            site = _site(_frames(e, w))
            old = live.pop(addr, None)
            if old is not None:  # its free_completed was not recorded
                cur -= old[0]
            live[addr] = (size, site)
            cur += size
            s = by_site.setdefault(site, [0, 0])
            s[0] += size
            s[1] += 1
        else:
            old = live.pop(addr, None)
            if old is None:  # allocated before the history began
                pre += size
                cur -= size
            else:
                cur -= old[0]
        entries.append((i, t, action, addr, size,
                        site if action == "alloc" else None))
        series.append((i, t, cur))
    # Before the history: what it freed without having allocated, and what
    # is live now that it never allocated.
    pre += sum(b["size"] for b in active if b["address"] not in live)
    for k, (i, t, v) in enumerate(series):
        if pre + v > peak:
            peak, peak_at = pre + v, k
    if not series:
        peak = sum(b["size"] for b in active)
    # What was live at the peak: the replay again, up to it.
    at_peak = {}
    if peak_at >= 0:
        held, freed_pre = {}, 0
        for i, t, action, addr, size, site in entries[:peak_at + 1]:
            if action == "alloc":
                held[addr] = (size, site)
            elif held.pop(addr, None) is None:
                freed_pre += size
        for size, site in held.values():
            at_peak[site] = at_peak.get(site, 0) + size
        if pre - freed_pre:
            at_peak["(allocated before the history began)"] = \
                pre - freed_pre
    now = {}
    for b in active:
        site = _site(_frames(b, "segments[].blocks[]"))
        now[site] = now.get(site, 0) + b["size"]
    x0 = trace[0]["time_us"] if series and times else 0  # history begins
    dev_out = {
        "device": dev, "segments": len(segments), "reserved_bytes": reserved,
        "allocated_bytes": allocated, "active_blocks": len(active),
        "trace_entries": len(trace), "times": times and bool(series),
        "ooms": ooms, "peak_bytes": peak,
        "peak_entry": series[peak_at][0] if peak_at >= 0 else None,
        "peak_time_us": (series[peak_at][1] - x0) if peak_at >= 0 and times
        else None,
        "before_history_bytes": pre,
        "sites_at_peak": _top(at_peak, top, "bytes"),
        "sites_allocated": [{"site": k, "bytes": v[0], "count": v[1]}
                            for k, v in sorted(by_site.items(),
                                               key=lambda kv: -kv[1][0])
                            [:top or None]],
        "sites_now": _top(now, top, "bytes"),
        "timeline": _timeline(series, pre, times, x0, points),
    }
    return dev_out


def _top(d, top, key):
    rows = sorted(d.items(), key=lambda kv: -kv[1])
    return [{"site": k, key: v} for k, v in rows[:top or None] if v]


def _timeline(series, pre, times, x0, points):
    """[x, live bytes] pairs, at most `points`: the largest value of each
    interval, so the peak is kept; x: µs since the first entry, or the
    entry's index without times."""
    if not series:
        return []
    n = len(series)
    step = max(1, -(-n // points))
    out = []
    for b in range(0, n, step):
        chunk = series[b:b + step]
        i, t, v = max(chunk, key=lambda s: s[2])
        out.append([(t - x0) if times else i, pre + v])
    return out


def analyze(snap, top=10, points=TIMELINE_POINTS):
    """The summary of a snapshot (as load returns it): {"devices": [...]},
    one entry per device with segments or history. Raises SnapshotError
    naming the first field that is not as torch writes it."""
    _need(type(snap) is dict, "the pickle", "holds a %s, not a dict"
          % type(snap).__name__)
    _need("segments" in snap or "device_traces" in snap, "the pickle",
          "has neither segments nor device_traces")
    segs = snap.get("segments", [])
    traces = snap.get("device_traces", [])
    _need(type(segs) is list, "segments", "is not a list")
    _need(type(traces) is list, "device_traces", "is not a list")
    by_dev = {}
    for i, s in enumerate(segs):
        w = "segments[%d]" % i
        _need(type(s) is dict, w, "is not a dict")
        dev = _int(s, "device", w, 0)
        _int(s, "total_size", w)
        _int(s, "allocated_size", w, 0)
        s.setdefault("allocated_size", 0)
        blocks = s.get("blocks", [])
        _need(type(blocks) is list, w + ".blocks", "is not a list")
        addr = _int(s, "address", w)
        for j, b in enumerate(blocks):
            bw = "%s.blocks[%d]" % (w, j)
            _need(type(b) is dict, bw, "is not a dict")
            _int(b, "size", bw)
            _str(b, "state", bw)
            if "address" not in b:  # older snapshots: blocks in order
                b["address"] = addr
            _int(b, "address", bw)
            addr += b["size"]
        s["blocks"] = blocks
        by_dev.setdefault(dev, []).append(s)
    for i, t in enumerate(traces):
        _need(type(t) is list, "device_traces[%d]" % i, "is not a list")
    devs = sorted(set(by_dev) | {i for i, t in enumerate(traces) if t})
    # A profile's CPU allocations (profile_snapshot) name their profile.
    src = snap.get(PROFILE_KEY)
    _need(src is None or type(src) is str, PROFILE_KEY, "is not a string")
    return {"devices": [_device(by_dev.get(d, []), traces[d]
                                if d < len(traces) else [], d, top, points)
                        for d in devs], PROFILE_KEY: src}


# ---- output ---------------------------------------------------------------

def _bytes(v):
    a, u = float(v), 0
    units = ("B", "kB", "MB", "GB", "TB")
    while abs(a) >= 999.5 and u + 1 < len(units):
        a /= 1000
        u += 1
    if u == 0:
        return "%d B" % v
    return "%.*f %s" % (2 if a < 9.995 else 1 if a < 99.95 else 0, a,
                        units[u])


def _when(d, x):
    """x of the timeline: a time (µs since the history began) or, without
    times, an entry's index."""
    if not d["times"]:
        return "entry %d" % x
    if x < 1000:
        return "%d µs" % x
    if x < 1000000:
        return "%.3g ms" % (x / 1e3)
    return "%.3f s" % (x / 1e6)


def format_text(summary, path=""):
    """The summary as lines a person reads in a terminal."""
    src = summary.get(PROFILE_KEY)
    if src:
        out = ["Memory snapshot%s: the CPU allocations recorded in the "
               "mlprof profile %s (mlprof memory-snapshot --from), not CUDA "
               "memory" % (" " + path if path else "", src)]
    else:
        out = ["CUDA memory snapshot%s" % (" " + path if path else "")]
    if not summary["devices"]:
        out.append("  no segments and no history: nothing was allocated")
    for d in summary["devices"]:
        if src:
            out.append("process memory (device %d of the snapshot; no "
                       "segments)" % d["device"])
        else:
            out.append("device %d: %s reserved in %d segments, %s allocated "
                       "in %d blocks at the snapshot" % (
                           d["device"], _bytes(d["reserved_bytes"]),
                           d["segments"], _bytes(d["allocated_bytes"]),
                           d["active_blocks"]))
        if d["trace_entries"]:
            out.append("  history: %d entries; peak %s live at %s%s" % (
                d["trace_entries"], _bytes(d["peak_bytes"]),
                _when(d, d["peak_time_us"] if d["times"]
                      else d["peak_entry"]),
                ("; %d out-of-memory errors" % d["ooms"]) if d["ooms"]
                else ""))
        else:
            out.append("  no history (record it with torch.cuda.memory."
                       "_record_memory_history): the peak is unknown")
        for title, rows, cols in (
                ("What held memory at the peak", d["sites_at_peak"],
                 ("bytes",)),
                ("Allocation sites (allocated over the history)",
                 d["sites_allocated"], ("bytes", "count")),
                ("Live at the snapshot", d["sites_now"], ("bytes",))):
            if not rows:
                continue
            out.append("  " + title)
            for r in rows:
                extra = ("  %6d allocs" % r["count"]) if "count" in cols \
                    else ""
                out.append("    %10s%s  %s" % (_bytes(r["bytes"]), extra,
                                               r["site"]))
        tl = d["timeline"]
        if tl:
            out.append("  Live bytes over the history (the most in each "
                       "interval)")
            top = max(v for _, v in tl) or 1
            step = max(1, -(-len(tl) // 20))
            for x, v in tl[::step]:
                out.append("    %12s %10s %s" % (_when(d, x), _bytes(v),
                                                 "#" * round(40 * v / top)))
    return "\n".join(out) + "\n"


USAGE = """usage: mlprof memory-snapshot FILE [--json] [--top N] [--max-mb N]
       mlprof memory-snapshot --from PROFILE -o OUT.pickle

Reads a CUDA memory snapshot (torch.cuda.memory._dump_snapshot) and prints,
per device, what is reserved and allocated, the peak of live bytes over the
recorded history and what held it, the allocation sites by frames and a
live-bytes timeline. Only plain data is read from the pickle: nothing in it
runs.

  --json      the summary as JSON
  --top N     sites listed (default 10, 0: all)
  --max-mb N  refuse files larger than N MiB (default 1024)

With --from, writes the allocations recorded in one mlprof profile (a
process's .mlprof file) as a snapshot that pytorch.org/memory_viz opens (its
trace of allocs and frees with their frames; docs/memory.md).
"""


def main(argv):
    """`mlprof memory-snapshot`'s arguments; returns the exit status: 0,
    or 2 for bad usage or a file that is not a snapshot (with a line on
    stderr)."""
    args, path, as_json, top, cap = list(argv), None, False, 10, MAX_BYTES
    source = out = None
    try:
        while args:
            a = args.pop(0)
            if a in ("-h", "--help"):
                sys.stdout.write(USAGE)
                return 0
            if a == "--json":
                as_json = True
            elif a in ("--from", "-o"):
                v = args.pop(0) if args else ""
                if not v:
                    raise ValueError("%s takes a path" % a)
                if a == "--from":
                    source = v
                else:
                    out = v
            elif a in ("--top", "--max-mb"):
                v = args.pop(0) if args else ""
                if not v.isdigit() or not v.isascii():
                    raise ValueError("%s takes a whole number, not %r"
                                     % (a, v))
                if a == "--top":
                    top = int(v)
                else:
                    cap = int(v) << 20
                    if cap <= 0:
                        raise ValueError("--max-mb takes a number > 0")
            elif a.startswith("-") and a != "-":
                raise ValueError("unknown option %s" % a)
            elif path is None:
                path = a
            else:
                raise ValueError("one FILE only")
        if source is not None:
            if path is not None or out is None or as_json:
                raise ValueError("--from PROFILE takes -o OUT.pickle and "
                                 "nothing else")
        elif out is not None:
            raise ValueError("-o goes with --from PROFILE")
        elif path is None:
            raise ValueError("a FILE is needed")
    except ValueError as e:
        sys.stderr.write("mlprof memory-snapshot: %s (see mlprof "
                         "memory-snapshot --help)\n" % e)
        return 2
    if source is not None:
        return _write_from_profile(source, out)
    try:
        summary = analyze(load(path, cap), top)
    except SnapshotError as e:
        sys.stderr.write("mlprof memory-snapshot: %s\n" % e)
        return 2
    if as_json:
        summary = dict(summary, file=os.path.abspath(path))
        sys.stdout.write(json.dumps(summary, indent=1) + "\n")
    else:
        sys.stdout.write(format_text(summary, path))
    return 0


# ---- a profile's allocations as a snapshot --------------------------------

ZONE_FILE = "<mlprof zone>"  # the outermost frame of an allocation in a zone
# The key of a profile's snapshot that names the profile (its path): what
# tells its CPU allocations from a CUDA snapshot of torch's.
PROFILE_KEY = "mlprof_profile"


def _is_cuda_zone(zone):
    return (zone.startswith("cuda:") and zone[5:].isdigit()
            and zone[5:].isascii() and len(zone) <= 9)


def profile_snapshot(path):
    """The allocations recorded in profile `path` (one process's .mlprof
    file) as a memory snapshot in torch's format, which memory_viz opens:
    {"segments": [], "device_traces": [trace], PROFILE_KEY: path (made
    absolute)}, trace the allocations and
    frees of the process's own memory replayed in time order over every
    thread: per allocation {"action": "alloc", "addr", "size", "stream": 0,
    "time_us" (Unix time), "frames": [{"filename", "line", "name"}],
    innermost first: its Python frames, its native frame (filename the
    shared object, name "symbol+0xOFF"), then the zone it was made in as
    the outermost frame ({"filename": ZONE_FILE, "name": zone})}; per free
    of a recorded allocation, "free_requested" then "free_completed" with
    its size and frames. Sizes are the bytes asked for: in a sampled
    profile, the sampled allocations only, less those folded into a site's
    sum (read_events' alloc_sums: no address nor time of their own). Allocations of a CUDA device
    brought into the profile (zone cuda:N on a track) are left out: the
    snapshot they came from is beside the profile. Raises mlprof.Error
    when the file cannot be read as a profile."""
    from . import _mlprof
    ev = _mlprof.read_events(path)
    funcs, frames, nodes = (ev["stack_funcs"], ev["stack_frames"],
                            ev["stack_nodes"])
    t0 = (ev["header"] or {}).get("start_wall_ns", 0)
    cache = {}

    def frames_of(stack, zone):
        key = (stack, zone)
        got = cache.get(key)
        if got is not None:
            return got
        out, sid, hops = [], stack, 0
        while sid and hops < 4096:  # parents have smaller ids
            hops += 1
            node = nodes.get(sid)
            if node is None:
                break
            parent, fid = node
            f = frames.get(fid)
            if f is not None:
                func, line, native, module, symbol, offset = f
                if native:
                    out.append({"filename": module, "line": 0, "name": "%s+0x%x" % (
                        symbol or os.path.basename(module), offset)})
                elif func:
                    file, fn, _ = funcs.get(func, ("?", "?", 0))
                    out.append({"filename": file, "line": line, "name": fn})
                else:
                    out.append({"filename": "<truncated>", "line": 0,
                                "name": "<truncated>"})
            if parent >= sid:
                break
            sid = parent
        if zone:
            out.append({"filename": ZONE_FILE, "line": 0, "name": zone})
        cache[key] = out
        return out
    cuda_tids = {r[0] for r in ev["allocs"]
                 if r[0] >= 1 << 31 and r[3] and _is_cuda_zone(r[5])}
    order = sorted(range(len(ev["allocs"])),
                   key=lambda i: ev["allocs"][i][1])
    live, trace = {}, []
    for i in order:
        tid, t, addr, size, weight, zone, stack = ev["allocs"][i]
        if tid in cuda_tids:
            continue
        us = (t0 + t) // 1000
        if size:
            old = live.pop(addr, None)
            if old is not None:  # its free was not recorded
                trace.append(_free_entry("free_requested", addr, old, us))
                trace.append(_free_entry("free_completed", addr, old, us))
            fr = frames_of(stack, zone)
            live[addr] = (size, fr)
            trace.append({"action": "alloc", "addr": addr, "size": size,
                          "stream": 0, "time_us": us, "frames": fr})
        else:
            old = live.pop(addr, None)
            if old is not None:
                trace.append(_free_entry("free_requested", addr, old, us))
                trace.append(_free_entry("free_completed", addr, old, us))
    return {"segments": [], "device_traces": [trace],
            PROFILE_KEY: os.path.abspath(path)}


def _free_entry(action, addr, alloc, us):
    return {"action": action, "addr": addr, "size": alloc[0], "stream": 0,
            "time_us": us, "frames": alloc[1]}


def _write_from_profile(source, out):
    """memory-snapshot --from SOURCE -o OUT: 0, or 2 with a line on
    stderr."""
    from . import Error as MlprofError
    if os.path.isdir(source):
        sys.stderr.write("mlprof memory-snapshot: %s is a directory: name "
                         "one process's profile (a .mlprof file in it)\n"
                         % source)
        return 2
    try:
        snap = profile_snapshot(source)
    except (MlprofError, OSError) as e:
        sys.stderr.write("mlprof memory-snapshot: %s: %s\n" % (source, e))
        return 2
    try:
        # As torch's _dump_snapshot writes one: pickle's default protocol.
        data = pickle.dumps(snap)
        with open(out, "wb") as f:
            f.write(data)
    except OSError as e:
        sys.stderr.write("mlprof memory-snapshot: %s: %s\n" % (
            out, e.strerror or e))
        return 2
    n = len(snap["device_traces"][0])
    sys.stdout.write("%s: %d trace entries (%d allocations) from %s\n" % (
        out, n, sum(e["action"] == "alloc" for e in snap["device_traces"][0]),
        source))
    return 0


# ---- recording, under mlprof run ------------------------------------------

HISTORY_ENV = "MLPROF_CUDA_MEMORY_HISTORY"
HISTORY_ENTRIES = 100000  # torch's ring buffer of history entries


def history_start(torch, profile_path, environ=os.environ):
    """Under `mlprof run` with MLPROF_CUDA_MEMORY_HISTORY=1 (or =N: keep
    the last N entries): when CUDA is available, starts torch's memory
    history and dumps the snapshot at exit beside the process's profile
    (PROFILE.cuda-memory.pickle). Returns the snapshot's path, or None with
    the reason, as (path, why). Never raises."""
    want = environ.get(HISTORY_ENV, "")
    if want in ("", "0"):
        return None, "off"
    entries = HISTORY_ENTRIES
    if want != "1":
        if not (want.isdigit() and want.isascii() and int(want) > 0):
            return None, "%s=%s: 1, or the entries kept" % (HISTORY_ENV,
                                                           want)
        entries = int(want)
    try:
        if not torch.cuda.is_available():
            return None, "no CUDA device"
        if not profile_path:
            return None, "no profile to write beside"
        mem = torch.cuda.memory
        mem._record_memory_history("all", max_entries=entries)
    except Exception as e:
        return None, "%s: %s" % (type(e).__name__, e)
    path = profile_path + ".cuda-memory.pickle"

    def dump():
        # What torch's _dump_snapshot does, with the snapshot taken once:
        # written beside the profile, then brought into it.
        try:
            snap = mem._snapshot()
        except Exception:
            return  # the program's exit is never disturbed
        try:
            # A new file only, never through a link: the profile's folder
            # may be shared, and someone may have put a name there first.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL |
                         os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            with os.fdopen(fd, "wb") as f:
                pickle.dump(snap, f)
        except Exception:
            pass
        try:
            record(snap)
        except Exception:
            pass
        try:
            mem._record_memory_history(None)
        except Exception:
            pass
    import atexit
    atexit.register(dump)
    return path, "recording"


# ---- into the profile ------------------------------------------------------

TRACK = "CUDA memory"  # the track of device N: "CUDA memory cuda:N"
# time_us of torch's entries is Unix time in µs; a value before this one
# (2001) is not, and the entries are then placed at the moment of recording.
_UNIX_US_MIN = 10 ** 15


def _program_frames(frames):
    """The frames of an allocation kept in the profile, innermost first:
    its Python frames (torch's C++ frames left out: a site names Python
    lines), or, with none, its first frames past the allocator's own."""
    kept = [f for f in frames
            if not any(o in f[2] for o in _OMIT_NAMES)
            and not any(o in f[0] for o in _OMIT_FILES)]
    py = [f for f in kept if f[0].endswith(".py") or f[0][:1] == "<"]
    return tuple(py) if py else tuple(kept[:SITE_FRAMES])


def profile_records(snap, now_mono_ns, now_unix_ns):
    """What a snapshot brings into the profile, per device: {device:
    (stacks, allocs)}, stacks a list of frame tuples ((file, line, name),
    innermost first), allocs (time_ns CLOCK_MONOTONIC, address, size (0: a
    free), index in stacks or -1) in order. The history's alloc and
    free_completed entries; before them, as allocations at the history's
    start, what was allocated before it began (what it frees without having
    allocated it, and the blocks live at the snapshot it never allocated),
    so that live bytes are as `memory-snapshot` replays them. Raises
    SnapshotError on a snapshot not in torch's format."""
    analyze(snap, top=1, points=1)  # checks every field (SnapshotError)
    segs = snap.get("segments", [])
    traces = snap.get("device_traces", [])
    blocks_of = {}
    for s in segs:
        blocks_of.setdefault(s.get("device", 0), []).extend(
            b for b in s["blocks"] if b["state"] == "active_allocated")
    out = {}
    for dev in sorted(set(blocks_of) | {i for i, t in enumerate(traces)
                                          if t}):
        trace = traces[dev] if dev < len(traces) else []
        stacks, index = [], {}

        def stack(frames):
            fr = _program_frames(_frames({"frames": frames}, "frames"))
            if not fr:
                return -1
            k = index.get(fr)
            if k is None:
                k = index[fr] = len(stacks)
                stacks.append(fr)
            return k
        times = all(type(e.get("time_us")) is int
                    and e["time_us"] >= _UNIX_US_MIN for e in trace)

        def when(e):
            if not times:
                return now_mono_ns
            return max(0, e["time_us"] * 1000 - now_unix_ns + now_mono_ns)
        pre, hist, live = [], [], {}
        for e in trace:
            action = e["action"]
            if action not in ("alloc", "free_completed"):
                continue
            t, addr, size = when(e), e["addr"], e.get("size", 0)
            if action == "alloc":
                if addr in live:  # its free_completed was not recorded
                    hist.append((t, addr, 0, -1))
                live[addr] = size
                if size:
                    hist.append((t, addr, size, stack(e.get("frames", []))))
            elif live.pop(addr, None) is not None:
                hist.append((t, addr, 0, -1))
            elif size:  # allocated before the history began
                pre.append((addr, size, stack(e.get("frames", []))))
                hist.append((t, addr, 0, -1))
        for b in blocks_of.get(dev, []):
            if b["address"] not in live and b["size"]:
                pre.append((b["address"], b["size"],
                            stack(b.get("frames", []))))
        start = hist[0][0] if hist else now_mono_ns
        allocs = [(start, a, n, k) for a, n, k in pre] + hist
        out[dev] = (stacks, allocs)
    return out


def record(snap, now_mono_ns=None, now_unix_ns=None):
    """Brings a snapshot (torch.cuda.memory._snapshot()) into this
    process's profile: each device's allocations on a track of their own
    ("CUDA memory cuda:N"), in zone "cuda:N", where the report's Memory
    section and the dashboard show them as the process's CUDA memory
    (docs/memory.md); the segments as metadata "mlprof.cuda_memory:cuda:N".
    Returns the allocation records made. Raises SnapshotError on a snapshot
    not in torch's format, mlprof.Error when the profile takes none."""
    import time
    from . import _mlprof
    if now_mono_ns is None:
        now_unix_ns, now_mono_ns = time.time_ns(), time.monotonic_ns()
    made = 0
    summary = {d["device"]: d for d in analyze(snap, top=1,
                                               points=1)["devices"]}
    for dev, (stacks, allocs) in profile_records(
            snap, now_mono_ns, now_unix_ns).items():
        zone = "cuda:%d" % dev
        made += _mlprof.track_allocs("%s %s" % (TRACK, zone), zone, stacks,
                                     allocs)
        d = summary.get(dev)
        if d:
            _mlprof.meta("mlprof.cuda_memory:" + zone, (
                "%d bytes reserved in %d segments, %d allocated at the "
                "snapshot; %d history entries, %d out-of-memory errors" % (
                    d["reserved_bytes"], d["segments"], d["allocated_bytes"],
                    d["trace_entries"], d["ooms"])))
    return made
