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
    "       mlprof diff [options] BASE... -- NEW...\n"
    "\n"
    "Per zone, is NEW slower or faster than BASE? Each zone's durations are\n"
    "compared with a Mann-Whitney U test (two-sided; exact for small samples\n"
    "without ties, else the normal approximation with tie and continuity\n"
    "corrections) and the ratio of medians NEW/BASE. A zone is slower when\n"
    "p <= alpha and the median grew by more than the threshold, faster when\n"
    "p <= alpha and it shrank by more than the threshold; new and removed\n"
    "zones are listed; anything else is unchanged (\"too few samples\" when a\n"
    "side has fewer than --min-count spans or no outcome could reach alpha).\n"
    "The gate tells a change of the program from one of the machine: when\n"
    "NEW's processes waited for a CPU (run-queue wait) or had their CPU\n"
    "stolen by a hypervisor markedly more than BASE's, or when most zones\n"
    "moved alike by a similar ratio, a slower zone that moved no more than\n"
    "that is \"machine\", not a regression, and the report says the machine\n"
    "was slower and by how much; zones beyond it are still judged.\n"
    "Several runs a side (BASE... -- NEW...): each zone's durations are\n"
    "pooled, and a verdict also needs the runs' medians to differ beyond\n"
    "their between-run spread (Student's t, p <= 0.05, as pyperf does).\n"
    "BASE and NEW are profile files or run directories (see docs/guide.md).\n"
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
                mlprof__report *r, mlprof__run_machine *machine) {
  char err[512];
  int rc = mlprof__run_load(path, 1, filter, r, machine, err, sizeof err);
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
  /* BASE... -- NEW...: the options and BASE's runs come before a lone
   * "--", NEW's runs after it. */
  int sep = 0;
  for (int i = 1; i < argc && !sep; i++)
    if (strcmp(argv[i], "--") == 0) sep = i;
  int nopt = sep ? sep : argc;
  opterr = 0;
  optind = 0; /* 0, not 1: GNU getopt then also resets its ordering mode */
  int ch;
  while (rc < 0 &&
         (ch = getopt_long(nopt, argv, ":t:a:m:z:f:h", options, NULL)) != -1) {
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
  if (rc < 0 && sep) {
    if (nopt - optind < 1 || argc - sep - 1 < 1)
      rc = fail_usage("%s",
                      "wants at least one run each side of --: "
                      "BASE... -- NEW...");
    c->base = (const char *const *)argv + optind;
    c->nbase = (size_t)(nopt - optind);
    c->next = (const char *const *)argv + sep + 1;
    c->nnext = (size_t)(argc - sep - 1);
  } else if (rc < 0) {
    if (argc - optind != 2)
      rc = fail_usage("%s", argc - optind < 2
                                ? "wants two runs: BASE NEW"
                                : "wants exactly two runs: BASE NEW (several "
                                  "a side: BASE... -- NEW...)");
    c->base = (const char *const *)argv + optind;
    c->next = (const char *const *)argv + optind + 1;
    c->nbase = c->nnext = 1;
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
    rc = mlprof__export_diff_json(d, opt, c->base[0], base, c->next[0], next,
                                  &o);
  else if (c->format == MLPROF__DIFF_JUNIT)
    rc = mlprof__export_diff_junit(d, opt, c->base[0], c->next[0], &o);
  else
    rc = mlprof__export_diff_text(d, opt, c->base[0], base, c->next[0], next,
                                  &o);
  int frc = mlprof__out_flush(&o);
  if (!rc) rc = frc;
  if (rc)
    fprintf(stderr, "mlprof diff: cannot write the result: %s\n",
            rc == MLPROF_EIO ? strerror(o.sys_errno) : mlprof_strerror(rc));
  mlprof__out_close(&o);
  return rc ? 3 : 0;
}

/* Loads the n runs at paths into r[0..n) and the mean of what slowed
 * their machines into *wait, *steal and *demand (NAN when no run knows).
 * Returns 0 or the exit status after a message. */
static int load_side(const char *const *paths, size_t n,
                     const mlprof__filter *filter, mlprof__report *r,
                     double *wait, double *steal, double *demand) {
  double sw = 0, ss = 0, sd = 0;
  size_t nw = 0, ns = 0;
  for (size_t i = 0; i < n; i++) {
    mlprof__run_machine m;
    int rc = load(paths[i], filter, &r[i], &m);
    if (rc) return rc;
    if (!isnan(m.wait)) sw += m.wait, sd += m.demand, nw++;
    if (!isnan(m.steal)) ss += m.steal, ns++;
  }
  *wait = nw ? sw / (double)nw : NAN;
  *demand = nw ? sd / (double)nw : NAN;
  *steal = ns ? ss / (double)ns : NAN;
  return 0;
}

int mlprof__diff_cmd_run(const mlprof__diff_cmd *c) {
  mlprof__diff_options opt = c->opt;
  mlprof__report *base = calloc(c->nbase, sizeof *base);
  mlprof__report *next = calloc(c->nnext, sizeof *next);
  mlprof__diff d = {0};
  int rc = base && next ? 0 : 3;
  if (rc) fprintf(stderr, "mlprof diff: out of memory\n");
  if (!rc)
    rc = load_side(c->base, c->nbase, &c->filter, base, &opt.contention[0],
                   &opt.steal[0], &opt.demand[0]);
  if (!rc)
    rc = load_side(c->next, c->nnext, &c->filter, next, &opt.contention[1],
                   &opt.steal[1], &opt.demand[1]);
  if (!rc &&
      mlprof__diff_build_runs(base, c->nbase, next, c->nnext, &opt, &d)) {
    fprintf(stderr, "mlprof diff: out of memory\n");
    rc = 3;
  }
  if (!rc && d.nzones == 0) {
    if (opt.nzones)
      fprintf(stderr,
              "mlprof diff: --zone patterns match no zone of either run\n");
    else
      fprintf(stderr, "mlprof diff: neither run has any zone to compare\n");
    rc = 2;
  }
  if (!rc) rc = write_diff(c, &d, &opt, base, next);
  if (!rc) rc = d.regression ? 1 : 0;
  mlprof__diff_free(&d);
  for (size_t i = 0; base && i < c->nbase; i++) mlprof__report_free(&base[i]);
  for (size_t i = 0; next && i < c->nnext; i++) mlprof__report_free(&next[i]);
  free(base);
  free(next);
  return rc;
}
