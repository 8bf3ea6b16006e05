/* Writes the fuzzer's seed profiles into the directory given as argv[1]:
 * small, valid profiles covering every chunk and record type and a name
 * table large enough to grow, plus ones with an unknown chunk, a damaged
 * chunk and a truncated tail; and jobs of two ranks for fuzz_job.c (the
 * two profiles one after the other): a plain one, and ones claiming 2^20
 * ranks, using an id near 2^32 that nothing announced, and with clock
 * offsets near the ends of int64_t. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/wire.h"

typedef struct {
  uint8_t d[4096];
  size_t n;
} buf;

static void put(buf *b, const void *p, size_t n) {
  if (b->n + n > sizeof b->d) abort();
  memcpy(b->d + b->n, p, n);
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

static void put_str(buf *b, const char *s) {
  put_uv(b, strlen(s));
  put(b, s, strlen(s));
}

/* Appends a chunk holding payload p, then empties p. */
static void chunk(buf *f, uint16_t type, buf *p) {
  uint8_t h[MLPROF__CHUNK_HEADER_SIZE];
  memcpy(h, MLPROF__CHUNK_MAGIC, 4);
  mlprof__put_u16(h + 4, type);
  mlprof__put_u16(h + 6, 0);
  mlprof__put_u32(h + 8, (uint32_t)p->n);
  mlprof__put_u32(h + 12,
                  mlprof__crc32(mlprof__crc32(0, h + 4, 8), p->d, p->n));
  put(f, h, sizeof h);
  put(f, p->d, p->n);
  p->n = 0;
}

static void start(buf *f, buf *p) {
  uint8_t h[MLPROF__FILE_HEADER_SIZE] = {0};
  memcpy(h, MLPROF__FILE_MAGIC, 8);
  mlprof__put_u16(h + 8, MLPROF__FORMAT_MAJOR);
  mlprof__put_u16(h + 10, MLPROF__FORMAT_MINOR);
  put(f, h, sizeof h);
  put_uv(p, 4242);
  put_uv(p, 1);
  put_uv(p, 1700000000000000000ull);
  put_uv(p, 123456789);
  put_sv(p, 1);
  put_sv(p, 4);
  put_str(p, "node1");
  put_str(p, "/usr/bin/python3");
  put_uv(p, 2);
  put_str(p, "python3");
  put_str(p, "train.py");
  put_str(p, "tsc");
  put_uv(p, 200);
  chunk(f, MLPROF__CHUNK_HEADER, p);
}

static void names(buf *f, buf *p) {
  static const struct {
    uint8_t kind, cat;
    const char *name;
  } n[] = {{MLPROF__NAME_ZONE, 2, "forward"},
           {MLPROF__NAME_GAUGE, 0, "loss"},
           {MLPROF__NAME_UNITS, 0, "tokens"},
           {MLPROF__NAME_STRING, 0, "model"},
           {MLPROF__NAME_STRING, 0, "gpt"}};
  put_uv(p, 5);
  for (int i = 0; i < 5; i++) {
    put_uv(p, (uint64_t)i + 1);
    put_u8(p, n[i].kind);
    put_u8(p, n[i].cat);
    put_str(p, n[i].name);
    put_str(p, i ? "" : "step");
    put_str(p, i ? "" : "train.py");
    put_uv(p, i ? 0 : 42);
  }
  chunk(f, MLPROF__CHUNK_NAMES, p);
}

static void events(buf *f, buf *p, uint64_t tid, uint64_t base) {
  double loss = 2.5;
  put_uv(p, tid);
  put_uv(p, 0);
  put_uv(p, base);
  put_u8(p, MLPROF__REC_SPAN);
  put_uv(p, 1), put_uv(p, 0), put_sv(p, 0), put_uv(p, 500);
  put_u8(p, MLPROF__REC_SPAN_META);
  put_uv(p, 4), put_uv(p, 5);
  put_u8(p, MLPROF__REC_SPAN_UNITS);
  put_uv(p, 3), put_uv(p, 64);
  put_u8(p, MLPROF__REC_GAUGE);
  put_uv(p, 2), put_sv(p, 600);
  put(p, &loss, 8);
  put_u8(p, MLPROF__REC_UNITS);
  put_uv(p, 3), put_sv(p, -100), put_uv(p, 10);
  put_u8(p, MLPROF__REC_STEP);
  put_sv(p, 1000);
  put_u8(p, MLPROF__REC_STEP_END);
  put_sv(p, 50);
  put_u8(p, MLPROF__REC_OPEN);
  put_uv(p, 1), put_uv(p, 1), put_sv(p, 5);
  chunk(f, MLPROF__CHUNK_EVENTS, p);
}

