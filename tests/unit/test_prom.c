/* The Prometheus text exposition (src/export/prom.c): exact lines for known
 * reports and resources, hostile names in every label, and a validator of
 * the format (version 0.0.4) written here, independent of the exporter. */
#include <ctype.h>
#include <math.h>
#include <mlprof.h>
#include <stdlib.h>

#include "analyze/dist.h"
#include "analyze/resources.h"
#include "analyze/stats.h"
#include "export/prom.h"
#include "format/wire.h"
#include "builder.h"
#include "test.h"

/* A zone name with a quote, a backslash, a newline, an invalid byte and a
 * control character; and how a label value must carry it. */
#define HOSTILE_ZONE   \
  "a\"b\\c\nd\xff\x01" \
  "e"
#define HOSTILE_ZONE_LABEL                  \
  "a\\\"b\\\\c\\nd\xef\xbf\xbd\xef\xbf\xbd" \
  "e\",zone_bytes=\"6122625c630a64ff0165"

/* ---- a validator of the text format -------------------------------------- */

typedef struct {
  char name[160];
  char type[16];
  int help, done; /* HELP seen; its group of samples is over */
} vfam;

typedef struct {
  vfam fam[64];
  size_t nfam;
  char **series; /* name{labels} of every sample, to find duplicates */
  size_t nseries, samples;
  char why[256];
} vstate;

static int name_char(char c, int first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         c == ':' || (!first && c >= '0' && c <= '9');
}

static vfam *family(vstate *v, const char *name, size_t len, int add) {
  for (size_t i = 0; i < v->nfam; i++)
    if (strlen(v->fam[i].name) == len && memcmp(v->fam[i].name, name, len) == 0)
      return &v->fam[i];
  if (!add || v->nfam == 64 || len >= sizeof v->fam[0].name) return NULL;
  vfam *f = &v->fam[v->nfam++];
  memset(f, 0, sizeof *f);
  memcpy(f->name, name, len);
  return f;
}

