/* The Parquet writer (src/export/parquet.c): Thrift compact encoding byte
 * for byte, the RLE / bit-packing hybrid against a decoder written here from
 * the format's description, and a whole file's frame. DuckDB, pyarrow and
 * Spark read real exports in tests/e2e/test_parquet.py. */
#include <mlprof.h>
#include <stdlib.h>

#include "export/parquet.h"
#include "test.h"

static int bytes_are(const mlprof__out *o, const uint8_t *want, size_t n) {
  if (o->len != n) {
    fprintf(stderr, "  length %zu, want %zu\n", o->len, n);
    return 0;
  }
  for (size_t i = 0; i < n; i++)
    if ((uint8_t)o->buf[i] != want[i]) {
      fprintf(stderr, "  byte %zu: 0x%02x, want 0x%02x\n", i,
              (uint8_t)o->buf[i], want[i]);
      return 0;
    }
  return 1;
}

static void test_thrift_compact(void) {
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  mlprof__tc t = {.o = &o};
  mlprof__tc_i32(&t, 1, 1);   /* short form: delta 1, i32 */
  mlprof__tc_i64(&t, 3, -1);  /* delta 2, zigzag(-1) = 1 */
  mlprof__tc_i32(&t, 20, 5);  /* delta 17: long form */
  mlprof__tc_bool(&t, 21, 1); /* the value in the type nibble */
  mlprof__tc_binary(&t, 22, "ab", 2);
  mlprof__tc_begin(&t, 23);   /* a nested struct restarts ids */
  mlprof__tc_i32(&t, 1, 300); /* zigzag 600: two varint bytes */
  mlprof__tc_end(&t);
  mlprof__tc_list(&t, 24, MLPROF__TC_I32, 2);
  mlprof__tc_elem_i32(&t, 1);
  mlprof__tc_elem_i32(&t, 2);
  mlprof__tc_list(&t, 25, MLPROF__TC_BINARY, 20); /* 15 or more: long */
  for (int i = 0; i < 20; i++) mlprof__tc_elem_binary(&t, "", 0);
  mlprof__tc_i32(&t, 2, 2); /* a smaller id: long form */
  mlprof__tc_list(&t, 3, MLPROF__TC_STRUCT, 1);
  mlprof__tc_begin(&t, 0); /* a list's struct element: no header */
  mlprof__tc_i64(&t, 1, 64);
  mlprof__tc_end(&t);
  mlprof__tc_end(&t);
  static const uint8_t want[] = {
      0x15, 0x02,                   /* 1: i32 1 */
      0x26, 0x01,                   /* 3: i64 -1 */
      0x05, 0x28, 0x0a,             /* 20: i32 5 */
      0x11,                         /* 21: true */
      0x18, 0x02, 'a',  'b',        /* 22: "ab" */
      0x1c, 0x15, 0xd8, 0x04, 0x00, /* 23: {1: 300} */
      0x19, 0x25, 0x02, 0x04,       /* 24: [1, 2] */
      0x19, 0xf8, 0x14,             /* 25: 20 binaries */
      0,    0,    0,    0,    0,    0, 0, 0, 0,    0,    0,    0,
      0,    0,    0,    0,    0,    0, 0, 0, 0x05, 0x04, 0x04, /* 2: i32 2, long
                                                                  form */
      0x19, 0x1c,             /* 3: a list of 1 struct */
      0x16, 0x80, 0x01, 0x00, /* {1: i64 64} */
      0x00};                  /* STOP */
  CHECK(bytes_are(&o, want, sizeof want));
  CHECK_EQ(t.depth, 0);
  /* Varints of 64-bit values. */
  o.len = 0;
  mlprof__tc_varint(&t, UINT64_MAX);
  static const uint8_t max[] = {0xff, 0xff, 0xff, 0xff, 0xff,
                                0xff, 0xff, 0xff, 0xff, 0x01};
  CHECK(bytes_are(&o, max, sizeof max));
  mlprof__out_close(&o);
}

/* Decodes n values of the hybrid encoding; returns the bytes used, or 0 on
 * a malformed input. */
static size_t rle_decode(const uint8_t *p, size_t len, unsigned width,
                         uint32_t *v, size_t n) {
  size_t at = 0, got = 0, vbytes = (width + 7) / 8;
  while (got < n) {
    uint64_t h = 0;
    int shift = 0;
    do {
      if (at >= len || shift > 56) return 0;
      h |= (uint64_t)(p[at] & 0x7f) << shift;
      shift += 7;
    } while (p[at++] & 0x80);
    if (h & 1) {
      size_t count = (size_t)(h >> 1) * 8;
      uint64_t acc = 0;
      unsigned bits = 0;
      for (size_t k = 0; k < count; k++) {
        while (bits < width) {
          if (at >= len) return 0;
          acc |= (uint64_t)p[at++] << bits;
          bits += 8;
        }
        uint32_t x = (uint32_t)(acc & ((width == 32) ? 0xffffffffu
                                                     : ((1u << width) - 1)));
        acc >>= width;
        bits -= width;
        if (got < n) v[got++] = x;
      }
    } else {
      size_t count = (size_t)(h >> 1);
      uint32_t x = 0;
      for (size_t b = 0; b < vbytes; b++) {
        if (at >= len) return 0;
        x |= (uint32_t)p[at++] << (8 * b);
      }
      if (!count) return 0;
      for (size_t k = 0; k < count && got < n; k++) v[got++] = x;
    }
  }
  return at;
}

