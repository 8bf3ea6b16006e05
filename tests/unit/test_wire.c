/* Encodings of format/wire.h: varints, zigzag, fixed-width fields, CRC-32. */
#include "format/wire.h"
#include "test.h"

/* Encodes v, checks the length, decodes it back from exactly those bytes. */
static void uv_round_trip(uint64_t v, int want_len) {
  uint8_t buf[16];
  uint8_t *end = mlprof__put_uv(buf, v);
  CHECK_EQ(end - buf, want_len);
  mlprof__cursor c = {buf, end, 0};
  uint64_t got = mlprof__get_uv(&c);
  CHECK_EQ(c.err, 0);
  CHECK_EQ_U64(got, v);
  CHECK(c.p == end);
  /* Every shorter prefix is a truncated varint. */
  for (int cut = 0; cut < want_len; cut++) {
    mlprof__cursor t = {buf, buf + cut, 0};
    CHECK_EQ_U64(mlprof__get_uv(&t), 0);
    CHECK_EQ(t.err, 1);
  }
}

static void test_uv_boundaries(void) {
  static const struct {
    uint64_t v;
    int len;
  } cases[] = {
      {0, 1},
      {1, 1},
      {127, 1},
      {128, 2},
      {16383, 2},
      {16384, 3},
      {(1u << 21) - 1, 3},
      {1u << 21, 4},
      {UINT32_MAX, 5},
      {(uint64_t)1 << 35, 6},
      {((uint64_t)1 << 56) - 1, 8},
      {(uint64_t)1 << 56, 9},
      {((uint64_t)1 << 63) - 1, 9},
      {(uint64_t)1 << 63, 10},
      {UINT64_MAX, 10},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uv_round_trip(cases[i].v, cases[i].len);
    if (mlprof_test_failed) TEST_FAIL("at value %" PRIu64, cases[i].v);
  }
}

static void test_uv_every_power(void) {
  for (int k = 0; k < 64; k++) {
    uint64_t p = (uint64_t)1 << k;
    int len = k / 7 + 1;
    uv_round_trip(p, len);
    uv_round_trip(p - 1, k == 0 ? 1 : (k - 1) / 7 + 1);
    uv_round_trip(p + 1, k == 0 ? 1 : len);
    if (mlprof_test_failed) TEST_FAIL("around 2^%d", k);
  }
}

static void test_uv_overlong(void) {
  /* Eleven bytes with the continuation bit: more than 64 bits. */
  uint8_t buf[12];
  memset(buf, 0x80, sizeof buf);
  buf[11] = 0;
  mlprof__cursor c = {buf, buf + sizeof buf, 0};
  CHECK_EQ_U64(mlprof__get_uv(&c), 0);
  CHECK_EQ(c.err, 1);
  /* Ten continuation bytes: the varint never ends within its 10 bytes. */
  mlprof__cursor d = {buf, buf + 10, 0};
  mlprof__get_uv(&d);
  CHECK_EQ(d.err, 1);
  /* A padded but in-limit encoding of 1 (0x81 0x80 0x00) is accepted. */
  uint8_t pad[3] = {0x81, 0x80, 0x00};
  mlprof__cursor e = {pad, pad + 3, 0};
  CHECK_EQ_U64(mlprof__get_uv(&e), 1);
  CHECK_EQ(e.err, 0);
  /* An empty input is an error, and err stays set for later reads. */
  mlprof__cursor f = {pad, pad, 0};
  mlprof__get_uv(&f);
  CHECK_EQ(f.err, 1);
  f.end = pad + 3;
  mlprof__get_u8(&f);
  CHECK_EQ(f.err, 1);
}