/* Length of a valid UTF-8 character at p (n bytes left), or 0. */
static size_t utf8_char(const unsigned char *p, size_t n) {
  unsigned c = p[0];
  size_t len = c < 0x80                 ? 1
               : c >= 0xc2 && c <= 0xdf ? 2
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4
                                        : 0;
  if (!len || len > n) return 0;
  uint32_t cp = len == 1 ? c : c & (0x7f >> len);
  for (size_t i = 1; i < len; i++) {
    if ((p[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (p[i] & 0x3f);
  }
  static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < least[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return len;
}

#define BAD(...)                                  \
  do {                                            \
    snprintf(v->why, sizeof v->why, __VA_ARGS__); \
    return -1;                                    \
  } while (0)

/* One sample line (without its newline). */
static int sample_line(vstate *v, const char *s, size_t n, vfam **last) {
  size_t i = 0;
  while (i < n && name_char(s[i], i == 0)) i++;
  if (i == 0) BAD("no metric name: %.*s", (int)n, s);
  size_t name_len = i;
  /* The family: the name, or for a summary the name less _sum / _count. */
  vfam *f = family(v, s, name_len, 0);
  for (size_t k = 0; !f && k < 2; k++) {
    static const char *const suffix[] = {"_sum", "_count"};
    size_t sl = strlen(suffix[k]);
    if (name_len > sl && memcmp(s + name_len - sl, suffix[k], sl) == 0) {
      f = family(v, s, name_len - sl, 0);
      if (f && strcmp(f->type, "summary") != 0) f = NULL;
    }
  }
  if (!f || !f->type[0]) BAD("sample before its TYPE: %.*s", (int)n, s);
  if (f->done) BAD("family %s split in two groups", f->name);
  if (*last && *last != f) (*last)->done = 1;
  *last = f;
  if (i < n && s[i] == '{') {
    i++;
    while (i < n && s[i] != '}') {
      size_t l0 = i;
      while (i < n && name_char(s[i], i == l0) && s[i] != ':') i++;
      if (i == l0) BAD("bad label name in %.*s", (int)n, s);
      if (i + 1 >= n || s[i] != '=' || s[i + 1] != '"')
        BAD("label without =\" in %.*s", (int)n, s);
      i += 2;
      while (i < n && s[i] != '"') {
        if (s[i] == '\\') {
          if (i + 1 >= n || !strchr("\\\"n", s[i + 1]))
            BAD("bad escape in %.*s", (int)n, s);
          i += 2;
          continue;
        }
        size_t k = utf8_char((const unsigned char *)s + i, n - i);
        if (!k || (unsigned char)s[i] < 0x20 || s[i] == 0x7f)
          BAD("raw byte %02x in a label value", (unsigned char)s[i]);
        i += k;
      }
      if (i >= n) BAD("unterminated label value in %.*s", (int)n, s);
      i++;
      if (i < n && s[i] == ',') i++;
    }
    if (i >= n) BAD("unterminated labels in %.*s", (int)n, s);
    i++;
  }
  if (i >= n || s[i] != ' ') BAD("no space before the value: %.*s", (int)n, s);
  /* No two samples of one series. */
  for (size_t k = 0; k < v->nseries; k++)
    if (strlen(v->series[k]) == i && memcmp(v->series[k], s, i) == 0)
      BAD("duplicate series %.*s", (int)i, s);
  char **grown = realloc(v->series, (v->nseries + 1) * sizeof *grown);
  if (!grown) BAD("out of memory");
  v->series = grown;
  v->series[v->nseries] = malloc(i + 1);
  memcpy(v->series[v->nseries], s, i);
  v->series[v->nseries++][i] = '\0';
  i++;
  char val[64];
  if (n - i == 0 || n - i >= sizeof val) BAD("bad value in %.*s", (int)n, s);
  memcpy(val, s + i, n - i);
  val[n - i] = '\0';
  if (strcmp(val, "NaN") && strcmp(val, "+Inf") && strcmp(val, "-Inf")) {
    char *end;
    strtod(val, &end);
    if (*end || !isdigit((unsigned char)val[val[0] == '-']))
      BAD("value '%s' is not a number", val);
  }
  v->samples++;
  return 0;
}

/* Checks the whole exposition; on failure v->why says why. */
static int prom_valid(vstate *v, const char *s, size_t n) {
  memset(v, 0, sizeof *v);
  vfam *last = NULL;
  if (n == 0 || s[n - 1] != '\n') BAD("does not end with a newline");
  for (size_t i = 0; i < n;) {
    size_t k = utf8_char((const unsigned char *)s + i, n - i);
    if (!k) BAD("invalid UTF-8 at byte %zu", i);
    i += k;
  }
  const char *p = s, *end = s + n;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t len = (size_t)(nl - p);
    if (len >= 7 &&
        (memcmp(p, "# HELP ", 7) == 0 || memcmp(p, "# TYPE ", 7) == 0)) {
      int help = p[2] == 'H';
      const char *nm = p + 7;
      size_t nlen = 0;
      while (nm + nlen < nl && name_char(nm[nlen], nlen == 0)) nlen++;
      if (!nlen || nm + nlen >= nl || nm[nlen] != ' ')
        BAD("bad comment line %.*s", (int)len, p);
      vfam *f = family(v, nm, nlen, 1);
      if (!f) BAD("too many families");
      if (help ? f->help : f->type[0] != '\0')
        BAD("second %s for %s", help ? "HELP" : "TYPE", f->name);
      if (f->done || (last == f)) BAD("comment after samples of %s", f->name);
      const char *rest = nm + nlen + 1;
      size_t rlen = (size_t)(nl - rest);
      if (help) {
        f->help = 1;
        if (!rlen) BAD("empty HELP for %s", f->name);
      } else {
        static const char *const types[] = {"counter", "gauge", "summary",
                                            "histogram", "untyped"};
        int ok = 0;
        for (size_t t = 0; t < 5; t++)
          ok |= strlen(types[t]) == rlen && memcmp(types[t], rest, rlen) == 0;
        if (!ok) BAD("bad TYPE line %.*s", (int)len, p);
        memcpy(f->type, rest, rlen);
        f->type[rlen] = '\0';
      }
    } else if (len && p[0] != '#') {
      if (sample_line(v, p, len, &last)) return -1;
    } else if (len) {
      BAD("stray comment %.*s", (int)len, p);
    } else {
      BAD("empty line");
    }
    p = nl + 1;
  }
  for (size_t i = 0; i < v->nfam; i++)
    if (!v->fam[i].help) BAD("no HELP for %s", v->fam[i].name);
  return 0;
}

static void vstate_free(vstate *v) {
  for (size_t i = 0; i < v->nseries; i++) free(v->series[i]);
  free(v->series);
}

/* ---- inputs -------------------------------------------------------------- */

/* One profile, wall 1.5 s: zone "fwd" (forward) with spans of 1, 2, 3, 4 µs;
 * HOSTILE_ZONE [100, 600) inside the first. */
static int report_of(mlprof__report *r) {
  mlprof__stats *s = mlprof__stats_new();
  if (!s) return MLPROF_ENOMEM;
  mlprof__visitor v;
  profile_begin(s, &v, 9, "/bin/x", "x");
  mlprof__name fwd = {.id = 1,
                      .kind = MLPROF__NAME_ZONE,
                      .category = MLPROF_CAT_FORWARD,
                      .name = "fwd",
                      .name_len = 3,
                      .function = "",
                      .file = ""};
  mlprof__name bad = {.id = 2,
                      .kind = MLPROF__NAME_ZONE,
                      .name = HOSTILE_ZONE,
                      .name_len = sizeof HOSTILE_ZONE - 1,
                      .function = "",
                      .file = ""};
  v.name(v.ud, &fwd);
  v.name(v.ud, &bad);
  v.span(v.ud, 1, 2, 1, 100, 600);
  uint64_t t = 0;
  for (uint64_t k = 1; k <= 4; k++) {
    v.span(v.ud, 1, 1, 0, t, t + 1000 * k);
    t += 1000 * k;
  }
  v.end(v.ud, 1500000000, 0, 0);
  mlprof__stats_profile_end(s, NULL, NULL);
  return mlprof__stats_finish(s, r);
}

static mlprof__measure_stats sys_m[] = {
    {.name = "cpu_user_s", .count = 2, .mean = 1.5, .last = 2},
    {.name = "disk_read_bytes_s", .count = 3, .mean = 1, .last = 4096},
    {.name = "weird-name.\xc3\xa9", .count = 1, .mean = 0.5, .last = 0.5},
    {.name = "cpu_temp_c", .count = 0, .absent = "no sensor"},
    {.name = "huge_w", .count = 1, .mean = INFINITY, .last = -INFINITY}};
static mlprof__measure_stats proc_m[] = {
    {.name = "rss_bytes", .count = 1, .mean = 1048576, .last = 1048576}};
static mlprof__measure_stats gpu_m[] = {
    {.name = "gpu_util_pct", .count = 2, .mean = 30, .last = 40}};
static mlprof__measure_stats tree_m[] = {
    {.name = "rss_bytes", .count = 3, .mean = 3000000, .last = 1}};

static void resources_of(mlprof__resources *res, mlprof__subject_stats *subs) {
  subs[0] = (mlprof__subject_stats){.subject = MLPROF__SUBJECT_SYSTEM,
                                    .label = "",
                                    .hostname = "h\"1",
                                    .m = sys_m,
                                    .nm = 5};
  subs[1] = (mlprof__subject_stats){.subject = MLPROF__SUBJECT_PROCESS,
                                    .id = 42,
                                    .label = "py\\thon\n",
                                    .hostname = "h\"1",
                                    .m = proc_m,
                                    .nm = 1};
  subs[2] = (mlprof__subject_stats){.subject = MLPROF__SUBJECT_GPU,
                                    .id = 0,
                                    .label = "A100 \"x\"\x01<b>\xff&",
                                    .hostname = "h\"1",
                                    .m = gpu_m,
                                    .nm = 1};
  memset(res, 0, sizeof *res);
  res->sampled = 1;
  res->subjects = subs;
  res->nsubjects = 3;
  res->tree = (mlprof__subject_stats){.subject = MLPROF__SUBJECT_TREE,
                                      .label = "",
                                      .hostname = "",
                                      .m = tree_m,
                                      .nm = 1};
}

static const char *text_of(mlprof__out *o) {
  char *p = mlprof__out_space(o, 1);
  *p = '\0';
  return o->buf;
}

/* ---- tests --------------------------------------------------------------- */

static void test_prom_run_and_zone_families(void) {
  mlprof__report r;
  CHECK_EQ(report_of(&r), 0);
  mlprof__prom_run runs[] = {{.run = "a", .r = &r, .res = NULL},
                             {.run = "b\"\\\n\xff", .r = &r, .res = NULL}};
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_prom(runs, 2, &o), 0);
  const char *s = text_of(&o);
  vstate v;
  if (prom_valid(&v, s, o.len))
    TEST_FAIL("invalid exposition: %s\n%s", v.why, s);
  /* 5 run gauges x 2 runs; per zone 4 quantiles, sum, count, self. */
  CHECK_EQ(v.samples, 10 + 2 * 2 * 7);
  CHECK_EQ(v.nfam, 7);
  vstate_free(&v);
  CHECK(strncmp(s,
                "# HELP mlprof_run_wall_seconds Wall time of the run.\n"
                "# TYPE mlprof_run_wall_seconds gauge\n"
                "mlprof_run_wall_seconds{run=\"a\"} 1.5\n"
                "mlprof_run_wall_seconds{run=\"b\\\"\\\\\\n\xef\xbf\xbd\"} "
                "1.5\n",
                strlen("# HELP mlprof_run_wall_seconds Wall time of the run.\n"
                       "# TYPE mlprof_run_wall_seconds gauge\n"
                       "mlprof_run_wall_seconds{run=\"a\"} 1.5\n"
                       "mlprof_run_wall_seconds{run=\"b\\\"\\\\\\n\xef\xbf\xbd"
                       "\"} 1.5\n")) == 0);
  CHECK(strstr(s, "mlprof_run_spans{run=\"a\"} 5\n"));
  CHECK(strstr(s, "mlprof_run_dropped_events{run=\"a\"} 0\n"));
  CHECK(strstr(s, "mlprof_run_processes{run=\"a\"} 1\n"));
  CHECK(strstr(s, "mlprof_run_zones{run=\"a\"} 2\n"));
  CHECK(strstr(s,
               "# HELP mlprof_zone_duration_seconds Durations of a zone's "
               "spans: exact quantiles (nearest rank), sum and count.\n"
               "# TYPE mlprof_zone_duration_seconds summary\n"));
  /* fwd: 1, 2, 3, 4 µs; p50 by nearest rank is the second. */
  CHECK(strstr(s,
               "mlprof_zone_duration_seconds{run=\"a\",zone=\"fwd\","
               "category=\"forward\",quantile=\"0.5\"} 0.000002\n"
               "mlprof_zone_duration_seconds{run=\"a\",zone=\"fwd\","
               "category=\"forward\",quantile=\"0.9\"} 0.000004\n"
               "mlprof_zone_duration_seconds{run=\"a\",zone=\"fwd\","
               "category=\"forward\",quantile=\"0.95\"} 0.000004\n"
               "mlprof_zone_duration_seconds{run=\"a\",zone=\"fwd\","
               "category=\"forward\",quantile=\"0.99\"} 0.000004\n"
               "mlprof_zone_duration_seconds_sum{run=\"a\",zone=\"fwd\","
               "category=\"forward\"} 0.00001\n"
               "mlprof_zone_duration_seconds_count{run=\"a\",zone=\"fwd\","
               "category=\"forward\"} 4\n"));
  CHECK(strstr(
      s,
      "mlprof_zone_duration_seconds_count{run=\"a\",zone=\"" HOSTILE_ZONE_LABEL
      "\",category=\"none\"} 1\n"));
  CHECK(strstr(s,
               "# HELP mlprof_zone_self_seconds Self time of a zone: its "
               "spans' durations less their child zones'.\n"
               "# TYPE mlprof_zone_self_seconds gauge\n"));
  CHECK(strstr(s,
               "mlprof_zone_self_seconds{run=\"a\",zone=\"fwd\",category="
               "\"forward\"} 0.0000095\n"));
  CHECK(strstr(s,
               "mlprof_zone_self_seconds{run=\"a\",zone=\"" HOSTILE_ZONE_LABEL
               "\",category=\"none\"} 0.0000005\n"));
  /* No resources: no sampled families. */
  CHECK(strstr(s, "mlprof_system_") == NULL);
  CHECK(strstr(s, "mlprof_tree_") == NULL);
  mlprof__out_close(&o);
  mlprof__report_free(&r);
}

static void test_prom_resources(void) {
  mlprof__report r;
  CHECK_EQ(report_of(&r), 0);
  mlprof__resources res;
  mlprof__subject_stats subs[3];
  resources_of(&res, subs);
  mlprof__prom_run runs[] = {{.run = "a", .r = &r, .res = &res},
                             {.run = "b", .r = &r, .res = NULL}};
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_prom(runs, 2, &o), 0);
  const char *s = text_of(&o);
  vstate v;
  if (prom_valid(&v, s, o.len))
    TEST_FAIL("invalid exposition: %s\n%s", v.why, s);
  vstate_free(&v);
  /* Units spelled out; anything but [a-zA-Z0-9_] as '_'. */
  CHECK(
      strstr(s,
             "# HELP mlprof_system_cpu_user_seconds Latest sampled value of "
             "the measure (docs/sampling.md).\n"
             "# TYPE mlprof_system_cpu_user_seconds gauge\n"
             "mlprof_system_cpu_user_seconds{run=\"a\",host=\"h\\\"1\"} 2\n"));
  CHECK(strstr(s,
               "mlprof_system_disk_read_bytes_per_second{run=\"a\",host=\"h\\\""
               "1\"} 4096\n"));
  CHECK(strstr(s,
               "mlprof_system_weird_name___{run=\"a\",host=\"h\\\"1\"} 0.5\n"));
  /* Infinite values as Prometheus spells them. */
  CHECK(strstr(s, "mlprof_system_huge_w{run=\"a\",host=\"h\\\"1\"} -Inf\n"));
  /* A measure never read has no family at all. */
  CHECK(strstr(s, "cpu_temp_c") == NULL);
  CHECK(strstr(s,
               "# TYPE mlprof_process_rss_bytes gauge\n"
               "mlprof_process_rss_bytes{run=\"a\",host=\"h\\\"1\",pid=\"42\","
               "label=\"py\\\\thon\\n\"} 1048576\n"));
  CHECK(strstr(s,
               "mlprof_gpu_gpu_util_pct{run=\"a\",host=\"h\\\"1\",gpu=\"0\","
               "label=\"A100 \\\"x\\\"\xef\xbf\xbd<b>\xef\xbf\xbd&\"} 40\n"));
  /* The tree: the mean over ticks, no host. */
  CHECK(strstr(s,
               "# HELP mlprof_tree_rss_bytes Process tree total of a sampled "
               "measure (mean over ticks).\n"
               "# TYPE mlprof_tree_rss_bytes gauge\n"
               "mlprof_tree_rss_bytes{run=\"a\"} 3000000\n"));
  mlprof__out_close(&o);
  mlprof__report_free(&r);
}

/* Two zones whose names differ only in bytes the labels cannot carry
 * ("q\x01", "q\x02": both "q" and U+FFFD) stay two series. */
static void test_prom_lossy_names_stay_apart(void) {
  mlprof__stats *st = mlprof__stats_new();
  mlprof__visitor v;
  profile_begin(st, &v, 9, "/bin/x", "x");
  static const char *const names[] = {"q\x01", "q\x02"};
  for (uint32_t i = 0; i < 2; i++) {
    mlprof__name n = {.id = i + 1,
                      .kind = MLPROF__NAME_ZONE,
                      .name = names[i],
                      .name_len = 2,
                      .function = "",
                      .file = ""};
    v.name(v.ud, &n);
    v.span(v.ud, 1, i + 1, 0, 10 * i, 10 * i + 5);
  }
  v.end(v.ud, 100, 0, 0);
  mlprof__stats_profile_end(st, NULL, NULL);
  mlprof__report r;
  CHECK_EQ(mlprof__stats_finish(st, &r), 0);
  mlprof__prom_run run = {.run = "a", .r = &r, .res = NULL};
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_prom(&run, 1, &o), 0);
  const char *s = text_of(&o);
  vstate vs;
  if (prom_valid(&vs, s, o.len))
    TEST_FAIL("invalid exposition: %s\n%s", vs.why, s);
  vstate_free(&vs);
  CHECK(strstr(s, "zone=\"q\xef\xbf\xbd\",zone_bytes=\"7101\""));
  CHECK(strstr(s, "zone=\"q\xef\xbf\xbd\",zone_bytes=\"7102\""));
  mlprof__out_close(&o);
  mlprof__report_free(&r);
}