static void test_rle_hybrid(void) {
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  /* Ten zeros of width 1: one RLE run. */
  uint32_t zeros[10] = {0};
  mlprof__rle_hybrid(&o, zeros, 10, 1);
  static const uint8_t run[] = {0x14, 0x00};
  CHECK(bytes_are(&o, run, sizeof run));
  /* 1,0,1,0,1,0,1,0 of width 1: one bit-packed group, LSB first. */
  uint32_t alt[8] = {1, 0, 1, 0, 1, 0, 1, 0};
  o.len = 0;
  mlprof__rle_hybrid(&o, alt, 8, 1);
  static const uint8_t packed[] = {0x03, 0x55};
  CHECK(bytes_are(&o, packed, sizeof packed));
  /* Round trips: mixes of runs and noise at several widths, lengths not
   * multiples of 8, runs starting mid-group. */
  enum { N = 1000 };
  uint32_t *v = malloc(N * sizeof *v), *back = malloc(N * sizeof *back);
  CHECK(v && back);
  static const unsigned widths[] = {1, 2, 3, 7, 8, 13, 17, 24, 31, 32};
  uint32_t seed = 12345;
  for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
    unsigned w = widths[wi];
    for (size_t n = 1; n <= N; n += 97) {
      for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        uint32_t mask = w == 32 ? 0xffffffffu : (1u << w) - 1;
        /* Blocks of repeats (runs) between stretches of noise. */
        v[i] = (i / 13) % 3 == 0 && i ? v[i - 1] : (seed >> 3) & mask;
      }
      o.len = 0;
      mlprof__rle_hybrid(&o, v, n, w);
      size_t used = rle_decode((const uint8_t *)o.buf, o.len, w, back, n);
      if (used != o.len || memcmp(v, back, n * sizeof *v)) {
        free(v);
        free(back);
        mlprof__out_close(&o);
        TEST_FAIL("width %u, %zu values: round trip failed (%zu of %zu bytes)",
                  w, n, used, o.len);
      }
    }
  }
  free(v);
  free(back);
  mlprof__out_close(&o);
}

static uint64_t uvarint(const uint8_t *p, size_t len, size_t *at) {
  uint64_t v = 0;
  int shift = 0;
  while (*at < len && shift < 70) {
    uint8_t b = p[(*at)++];
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
    shift += 7;
  }
  return v;
}

static int64_t unzigzag(uint64_t u) {
  return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

/* Decodes DELTA_BINARY_PACKED as the format describes it; returns the
 * values decoded (at most max) and sets *used to the bytes read. */
static size_t delta_decode(const uint8_t *p, size_t len, int64_t *v, size_t max,
                           size_t *used) {
  size_t at = 0;
  uint64_t block = uvarint(p, len, &at), minis = uvarint(p, len, &at);
  uint64_t total = uvarint(p, len, &at);
  int64_t cur = unzigzag(uvarint(p, len, &at));
  size_t got = 0;
  if (total && got < max) v[got++] = cur;
  size_t per_mini = (size_t)(block / minis);
  while (got < total && got < max) {
    int64_t least = unzigzag(uvarint(p, len, &at));
    uint8_t w[16];
    for (uint64_t k = 0; k < minis; k++) w[k] = at < len ? p[at++] : 0;
    for (uint64_t k = 0; k < minis && got < total; k++) {
      unsigned __int128 acc = 0;
      unsigned bits = 0;
      for (size_t i = 0; i < per_mini; i++) {
        while (bits < w[k]) {
          acc |= (unsigned __int128)(at < len ? p[at++] : 0) << bits;
          bits += 8;
        }
        uint64_t d =
            w[k] == 64 ? (uint64_t)acc : (uint64_t)acc & ((1ull << w[k]) - 1);
        acc >>= w[k];
        bits -= w[k];
        if (got < total && got < max) {
          cur = (int64_t)((uint64_t)cur + d + (uint64_t)least);
          v[got++] = cur;
        }
      }
    }
  }
  *used = at;
  return got;
}

static void test_delta_binary_packed(void) {
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  /* 1, 2, 3, 4, 5: one block, least delta 1, widths 0: the header, then
   * the least delta and four zero widths. */
  int64_t five[] = {1, 2, 3, 4, 5};
  mlprof__delta_binary_packed(&o, five, 5);
  static const uint8_t want[] = {0x80, 0x01, 0x04, 0x05, 0x02,
                                 0x02, 0,    0,    0,    0};
  CHECK(bytes_are(&o, want, sizeof want));
  enum { N = 700 };
  int64_t *v = malloc(N * sizeof *v), *back = malloc(N * sizeof *back);
  CHECK(v && back);
  uint64_t seed = 7;
  for (int shape = 0; shape < 4; shape++)
    for (size_t n = 0; n <= N; n += n < 10 ? 1 : 127) {
      for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = shape == 0   ? (int64_t)(i * 1000 + (seed >> 54))  /* times */
               : shape == 1 ? (int64_t)(seed >> 20) - (1ll << 43) /* noise */
               : shape == 2 ? (i % 2 ? INT64_MAX : INT64_MIN)     /* 64 bits */
                            : 42;                                 /* constant */
      }
      o.len = 0;
      mlprof__delta_binary_packed(&o, v, n);
      size_t used = 0;
      size_t got = delta_decode((const uint8_t *)o.buf, o.len, back, N, &used);
      if (got != n || used != o.len || (n && memcmp(v, back, n * sizeof *v))) {
        free(v);
        free(back);
        mlprof__out_close(&o);
        TEST_FAIL("shape %d, %zu values: %zu decoded, %zu of %zu bytes", shape,
                  n, got, used, o.len);
      }
    }
  free(v);
  free(back);
  mlprof__out_close(&o);
}

