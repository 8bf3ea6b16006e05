/* Escaping, number formatting and the exporters. Outputs are checked with a
 * small strict JSON validator written here, independent of the escaper. */
#include <fcntl.h>
#include <math.h>
#include <mlprof.h>
#include <stdlib.h>
#include <unistd.h>

#include "analyze/stats.h"
#include "export/export.h"
#include "format/wire.h"
#include "model/job.h"
#include "analyse.h"
#include "synth.h"
#include "builder.h"
#include "test.h"

/* ---- a strict JSON validator (RFC 8259, UTF-8) --------------------------- */

typedef struct {
  const unsigned char *p, *end;
  int depth;
} json;

/* Length of one valid UTF-8 character at p, or 0. */
static size_t utf8_char(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0];
  size_t n = c < 0x80             ? 1
             : (c & 0xe0) == 0xc0 ? 2
             : (c & 0xf0) == 0xe0 ? 3
             : (c & 0xf8) == 0xf0 ? 4
                                  : 0;
  if (!n || (size_t)(end - p) < n) return 0;
  uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
  for (size_t i = 1; i < n; i++) {
    if ((p[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (p[i] & 0x3f);
  }
  static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

static int utf8_valid(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s, *end = p + n;
  while (p < end) {
    size_t k = utf8_char(p, end);
    if (!k) return 0;
    p += k;
  }
  return 1;
}

static void js_ws(json *j) {
  while (j->p < j->end &&
         (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
    j->p++;
}

static int js_lit(json *j, const char *lit) {
  size_t n = strlen(lit);
  if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n) != 0) return 0;
  j->p += n;
  return 1;
}

static int js_digits(json *j) {
  const unsigned char *s = j->p;
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  return j->p > s;
}

static int js_number(json *j) {
  if (j->p < j->end && *j->p == '-') j->p++;
  if (j->p < j->end && *j->p == '0')
    j->p++;
  else if (!(j->p < j->end && *j->p >= '1' && *j->p <= '9') || !js_digits(j))
    return 0;
  if (j->p < j->end && *j->p == '.') {
    j->p++;
    if (!js_digits(j)) return 0;
  }
  if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
    j->p++;
    if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
    if (!js_digits(j)) return 0;
  }
  return 1;
}

static int js_string(json *j) {
  if (j->p >= j->end || *j->p != '"') return 0;
  j->p++;
  while (j->p < j->end) {
    unsigned c = *j->p;
    if (c == '"') {
      j->p++;
      return 1;
    }
    if (c < 0x20) return 0;
    if (c == '\\') {
      if (++j->p >= j->end) return 0;
      if (strchr("\"\\/bfnrt", *j->p)) {
        j->p++;
      } else if (*j->p == 'u') {
        j->p++;
        for (int i = 0; i < 4; i++, j->p++)
          if (j->p >= j->end || !strchr("0123456789abcdefABCDEF", *j->p))
            return 0;
      } else {
        return 0;
      }
      continue;
    }
    size_t k = utf8_char(j->p, j->end);
    if (!k) return 0;
    j->p += k;
  }
  return 0;
}

static int js_value(json *j);

static int js_items(json *j, char close, int object) {
  j->p++;
  js_ws(j);
  if (j->p < j->end && *j->p == close) {
    j->p++;
    return 1;
  }
  for (;;) {
    if (object) {
      if (!js_string(j)) return 0;
      js_ws(j);
      if (j->p >= j->end || *j->p++ != ':') return 0;
      js_ws(j);
    }
    if (!js_value(j)) return 0;
    js_ws(j);
    if (j->p >= j->end) return 0;
    if (*j->p == close) {
      j->p++;
      return 1;
    }
    if (*j->p++ != ',') return 0;
    js_ws(j);
  }
}

static int js_value(json *j) {
  if (j->p >= j->end || ++j->depth > 64) return 0;
  int ok;
  switch (*j->p) {
    case '{':
      ok = js_items(j, '}', 1);
      break;
    case '[':
      ok = js_items(j, ']', 0);
      break;
    case '"':
      ok = js_string(j);
      break;
    case 't':
      ok = js_lit(j, "true");
      break;
    case 'f':
      ok = js_lit(j, "false");
      break;
    case 'n':
      ok = js_lit(j, "null");
      break;
    default:
      ok = js_number(j);
      break;
  }
  j->depth--;
  return ok;
}

static int json_valid(const char *s, size_t n) {
  json j = {(const unsigned char *)s, (const unsigned char *)s + n, 0};
  js_ws(&j);
  if (!js_value(&j)) return 0;
  js_ws(&j);
  return j.p == j.end;
}

/* ---- helpers --------------------------------------------------------------
 */

/* A memory writer's contents as a NUL-terminated string. */
static const char *text_of(mlprof__out *o) {
  char *p = mlprof__out_space(o, 1);
  *p = '\0';
  return o->buf;
}

static const char hostile[] = "fw\"d\\\x01\n\xff\xc3<script>&\xe2\x80\xa8";

/* ---- escaping -------------------------------------------------------------
 */

static void test_json_escape_exact(void) {
  static const char in[] = "a\"b\\c\x01\n<x>&\xff\xc3\xc3\xa9\xe2\x80\xa8";
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  mlprof__out_json_str(&o, in, sizeof in - 1);
  mlprof__out_json_str(&o, "z\0y", 3); /* a NUL inside a name */
  CHECK_STR(text_of(&o),
            "\"a\\\"b\\\\c\\u0001\\u000a\\u003cx\\u003e\\u0026"
            "\xef\xbf\xbd\xef\xbf\xbd\xc3\xa9\\u2028\"\"z\\u0000y\"");
  mlprof__out_close(&o);
}

static void test_json_escape_invalid_utf8_forms(void) {
  static const struct {
    const char *in, *want;
  } cases[] = {
      {"\xc0\xaf", "\"\xef\xbf\xbd\xef\xbf\xbd\""}, /* overlong */
      {"\xed\xa0\x80",
       "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""}, /* surrogate */
      {"\xf4\x90\x80\x80",
       "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""},
      {"\xf0\x9f\x98\x80", "\"\xf0\x9f\x98\x80\""}, /* U+1F600 passes */
      {"\xe2\x82", "\"\xef\xbf\xbd\xef\xbf\xbd\""}, /* cut short */
      {"\x7f", "\"\\u007f\""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mlprof__out o;
    CHECK_EQ(mlprof__out_open(&o, -1), 0);
    mlprof__out_json_str(&o, cases[i].in, strlen(cases[i].in));
    CHECK_STR(text_of(&o), cases[i].want);
    CHECK(json_valid(o.buf, o.len));
    mlprof__out_close(&o);
  }
}

/* Every 2-byte sequence escapes to valid JSON: a brute-force sweep. */
static void test_json_escape_all_byte_pairs(void) {
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  for (unsigned a = 0; a < 256; a++) {
    for (unsigned b = 0; b < 256; b++) {
      char in[3] = {(char)a, (char)b, (char)0x80};
      o.len = 0;
      mlprof__out_json_str(&o, in, 3);
      if (!json_valid(o.buf, o.len))
        TEST_FAIL("invalid JSON for %02x %02x", a, b);
    }
  }
  mlprof__out_close(&o);
}

static void test_csv_fields(void) {
  static const struct {
    const char *in, *want;
  } cases[] = {
      {"plain", "plain"},
      {"a,b", "\"a,b\""},
      {"say \"hi\"", "\"say \"\"hi\"\"\""},
      {"=1+2", "'=1+2"},
      {"-x,y", "\"'-x,y\""},
      {"@cmd", "'@cmd"},
      {"+1", "'+1"},
      {"line\nbreak", "\"line\nbreak\""},
      {"\x01"
       "ctl\xff",
       "\xef\xbf\xbd"
       "ctl\xef\xbf\xbd"},
      {" pad", "\" pad\""},
      {"", ""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mlprof__out o;
    CHECK_EQ(mlprof__out_open(&o, -1), 0);
    mlprof__out_csv_field(&o, cases[i].in, strlen(cases[i].in));
    CHECK_STR(text_of(&o), cases[i].want);
    mlprof__out_close(&o);
  }
}

static void test_text_str_strips_escapes(void) {
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  mlprof__out_text_str(&o, "red\x1b[31m\xff", 9);
  CHECK_STR(text_of(&o), "red\xef\xbf\xbd[31m\xef\xbf\xbd");
  mlprof__out_close(&o);
  /* C1 controls (U+009B is CSI to some terminals) go too; U+00A0 stays. */
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  mlprof__out_text_str(&o,
                       "a\xc2\x9b"
                       "31m\xc2\x85\xc2\xa0",
                       10);
  CHECK_STR(text_of(&o),
            "a\xef\xbf\xbd"
            "31m\xef\xbf\xbd\xc2\xa0");
  mlprof__out_close(&o);
}

static void test_xml_str(void) {
  static const struct {
    const char *in, *want;
  } cases[] = {
      {"a&<b>\"c'", "a&amp;&lt;b&gt;&quot;c&apos;"},
      {"t\tl\nr\r", "t&#9;l&#10;r&#13;"},
      {"\x01\x7f\xff", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
      /* A C1 control and U+FFFE: one U+FFFD a byte. */
      {"\xc2\x85", "\xef\xbf\xbd\xef\xbf\xbd"},
      {"\xef\xbf\xbe", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
      {"\xc3\xa9\xf0\x9f\x98\x80", "\xc3\xa9\xf0\x9f\x98\x80"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mlprof__out o;
    CHECK_EQ(mlprof__out_open(&o, -1), 0);
    mlprof__out_xml_str(&o, cases[i].in, strlen(cases[i].in));
    CHECK_STR(text_of(&o), cases[i].want);
    mlprof__out_close(&o);
  }
}

static void test_number_formatting(void) {
  char b[32];
  *mlprof__fmt_u64(b, 0) = '\0';
  CHECK_STR(b, "0");
  *mlprof__fmt_u64(b, 10) = '\0';
  CHECK_STR(b, "10");
  *mlprof__fmt_u64(b, 1234567) = '\0';
  CHECK_STR(b, "1234567");
  *mlprof__fmt_u64(b, UINT64_MAX) = '\0';
  CHECK_STR(b, "18446744073709551615");
  *mlprof__fmt_i64(b, INT64_MIN) = '\0';
  CHECK_STR(b, "-9223372036854775808");
  *mlprof__fmt_us(b, 0) = '\0';
  CHECK_STR(b, "0.000");
  *mlprof__fmt_us(b, 7) = '\0';
  CHECK_STR(b, "0.007");
  *mlprof__fmt_us(b, 1234567) = '\0';
  CHECK_STR(b, "1234.567");
  *mlprof__fmt_us(b, UINT64_MAX) = '\0';
  CHECK_STR(b, "18446744073709551.615");

  static const double vals[] = {3, -2.5, 0.1, 1.0 / 3, 1e300, -1e-300, 1e21};
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
    mlprof__out o;
    CHECK_EQ(mlprof__out_open(&o, -1), 0);
    mlprof__out_f64(&o, vals[i]);
    const char *s = text_of(&o);
    CHECK(json_valid(s, o.len));
    if (strtod(s, NULL) != vals[i]) TEST_FAIL("%s does not read back", s);
    mlprof__out_close(&o);
  }
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  mlprof__out_f64(&o, 3);
  mlprof__out_lit(&o, " ");
  mlprof__out_f64(&o, NAN);
  mlprof__out_lit(&o, " ");
  mlprof__out_f64(&o, -INFINITY);
  CHECK_STR(text_of(&o), "3 null null");
  mlprof__out_close(&o);
}

static void test_writer_grows_and_reports_errors(void) {
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  for (int i = 0; i < 100000; i++) mlprof__out_lit(&o, "0123456789");
  CHECK_EQ(o.len, 1000000);
  CHECK_EQ(o.err, 0);
  CHECK(memcmp(o.buf + 999990, "0123456789", 10) == 0);
  mlprof__out_close(&o);

  /* A file written in pieces larger and smaller than the buffer. */
  char path[] = "/tmp/mlprof-test-out-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  CHECK_EQ(mlprof__out_open(&o, fd), 0);
  char *big = malloc(3 << 20);
  memset(big, 'x', 3 << 20);
  mlprof__out_write(&o, big, 3 << 20);
  mlprof__out_lit(&o, "end");
  CHECK_EQ(mlprof__out_flush(&o), 0);
  mlprof__out_close(&o);
  CHECK_EQ(lseek(fd, 0, SEEK_END), (3 << 20) + 3);
  close(fd);
  unlink(path);
  free(big);

  /* A write that fails is remembered, and later writes are harmless. */
  fd = open("/dev/null", O_RDONLY);
  CHECK(fd >= 0);
  CHECK_EQ(mlprof__out_open(&o, fd), 0);
  mlprof__out_lit(&o, "lost");
  CHECK_EQ(mlprof__out_flush(&o), MLPROF_EIO);
  for (int i = 0; i < 300000; i++) mlprof__out_lit(&o, "more text");
  CHECK_EQ(mlprof__out_flush(&o), MLPROF_EIO);
  mlprof__out_close(&o);
  close(fd);
}

/* ---- report exporters -----------------------------------------------------
 */

/* A report whose every string is hostile. */
static int hostile_report(mlprof__report *r) {
  mlprof__stats *s = mlprof__stats_new();
  mlprof__visitor v;
  mlprof__job_profile p = {.path = "/tmp/\"x\".mlprof",
                           .pid = 9,
                           .ppid = 1,
                           .rank = 0,
                           .world_size = 2,
                           .hostname = "h\x1b]0;",
                           .exe = "/bin/=cmd",
                           .name = "=cmd",
                           .cmdline = "run \"<b>\"\xff",
                           .parent = -1};
  mlprof__stats_profile_begin(s, &p, &v);
  const char *names[] = {hostile, "=HYPERLINK(\"x\")", "loss\x7f", "tok\xc3"};
  const uint8_t kinds[] = {MLPROF__NAME_ZONE, MLPROF__NAME_ZONE,
                           MLPROF__NAME_GAUGE, MLPROF__NAME_UNITS};
  for (uint32_t i = 0; i < 4; i++) {
    mlprof__name n = {.id = i + 1,
                      .kind = kinds[i],
                      .name = names[i],
                      .name_len = strlen(names[i]),
                      .function = "",
                      .file = ""};
    v.name(v.ud, &n);
  }
  v.thread(v.ud, 1, "t\"\x02", 3);
  v.span(v.ud, 1, 2, 1, 10, 20);
  v.span(v.ud, 1, 1, 0, 0, 100);
  v.span_units(v.ud, 1, 4, 12);
  v.counter(v.ud, 1, 3, 50, NAN);
  v.counter(v.ud, 1, 3, 60, 0.5);
  v.step(v.ud, 1, 10);
  v.step(v.ud, 1, 30);
  v.open(v.ud, 1, 1, 0, 150);
  v.meta(v.ud, "k\"", 2, "<v>\n", 4);
  mlprof__stats_profile_end(s, NULL, NULL); /* no END: a warning too */
  return mlprof__stats_finish(s, r);
}

static void test_json_report_is_valid(void) {
  mlprof__report r;
  CHECK_EQ(hostile_report(&r), 0);
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_json(&r, NULL, NULL, &o), 0);
  const char *s = text_of(&o);
  if (!json_valid(s, o.len)) TEST_FAIL("invalid JSON:\n%s", s);
  CHECK(strstr(s, "\"schema\":\"mlprof.report/1\"") != NULL);
  CHECK(strstr(s, "\"total_ns\":100,\"self_ns\":90") != NULL);
  CHECK(strstr(s, "\"min\":0.5,\"max\":0.5,\"mean\":0.5,\"last\":0.5") != NULL);
  CHECK(strstr(s, "\"clean_end\":false") != NULL);
  CHECK(strstr(s, "<") == NULL); /* safe inside HTML */
  mlprof__out_close(&o);
  mlprof__report_free(&r);
}

static void test_csv_report(void) {
  mlprof__report r;
  CHECK_EQ(hostile_report(&r), 0);
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_csv(&r, &o), 0);
  const char *s = text_of(&o);
  CHECK(utf8_valid(s, o.len));
  const char *want =
      "zone,category,count,total_ns,self_ns,mean_ns,std_ns,min_ns,max_ns,"
      "p50_ns,p90_ns,p95_ns,p99_ns,share\r\n"
      "\"fw\"\"d\\\xef\xbf\xbd\n\xef\xbf\xbd\xef\xbf\xbd<script>&"
      "\xe2\x80\xa8\","
      "none,1,100,90,100,0,100,100,100,100,100,100,0.66666666666666663\r\n"
      "\"'=HYPERLINK(\"\"x\"\")\",none,1,10,10,10,0,10,10,10,10,10,10,"
      "0.066666666666666666\r\n";
  CHECK_STR(s, want);
  mlprof__out_close(&o);
  mlprof__report_free(&r);
}

static void test_text_report_is_terminal_safe(void) {
  mlprof__report r;
  CHECK_EQ(hostile_report(&r), 0);
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_text(&r, NULL, NULL, &o), 0);
  const char *s = text_of(&o);
  CHECK(utf8_valid(s, o.len));
  for (size_t i = 0; i < o.len; i++)
    if ((unsigned char)s[i] < 0x20 && s[i] != '\n')
      TEST_FAIL("control byte %02x at %zu", (unsigned char)s[i], i);
  CHECK(strncmp(s, "mlprof report: 1 process, 1 thread, 2 spans", 43) == 0);
  CHECK(
      strstr(s, "warning: process 9 (=cmd): profile ended without a closing"));
  CHECK(strstr(s, "Zones still open at the end"));
  CHECK(strstr(s, "Steps"));
  mlprof__out_close(&o);
  mlprof__report_free(&r);
}

/* A track (spans measured elsewhere) is marked as such, not shown as a
 * kernel thread id. */
static void test_track_marked_in_reports(void) {
  mlprof__stats *s = mlprof__stats_new();
  mlprof__visitor v;
  profile_begin(s, &v, 9, "/bin/train", "train");
  mlprof__name n = {.id = 1,
                    .kind = MLPROF__NAME_ZONE,
                    .name = "aten::mm",
                    .name_len = 8,
                    .function = "",
                    .file = ""};
  v.name(v.ud, &n);
  v.thread(v.ud, 9, "main", 4);
  v.thread(v.ud, MLPROF__TRACK_TID_BASE + 1, "torch ops", 9);
  v.span(v.ud, 9, 1, 0, 0, 100);
  v.span(v.ud, MLPROF__TRACK_TID_BASE + 1, 1, 0, 10, 20);
  mlprof__stats_profile_end(s, NULL, NULL);
  mlprof__report r;
  CHECK_EQ(mlprof__stats_finish(s, &r), 0);
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_json(&r, NULL, NULL, &o), 0);
  const char *js = text_of(&o);
  CHECK(strstr(js, "\"tid\":9,\"name\":\"main\",\"track\":false") != NULL);
  CHECK(
      strstr(js, "\"tid\":2147483649,\"name\":\"torch ops\",\"track\":true") !=
      NULL);
  mlprof__out_close(&o);
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_text(&r, NULL, NULL, &o), 0);
  const char *txt = text_of(&o);
  CHECK(strstr(txt, "  track  torch ops") != NULL);
  CHECK(strstr(txt, "2147483649") == NULL);
  mlprof__out_close(&o);
  mlprof__report_free(&r);
}

/* ---- Chrome trace ----------------------------------------------------------
 */

/* A small profile with one of every record, hostile strings included. */
static void write_profile(const char *path, int with_end) {
  FILE *f = fopen(path, "wb");
  uint8_t fh[16] = "MLPROF\r\n";
  mlprof__put_u16(fh + 8, 1);
  fwrite(fh, 1, 16, f);
  payload p = {.n = 0};
  p_uv(&p, 4242);
  p_uv(&p, 1);
  p_uv(&p, 1700000000000000000ull);
  p_uv(&p, 5000);
  p_sv(&p, 0);
  p_sv(&p, 2);
  p_cstr(&p, "node\"1");
  p_cstr(&p, "/usr/bin/py<th>on");
  p_uv(&p, 2);
  p_cstr(&p, "py<th>on"); /* argv[0]: the process's name */
  p_cstr(&p, "train.py \"\x01\"");
  p_cstr(&p, "tsc");
  p_uv(&p, 200);
  chunk(f, MLPROF__CHUNK_HEADER, &p);
  p_uv(&p, 6);
  p_name(&p, 1, MLPROF__NAME_ZONE, MLPROF_CAT_FORWARD, hostile);
  p_name(&p, 2, MLPROF__NAME_GAUGE, 0, "loss");
  p_name(&p, 3, MLPROF__NAME_UNITS, 0, "tokens");
  p_name(&p, 4, MLPROF__NAME_STRING, 0, "key");
  p_name(&p, 5, MLPROF__NAME_STRING, 0, "val\n\xff");
  p_name(&p, 6, MLPROF__NAME_ZONE, 0, "inner");
  chunk(f, MLPROF__CHUNK_NAMES, &p);
  p_uv(&p, 7);
  p_cstr(&p, "main\x1b[31m");
  chunk(f, MLPROF__CHUNK_THREAD, &p);
  p_uv(&p, 7);                /* tid */
  p_uv(&p, 0);                /* dropped */
  p_uv(&p, 0);                /* base */
  p_u8(&p, MLPROF__REC_SPAN); /* inner 1000..1500, depth 1 */
  p_uv(&p, 6);
  p_uv(&p, 1);
  p_sv(&p, 1000);
  p_uv(&p, 500);
  p_u8(&p, MLPROF__REC_SPAN); /* hostile 0..3000, depth 0 */
  p_uv(&p, 1);
  p_uv(&p, 0);
  p_sv(&p, -1000);
  p_uv(&p, 3000);
  p_u8(&p, MLPROF__REC_SPAN_META);
  p_uv(&p, 4);
  p_uv(&p, 5);
  p_u8(&p, MLPROF__REC_SPAN_UNITS);
  p_uv(&p, 3);
  p_uv(&p, 64);
  p_u8(&p, MLPROF__REC_GAUGE); /* loss at 3500 */
  p_uv(&p, 2);
  p_sv(&p, 3500);
  p_f64(&p, 0.25);
  p_u8(&p, MLPROF__REC_UNITS); /* 8 tokens at 3600 */
  p_uv(&p, 3);
  p_sv(&p, 100);
  p_uv(&p, 8);
  p_u8(&p, MLPROF__REC_STEP); /* step at 3600 */
  p_sv(&p, 0);
  p_u8(&p, MLPROF__REC_OPEN); /* hostile open since 4000 */
  p_uv(&p, 1);
  p_uv(&p, 0);
  p_sv(&p, 400);
  chunk(f, MLPROF__CHUNK_EVENTS, &p);
  p_uv(&p, 1);
  p_cstr(&p, "model");
  p_cstr(&p, "r\"n</script>");
  chunk(f, MLPROF__CHUNK_META, &p);
  if (with_end) {
    p_uv(&p, 5000);
    p_uv(&p, 0);
    p_uv(&p, 0);
    chunk(f, MLPROF__CHUNK_END, &p);
  }
  fclose(f);
}

static size_t count_of(const char *s, const char *needle) {
  size_t n = 0;
  for (const char *p = s; (p = strstr(p, needle)); p++) n++;
  return n;
}

static void test_chrome_trace(void) {
  char path[] = "/tmp/mlprof-test-XXXXXX.mlprof";
  int fd = mkstemps(path, 7);
  CHECK(fd >= 0);
  close(fd);
  write_profile(path, 1);
  mlprof__job job;
  char err[256];
  const char *paths[] = {path};
  int rc = mlprof__job_open(&job, paths, 1, err, sizeof err);
  if (rc) TEST_FAIL("job_open: %s", err);
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  mlprof__read_report reads[1];
  char why[1][256];
  mlprof__chrome_result res = {.reads = reads, .read_errors = why};
  rc = mlprof__export_chrome(&job, NULL, &o, &res, err, sizeof err);
  mlprof__job_close(&job);
  unlink(path);
  if (rc) TEST_FAIL("export: %s", err);
  const char *s = text_of(&o);
  if (!json_valid(s, o.len)) TEST_FAIL("invalid trace JSON:\n%s", s);
  CHECK(reads[0].clean_end);
  CHECK_STR(why[0], "");
  /* 3 process metadata, 1 thread name, 2 spans, 2 counters, 1 step, 1 open. */
  CHECK_EQ(res.events, 10);
  CHECK(
      strstr(s,
             "{\"ph\":\"X\",\"pid\":4242,\"tid\":7,\"ts\":1.000,\"dur\":0.500,"
             "\"name\":\"inner\"}"));
  CHECK(strstr(s,
               "\"ts\":0.000,\"dur\":3.000,\"name\":\"fw\\\"d\\\\\\u0001"
               "\\u000a\xef\xbf\xbd\xef\xbf\xbd\\u003cscript\\u003e\\u0026"
               "\\u2028\",\"cat\":\"forward\",\"args\":{\"key\":\"val"
               "\\u000a\xef\xbf\xbd\",\"tokens\":64}}"));
  CHECK(strstr(s,
               "{\"ph\":\"C\",\"pid\":4242,\"ts\":3.500,\"name\":\"loss\","
               "\"args\":{\"value\":0.25}}"));
  CHECK(strstr(s, "\"name\":\"tokens\",\"args\":{\"total\":8}}"));
  CHECK(strstr(s,
               "{\"ph\":\"i\",\"s\":\"t\",\"pid\":4242,\"tid\":7,\"ts\":3.600,"
               "\"name\":\"step\",\"args\":{\"step\":0}}"));
  CHECK(strstr(s, "\"ts\":4.000,\"dur\":1.000,"));
  CHECK(strstr(s, "\"args\":{\"open\":true}}"));
  CHECK(strstr(s,
               "\"name\":\"process_name\",\"args\":{\"name\":\"rank 0 "
               "(node\\\"1)\"}"));
  CHECK(strstr(
      s, "\"name\":\"thread_name\",\"args\":{\"name\":\"main\\u001b[31m\"}"));
  CHECK(strstr(s, "\"meta\":{\"model\":\"r\\\"n\\u003c/script\\u003e\"}"));
  CHECK(strstr(s, "\"displayTimeUnit\":\"ns\""));
  CHECK_EQ(count_of(s, "\"ph\":"), 10);
  mlprof__out_close(&o);
}

/* A profile cut off mid-chunk: the trace is still whole JSON, the cut is
 * reported, and the zone still open has no end to run to but the last
 * record. */
static void test_chrome_trace_of_killed_profile(void) {
  char path[] = "/tmp/mlprof-test-XXXXXX.mlprof";
  int fd = mkstemps(path, 7);
  CHECK(fd >= 0);
  close(fd);
  write_profile(path, 0);
  FILE *f = fopen(path, "ab");
  fwrite("MPCK\x04\x00\x00\x00\x40\x00\x00\x00", 1, 12, f); /* cut short */
  fclose(f);
  mlprof__job job;
  char err[256];
  const char *paths[] = {path};
  CHECK_EQ(mlprof__job_open(&job, paths, 1, err, sizeof err), 0);
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  mlprof__read_report reads[1];
  char why[1][256];
  mlprof__chrome_result res = {.reads = reads, .read_errors = why};
  int rc = mlprof__export_chrome(&job, NULL, &o, &res, err, sizeof err);
  mlprof__job_close(&job);
  unlink(path);
  CHECK_EQ(rc, 0);
  const char *s = text_of(&o);
  CHECK(json_valid(s, o.len));
  CHECK(!reads[0].clean_end);
  CHECK(reads[0].truncated_bytes > 0);
  CHECK(strstr(s, "\"ts\":4.000,\"dur\":0.000,"));
  mlprof__out_close(&o);
}

/* ---- samples in every output (synth.h describes the job) ----------------- */

typedef struct {
  char dir[64], root[128], child[128];
  mlprof__job job;
} sampled_job;

static int open_sampled(sampled_job *j) {
  snprintf(j->dir, sizeof j->dir, "/tmp/mlprof-exp-XXXXXX");
  if (synth_sampled_job(j->dir, j->root, j->child, sizeof j->root)) return -1;
  char err[256];
  const char *paths[] = {j->dir};
  return mlprof__job_open(&j->job, paths, 1, err, sizeof err);
}

static void close_sampled(sampled_job *j) {
  mlprof__job_close(&j->job);
  synth_remove(j->dir, j->root, j->child);
}

static int sampled_report(mlprof__report *r, mlprof__resources *res) {
  sampled_job j;
  if (open_sampled(&j)) return -1;
  char err[256];
  mlprof__analysis a;
  int rc = analyse(&j.job, MLPROF__ANALYSIS_STATS | MLPROF__ANALYSIS_RESOURCES,
                   &a, err, sizeof err);
  *r = a.r;
  *res = a.res;
  close_sampled(&j);
  return rc;
}

static void test_json_resources(void) {
  mlprof__report r;
  mlprof__resources res;
  CHECK_EQ(sampled_report(&r, &res), 0);
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_json(&r, &res, NULL, &o), 0);
  const char *s = text_of(&o);
  if (!json_valid(s, o.len)) TEST_FAIL("invalid JSON:\n%s", s);
  CHECK(strstr(s, "\"schema\":\"mlprof.report/1\""));
  CHECK(strstr(s,
               "\"samples\":{\"cpu_pct\":50,\"gpu_util_pct\":20,"
               "\"rss_change_bytes\":100,\"iowait_pct\":null,"
               "\"runq_wait_pct\":null}"));
  CHECK(strstr(s,
               "\"samples\":{\"cpu_pct\":70,\"gpu_util_pct\":40,"
               "\"rss_change_bytes\":-100,\"iowait_pct\":null,"
               "\"runq_wait_pct\":null}"));
  CHECK(strstr(s,
               "{\"name\":\"nvml\",\"available\":false,\"reason\":\"no "
               "NVML: libnvidia-ml.so.1 not found\",\"hostname\":\"h\""));
  CHECK(strstr(s,
               "{\"subject\":\"gpu\",\"id\":0,\"label\":\"A100 \\\"x\\\""
               "\\u0001\\u003cb\\u003e\xef\xbf\xbd\\u0026\""));
  CHECK(strstr(s,
               "{\"subject\":\"process\",\"id\":200,\"label\":\"python3\","
               "\"hostname\":\"h\",\"profile\":0,\"process\":1,\"rows\":3"));
  CHECK(strstr(s,
               "{\"name\":\"cpu_pct\",\"count\":2,\"absent_count\":1,"
               "\"mean\":60,\"min\":50,\"max\":70,\"first\":50,\"last\":70,"
               "\"absent\":null}"));
  CHECK(strstr(s,
               "{\"name\":\"cpu_temp_c\",\"count\":0,\"absent_count\":3,"
               "\"mean\":null,\"min\":null,\"max\":null,\"first\":null,"
               "\"last\":null,\"absent\":\"no \\\"sensor\\\"\\u001b[31m,"
               "\\u000a=x\"}"));
  CHECK(strstr(s, "\"tree\":{\"processes\":2,\"ticks\":3,\"measures\":["));
  CHECK(strstr(s, "\"energy\":{\"cpu_j\":3600,\"cpu_absent\":null"));
  CHECK(strstr(s, "\"gpu_j\":3600,\"gpu_absent\":null"));
  CHECK(strstr(s, "\"intensity_g_per_kwh\":475"));
  CHECK(strstr(s, "<") == NULL);
  mlprof__out_close(&o);

  /* Without samples: "resources" is null and zones have none. */
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_json(&r, NULL, NULL, &o), 0);
  s = text_of(&o);
  CHECK(json_valid(s, o.len));
  CHECK(strstr(s, "\"resources\":null"));
  CHECK(strstr(s, "\"samples\":null"));
  mlprof__out_close(&o);
  mlprof__report_free(&r);
  mlprof__resources_free(&res);
}

static void test_text_resources(void) {
  mlprof__report r;
  mlprof__resources res;
  CHECK_EQ(sampled_report(&r, &res), 0);
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_text(&r, &res, NULL, &o), 0);
  const char *s = text_of(&o);
  CHECK(utf8_valid(s, o.len));
  for (size_t i = 0; i < o.len; i++)
    if ((unsigned char)s[i] < 0x20 && s[i] != '\n')
      TEST_FAIL("control byte %02x at %zu", (unsigned char)s[i], i);
  CHECK(strstr(s, "Resources (sampled"));
  CHECK(strstr(s, "GPU 0 (A100 \"x\"\xef\xbf\xbd<b>\xef\xbf\xbd&)"));
  CHECK(strstr(s, "pid 200 (python3)"));
  CHECK(strstr(s, "pid 201 (worker), no profile"));
  CHECK(strstr(s, "tree (2 processes, 3 ticks)"));
  CHECK(strstr(s, "absent: no \"sensor\"\xef\xbf\xbd[31m,\xef\xbf\xbd=x"));
  CHECK(strstr(s, "absent in 1 of 3"));
  CHECK(strstr(s, "Sampling sources not running"));
  CHECK(strstr(s, "no NVML: libnvidia-ml.so.1 not found"));
  CHECK(strstr(s, "3.60 kJ"));
  CHECK(strstr(s, "0.95 g CO2e"));
  CHECK(strstr(s, "CPU + GPU energy x 475 g/kWh"));
  /* the cpu_pct row of pid 200: mean 60%, peak 70%, 2 samples */
  CHECK(strstr(s, "60.0%"));
  CHECK(strstr(s, "70.0%"));
  mlprof__out_close(&o);
  mlprof__report_free(&r);
  mlprof__resources_free(&res);
}