static void end(buf *f, buf *p) {
  put_uv(p, 9000);
  put_uv(p, 0);
  put_uv(p, 0);
  chunk(f, MLPROF__CHUNK_END, p);
}

/* Enough names to grow the reader's id table, each used by a span. */
static void many_names(buf *f, buf *p) {
  put_uv(p, 40);
  for (int i = 0; i < 40; i++) {
    put_uv(p, 1000 + (uint64_t)i * 77);
    put_u8(p, MLPROF__NAME_ZONE);
    put_u8(p, (uint8_t)(i % 8));
    put_str(p, "z");
    put_str(p, "");
    put_str(p, "");
    put_uv(p, 0);
  }
  chunk(f, MLPROF__CHUNK_NAMES, p);
  put_uv(p, 3);
  put_uv(p, 0);
  put_uv(p, 0);
  for (int i = 0; i < 40; i++) {
    put_u8(p, MLPROF__REC_SPAN);
    put_uv(p, 1000 + (uint64_t)i * 77), put_uv(p, 0), put_sv(p, 3),
        put_uv(p, 2);
  }
  chunk(f, MLPROF__CHUNK_EVENTS, p);
}

/* The file header and HEADER chunk of rank `rank` of `world` (pid
 * 100 + rank, its own host), started at start_mono. */
static void start_rank(buf *f, buf *p, int64_t rank, int64_t world,
                       uint64_t start_mono) {
  uint8_t h[MLPROF__FILE_HEADER_SIZE] = {0};
  memcpy(h, MLPROF__FILE_MAGIC, 8);
  mlprof__put_u16(h + 8, MLPROF__FORMAT_MAJOR);
  mlprof__put_u16(h + 10, MLPROF__FORMAT_MINOR);
  put(f, h, sizeof h);
  put_uv(p, 100 + (uint64_t)rank);
  put_uv(p, 1);
  put_uv(p, 1700000000000000000ull);
  put_uv(p, start_mono);
  put_sv(p, rank);
  put_sv(p, world);
  put_str(p, rank ? "node1" : "node0");
  put_str(p, "/usr/bin/python3");
  put_uv(p, 1);
  put_str(p, "train.py");
  put_str(p, "tsc");
  put_uv(p, 200);
  chunk(f, MLPROF__CHUNK_HEADER, p);
}

static void meta(buf *f, buf *p, const char *key, const char *value) {
  put_uv(p, 1);
  put_str(p, key);
  put_str(p, value);
  chunk(f, MLPROF__CHUNK_META, p);
}

/* A rank's names and n steps of compute, then an all-reduce over the group
 * "world" (seq 0, 1, ...); far: a span of that id, never announced (0:
 * none). */
