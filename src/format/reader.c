/* Streaming, validating reader of profile files: see reader.h and
 * docs/format.md.
 *
 * One parser runs over a byte source that is either a file, read through a
 * buffer holding at least the chunk being parsed, or bytes already in memory.
 * The parser only moves forward, so the file buffer only needs to hold the
 * chunk being looked at: it grows to at most twice the largest chunk met
 * (chunks are capped at 16 MiB). */
#include "reader.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/base.h"
#include "mlprof.h"
#include "wire.h"

typedef struct {
  int fd;              /* -1: every byte is in memory already */
  const uint8_t *base; /* the byte at offset `off` of the input */
  uint64_t off;
  size_t avail; /* bytes at base */
  int eof;      /* nothing follows base[avail - 1] */
  uint8_t *buf; /* file input: owned buffer behind base */
  size_t cap;
  int errnum; /* errno of a failed read */
} source;

#define SOURCE_FIRST_CAP (64u << 10)
#define SCAN_WINDOW (64u << 10)

/* Moves the input on to pos, past the bytes held: those between are not
 * wanted. A file is seeked; a pipe is read through. Returns 0 (pos may then
 * still be past the end of the input), MLPROF_EIO or MLPROF_ENOMEM. */
static int source_jump(source *s, uint64_t pos) {
  if (s->eof) return 0;
  if (lseek(s->fd, (off_t)pos, SEEK_SET) == (off_t)pos) {
    s->off = pos;
    s->avail = 0;
    return 0;
  }
  while (s->off + s->avail < pos && !s->eof) {
    s->off += s->avail;
    s->avail = 0;
    if (mlprof__grow(&s->buf, &s->cap, SOURCE_FIRST_CAP, 1))
      return MLPROF_ENOMEM;
    s->base = s->buf;
    uint64_t left = pos - s->off;
    ssize_t r = read(s->fd, s->buf, left < s->cap ? (size_t)left : s->cap);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      s->errnum = errno;
      return MLPROF_EIO;
    }
    if (r == 0) s->eof = 1;
    s->avail = (size_t)r;
  }
  return 0;
}

/* Points *p at offset pos of the input and returns how many of the n bytes
 * wanted from there are available: fewer only where the input ends. pos must
 * not be before the pos of an earlier call (bytes before it are dropped);
 * past the bytes held, those in between are passed over unread where the
 * input can seek. Returns MLPROF_EIO or MLPROF_ENOMEM on failure. */
static int64_t source_get(source *s, uint64_t pos, size_t n,
                          const uint8_t **p) {
  if (pos > s->off + s->avail) {
    int rc = source_jump(s, pos);
    if (rc) return rc;
    if (pos > s->off + s->avail) return 0; /* past the end */
  }
  size_t skip = (size_t)(pos - s->off);
  size_t have = s->avail - skip;
  if (have < n && !s->eof) {
    /* At least SOURCE_FIRST_CAP: the room is what one read() may fill. */
    if (mlprof__grow(&s->buf, &s->cap,
                     n > SOURCE_FIRST_CAP ? n : SOURCE_FIRST_CAP, 1))
      return MLPROF_ENOMEM;
    memmove(s->buf, s->buf + skip, have);
    s->base = s->buf;
    s->off = pos;
    s->avail = have;
    skip = 0;
    while (s->avail < n && !s->eof) {
      ssize_t r = read(s->fd, s->buf + s->avail, s->cap - s->avail);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        s->errnum = errno;
        return MLPROF_EIO;
      }
      if (r == 0) s->eof = 1;
      s->avail += (size_t)r;
    }
    have = s->avail;
  }
  *p = s->base + skip;
  return (int64_t)(have < n ? have : n);
}

typedef struct {
  source src;
  const mlprof__visitor *v;
  mlprof__read_report *rep;
  uint16_t major, minor;
  /* Announced name ids: open addressing on (id << 8 | kind), 0 = empty slot,
   * at most half full. Ids are 32-bit and need not be dense, so a table
   * indexed by id could be made huge by one hostile entry. */
  uint64_t *names;
  size_t names_cap, names_n;
  int names_shift;
  /* NUL-terminated copies of the strings handed to callbacks. */
  char *scratch;
  size_t scratch_cap;
  /* The chunk being parsed. */
  uint64_t chunk_off;
  const uint8_t *payload;
  uint16_t chunk_type;
  int bad; /* it is damaged: stop parsing it */
  int seen_header;
  /* Only HEADER, META and END chunks are read: the others are passed over
   * by their length, unchecked. */
  int meta_only;
  /* Only the chunks at these offsets are read (mlprof__read_fd_chunks). */
  const uint64_t *only;
  size_t nonly;
  /* Chunks that end by trusted_to had their CRCs checked by an earlier read
   * of the unchanged file (mlprof__read_file_again); from the file header
   * to checked_to, every chunk of this read was whole with its CRC right. */
  uint64_t trusted_to, checked_to;
  char why[200]; /* the latest problem, for a format error */
} reader;

static const char *const chunk_type_names[] = {
    "unknown", "HEADER",  "NAMES",   "THREAD", "EVENTS", "META",
    "END",     "SOURCES", "SAMPLES", "LINES",  "STACKS", "ALLOCS"};

static const char *const kind_names[] = {"zone", "counter", "unit", "string",
                                         "measure"};

static const char *chunk_type_name(uint16_t type) {
  return type < sizeof chunk_type_names / sizeof chunk_type_names[0]
             ? chunk_type_names[type]
             : chunk_type_names[0];
}

/* Keeps the first problem of the read in the report; every problem in why. */
static void note(reader *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void note(reader *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->why, sizeof r->why, fmt, ap);
  va_end(ap);
  if (!r->rep->problem[0])
    snprintf(r->rep->problem, sizeof r->rep->problem, "%s", r->why);
}

/* Marks the current chunk damaged by the record or field at `at`. Returns 0
 * so that parsers can `return damage(...)` (0 means "no callback stopped"). */
