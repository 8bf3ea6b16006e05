/* Writes the fuzzer's seed profiles into the directory given as argv[1]:
 * small, valid profiles covering every chunk and record type and a name
 * table large enough to grow, plus ones with an unknown chunk, a damaged
 * chunk and a truncated tail. */
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
  return 0;
}