static void rank_events(buf *f, buf *p, int n, uint64_t far) {
  static const struct {
    uint8_t kind, cat;
    const char *name;
  } nm[] = {
      {MLPROF__NAME_ZONE, 5, "all_reduce"}, {MLPROF__NAME_STRING, 0, "group"},
      {MLPROF__NAME_STRING, 0, "world"},    {MLPROF__NAME_UNITS, 0, "seq"},
      {MLPROF__NAME_UNITS, 0, "bytes"},     {MLPROF__NAME_ZONE, 2, "forward"}};
  put_uv(p, 6);
  for (int i = 0; i < 6; i++) {
    put_uv(p, (uint64_t)i + 1);
    put_u8(p, nm[i].kind);
    put_u8(p, nm[i].cat);
    put_str(p, nm[i].name);
    put_str(p, "");
    put_str(p, "");
    put_uv(p, 0);
  }
  chunk(f, MLPROF__CHUNK_NAMES, p);
  put_uv(p, 7);
  put_uv(p, 0);
  put_uv(p, 0);
  for (int i = 0; i < n; i++) {
    put_u8(p, MLPROF__REC_STEP);
    put_sv(p, i ? 200 : 0);
    put_u8(p, MLPROF__REC_SPAN);
    put_uv(p, 6), put_uv(p, 0), put_sv(p, 0), put_uv(p, 700);
    put_u8(p, MLPROF__REC_SPAN);
    put_uv(p, 1), put_uv(p, 0), put_sv(p, 750), put_uv(p, 50);
    put_u8(p, MLPROF__REC_SPAN_META);
    put_uv(p, 2), put_uv(p, 3);
    put_u8(p, MLPROF__REC_SPAN_UNITS);
    put_uv(p, 4), put_uv(p, (uint64_t)i);
    put_u8(p, MLPROF__REC_SPAN_UNITS);
    put_uv(p, 5), put_uv(p, 4096);
    put_u8(p, MLPROF__REC_STEP);
    put_sv(p, 50);
  }
  if (far) {
    put_u8(p, MLPROF__REC_SPAN);
    put_uv(p, far), put_uv(p, 0), put_sv(p, 1), put_uv(p, 10);
  }
  chunk(f, MLPROF__CHUNK_EVENTS, p);
}

/* A job of two ranks as fuzz_job.c reads it: the two profiles one after
 * the other. world: the world size both claim; far: rank 0's unannounced
 * id (0: none); mono0: rank 0's start; clocks: rank 1's dist.clock.init and
 * .final (NULL: none). */
static void rank_job(buf *f, buf *p, int64_t world, uint64_t far,
                     uint64_t mono0, const char *init, const char *final) {
  f->n = 0;
  for (int64_t r = 0; r < 2; r++) {
    start_rank(f, p, r, world, r ? 123456789 : mono0);
    rank_events(f, p, 4, r ? 0 : far);
    if (r == 0) meta(f, p, "dist.clock.init", "0 0 0");
    if (r == 1 && init) meta(f, p, "dist.clock.init", init);
    if (r == 1 && final) meta(f, p, "dist.clock.final", final);
    end(f, p);
  }
}

static void save(const char *dir, const char *name, const buf *f) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *fp = fopen(path, "wb");
  if (!fp || fwrite(f->d, 1, f->n, fp) != f->n || fclose(fp) != 0) {
    perror(path);
    exit(1);
  }
}