static void test_samples_csv(void) {
  sampled_job j;
  CHECK_EQ(open_sampled(&j), 0);
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  mlprof__read_report reads[2];
  char err[256];
  int rc = mlprof__export_samples_csv(&j.job, &o, reads, err, sizeof err);
  close_sampled(&j);
  if (rc) TEST_FAIL("export: %s", err);
  const char *s = text_of(&o);
  CHECK(utf8_valid(s, o.len));
  const char *want =
      "time_ns,subject,id,label,measure,value,absent,host\r\n"
      "1000,process,200,python3,cpu_pct,,first sample,h\r\n"
      "1000,process,200,python3,rss_bytes,100,,h\r\n"
      "1000,system,0,,cpu_energy_j,0,,h\r\n"
      "1000,system,0,,cpu_temp_c,,\"no \"\"sensor\"\"\xef\xbf\xbd[31m,\n=x\",h"
      "\r\n"
      "2000,process,200,python3,cpu_pct,50,,h\r\n";
  CHECK(strncmp(s, want, strlen(want)) == 0);
  CHECK(strstr(s,
               "2000,gpu,0,\"A100 \"\"x\"\"\xef\xbf\xbd<b>\xef\xbf\xbd&\","
               "gpu_util_pct,20,,h\r\n"));
  CHECK(strstr(s, "3000,process,201,worker,rss_bytes,150,,h\r\n"));
  /* 1 header + 4 rows at 1000 + 2 ticks x 8 rows */
  CHECK_EQ(count_of(s, "\r\n"), 21);
  CHECK(reads[0].clean_end);
  mlprof__out_close(&o);
}

