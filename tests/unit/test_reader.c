/* The profile reader (format/reader.c) and job opening (model/job.c), driven
 * by profiles built here byte by byte with the wire.h encoders. */
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/reader.h"
#include "format/wire.h"
#include "mlprof.h"
#include "model/job.h"
#include "test.h"

/* A growable byte buffer: the profile builder writes into it. */
typedef struct {
  uint8_t *d;
  size_t n, cap;
} buf;

static void put(buf *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n) cap *= 2;
    b->d = realloc(b->d, cap);
    if (!b->d) abort();
    b->cap = cap;
  }
  if (n) memcpy(b->d + b->n, p, n);
  b->n += n;
}

static void put_u8(buf *b, uint8_t v) { put(b, &v, 1); }

static void put_uv(buf *b, uint64_t v) {
  uint8_t t[10];
  put(b, t, (size_t)(mlprof__put_uv(t, v) - t));
}

static void put_sv(buf *b, int64_t v) {
  uint8_t t[10];
  put(b, t, (size_t)(mlprof__put_sv(t, v) - t));
}

static void put_f64(buf *b, double v) { put(b, &v, 8); }

static void put_strn(buf *b, const char *s, size_t n) {
  put_uv(b, n);
  put(b, s, n);
}

static void put_str(buf *b, const char *s) { put_strn(b, s, strlen(s)); }

static void file_header(buf *f, uint16_t major, uint16_t minor) {
  uint8_t h[MLPROF__FILE_HEADER_SIZE] = {0};
  memcpy(h, MLPROF__FILE_MAGIC, 8);
  mlprof__put_u16(h + 8, major);
  mlprof__put_u16(h + 10, minor);
  put(f, h, sizeof h);
}

/* Appends a chunk holding payload p (then emptied); returns its offset. */
static size_t chunk(buf *f, uint16_t type, buf *p) {
  uint8_t h[MLPROF__CHUNK_HEADER_SIZE];
  memcpy(h, MLPROF__CHUNK_MAGIC, 4);
  mlprof__put_u16(h + 4, type);
  mlprof__put_u16(h + 6, 0);
  mlprof__put_u32(h + 8, (uint32_t)p->n);
  uint32_t crc = mlprof__crc32(0, h + 4, 8);
  mlprof__put_u32(h + 12, mlprof__crc32(crc, p->d, p->n));
  size_t off = f->n;
  put(f, h, sizeof h);
  put(f, p->d, p->n);
  p->n = 0;
  return off;
}

static void header_payload(buf *p, uint64_t pid, uint64_t ppid, uint64_t wall,
                           uint64_t mono, const char *host) {
  static const char *const argv[] = {"python3", "train.py", "--lr", "0.1"};
  put_uv(p, pid);
  put_uv(p, ppid);
  put_uv(p, wall);
  put_uv(p, mono);
  put_sv(p, 0);
  put_sv(p, 2);
  put_str(p, host);
  put_str(p, "/usr/bin/python3.11"); /* where the python3 link leads */
  put_uv(p, 4);
  for (int i = 0; i < 4; i++) put_str(p, argv[i]);
  put_str(p, "tsc");
  put_uv(p, 200);
}

static void name_entry(buf *p, uint64_t id, uint8_t kind, uint8_t cat,
                       const char *name, size_t len, const char *fn,
                       const char *file, uint64_t line) {
  put_uv(p, id);
  put_u8(p, kind);
  put_u8(p, cat);
  put_strn(p, name, len);
  put_str(p, fn);
  put_str(p, file);
  put_uv(p, line);
}

/* File header, HEADER and a NAMES chunk with ids 1..6:
 * 1 zone "forward", 2 counter "loss", 3 unit "tokens", 4 and 5 strings
 * "model" and "gpt", 6 zone "back\0ward" (9 bytes, holding a NUL).
 * Returns the offset of the NAMES chunk. */
static size_t profile_start(buf *f) {
  buf p = {0};
  file_header(f, MLPROF__FORMAT_MAJOR, MLPROF__FORMAT_MINOR);
  header_payload(&p, 4242, 1, 1700000000123456789ull, 5000000, "node1");
  chunk(f, MLPROF__CHUNK_HEADER, &p);
  put_uv(&p, 6);
  name_entry(&p, 1, MLPROF__NAME_ZONE, MLPROF_CAT_FORWARD, "forward", 7, "step",
             "train.py", 42);
  name_entry(&p, 2, MLPROF__NAME_GAUGE, 0, "loss", 4, "", "", 0);
  name_entry(&p, 3, MLPROF__NAME_UNITS, 0, "tokens", 6, "", "", 0);
  name_entry(&p, 4, MLPROF__NAME_STRING, 0, "model", 5, "", "", 0);
  name_entry(&p, 5, MLPROF__NAME_STRING, 0, "gpt", 3, "", "", 0);
  name_entry(&p, 6, MLPROF__NAME_ZONE, MLPROF_CAT_BACKWARD, "back\0ward", 9,
             "bwd", "model.c", 7);
  size_t names = chunk(f, MLPROF__CHUNK_NAMES, &p);
  free(p.d);
  return names;
}

enum { STD_CHUNKS = 7 };

/* A whole profile using every chunk and record type; off[] gets the offset
 * of each of its STD_CHUNKS chunks, off[STD_CHUNKS] the file size. */
static void std_profile(buf *f, size_t off[STD_CHUNKS + 1]) {
  buf p = {0};
  off[0] = MLPROF__FILE_HEADER_SIZE;
  off[1] = profile_start(f);
  put_uv(&p, 7);
  put_str(&p, "main");
  off[2] = chunk(f, MLPROF__CHUNK_THREAD, &p);
  put_uv(&p, 2);
  put_str(&p, "batch");
  put_str(&p, "32");
  put_str(&p, "model");
  put_str(&p, "gpt");
  off[3] = chunk(f, MLPROF__CHUNK_META, &p);

  put_uv(&p, 7); /* tid */
  put_uv(&p, 0); /* dropped */
  put_uv(&p, 1000);
  put_u8(&p, MLPROF__REC_SPAN);
  put_uv(&p, 1), put_uv(&p, 0), put_sv(&p, 0), put_uv(&p, 500);
  put_u8(&p, MLPROF__REC_SPAN_META);
  put_uv(&p, 4), put_uv(&p, 5);
  put_u8(&p, MLPROF__REC_SPAN_UNITS);
  put_uv(&p, 3), put_uv(&p, 64);
  put_u8(&p, MLPROF__REC_GAUGE);
  put_uv(&p, 2), put_sv(&p, 600), put_f64(&p, 2.5);
  put_u8(&p, MLPROF__REC_UNITS);
  put_uv(&p, 3), put_sv(&p, -100), put_uv(&p, 10);
  put_u8(&p, MLPROF__REC_STEP);
  put_sv(&p, 1000);
  put_u8(&p, MLPROF__REC_STEP_END);
  put_sv(&p, 0);
  put_u8(&p, MLPROF__REC_OPEN);
  put_uv(&p, 6), put_uv(&p, 1), put_sv(&p, 5);
  off[4] = chunk(f, MLPROF__CHUNK_EVENTS, &p);

  put_uv(&p, 8);
  put_uv(&p, 3);
  put_uv(&p, 3000);
  put_u8(&p, MLPROF__REC_SPAN);
  put_uv(&p, 6), put_uv(&p, 0), put_sv(&p, 0), put_uv(&p, 100);
  put_u8(&p, MLPROF__REC_GAUGE);
  put_uv(&p, 2), put_sv(&p, -3000), put_f64(&p, -0.1);
  off[5] = chunk(f, MLPROF__CHUNK_EVENTS, &p);

  put_uv(&p, 4000);
  put_uv(&p, 3);
  put_uv(&p, 1);
  off[6] = chunk(f, MLPROF__CHUNK_END, &p);
  off[7] = f->n;
  free(p.d);
}

/* What std_profile's reader callbacks log, one line per call. */
#define STR2(x) #x
#define STR(x) STR2(x)
static const char std_log_head[] =
    "header 1." STR(MLPROF__FORMAT_MINOR) " pid=4242 ppid=1 wall=1700000000123456789 mono=5000000 "
    "rank=0 world=2 host=node1 exe=/usr/bin/python3.11 "
    "argv=[python3|train.py|--lr|0.1] clock=tsc flush=200\n"
    "name 1 kind=0 cat=2 forward(7) step train.py:42\n"
    "name 2 kind=1 cat=0 loss(4)  :0\n"
    "name 3 kind=2 cat=0 tokens(6)  :0\n"
    "name 4 kind=3 cat=0 model(5)  :0\n"
    "name 5 kind=3 cat=0 gpt(3)  :0\n"
    "name 6 kind=0 cat=3 back(9) bwd model.c:7\n";
static const char std_log_body[] =
    "thread 7 main(4)\n"
    "meta batch(5)=32(2)\n"
    "meta model(5)=gpt(3)\n"
    "events 7 dropped=0\n"
    "span 7 1 d0 1000..1500\n"
    "span_meta 7 4=5\n"
    "span_units 7 3 64\n"
    "counter 7 2 @1600 2.5\n"
    "units 7 3 @1500 10\n"
    "step 7 @2500\n"
    "step_end 7 @2500\n"
    "open 7 6 d1 @2505\n"
    "events 8 dropped=3\n"
    "span 8 6 d0 3000..3100\n"
    "counter 8 2 @0 -0.10000000000000001\n";
static const char std_log_end[] = "end 4000 dropped=3 unmatched=1\n";

/* A visitor that logs every call, one line each. */
typedef struct {
  buf text;
  uint64_t spans;
  int stop_at_span; /* return 42 from this span (1-based); 0: never */
} logger;

