/* libFuzzer target for the profile reader (src/format/reader.c).
 *
 * Each input is read twice: as it is, which mostly exercises chunk framing
 * and resynchronisation (a random mutation rarely keeps a CRC right), and
 * with the CRC of every framed chunk recomputed, so that mutations reach the
 * payload parsers; the second also from a file as a job opens it
 * (mlprof__read_file_meta: EVENTS and other chunks passed over by their
 * length, unchecked), and the chunks of the first read again by their
 * offsets (mlprof__read_fd_chunks), which must all verify. The visitor reads
 * every string it is given up to and including its NUL, so that ASan sees any
 * overread, and checks the reader's promises; a broken promise aborts. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "format/reader.h"
#include "format/wire.h"
#include "mlprof.h"

typedef struct {
  uint32_t id;
  uint8_t kind;
} seen_name;

typedef struct {
  seen_name *names;
  size_t n, cap;
  uint64_t last; /* the latest time passed */
  size_t sink;
  int headers, damaged_header;
  uint64_t *offs; /* the chunks passed, in order */
  size_t noffs, offs_cap;
} state;

static void touch(state *s, const char *str, size_t len) {
  size_t n = strlen(str);
  if (n > len || str[len] != '\0') abort();
  s->sink += n;
}

static void see_time(state *s, uint64_t t) {
  if (t > INT64_MAX) abort();
  if (t > s->last) s->last = t;
}

/* Every id given to a record callback was announced with the right kind. */
static void check_name(const state *s, uint32_t id, uint8_t kind) {
  for (size_t i = 0; i < s->n; i++)
    if (s->names[i].id == id) {
      if (s->names[i].kind != kind) abort();
      return;
    }
  abort();
}

static int on_header(void *ud, const mlprof__header *h) {
  state *s = ud;
  s->headers++;
  /* A damaged HEADER has every field unknown. */
  if (h->damaged && (h->pid || h->start_mono_ns || h->argc || h->rank != -1 ||
                     h->hostname[0]))
    abort();
  s->damaged_header |= h->damaged;
  touch(s, h->hostname, strlen(h->hostname));
  touch(s, h->exe, strlen(h->exe));
  touch(s, h->clock, strlen(h->clock));
  for (uint32_t i = 0; i < h->argc; i++)
    touch(s, h->argv[i], strlen(h->argv[i]));
  return 0;
}

static int on_name(void *ud, const mlprof__name *n) {
  state *s = ud;
  touch(s, n->name, n->name_len);
  touch(s, n->function, strlen(n->function));
  touch(s, n->file, strlen(n->file));
  if (n->id == 0 || n->kind > MLPROF__NAME_MEASURE || n->category >= 8) abort();
  for (size_t i = 0; i < s->n; i++)
    if (s->names[i].id == n->id) abort(); /* announced twice */
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->names = realloc(s->names, s->cap * sizeof *s->names);
    if (!s->names) abort();
  }
  s->names[s->n++] = (seen_name){n->id, n->kind};
  return 0;
}

static int on_thread(void *ud, uint32_t tid, const char *name, size_t len) {
  (void)tid;
  touch(ud, name, len);
  return 0;
}

static int on_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin, uint64_t end) {
  (void)tid, (void)depth;
  if (end < begin) abort();
  check_name(ud, name, MLPROF__NAME_ZONE);
  see_time(ud, end);
  return 0;
}

static int on_span_meta(void *ud, uint32_t tid, uint32_t key, uint32_t value) {
  (void)tid;
  check_name(ud, key, MLPROF__NAME_STRING);
  check_name(ud, value, MLPROF__NAME_STRING);
  return 0;
}

static int on_span_units(void *ud, uint32_t tid, uint32_t name, uint64_t n) {
  (void)tid, (void)n;
  check_name(ud, name, MLPROF__NAME_UNITS);
  return 0;
}

static int on_counter(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                      double v) {
  (void)tid, (void)v;
  check_name(ud, name, MLPROF__NAME_GAUGE);
  see_time(ud, t);
  return 0;
}

static int on_units(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                    uint64_t n) {
  (void)tid, (void)n;
  check_name(ud, name, MLPROF__NAME_UNITS);
  see_time(ud, t);
  return 0;
}

