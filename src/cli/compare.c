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
#include "../export/table.h"
#include "cli.h"

/* Zones shown by the text format when --top is not given. */
#define TEXT_TOP 30

static const char usage[] =
    "usage: mlprof compare [options] RUN RUN [RUN...]\n"
    "\n"
    "Runs of one workload under different backends or configurations, side\n"
    "by side: per zone the count, mean, p50 and p99 of each run, its speedup\n"
    "against the slowest run and against the first (ratio of means: the\n"
    "other run's mean / this run's mean, > 1 is faster) and the fastest run;\n"
    "the runs ranked by wall time and by step time (mean interval between\n"
    "step marks; wall time when a run has no steps); and a one-line\n"
    "recommendation. RUN is a profile file or a run directory.\n"
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

static void fmt_speedup(char *b, size_t len, double x) {
  if (isnan(x) || isinf(x))
    snprintf(b, len, "-");
  else
    snprintf(b, len, "%.2fx", x);
}

static void out_recommendation_text(const mlprof__compare *c, mlprof__out *o) {
  char line[1024];
  mlprof__compare_recommendation(c, line, sizeof line);
  mlprof__out_lit(o, "\nRecommendation: ");
  mlprof__out_text_str(o, line, strlen(line));
  mlprof__out_lit(o, "\n");
}

static int compare_text(const mlprof__compare *c, size_t top, mlprof__out *o) {
  mlprof__out_printf(o, "mlprof compare: %zu runs\n\nRuns\n", c->nruns);
  static const char *const rheads[] = {"run",  "label",     "path",
                                       "wall", "spans",     "steps",
                                       "step", "rank wall", "rank step"};
  mlprof__table t;
  if (mlprof__table_open(&t, rheads, "rllrrrrrr")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < c->nruns; i++) {
    const mlprof__compare_run *r = &c->runs[i];
    char w[32], s[32];
    mlprof__fmt_duration(w, sizeof w, (double)r->report.wall_ns);
    mlprof__fmt_duration(s, sizeof s, r->step_mean_ns);
    mlprof__table_cell(&t, "%zu", i + 1);
    mlprof__table_name(&t, r->label, strlen(r->label), 24);
    mlprof__table_name(&t, r->path, strlen(r->path), 40);
    mlprof__table_cell(&t, "%s", w);
    mlprof__table_cell(&t, "%llu", (unsigned long long)r->report.spans);
    mlprof__table_cell(&t, "%llu", (unsigned long long)r->intervals);
    mlprof__table_cell(&t, "%s", s);
    mlprof__table_cell(&t, "%zu", r->rank_total);
    mlprof__table_cell(&t, "%zu", r->rank_step);
  }
  int rc = mlprof__table_print(&t, o);
  if (rc) return rc;

  size_t shown = top && top < c->nzones ? top : c->nzones;
  mlprof__out_printf(
      o,
      "\nZones (%zu of %zu, by largest total; speedup = the other "
      "run's mean / this run's mean)\n",
      shown, c->nzones);
  static const char *const zheads[] = {"zone",       "run",      "count",
                                       "mean",       "p50",      "p99",
                                       "vs slowest", "vs first", ""};
  if (mlprof__table_open(&t, zheads, "llrrrrrrl")) return MLPROF_ENOMEM;
  for (size_t k = 0; k < shown; k++) {
    const mlprof__compare_zone *z = &c->zones[k];
    for (size_t i = 0; i < c->nruns; i++) {
      const mlprof__zone_stats *s = z->stats[i];
      if (i == 0)
        mlprof__table_name(&t, z->name, z->name_len, 40);
      else
        mlprof__table_cell(&t, "%s", "");
      mlprof__table_name(&t, c->runs[i].label, strlen(c->runs[i].label), 24);
      if (!s) {
        for (int col = 0; col < 6; col++) mlprof__table_cell(&t, "-");
        mlprof__table_cell(&t, "absent");
        continue;
      }
      char m[32], p50[32], p99[32], vs[32], vf[32];
      mlprof__fmt_duration(m, sizeof m, s->mean_ns);
      mlprof__fmt_duration(p50, sizeof p50, (double)s->p50_ns);
      mlprof__fmt_duration(p99, sizeof p99, (double)s->p99_ns);
      fmt_speedup(vs, sizeof vs, z->vs_slowest[i]);
      fmt_speedup(vf, sizeof vf, z->vs_first[i]);
      mlprof__table_cell(&t, "%llu", (unsigned long long)s->count);
      mlprof__table_cell(&t, "%s", m);
      mlprof__table_cell(&t, "%s", p50);
      mlprof__table_cell(&t, "%s", p99);
      mlprof__table_cell(&t, "%s", vs);
      mlprof__table_cell(&t, "%s", vf);
      mlprof__table_cell(&t, "%s",
                         c->nruns < 2                  ? ""
                         : !mlprof__compare_tied(z, i) ? ""
                         : z->tie                      ? "tie"
                                                       : "fastest");
    }
  }
  rc = mlprof__table_print(&t, o);
  if (rc) return rc;
  int heading = 0;
  for (size_t i = 0; i < c->nruns; i++)
    for (size_t w = 0; w < c->runs[i].report.nwarnings; w++) {
      const char *line = c->runs[i].report.warnings[w];
      if (!heading++) mlprof__out_lit(o, "\nWarnings\n");
      mlprof__out_lit(o, "  ");
      mlprof__out_text_str(o, c->runs[i].label, strlen(c->runs[i].label));
      mlprof__out_lit(o, ": ");
      mlprof__out_text_str(o, line, strlen(line));
      mlprof__out_lit(o, "\n");
    }
  out_recommendation_text(c, o);
  return 0;
}