static void logf_(logger *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void logf_(logger *l, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  put(&l->text, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static int on_header(void *ud, const mlprof__header *h) {
  logger *l = ud;
  logf_(l,
        "header %u.%u pid=%" PRIu64 " ppid=%" PRIu64 " wall=%" PRIu64
        " mono=%" PRIu64 " rank=%" PRId64 " world=%" PRId64
        " host=%s exe=%s argv=[",
        h->version_major, h->version_minor, h->pid, h->ppid, h->start_wall_ns,
        h->start_mono_ns, h->rank, h->world_size, h->hostname, h->exe);
  for (uint32_t i = 0; i < h->argc; i++)
    logf_(l, "%s%s", i ? "|" : "", h->argv[i]);
  logf_(l, "] clock=%s flush=%u\n", h->clock, h->flush_interval_ms);
  return 0;
}

static int on_name(void *ud, const mlprof__name *n) {
  logger *l = ud;
  if (n->name[n->name_len] != '\0') return -100; /* must be terminated */
  logf_(l, "name %u kind=%u cat=%u %s(%zu) %s %s:%u\n", n->id, n->kind,
        n->category, n->name, n->name_len, n->function, n->file, n->line);
  return 0;
}

static int on_thread(void *ud, uint32_t tid, const char *name, size_t len) {
  logf_(ud, "thread %u %s(%zu)\n", tid, name, len);
  return 0;
}

static int on_events(void *ud, uint32_t tid, uint64_t dropped) {
  logf_(ud, "events %u dropped=%" PRIu64 "\n", tid, dropped);
  return 0;
}

static int on_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin, uint64_t end) {
  logger *l = ud;
  l->spans++;
  logf_(l, "span %u %u d%u %" PRIu64 "..%" PRIu64 "\n", tid, name, depth, begin,
        end);
  return l->stop_at_span && (int)l->spans == l->stop_at_span ? 42 : 0;
}

static int on_span_meta(void *ud, uint32_t tid, uint32_t key, uint32_t value) {
  logf_(ud, "span_meta %u %u=%u\n", tid, key, value);
  return 0;
}

static int on_span_units(void *ud, uint32_t tid, uint32_t name, uint64_t n) {
  logf_(ud, "span_units %u %u %" PRIu64 "\n", tid, name, n);
  return 0;
}

static int on_counter(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                      double v) {
  logf_(ud, "counter %u %u @%" PRIu64 " %.17g\n", tid, name, t, v);
  return 0;
}

static int on_units(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                    uint64_t n) {
  logf_(ud, "units %u %u @%" PRIu64 " %" PRIu64 "\n", tid, name, t, n);
  return 0;
}

static int on_step(void *ud, uint32_t tid, uint64_t t) {
  logf_(ud, "step %u @%" PRIu64 "\n", tid, t);
  return 0;
}

static int on_step_end(void *ud, uint32_t tid, uint64_t t) {
  logf_(ud, "step_end %u @%" PRIu64 "\n", tid, t);
  return 0;
}

static int on_open(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin) {
  logf_(ud, "open %u %u d%u @%" PRIu64 "\n", tid, name, depth, begin);
  return 0;
}

static int on_meta(void *ud, const char *k, size_t kl, const char *v,
                   size_t vl) {
  logf_(ud, "meta %s(%zu)=%s(%zu)\n", k, kl, v, vl);
  return 0;
}

static int on_end(void *ud, uint64_t end_ns, uint64_t dropped,
                  uint64_t unmatched) {
  logf_(ud, "end %" PRIu64 " dropped=%" PRIu64 " unmatched=%" PRIu64 "\n",
        end_ns, dropped, unmatched);
  return 0;
}

static mlprof__visitor log_visitor(logger *l) {
  mlprof__visitor v = {
      .ud = l,
      .header = on_header,
      .name = on_name,
      .thread = on_thread,
      .events = on_events,
      .span = on_span,
      .span_meta = on_span_meta,
      .span_units = on_span_units,
      .counter = on_counter,
      .units = on_units,
      .step = on_step,
      .step_end = on_step_end,
      .open = on_open,
      .meta = on_meta,
      .end = on_end,
  };
  return v;
}

/* Reads bytes with a fresh logger; the log is NUL-terminated in l->text. */
static int read_logged(const uint8_t *d, size_t n, logger *l,
                       mlprof__read_report *rep, char *err, size_t errlen) {
  l->text.n = 0;
  l->spans = 0;
  mlprof__visitor v = log_visitor(l);
  int rc = mlprof__read_mem(d, n, &v, rep, err, errlen);
  put(&l->text, "", 1);
  return rc;
}

static char *concat3(const char *a, const char *b, const char *c) {
  size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
  char *s = malloc(n);
  if (!s) abort();
  snprintf(s, n, "%s%s%s", a, b, c);
  return s;
}

static void test_round_trip(void) {
  buf f = {0};
  size_t off[STD_CHUNKS + 1];
  std_profile(&f, off);
  logger l = {0};
  mlprof__read_report rep;
  char err[256] = "untouched";
  int rc = read_logged(f.d, f.n, &l, &rep, err, sizeof err);
  char *want = concat3(std_log_head, std_log_body, std_log_end);
  int same = strcmp((char *)l.text.d, want) == 0;
  if (!same) fprintf(stderr, "  got:\n%s  want:\n%s", (char *)l.text.d, want);
  free(want);
  free(l.text.d);
  free(f.d);
  CHECK_EQ(rc, 0);
  CHECK(same);
  CHECK_STR(err, "");
  CHECK_EQ_U64(rep.chunks, STD_CHUNKS);
  CHECK_EQ_U64(rep.damaged_chunks, 0);
  CHECK_EQ_U64(rep.skipped_bytes, 0);
  CHECK_EQ_U64(rep.truncated_bytes, 0);
  CHECK_EQ_U64(rep.last_ns, 4000);
  CHECK_EQ(rep.clean_end, 1);
  CHECK_STR(rep.problem, "");
}

static void test_null_visitor_and_report(void) {
  buf f = {0};
  size_t off[STD_CHUNKS + 1];
  std_profile(&f, off);
  int rc = mlprof__read_mem(f.d, f.n, NULL, NULL, NULL, 0);
  CHECK_EQ(rc, 0);
  rc = mlprof__read_mem(NULL, 0, NULL, NULL, NULL, 0);
  free(f.d);
  CHECK_EQ(rc, MLPROF_EFORMAT);
}

static void test_truncated_tail(void) {
  buf f = {0};
  size_t off[STD_CHUNKS + 1];
  std_profile(&f, off);
  logger l = {0};
  /* Cut at every byte after HEADER: the chunks before the cut are read, the
   * rest of the cut chunk is the truncated tail. */
  for (size_t cut = off[1]; cut <= f.n; cut++) {
    size_t whole = 1;
    while (whole < STD_CHUNKS && off[whole + 1] <= cut) whole++;
    mlprof__read_report rep;
    char err[256];
    int rc = read_logged(f.d, cut, &l, &rep, err, sizeof err);
    uint64_t tail = cut - off[whole];
    char where[64];
    snprintf(where, sizeof where, "byte %zu", off[whole]);
    int ok = rc == 0 && rep.chunks == whole && rep.truncated_bytes == tail &&
             rep.damaged_chunks == 0 && rep.skipped_bytes == 0 &&
             rep.clean_end == (whole == STD_CHUNKS) &&
             (tail ? strstr(rep.problem, where) != NULL : !rep.problem[0]);
    if (!ok) {
      free(l.text.d);
      free(f.d);
      TEST_FAIL("cut at %zu: rc=%d chunks=%" PRIu64
                " (want %zu) truncated=%" PRIu64 " (want %" PRIu64
                ") damaged=%" PRIu64 " problem=%s",
                cut, rc, rep.chunks, whole, rep.truncated_bytes, tail,
                rep.damaged_chunks, rep.problem);
    }
  }
  /* Cut inside the last chunk: everything but END was delivered. */
  read_logged(f.d, f.n - 1, &l, NULL, NULL, 0);
  char *want = concat3(std_log_head, std_log_body, "");
  int same = strcmp((char *)l.text.d, want) == 0;
  free(want);
  free(l.text.d);
  free(f.d);
  CHECK(same);
}

static void test_bit_flip_middle_chunk(void) {
  buf f = {0};
  size_t off[STD_CHUNKS + 1];
  std_profile(&f, off);
  logger l = {0};
  /* The first EVENTS chunk (index 4): flip every bit of it in turn. */
  size_t a = off[4], b = off[5];
  char where[64];
  snprintf(where, sizeof where, "byte %zu", a);
  const char *later = "events 8 dropped=3\nspan 8 6 d0 3000..3100\n";
  for (size_t i = a; i < b; i++) {
    for (int bit = 0; bit < 8; bit++) {
      f.d[i] ^= (uint8_t)(1u << bit);
      mlprof__read_report rep;
      int rc = read_logged(f.d, f.n, &l, &rep, NULL, 0);
      f.d[i] ^= (uint8_t)(1u << bit);
      int ok = rc == 0 && rep.damaged_chunks == 1 &&
               rep.skipped_bytes == b - a && rep.chunks == STD_CHUNKS - 1 &&
               rep.truncated_bytes == 0 && rep.clean_end &&
               strstr(rep.problem, where) && strstr((char *)l.text.d, later) &&
               !strstr((char *)l.text.d, "events 7");
      if (!ok) {
        free(l.text.d);
        free(f.d);
        TEST_FAIL("flip byte %zu bit %d: rc=%d damaged=%" PRIu64
                  " skipped=%" PRIu64 " chunks=%" PRIu64 " problem=%s",
                  i, bit, rc, rep.damaged_chunks, rep.skipped_bytes, rep.chunks,
                  rep.problem);
      }
    }
  }
  free(l.text.d);
  free(f.d);
}

static void test_bit_flip_every_chunk(void) {
  /* One bit flipped in the payload of each chunk in turn: that chunk alone
   * is damaged, and the spans of every other chunk are kept (a lost NAMES
   * chunk leaves its spans unnamed, a lost HEADER leaves the process
   * unknown). The spans kept are those of the file without that chunk. */
  buf f = {0}, cut = {0};
  size_t off[STD_CHUNKS + 1];
  std_profile(&f, off);
  logger l = {0};
  for (size_t k = 0; k < STD_CHUNKS; k++) {
    size_t at = (off[k] + MLPROF__CHUNK_HEADER_SIZE + off[k + 1]) / 2;
    /* Without the HEADER, the file is no profile: all spans are wanted. */
    cut.n = 0;
    put(&cut, f.d, k ? off[k] : f.n);
    if (k) put(&cut, f.d + off[k + 1], f.n - off[k + 1]);
    read_logged(cut.d, cut.n, &l, NULL, NULL, 0);
    uint64_t want = l.spans;
    f.d[at] ^= 0x10;
    mlprof__read_report rep;
    int rc = read_logged(f.d, f.n, &l, &rep, NULL, 0);
    f.d[at] ^= 0x10;
    char where[64];
    snprintf(where, sizeof where, "chunk at byte %zu", off[k]);
    int ok = rc == 0 && rep.damaged_chunks == 1 &&
             rep.chunks == STD_CHUNKS - 1 && l.spans == want &&
             strstr(rep.problem, where) &&
             rep.clean_end == (k != STD_CHUNKS - 1); /* the END chunk */
    if (!ok) {
      fprintf(stderr, "  log:\n%s", (char *)l.text.d);
      free(l.text.d);
      free(f.d);
      free(cut.d);
      TEST_FAIL("chunk %zu: rc=%d damaged=%" PRIu64 " chunks=%" PRIu64
                " spans=%" PRIu64 " (want %" PRIu64 ") problem=%s",
                k, rc, rep.damaged_chunks, rep.chunks, l.spans, want,
                rep.problem);
    }
  }
  free(l.text.d);
  free(f.d);
  free(cut.d);
}

static void test_garbage_between_chunks(void) {
  /* Junk (holding a false chunk magic) inserted between two chunks. */
  buf f = {0}, g = {0};
  size_t off[STD_CHUNKS + 1];
  std_profile(&f, off);
  /* The first false magic has a length over 16 MiB, the second one a
   * length past the end of the file. */
  static const char junk[] =
      "xxMPCKyyyyyyyyyyyyyyMPCK\x04\x00\x00\x00\xff\xff\xff\x00zzz";
  put(&g, f.d, off[5]);
  put(&g, junk, sizeof junk - 1);
  put(&g, f.d + off[5], f.n - off[5]);
  logger l = {0};
  mlprof__read_report rep;
  int rc = read_logged(g.d, g.n, &l, &rep, NULL, 0);
  char *want = concat3(std_log_head, std_log_body, std_log_end);
  int same = strcmp((char *)l.text.d, want) == 0;
  free(want);
  free(l.text.d);
  free(f.d);
  free(g.d);
  CHECK_EQ(rc, 0);
  CHECK(same);
  CHECK_EQ_U64(rep.chunks, STD_CHUNKS);
  CHECK_EQ_U64(rep.damaged_chunks, 1);
  CHECK_EQ_U64(rep.skipped_bytes, sizeof junk - 1);
}

static void test_oversized_length(void) {
  /* A chunk claiming more than 16 MiB is damage, even at the end. */
  buf f = {0};
  size_t off[STD_CHUNKS + 1];
  std_profile(&f, off);
  mlprof__put_u32(f.d + off[5] + 8, MLPROF__CHUNK_MAX + 1);
  logger l = {0};
  mlprof__read_report rep;
  int rc = read_logged(f.d, f.n, &l, &rep, NULL, 0);
  CHECK_EQ(rc, 0);
  CHECK_EQ_U64(rep.damaged_chunks, 1);
  CHECK_EQ_U64(rep.skipped_bytes, off[6] - off[5]);
  CHECK_EQ(rep.clean_end, 1);
  CHECK(strstr(rep.problem, "16 MiB") != NULL);
  /* Cut the file inside that chunk: no whole chunk follows, so it is
   * damage, not a truncated tail. */
  rc = read_logged(f.d, off[6] - 2, &l, &rep, NULL, 0);
  free(l.text.d);
  free(f.d);
  CHECK_EQ(rc, 0);
  CHECK_EQ_U64(rep.damaged_chunks, 1);
  CHECK_EQ_U64(rep.skipped_bytes + rep.truncated_bytes, off[6] - 2 - off[5]);
  CHECK_EQ(rep.clean_end, 0);
}

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void test_random_bytes(void) {
  uint64_t seed = 0x9E3779B97F4A7C15ull;
  uint8_t data[600];
  for (int round = 0; round < 400; round++) {
    size_t n = (size_t)(rng_next(&seed) % sizeof data);
    for (size_t i = 0; i < n; i++) data[i] = (uint8_t)rng_next(&seed);
    /* Half the rounds carry a valid file header, so the HEADER check is
     * what must refuse them. */
    if (round % 2 && n >= MLPROF__FILE_HEADER_SIZE) {
      memcpy(data, MLPROF__FILE_MAGIC, 8);
      mlprof__put_u16(data + 8, 1);
    }
    char err[256] = "";
    mlprof__read_report rep;
    int rc = mlprof__read_mem(data, n, NULL, &rep, err, sizeof err);
    if (rc != MLPROF_EFORMAT)
      TEST_FAIL("round %d (%zu bytes): rc=%d", round, n, rc);
    if (!strstr(err, "not an mlprof profile"))
      TEST_FAIL("round %d: err \"%s\"", round, err);
  }
  char err[256];
  CHECK_EQ(mlprof__read_mem((const uint8_t *)"hello", 5, NULL, NULL, err,
                            sizeof err),
           MLPROF_EFORMAT);
  CHECK_STR(err, "not an mlprof profile (bad magic)");
}

static void test_first_chunk_must_be_header(void) {
  buf f = {0}, p = {0};
  char err[256];
  file_header(&f, 1, 0);
  CHECK_EQ(mlprof__read_mem(f.d, f.n, NULL, NULL, err, sizeof err),
           MLPROF_EFORMAT);
  CHECK(strstr(err, "ends before its HEADER") != NULL);
  put_uv(&p, 7);
  put_str(&p, "main");
  chunk(&f, MLPROF__CHUNK_THREAD, &p);
  int rc = mlprof__read_mem(f.d, f.n, NULL, NULL, err, sizeof err);
  CHECK_EQ(rc, MLPROF_EFORMAT);
  CHECK(strstr(err, "not HEADER") != NULL);
  /* A HEADER chunk whose fields are cut short. */
  f.n = MLPROF__FILE_HEADER_SIZE;
  put_uv(&p, 1);
  put_uv(&p, 2);
  chunk(&f, MLPROF__CHUNK_HEADER, &p);
  rc = mlprof__read_mem(f.d, f.n, NULL, NULL, err, sizeof err);
  CHECK_EQ(rc, MLPROF_EFORMAT);
  CHECK(strstr(err, "not an mlprof profile (damaged HEADER") != NULL);
  /* A HEADER chunk with a bad CRC and bytes after it that are no chunk. */
  f.n = MLPROF__FILE_HEADER_SIZE;
  header_payload(&p, 1, 0, 0, 0, "h");
  chunk(&f, MLPROF__CHUNK_HEADER, &p);
  f.d[f.n - 1] ^= 1;
  put(&f, "junk", 4);
  rc = mlprof__read_mem(f.d, f.n, NULL, NULL, err, sizeof err);
  CHECK_EQ(rc, MLPROF_EFORMAT);
  CHECK(strstr(err, "bad CRC") != NULL);
  /* Where a whole chunk (or the end) follows, only its fields are lost. */
  f.n -= 4;
  logger l = {0};
  mlprof__read_report rep;
  rc = read_logged(f.d, f.n, &l, &rep, err, sizeof err);
  int unknown = strncmp((char *)l.text.d,
                        "header 1.0 pid=0 ppid=0 wall=0 mono=0 rank=-1 "
                        "world=-1 host= exe= argv=[] clock= flush=0\n",
                        200) == 0;
  free(l.text.d);
  free(f.d);
  free(p.d);
  CHECK_EQ(rc, 0);
  CHECK(unknown);
  CHECK_EQ_U64(rep.damaged_chunks, 1);
  CHECK(strstr(rep.problem, "damaged HEADER chunk at byte 16") != NULL);
}

static void test_versions(void) {
  buf f = {0}, p = {0};
  char err[256];
  mlprof__read_report rep;
  logger l = {0};
  file_header(&f, 2, 0);
  header_payload(&p, 1, 0, 0, 0, "h");
  chunk(&f, MLPROF__CHUNK_HEADER, &p);
  int rc = mlprof__read_mem(f.d, f.n, NULL, &rep, err, sizeof err);
  CHECK_EQ(rc, MLPROF_EFORMAT);
  CHECK_STR(err, "profile format version 2 is newer than this mlprof (1)");
  CHECK_STR(rep.problem, err);
  mlprof__put_u16(f.d + 8, 0);
  rc = mlprof__read_mem(f.d, f.n, NULL, NULL, err, sizeof err);
  CHECK_EQ(rc, MLPROF_EFORMAT);
  CHECK(strstr(err, "version 0") != NULL);
  /* A newer minor version is read; its extra payload bytes are ignored. */
  f.n = 0;
  file_header(&f, 1, 7);
  header_payload(&p, 1, 0, 0, 0, "h");
  put_uv(&p, 0);   /* exec_seq (1.2) */
  put_sv(&p, -1);  /* local rank (1.3) */
  put_str(&p, ""); /* job id (1.3) */
  put_str(&p, "a field from version 1.7");
  chunk(&f, MLPROF__CHUNK_HEADER, &p);
  rc = read_logged(f.d, f.n, &l, &rep, err, sizeof err);
  int minor7 = strncmp((char *)l.text.d, "header 1.7 ", 11) == 0;
  free(l.text.d);
  free(f.d);
  free(p.d);
  CHECK_EQ(rc, 0);
  CHECK(minor7);
  CHECK_EQ_U64(rep.damaged_chunks, 0);
  CHECK_EQ_U64(rep.chunks, 1);
}

static void test_unknown_chunk_and_trailing_bytes(void) {
  /* The std profile rebuilt with an unknown chunk and extra payload bytes
   * after the known fields of THREAD, META and END. */
  buf f = {0}, p = {0};
  size_t off[STD_CHUNKS + 1];
  std_profile(&f, off);
  buf g = {0};
  put(&g, f.d, off[2]);
  put(&p, "\x01\x02MPCK\x03", 7);
  chunk(&g, 77, &p);
  put_uv(&p, 7);
  put_str(&p, "main");
  put(&p, "\x09\x09", 2);
  chunk(&g, MLPROF__CHUNK_THREAD, &p);
  put_uv(&p, 2);
  put_str(&p, "batch");
  put_str(&p, "32");
  put_str(&p, "model");
  put_str(&p, "gpt");
  put_str(&p, "not a pair");
  chunk(&g, MLPROF__CHUNK_META, &p);
  put(&g, f.d + off[4], off[6] - off[4]);
  put_uv(&p, 4000);
  put_uv(&p, 3);
  put_uv(&p, 1);
  put_uv(&p, MLPROF__END_EXIT);
  put_uv(&p, 0);
  put_uv(&p, 99);
  chunk(&g, MLPROF__CHUNK_END, &p);
  logger l = {0};
  mlprof__read_report rep;
  int rc = read_logged(g.d, g.n, &l, &rep, NULL, 0);
  char *want = concat3(std_log_head, std_log_body, std_log_end);
  int same = strcmp((char *)l.text.d, want) == 0;
  if (!same) fprintf(stderr, "  got:\n%s", (char *)l.text.d);
  free(want);
  free(l.text.d);
  free(f.d);
  free(g.d);
  free(p.d);
  CHECK_EQ(rc, 0);
  CHECK(same);
  CHECK_EQ_U64(rep.chunks, STD_CHUNKS + 1);
  CHECK_EQ_U64(rep.damaged_chunks, 0);
  CHECK_STR(rep.problem, "");
}

/* profile_start, one EVENTS chunk (tid 1, base 100) of the given records,
 * then an END chunk; returns the read's result with the log in l. */
static int read_records(const void *recs, size_t n, logger *l,
                        mlprof__read_report *rep) {
  buf f = {0}, p = {0};
  profile_start(&f);
  put_uv(&p, 1);
  put_uv(&p, 0);
  put_uv(&p, 100);
  put(&p, recs, n);
  chunk(&f, MLPROF__CHUNK_EVENTS, &p);
  put_uv(&p, 5000);
  put_uv(&p, 0);
  put_uv(&p, 0);
  chunk(&f, MLPROF__CHUNK_END, &p);
  int rc = read_logged(f.d, f.n, l, rep, NULL, 0);
  free(f.d);
  free(p.d);
  return rc;
}

static void test_bad_records(void) {
  static const struct {
    const char *recs; /* each case starts with a good span of zone 1 */
    size_t len;
    const char *problem;
  } cases[] = {
      /* span of id 0 */
      {"\x01\x01\x00\x00\x05"
       "\x01\x00\x00\x00\x05",
       10, "name id 0 out of range"},
      /* counter naming a zone */
      {"\x01\x01\x00\x00\x05"
       "\x02\x01\x00"
       "\0\0\0\0\0\0\0\0",
       16, "id 1 is a zone name, not a counter"},
      /* units naming a counter */
      {"\x01\x01\x00\x00\x05"
       "\x03\x02\x00\x01",
       9, "not a unit"},
      /* span meta whose value is a zone */
      {"\x01\x01\x00\x00\x05"
       "\x04\x04\x01",
       8, "not a string"},
      /* span units naming a string */
      {"\x01\x01\x00\x00\x05"
       "\x05\x04\x01",
       8, "not a unit"},
      /* open zone naming a counter */
      {"\x01\x01\x00\x00\x05"
       "\x07\x02\x00\x00",
       9, "not a zone"},
      /* unknown tag */
      {"\x01\x01\x00\x00\x05"
       "\x09\x01\x00\x00\x05",
       10, "unknown record tag 9"},
      /* record cut short by the end of the payload */
      {"\x01\x01\x00\x00\x05"
       "\x01\x01\x00",
       8, "cut short"},
      /* time before the profile's start: 100 + 5 - 106 */
      {"\x01\x01\x00\x00\x05"
       "\x06\xd3\x01",
       8, "out of range"},
      /* span ending past INT64_MAX ns */
      {"\x01\x01\x00\x00\x05"
       "\x01\x01\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
       18, "out of range"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    logger l = {0};
    mlprof__read_report rep;
    int rc = read_records(cases[i].recs, cases[i].len, &l, &rep);
    const char *log = (const char *)l.text.d;
    int ok = rc == 0 && rep.damaged_chunks == 1 && rep.chunks == 3 &&
             l.spans == 1 && strstr(log, "span 1 1 d0 100..105\n") &&
             strstr(log, "end 5000") && strstr(rep.problem, cases[i].problem) &&
             strstr(rep.problem, "EVENTS chunk at byte");
    if (!ok) {
      fprintf(stderr, "  log:\n%s", log);
      free(l.text.d);
      TEST_FAIL("case %zu: rc=%d damaged=%" PRIu64 " chunks=%" PRIu64
                " spans=%" PRIu64 " problem=\"%s\"",
                i, rc, rep.damaged_chunks, rep.chunks, l.spans, rep.problem);
    }
    free(l.text.d);
  }
  /* The same records, all valid: no damage (the cases above can fail). */
  logger l = {0};
  mlprof__read_report rep;
  int rc = read_records(
      "\x01\x01\x00\x00\x05"
      "\x01\x06\x00\x00\x05",
      10, &l, &rep);
  free(l.text.d);
  CHECK_EQ(rc, 0);
  CHECK_EQ_U64(rep.damaged_chunks, 0);
  CHECK_EQ(l.spans, 2);
}

static void test_lost_names(void) {
  /* Ids never announced (their NAMES chunk was lost) keep their records,
   * named "name #ID" with the kind the record needs: no chunk is damaged. */
  logger l = {0};
  mlprof__read_report rep;
  int rc = read_records(
      "\x01\x01\x00\x00\x05" /* span of zone 1 */
      "\x01\x63\x00\x00\x05" /* span of 99 */
      "\x01\x63\x00\x00\x05" /* 99 again */
      "\x02\x64\x00"         /* counter of 100 */
      "\0\0\0\0\0\0\0\0"
      "\x04\x65\x66", /* span meta 101 = 102 */
      29, &l, &rep);
  const char *log = (const char *)l.text.d;
  int named = strstr(log, "name 99 kind=0 cat=0 name #99(8)") &&
              strstr(log, "name 100 kind=1 cat=0 name #100(9)") &&
              strstr(log, "name 101 kind=3 cat=0 name #101(9)") &&
              strstr(log, "name 102 kind=3 cat=0 name #102(9)") &&
              strstr(log, "span 1 99 d0 100..105\nspan 1 99 d0 100..105\n");
  int announced = 0; /* 99 is announced once, at its first use */
  for (const char *q = log; (q = strstr(q, "name 99 ")); q++) announced++;
  if (!named) fprintf(stderr, "  log:\n%s", log);
  free(l.text.d);
  CHECK_EQ(rc, 0);
  CHECK(named);
  CHECK_EQ(announced, 1);
  CHECK_EQ(l.spans, 3);
  CHECK_EQ_U64(rep.damaged_chunks, 0);
  CHECK_EQ_U64(rep.lost_names, 4);
  CHECK(strstr(rep.problem, "name id 99 was never announced") != NULL);
}

static void test_bad_names(void) {
  /* A name announced twice damages its NAMES chunk; entries before it were
   * taken, later ones are lost (their spans unnamed), and later chunks still
   * read. */
  buf f = {0}, p = {0};
  profile_start(&f);
  put_uv(&p, 3);
  name_entry(&p, 7, MLPROF__NAME_ZONE, 200, "z7", 2, "", "", 0);
  name_entry(&p, 1, MLPROF__NAME_ZONE, 0, "again", 5, "", "", 0);
  name_entry(&p, 8, MLPROF__NAME_ZONE, 0, "z8", 2, "", "", 0);
  chunk(&f, MLPROF__CHUNK_NAMES, &p);
  /* A kind from a newer minor version is left out. */
  put_uv(&p, 1);
  name_entry(&p, 9, 9, 0, "future", 6, "", "", 0);
  chunk(&f, MLPROF__CHUNK_NAMES, &p);
  put_uv(&p, 1);
  put_uv(&p, 0);
  put_uv(&p, 0);
  put_u8(&p, MLPROF__REC_SPAN);
  put_uv(&p, 7), put_uv(&p, 0), put_sv(&p, 1), put_uv(&p, 1);
  put_u8(&p, MLPROF__REC_SPAN);
  put_uv(&p, 8), put_uv(&p, 0), put_sv(&p, 1), put_uv(&p, 1);
  chunk(&f, MLPROF__CHUNK_EVENTS, &p);
  logger l = {0};
  mlprof__read_report rep;
  int rc = read_logged(f.d, f.n, &l, &rep, NULL, 0);
  const char *log = (const char *)l.text.d;
  /* Unknown category 200 reads as none. */
  int z7 = strstr(log, "name 7 kind=0 cat=0 z7(2)") != NULL;
  int no_z8 = !strstr(log, "z8") && !strstr(log, "future");
  int span7 = strstr(log, "span 1 7 d0 1..2\n") != NULL;
  int span8 = strstr(log, "name 8 kind=0 cat=0 name #8(7)") &&
              strstr(log, "span 1 8 d0 2..3\n");
  free(l.text.d);
  free(f.d);
  free(p.d);
  CHECK_EQ(rc, 0);
  CHECK(z7);
  CHECK(no_z8);
  CHECK(span7);
  CHECK(span8);
  CHECK_EQ(l.spans, 2);
  CHECK_EQ_U64(rep.damaged_chunks, 1); /* NAMES (twice) */
  CHECK(strstr(rep.problem, "name id 1 announced twice") != NULL);
}

static void test_many_names(void) {
  /* Thousands of sparse ids (up to UINT32_MAX) grow the id table; every one
   * must still be found, with its kind, and a gap must not be. */
  enum { N = 5000 };
  buf f = {0}, p = {0};
  profile_start(&f);
  put_uv(&p, N);
  for (uint64_t i = 0; i < N; i++) {
    uint64_t id = i == N - 1 ? UINT32_MAX : 100 + i * 7919;
    char name[32];
    snprintf(name, sizeof name, "n%" PRIu64, id);
    name_entry(&p, id,
               (uint8_t)(i % 2 ? MLPROF__NAME_ZONE : MLPROF__NAME_GAUGE), 0,
               name, strlen(name), "", "", 0);
  }
  chunk(&f, MLPROF__CHUNK_NAMES, &p);
  put_uv(&p, 1);
  put_uv(&p, 0);
  put_uv(&p, 0);
  for (uint64_t i = 1; i < N; i += 2) {
    uint64_t id = i == N - 1 ? UINT32_MAX : 100 + i * 7919;
    put_u8(&p, MLPROF__REC_SPAN);
    put_uv(&p, id), put_uv(&p, 0), put_sv(&p, 1), put_uv(&p, 1);
  }
  chunk(&f, MLPROF__CHUNK_EVENTS, &p);
  put_uv(&p, 1);
  put_uv(&p, 0);
  put_uv(&p, 0);
  put_u8(&p, MLPROF__REC_SPAN);
  put_uv(&p, 100 + 7919), put_uv(&p, 0), put_sv(&p, 1), put_uv(&p, 1);
  put_u8(&p, MLPROF__REC_SPAN);
  put_uv(&p, 101 + 7919), put_uv(&p, 0), put_sv(&p, 1), put_uv(&p, 1);
  chunk(&f, MLPROF__CHUNK_EVENTS, &p);
  logger l = {0};
  mlprof__read_report rep;
  int rc = read_logged(f.d, f.n, &l, &rep, NULL, 0);
  int last = strstr((char *)l.text.d, "span 1 4294967295 d0") != NULL;
  free(l.text.d);
  free(f.d);
  free(p.d);
  CHECK_EQ(rc, 0);
  CHECK_EQ(l.spans, N / 2 + 2);
  CHECK(last);
  CHECK_EQ_U64(rep.damaged_chunks, 0);
  CHECK_EQ_U64(rep.lost_names, 1); /* the gap: 8020 */
  CHECK(strstr(rep.problem, "name id 8020 was never announced") != NULL);
}

static void test_callback_stops_read(void) {
  buf f = {0};
  size_t off[STD_CHUNKS + 1];
  std_profile(&f, off);
  logger l = {.stop_at_span = 1};
  mlprof__read_report rep;
  int rc = read_logged(f.d, f.n, &l, &rep, NULL, 0);
  int stopped = !strstr((char *)l.text.d, "span_meta");
  free(l.text.d);
  free(f.d);
  CHECK_EQ(rc, 42);
  CHECK(stopped);
}

static char tmp_dir[64];

static void make_tmp_dir(void) {
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/mlprof-test-XXXXXX");
  if (!mkdtemp(tmp_dir)) abort();
}

static void write_file(const char *path, const buf *b) {
  FILE *fp = fopen(path, "wb");
  if (!fp || (b->n && fwrite(b->d, 1, b->n, fp) != b->n) || fclose(fp) != 0)
    abort();
}

static void remove_tmp_dir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
  if (system(cmd) != 0) fprintf(stderr, "  could not remove %s\n", tmp_dir);
}

/* A profile with many EVENTS chunks of varied sizes, some larger than the
 * file reader's first buffer, with one chunk damaged and a truncated tail. */
static void big_profile(buf *f) {
  buf p = {0};
  uint64_t seed = 12345;
  profile_start(f);
  for (int c = 0; c < 300; c++) {
    size_t spans = c == 100 ? 40000 : c == 200 ? 300000 : rng_next(&seed) % 200;
    put_uv(&p, (uint64_t)c % 4);
    put_uv(&p, 0);
    put_uv(&p, (uint64_t)c * 1000000);
    for (size_t i = 0; i < spans; i++) {
      put_u8(&p, MLPROF__REC_SPAN);
      put_uv(&p, 1 + (i % 2) * 5);
      put_uv(&p, i % 3);
      put_sv(&p, (int64_t)(rng_next(&seed) % 100));
      put_uv(&p, rng_next(&seed) % 1000);
    }
    size_t at = chunk(f, MLPROF__CHUNK_EVENTS, &p);
    if (c == 150) f->d[at + MLPROF__CHUNK_HEADER_SIZE + 3] ^= 0x10;
  }
  f->n -= 7;
  free(p.d);
}

static void test_read_file_matches_mem(void) {
  buf f = {0};
  big_profile(&f);
  make_tmp_dir();
  char path[128];
  snprintf(path, sizeof path, "%s/big.mlprof", tmp_dir);
  write_file(path, &f);
  logger lm = {0}, lf = {0};
  mlprof__read_report rm, rf;
  int rcm = read_logged(f.d, f.n, &lm, &rm, NULL, 0);
  mlprof__visitor v = log_visitor(&lf);
  int rcf = mlprof__read_file(path, &v, &rf, NULL, 0);
  put(&lf.text, "", 1);
  int same =
      lm.text.n == lf.text.n && memcmp(lm.text.d, lf.text.d, lm.text.n) == 0;
  char err[256];
  snprintf(path, sizeof path, "%s/missing.mlprof", tmp_dir);
  int rcx = mlprof__read_file(path, &v, NULL, err, sizeof err);
  remove_tmp_dir();
  free(lm.text.d);
  free(lf.text.d);
  free(f.d);
  CHECK_EQ(rcm, 0);
  CHECK_EQ(rcf, 0);
  CHECK(same);
  /* A file's read says which file it read; bytes in memory are no file. */
  CHECK(rf.mark.valid && !rm.mark.valid);
  CHECK_EQ_U64(rf.mark.checked_to, rm.mark.checked_to);
  rm.mark = rf.mark;
  CHECK(memcmp(&rm, &rf, sizeof rm) == 0);
  CHECK_EQ_U64(rm.damaged_chunks, 1);
  CHECK(rm.truncated_bytes > 0);
  CHECK(lm.spans > 340000);
  CHECK_EQ(rcx, MLPROF_EIO);
  CHECK(strstr(err, "missing.mlprof: No such file") != NULL);
}

/* Reads path with a fresh logger, again after mark when it is not NULL. */
static int read_path_logged(const char *path, const mlprof__read_mark *mark,
                            logger *l, mlprof__read_report *rep) {
  mlprof__visitor v = log_visitor(l);
  int rc = mark ? mlprof__read_file_again(path, mark, &v, rep, NULL, 0)
                : mlprof__read_file(path, &v, rep, NULL, 0);
  put(&l->text, "", 1);
  return rc;
}

/* A read again of an unchanged file takes the chunks the first read found
 * right without their CRCs (a CRC made wrong behind its back goes unseen),
 * and gives what the first gave; once the file changed, every CRC counts. */
static void test_read_again_checks_crcs_once(void) {
  buf f = {0};
  big_profile(&f); /* chunk 150 of 300 is damaged */
  make_tmp_dir();
  char path[128];
  snprintf(path, sizeof path, "%s/again.mlprof", tmp_dir);
  write_file(path, &f);
  logger l1 = {0}, l2 = {0}, l3 = {0}, l4 = {0};
  mlprof__read_report r1, r2, r3, r4;
  int rc1 = read_path_logged(path, NULL, &l1, &r1);
  int rc2 = read_path_logged(path, &r1.mark, &l2, &r2);
  int same = l1.text.n == l2.text.n && !memcmp(l1.text.d, l2.text.d, l1.text.n);
  /* The CRC of the fifth chunk made wrong, the file's time of change put
   * back: to a read again it is the file it read. */
  size_t at = MLPROF__FILE_HEADER_SIZE;
  for (int k = 0; k < 4; k++)
    at += MLPROF__CHUNK_HEADER_SIZE + mlprof__get_u32(f.d + at + 8);
  FILE *fp = fopen(path, "r+b");
  uint8_t crc = (uint8_t)(f.d[at + 12] ^ 0xff);
  int wrote = fp && fseek(fp, (long)at + 12, SEEK_SET) == 0 &&
              fwrite(&crc, 1, 1, fp) == 1;
  if (fp && fclose(fp)) wrote = 0;
  struct timespec times[2] = {
      {.tv_sec = r1.mark.mtime_s, .tv_nsec = r1.mark.mtime_ns},
      {.tv_sec = r1.mark.mtime_s, .tv_nsec = r1.mark.mtime_ns}};
  int touched = utimensat(AT_FDCWD, path, times, 0) == 0;
  int rc3 = read_path_logged(path, &r1.mark, &l3, &r3);
  /* Changed: its time of change is not the first read's. */
  times[0].tv_sec = times[1].tv_sec = r1.mark.mtime_s + 1;
  touched &= utimensat(AT_FDCWD, path, times, 0) == 0;
  int rc4 = read_path_logged(path, &r1.mark, &l4, &r4);
  remove_tmp_dir();
  CHECK_EQ(rc1, 0);
  CHECK_EQ(rc2, 0);
  CHECK(same);
  CHECK(memcmp(&r1, &r2, sizeof r1) == 0);
  CHECK_EQ_U64(r1.damaged_chunks, 1);
  /* Checked up to the damaged chunk, not past it. */
  CHECK(r1.mark.valid);
  CHECK(r1.mark.checked_to > MLPROF__FILE_HEADER_SIZE);
  CHECK(r1.mark.checked_to < r1.mark.size);
  CHECK(wrote && touched);
  CHECK_EQ(rc3, 0);
  CHECK_EQ_U64(r3.damaged_chunks, 1);
  CHECK(l3.text.n == l1.text.n && !memcmp(l3.text.d, l1.text.d, l1.text.n));
  /* The file changed: every CRC is checked, the one made wrong too. */
  CHECK_EQ(rc4, 0);
  CHECK_EQ_U64(r4.damaged_chunks, 2);
  free(l1.text.d);
  free(l2.text.d);
  free(l3.text.d);
  free(l4.text.d);
  free(f.d);
}

/* A one-chunk profile for the job tests. */
static void write_profile(const char *name, uint64_t pid, uint64_t ppid,
                          uint64_t wall, uint64_t mono, const char *host) {
  buf f = {0}, p = {0};
  char path[128];
  file_header(&f, 1, 0);
  header_payload(&p, pid, ppid, wall, mono, host);
  chunk(&f, MLPROF__CHUNK_HEADER, &p);
  snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
  write_file(path, &f);
  free(f.d);
  free(p.d);
}

static void test_job_dir(void) {
  make_tmp_dir();
  /* The child sorts first by name, the parent first by start. */
  write_profile("a.mlprof", 101, 100, 2000000, 7000, "node1");
  write_profile("b.mlprof", 100, 1, 1000000, 5000, "node1");
  write_profile("c.mlprof", 102, 100, 900000, 5000, "node1");
  buf junk = {0};
  put(&junk, "not a profile", 13);
  char path[128];
  snprintf(path, sizeof path, "%s/notes.txt", tmp_dir);
  write_file(path, &junk);
  free(junk.d);
  snprintf(path, sizeof path, "%s/sub.mlprof", tmp_dir);
  mkdir(path, 0700);
  mlprof__job job;
  char err[256] = "";
  const char *paths[] = {tmp_dir};
  int rc = mlprof__job_open(&job, paths, 1, err, sizeof err);
  remove_tmp_dir();
  if (rc) TEST_FAIL("job_open: %d %s", rc, err);
  const mlprof__job_profile *ps = job.profiles;
  int ok = job.count == 3 && ps[0].pid == 100 && ps[1].pid == 102 &&
           ps[2].pid == 101;
  if (!ok) {
    mlprof__job_close(&job);
    TEST_FAIL("order wrong");
  }
  /* Same host: monotonic starts place them (5000, 5000, 7000); ties by pid. */
  CHECK_EQ_U64(ps[0].offset_ns, 0);
  CHECK_EQ_U64(ps[1].offset_ns, 0);
  CHECK_EQ_U64(ps[2].offset_ns, 2000);
  CHECK_EQ(ps[0].parent, -1);
  CHECK_EQ(ps[1].parent, 0);
  CHECK_EQ(ps[2].parent, 0);
  CHECK_STR(ps[2].cmdline, "python3 train.py --lr 0.1");
  CHECK_STR(ps[2].hostname, "node1");
  CHECK_STR(ps[2].exe, "/usr/bin/python3.11");
  CHECK_STR(ps[2].name, "python3"); /* argv[0]'s, as the file name has it */
  CHECK_EQ(ps[2].rank, 0);
  CHECK_EQ(ps[2].world_size, 2);
  CHECK_EQ_U64(ps[2].ppid, 100);
  CHECK(strstr(ps[0].path, "/b.mlprof") != NULL);
  mlprof__job_close(&job);
  CHECK_EQ(job.count, 0);
  CHECK(job.profiles == NULL);
}

/* The file header and HEADER of a 1.3 profile of rank `rank` of 4 (local
 * rank `local`) of job "job7", started at wall on host; its monotonic start
 * is 5000 whatever the host. */
static void rank_start(buf *f, uint64_t pid, int rank, int local, uint64_t wall,
                       const char *host) {
  buf p = {0};
  file_header(f, 1, 3);
  put_uv(&p, pid);
  put_uv(&p, 1);
  put_uv(&p, wall);
  put_uv(&p, 5000);
  put_sv(&p, rank);
  put_sv(&p, 4);
  put_str(&p, host);
  put_str(&p, "/usr/bin/python3.11");
  put_uv(&p, 0);
  put_str(&p, "tsc");
  put_uv(&p, 200);
  put_uv(&p, 0);
  put_sv(&p, local);
  put_str(&p, "job7");
  chunk(f, MLPROF__CHUNK_HEADER, &p);
  free(p.d);
}

/* A rank's profile of its header alone (rank_start). */
static void write_rank_profile(const char *name, uint64_t pid, int rank,
                               int local, uint64_t wall, const char *host) {
  buf f = {0};
  char path[128];
  rank_start(&f, pid, rank, local, wall, host);
  snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
  write_file(path, &f);
  free(f.d);
}

/* Appends a META chunk of one entry. */
static void meta_chunk(buf *f, const char *key, const char *value) {
  buf p = {0};
  put_uv(&p, 1);
  put_str(&p, key);
  put_str(&p, value);
  chunk(f, MLPROF__CHUNK_META, &p);
  free(p.d);
}

/* Appends an EVENTS chunk of n spans of zone 1 (which no NAMES announced:
 * read, each would be a lost name), its payload damaged when `damaged`. */
static void events_chunk(buf *f, size_t n, int damaged) {
  buf p = {0};
  put_uv(&p, 7);
  put_uv(&p, 0);
  put_uv(&p, 0);
  for (size_t i = 0; i < n; i++) {
    put_u8(&p, MLPROF__REC_SPAN);
    put_uv(&p, 1), put_uv(&p, 0), put_sv(&p, 100), put_uv(&p, 50);
  }
  size_t at = chunk(f, MLPROF__CHUNK_EVENTS, &p);
  if (damaged) f->d[at + MLPROF__CHUNK_HEADER_SIZE + 5] ^= 0x10;
  free(p.d);
}

static int count_meta(void *ud, const char *key, size_t klen, const char *value,
                      size_t vlen) {
  (*(int *)ud)++;
  return 0;
}

/* Reads path as a job opens it: *metas gets the META entries seen. */
static int read_meta(const char *path, mlprof__read_report *rep, int *metas) {
  *metas = 0;
  mlprof__visitor v = {.ud = metas, .meta = count_meta};
  return mlprof__read_file_meta(path, &v, rep, NULL, 0);
}

/* Opening a job reads a rank's header and META chunks and passes over its
 * EVENTS unread, from a file (seeked) or a pipe (read through): a damaged
 * EVENTS chunk goes unseen, and the clock offsets in META chunks after
 * large EVENTS chunks still place the rank on rank 0's clock. */
static void test_job_meta_only(void) {
  make_tmp_dir();
  buf f = {0};
  rank_start(&f, 300, 0, 0, 1000000, "node1");
  meta_chunk(&f, "dist.clock.init", "0 0 5000");
  events_chunk(&f, 100, 0);
  meta_chunk(&f, "dist.clock.final", "0 0 1005000");
  char r0[128], r1[128];
  snprintf(r0, sizeof r0, "%s/r0.mlprof", tmp_dir);
  write_file(r0, &f);
  f.n = 0;
  /* Rank 1's clock is 700 ns behind rank 0's at its start and 900 ns 1 ms
   * later; each META follows EVENTS larger than the reader's first buffer. */
  rank_start(&f, 301, 1, 1, 1000400, "node1");
  events_chunk(&f, 40000, 1);
  meta_chunk(&f, "dist.clock.init", "700 10 5000");
  events_chunk(&f, 40000, 0);
  meta_chunk(&f, "dist.clock.final", "900 10 1005000");
  events_chunk(&f, 40000, 0);
  {
    buf p = {0};
    put_uv(&p, 2000000), put_uv(&p, 0), put_uv(&p, 0);
    chunk(&f, MLPROF__CHUNK_END, &p);
    free(p.d);
  }
  snprintf(r1, sizeof r1, "%s/r1.mlprof", tmp_dir);
  write_file(r1, &f);

  mlprof__read_report full, meta, piped;
  int metas, piped_metas;
  int rc_full = mlprof__read_file(r1, NULL, &full, NULL, 0);
  int rc_meta = read_meta(r1, &meta, &metas);
  int fds[2];
  if (pipe(fds)) abort();
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    ssize_t w = write(fds[1], f.d, f.n);
    _exit(w == (ssize_t)f.n ? 0 : 1);
  }
  close(fds[1]);
  char fdpath[64];
  snprintf(fdpath, sizeof fdpath, "/dev/fd/%d", fds[0]);
  int rc_piped = read_meta(fdpath, &piped, &piped_metas);
  close(fds[0]);
  int status;
  waitpid(pid, &status, 0);

  mlprof__job job;
  char err[256] = "";
  const char *paths[] = {tmp_dir};
  int rc = mlprof__job_open(&job, paths, 1, err, sizeof err);
  remove_tmp_dir();
  free(f.d);
  CHECK_EQ(rc_full, 0);
  CHECK_EQ_U64(full.damaged_chunks, 1);
  CHECK_EQ(rc_meta, 0);
  CHECK_EQ(metas, 2);
  CHECK_EQ_U64(meta.damaged_chunks, 0);
  CHECK_EQ_U64(meta.chunks, 4); /* HEADER, 2 META, END */
  CHECK(meta.clean_end);
  CHECK_EQ(rc_piped, 0);
  CHECK_EQ(piped_metas, 2);
  CHECK_EQ_U64(piped.damaged_chunks, 0);
  CHECK_EQ_U64(piped.chunks, 4);
  if (rc || job.count != 2) TEST_FAIL("job_open: %d %s", rc, err);
  const mlprof__job_profile *p1 = &job.profiles[1];
  CHECK_EQ(p1->rank, 1);
  CHECK(p1->has_clock[0] && p1->has_clock[1]);
  CHECK_EQ_U64(p1->offset_ns, 700);
  CHECK(fabs(p1->drift - 200e-6) < 1e-12);
  CHECK_EQ_U64(mlprof__job_time(p1, 1000000), 700 + 1000000 + 200);
  mlprof__job_close(&job);
}

/* The ranks of one job on two hosts, copied into one directory, are one job
 * on the wall clock; local rank and job id come from 1.3 headers, and are
 * unknown in older files. */
static void test_job_ranks(void) {
  make_tmp_dir();
  write_rank_profile("r0.mlprof", 300, 0, 0, 1000000, "node1");
  write_rank_profile("r1.mlprof", 301, 1, 1, 1000400, "node1");
  write_rank_profile("r2.mlprof", 300, 2, 0, 1000100, "node2");
  write_rank_profile("r3.mlprof", 301, 3, 1, 1000300, "node2");
  write_profile("old.mlprof", 500, 1, 1000200, 5000, "node2");
  mlprof__job job;
  char err[256] = "";
  const char *paths[] = {tmp_dir};
  int rc = mlprof__job_open(&job, paths, 1, err, sizeof err);
  remove_tmp_dir();
  if (rc || job.count != 5) TEST_FAIL("job_open: %d %s", rc, err);
  const mlprof__job_profile *ps = job.profiles;
  static const int64_t rank[] = {0, 2, 0, 3, 1}, local[] = {0, 0, -1, 1, 1};
  static const uint64_t at[] = {0, 100, 200, 300, 400};
  for (int i = 0; i < 5; i++) {
    CHECK_EQ(ps[i].rank, rank[i]);
    CHECK_EQ(ps[i].local_rank, local[i]);
    CHECK_EQ_U64(ps[i].offset_ns, at[i]);
    CHECK_STR(ps[i].job_id, i == 2 ? "" : "job7");
  }
  /* Same pids on two hosts are two processes, neither the other's parent. */
  CHECK_EQ(ps[0].parent, -1);
  CHECK_EQ(ps[1].parent, -1);
  mlprof__job_close(&job);
}

/* A profile of pid 100 on node1 that is program `seq` of its chain of
 * execs, started at mono. */
static void write_exec_profile(const char *name, uint64_t seq, uint64_t mono) {
  buf f = {0}, p = {0};
  char path[128];
  file_header(&f, 1, 2);
  header_payload(&p, 100, 1, mono, mono, "node1");
  put_uv(&p, seq);
  chunk(&f, MLPROF__CHUNK_HEADER, &p);
  snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
  write_file(path, &f);
  free(f.d);
  free(p.d);
}

static void test_job_exec_chain(void) {
  make_tmp_dir();
  /* sh exec'd python3, which exec'd python3 again; then pid 100 was reused
   * by a new process (a chain of its own), and a profile from 1.0 (no
   * exec_seq) of another pid. */
  write_exec_profile("sh-100.mlprof", 0, 1000);
  write_exec_profile("python3-100-exec1.mlprof", 1, 2000);
  write_exec_profile("python3-100-exec2.mlprof", 2, 3000);
  write_exec_profile("later-100.mlprof", 0, 9000);
  write_profile("old-101.mlprof", 101, 100, 4000, 4000, "node1");
  mlprof__job job;
  char err[256] = "";
  const char *paths[] = {tmp_dir};
  int rc = mlprof__job_open(&job, paths, 1, err, sizeof err);
  remove_tmp_dir();
  if (rc || job.count != 5) TEST_FAIL("job_open: %d %s", rc, err);
  const mlprof__job_profile *ps = job.profiles;
  CHECK_EQ(ps[0].exec_seq, 0);
  CHECK_EQ(ps[0].exec_next, 1);
  CHECK_EQ(ps[1].exec_next, 2);
  CHECK_EQ(ps[2].exec_seq, 2);
  CHECK_EQ(ps[2].exec_next, -1);
  CHECK_EQ(ps[3].pid, 101);
  CHECK_EQ(ps[3].exec_seq, 0);
  CHECK_EQ(ps[3].exec_next, -1);
  CHECK_EQ(ps[4].exec_next, -1);
  /* Another host's pid cannot be looked at. */
  CHECK_EQ(ps[0].alive, -1);
  mlprof__job_close(&job);
}

/* END's how and status (1.2), an END of 1.1 without them, and an END that
 * more chunks follow (an exec that failed): not a closing chunk. */
static void test_end_how(void) {
  static const struct {
    int fields, then_chunk, how, status, clean;
  } cases[] = {{5, 0, MLPROF__END_SIGNAL, 11, 1},
               {3, 0, MLPROF__END_SHUTDOWN, 0, 1},
               {5, 1, MLPROF__END_EXEC, 0, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    buf f = {0}, p = {0};
    profile_start(&f);
    put_uv(&p, 100);
    put_uv(&p, 0);
    put_uv(&p, 0);
    if (cases[i].fields == 5) {
      put_uv(&p, (uint64_t)cases[i].how);
      put_uv(&p, (uint64_t)cases[i].status);
    }
    chunk(&f, MLPROF__CHUNK_END, &p);
    if (cases[i].then_chunk) {
      put_uv(&p, 0);
      chunk(&f, MLPROF__CHUNK_META, &p);
    }
    mlprof__read_report rep;
    int rc = mlprof__read_mem(f.d, f.n, NULL, &rep, NULL, 0);
    free(f.d);
    free(p.d);
    CHECK_EQ(rc, 0);
    CHECK_EQ_U64(rep.damaged_chunks, 0);
    CHECK_EQ(rep.clean_end, cases[i].clean);
    if (cases[i].clean) {
      CHECK_EQ(rep.end_how, cases[i].how);
      CHECK_EQ(rep.end_status, cases[i].status);
    }
  }
}

static void test_job_hosts(void) {
  make_tmp_dir();
  /* Two hosts: wall-clock starts, whatever the monotonic ones say; a pid on
   * another host is not a parent. */
  write_profile("r0.mlprof", 100, 1, 10000, 1, "n1");
  write_profile("r1.mlprof", 200, 100, 9000, 900000, "n2");
  char p0[128], p1[128];
  snprintf(p0, sizeof p0, "%s/r0.mlprof", tmp_dir);
  snprintf(p1, sizeof p1, "%s/r1.mlprof", tmp_dir);
  const char *paths[] = {p0, p1};
  mlprof__job job;
  char err[256] = "";
  int rc = mlprof__job_open(&job, paths, 2, err, sizeof err);
  remove_tmp_dir();
  if (rc) TEST_FAIL("job_open: %d %s", rc, err);
  int ok = job.count == 2 && job.profiles[0].pid == 200 &&
           job.profiles[0].offset_ns == 0 &&
           job.profiles[1].offset_ns == 1000 && job.profiles[0].parent == -1 &&
           job.profiles[1].parent == -1;
  mlprof__job_close(&job);
  CHECK(ok);
}

static void test_job_errors(void) {
  mlprof__job job;
  char err[256], want[256], path[128];
  make_tmp_dir();
  snprintf(path, sizeof path, "%s/nothing-here", tmp_dir);
  const char *paths[] = {path};
  int rc = mlprof__job_open(&job, paths, 1, err, sizeof err);
  snprintf(want, sizeof want, "%s: no such file or directory", path);
  int missing = rc < 0 && strcmp(err, want) == 0 && job.count == 0;

  paths[0] = tmp_dir;
  rc = mlprof__job_open(&job, paths, 1, err, sizeof err);
  snprintf(want, sizeof want, "%s: no mlprof profiles in this directory",
           tmp_dir);
  int empty = rc < 0 && strcmp(err, want) == 0;

  buf junk = {0};
  put(&junk, "#!/bin/sh\necho hi\n", 18);
  snprintf(path, sizeof path, "%s/x.mlprof", tmp_dir);
  write_file(path, &junk);
  free(junk.d);
  paths[0] = path;
  rc = mlprof__job_open(&job, paths, 1, err, sizeof err);
  snprintf(want, sizeof want, "%s: not an mlprof profile (bad magic)", path);
  int not_profile = rc == MLPROF_EFORMAT && strcmp(err, want) == 0;

  /* Only files that are not profiles in a directory: an error that says
   * what was skipped. */
  snprintf(path, sizeof path, "%s/e.mlprof", tmp_dir);
  buf none = {0};
  write_file(path, &none);
  paths[0] = tmp_dir;
  rc = mlprof__job_open(&job, paths, 1, err, sizeof err);
  snprintf(want, sizeof want,
           "no readable mlprof profile: skipped 2 files: 1 empty, 1 not an "
           "mlprof profile; first: %s/e.mlprof",
           tmp_dir);
  int none_left = rc == MLPROF_EFORMAT && strcmp(err, want) == 0 &&
                  job.count == 0 && job.profiles == NULL;

  /* A good profile next to them: they are skipped, and counted. */
  write_profile("a.mlprof", 1, 0, 0, 0, "h");
  rc = mlprof__job_open(&job, paths, 1, err, sizeof err);
  snprintf(want, sizeof want,
           "skipped 2 files: 1 empty, 1 not an mlprof profile; first: "
           "%s/e.mlprof",
           tmp_dir);
  int mixed = rc == 0 && job.count == 1 && job.profiles[0].pid == 1 &&
              job.skipped && strcmp(job.skipped, want) == 0;
  if (!mixed)
    fprintf(stderr, "  rc=%d err=%s skipped=%s\n", rc, err,
            job.skipped ? job.skipped : "(none)");
  if (rc == 0) mlprof__job_close(&job);

  /* The same file named on the command line is still an error. */
  const char *both[] = {tmp_dir, path};
  rc = mlprof__job_open(&job, both, 2, err, sizeof err);
  snprintf(want, sizeof want, "%s: not an mlprof profile (empty file)", path);
  int named = rc == MLPROF_EFORMAT && strcmp(err, want) == 0;
  remove_tmp_dir();
  CHECK(missing);
  CHECK(empty);
  CHECK(not_profile);
  CHECK(none_left);
  CHECK(mixed);
  CHECK(named);
  CHECK(mlprof__job_open(&job, paths, 0, err, sizeof err) < 0);
}

/* What the lines callback saw, as text. */
static int log_lines(void *ud, const mlprof__line_table *t) {
  buf *b = ud;
  char line[256];
  int n = snprintf(line, sizeof line, "%s %s:%u n=%u\n", t->function, t->file,
                   t->first_line, t->n);
  put(b, line, (size_t)n);
  for (uint32_t i = 0; i < t->n; i++) {
    const mlprof__line_row *r = &t->rows[i];
    n = snprintf(line, sizeof line, " %u %llu %llu %llu [%s]\n", r->line,
                 (unsigned long long)r->hits, (unsigned long long)r->total_ns,
                 (unsigned long long)r->exclusive_ns, r->source);
    put(b, line, (size_t)n);
  }
  return 0;
}

static void lines_payload(buf *p, const char *fn, uint64_t n) {
  put_str(p, fn);
  put_str(p, "train.py");
  put_uv(p, 10);
  put_uv(p, n);
}

static void test_lines_chunk(void) {
  buf f = {0}, p = {0}, got = {0};
  profile_start(&f);
  lines_payload(&p, "step", 2);
  put_uv(&p, 11), put_uv(&p, 3), put_uv(&p, 900), put_uv(&p, 700);
  put_str(&p, "x = load(<b>)");
  put_uv(&p, 12), put_uv(&p, 3), put_uv(&p, 100), put_uv(&p, 100);
  put_str(&p, "");
  chunk(&f, MLPROF__CHUNK_LINES, &p);
  /* Damaged: more lines than the payload can hold, then a row cut short. */
  lines_payload(&p, "bad", 1000);
  put_uv(&p, 11);
  chunk(&f, MLPROF__CHUNK_LINES, &p);
  lines_payload(&p, "cut", 1);
  put_uv(&p, 11), put_uv(&p, 1), put_uv(&p, 1), put_uv(&p, 1);
  put_uv(&p, 50); /* a 50-byte source, 0 there */
  chunk(&f, MLPROF__CHUNK_LINES, &p);
  mlprof__visitor v = {.ud = &got, .lines = log_lines};
  mlprof__read_report rep;
  int rc = mlprof__read_mem(f.d, f.n, &v, &rep, NULL, 0);
  put(&got, "", 1);
  CHECK_EQ(rc, 0);
  CHECK_STR((char *)got.d,
            "step train.py:10 n=2\n"
            " 11 3 900 700 [x = load(<b>)]\n"
            " 12 3 100 100 []\n");
  CHECK_EQ_U64(rep.damaged_chunks, 2);
  /* A reader that takes no lines skips them. */
  rc = mlprof__read_mem(f.d, f.n, NULL, &rep, NULL, 0);
  CHECK_EQ(rc, 0);
  free(f.d);
  free(p.d);
  free(got.d);
}

/* What the stack callbacks saw, as text. */
static int log_sfunc(void *ud, const mlprof__stack_func *f) {
  char line[128];
  int n = snprintf(line, sizeof line, "F%u %s:%s:%u\n", (unsigned)f->id,
                   f->file, f->function, (unsigned)f->first_line);
  put(ud, line, (size_t)n);
  return 0;
}

static int log_sframe(void *ud, const mlprof__stack_frame *f) {
  char line[128];
  int n = snprintf(line, sizeof line, "R%u %u:%u %s%s\n", (unsigned)f->id,
                   (unsigned)f->func, (unsigned)f->line, f->module, f->symbol);
  put(ud, line, (size_t)n);
  return 0;
}

static int log_snode(void *ud, uint32_t id, uint32_t parent, uint32_t frame) {
  char line[64];
  int n = snprintf(line, sizeof line, "N%u %u %u\n", (unsigned)id,
                   (unsigned)parent, (unsigned)frame);
  put(ud, line, (size_t)n);
  return 0;
}

static int log_ssample(void *ud, const mlprof__stack_sample *s) {
  char line[96];
  int n =
      snprintf(line, sizeof line, "S%llu %u %u %u %llu\n",
               (unsigned long long)s->t, (unsigned)s->tid, (unsigned)s->stack,
               (unsigned)s->flags, (unsigned long long)s->cpu_ns);
  put(ud, line, (size_t)n);
  return 0;
}

static int log_srate(void *ud, uint32_t hz) {
  char line[32];
  int n = snprintf(line, sizeof line, "H%u\n", (unsigned)hz);
  put(ud, line, (size_t)n);
  return 0;
}

static void test_stacks_chunk(void) {
  buf f = {0}, p = {0}, got = {0};
  profile_start(&f);
  uint8_t k;
  k = MLPROF__STK_RATE, put(&p, &k, 1), put_uv(&p, 500);
  k = MLPROF__STK_FUNC, put(&p, &k, 1), put_uv(&p, 1);
  put_str(&p, "a.py"), put_str(&p, "main"), put_uv(&p, 3);
  k = MLPROF__STK_FRAME, put(&p, &k, 1), put_uv(&p, 1), put_uv(&p, 1);
  put_uv(&p, 4);
  k = MLPROF__STK_NATIVE, put(&p, &k, 1), put_uv(&p, 2), put_uv(&p, 0x1000);
  put_str(&p, "libx.so"), put_str(&p, "f"), put_uv(&p, 8);
  k = MLPROF__STK_NODE, put(&p, &k, 1), put_uv(&p, 1), put_uv(&p, 0);
  put_uv(&p, 1);
  k = MLPROF__STK_NODE, put(&p, &k, 1), put_uv(&p, 2), put_uv(&p, 1);
  put_uv(&p, 2);
  /* Two samples, times delta-coded; the second with its CPU time. */
  k = MLPROF__STK_SAMPLE, put(&p, &k, 1), put_uv(&p, 20), put_uv(&p, 7);
  put_uv(&p, 2), put_uv(&p, 1);
  k = MLPROF__STK_SAMPLE, put(&p, &k, 1), put_uv(&p, 10), put_uv(&p, 7);
  put_uv(&p, 1), put_uv(&p, 9), put_uv(&p, 500);
  chunk(&f, MLPROF__CHUNK_STACKS, &p);
  /* Damaged: a node whose parent is not before it; an unknown kind; a
   * sample with flags no version sets; a sample cut short. */
  k = MLPROF__STK_NODE, put(&p, &k, 1), put_uv(&p, 3), put_uv(&p, 3);
  put_uv(&p, 1);
  chunk(&f, MLPROF__CHUNK_STACKS, &p);
  k = 99, put(&p, &k, 1), put_uv(&p, 1);
  chunk(&f, MLPROF__CHUNK_STACKS, &p);
  k = MLPROF__STK_SAMPLE, put(&p, &k, 1), put_uv(&p, 2), put_uv(&p, 7);
  put_uv(&p, 1), put_uv(&p, 64);
  chunk(&f, MLPROF__CHUNK_STACKS, &p);
  k = MLPROF__STK_SAMPLE, put(&p, &k, 1), put_uv(&p, 2), put_uv(&p, 7);
  put_uv(&p, 1), put_uv(&p, 8); /* cpu_ns missing */
  chunk(&f, MLPROF__CHUNK_STACKS, &p);
  mlprof__visitor v = {.ud = &got,
                       .stack_func = log_sfunc,
                       .stack_frame = log_sframe,
                       .stack_node = log_snode,
                       .stack_sample = log_ssample,
                       .stack_rate = log_srate};
  mlprof__read_report rep;
  int rc = mlprof__read_mem(f.d, f.n, &v, &rep, NULL, 0);
  put(&got, "", 1);
  CHECK_EQ(rc, 0);
  CHECK_STR((char *)got.d,
            "H500\n"
            "F1 a.py:main:3\n"
            "R1 1:4 \n"
            "R2 0:0 libx.sof\n"
            "N1 0 1\n"
            "N2 1 2\n"
            "S10 7 2 1 0\n"
            "S15 7 1 9 500\n");
  CHECK_EQ_U64(rep.damaged_chunks, 4);
  CHECK_EQ_U64(rep.last_ns, 15);
  free(f.d);
  free(p.d);
  free(got.d);
}

static int log_alloc(void *ud, const mlprof__alloc *a) {
  char line[128];
  int n = snprintf(line, sizeof line, "A%llu %u %llu %llu %llx %u %llu\n",
                   (unsigned long long)a->t, (unsigned)a->tid,
                   (unsigned long long)a->size, (unsigned long long)a->weight,
                   (unsigned long long)a->addr, (unsigned)a->zone,
                   (unsigned long long)a->stack);
  put(ud, line, (size_t)n);
  return 0;
}

static int log_afree(void *ud, uint32_t tid, uint64_t t, uint64_t addr) {
  char line[64];
  int n = snprintf(line, sizeof line, "D%llu %u %llx\n", (unsigned long long)t,
                   (unsigned)tid, (unsigned long long)addr);
  put(ud, line, (size_t)n);
  return 0;
}

static int log_asum(void *ud, const mlprof__alloc_sum *a) {
  char line[160];
  int n = snprintf(line, sizeof line, "U%llu %u %u %llu %llu %llu %llu %llu\n",
                   (unsigned long long)a->t, (unsigned)a->tid,
                   (unsigned)a->zone, (unsigned long long)a->stack,
                   (unsigned long long)a->count, (unsigned long long)a->size,
                   (unsigned long long)a->weight, (unsigned long long)a->var);
  put(ud, line, (size_t)n);
  return 0;
}

/* ALLOCS (since 1.5): an allocation, a site's folded allocations (tag 3,
 * the largest sums a file can say among them), a free; then damaged
 * chunks: folded allocations counting none, naming a counter as their
 * zone, cut short, and an unknown tag. */
static void test_allocs_chunk(void) {
  buf f = {0}, p = {0}, got = {0};
  profile_start(&f);
  put_uv(&p, 7), put_uv(&p, 1000);
  put_u8(&p, MLPROF__ALLOC_ALLOC), put_sv(&p, 10);
  put_uv(&p, 4096), put_uv(&p, 524288), put_uv(&p, 0x7f00), put_uv(&p, 1);
  put_uv(&p, 3);
  put_u8(&p, MLPROF__ALLOC_FOLDED), put_sv(&p, 5);
  put_uv(&p, 1), put_uv(&p, 4), put_uv(&p, 12), put_uv(&p, 8400);
  put_uv(&p, 6295200), put_uv(&p, 3300000000000);
  put_u8(&p, MLPROF__ALLOC_FOLDED), put_sv(&p, -3);
  put_uv(&p, 0), put_uv(&p, 0), put_uv(&p, UINT64_MAX);
  put_uv(&p, UINT64_MAX), put_uv(&p, UINT64_MAX), put_uv(&p, UINT64_MAX);
  put_u8(&p, MLPROF__ALLOC_FREE), put_sv(&p, 8), put_uv(&p, 0x7f00);
  chunk(&f, MLPROF__CHUNK_ALLOCS, &p);
  put_uv(&p, 7), put_uv(&p, 1000);
  put_u8(&p, MLPROF__ALLOC_FOLDED), put_sv(&p, 5);
  put_uv(&p, 1), put_uv(&p, 4), put_uv(&p, 0), put_uv(&p, 0);
  put_uv(&p, 0), put_uv(&p, 0);
  chunk(&f, MLPROF__CHUNK_ALLOCS, &p);
  put_uv(&p, 7), put_uv(&p, 1000);
  put_u8(&p, MLPROF__ALLOC_FOLDED), put_sv(&p, 5);
  put_uv(&p, 2), put_uv(&p, 4), put_uv(&p, 1), put_uv(&p, 10);
  put_uv(&p, 10), put_uv(&p, 0);
  chunk(&f, MLPROF__CHUNK_ALLOCS, &p);
  put_uv(&p, 7), put_uv(&p, 1000);
  put_u8(&p, MLPROF__ALLOC_FOLDED), put_sv(&p, 5);
  put_uv(&p, 1), put_uv(&p, 4), put_uv(&p, 1), put_uv(&p, 10);
  chunk(&f, MLPROF__CHUNK_ALLOCS, &p);
  put_uv(&p, 7), put_uv(&p, 1000);
  put_u8(&p, 4), put_sv(&p, 5), put_uv(&p, 1);
  chunk(&f, MLPROF__CHUNK_ALLOCS, &p);
  mlprof__visitor v = {.ud = &got,
                       .alloc = log_alloc,
                       .alloc_free = log_afree,
                       .alloc_sum = log_asum};
  mlprof__read_report rep;
  int rc = mlprof__read_mem(f.d, f.n, &v, &rep, NULL, 0);
  put(&got, "", 1);
  CHECK_EQ(rc, 0);
  CHECK_STR((char *)got.d,
            "A1010 7 4096 524288 7f00 1 3\n"
            "U1015 7 1 4 12 8400 6295200 3300000000000\n"
            "U1012 7 0 0 18446744073709551615 18446744073709551615 "
            "18446744073709551615 18446744073709551615\n"
            "D1020 7 7f00\n");
  CHECK_EQ_U64(rep.damaged_chunks, 4);
  CHECK(strstr(rep.problem, "counting none") != NULL);
  CHECK_EQ_U64(rep.last_ns, 1020);
  free(f.d);
  free(p.d);
  free(got.d);
}

const mlprof_test mlprof_tests_reader[] = {
    {"round_trip", test_round_trip},
    {"allocs_chunk", test_allocs_chunk},
    {"stacks_chunk", test_stacks_chunk},
    {"null_visitor_and_report", test_null_visitor_and_report},
    {"truncated_tail", test_truncated_tail},
    {"bit_flip_middle_chunk", test_bit_flip_middle_chunk},
    {"bit_flip_every_chunk", test_bit_flip_every_chunk},
    {"garbage_between_chunks", test_garbage_between_chunks},
    {"oversized_length", test_oversized_length},
    {"random_bytes", test_random_bytes},
    {"first_chunk_must_be_header", test_first_chunk_must_be_header},
    {"job_ranks", test_job_ranks},
    {"job_meta_only", test_job_meta_only},
    {"versions", test_versions},
    {"unknown_chunk_and_trailing_bytes", test_unknown_chunk_and_trailing_bytes},
    {"bad_records", test_bad_records},
    {"lost_names", test_lost_names},
    {"bad_names", test_bad_names},
    {"many_names", test_many_names},
    {"callback_stops_read", test_callback_stops_read},
    {"read_file_matches_mem", test_read_file_matches_mem},
    {"read_again_checks_crcs_once", test_read_again_checks_crcs_once},
    {"job_dir", test_job_dir},
    {"job_hosts", test_job_hosts},
    {"job_exec_chain", test_job_exec_chain},
    {"end_how", test_end_how},
    {"job_errors", test_job_errors},
    {"lines_chunk", test_lines_chunk},
    {NULL, NULL},
};