static void test_zigzag(void) {
  static const struct {
    int64_t v;
    uint64_t zz;
  } cases[] = {
      {0, 0},
      {-1, 1},
      {1, 2},
      {-2, 3},
      {2, 4},
      {63, 126},
      {-64, 127},
      {INT64_MAX, UINT64_MAX - 1},
      {INT64_MIN, UINT64_MAX},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t a[16], b[16];
    uint8_t *ea = mlprof__put_sv(a, cases[i].v);
    uint8_t *eb = mlprof__put_uv(b, cases[i].zz);
    CHECK_EQ(ea - a, eb - b);
    CHECK(memcmp(a, b, (size_t)(ea - a)) == 0);
    mlprof__cursor c = {a, ea, 0};
    CHECK_EQ(mlprof__get_sv(&c), cases[i].v);
    CHECK_EQ(c.err, 0);
  }
  for (int64_t v = -100000; v <= 100000; v += 7) {
    uint8_t a[16];
    uint8_t *e = mlprof__put_sv(a, v);
    mlprof__cursor c = {a, e, 0};
    int64_t got = mlprof__get_sv(&c);
    if (got != v || c.err)
      TEST_FAIL("sv %lld decoded as %lld", (long long)v, (long long)got);
  }
}

static void test_fixed_width(void) {
  uint8_t b[8];
  mlprof__put_u16(b, 0xBEEF);
  CHECK_EQ(b[0], 0xEF);
  CHECK_EQ(b[1], 0xBE);
  CHECK_EQ(mlprof__get_u16(b), 0xBEEF);
  mlprof__put_u32(b, 0xCAFEF00Du);
  CHECK_EQ(b[0], 0x0D);
  CHECK_EQ(b[3], 0xCA);
  CHECK_EQ_U64(mlprof__get_u32(b), 0xCAFEF00Du);

  double d = -1.5e300;
  memcpy(b, &d, 8);
  mlprof__cursor c = {b, b + 8, 0};
  CHECK(mlprof__get_f64(&c) == d);
  CHECK_EQ(c.err, 0);
  mlprof__cursor s = {b, b + 7, 0};
  CHECK(mlprof__get_f64(&s) == 0);
  CHECK_EQ(s.err, 1);
  CHECK(s.p == b); /* nothing consumed */
}

static void test_str(void) {
  uint8_t b[8] = {3, 'a', 'b', 'c', 5, 'x'};
  mlprof__cursor c = {b, b + 6, 0};
  size_t len;
  const char *s = mlprof__get_str(&c, &len);
  CHECK(s == (const char *)b + 1);
  CHECK_EQ(len, 3);
  CHECK_EQ(c.err, 0);
  /* Length 5 but one byte left. */
  s = mlprof__get_str(&c, &len);
  CHECK(s == NULL);
  CHECK_EQ(len, 0);
  CHECK_EQ(c.err, 1);
  /* A huge length cannot wrap the bounds check. */
  uint8_t h[12];
  uint8_t *e = mlprof__put_uv(h, UINT64_MAX);
  mlprof__cursor d = {h, e, 0};
  CHECK(mlprof__get_str(&d, &len) == NULL);
  CHECK_EQ(d.err, 1);
}

static void test_crc32(void) {
  CHECK_EQ_U64(mlprof__crc32(0, "123456789", 9), 0xCBF43926u);
  CHECK_EQ_U64(mlprof__crc32(0, "", 0), 0);
  CHECK_EQ_U64(mlprof__crc32(0, "a", 1), 0xE8B7BE43u);
  /* Fed in pieces of every split, including unaligned tails. */
  static const char text[] = "The quick brown fox jumps over the lazy dog";
  size_t n = sizeof text - 1;
  uint32_t whole = mlprof__crc32(0, text, n);
  CHECK_EQ_U64(whole, 0x414FA339u);
  for (size_t k = 0; k <= n; k++) {
    uint32_t c = mlprof__crc32(mlprof__crc32(0, text, k), text + k, n - k);
    if (c != whole) TEST_FAIL("split at %zu: %08x != %08x", k, c, whole);
  }
}

const mlprof_test mlprof_tests_wire[] = {
    {"uv_boundaries", test_uv_boundaries},
    {"uv_every_power", test_uv_every_power},
    {"uv_overlong_truncated", test_uv_overlong},
    {"zigzag", test_zigzag},
    {"fixed_width", test_fixed_width},
    {"str", test_str},
    {"crc32", test_crc32},
    {NULL, NULL},
};