/* A job of two ranks, rank 1 the straggler on a host with a hostile name,
 * beside a run without ranks: the per-rank families carry both ranks of the
 * first run only, each figure exactly. */
static void test_prom_ranks(void) {
  mlprof__report r;
  CHECK_EQ(report_of(&r), 0);
  char host0[] = "n0", host1[] = "n\"1";
  mlprof__dist_rank rk[2] = {{.rank = 0,
                              .hostname = host0,
                              .steps = 20,
                              .run_ns = 3000000000,
                              .compute_ns = 1000000000,
                              .exposed_ns = 2000000000,
                              .wait_ns = 1500000000,
                              .async_ns = 7,
                              .overlap_ns = 5},
                             {.rank = 1,
                              .hostname = host1,
                              .steps = 20,
                              .run_ns = 3000000000,
                              .compute_ns = 2500000000,
                              .exposed_ns = 500000000,
                              .straggler_steps = 19}};
  mlprof__dist d = {.nranks = 2,
                    .ranks = rk,
                    .straggler = 1,
                    .load_balance = 0.75,
                    .comm_efficiency = 0.75,
                    .parallel_efficiency = 0.5625};
  mlprof__dist none = {.straggler = -1};
  mlprof__prom_run runs[] = {{.run = "a", .r = &r, .dist = &d},
                             {.run = "b", .r = &r, .dist = &none},
                             {.run = "c", .r = &r, .dist = NULL}};
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_prom(runs, 3, &o), 0);
  const char *s = text_of(&o);
  vstate v;
  if (prom_valid(&v, s, o.len))
    TEST_FAIL("invalid exposition: %s\n%s", v.why, s);
  /* 5 run gauges x 3 runs, 7 per zone x 2 zones x 3 runs; 9 rank families
   * x 2 ranks, 3 efficiencies x 1 run. */
  CHECK_EQ(v.samples, 15 + 42 + 18 + 3);
  CHECK_EQ(v.nfam, 7 + 9 + 3);
  vstate_free(&v);
  CHECK(strstr(s,
               "# HELP mlprof_rank_compute_seconds Time of the rank's "
               "steps less its exposed communication.\n"
               "# TYPE mlprof_rank_compute_seconds gauge\n"
               "mlprof_rank_compute_seconds{run=\"a\",rank=\"0\",host="
               "\"n0\"} 1\n"
               "mlprof_rank_compute_seconds{run=\"a\",rank=\"1\",host="
               "\"n\\\"1\"} 2.5\n#"));
  CHECK(strstr(s,
               "mlprof_rank_steps{run=\"a\",rank=\"1\",host=\"n\\\"1\"} "
               "20\n"));
  CHECK(strstr(s,
               "mlprof_rank_run_seconds{run=\"a\",rank=\"0\",host=\"n0\"} "
               "3\n"));
  CHECK(strstr(s,
               "mlprof_rank_exposed_communication_seconds{run=\"a\",rank="
               "\"0\",host=\"n0\"} 2\n"));
  CHECK(strstr(s,
               "mlprof_rank_wait_seconds{run=\"a\",rank=\"0\",host="
               "\"n0\"} 1.5\n"));
  CHECK(strstr(s,
               "mlprof_rank_async_communication_seconds{run=\"a\",rank="
               "\"0\",host=\"n0\"} 0.000000007\n"));
  CHECK(strstr(s,
               "mlprof_rank_overlap_seconds{run=\"a\",rank=\"0\",host="
               "\"n0\"} 0.000000005\n"));
  CHECK(strstr(s,
               "mlprof_rank_straggler_steps{run=\"a\",rank=\"1\",host="
               "\"n\\\"1\"} 19\n"));
  CHECK(strstr(s,
               "mlprof_rank_straggler{run=\"a\",rank=\"0\",host=\"n0\"} "
               "0\n"
               "mlprof_rank_straggler{run=\"a\",rank=\"1\",host=\"n\\\"1\"} "
               "1\n#"));
  CHECK(strstr(s,
               "# TYPE mlprof_dist_load_balance gauge\n"
               "mlprof_dist_load_balance{run=\"a\"} 0.75\n#"));
  CHECK(strstr(s, "mlprof_dist_communication_efficiency{run=\"a\"} 0.75\n"));
  CHECK(strstr(s, "mlprof_dist_parallel_efficiency{run=\"a\"} 0.5625\n"));
  CHECK(strstr(s, "run=\"b\",rank") == NULL);
  CHECK(strstr(s, "run=\"c\",rank") == NULL);
  /* Without a run of ranks, no such family at all. */
  o.len = 0;
  CHECK_EQ(mlprof__export_prom(runs + 1, 2, &o), 0);
  s = text_of(&o);
  CHECK(strstr(s, "mlprof_rank_") == NULL);
  CHECK(strstr(s, "mlprof_dist_") == NULL);
  mlprof__out_close(&o);
  mlprof__report_free(&r);
}