int main(int argc, char **argv) {
  static buf f, p;
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  start(&f, &p);
  save(argv[1], "header-only.mlprof", &f);

  names(&f, &p);
  put_uv(&p, 7);
  put_str(&p, "main");
  chunk(&f, MLPROF__CHUNK_THREAD, &p);
  put_uv(&p, 1);
  put_str(&p, "batch");
  put_str(&p, "32");
  chunk(&f, MLPROF__CHUNK_META, &p);
  events(&f, &p, 7, 1000);
  end(&f, &p);
  save(argv[1], "complete.mlprof", &f);

  f.n = 0;
  start(&f, &p);
  names(&f, &p);
  events(&f, &p, 7, 1000);
  events(&f, &p, 8, 2000);
  events(&f, &p, 7, 5000);
  f.n -= 9; /* killed while writing the last chunk */
  save(argv[1], "two-threads-truncated.mlprof", &f);

  f.n = 0;
  start(&f, &p);
  names(&f, &p);
  put_str(&p, "a chunk type from the future");
  chunk(&f, 99, &p);
  size_t damaged = f.n;
  events(&f, &p, 7, 1000);
  f.d[damaged + MLPROF__CHUNK_HEADER_SIZE + 4] ^= 0x40;
  events(&f, &p, 7, 3000);
  end(&f, &p);
  save(argv[1], "unknown-and-damaged.mlprof", &f);

  f.n = 0;
  start(&f, &p);
  many_names(&f, &p);
  end(&f, &p);
  save(argv[1], "many-names.mlprof", &f);

  f.n = 0;
  start(&f, &p);
  for (int k = 0; k < 2; k++) { /* the second table replaces the first */
    put_str(&p, "train_step");
    put_str(&p, "train.py");
    put_uv(&p, 10);
    put_uv(&p, 2);
    for (uint64_t line = 11; line <= 12; line++) {
      put_uv(&p, line), put_uv(&p, 3 + (uint64_t)k), put_uv(&p, 900);
      put_uv(&p, 700);
      put_str(&p, "loss = model(<batch>)");
    }
    chunk(&f, MLPROF__CHUNK_LINES, &p);
  }
  end(&f, &p);
  save(argv[1], "lines.mlprof", &f);

  /* Allocations (since 1.5): one in zone 1, one in none, a free of each
   * and of an address never allocated. */
  f.n = 0;
  start(&f, &p);
  names(&f, &p);
  put_uv(&p, 7), put_uv(&p, 1000);
  put_u8(&p, MLPROF__ALLOC_ALLOC);
  put_sv(&p, 10), put_uv(&p, 4096), put_uv(&p, 524288), put_uv(&p, 0x7f0010);
  put_uv(&p, 1), put_uv(&p, 3);
  put_u8(&p, MLPROF__ALLOC_ALLOC);
  put_sv(&p, 5), put_uv(&p, 1 << 20), put_uv(&p, 1 << 20);
  put_uv(&p, 0x7f2000), put_uv(&p, 0), put_uv(&p, 0);
  put_u8(&p, MLPROF__ALLOC_FREE);
  put_sv(&p, -2), put_uv(&p, 0x7f0010);
  put_u8(&p, MLPROF__ALLOC_FREE);
  put_sv(&p, 40), put_uv(&p, 0x1234);
  chunk(&f, MLPROF__CHUNK_ALLOCS, &p);
  end(&f, &p);
  save(argv[1], "allocs.mlprof", &f);

  /* Folded allocations (since 1.5): a site's sum in zone 1, one of a single
   * allocation in none, one whose sums are the largest a file can say, and
   * an allocation live across them. */
  f.n = 0;
  start(&f, &p);
  names(&f, &p);
  put_uv(&p, 7), put_uv(&p, 1000);
  put_u8(&p, MLPROF__ALLOC_ALLOC);
  put_sv(&p, 10), put_uv(&p, 4096), put_uv(&p, 524288), put_uv(&p, 0x7f0010);
  put_uv(&p, 1), put_uv(&p, 3);
  put_u8(&p, MLPROF__ALLOC_FOLDED);
  put_sv(&p, 20), put_uv(&p, 1), put_uv(&p, 3), put_uv(&p, 12);
  put_uv(&p, 12 * 700), put_uv(&p, 12 * 524600), put_uv(&p, 3300000000000);
  put_u8(&p, MLPROF__ALLOC_FOLDED);
  put_sv(&p, 1), put_uv(&p, 0), put_uv(&p, 0), put_uv(&p, 1);
  put_uv(&p, 100), put_uv(&p, 524338), put_uv(&p, 274877906944);
  put_u8(&p, MLPROF__ALLOC_FOLDED);
  put_sv(&p, 1), put_uv(&p, 1), put_uv(&p, 3), put_uv(&p, UINT64_MAX);
  put_uv(&p, UINT64_MAX), put_uv(&p, UINT64_MAX), put_uv(&p, UINT64_MAX);
  put_u8(&p, MLPROF__ALLOC_FREE);
  put_sv(&p, 30), put_uv(&p, 0x7f0010);
  chunk(&f, MLPROF__CHUNK_ALLOCS, &p);
  end(&f, &p);
  save(argv[1], "allocs-folded.mlprof", &f);

  rank_job(&f, &p, 2, 0, 123456789, "1500 20 1000", "1600 20 9000");
  save(argv[1], "job-two-ranks.mlprof", &f);
  rank_job(&f, &p, 1 << 20, 0, 123456789, NULL, NULL);
  save(argv[1], "job-world-claim.mlprof", &f);
  rank_job(&f, &p, 2, 3000000000u, 123456789, NULL, NULL);
  save(argv[1], "job-far-id.mlprof", &f);
  rank_job(&f, &p, 2, 0, UINT64_MAX, "9223372036854775000 10 5",
           "-9223372036854775000 10 6");
  save(argv[1], "job-clock-ends.mlprof", &f);
  return 0;
}