int mlprof__cmd_compare(int argc, char **argv) {
  static const struct option options[] = {
      {"labels", required_argument, NULL, 'l'},
      {"format", required_argument, NULL, 'f'},
      {"top", required_argument, NULL, 'n'},
      {"help", no_argument, NULL, 'h'},
      MLPROF__FILTER_OPTIONS,
      {NULL, 0, NULL, 0}};
  const char *labels_arg = NULL;
  int json = 0, top_given = 0, rc = -1;
  size_t top = 0;
  mlprof__filter filter = {0};
  opterr = 0;
  optind = 0; /* 0, not 1: GNU getopt then also resets its ordering mode */
  int ch;
  while (rc < 0 &&
         (ch = getopt_long(argc, argv, ":l:f:n:h", options, NULL)) != -1) {
    switch (ch) {
      case 'l':
        labels_arg = optarg;
        break;
      case 'f':
        if (strcmp(optarg, "text") == 0)
          json = 0;
        else if (strcmp(optarg, "json") == 0)
          json = 1;
        else
          rc = fail_usage("unknown format '%s': use text or json", optarg);
        break;
      case 'n':
        if (mlprof__parse_count(optarg, &top))
          rc = fail_usage("--top wants a whole number (0 for all), not '%s'",
                          optarg);
        top_given = 1;
        break;
      case 'h':
        fputs(usage, stdout);
        fputs(mlprof__filter_help, stdout);
        rc = 0;
        break;
      default: {
        int frc = mlprof__filter_option("compare", ch, optarg, &filter);
        if (frc > 0) rc = frc;
        if (frc < 0)
          rc = mlprof__option_error("compare", ch, argv, optind, optopt);
      }
    }
  }
  size_t nruns = (size_t)(argc - optind);
  if (rc < 0 && nruns < 2)
    rc = fail_usage(
        "%s", nruns ? "wants at least two runs to compare" : "no run given");
  if (rc >= 0) {
    mlprof__filter_free(&filter);
    return rc;
  }
  mlprof__compare c;
  char err[512];
  rc = mlprof__compare_load(&c, (const char *const *)argv + optind, nruns, 0,
                            labels_arg, &filter, err, sizeof err);
  mlprof__filter_free(&filter);
  if (rc) {
    fprintf(stderr, "mlprof compare: %s\n", err);
    rc = rc == MLPROF_ENOMEM ? 1 : 2;
  }
  if (!rc) {
    if (json)
      for (size_t i = 0; i < c.nruns; i++)
        for (size_t w = 0; w < c.runs[i].report.nwarnings; w++)
          fprintf(stderr, "mlprof compare: warning: %s: %s\n", c.runs[i].path,
                  c.runs[i].report.warnings[w]);
    if (!top_given && !json) top = TEXT_TOP;
    mlprof__out o;
    if (mlprof__out_open(&o, STDOUT_FILENO)) {
      fprintf(stderr, "mlprof compare: out of memory\n");
      rc = 1;
    } else {
      int wrc = json ? mlprof__compare_json(&c, &o) : compare_text(&c, top, &o);
      int frc = mlprof__out_flush(&o);
      if (!wrc) wrc = frc;
      if (wrc) {
        fprintf(
            stderr, "mlprof compare: cannot write the comparison: %s\n",
            wrc == MLPROF_EIO ? strerror(o.sys_errno) : mlprof_strerror(wrc));
        rc = 1;
      }
      mlprof__out_close(&o);
    }
  }
  mlprof__compare_free(&c);
  return rc;
}