/* Every 2-byte zone name gives a valid exposition: a brute-force sweep of
 * the label escaper through the exporter. */
static void test_prom_label_all_byte_pairs(void) {
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  for (unsigned a = 0; a < 256; a++) {
    for (unsigned b = 0; b < 256; b++) {
      char in[4] = {'m', (char)a, (char)b, (char)0xe2};
      o.len = 0;
      mlprof__out_lit(&o, "m{zone=\"");
      mlprof__out_prom_label(&o, in, 4);
      mlprof__out_lit(&o, "\"} 1\n");
      vstate v;
      memset(&v, 0, sizeof v);
      v.nfam = 1;
      strcpy(v.fam[0].name, "m");
      strcpy(v.fam[0].type, "gauge");
      v.fam[0].help = 1;
      vfam *last = NULL;
      int bad = sample_line(&v, o.buf, o.len - 1, &last);
      vstate_free(&v);
      if (bad) TEST_FAIL("%02x %02x: %s", a, b, v.why);
    }
  }
  /* And exactly: \ " newline escaped, others kept or U+FFFD. */
  o.len = 0;
  mlprof__out_prom_label(&o, "\\\"\n\t\r\x7f\xc3\xa9\xe4\xb8\xad", 11);
  CHECK_STR(text_of(&o),
            "\\\\\\\"\\n\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xc3\xa9\xe4\xb8"
            "\xad");
  mlprof__out_close(&o);
}

const mlprof_test mlprof_tests_prom[] = {
    {"run_and_zone_families", test_prom_run_and_zone_families},
    {"resources", test_prom_resources},
    {"lossy_names_stay_apart", test_prom_lossy_names_stay_apart},
    {"ranks", test_prom_ranks},
    {"label_all_byte_pairs", test_prom_label_all_byte_pairs},
    {NULL, NULL}};
