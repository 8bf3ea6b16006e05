/* mlprof compare: several runs of one workload side by side. */
#include <getopt.h>
#include <math.h>
#include <mlprof.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../analyze/compare.h"
#include "../export/export.h"
#include "cli.h"

/* Zones shown by the text format when --top is not given. */
#define TEXT_TOP 30

static const char usage[] =
    "usage: mlprof compare [options] RUN RUN [RUN...]\n"
    "       mlprof compare [options] A1 A2... -- B1 B2... [-- C1...]\n"
    "\n"
    "Runs of one workload under different backends or configurations, side\n"
    "by side: per zone the count, mean, p50 and p99 of each run, its speedup\n"
    "against the slowest run and against the first (ratio of means: the\n"
    "other run's mean / this run's mean, > 1 is faster) and the fastest run;\n"
    "the runs ranked by wall time and by step time (the median interval\n"
    "between step marks, with a 95% interval, robust to preempted steps;\n"
    "wall time when a run has no steps); and a one-line recommendation that\n"
    "says when runs cannot be told apart (their intervals overlap). RUN is a\n"
    "profile file or a run directory. With repeated runs of each\n"
    "configuration, separated by --, each configuration's zones are pooled\n"
    "over its runs and its step time is the median of its runs' medians,\n"
    "their spread counted as noise.\n"
    "\n"
    "options:\n"
    "  -l, --labels A,B,...  names of the runs, in order (default: the base\n"
    "                        name of each path)\n"
    "  -f, --format FORMAT   text (default) or json\n"
    "  -n, --top N           text: show the first N zones (default 30; 0: "
    "all)\n"
    "  -h, --help            show this help\n"
    "\n"
    "JSON follows the schema \"mlprof.compare/1\" (docs/json-schema.md).\n"
    "\n"
    "exit status: 0 done, 1 the comparison could not be written, 2 bad usage\n"
    "or unreadable input.\n";

static int fail_usage(const char *fmt, const char *arg) {
  return mlprof__usage_error("compare", fmt, arg);
}

void mlprof__compare_cmd_init(mlprof__compare_cmd *c) {
  memset(c, 0, sizeof *c);
  c->top = TEXT_TOP;
}

void mlprof__compare_cmd_free(mlprof__compare_cmd *c) {
  free(c->sizes);
  free(c->grouped);
  c->sizes = NULL;
  c->grouped = NULL;
  mlprof__filter_free(&c->filter);
}

/* Splits argv[first..argc) at lone "--" into c's configurations. Returns
 * -1 to go on, else the exit status after a message. */
static int groups(int argc, char **argv, int first, mlprof__compare_cmd *c) {
  c->sizes = calloc((size_t)argc, sizeof *c->sizes);
  c->grouped = calloc((size_t)argc, sizeof *c->grouped);
  if (!c->sizes || !c->grouped) {
    fprintf(stderr, "mlprof compare: out of memory\n");
    return 1;
  }
  size_t n = 0;
  for (int i = first; i <= argc; i++) {
    if (i < argc && strcmp(argv[i], "--") != 0) {
      c->grouped[n++] = argv[i];
      c->sizes[c->ngroups]++;
      continue;
    }
    if (!c->sizes[c->ngroups])
      return fail_usage("%s", "each configuration between -- wants a run");
    c->ngroups++;
  }
  if (c->ngroups < 2)
    return fail_usage("%s", "wants at least two configurations to compare");
  c->paths = c->grouped;
  c->npaths = n;
  return -1;
}

/* Reads the arguments into *c. Returns -1 to go on, else the exit status
 * (0 after --help). */
