/* Text tables (src/export/table.c): columns aligned by display width (wide
 * CJK and emoji take two columns, combining marks none, an invalid byte the
 * one column of its U+FFFD), names cut without splitting a character. */
#include <mlprof.h>
#include <stdlib.h>

#include "analyze/stats.h"
#include "export/export.h"
#include "export/table.h"
#include "format/wire.h"
#include "builder.h"
#include "test.h"

static const char *text_of(mlprof__out *o) {
  char *p = mlprof__out_space(o, 1);
  *p = '\0';
  return o->buf;
}

static void spaces(char *b, size_t n) {
  b += strlen(b);
  memset(b, ' ', n);
  b[n] = '\0';
}

/* Names and the columns a terminal gives them (worked out by hand). */
static const struct {
  const char *name, *shown;
  size_t width;
  const char *n;
} rows[] = {
    {"forward", "forward", 7, "1"},
    {"\xe5\x89\x8d\xe5\x90\x91\xe4\xbc\xa0\xe6\x92\xad", /* 前向传播 */
     "\xe5\x89\x8d\xe5\x90\x91\xe4\xbc\xa0\xe6\x92\xad", 8, "22"},
    {"\xf0\x9f\x99\x82ok", "\xf0\x9f\x99\x82ok", 4, "333"}, /* 🙂ok */
    {"e\xcc\x81x", "e\xcc\x81x", 2, "4"},                   /* e + U+0301, x */
    {"\xef\xbc\xa1", "\xef\xbc\xa1", 2, "5"},               /* fullwidth A */
    {"\xff\xfe", "\xef\xbf\xbd\xef\xbf\xbd", 2, "6"}, /* invalid: two U+FFFD */
    {"\xe3\x82\xab\xe3\x82\x99", "\xe3\x82\xab\xe3\x82\x99", 2, "7"}, /* ガ */
    {"a\xe2\x80\x8b"
     "b",
     "a\xe2\x80\x8b"
     "b",
     2, "8"}, /* zero width space */
};
#define NROWS (sizeof rows / sizeof rows[0])

static void test_table_aligns_wide_characters(void) {
  static const char *const heads[] = {"zone", "n", "end"};
  mlprof__table t;
  CHECK_EQ(mlprof__table_open(&t, heads, "lrl"), 0);
  for (size_t i = 0; i < NROWS; i++) {
    mlprof__table_name(&t, rows[i].name, strlen(rows[i].name), 40);
    mlprof__table_cell(&t, "%s", rows[i].n);
    mlprof__table_cell(&t, "|");
  }
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__table_print(&t, &o), 0);
  /* The zone column is 8 wide (前向传播), n 3 wide (333). */
  char want[2048] = "  zone";
  spaces(want, 4 + 2 + 2);
  strcat(want, "n  end\n");
  for (size_t i = 0; i < NROWS; i++) {
    strcat(want, "  ");
    strcat(want, rows[i].shown);
    spaces(want, 8 - rows[i].width + 2 + 3 - strlen(rows[i].n));
    strcat(want, rows[i].n);
    strcat(want, "  |\n");
  }
  CHECK_STR(text_of(&o), want);
  mlprof__out_close(&o);
}

static const char *cut(const char *name, size_t max) {
  static char b[256];
  static const char *const heads[] = {"x"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "l")) return "";
  mlprof__table_name(&t, name, strlen(name), max);
  snprintf(b, sizeof b, "%s", t.text.buf + t.cells[0]);
  mlprof__out o;
  if (mlprof__out_open(&o, -1) == 0) {
    mlprof__table_print(&t, &o);
    mlprof__out_close(&o);
  }
  return b;
}

#define ELLIPSIS "\xe2\x80\xa6"
#define QIAN "\xe5\x89\x8d"
#define XIANG "\xe5\x90\x91"
#define SMILE "\xf0\x9f\x99\x82"
#define FFFD "\xef\xbf\xbd"

static void test_table_cut_keeps_whole_characters(void) {
  /* 前向传播计算 is 12 columns: the ellipsis takes one, the end keeps half
   * of the rest and the beginning the other half; a wide character that
   * would pass its half is left out whole. */
  static const char cjk[] = QIAN XIANG
      "\xe4\xbc\xa0\xe6\x92\xad"
      "\xe8\xae\xa1\xe7\xae\x97";
  CHECK_STR(cut(cjk, 12), cjk);
  CHECK_STR(cut(cjk, 11), QIAN XIANG ELLIPSIS "\xe8\xae\xa1\xe7\xae\x97");
  CHECK_STR(cut(cjk, 10), QIAN XIANG ELLIPSIS "\xe8\xae\xa1\xe7\xae\x97");
  CHECK_STR(cut(cjk, 5), QIAN ELLIPSIS "\xe7\xae\x97");
  CHECK_STR(cut(cjk, 4), QIAN ELLIPSIS);
  CHECK_STR(cut(cjk, 2), ELLIPSIS);
  CHECK_STR(cut(SMILE SMILE SMILE, 4), SMILE ELLIPSIS);
  /* A combining mark stays with its letter. */
  CHECK_STR(cut("e\xcc\x81"
                "e\xcc\x81"
                "e\xcc\x81"
                "e\xcc\x81",
                3),
            "e\xcc\x81" ELLIPSIS "e\xcc\x81");
  /* Invalid bytes: each a whole U+FFFD. */
  CHECK_STR(cut("\xff\xff\xff\xff", 3), FFFD ELLIPSIS FFFD);
  CHECK_STR(cut("abcdef", 4), "ab" ELLIPSIS "f");
  CHECK_STR(cut("abcd", 4), "abcd");
}

