"""Profiles written byte by byte (docs/format.md), for tests that need files
no real run would make: hostile counts, ids and clocks."""
import struct
import zlib

FILE_MAGIC = b"MLPROF\r\n"
CHUNK_MAGIC = b"MPCK"
HEADER, NAMES, THREAD, EVENTS, META, END, LINES = 1, 2, 3, 4, 5, 6, 9
SOURCES, SAMPLES = 7, 8
ZONE, GAUGE, UNITS, STRING, MEASURE = 0, 1, 2, 3, 4
SUBJECT_SYSTEM, SUBJECT_PROCESS = 0, 1
CAT_COMM = 5
SPAN, SPAN_META, SPAN_UNITS, STEP = 1, 4, 5, 6


def uv(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def sv(n):
    return uv((n << 1) ^ (n >> 63) if n < 0 else n << 1)


def s(text):
    b = text.encode() if isinstance(text, str) else text
    return uv(len(b)) + b


def chunk(ctype, payload):
    head = struct.pack("<HHI", ctype, 0, len(payload))
    crc = zlib.crc32(head + payload) & 0xFFFFFFFF
    return CHUNK_MAGIC + head + struct.pack("<I", crc) + payload


def header(pid=100, rank=-1, world=-1, host="h", start_mono=10**12,
           start_wall=1_700_000_000 * 10**9, argv=("prog",)):
    p = uv(pid) + uv(1) + uv(start_wall) + uv(start_mono) + sv(rank)
    p += sv(world) + s(host) + s(argv[0]) + uv(len(argv))
    p += b"".join(s(a) for a in argv) + s("monotonic") + uv(100) + uv(0)
    p += sv(-1) + s("")
    return chunk(HEADER, p)


def names(entries):
    """entries: (id, kind, category, name) each."""
    p = uv(len(entries))
    for nid, kind, cat, name in entries:
        p += uv(nid) + bytes([kind, cat]) + s(name) + s("") + s("") + uv(0)
    return chunk(NAMES, p)


def events(records, tid=1, base=0):
    return chunk(EVENTS, uv(tid) + uv(0) + uv(base) + b"".join(records))


def span(name, begin_delta, dur, depth=0):
    return bytes([SPAN]) + uv(name) + uv(depth) + sv(begin_delta) + uv(dur)


def span_meta(key, value):
    return bytes([SPAN_META]) + uv(key) + uv(value)


def span_units(name, n):
    return bytes([SPAN_UNITS]) + uv(name) + uv(n)


def step(delta):
    return bytes([STEP]) + sv(delta)


def meta(pairs):
    return chunk(META, uv(len(pairs)) + b"".join(s(k) + s(v)
                                                 for k, v in pairs))


def lines(function, file, first, rows):
    """A LINES chunk: rows are (line, hits, total_ns, exclusive_ns,
    source)."""
    p = s(function) + s(file) + uv(first) + uv(len(rows))
    for line, hits, total, excl, src in rows:
        p += uv(line) + uv(hits) + uv(total) + uv(excl) + s(src)
    return chunk(LINES, p)


def sources(names_available):
    """A SOURCES chunk: names_available is [(source, available, reason)]."""
    p = uv(len(names_available))
    for name, ok, why in names_available:
        p += s(name) + bytes([1 if ok else 0]) + s(why)
    return chunk(SOURCES, p)


def samples(base_ns, rows):
    """A SAMPLES chunk: rows are (subject, id, delta_ns, [(measure id,
    value)]), each measure valid."""
    p = uv(base_ns)
    for subject, sid, delta, measures in rows:
        p += bytes([subject]) + uv(sid) + uv(0) + sv(delta) + uv(len(measures))
        for mid, value in measures:
            p += uv(mid) + bytes([0]) + struct.pack("<d", value)
    return chunk(SAMPLES, p)


def end(end_ns):
    return chunk(END, uv(end_ns) + uv(0) + uv(0) + uv(0) + uv(0))


def profile(*chunks):
    return FILE_MAGIC + struct.pack("<HHI", 1, 4, 0) + b"".join(chunks)


def rank_profile(rank, world, collectives, pid=None, seq0=0, extra=()):
    """A rank's profile: collectives all-reduces over the group "world"
    (seq seq0, seq0 + 1, ...), 1 ms apart, each 100 µs; then END. extra:
    more chunks before END."""
    ns = [(1, ZONE, CAT_COMM, "all_reduce"), (2, STRING, 0, "group"),
          (3, STRING, 0, "world"), (4, UNITS, 0, "seq"),
          (5, UNITS, 0, "bytes"), (6, ZONE, 0, "compute")]
    recs = []
    for i in range(collectives):
        recs.append(span(6, 1_000_000 if i else 0, 800_000))
        recs.append(span(1, 850_000, 100_000))
        recs.append(span_meta(2, 3) + span_units(4, seq0 + i) +
                    span_units(5, 4096))
    return profile(header(pid=pid or 100 + rank, rank=rank, world=world),
                   names(ns), events(recs), *extra,
                   end(collectives * 1_000_000 + 1))