static int damage(reader *r, const uint8_t *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int damage(reader *r, const uint8_t *at, const char *fmt, ...) {
  char what[120];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  r->bad = 1;
  note(r, "damaged %s chunk at byte %llu: %s (byte %llu)",
       chunk_type_name(r->chunk_type), (unsigned long long)r->chunk_off, what,
       (unsigned long long)(r->chunk_off + MLPROF__CHUNK_HEADER_SIZE +
                            (uint64_t)(at - r->payload)));
  return 0;
}

static inline size_t name_slot(const reader *r, uint64_t id) {
  return (size_t)((id * 0x9E3779B97F4A7C15ull) >> r->names_shift);
}

/* The kind of an announced id, or -1. */
static inline int name_kind(const reader *r, uint64_t id) {
  if (id == 0 || id > UINT32_MAX) return -1;
  size_t mask = r->names_cap - 1;
  for (size_t i = name_slot(r, id);; i = (i + 1) & mask) {
    uint64_t e = r->names[i];
    if (!e) return -1;
    if (e >> 8 == id) return (int)(e & 0xff);
  }
}

static void name_put(reader *r, uint64_t id, uint8_t kind) {
  size_t mask = r->names_cap - 1, i = name_slot(r, id);
  while (r->names[i]) i = (i + 1) & mask;
  r->names[i] = id << 8 | kind;
}

static int names_init(reader *r, size_t cap, int shift) {
  r->names = calloc(cap, sizeof *r->names);
  if (!r->names) return MLPROF_ENOMEM;
  r->names_cap = cap;
  r->names_shift = shift;
  return 0;
}

/* Adds an id not yet announced. */
static int name_add(reader *r, uint64_t id, uint8_t kind) {
  if (2 * (r->names_n + 1) > r->names_cap) {
    uint64_t *old = r->names;
    size_t old_cap = r->names_cap;
    if (names_init(r, old_cap * 2, r->names_shift - 1)) {
      r->names = old;
      return MLPROF_ENOMEM;
    }
    for (size_t i = 0; i < old_cap; i++)
      if (old[i]) name_put(r, old[i] >> 8, (uint8_t)old[i]);
    free(old);
  }
  name_put(r, id, kind);
  r->names_n++;
  return 0;
}

/* A record refers to `id`, which is not announced as a `want` name. An id
 * never announced lost its entry to a damaged NAMES chunk (or is damage
 * itself): it is announced here as "name #ID" so that its records are kept,
 * unnamed. An id of another kind, or out of range, damages the chunk.
 * Returns 0 or a callback's value; r->bad tells damage. */
static int lost_name(reader *r, const uint8_t *rec, uint64_t id, int want) {
  if (id == 0 || id > UINT32_MAX)
    return damage(r, rec, "name id %llu out of range", (unsigned long long)id);
  int kind = name_kind(r, id);
  if (kind >= 0)
    return damage(r, rec, "name id %llu is a %s name, not a %s name",
                  (unsigned long long)id, kind_names[kind], kind_names[want]);
  int rc = name_add(r, id, (uint8_t)want);
  if (rc) return rc;
  r->rep->lost_names++;
  note(r, "name id %llu was never announced: shown as \"name #%llu\"",
       (unsigned long long)id, (unsigned long long)id);
  char text[32];
  mlprof__name n = {.id = (uint32_t)id,
                    .kind = (uint8_t)want,
                    .name = text,
                    .function = "",
                    .file = ""};
  n.name_len =
      (size_t)snprintf(text, sizeof text, "name #%llu", (unsigned long long)id);
  return r->v->name ? r->v->name(r->v->ud, &n) : 0;
}

static inline int need_name(reader *r, const uint8_t *rec, uint64_t id,
                            int want) {
  return name_kind(r, id) == want ? 0 : lost_name(r, rec, id, want);
}

static int scratch_reserve(reader *r, size_t n) {
  return mlprof__grow(&r->scratch, &r->scratch_cap, n, 1);
}

/* Copies a string field to *w with a NUL; the caller reserved the room. */
static const char *copy_str(char **w, const char *s, size_t n) {
  char *d = *w;
  memcpy(d, s, n);
  d[n] = '\0';
  *w = d + n + 1;
  return d;
}

/* Chunk parsers. Each returns 0, or the non-zero value of a callback (or an
 * allocation error) that ends the read. Damage sets r->bad and returns 0. */

static int parse_header(reader *r, mlprof__cursor *c) {
  mlprof__header h = {.version_major = r->major, .version_minor = r->minor};
  size_t hlen, elen, clen;
  h.pid = mlprof__get_uv(c);
  h.ppid = mlprof__get_uv(c);
  h.start_wall_ns = mlprof__get_uv(c);
  h.start_mono_ns = mlprof__get_uv(c);
  h.rank = mlprof__get_sv(c);
  h.world_size = mlprof__get_sv(c);
  const char *host = mlprof__get_str(c, &hlen);
  const char *exe = mlprof__get_str(c, &elen);
  uint64_t argc = mlprof__get_uv(c);
  if (c->err) return damage(r, c->p, "field cut short");
  /* Each argument takes at least its length byte: this bounds argc. */
  if (argc > (uint64_t)(c->end - c->p))
    return damage(r, c->p, "argc %llu larger than the chunk",
                  (unsigned long long)argc);
  size_t room = (size_t)(c->end - r->payload) + (size_t)argc + 4;
  int rc = scratch_reserve(r, room);
  if (rc) return rc;
  const char **argv = malloc((argc ? argc : 1) * sizeof *argv);
  if (!argv) return MLPROF_ENOMEM;
  char *w = r->scratch;
  h.hostname = copy_str(&w, host, hlen);
  h.exe = copy_str(&w, exe, elen);
  for (uint64_t i = 0; i < argc; i++) {
    size_t alen;
    const char *a = mlprof__get_str(c, &alen);
    if (c->err) break;
    argv[i] = copy_str(&w, a, alen);
  }
  const char *clk = mlprof__get_str(c, &clen);
  uint64_t flush = mlprof__get_uv(c);
  uint64_t seq = c->p < c->end && !c->err ? mlprof__get_uv(c) : 0;  /* 1.2 */
  h.local_rank = c->p < c->end && !c->err ? mlprof__get_sv(c) : -1; /* 1.3 */
  size_t jlen = 0;
  const char *job = c->p < c->end && !c->err ? mlprof__get_str(c, &jlen) : "";
  if (c->err)
    rc = damage(r, c->p, "field cut short");
  else if (flush > UINT32_MAX || seq > UINT32_MAX)
    rc = damage(r, c->p, "flush interval or exec number out of range");
  else {
    h.clock = copy_str(&w, clk, clen);
    h.job_id = copy_str(&w, job, jlen);
    h.argc = (uint32_t)argc;
    h.argv = argv;
    h.flush_interval_ms = (uint32_t)flush;
    h.exec_seq = (uint32_t)seq;
    r->seen_header = 1;
    if (r->v->header) rc = r->v->header(r->v->ud, &h);
  }
  free(argv);
  return rc;
}

static int parse_names(reader *r, mlprof__cursor *c) {
  uint64_t count = mlprof__get_uv(c);
  if (c->err) return damage(r, c->p, "count cut short");
  int rc = scratch_reserve(r, (size_t)(c->end - c->p) + 3);
  if (rc) return rc;
  for (uint64_t i = 0; i < count; i++) {
    const uint8_t *rec = c->p;
    mlprof__name n = {0};
    size_t flen, filen;
    uint64_t id = mlprof__get_uv(c);
    n.kind = mlprof__get_u8(c);
    n.category = mlprof__get_u8(c);
    const char *name = mlprof__get_str(c, &n.name_len);
    const char *fn = mlprof__get_str(c, &flen);
    const char *file = mlprof__get_str(c, &filen);
    uint64_t line = mlprof__get_uv(c);
    if (c->err) return damage(r, rec, "name entry cut short");
    if (id == 0 || id > UINT32_MAX)
      return damage(r, rec, "name id %llu out of range",
                    (unsigned long long)id);
    if (line > UINT32_MAX) return damage(r, rec, "line out of range");
    /* A kind from a newer minor version: no record this reader knows can
     * refer to it, so it is left out. */
    if (n.kind > MLPROF__NAME_MEASURE) continue;
    if (name_kind(r, id) >= 0)
      return damage(r, rec, "name id %llu announced twice",
                    (unsigned long long)id);
    if ((rc = name_add(r, id, n.kind))) return rc;
    /* Consumers index tables by category: an unknown one reads as none. */
    if (n.category >= MLPROF_CAT_COUNT) n.category = MLPROF_CAT_NONE;
    char *w = r->scratch;
    n.id = (uint32_t)id;
    n.name = copy_str(&w, name, n.name_len);
    n.function = copy_str(&w, fn, flen);
    n.file = copy_str(&w, file, filen);
    n.line = (uint32_t)line;
    if (r->v->name && (rc = r->v->name(r->v->ud, &n))) return rc;
  }
  return 0;
}

static int parse_thread(reader *r, mlprof__cursor *c) {
  size_t len;
  uint64_t tid = mlprof__get_uv(c);
  const char *name = mlprof__get_str(c, &len);
  if (c->err) return damage(r, c->p, "field cut short");
  if (tid > UINT32_MAX) return damage(r, r->payload, "thread id out of range");
  int rc = scratch_reserve(r, len + 1);
  if (rc) return rc;
  char *w = r->scratch;
  copy_str(&w, name, len);
  return r->v->thread ? r->v->thread(r->v->ud, (uint32_t)tid, r->scratch, len)
                      : 0;
}

static int parse_meta(reader *r, mlprof__cursor *c) {
  uint64_t count = mlprof__get_uv(c);
  if (c->err) return damage(r, c->p, "count cut short");
  int rc = scratch_reserve(r, (size_t)(c->end - c->p) + 2);
  if (rc) return rc;
  for (uint64_t i = 0; i < count; i++) {
    const uint8_t *rec = c->p;
    size_t klen, vlen;
    const char *key = mlprof__get_str(c, &klen);
    const char *value = mlprof__get_str(c, &vlen);
    if (c->err) return damage(r, rec, "entry cut short");
    char *w = r->scratch;
    const char *k = copy_str(&w, key, klen);
    const char *val = copy_str(&w, value, vlen);
    if (r->v->meta && (rc = r->v->meta(r->v->ud, k, klen, val, vlen)))
      return rc;
  }
  return 0;
}

static int parse_end(reader *r, mlprof__cursor *c) {
  uint64_t end_ns = mlprof__get_uv(c);
  uint64_t dropped = mlprof__get_uv(c);
  uint64_t unmatched = mlprof__get_uv(c);
  if (c->err) return damage(r, c->p, "field cut short");
  if (end_ns > INT64_MAX) return damage(r, r->payload, "time out of range");
  /* Since 1.2: how the process ended, and its status. */
  uint64_t how = MLPROF__END_SHUTDOWN, status = 0;
  if (c->p < c->end) {
    how = mlprof__get_uv(c);
    status = mlprof__get_uv(c);
    if (c->err || status > INT32_MAX)
      return damage(r, c->p, "end status cut short or out of range");
  }
  if (end_ns > r->rep->last_ns) r->rep->last_ns = end_ns;
  r->rep->clean_end = 1;
  r->rep->end_how = how > MLPROF__END_SIGNAL ? MLPROF__END_SHUTDOWN : (int)how;
  r->rep->end_status = (int)status;
  return r->v->end ? r->v->end(r->v->ud, end_ns, dropped, unmatched) : 0;
}

/* Times stay in [0, INT64_MAX]: a record whose time leaves that range is
 * damage (true profiles start at 0 and last far less than 292 years). */
static inline int step_time(int64_t *t, int64_t delta) {
  return !__builtin_add_overflow(*t, delta, t) && *t >= 0;
}

/* The hot loop: one EVENTS chunk holds most of a profile's bytes. */
static int parse_events(reader *r, mlprof__cursor *c) {
  const mlprof__visitor *v = r->v;
  void *ud = v->ud;
  uint64_t tid64 = mlprof__get_uv(c);
  uint64_t dropped = mlprof__get_uv(c);
  uint64_t base = mlprof__get_uv(c);
  if (c->err) return damage(r, c->p, "field cut short");
  if (tid64 > UINT32_MAX || base > INT64_MAX)
    return damage(r, r->payload, "thread id or base time out of range");
  uint32_t tid = (uint32_t)tid64;
  int64_t t = (int64_t)base;
  mlprof__read_report *rep = r->rep;
  int rc = v->events ? v->events(ud, tid, dropped) : 0;
  while (!rc && c->p < c->end) {
    const uint8_t *rec = c->p;
    uint8_t tag = *c->p++;
    switch (tag) {
      case MLPROF__REC_SPAN: {
        uint64_t name = mlprof__get_uv(c);
        uint64_t depth = mlprof__get_uv(c);
        int64_t delta = mlprof__get_sv(c);
        uint64_t dur = mlprof__get_uv(c);
        if (c->err) goto cut;
        if ((rc = need_name(r, rec, name, MLPROF__NAME_ZONE)) || r->bad)
          return rc;
        if (depth > UINT32_MAX) goto range;
        if (!step_time(&t, delta) || dur > (uint64_t)(INT64_MAX - t))
          goto range;
        uint64_t b = (uint64_t)t, e = b + dur;
        if (e > rep->last_ns) rep->last_ns = e;
        if (v->span)
          rc = v->span(ud, tid, (uint32_t)name, (uint32_t)depth, b, e);
        break;
      }
      case MLPROF__REC_GAUGE: {
        uint64_t name = mlprof__get_uv(c);
        int64_t delta = mlprof__get_sv(c);
        double val = mlprof__get_f64(c);
        if (c->err) goto cut;
        if ((rc = need_name(r, rec, name, MLPROF__NAME_GAUGE)) || r->bad)
          return rc;
        if (!step_time(&t, delta)) goto range;
        if ((uint64_t)t > rep->last_ns) rep->last_ns = (uint64_t)t;
        if (v->counter)
          rc = v->counter(ud, tid, (uint32_t)name, (uint64_t)t, val);
        break;
      }
      case MLPROF__REC_UNITS: {
        uint64_t name = mlprof__get_uv(c);
        int64_t delta = mlprof__get_sv(c);
        uint64_t n = mlprof__get_uv(c);
        if (c->err) goto cut;
        if ((rc = need_name(r, rec, name, MLPROF__NAME_UNITS)) || r->bad)
          return rc;
        if (!step_time(&t, delta)) goto range;
        if ((uint64_t)t > rep->last_ns) rep->last_ns = (uint64_t)t;
        if (v->units) rc = v->units(ud, tid, (uint32_t)name, (uint64_t)t, n);
        break;
      }
      case MLPROF__REC_SPAN_META: {
        uint64_t key = mlprof__get_uv(c);
        uint64_t val = mlprof__get_uv(c);
        if (c->err) goto cut;
        if ((rc = need_name(r, rec, key, MLPROF__NAME_STRING)) || r->bad)
          return rc;
        if ((rc = need_name(r, rec, val, MLPROF__NAME_STRING)) || r->bad)
          return rc;
        if (v->span_meta)
          rc = v->span_meta(ud, tid, (uint32_t)key, (uint32_t)val);
        break;
      }
      case MLPROF__REC_SPAN_UNITS: {
        uint64_t name = mlprof__get_uv(c);
        uint64_t n = mlprof__get_uv(c);
        if (c->err) goto cut;
        if ((rc = need_name(r, rec, name, MLPROF__NAME_UNITS)) || r->bad)
          return rc;
        if (v->span_units) rc = v->span_units(ud, tid, (uint32_t)name, n);
        break;
      }
      case MLPROF__REC_STEP: {
        int64_t delta = mlprof__get_sv(c);
        if (c->err) goto cut;
        if (!step_time(&t, delta)) goto range;
        if ((uint64_t)t > rep->last_ns) rep->last_ns = (uint64_t)t;
        if (v->step) rc = v->step(ud, tid, (uint64_t)t);
        break;
      }
      case MLPROF__REC_STEP_END: {
        int64_t delta = mlprof__get_sv(c);
        if (c->err) goto cut;
        if (!step_time(&t, delta)) goto range;
        if ((uint64_t)t > rep->last_ns) rep->last_ns = (uint64_t)t;
        if (v->step_end) rc = v->step_end(ud, tid, (uint64_t)t);
        break;
      }
      case MLPROF__REC_OPEN: {
        uint64_t name = mlprof__get_uv(c);
        uint64_t depth = mlprof__get_uv(c);
        int64_t delta = mlprof__get_sv(c);
        if (c->err) goto cut;
        if ((rc = need_name(r, rec, name, MLPROF__NAME_ZONE)) || r->bad)
          return rc;
        if (depth > UINT32_MAX) goto range;
        if (!step_time(&t, delta)) goto range;
        if ((uint64_t)t > rep->last_ns) rep->last_ns = (uint64_t)t;
        if (v->open)
          rc = v->open(ud, tid, (uint32_t)name, (uint32_t)depth, (uint64_t)t);
        break;
      }
      default:
        return damage(r, rec, "unknown record tag %u", tag);
    }
    continue;
  cut:
    return damage(r, rec, "record cut short");
  range:
    return damage(r, rec, "depth or time out of range");
  }
  return rc;
}

static int parse_allocs(reader *r, mlprof__cursor *c) {
  const mlprof__visitor *v = r->v;
  uint64_t tid64 = mlprof__get_uv(c);
  uint64_t base = mlprof__get_uv(c);
  if (c->err) return damage(r, c->p, "field cut short");
  if (tid64 > UINT32_MAX || base > INT64_MAX)
    return damage(r, r->payload, "thread id or base time out of range");
  int64_t t = (int64_t)base;
  int rc = 0;
  while (!rc && c->p < c->end) {
    const uint8_t *rec = c->p;
    uint8_t tag = *c->p++;
    int64_t delta = mlprof__get_sv(c);
    if (tag == MLPROF__ALLOC_ALLOC) {
      mlprof__alloc a = {.tid = (uint32_t)tid64};
      a.size = mlprof__get_uv(c);
      a.weight = mlprof__get_uv(c);
      a.addr = mlprof__get_uv(c);
      uint64_t zone = mlprof__get_uv(c);
      a.stack = mlprof__get_uv(c);
      if (c->err) return damage(r, rec, "record cut short");
      if (zone && ((rc = need_name(r, rec, zone, MLPROF__NAME_ZONE)) || r->bad))
        return rc;
      if (!step_time(&t, delta)) return damage(r, rec, "time out of range");
      a.zone = (uint32_t)zone;
      a.t = (uint64_t)t;
      if (a.t > r->rep->last_ns) r->rep->last_ns = a.t;
      if (v->alloc) rc = v->alloc(v->ud, &a);
    } else if (tag == MLPROF__ALLOC_FREE) {
      uint64_t addr = mlprof__get_uv(c);
      if (c->err) return damage(r, rec, "record cut short");
      if (!step_time(&t, delta)) return damage(r, rec, "time out of range");
      if ((uint64_t)t > r->rep->last_ns) r->rep->last_ns = (uint64_t)t;
      if (v->alloc_free)
        rc = v->alloc_free(v->ud, (uint32_t)tid64, (uint64_t)t, addr);
    } else if (tag == MLPROF__ALLOC_FOLDED) {
      mlprof__alloc_sum a = {.tid = (uint32_t)tid64};
      uint64_t zone = mlprof__get_uv(c);
      a.stack = mlprof__get_uv(c);
      a.count = mlprof__get_uv(c);
      a.size = mlprof__get_uv(c);
      a.weight = mlprof__get_uv(c);
      a.var = mlprof__get_uv(c);
      if (c->err) return damage(r, rec, "record cut short");
      if (!a.count) return damage(r, rec, "folded allocations counting none");
      if (zone && ((rc = need_name(r, rec, zone, MLPROF__NAME_ZONE)) || r->bad))
        return rc;
      if (!step_time(&t, delta)) return damage(r, rec, "time out of range");
      a.zone = (uint32_t)zone;
      a.t = (uint64_t)t;
      if (a.t > r->rep->last_ns) r->rep->last_ns = a.t;
      if (v->alloc_sum) rc = v->alloc_sum(v->ud, &a);
    } else {
      return damage(r, rec, "unknown allocation record tag %u", tag);
    }
  }
  return rc;
}

static int parse_sources(reader *r, mlprof__cursor *c) {
  uint64_t count = mlprof__get_uv(c);
  if (c->err) return damage(r, c->p, "count cut short");
  int rc = scratch_reserve(r, (size_t)(c->end - c->p) + 2);
  if (rc) return rc;
  for (uint64_t i = 0; i < count; i++) {
    const uint8_t *rec = c->p;
    size_t nlen, rlen;
    const char *name = mlprof__get_str(c, &nlen);
    uint8_t available = mlprof__get_u8(c);
    const char *reason = mlprof__get_str(c, &rlen);
    if (c->err) return damage(r, rec, "entry cut short");
    char *w = r->scratch;
    const char *n = copy_str(&w, name, nlen);
    const char *why = copy_str(&w, reason, rlen);
    if (r->v->source &&
        (rc = r->v->source(r->v->ud, n, nlen, available != 0, why, rlen)))
      return rc;
  }
  return 0;
}

static int parse_samples(reader *r, mlprof__cursor *c) {
  uint64_t base = mlprof__get_uv(c);
  if (c->err) return damage(r, c->p, "field cut short");
  if (base > INT64_MAX) return damage(r, r->payload, "base time out of range");
  int64_t t = (int64_t)base;
  int rc = 0;
  mlprof__sample_measure m[256];
  while (c->p < c->end) {
    const uint8_t *rec = c->p;
    mlprof__sample_row row = {.m = m};
    row.subject = mlprof__get_u8(c);
    row.id = mlprof__get_uv(c);
    uint64_t label = mlprof__get_uv(c);
    int64_t delta = mlprof__get_sv(c);
    uint64_t n = mlprof__get_uv(c);
    if (c->err) return damage(r, rec, "sample row cut short");
    if (!step_time(&t, delta)) return damage(r, rec, "time out of range");
    if (n > sizeof m / sizeof m[0])
      return damage(r, rec, "%llu measures in one row", (unsigned long long)n);
    if (label &&
        ((rc = need_name(r, rec, label, MLPROF__NAME_STRING)) || r->bad))
      return rc;
    for (uint64_t i = 0; i < n; i++) {
      uint64_t name = mlprof__get_uv(c);
      uint8_t state = mlprof__get_u8(c);
      uint64_t reason = 0;
      double value = 0;
      if (state == MLPROF__MEASURE_VALID)
        value = mlprof__get_f64(c);
      else
        reason = mlprof__get_uv(c);
      if (c->err) return damage(r, rec, "sample row cut short");
      if (state > MLPROF__MEASURE_ABSENT)
        return damage(r, rec, "measure state %u", state);
      if ((rc = need_name(r, rec, name, MLPROF__NAME_MEASURE)) || r->bad)
        return rc;
      if (state == MLPROF__MEASURE_ABSENT &&
          ((rc = need_name(r, rec, reason, MLPROF__NAME_STRING)) || r->bad))
        return rc;
      m[i] = (mlprof__sample_measure){(uint32_t)name,
                                      state == MLPROF__MEASURE_VALID, value,
                                      (uint32_t)reason};
    }
    row.label = (uint32_t)label;
    row.t = (uint64_t)t;
    row.n = (uint32_t)n;
    if (row.t > r->rep->last_ns) r->rep->last_ns = row.t;
    rc = r->v->sample ? r->v->sample(r->v->ud, &row) : 0;
    if (rc) return rc;
  }
  return 0;
}

static int parse_lines(reader *r, mlprof__cursor *c) {
  /* Every string takes at least its length byte, so the payload's size
   * bounds both the copied strings and the rows. */
  size_t plen = (size_t)(c->end - c->p);
  int rc = scratch_reserve(r, 2 * plen + 2);
  if (rc) return rc;
  char *w = r->scratch;
  size_t flen, filelen;
  const char *f = mlprof__get_str(c, &flen);
  const char *file = mlprof__get_str(c, &filelen);
  uint64_t first = mlprof__get_uv(c), n = mlprof__get_uv(c);
  if (c->err) return damage(r, c->p, "field cut short");
  if (first > UINT32_MAX || n > (uint64_t)(c->end - c->p) / 5)
    return damage(r, r->payload, "line or count out of range");
  mlprof__line_table t = {copy_str(&w, f, flen), copy_str(&w, file, filelen),
                          (uint32_t)first, (uint32_t)n, NULL};
  mlprof__line_row *rows = calloc(n ? n : 1, sizeof *rows);
  if (!rows) return MLPROF_ENOMEM;
  for (uint64_t i = 0; i < n; i++) {
    const uint8_t *rec = c->p;
    uint64_t line = mlprof__get_uv(c);
    rows[i].hits = mlprof__get_uv(c);
    rows[i].total_ns = mlprof__get_uv(c);
    rows[i].exclusive_ns = mlprof__get_uv(c);
    size_t slen;
    const char *src = mlprof__get_str(c, &slen);
    if (c->err || line > UINT32_MAX) {
      free(rows);
      return damage(r, rec, "line cut short or out of range");
    }
    rows[i].line = (uint32_t)line;
    rows[i].source = copy_str(&w, src, slen);
  }
  t.rows = rows;
  rc = r->v->lines ? r->v->lines(r->v->ud, &t) : 0;
  free(rows);
  return rc;
}

static int stack_id(reader *r, const uint8_t *rec, uint64_t id, int zero_ok) {
  if (id > UINT32_MAX || (!zero_ok && id == 0))
    return damage(r, rec, "stack id %llu out of range", (unsigned long long)id);
  return 0;
}

static int parse_stacks(reader *r, mlprof__cursor *c) {
  /* Strings are copied with a NUL each: twice the payload bounds them. */
  size_t plen = (size_t)(c->end - c->p);
  int rc = scratch_reserve(r, 2 * plen + 2);
  if (rc) return rc;
  uint64_t t = 0;
  while (c->p < c->end && !r->bad) {
    const uint8_t *rec = c->p;
    char *w = r->scratch;
    uint8_t kind = mlprof__get_u8(c);
    uint64_t id = 0, a = 0, b = 0;
    if (kind != MLPROF__STK_SAMPLE) id = mlprof__get_uv(c);
    switch (kind) {
      case MLPROF__STK_FUNC: {
        size_t fl, nl;
        const char *file = mlprof__get_str(c, &fl);
        const char *fn = mlprof__get_str(c, &nl);
        a = mlprof__get_uv(c);
        if (c->err) return damage(r, rec, "function cut short");
        if (stack_id(r, rec, id, 0) || r->bad) return 0;
        if (a > UINT32_MAX) return damage(r, rec, "first line out of range");
        mlprof__stack_func f = {(uint32_t)id, copy_str(&w, file, fl),
                                copy_str(&w, fn, nl), (uint32_t)a};
        rc = r->v->stack_func ? r->v->stack_func(r->v->ud, &f) : 0;
        break;
      }
      case MLPROF__STK_FRAME:
      case MLPROF__STK_NATIVE: {
        mlprof__stack_frame f = {
            .id = (uint32_t)id, .module = "", .symbol = ""};
        if (kind == MLPROF__STK_FRAME) {
          a = mlprof__get_uv(c);
          b = mlprof__get_uv(c);
          if (c->err) return damage(r, rec, "frame cut short");
          if (a > UINT32_MAX || b > UINT32_MAX)
            return damage(r, rec, "frame out of range");
          f.func = (uint32_t)a;
          f.line = (uint32_t)b;
        } else {
          size_t ml, sl;
          f.native = 1;
          f.pc = mlprof__get_uv(c);
          const char *mod = mlprof__get_str(c, &ml);
          const char *sym = mlprof__get_str(c, &sl);
          f.offset = mlprof__get_uv(c);
          if (c->err) return damage(r, rec, "native frame cut short");
          f.module = copy_str(&w, mod, ml);
          f.symbol = copy_str(&w, sym, sl);
        }
        if (stack_id(r, rec, id, 0) || r->bad) return 0;
        rc = r->v->stack_frame ? r->v->stack_frame(r->v->ud, &f) : 0;
        break;
      }
      case MLPROF__STK_NODE:
        a = mlprof__get_uv(c);
        b = mlprof__get_uv(c);
        if (c->err) return damage(r, rec, "stack cut short");
        if (stack_id(r, rec, id, 0) || stack_id(r, rec, b, 0) || r->bad)
          return 0;
        if (a >= id) return damage(r, rec, "stack's parent not before it");
        rc = r->v->stack_node ? r->v->stack_node(r->v->ud, (uint32_t)id,
                                                 (uint32_t)a, (uint32_t)b)
                              : 0;
        break;
      case MLPROF__STK_SAMPLE: {
        int64_t dt = mlprof__get_sv(c);
        mlprof__stack_sample s = {0};
        uint64_t tid = mlprof__get_uv(c), stack = mlprof__get_uv(c);
        uint64_t flags = mlprof__get_uv(c);
        if (flags & MLPROF__SAMPLE_CPU_KNOWN) s.cpu_ns = mlprof__get_uv(c);
        if (c->err) return damage(r, rec, "sample cut short");
        if ((dt < 0 && 0 - (uint64_t)dt > t) ||
            (dt > 0 && (uint64_t)dt > INT64_MAX - t) || tid > UINT32_MAX ||
            flags > 31 || stack_id(r, rec, stack, 1) || r->bad)
          return r->bad ? 0 : damage(r, rec, "sample out of range");
        t += (uint64_t)dt;
        s.t = t;
        s.tid = (uint32_t)tid;
        s.stack = (uint32_t)stack;
        s.flags = (uint32_t)flags;
        if (t > r->rep->last_ns) r->rep->last_ns = t;
        rc = r->v->stack_sample ? r->v->stack_sample(r->v->ud, &s) : 0;
        break;
      }
      case MLPROF__STK_RATE:
        if (c->err || id == 0 || id > 1000000)
          return damage(r, rec, "stack sampling rate out of range");
        rc = r->v->stack_rate ? r->v->stack_rate(r->v->ud, (uint32_t)id) : 0;
        break;
      default:
        return damage(r, rec, "unknown stack record %u", kind);
    }
    if (rc) return rc;
  }
  return 0;
}

/* Parses one chunk whose length and CRC were checked. */
static int parse_chunk(reader *r, uint64_t off, const uint8_t *chunk,
                       uint32_t len) {
  mlprof__cursor c = {chunk + MLPROF__CHUNK_HEADER_SIZE,
                      chunk + MLPROF__CHUNK_HEADER_SIZE + len, 0};
  r->chunk_off = off;
  r->chunk_type = mlprof__get_u16(chunk + 4);
  r->payload = c.p;
  r->bad = 0;
  if (r->v->chunk) {
    int rc = r->v->chunk(r->v->ud, r->chunk_type, off,
                         MLPROF__CHUNK_HEADER_SIZE + len);
    if (rc) return rc;
  }
  switch (r->chunk_type) {
    case MLPROF__CHUNK_HEADER:
      if (r->seen_header) return damage(r, c.p, "a second HEADER chunk");
      return parse_header(r, &c);
    case MLPROF__CHUNK_NAMES:
      return parse_names(r, &c);
    case MLPROF__CHUNK_THREAD:
      return parse_thread(r, &c);
    case MLPROF__CHUNK_EVENTS:
      return parse_events(r, &c);
    case MLPROF__CHUNK_META:
      return parse_meta(r, &c);
    case MLPROF__CHUNK_END:
      return parse_end(r, &c);
    case MLPROF__CHUNK_SOURCES:
      return parse_sources(r, &c);
    case MLPROF__CHUNK_SAMPLES:
      return parse_samples(r, &c);
    case MLPROF__CHUNK_LINES:
      return parse_lines(r, &c);
    case MLPROF__CHUNK_STACKS:
      return parse_stacks(r, &c);
    case MLPROF__CHUNK_ALLOCS:
      return parse_allocs(r, &c);
    default: /* a chunk type from a newer minor version */
      return 0;
  }
}

enum { CHUNK_OK, CHUNK_CUT, CHUNK_BAD, CHUNK_NONE };

/* Looks at the chunk that should start at pos: CHUNK_OK with *chunk and *len
 * when it verifies, CHUNK_CUT when the input ends inside what looks like a
 * chunk, CHUNK_BAD (with *why) when it cannot be one (*chunk and *len set
 * too when only its CRC failed), CHUNK_NONE at the end of the input; or a
 * negative error. */
static int check_chunk(reader *r, uint64_t pos, const uint8_t **chunk,
                       uint32_t *len, const char **why) {
  const uint8_t *p;
  int64_t n = source_get(&r->src, pos, MLPROF__CHUNK_HEADER_SIZE, &p);
  if (n <= 0) return n < 0 ? (int)n : CHUNK_NONE;
  if (memcmp(p, MLPROF__CHUNK_MAGIC, n < 4 ? (size_t)n : 4)) {
    *why = "bad chunk magic";
    return CHUNK_BAD;
  }
  if (n < MLPROF__CHUNK_HEADER_SIZE) return CHUNK_CUT;
  uint32_t l = mlprof__get_u32(p + 8);
  if (l > MLPROF__CHUNK_MAX) {
    *why = "chunk length over 16 MiB";
    return CHUNK_BAD;
  }
  size_t want = MLPROF__CHUNK_HEADER_SIZE + (size_t)l;
  n = source_get(&r->src, pos, want, &p);
  if (n < 0) return (int)n;
  if ((size_t)n < want) return CHUNK_CUT;
  *chunk = p;
  *len = l;
  if (pos + want > r->trusted_to) {
    uint32_t crc = mlprof__crc32(0, p + 4, 8);
    crc = mlprof__crc32(crc, p + MLPROF__CHUNK_HEADER_SIZE, l);
    if (crc != mlprof__get_u32(p + 12)) {
      *why = "bad CRC";
      return CHUNK_BAD;
    }
  }
  if (pos == r->checked_to) r->checked_to = pos + want;
  return CHUNK_OK;
}

/* After the chunk at pos failed (st is CHUNK_BAD or CHUNK_CUT), scans for the
 * next chunk that verifies and accounts for the bytes in between. Returns 1
 * with *next set when one was found, 0 when the input ended first, or a
 * negative error. A chunk cut by the end of the input is a truncated tail,
 * unless a whole chunk follows it (then its length field was damaged). */
static int resync(reader *r, uint64_t pos, int st, const char *why,
                  uint64_t *next) {
  mlprof__read_report *rep = r->rep;
  uint64_t q = pos + 1, cut_at = st == CHUNK_CUT ? pos : UINT64_MAX;
  for (;;) {
    const uint8_t *p, *chunk;
    uint32_t len;
    const char *why2;
    int64_t n = source_get(&r->src, q, SCAN_WINDOW, &p);
    if (n < 0) return (int)n;
    if (n == 0) break;
    const uint8_t *m = memchr(p, MLPROF__CHUNK_MAGIC[0], (size_t)n);
    if (!m) {
      q += (uint64_t)n;
      continue;
    }
    q += (uint64_t)(m - p);
    int st2 = check_chunk(r, q, &chunk, &len, &why2);
    if (st2 < 0) return st2;
    if (st2 == CHUNK_OK) {
      rep->damaged_chunks++;
      rep->skipped_bytes += q - pos;
      note(r, "damaged chunk at byte %llu (%s): %llu bytes skipped",
           (unsigned long long)pos,
           st == CHUNK_CUT ? "length past the end of the file" : why,
           (unsigned long long)(q - pos));
      *next = q;
      return 1;
    }
    if (st2 == CHUNK_CUT && cut_at == UINT64_MAX) cut_at = q;
    q++;
  }
  /* q is now the size of the input. */
  if (cut_at == pos) {
    rep->truncated_bytes += q - pos;
    note(r,
         "truncated: the file ends inside the chunk at byte %llu "
         "(%llu bytes)",
         (unsigned long long)pos, (unsigned long long)(q - pos));
    return 0;
  }
  uint64_t skip_end = cut_at == UINT64_MAX ? q : cut_at;
  rep->damaged_chunks++;
  rep->skipped_bytes += skip_end - pos;
  rep->truncated_bytes += q - skip_end;
  note(r, "damaged chunk at byte %llu (%s): no whole chunk follows",
       (unsigned long long)pos, why);
  return 0;
}

/* Checks the file header. Returns 0 or MLPROF_EFORMAT with r->why set. */
static int check_file_header(reader *r, const uint8_t *p, int64_t n) {
  size_t magic_len = sizeof MLPROF__FILE_MAGIC - 1;
  if (n == 0) {
    note(r, "not an mlprof profile (empty file)");
    return MLPROF_EFORMAT;
  }
  if (memcmp(p, MLPROF__FILE_MAGIC,
             (size_t)n < magic_len ? (size_t)n : magic_len)) {
    note(r, "not an mlprof profile (bad magic)");
    return MLPROF_EFORMAT;
  }
  if (n < MLPROF__FILE_HEADER_SIZE) {
    note(r, "not an mlprof profile (the file ends inside its header)");
    return MLPROF_EFORMAT;
  }
  r->major = mlprof__get_u16(p + 8);
  r->minor = mlprof__get_u16(p + 10);
  if (r->major != MLPROF__FORMAT_MAJOR) {
    note(r, "profile format version %u is %s this mlprof (%d)", r->major,
         r->major > MLPROF__FORMAT_MAJOR ? "newer than" : "not supported by",
         MLPROF__FORMAT_MAJOR);
    return MLPROF_EFORMAT;
  }
  return 0;
}

/* The first chunk at pos is a HEADER whose CRC failed and len its verified
 * length. When the next chunk verifies (or the input ends there), only the
 * header's fields are lost: the profile is read with them unknown and
 * *taken is set. Returns 0, a callback's value or a negative error. */
static int damaged_header(reader *r, uint64_t pos, uint32_t len, int *taken) {
  const uint8_t *next;
  uint32_t next_len;
  const char *why;
  uint64_t after = pos + MLPROF__CHUNK_HEADER_SIZE + (uint64_t)len;
  int st = check_chunk(r, after, &next, &next_len, &why);
  if (st < 0) return st;
  if (st != CHUNK_OK && st != CHUNK_NONE) return 0;
  *taken = 1;
  static const char *const no_args[1];
  mlprof__header h = {.version_major = r->major,
                      .version_minor = r->minor,
                      .rank = -1,
                      .world_size = -1,
                      .local_rank = -1,
                      .job_id = "",
                      .hostname = "",
                      .exe = "",
                      .clock = "",
                      .argv = no_args,
                      .damaged = 1};
  r->seen_header = 1;
  r->rep->damaged_chunks++;
  note(r,
       "damaged HEADER chunk at byte %llu (bad CRC): the process's details "
       "are unknown",
       (unsigned long long)pos);
  return r->v->header ? r->v->header(r->v->ud, &h) : 0;
}

static int read_all(reader *r) {
  const uint8_t *p;
  int64_t n = source_get(&r->src, 0, MLPROF__FILE_HEADER_SIZE, &p);
  if (n < 0) return (int)n;
  int rc = check_file_header(r, p, n);
  if (rc) return rc;
  if ((rc = names_init(r, 16, 60))) return rc;
  uint64_t pos = MLPROF__FILE_HEADER_SIZE;
  r->checked_to = pos;
  for (;;) {
    const uint8_t *chunk = NULL;
    uint32_t len = 0;
    const char *why = "";
    if (r->meta_only && r->seen_header) {
      /* Most of a profile is EVENTS: passed over without a byte of it
       * read. A frame that does not look whole is checked below. */
      n = source_get(&r->src, pos, MLPROF__CHUNK_HEADER_SIZE, &p);
      if (n < 0) return (int)n;
      if (n == MLPROF__CHUNK_HEADER_SIZE &&
          !memcmp(p, MLPROF__CHUNK_MAGIC, 4) &&
          mlprof__get_u32(p + 8) <= MLPROF__CHUNK_MAX &&
          mlprof__get_u16(p + 4) != MLPROF__CHUNK_META &&
          mlprof__get_u16(p + 4) != MLPROF__CHUNK_END) {
        r->rep->clean_end = 0;
        pos += MLPROF__CHUNK_HEADER_SIZE + (uint64_t)mlprof__get_u32(p + 8);
        continue;
      }
    }
    int st = check_chunk(r, pos, &chunk, &len, &why);
    if (st < 0) return st;
    if (!r->seen_header && st == CHUNK_BAD && len &&
        mlprof__get_u16(chunk + 4) == MLPROF__CHUNK_HEADER) {
      int taken = 0;
      if ((rc = damaged_header(r, pos, len, &taken))) return rc;
      if (taken) {
        pos += MLPROF__CHUNK_HEADER_SIZE + (uint64_t)len;
        continue;
      }
    }
    if (!r->seen_header && st != CHUNK_OK) {
      if (st == CHUNK_NONE)
        note(r, "not an mlprof profile (the file ends before its HEADER)");
      else if (st == CHUNK_CUT)
        note(r, "not an mlprof profile (the file ends inside its HEADER)");
      else
        note(r, "not an mlprof profile (no HEADER chunk at byte %llu: %s)",
             (unsigned long long)pos, why);
      return MLPROF_EFORMAT;
    }
    if (st == CHUNK_NONE) return 0;
    if (st == CHUNK_OK) {
      if (!r->seen_header &&
          mlprof__get_u16(chunk + 4) != MLPROF__CHUNK_HEADER) {
        note(r,
             "not an mlprof profile (the first chunk is of type %u, not "
             "HEADER)",
             mlprof__get_u16(chunk + 4));
        return MLPROF_EFORMAT;
      }
      /* An END that other chunks follow (an exec that failed) ends
       * nothing. */
      r->rep->clean_end = 0;
      if ((rc = parse_chunk(r, pos, chunk, len))) return rc;
      if (!r->seen_header) {
        char why_header[sizeof r->why];
        memcpy(why_header, r->why, sizeof why_header);
        note(r, "not an mlprof profile (%s)", why_header);
        return MLPROF_EFORMAT;
      }
      if (r->bad)
        r->rep->damaged_chunks++;
      else
        r->rep->chunks++;
      pos += MLPROF__CHUNK_HEADER_SIZE + (uint64_t)len;
      continue;
    }
    if ((rc = resync(r, pos, st, why, &pos)) <= 0) return rc;
  }
}

/* Reads the chunks at r->only: each must verify. */
static int read_only(reader *r) {
  const uint8_t *p;
  int64_t n = source_get(&r->src, 0, MLPROF__FILE_HEADER_SIZE, &p);
  if (n < 0) return (int)n;
  int rc = check_file_header(r, p, n);
  if (rc || (rc = names_init(r, 16, 60))) return rc;
  r->seen_header = 1;
  for (size_t i = 0; i < r->nonly; i++) {
    const uint8_t *chunk;
    uint32_t len = 0;
    const char *why = "the file ends there";
    uint64_t pos = r->only[i];
    if (i && pos < r->only[i - 1] + MLPROF__CHUNK_HEADER_SIZE) {
      note(r, "chunk offsets out of order at byte %llu",
           (unsigned long long)pos);
      return MLPROF_EFORMAT;
    }
    int st = check_chunk(r, pos, &chunk, &len, &why);
    if (st < 0) return st;
    if (st != CHUNK_OK) {
      note(r, "no whole chunk at byte %llu (%s): the file changed",
           (unsigned long long)pos, st == CHUNK_BAD ? why : "cut short");
      return MLPROF_EFORMAT;
    }
    if ((rc = parse_chunk(r, pos, chunk, len))) return rc;
    if (r->bad)
      r->rep->damaged_chunks++;
    else
      r->rep->chunks++;
  }
  return 0;
}

/* The shared path of every entry point. err gets prefix + the reason. */
static int read_source(source *src, const char *prefix, int meta_only,
                       const uint64_t *only, size_t nonly, uint64_t trusted_to,
                       const mlprof__visitor *v, mlprof__read_report *rep,
                       char *err, size_t errlen) {
  static const mlprof__visitor no_visitor;
  mlprof__read_report local;
  reader r = {.src = *src,
              .v = v ? v : &no_visitor,
              .rep = rep ? rep : &local,
              .meta_only = meta_only,
              .only = only,
              .nonly = nonly,
              .trusted_to = trusted_to};
  memset(r.rep, 0, sizeof *r.rep);
  int rc = only ? read_only(&r) : read_all(&r);
  r.rep->mark.checked_to = r.checked_to;
  if (err && errlen) {
    err[0] = '\0';
    if (rc == MLPROF_EFORMAT)
      snprintf(err, errlen, "%s%s", prefix, r.why);
    else if (rc == MLPROF_EIO)
      snprintf(err, errlen, "%sread error: %s", prefix, strerror(r.src.errnum));
    else if (rc == MLPROF_ENOMEM)
      snprintf(err, errlen, "%sout of memory", prefix);
  }
  free(r.src.buf);
  free(r.names);
  free(r.scratch);
  return rc;
}

/* Both file entry points. err names the file: "PATH: reason". */
/* Reads the file at path; again: NULL, or the mark of an earlier read of
 * it (mlprof__read_file_again). */
static int read_path(const char *path, int meta_only,
                     const mlprof__read_mark *again, const mlprof__visitor *v,
                     mlprof__read_report *rep, char *err, size_t errlen) {
  char prefix[4096 + 3];
  snprintf(prefix, sizeof prefix, "%s: ", path);
  source src = {.fd = open(path, O_RDONLY | O_CLOEXEC)};
  if (src.fd < 0) {
    if (rep) memset(rep, 0, sizeof *rep);
    if (err && errlen) snprintf(err, errlen, "%s%s", prefix, strerror(errno));
    return MLPROF_EIO;
  }
  /* The file as it is before this read: a later read finds it unchanged
   * only if it is so still. */
  struct stat st;
  mlprof__read_mark was = {0};
  if (fstat(src.fd, &st) == 0)
    was = (mlprof__read_mark){.valid = 1,
                              .dev = (uint64_t)st.st_dev,
                              .ino = (uint64_t)st.st_ino,
                              .size = (uint64_t)st.st_size,
                              .mtime_s = (int64_t)st.st_mtim.tv_sec,
                              .mtime_ns = (int64_t)st.st_mtim.tv_nsec};
  uint64_t trusted = 0;
  if (again && again->valid && was.valid && again->dev == was.dev &&
      again->ino == was.ino && again->size == was.size &&
      again->mtime_s == was.mtime_s && again->mtime_ns == was.mtime_ns)
    trusted = again->checked_to;
  int rc = read_source(&src, prefix, meta_only, NULL, 0, trusted, v, rep, err,
                       errlen);
  if (rep) {
    was.checked_to = rep->mark.checked_to;
    rep->mark = was;
  }
  close(src.fd);
  return rc;
}

/* See reader.h. */
int mlprof__read_file(const char *path, const mlprof__visitor *v,
                      mlprof__read_report *rep, char *err, size_t errlen) {
  return read_path(path, 0, NULL, v, rep, err, errlen);
}

/* See reader.h. */
int mlprof__read_file_again(const char *path, const mlprof__read_mark *m,
                            const mlprof__visitor *v, mlprof__read_report *rep,
                            char *err, size_t errlen) {
  return read_path(path, 0, m, v, rep, err, errlen);
}

/* See reader.h. */
int mlprof__read_file_meta(const char *path, const mlprof__visitor *v,
                           mlprof__read_report *rep, char *err, size_t errlen) {
  return read_path(path, 1, NULL, v, rep, err, errlen);
}

/* See reader.h. */
int mlprof__read_mem(const uint8_t *data, size_t len, const mlprof__visitor *v,
                     mlprof__read_report *rep, char *err, size_t errlen) {
  static const uint8_t empty[1];
  source src = {.fd = -1, .base = data ? data : empty, .avail = len, .eof = 1};
  return read_source(&src, "", 0, NULL, 0, 0, v, rep, err, errlen);
}

/* See reader.h. */
int mlprof__read_fd_chunks(int fd, const uint64_t *offs, size_t n,
                           const mlprof__visitor *v, mlprof__read_report *rep,
                           char *err, size_t errlen) {
  static const uint64_t none[1];
  source src = {.fd = fd};
  if (lseek(fd, 0, SEEK_SET) != 0) {
    if (rep) memset(rep, 0, sizeof *rep);
    if (err && errlen) snprintf(err, errlen, "%s", strerror(errno));
    return MLPROF_EIO;
  }
  return read_source(&src, "", 0, n ? offs : none, n, 0, v, rep, err, errlen);
}

const char *mlprof__native_name(const mlprof__stack_frame *f, char *buf,
                                size_t cap) {
  if (f->symbol[0])
    snprintf(buf, cap, "%s", f->symbol);
  else if (f->module[0])
    snprintf(buf, cap, "0x%llx", (unsigned long long)f->offset);
  else
    snprintf(buf, cap, "[unknown]");
  return buf;
}