/* Two long layer names that differ only at the end stay apart when cut
 * (issue #21: both read "...self_attn (MultiheadAttention):"). */
static void test_table_cut_keeps_names_apart(void) {
  static const char fwd[] =
      "encoder.layers.1.self_attn (MultiheadAttention):forward";
  static const char bwd[] =
      "encoder.layers.1.self_attn (MultiheadAttention):backward";
  char a[128], b[128];
  snprintf(a, sizeof a, "%s", cut(fwd, 48));
  snprintf(b, sizeof b, "%s", cut(bwd, 48));
  CHECK(strcmp(a, b) != 0);
  CHECK(strstr(a, ELLIPSIS) != NULL);
  CHECK(strcmp(a + strlen(a) - 8, ":forward") == 0);
  CHECK(strncmp(a, "encoder.layers.1.self_at" ELLIPSIS, 27) == 0);
}

/* The text report's zone table with CJK zone names: every row's count
 * column ends at the same display column. */
static size_t test_width(const char *s, size_t n) {
  size_t w = 0;
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) {
      w++;
      i++;
    } else if (c < 0xe0) {
      w++; /* µ */
      i += 2;
    } else if (c < 0xf0) {
      w += 2; /* the CJK names below */
      i += 3;
    } else {
      w += 2;
      i += 4;
    }
  }
  return w;
}

static void test_text_report_aligns_cjk_zones(void) {
  mlprof__stats *s = mlprof__stats_new();
  mlprof__visitor v;
  profile_begin(s, &v, 9, "/bin/x", "x");
  static const char *const names[] = {
      "\xe6\x95\xb0\xe6\x8d\xae\xe5\x8a\xa0\xe8\xbd\xbd", /* 数据加载 */
      "forward_pass", "\xe5\x89\x8d\xe5\x90\x91",         /* 前向 */
      "\xf0\x9f\x94\xa5hot"};
  for (uint32_t i = 0; i < 4; i++) {
    mlprof__name n = {.id = i + 1,
                      .kind = MLPROF__NAME_ZONE,
                      .name = names[i],
                      .name_len = strlen(names[i]),
                      .function = "",
                      .file = ""};
    v.name(v.ud, &n);
    v.span(v.ud, 1, i + 1, 0, 1000 * i, 1000 * i + 100 * (i + 1));
  }
  v.end(v.ud, 5000, 0, 0);
  mlprof__stats_profile_end(s, NULL, NULL);
  mlprof__report r;
  CHECK_EQ(mlprof__stats_finish(s, &r), 0);
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_text(&r, NULL, NULL, &o), 0);
  const char *txt = text_of(&o);
  const char *table = strstr(txt, "Zones by total\n");
  CHECK(table != NULL);
  table = strchr(table, '\n') + 1;
  /* Header and 4 rows: the end of the "count" column, in columns. */
  size_t col = 0;
  const char *line = table;
  for (int k = 0; k < 5; k++) {
    const char *nl = strchr(line, '\n');
    CHECK(nl != NULL);
    const char *end = k == 0 ? strstr(line, "count") : NULL;
    if (k == 0) {
      CHECK(end != NULL && end < nl);
      end += 5;
    } else {
      /* The count is the first number after the name and category. */
      end = line + 2;
      while (end < nl && !(end[-1] == ' ' && end[0] >= '0' && end[0] <= '9'))
        end++;
      while (end < nl && end[0] >= '0' && end[0] <= '9') end++;
    }
    size_t w = test_width(line, (size_t)(end - line));
    if (k == 0)
      col = w;
    else if (w != col)
      TEST_FAIL("row %d: count ends at column %zu, not %zu:\n%s", k, w, col,
                table);
    line = nl + 1;
  }
  mlprof__out_close(&o);
  mlprof__report_free(&r);
}

const mlprof_test mlprof_tests_table[] = {
    {"aligns_wide_characters", test_table_aligns_wide_characters},
    {"cut_keeps_whole_characters", test_table_cut_keeps_whole_characters},
    {"cut_keeps_names_apart", test_table_cut_keeps_names_apart},
    {"text_report_aligns_cjk_zones", test_text_report_aligns_cjk_zones},
    {NULL, NULL}};