static int on_step(void *ud, uint32_t tid, uint64_t t) {
  (void)tid;
  see_time(ud, t);
  return 0;
}

static int on_source(void *ud, const char *name, size_t nlen, int available,
                     const char *reason, size_t rlen) {
  (void)available;
  touch(ud, name, nlen);
  touch(ud, reason, rlen);
  return 0;
}

static int on_sample(void *ud, const mlprof__sample_row *row) {
  if (row->label) check_name(ud, row->label, MLPROF__NAME_STRING);
  for (uint32_t i = 0; i < row->n; i++) {
    check_name(ud, row->m[i].name, MLPROF__NAME_MEASURE);
    if (!row->m[i].valid) check_name(ud, row->m[i].reason, MLPROF__NAME_STRING);
  }
  see_time(ud, row->t);
  return 0;
}

static int on_open(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin) {
  (void)tid, (void)depth;
  check_name(ud, name, MLPROF__NAME_ZONE);
  see_time(ud, begin);
  return 0;
}

static int on_meta(void *ud, const char *key, size_t klen, const char *value,
                   size_t vlen) {
  touch(ud, key, klen);
  touch(ud, value, vlen);
  return 0;
}

static int on_end(void *ud, uint64_t end_ns, uint64_t dropped,
                  uint64_t unmatched) {
  (void)dropped, (void)unmatched;
  see_time(ud, end_ns);
  return 0;
}

static int on_lines(void *ud, const mlprof__line_table *t) {
  touch(ud, t->function, strlen(t->function));
  touch(ud, t->file, strlen(t->file));
  for (uint32_t i = 0; i < t->n; i++)
    touch(ud, t->rows[i].source, strlen(t->rows[i].source));
  return 0;
}

static int on_alloc(void *ud, const mlprof__alloc *a) {
  if (a->zone) check_name(ud, a->zone, MLPROF__NAME_ZONE);
  see_time(ud, a->t);
  return 0;
}

static int on_alloc_sum(void *ud, const mlprof__alloc_sum *a) {
  if (a->zone) check_name(ud, a->zone, MLPROF__NAME_ZONE);
  if (!a->count) abort(); /* the reader calls it damage */
  see_time(ud, a->t);
  return 0;
}

static int on_alloc_free(void *ud, uint32_t tid, uint64_t t, uint64_t addr) {
  (void)tid, (void)addr;
  see_time(ud, t);
  return 0;
}

/* Stacks: strings valid, a node's parent older than it, a sample's time
 * among the file's and its flags known. */
static int on_stack_func(void *ud, const mlprof__stack_func *f) {
  touch(ud, f->file, strlen(f->file));
  touch(ud, f->function, strlen(f->function));
  return 0;
}

static int on_stack_frame(void *ud, const mlprof__stack_frame *f) {
  touch(ud, f->module, strlen(f->module));
  touch(ud, f->symbol, strlen(f->symbol));
  return 0;
}

static int on_stack_node(void *ud, uint32_t id, uint32_t parent,
                         uint32_t frame) {
  (void)ud, (void)frame;
  if (parent && parent >= id) abort();
  return 0;
}

static int on_stack_sample(void *ud, const mlprof__stack_sample *smp) {
  if (smp->flags > 31) abort();
  see_time(ud, smp->t);
  return 0;
}

static int on_stack_rate(void *ud, uint32_t hz) {
  (void)ud;
  if (hz == 0) abort();
  return 0;
}

static int on_events(void *ud, uint32_t tid, uint64_t dropped) {
  (void)ud, (void)tid, (void)dropped;
  return 0;
}

static int on_chunk(void *ud, uint16_t type, uint64_t off, uint32_t len) {
  (void)type;
  state *s = ud;
  if (len < MLPROF__CHUNK_HEADER_SIZE ||
      (s->noffs && off < s->offs[s->noffs - 1] + MLPROF__CHUNK_HEADER_SIZE))
    abort();
  if (s->noffs == s->offs_cap) {
    s->offs_cap = s->offs_cap ? 2 * s->offs_cap : 16;
    s->offs = realloc(s->offs, s->offs_cap * sizeof *s->offs);
    if (!s->offs) abort();
  }
  s->offs[s->noffs++] = off;
  return 0;
}