static int parse(int argc, char **argv, mlprof__compare_cmd *c) {
  static const struct option options[] = {
      {"labels", required_argument, NULL, 'l'},
      {"format", required_argument, NULL, 'f'},
      {"top", required_argument, NULL, 'n'},
      {"help", no_argument, NULL, 'h'},
      MLPROF__FILTER_OPTIONS,
      {NULL, 0, NULL, 0}};
  int top_given = 0, rc = -1;
  /* A1 A2 -- B1 B2: options and the first configuration's runs before
   * the first lone "--". */
  int sep = 0;
  for (int i = 1; i < argc && !sep; i++)
    if (strcmp(argv[i], "--") == 0) sep = i;
  opterr = 0;
  optind = 0; /* 0, not 1: GNU getopt then also resets its ordering mode */
  int ch;
  while (rc < 0 && (ch = getopt_long(sep ? sep : argc, argv, ":l:f:n:h",
                                     options, NULL)) != -1) {
    switch (ch) {
      case 'l':
        c->labels = optarg;
        break;
      case 'f':
        if (strcmp(optarg, "text") == 0)
          c->json = 0;
        else if (strcmp(optarg, "json") == 0)
          c->json = 1;
        else
          rc = fail_usage("unknown format '%s': use text or json", optarg);
        break;
      case 'n':
        if (mlprof__parse_count(optarg, &c->top))
          rc = fail_usage("--top wants a whole number (0 for all), not '%s'",
                          optarg);
        top_given = 1;
        break;
      case 'h':
        fputs(usage, stdout);
        fputs(mlprof__filter_help, stdout);
        rc = 0;
        break;
      default:
        rc = mlprof__cli_other_option("compare", ch, argv, &c->filter);
    }
  }
  if (rc < 0 && sep) {
    /* getopt left the first configuration's runs at optind..sep. */
    rc = groups(argc, argv, optind, c);
    if (!top_given && c->json) c->top = 0;
    return rc;
  }
  size_t nruns = (size_t)(argc - optind);
  if (rc < 0 && nruns < 2)
    rc = fail_usage(
        "%s", nruns ? "wants at least two runs to compare" : "no run given");
  if (!top_given && c->json) c->top = 0;
  c->paths = (const char *const *)argv + optind;
  c->npaths = nruns;
  return rc;
}

int mlprof__cmd_compare(int argc, char **argv) {
  mlprof__compare_cmd c;
  mlprof__compare_cmd_init(&c);
  int rc = parse(argc, argv, &c);
  if (rc < 0) rc = mlprof__compare_cmd_run(&c);
  mlprof__compare_cmd_free(&c);
  return rc;
}

/* The comparison in c's format on standard output. Returns 0 or 1 after a
 * message. */
static int write_compare(const mlprof__compare_cmd *c,
                         const mlprof__compare *cmp) {
  mlprof__out o;
  if (mlprof__out_open(&o, STDOUT_FILENO)) {
    fprintf(stderr, "mlprof compare: out of memory\n");
    return 1;
  }
  int rc = c->json ? mlprof__export_compare_json(cmp, &o)
                   : mlprof__export_compare_text(cmp, c->top, &o);
  int frc = mlprof__out_flush(&o);
  if (!rc) rc = frc;
  if (rc)
    fprintf(stderr, "mlprof compare: cannot write the comparison: %s\n",
            rc == MLPROF_EIO ? strerror(o.sys_errno) : mlprof_strerror(rc));
  mlprof__out_close(&o);
  return rc ? 1 : 0;
}

int mlprof__compare_cmd_run(const mlprof__compare_cmd *c) {
  mlprof__compare cmp;
  char err[512];
  /* Durations kept: each zone's fastest run is judged on medians and their
   * intervals (compare.h). */
  int rc = mlprof__compare_load(&cmp, c->paths, c->npaths, c->sizes, c->ngroups,
                                1, c->labels, &c->filter, err, sizeof err);
  if (rc) {
    fprintf(stderr, "mlprof compare: %s\n", err);
    rc = rc == MLPROF_ENOMEM ? 1 : 2;
  }
  if (!rc && c->json)
    for (size_t i = 0; i < cmp.nruns; i++)
      for (size_t w = 0; w < cmp.runs[i].report.nwarnings; w++)
        fprintf(stderr, "mlprof compare: warning: %s: %s\n", cmp.runs[i].path,
                cmp.runs[i].report.warnings[w]);
  if (!rc) rc = write_compare(c, &cmp);
  mlprof__compare_free(&cmp);
  return rc;
}
