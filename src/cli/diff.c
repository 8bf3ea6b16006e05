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
#include "cli.h"

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

void mlprof__diff_cmd_init(mlprof__diff_cmd *c) {
  memset(c, 0, sizeof *c);
  mlprof__diff_options_init(&c->opt);
  c->format = MLPROF__DIFF_TEXT;
}

void mlprof__diff_cmd_free(mlprof__diff_cmd *c) {
  free((void *)c->opt.zones);
  c->opt.zones = NULL;
  c->opt.nzones = 0;
  mlprof__filter_free(&c->filter);
}

/* Reads the arguments into *c. Returns -1 to go on, else the exit status
 * (0 after --help). */
static int parse(int argc, char **argv, mlprof__diff_cmd *c) {
  static const struct option options[] = {
      {"threshold", required_argument, NULL, 't'},
      {"alpha", required_argument, NULL, 'a'},
      {"min-count", required_argument, NULL, 'm'},
      {"zone", required_argument, NULL, 'z'},
      {"format", required_argument, NULL, 'f'},
      {"help", no_argument, NULL, 'h'},
      MLPROF__FILTER_OPTIONS,
      {NULL, 0, NULL, 0}};
  mlprof__diff_options *opt = &c->opt;
  const char **zones = calloc((size_t)argc + 1, sizeof *zones);
  if (!zones) {
    fprintf(stderr, "mlprof diff: out of memory\n");
    return 2;
  }
  opt->zones = zones;
  int rc = -1;
  opterr = 0;
  optind = 0; /* 0, not 1: GNU getopt then also resets its ordering mode */
  int ch;
  while (rc < 0 &&
         (ch = getopt_long(argc, argv, ":t:a:m:z:f:h", options, NULL)) != -1) {
    switch (ch) {
      case 't':
        if (parse_percent(optarg, &opt->threshold))
          rc = fail_usage(
              "--threshold wants a percentage such as 5%%, not '%s'", optarg);
        break;
      case 'a':
        if (parse_double(optarg, &opt->alpha) || !(opt->alpha > 0) ||
            !(opt->alpha < 1))
          rc = fail_usage("--alpha wants a number between 0 and 1, not '%s'",
                          optarg);
        break;
      case 'm':
        if (mlprof__parse_count(optarg, &opt->min_count))
          rc = fail_usage("--min-count wants a whole number, not '%s'", optarg);
        break;
      case 'z':
        zones[opt->nzones++] = optarg;
        break;
      case 'f':
        if (strcmp(optarg, "text") == 0)
          c->format = MLPROF__DIFF_TEXT;
        else if (strcmp(optarg, "json") == 0)
          c->format = MLPROF__DIFF_JSON;
        else if (strcmp(optarg, "junit") == 0)
          c->format = MLPROF__DIFF_JUNIT;
        else
          rc = fail_usage("unknown format '%s': use text, json or junit",
                          optarg);
        break;
      case 'h':
        fputs(usage, stdout);
        fputs(mlprof__filter_help, stdout);
        rc = 0;
        break;
      default:
        rc = mlprof__cli_other_option("diff", ch, argv, &c->filter);
    }
  }
  if (rc < 0 && argc - optind != 2)
    rc = fail_usage("%s", argc - optind < 2
                              ? "wants two runs: BASE NEW"
                              : "wants exactly two runs: BASE NEW");
  if (rc < 0) {
    c->base = argv[optind];
    c->next = argv[optind + 1];
  }
  return rc;
}

int mlprof__cmd_diff(int argc, char **argv) {
  mlprof__diff_cmd c;
  mlprof__diff_cmd_init(&c);
  int rc = parse(argc, argv, &c);
  if (rc < 0) rc = mlprof__diff_cmd_run(&c);
  mlprof__diff_cmd_free(&c);
  return rc;
}

/* The diff in c's format on standard output. Returns 0 or 3 after a
 * message. */
static int write_diff(const mlprof__diff_cmd *c, const mlprof__diff *d,
                      const mlprof__diff_options *opt,
                      const mlprof__report *base, const mlprof__report *next) {
  mlprof__out o;
  if (mlprof__out_open(&o, STDOUT_FILENO)) {
    fprintf(stderr, "mlprof diff: out of memory\n");
    return 3;
  }
  int rc;
  if (c->format == MLPROF__DIFF_JSON)
    rc = mlprof__export_diff_json(d, opt, c->base, base, c->next, next, &o);
  else if (c->format == MLPROF__DIFF_JUNIT)
    rc = mlprof__export_diff_junit(d, opt, c->base, c->next, &o);
  else
    rc = mlprof__export_diff_text(d, opt, c->base, base, c->next, next, &o);
  int frc = mlprof__out_flush(&o);
  if (!rc) rc = frc;
  if (rc)
    fprintf(stderr, "mlprof diff: cannot write the result: %s\n",
            rc == MLPROF_EIO ? strerror(o.sys_errno) : mlprof_strerror(rc));
  mlprof__out_close(&o);
  return rc ? 3 : 0;
}

int mlprof__diff_cmd_run(const mlprof__diff_cmd *c) {
  mlprof__diff_options opt = c->opt;
  mlprof__report base = {0}, next = {0};
  mlprof__diff d = {0};
  int rc = load(c->base, &c->filter, &base, &opt.contention[0]);
  if (!rc) rc = load(c->next, &c->filter, &next, &opt.contention[1]);
  if (!rc && mlprof__diff_build(&base, &next, &opt, &d)) {
    fprintf(stderr, "mlprof diff: out of memory\n");
    rc = 3;
  }
  if (!rc && d.nzones == 0 && !d.mem.compared) {
    if (opt.nzones)
      fprintf(stderr,
              "mlprof diff: --zone patterns match no zone of either run\n");
    else
      fprintf(stderr, "mlprof diff: neither run has any zone to compare\n");
    rc = 2;
  }
  if (!rc) rc = write_diff(c, &d, &opt, &base, &next);
  if (!rc) rc = d.regression ? 1 : 0;
  mlprof__diff_free(&d);
  mlprof__report_free(&base);
  mlprof__report_free(&next);
  return rc;
}