/* Reads the chunks at offs again from a file: each one verifies. */
static void read_chunks(const uint8_t *data, size_t size, const uint64_t *offs,
                        size_t n) {
  int fd = memfd_create("fuzz", 0);
  if (fd < 0 || write(fd, data, size) != (ssize_t)size) abort();
  mlprof__read_report rep;
  char err[256];
  if (mlprof__read_fd_chunks(fd, offs, n, NULL, &rep, err, sizeof err) != 0 ||
      rep.chunks + rep.damaged_chunks != n)
    abort();
  close(fd);
}

/* Reads the bytes from a file, as a job opens it. */
static int read_meta(const uint8_t *data, size_t size, const mlprof__visitor *v,
                     mlprof__read_report *rep, char *err, size_t errlen) {
  int fd = memfd_create("fuzz", 0);
  if (fd < 0 || write(fd, data, size) != (ssize_t)size) abort();
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  int rc = mlprof__read_file_meta(path, v, rep, err, errlen);
  close(fd);
  return rc;
}

static void read_once(const uint8_t *data, size_t size, int meta_only) {
  state s = {0};
  mlprof__visitor v = {
      .ud = &s,
      .header = on_header,
      .name = on_name,
      .thread = on_thread,
      .chunk = on_chunk,
      .span = on_span,
      .span_meta = on_span_meta,
      .span_units = on_span_units,
      .counter = on_counter,
      .units = on_units,
      .step = on_step,
      .step_end = on_step,
      .open = on_open,
      .meta = on_meta,
      .end = on_end,
      .source = on_source,
      .sample = on_sample,
      .lines = on_lines,
      .alloc = on_alloc,
      .alloc_free = on_alloc_free,
      .alloc_sum = on_alloc_sum,
      .stack_func = on_stack_func,
      .stack_frame = on_stack_frame,
      .stack_node = on_stack_node,
      .stack_sample = on_stack_sample,
      .stack_rate = on_stack_rate,
      .events = on_events,
  };
  mlprof__read_report rep;
  char err[256];
  int rc = meta_only ? read_meta(data, size, &v, &rep, err, sizeof err)
                     : mlprof__read_mem(data, size, &v, &rep, err, sizeof err);
  if (rc != 0 && rc != MLPROF_EFORMAT) abort();
  if (strlen(err) >= sizeof err || strlen(rep.problem) >= sizeof rep.problem)
    abort();
  if (rc == MLPROF_EFORMAT && !err[0]) abort();
  if (rc == 0) {
    if (rep.last_ns != s.last) abort();
    if (rep.skipped_bytes + rep.truncated_bytes > size) abort();
    if ((rep.damaged_chunks || rep.truncated_bytes) && !rep.problem[0]) abort();
    if (s.headers != 1 || (s.damaged_header && !rep.damaged_chunks)) abort();
    if (rep.lost_names > s.n || (rep.lost_names && !rep.problem[0])) abort();
    if (!meta_only) read_chunks(data, size, s.offs, s.noffs);
  }
  free(s.names);
  free(s.offs);
}

/* Recomputes the CRC of every chunk framed from the file header on. */
static void fix_crcs(uint8_t *d, size_t n) {
  size_t i = MLPROF__FILE_HEADER_SIZE;
  while (i + MLPROF__CHUNK_HEADER_SIZE <= n) {
    uint32_t len = mlprof__get_u32(d + i + 8);
    if (memcmp(d + i, MLPROF__CHUNK_MAGIC, 4) != 0 ||
        len > n - i - MLPROF__CHUNK_HEADER_SIZE) {
      i++;
      continue;
    }
    uint32_t crc = mlprof__crc32(0, d + i + 4, 8);
    crc = mlprof__crc32(crc, d + i + MLPROF__CHUNK_HEADER_SIZE, len);
    mlprof__put_u32(d + i + 12, crc);
    i += MLPROF__CHUNK_HEADER_SIZE + len;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  read_once(data, size, 0);
  uint8_t *copy = malloc(size ? size : 1);
  if (!copy) return 0;
  memcpy(copy, data, size);
  fix_crcs(copy, size);
  read_once(copy, size, 0);
  read_once(copy, size, 1);
  free(copy);
  return 0;
}
