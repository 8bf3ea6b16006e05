/* The protobuf encoder of the Perfetto exporter (src/export/pb.h): bytes
 * checked against the wire format's definition. */
#include <stdlib.h>

#include "export/pb.h"
#include "test.h"

/* Whether the n bytes at got are the n bytes of want; prints both if not. */
static int same_bytes(const char *got, size_t got_len, const char *want,
                      size_t n) {
  if (got_len == n && !memcmp(got, want, n)) return 1;
  fprintf(stderr, "  got %zu bytes:", got_len);
  for (size_t i = 0; i < got_len && i < 32; i++)
    fprintf(stderr, " %02x", (unsigned char)got[i]);
  fprintf(stderr, "\n  want %zu bytes:", n);
  for (size_t i = 0; i < n && i < 32; i++)
    fprintf(stderr, " %02x", (unsigned char)want[i]);
  fputc('\n', stderr);
  return 0;
}

#define CHECK_BYTES(got, len, lit) \
  CHECK(same_bytes((got), (len), (lit), sizeof(lit) - 1))

static void test_varints(void) {
  static const struct {
    uint64_t v;
    const char *bytes;
    size_t n;
  } cases[] = {
      {0, "\x00", 1},
      {1, "\x01", 1},
      {127, "\x7f", 1},
      {128, "\x80\x01", 2},
      {300, "\xac\x02", 2},
      {16383, "\xff\x7f", 2},
      {16384, "\x80\x80\x01", 3},
      {UINT32_MAX, "\xff\xff\xff\xff\x0f", 5},
      {UINT64_MAX, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char buf[16];
    char *end = mlprof__pb_varint(buf, cases[i].v);
    CHECK_EQ(end - buf, cases[i].n);
    CHECK_EQ(mlprof__pb_varint_len(cases[i].v), cases[i].n);
    CHECK(same_bytes(buf, (size_t)(end - buf), cases[i].bytes, cases[i].n));
  }
}

static void test_fields(void) {
  char buf[64], *p = buf;
  p = mlprof__pb_uint(p, 8, 150);            /* timestamp: 150 */
  p = mlprof__pb_tag(p, 60, MLPROF__PB_LEN); /* two-byte tag */
  p = mlprof__pb_fixed64(p, 47, 0x0102030405060708ull);
  p = mlprof__pb_double(p, 44, 1.0);
  CHECK_BYTES(buf, (size_t)(p - buf),
              "\x40\x96\x01"
              "\xe2\x03"
              "\xf9\x02\x08\x07\x06\x05\x04\x03\x02\x01"
              "\xe1\x02\x00\x00\x00\x00\x00\x00\xf0\x3f");
}

static void test_nested_lengths(void) {
  mlprof__out m;
  CHECK_EQ(mlprof__out_open(&m, -1), 0);
  /* Short: one length byte, filled in place. */
  size_t at = mlprof__pb_open(&m, 1);
  mlprof__pb_out_uint(&m, 10, 7);
  mlprof__pb_close(&m, at);
  CHECK_BYTES(m.buf, m.len, "\x0a\x02\x50\x07");
  /* Empty. */
  m.len = 0;
  at = mlprof__pb_open(&m, 8);
  mlprof__pb_close(&m, at);
  CHECK_BYTES(m.buf, m.len, "\x42\x00");
  /* Long, nested: 200 bytes of string in a message in a message; each
   * length takes two bytes and the content moves along intact. */
  m.len = 0;
  char text[200];
  for (int i = 0; i < 200; i++) text[i] = (char)('a' + i % 26);
  size_t outer = mlprof__pb_open(&m, 1);
  size_t inner = mlprof__pb_open(&m, 11);
  mlprof__pb_string(&m, 2, text, sizeof text);
  mlprof__pb_close(&m, inner);
  mlprof__pb_close(&m, outer);
  /* outer: tag, len 206 (2 bytes); inner: tag, len 203 (2); string: tag,
   * len 200 (2), text. */
  CHECK_EQ(m.len, 3 + 3 + 3 + 200);
  CHECK_BYTES(m.buf, 9, "\x0a\xce\x01\x5a\xcb\x01\x12\xc8\x01");
  CHECK(!memcmp(m.buf + 9, text, sizeof text));
  /* A length of 2^14 and more: three bytes. */
  m.len = 0;
  char *big = malloc(20000);
  CHECK(big != NULL);
  memset(big, 'x', 20000);
  mlprof__pb_string(&m, 2, big, 20000);
  CHECK_EQ(m.len, 1 + 3 + 20000);
  CHECK_BYTES(m.buf, 4, "\x12\xa0\x9c\x01");
  CHECK(m.buf[m.len - 1] == 'x' && m.buf[4] == 'x');
  free(big);
  mlprof__out_close(&m);
}

static void test_strings_are_utf8(void) {
  mlprof__out m;
  CHECK_EQ(mlprof__out_open(&m, -1), 0);
  /* Valid UTF-8 and control characters kept; each invalid byte, a
   * surrogate and a cut-short sequence become U+FFFD. */
  const char in[] = "a\n\x00\xc3\xa9\xff\xed\xa0\x80\xe2\x82";
  mlprof__pb_string(&m, 2, in, sizeof in - 1);
  CHECK_BYTES(m.buf, m.len,
              "\x12\x17"
              "a\n\x00\xc3\xa9"
              "\xef\xbf\xbd"
              "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
              "\xef\xbf\xbd\xef\xbf\xbd");
  mlprof__out_close(&m);
}

const mlprof_test mlprof_tests_pb[] = {
    {"varints", test_varints},
    {"fields", test_fields},
    {"nested_lengths", test_nested_lengths},
    {"strings_are_utf8", test_strings_are_utf8},
    {NULL, NULL}};