static uint32_t le32(const char *p) {
  const uint8_t *u = (const uint8_t *)p;
  return u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 |
         (uint32_t)u[3] << 24;
}

static void test_file_frame(void) {
  static const mlprof__pq_column cols[] = {{"n", MLPROF__PQ_INT64, 0, 0},
                                           {"name", MLPROF__PQ_STRING, 1, 1},
                                           {"x", MLPROF__PQ_DOUBLE, 1, 0},
                                           {"text", MLPROF__PQ_STRING, 0, 0}};
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  mlprof__pq_opts opts = {.row_group_rows = 3};
  mlprof__pq *w = mlprof__pq_open(&o, cols, 4, &opts);
  CHECK(w != NULL);
  mlprof__pq_meta(w, "mlprof.schema", "test/1");
  for (int i = 0; i < 7; i++) {
    mlprof__pq_i64(w, 0, i);
    if (i % 2) mlprof__pq_str(w, 1, i % 3 ? "odd" : "three", i % 3 ? 3 : 5);
    if (i != 4) mlprof__pq_f64(w, 2, i * 0.5);
    mlprof__pq_str(w, 3, "row", 3);
    CHECK_EQ(mlprof__pq_row(w), 0);
  }
  CHECK_EQ(mlprof__pq_rows(w), 7);
  char err[160] = "";
  CHECK_EQ(mlprof__pq_close(w, err, sizeof err), 0);
  /* PAR1, pages, footer, its length, PAR1. */
  CHECK(o.len > 12);
  CHECK(!memcmp(o.buf, "PAR1", 4));
  CHECK(!memcmp(o.buf + o.len - 4, "PAR1", 4));
  uint32_t flen = le32(o.buf + o.len - 8);
  CHECK(flen > 0 && flen < o.len - 12);
  /* The footer (FileMetaData) starts with version 1 and names the columns
   * and the metadata. */
  const char *footer = o.buf + o.len - 8 - flen;
  CHECK_EQ((uint8_t)footer[0], 0x15);
  CHECK_EQ((uint8_t)footer[1], 0x02);
  CHECK(memmem(footer, flen, "mlprof.schema", 13) != NULL);
  CHECK(memmem(footer, flen, "text", 4) != NULL);
  /* Three row groups of 3, 3 and 1 rows: num_rows 7 (i64, zigzag 14). */
  CHECK(memmem(footer, flen, "\x16\x0e", 2) != NULL);
  mlprof__out_close(&o);
}

static void test_wrong_type_is_null(void) {
  static const mlprof__pq_column cols[] = {{"n", MLPROF__PQ_INT64, 1, 0}};
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  mlprof__pq *w = mlprof__pq_open(&o, cols, 1, NULL);
  CHECK(w != NULL);
  mlprof__pq_str(w, 0, "x", 1); /* not an INT64: ignored */
  mlprof__pq_i64(w, 5, 1);      /* no such column: ignored */
  CHECK_EQ(mlprof__pq_row(w), 0);
  CHECK_EQ(mlprof__pq_close(w, NULL, 0), 0);
  mlprof__out_close(&o);
}

const mlprof_test mlprof_tests_parquet[] = {
    {"thrift_compact", test_thrift_compact},
    {"rle_hybrid", test_rle_hybrid},
    {"delta_binary_packed", test_delta_binary_packed},
    {"file_frame", test_file_frame},
    {"wrong_type_is_null", test_wrong_type_is_null},
    {NULL, NULL}};