static void test_chrome_sample_counters(void) {
  sampled_job j;
  CHECK_EQ(open_sampled(&j), 0);
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  char err[256];
  mlprof__chrome_result res = {0};
  int rc = mlprof__export_chrome(&j.job, NULL, &o, &res, err, sizeof err);
  close_sampled(&j);
  if (rc) TEST_FAIL("export: %s", err);
  const char *s = text_of(&o);
  if (!json_valid(s, o.len)) TEST_FAIL("invalid trace JSON:\n%s", s);
  /* The process's counters sit under its own profile's pid (200). */
  CHECK(strstr(s,
               "{\"ph\":\"C\",\"pid\":200,\"ts\":2.000,\"name\":\"cpu_pct\","
               "\"args\":{\"value\":50}}"));
  CHECK(strstr(s,
               "{\"ph\":\"C\",\"pid\":200,\"ts\":1.000,\"name\":"
               "\"rss_bytes\",\"args\":{\"value\":100}}"));
  /* System and GPU pseudo-processes, named once. */
  CHECK(strstr(s,
               "{\"ph\":\"M\",\"pid\":8388608,\"name\":\"process_name\","
               "\"args\":{\"name\":\"system\"}}"));
  CHECK(strstr(s,
               "{\"ph\":\"C\",\"pid\":8388608,\"ts\":3.000,\"name\":"
               "\"cpu_energy_j\",\"args\":{\"value\":3600}}"));
  CHECK(strstr(s,
               "{\"ph\":\"M\",\"pid\":16777216,\"name\":\"process_name\","
               "\"args\":{\"name\":\"GPU 0 (A100 \\\"x\\\"\\u0001\\u003cb"
               "\\u003e\xef\xbf\xbd\\u0026)\"}}"));
  CHECK(strstr(s,
               "{\"ph\":\"C\",\"pid\":16777216,\"ts\":2.000,\"name\":"
               "\"gpu_util_pct\",\"args\":{\"value\":20}}"));
  /* A process without a profile gets a pseudo-process of its own. */
  CHECK(strstr(s,
               "\"name\":\"process_name\",\"args\":{\"name\":\"pid 201 "
               "(worker), no profile\"}}"));
  CHECK_EQ(count_of(s, "\"args\":{\"name\":\"system\"}"), 1);
  /* Only valid values: cpu_pct absent at 1000, cpu_temp_c never valid. */
  CHECK_EQ(count_of(s, "\"name\":\"cpu_temp_c\""), 0);
  CHECK_EQ(count_of(s, "\"ts\":1.000,\"name\":\"cpu_pct\""), 0);
  /* valid values: 2 at 1000, then 7 per tick (2 + 2 + 1 + 2) */
  CHECK_EQ(count_of(s, "\"ph\":\"C\""), 16);
  CHECK(strstr(s, "<") == NULL);
  mlprof__out_close(&o);
}

const mlprof_test mlprof_tests_export[] = {
    {"json_escape_exact", test_json_escape_exact},
    {"json_escape_invalid_utf8_forms", test_json_escape_invalid_utf8_forms},
    {"json_escape_all_byte_pairs", test_json_escape_all_byte_pairs},
    {"csv_fields", test_csv_fields},
    {"text_str_strips_escapes", test_text_str_strips_escapes},
    {"xml_str", test_xml_str},
    {"number_formatting", test_number_formatting},
    {"writer_grows_and_reports_errors", test_writer_grows_and_reports_errors},
    {"json_report_is_valid", test_json_report_is_valid},
    {"csv_report", test_csv_report},
    {"text_report_is_terminal_safe", test_text_report_is_terminal_safe},
    {"track_marked_in_reports", test_track_marked_in_reports},
    {"chrome_trace", test_chrome_trace},
    {"chrome_trace_of_killed_profile", test_chrome_trace_of_killed_profile},
    {"json_resources", test_json_resources},
    {"text_resources", test_text_resources},
    {"samples_csv", test_samples_csv},
    {"chrome_sample_counters", test_chrome_sample_counters},
    {NULL, NULL}};
