/* mlprof diff: did NEW get slower than BASE? A regression gate for CI. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <mlprof.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../analyze/compare.h"
#include "../analyze/diff.h"
#include "../export/diff.h"
#include "../export/escape.h"
#include "cli.h"
#include "../export/table.h"

static const char usage[] =
    "usage: mlprof diff [options] BASE NEW\n"
    "\n"
    "Per zone, is NEW slower or faster than BASE? Each zone's durations are\n"
    "compared with a Mann-Whitney U test (two-sided; exact for small samples\n"
    "without ties, else the normal approximation with tie and continuity\n"
    "corrections) and the ratio of medians NEW/BASE. A zone is slower when\n"
    "p <= alpha and the median grew by more than the threshold, faster when\n"
    "p <= alpha and it shrank by more than the threshold; new and removed\n"
    "zones are listed; anything else is unchanged (\"too few samples\" when a\n"
    "side has fewer than --min-count spans or no outcome could reach alpha).\n"
    "When most zones moved alike by a similar ratio, more likely a change of\n"
    "the machine's speed or load than of code, a note says so and names the\n"
    "zones that moved beyond that common shift (verdicts and exit status stay\n"
    "as they are; see docs/guide.md).\n"
    "BASE and NEW are profile files or run directories.\n"
    "\n"
    "options:\n"
    "  -t, --threshold PCT  smallest change of the median that counts, in\n"
    "                       percent (the % sign is optional; default 5%)\n"
    "  -a, --alpha A        significance level, 0 < A < 1 (default 0.01)\n"
    "  -m, --min-count N    fewer spans than N on a side: too few samples\n"
    "                       (default 5)\n"
    "  -z, --zone GLOB      compare only zones whose name matches (fnmatch\n"
    "                       pattern; repeatable)\n"
    "  -f, --format FORMAT  text (default), json or junit (JUnit XML: one\n"
    "                       testcase per zone, a failure for each slower one)\n"
    "  -h, --help           show this help\n"
    "\n"
    "JSON follows the schema \"mlprof.diff/1\" (docs/json-schema.md).\n"
    "\n"
    "exit status: 0 no zone significantly slower, 1 some zone slower (a\n"
    "regression), 2 bad usage or unreadable input (also: no zone to\n"
    "compare), 3 the work failed (out of memory, output not written).\n";

enum { FORMAT_TEXT, FORMAT_JSON, FORMAT_JUNIT };

static int fail_usage(const char *fmt, const char *arg) {
  return mlprof__usage_error("diff", fmt, arg);
}

/* A finite number, the whole string. */
static int parse_double(const char *s, double *out) {
  if (!*s) return -1;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

static int parse_percent(const char *s, double *out) {
  size_t n = strlen(s);
  char b[64];
  if (n == 0 || n >= sizeof b) return -1;
  memcpy(b, s, n + 1);
  if (b[n - 1] == '%') b[n - 1] = '\0';
  double v;
  if (parse_double(b, &v) || v < 0 || v >= 1e6) return -1;
  *out = v / 100;
  return 0;
}

/* ---- text ---------------------------------------------------------------- */

static void fmt_p(char *b, size_t len, const mlprof__diff_zone *z) {
  if (!z->tested)
    snprintf(b, len, "-");
  else if (z->test.p < 1e-300)
    snprintf(b, len, "<1e-300");
  else
    snprintf(b, len, "%.2g", z->test.p);
}

static void fmt_change(char *b, size_t len, double ratio) {
  if (isnan(ratio))
    snprintf(b, len, "-");
  else if (isinf(ratio))
    snprintf(b, len, "+inf");
  else
    snprintf(b, len, "%+.1f%%", (ratio - 1) * 100);
}

static const char *note_of(const mlprof__diff_zone *z,
                           const mlprof__diff_options *opt) {
  if (z->machine_explains) return "no more than the machine explains";
  if (z->verdict == MLPROF__VERDICT_NEW) return "not in BASE";
  if (z->verdict == MLPROF__VERDICT_REMOVED) return "not in NEW";
  const char *likely = mlprof__diff_likely(z, opt);
  if (likely && *likely == 's') return "likely slower, too few samples";
  if (likely) return "likely faster, too few samples";
  if (z->too_few) return "too few samples";
  if (!z->tested) return "no durations";
  return "";
}

/* The table's note: note_of, or beside a uniform shift, how the zone stands
 * against it. */
static void fmt_note(char *b, size_t len, const mlprof__diff *d,
                     const mlprof__diff_zone *z,
                     const mlprof__diff_options *opt) {
  if (!d->shift.detected || !z->in_shift) {
    snprintf(b, len, "%s", note_of(z, opt));
  } else if (z->shift_verdict == MLPROF__VERDICT_UNCHANGED) {
    snprintf(b, len, "with the common shift");
  } else {
    char c[32];
    fmt_change(c, sizeof c, z->shift_ratio);
    snprintf(b, len, "%s beyond the common shift", c);
  }
}

static void run_line(mlprof__out *o, const char *what, const char *path,
                     const mlprof__report *r) {
  char wall[32];
  mlprof__fmt_duration(wall, sizeof wall, (double)r->wall_ns);
  mlprof__out_str(o, what);
  mlprof__out_text_str(o, path, strlen(path));
  mlprof__out_printf(o, " (%zu zones, %llu spans, wall %s)\n", r->nzones,
                     (unsigned long long)r->spans, wall);
}

static int diff_text(const mlprof__diff *d, const mlprof__diff_options *opt,
                     const char *bpath, const mlprof__report *base,
                     const char *npath, const mlprof__report *next,
                     mlprof__out *o) {
  run_line(o, "mlprof diff: base ", bpath, base);
  run_line(o, "             new  ", npath, next);
  mlprof__out_printf(o,
                     "Mann-Whitney U (two-sided), alpha %g; threshold %g%% on "
                     "the ratio of medians\n\n",
                     opt->alpha, opt->threshold * 100);
  if (d->has_step) {
    const mlprof__diff_zone *z = &d->step;
    char a[32], b[32], c[32], p[32], note[64];
    mlprof__fmt_duration(a, sizeof a, z->median_base);
    mlprof__fmt_duration(b, sizeof b, z->median_new);
    fmt_change(c, sizeof c, z->ratio);
    fmt_p(p, sizeof p, z);
    fmt_note(note, sizeof note, d, z, opt);
    mlprof__out_printf(o,
                       "step (interval between step marks): %s, p50 %s -> %s "
                       "(%s, p %s; %llu and %llu steps)%s%s\n\n",
                       mlprof__verdict_name(z->verdict), a, b, c, p,
                       (unsigned long long)z->base->count,
                       (unsigned long long)z->next->count, *note ? "; " : "",
                       note);
  }
  if (d->has_unit) {
    const mlprof__diff_zone *z = &d->per_unit;
    char a[32], b[32], c[32], p[32], note[64];
    mlprof__fmt_duration(a, sizeof a, z->median_base / d->unit_scale);
    mlprof__fmt_duration(b, sizeof b, z->median_new / d->unit_scale);
    fmt_change(c, sizeof c, z->ratio);
    fmt_p(p, sizeof p, z);
    fmt_note(note, sizeof note, d, z, opt);
    mlprof__out_str(o, "step per unit of work (");
    mlprof__out_text_str(o, d->unit, strlen(d->unit));
    mlprof__out_printf(o,
                       " a step: %.4g -> %.4g): %s, p50 %s -> %s a unit (%s, "
                       "p %s)%s%s%s\n\n",
                       d->work[0], d->work[1], mlprof__verdict_name(z->verdict),
                       a, b, c, p, *note ? "; " : "", note,
                       d->work_differs ? "; the work a step differs: this "
                                         "verdict, not the step's, counts"
                                       : "");
  }
  static const char *const heads[] = {"zone",   "verdict",  "base n",
                                      "new n",  "base p50", "new p50",
                                      "change", "p",        "note"};
  mlprof__table t;
  if (mlprof__table_open(&t, heads, "llrrrrrrl")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < d->nzones; i++) {
    const mlprof__diff_zone *z = &d->zones[i];
    char a[32], b[32], c[32], p[32];
    mlprof__table_name(&t, z->name, z->name_len, 48);
    mlprof__table_cell(&t, "%s", mlprof__verdict_name(z->verdict));
    if (z->base)
      mlprof__table_cell(&t, "%llu", (unsigned long long)z->base->count);
    else
      mlprof__table_cell(&t, "-");
    if (z->next)
      mlprof__table_cell(&t, "%llu", (unsigned long long)z->next->count);
    else
      mlprof__table_cell(&t, "-");
    mlprof__fmt_duration(a, sizeof a, z->median_base);
    mlprof__fmt_duration(b, sizeof b, z->median_new);
    fmt_change(c, sizeof c, z->ratio);
    fmt_p(p, sizeof p, z);
    mlprof__table_cell(&t, "%s", a);
    mlprof__table_cell(&t, "%s", b);
    mlprof__table_cell(&t, "%s", c);
    mlprof__table_cell(&t, "%s", p);
    char note[64];
    fmt_note(note, sizeof note, d, z, opt);
    mlprof__table_cell(&t, "%s", note);
  }
  int rc = mlprof__table_print(&t, o);
  mlprof__out_printf(
      o,
      "\n%zu slower, %zu faster, %zu unchanged, %zu new, %zu "
      "removed",
      d->count[MLPROF__VERDICT_SLOWER], d->count[MLPROF__VERDICT_FASTER],
      d->count[MLPROF__VERDICT_UNCHANGED], d->count[MLPROF__VERDICT_NEW],
      d->count[MLPROF__VERDICT_REMOVED]);
  if (d->filtered)
    mlprof__out_printf(o, " (%zu zones left out by --zone)", d->filtered);
  if (d->shift.detected) {
    char note[512];
    mlprof__diff_shift_note(note, sizeof note, d);
    mlprof__out_printf(o, "\nnote: %s\n", note);
    if (!d->shift.deviating)
      mlprof__out_printf(o,
                         "  no zone departs from the common shift by more "
                         "than %g%%",
                         opt->threshold * 100);
    else
      mlprof__out_printf(o,
                         "  beyond the common shift by more than %g%% "
                         "(candidates for a real change):",
                         opt->threshold * 100);
    for (size_t i = 0, k = 0; i < d->nzones; i++) {
      const mlprof__diff_zone *z = &d->zones[i];
      if (!z->in_shift || z->shift_verdict == MLPROF__VERDICT_UNCHANGED)
        continue;
      char c[32], p[32];
      fmt_change(c, sizeof c, z->shift_ratio);
      if (z->shift_test.p < 1e-300)
        snprintf(p, sizeof p, "<1e-300");
      else
        snprintf(p, sizeof p, "%.2g", z->shift_test.p);
      mlprof__out_str(o, k++ ? ", " : " ");
      mlprof__out_text_str(o, z->name, z->name_len);
      mlprof__out_printf(o, " %s (p %s)", c, p);
    }
  }
  if (d->machine.slower) {
    char note[512];
    mlprof__diff_machine_note(note, sizeof note, d);
    mlprof__out_printf(o, "\nnote: %s", note);
  }
  size_t slower = d->count[MLPROF__VERDICT_SLOWER];
  for (size_t i = 0; i < d->nzones; i++) slower -= d->zones[i].machine_explains;
  if (d->has_unit && d->work_differs) slower = 0; /* not counted (diff.h) */
  int step = mlprof__diff_step_slower(d);
  int unit = d->has_unit && d->per_unit.verdict == MLPROF__VERDICT_SLOWER &&
             !d->per_unit.machine_explains;
  if (d->regression && d->has_unit && d->work_differs)
    mlprof__out_printf(o,
                       "\nREGRESSION: the time per unit of work significantly "
                       "slower by more than %g%% (the runs' work a step "
                       "differs: zones and step not counted)\n",
                       opt->threshold * 100);
  else if (d->regression)
    mlprof__out_printf(o,
                       "\nREGRESSION: %s%s%zu zone%s significantly slower by "
                       "more than %g%%\n",
                       step ? "the step and " : "",
                       unit ? "the time per unit of work and " : "", slower,
                       slower == 1 ? "" : "s", opt->threshold * 100);
  else if (d->machine.slower && d->machine.explained)
    mlprof__out_lit(o,
                    "\nno regression: the machine was slower; rerun both on "
                    "an idle machine to judge the code\n");
  else
    mlprof__out_lit(o, "\nno regression\n");
  return rc;
}

/* ---- JUnit XML ----------------------------------------------------------- */

/* Text or an attribute value in XML 1.0: & < > " ' escaped; characters XML
 * cannot hold at all (controls other than TAB, LF, CR; U+FFFE, U+FFFF) and
 * bytes that are not valid UTF-8 (overlong forms, surrogates, past U+10FFFF)
 * become U+FFFD; LF, CR and TAB as character references so attribute values
 * keep them. */
static void xml_str(mlprof__out *o, const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s, *end = p + n;
  while (p < end) {
    unsigned c = *p;
    if (c < 0x80) {
      p++;
      switch (c) {
        case '&':
          mlprof__out_lit(o, "&amp;");
          break;
        case '<':
          mlprof__out_lit(o, "&lt;");
          break;
        case '>':
          mlprof__out_lit(o, "&gt;");
          break;
        case '"':
          mlprof__out_lit(o, "&quot;");
          break;
        case '\'':
          mlprof__out_lit(o, "&apos;");
          break;
        case '\t':
          mlprof__out_lit(o, "&#9;");
          break;
        case '\n':
          mlprof__out_lit(o, "&#10;");
          break;
        case '\r':
          mlprof__out_lit(o, "&#13;");
          break;
        default:
          if (c < 0x20 || c == 0x7f)
            mlprof__out_lit(o, "\xef\xbf\xbd");
          else
            mlprof__out_write(o, p - 1, 1);
      }
      continue;
    }
    size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
    uint32_t cp = len == 4 ? c & 0x07 : len == 3 ? c & 0x0f : c & 0x1f;
    int ok = len && c <= 0xf4 && (size_t)(end - p) >= len;
    for (size_t k = 1; ok && k < len; k++) {
      if ((p[k] & 0xc0) != 0x80) ok = 0;
      cp = cp << 6 | (p[k] & 0x3f);
    }
    if (ok) {
      static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= least[len] && cp <= 0x10ffff &&
           !(cp >= 0xd800 && cp <= 0xdfff) && cp != 0xfffe && cp != 0xffff &&
           !(cp >= 0x80 && cp <= 0x9f);
    }
    if (ok) {
      mlprof__out_write(o, p, len);
      p += len;
    } else {
      mlprof__out_lit(o, "\xef\xbf\xbd");
      p++;
    }
  }
}

static void xml_cstr(mlprof__out *o, const char *s) {
  xml_str(o, s, strlen(s));
}

/* Whether z's verdict is a regression (diff.h: not when the runs' work a
 * step differs; the time per unit of work then decides). */
static int fails(const mlprof__diff *d, const mlprof__diff_zone *z) {
  return z->verdict == MLPROF__VERDICT_SLOWER && !z->machine_explains &&
         (z == &d->per_unit || !(d->has_unit && d->work_differs));
}

/* The i-th testcase: the step first (a testcase named "step" of its own
 * class), then the time per unit of work, then the zones. */
static const mlprof__diff_zone *junit_case(const mlprof__diff *d, size_t i) {
  if (d->has_step && i-- == 0) return &d->step;
  if (d->has_unit && i-- == 0) return &d->per_unit;
  return &d->zones[i];
}

static int diff_junit(const mlprof__diff *d, const mlprof__diff_options *opt,
                      const char *bpath, const char *npath, mlprof__out *o) {
  size_t tests = d->nzones + (size_t)d->has_step + (size_t)d->has_unit,
         failures = 0;
  for (size_t i = 0; i < tests; i++) {
    const mlprof__diff_zone *z = junit_case(d, i);
    failures += fails(d, z);
  }
  size_t skipped =
      d->count[MLPROF__VERDICT_NEW] + d->count[MLPROF__VERDICT_REMOVED];
  mlprof__out_lit(o, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  mlprof__out_printf(o,
                     "<testsuites name=\"mlprof diff\" tests=\"%zu\" "
                     "failures=\"%zu\" errors=\"0\" skipped=\"%zu\">\n"
                     "<testsuite name=\"mlprof diff\" tests=\"%zu\" "
                     "failures=\"%zu\" errors=\"0\" skipped=\"%zu\">\n",
                     tests, failures, skipped, tests, failures, skipped);
  mlprof__out_lit(o, "<properties>\n<property name=\"base\" value=\"");
  xml_cstr(o, bpath);
  mlprof__out_lit(o, "\"/>\n<property name=\"new\" value=\"");
  xml_cstr(o, npath);
  mlprof__out_printf(o,
                     "\"/>\n<property name=\"threshold\" value=\"%g\"/>\n"
                     "<property name=\"alpha\" value=\"%g\"/>\n",
                     opt->threshold, opt->alpha);
  if (d->shift.detected) {
    char note[512];
    mlprof__diff_shift_note(note, sizeof note, d);
    mlprof__out_lit(o, "<property name=\"uniform_shift\" value=\"");
    xml_cstr(o, note);
    mlprof__out_lit(o, "\"/>\n");
  }
  if (d->machine.slower) {
    char note[512];
    mlprof__diff_machine_note(note, sizeof note, d);
    mlprof__out_lit(o, "<property name=\"machine\" value=\"");
    xml_cstr(o, note);
    mlprof__out_lit(o, "\"/>\n");
  }
  mlprof__out_lit(o, "</properties>\n");
  for (size_t i = 0; i < tests; i++) {
    const mlprof__diff_zone *z = junit_case(d, i);
    char a[32], b[32], c[32], p[32], msg[256];
    double scale = z == &d->per_unit ? d->unit_scale : 1; /* diff.h */
    mlprof__fmt_duration(a, sizeof a, z->median_base / scale);
    mlprof__fmt_duration(b, sizeof b, z->median_new / scale);
    fmt_change(c, sizeof c, z->ratio);
    fmt_p(p, sizeof p, z);
    char note[64];
    fmt_note(note, sizeof note, d, z, opt);
    snprintf(msg, sizeof msg, "%s: median %s -> %s (%s), p = %s%s%s",
             mlprof__verdict_name(z->verdict), a, b, c, p, *note ? "; " : "",
             note);
    mlprof__out_printf(o, "<testcase classname=\"%s\" name=\"",
                       z == &d->step       ? "mlprof.diff.step"
                       : z == &d->per_unit ? "mlprof.diff.per_unit"
                                           : "mlprof.diff");
    xml_str(o, z->name, z->name_len);
    mlprof__out_lit(o, "\">");
    if (fails(d, z)) {
      mlprof__out_lit(o, "<failure type=\"regression\" message=\"");
      xml_cstr(o, msg);
      mlprof__out_printf(
          o, "\">slower by more than %g%% with p &lt;= %g</failure>",
          opt->threshold * 100, opt->alpha);
    } else if (z->verdict == MLPROF__VERDICT_NEW ||
               z->verdict == MLPROF__VERDICT_REMOVED) {
      mlprof__out_lit(o, "<skipped message=\"");
      xml_cstr(o, msg);
      mlprof__out_lit(o, "\"/>");
    } else {
      mlprof__out_lit(o, "<system-out>");
      xml_cstr(o, msg);
      mlprof__out_lit(o, "</system-out>");
    }
    mlprof__out_lit(o, "</testcase>\n");
  }
  mlprof__out_lit(o, "</testsuite>\n</testsuites>\n");
  return 0;
}

/* ---- command ------------------------------------------------------------- */

static int load(const char *path, const mlprof__filter *filter,
                mlprof__report *r, double *contention) {
  char err[512];
  int rc = mlprof__run_load(path, 1, filter, r, contention, err, sizeof err);
  if (rc) {
    fprintf(stderr, "mlprof diff: %s\n", err);
    return rc == MLPROF_ENOMEM ? 3 : 2;
  }
  for (size_t i = 0; i < r->nwarnings; i++) {
    fputs("mlprof diff: warning: ", stderr);
    fputs(path, stderr);
    fprintf(stderr, ": %s\n", r->warnings[i]);
  }
  return 0;
}

int mlprof__cmd_diff(int argc, char **argv) {
  static const struct option options[] = {
      {"threshold", required_argument, NULL, 't'},
      {"alpha", required_argument, NULL, 'a'},
      {"min-count", required_argument, NULL, 'm'},
      {"zone", required_argument, NULL, 'z'},
      {"format", required_argument, NULL, 'f'},
      {"help", no_argument, NULL, 'h'},
      MLPROF__FILTER_OPTIONS,
      {NULL, 0, NULL, 0}};
  mlprof__diff_options opt;
  mlprof__diff_options_init(&opt);
  int format = FORMAT_TEXT;
  const char **zones = calloc((size_t)argc + 1, sizeof *zones);
  if (!zones) {
    fprintf(stderr, "mlprof diff: out of memory\n");
    return 2;
  }
  size_t nzones = 0;
  int rc = -1;
  mlprof__filter filter = {0};
  opterr = 0;
  optind = 0; /* 0, not 1: GNU getopt then also resets its ordering mode */
  int ch;
  while (rc < 0 &&
         (ch = getopt_long(argc, argv, ":t:a:m:z:f:h", options, NULL)) != -1) {
    switch (ch) {
      case 't':
        if (parse_percent(optarg, &opt.threshold))
          rc = fail_usage(
              "--threshold wants a percentage such as 5%%, not '%s'", optarg);
        break;
      case 'a':
        if (parse_double(optarg, &opt.alpha) || !(opt.alpha > 0) ||
            !(opt.alpha < 1))
          rc = fail_usage("--alpha wants a number between 0 and 1, not '%s'",
                          optarg);
        break;
      case 'm':
        if (mlprof__parse_count(optarg, &opt.min_count))
          rc = fail_usage("--min-count wants a whole number, not '%s'", optarg);
        break;
      case 'z':
        zones[nzones++] = optarg;
        break;
      case 'f':
        if (strcmp(optarg, "text") == 0)
          format = FORMAT_TEXT;
        else if (strcmp(optarg, "json") == 0)
          format = FORMAT_JSON;
        else if (strcmp(optarg, "junit") == 0)
          format = FORMAT_JUNIT;
        else
          rc = fail_usage("unknown format '%s': use text, json or junit",
                          optarg);
        break;
      case 'h':
        fputs(usage, stdout);
        fputs(mlprof__filter_help, stdout);
        rc = 0;
        break;
      default: {
        int frc = mlprof__filter_option("diff", ch, optarg, &filter);
        if (frc > 0) rc = frc;
        if (frc < 0)
          rc = mlprof__option_error("diff", ch, argv, optind, optopt);
      }
    }
  }
  if (rc < 0 && argc - optind != 2)
    rc = fail_usage("%s", argc - optind < 2
                              ? "wants two runs: BASE NEW"
                              : "wants exactly two runs: BASE NEW");
  if (rc >= 0) {
    free(zones);
    mlprof__filter_free(&filter);
    return rc;
  }
  opt.zones = zones;
  opt.nzones = nzones;
  const char *bpath = argv[optind], *npath = argv[optind + 1];
  mlprof__report base = {0}, next = {0};
  mlprof__diff d = {0};
  rc = load(bpath, &filter, &base, &opt.contention[0]);
  if (!rc) rc = load(npath, &filter, &next, &opt.contention[1]);
  mlprof__filter_free(&filter);
  if (!rc && mlprof__diff_build(&base, &next, &opt, &d)) {
    fprintf(stderr, "mlprof diff: out of memory\n");
    rc = 3;
  }
  if (!rc && d.nzones == 0) {
    if (nzones)
      fprintf(stderr,
              "mlprof diff: --zone patterns match no zone of either run\n");
    else
      fprintf(stderr, "mlprof diff: neither run has any zone to compare\n");
    rc = 2;
  }
  if (!rc) {
    mlprof__out o;
    if (mlprof__out_open(&o, STDOUT_FILENO)) {
      fprintf(stderr, "mlprof diff: out of memory\n");
      rc = 3;
    } else {
      int wrc;
      if (format == FORMAT_JSON)
        wrc =
            mlprof__export_diff_json(&d, &opt, bpath, &base, npath, &next, &o);
      else if (format == FORMAT_JUNIT)
        wrc = diff_junit(&d, &opt, bpath, npath, &o);
      else
        wrc = diff_text(&d, &opt, bpath, &base, npath, &next, &o);
      int frc = mlprof__out_flush(&o);
      if (!wrc) wrc = frc;
      if (wrc) {
        fprintf(
            stderr, "mlprof diff: cannot write the result: %s\n",
            wrc == MLPROF_EIO ? strerror(o.sys_errno) : mlprof_strerror(wrc));
        rc = 3;
      } else {
        rc = d.regression ? 1 : 0;
      }
      mlprof__out_close(&o);
    }
  }
  mlprof__diff_free(&d);
  mlprof__report_free(&base);
  mlprof__report_free(&next);
  free(zones);
  return rc;
}
