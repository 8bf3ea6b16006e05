/* mlprof report: statistics of one or more profiles as text, JSON or CSV. */
#include <errno.h>
#include <getopt.h>
#include <mlprof.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../analyze/analysis.h"
#include "../export/export.h"
#include "../model/job.h"
#include "cli.h"

/* Zones shown by the text format when --top is not given. */
#define TEXT_TOP 30

static const char usage[] =
    "usage: mlprof report [options] PATH...\n"
    "\n"
    "Statistics of profiles: per zone count, total, self, mean, std, min, "
    "max,\n"
    "p50/p90/p95/p99 and share of wall time; per process and per thread;\n"
    "counters, throughput units, steps, dropped events, zones still open;\n"
    "when the profiles hold samples, the resources used (mean and peak of\n"
    "each measure per process, system, GPU and process tree; sources that\n"
    "did not run and why; energy and carbon) and, in JSON, the CPU, GPU and\n"
    "RSS change of the samples overlapping each zone.\n"
    "Then what is wrong and what to do (docs/findings.md): the step\n"
    "breakdown (data, forward, backward, optimizer, communication, other),\n"
    "findings by severity with their evidence and a recommendation\n"
    "(data-bound, compute, I/O or waiting, memory, GPU underutilized),\n"
    "memory leaks, and latency objectives given with --slo.\n"
    "PATH is a profile file or a run directory (one profile per process,\n"
    "merged on one timeline). Several paths are merged too.\n"
    "\n"
    "options:\n"
    "  -f, --format FORMAT  text (default), json, csv or folded (the stack\n"
    "                       samples as collapsed stacks, one line per stack\n"
    "                       and its count, for FlameGraph and speedscope;\n"
    "                       samples on a CPU unless --wall)\n"
    "      --wall           with --format folded: every sample, waiting ones\n"
    "                       too\n"
    "      --by-zone        with --format folded: the innermost zone as the\n"
    "                       root frame, \"[zone]\"\n"
    "  -s, --sort KEY       order zones by total (default), self, mean, p99\n"
    "                       or count, largest first\n"
    "  -n, --top N          show only the first N zones; 0 shows all\n"
    "                       (default: 30 for text, all for json and csv)\n"
    "      --html FILE      write the HTML dashboard to FILE instead (as\n"
    "                       mlprof html PATH... -o FILE)\n"
    "  -t, --table TABLE    with --format csv: zones (default), findings, or\n"
    "                       samples (every sample, one row per measure,\n"
    "                       streamed)\n"
    "      --slo ZONE=DURATION  latency objective for a zone (repeatable):\n"
    "                       DURATION is a number with a unit, ns, us, ms or s\n"
    "                       (e.g. decode=200ms); the last '=' splits\n"
    "      --slo-window DURATION  window for the objectives (default 1s)\n"
    "      --slo-fail       exit 1 when a call of a zone went over its\n"
    "                       objective (a CI gate, as mlprof diff)\n"
    "      --leak-min-mb MB        least growth reported as a leak (default "
    "10)\n"
    "      --leak-min-mb-per-step MB  least slope over steps (default 0.1)\n"
    "      --leak-min-mb-per-min MB   least slope over time, for a process\n"
    "                       without step marks (default 1)\n"
    "  -h, --help           show this help\n"
    "\n"
    "Percentiles are exact (nearest rank over every duration). JSON follows "
    "the\n"
    "schema \"mlprof.report/1\" (docs/json-schema.md); JSON and CSV give "
    "times\n"
    "in integer nanoseconds; text shows sizes in powers of 1000 (MB, GB). "
    "Damaged or cut-short profiles are reported as "
    "far\n"
    "as they are intact, with a warning.\n"
    "\n"
    "exit status: 0 done, 1 an objective missed (with --slo-fail), 2 bad\n"
    "usage or unreadable input, 3 the report could not be written (out of\n"
    "memory, output error).\n";

enum { FORMAT_TEXT, FORMAT_JSON, FORMAT_CSV, FORMAT_FOLDED };
enum { TABLE_ZONES, TABLE_SAMPLES, TABLE_FINDINGS };
enum {
  OPT_SLO = 1000,
  OPT_SLO_WINDOW,
  OPT_SLO_FAIL,
  OPT_LEAK_MB,
  OPT_LEAK_MB_STEP,
  OPT_LEAK_MB_MIN,
  OPT_HTML,
  OPT_WALL,
  OPT_BY_ZONE
};

/* A threshold: a finite number >= 0. */
static int parse_mb(const char *s, double *out) {
  char *end = NULL;
  double v = strtod(s, &end);
  if (end == s || *end || !(v >= 0) || v > 1e15) return -1;
  *out = v;
  return 0;
}

static void free_slo(mlprof__slo_spec *slo, size_t n) {
  for (size_t i = 0; i < n; i++) mlprof__slo_spec_free(&slo[i]);
  free(slo);
}

static int fail_usage(const char *fmt, const char *arg) {
  return mlprof__usage_error("report", fmt, arg);
}

/* --table samples: every sample as CSV, streamed to standard output. */
static int samples_csv(const mlprof__job *job) {
  char err[512];
  mlprof__out o;
  mlprof__read_report *reads =
      calloc(job->count ? job->count : 1, sizeof *reads);
  if (!reads || mlprof__out_open(&o, STDOUT_FILENO)) {
    free(reads);
    fprintf(stderr, "mlprof report: out of memory\n");
    return 3;
  }
  int rc = mlprof__export_samples_csv(job, &o, reads, err, sizeof err);
  int wrc = mlprof__out_flush(&o);
  if (!rc && wrc) {
    rc = wrc;
    snprintf(err, sizeof err, "cannot write the samples");
  }
  if (rc)
    fprintf(stderr, "mlprof report: %s%s%s\n", err,
            rc == MLPROF_EIO ? ": " : "",
            rc == MLPROF_EIO ? strerror(o.sys_errno) : "");
  for (size_t i = 0; i < job->count && !rc; i++)
    if (reads[i].damaged_chunks || reads[i].truncated_bytes)
      fprintf(stderr,
              "mlprof report: warning: %s: damaged or cut short; samples "
              "written as far as it is intact\n",
              job->profiles[i].path);
  mlprof__out_close(&o);
  free(reads);
  return rc ? 3 : 0;
}

int mlprof__cmd_report(int argc, char **argv) {
  static const struct option options[] = {
      {"format", required_argument, NULL, 'f'},
      {"sort", required_argument, NULL, 's'},
      {"top", required_argument, NULL, 'n'},
      {"table", required_argument, NULL, 't'},
      {"slo", required_argument, NULL, OPT_SLO},
      {"slo-window", required_argument, NULL, OPT_SLO_WINDOW},
      {"slo-fail", no_argument, NULL, OPT_SLO_FAIL},
      {"leak-min-mb", required_argument, NULL, OPT_LEAK_MB},
      {"leak-min-mb-per-step", required_argument, NULL, OPT_LEAK_MB_STEP},
      {"leak-min-mb-per-min", required_argument, NULL, OPT_LEAK_MB_MIN},
      {"html", required_argument, NULL, OPT_HTML},
      {"wall", no_argument, NULL, OPT_WALL},
      {"by-zone", no_argument, NULL, OPT_BY_ZONE},
      {"help", no_argument, NULL, 'h'},
      MLPROF__FILTER_OPTIONS,
      {NULL, 0, NULL, 0}};
  int format = FORMAT_TEXT, top_given = 0, which_table = TABLE_ZONES;
  int slo_fail = 0, wall = 0, by_zone = 0;
  mlprof__findings_opts fo;
  mlprof__findings_opts_init(&fo);
  mlprof__slo_spec *slo = NULL;
  size_t nslo = 0, slo_cap = 0;
  int rc = 0;
  const char *table = NULL, *html = NULL;
  mlprof__sort_key sort = MLPROF__SORT_TOTAL;
  size_t top = 0;
  mlprof__filter filter = {0};
  opterr = 0;
  optind = 0; /* 0, not 1: GNU getopt then also resets its ordering mode */
  int ch;
  char why[512];
  while (!rc &&
         (ch = getopt_long(argc, argv, ":f:s:n:t:h", options, NULL)) != -1) {
    switch (ch) {
      case 'f':
        if (strcmp(optarg, "text") == 0)
          format = FORMAT_TEXT;
        else if (strcmp(optarg, "json") == 0)
          format = FORMAT_JSON;
        else if (strcmp(optarg, "csv") == 0)
          format = FORMAT_CSV;
        else if (strcmp(optarg, "folded") == 0)
          format = FORMAT_FOLDED;
        else
          rc = fail_usage("unknown format '%s': use text, json, csv or folded",
                          optarg);
        break;
      case 's':
        if (mlprof__sort_key_parse(optarg, &sort))
          rc = fail_usage(
              "unknown sort key '%s': use total, self, mean, p99 or count",
              optarg);
        break;
      case 'n':
        if (mlprof__parse_count(optarg, &top))
          rc = fail_usage("--top wants a whole number (0 for all), not '%s'",
                          optarg);
        top_given = 1;
        break;
      case 't':
        if (strcmp(optarg, "zones") == 0)
          which_table = TABLE_ZONES;
        else if (strcmp(optarg, "samples") == 0)
          which_table = TABLE_SAMPLES;
        else if (strcmp(optarg, "findings") == 0)
          which_table = TABLE_FINDINGS;
        else
          rc = fail_usage("unknown table '%s': use zones, findings or samples",
                          optarg);
        table = optarg;
        break;
      case OPT_SLO:
        if (mlprof__grow(&slo, &slo_cap, nslo + 1, sizeof *slo)) {
          fprintf(stderr, "mlprof report: out of memory\n");
          rc = 3;
        } else if (mlprof__slo_parse(optarg, &slo[nslo], why, sizeof why)) {
          rc = fail_usage("%s", why);
        } else {
          nslo++;
        }
        break;
      case OPT_SLO_WINDOW:
        if (mlprof__duration_parse(optarg, &fo.slo_window_ns))
          rc = fail_usage(
              "--slo-window wants a duration with a unit (ns, us, ms, s), "
              "not '%s'",
              optarg);
        break;
      case OPT_SLO_FAIL:
        slo_fail = 1;
        break;
      case OPT_LEAK_MB:
      case OPT_LEAK_MB_STEP:
      case OPT_LEAK_MB_MIN: {
        double *to = ch == OPT_LEAK_MB        ? &fo.leak_min_mb
                     : ch == OPT_LEAK_MB_STEP ? &fo.leak_min_mb_per_step
                                              : &fo.leak_min_mb_per_min;
        if (parse_mb(optarg, to)) {
          snprintf(why, sizeof why,
                   "--%s wants a number of MB (0 or more), not '%s'",
                   ch == OPT_LEAK_MB        ? "leak-min-mb"
                   : ch == OPT_LEAK_MB_STEP ? "leak-min-mb-per-step"
                                            : "leak-min-mb-per-min",
                   optarg);
          rc = fail_usage("%s", why);
        }
        break;
      }
      case OPT_HTML:
        html = optarg;
        break;
      case OPT_WALL:
        wall = 1;
        break;
      case OPT_BY_ZONE:
        by_zone = 1;
        break;
      case 'h':
        fputs(usage, stdout);
        fputs(mlprof__filter_help, stdout);
        free_slo(slo, nslo);
        mlprof__filter_free(&filter);
        return 0;
      default:
        rc = mlprof__filter_option("report", ch, optarg, &filter);
        if (rc < 0)
          rc = mlprof__option_error("report", ch, argv, optind, optopt);
    }
  }
  if (!rc && optind >= argc) rc = fail_usage("%s", "no profile given");
  if (!rc && slo_fail && !nslo)
    rc =
        fail_usage("%s", "--slo-fail needs an objective (--slo ZONE=DURATION)");
  /* The dashboard, and the CSV zones and samples tables, are written
   * without checking the objectives. */
  if (!rc && slo_fail && html)
    rc = fail_usage("%s", "--slo-fail does not apply to --html");
  if (!rc && slo_fail && format == FORMAT_CSV && which_table != TABLE_FINDINGS)
    rc = fail_usage("--slo-fail does not apply to --table %s",
                    table ? table : "zones");
  int filtered =
      mlprof__filter_records(&filter) || mlprof__filter_zones(&filter);
  if (!rc && filtered && html)
    rc = fail_usage("%s", "filters do not apply to --html: use mlprof html");
  if (!rc && filtered && which_table == TABLE_SAMPLES)
    rc = fail_usage("%s", "filters do not apply to --table samples");
  if (!rc && html) {
    /* The dashboard is mlprof html's: one way to make it. */
    free_slo(slo, nslo);
    int n = argc - optind;
    char **hargv = calloc((size_t)n + 4, sizeof *hargv);
    if (!hargv) return 3;
    hargv[0] = "html";
    hargv[1] = "-o";
    hargv[2] = (char *)html;
    memcpy(hargv + 3, argv + optind, (size_t)n * sizeof *hargv);
    rc = mlprof__cmd_html(n + 3, hargv);
    free(hargv);
    return rc;
  }
  if (!rc && table && format != FORMAT_CSV)
    rc = fail_usage("--table %s applies to --format csv only", table);
  if (rc) {
    free_slo(slo, nslo);
    mlprof__filter_free(&filter);
    return rc;
  }
  fo.slo = slo;
  fo.nslo = nslo;
  if (!rc && (wall || by_zone) && format != FORMAT_FOLDED)
    rc = fail_usage("--%s applies to --format folded only",
                    wall ? "wall" : "by-zone");
  if (rc) {
    free_slo(slo, nslo);
    mlprof__filter_free(&filter);
    return rc;
  }
  if (!top_given && format == FORMAT_TEXT) top = TEXT_TOP;

  char err[512];
  mlprof__job job;
  if (mlprof__cli_job_open("report", &job, (const char *const *)argv + optind,
                           (size_t)(argc - optind))) {
    free_slo(slo, nslo);
    mlprof__filter_free(&filter);
    return 2;
  }
  if (which_table == TABLE_SAMPLES) {
    rc = samples_csv(&job);
    mlprof__job_close(&job);
    free_slo(slo, nslo);
    mlprof__filter_free(&filter);
    return rc;
  }
  /* The zone table alone needs neither the samples nor the findings. */
  int analyse = !(format == FORMAT_CSV && which_table == TABLE_ZONES) &&
                format != FORMAT_FOLDED;
  mlprof__analysis_opts ao;
  mlprof__analysis_opts_init(&ao);
  if (analyse) ao.want = MLPROF__ANALYSIS_FINDINGS;
  ao.findings = fo;
  ao.sort = sort;
  ao.top = top;
  ao.filter = &filter;
  mlprof__analysis a;
  rc = mlprof__analysis_run(&job, &ao, &a, err, sizeof err);
  mlprof__job_close(&job);
  free_slo(slo, nslo);
  mlprof__filter_free(&filter);
  if (rc) {
    fprintf(stderr, "mlprof report: %s\n", err);
    return rc == MLPROF_EINVAL ? 2 : 3; /* a filter matching nothing: 2 */
  }
  const mlprof__report *r = &a.r;
  const mlprof__findings *f = &a.f;
  for (size_t i = 0; i < f->nslo; i++)
    if (!f->slo[i].count) {
      fputs("mlprof report: warning: --slo ", stderr);
      fwrite(f->slo[i].zone, 1, f->slo[i].zone_len, stderr);
      fputs(": no such zone in the profiles (no calls)\n", stderr);
    }
  /* Text carries its warnings in its header; the machine formats keep them
   * in the data (JSON) or have no room for them (CSV), so say them here. */
  if (format != FORMAT_TEXT)
    for (size_t i = 0; i < r->nwarnings; i++)
      fprintf(stderr, "mlprof report: warning: %s\n", r->warnings[i]);

  mlprof__out o;
  if (mlprof__out_open(&o, STDOUT_FILENO)) {
    mlprof__analysis_free(&a);
    fprintf(stderr, "mlprof report: out of memory\n");
    return 3;
  }
  if (format == FORMAT_FOLDED && !r->hot.samples)
    fprintf(stderr,
            "mlprof report: no stack samples in these profiles (Python "
            "programs under mlprof run, or Profiler(stacks=...); "
            "docs/stacks.md)\n");
  if (format == FORMAT_JSON)
    rc = mlprof__export_json(r, &a.res, f, &o);
  else if (format == FORMAT_FOLDED)
    rc = mlprof__export_folded(r, wall, by_zone, &o);
  else if (format == FORMAT_CSV && which_table == TABLE_FINDINGS)
    rc = mlprof__export_findings_csv(f, &o);
  else if (format == FORMAT_CSV)
    rc = mlprof__export_csv(r, &o);
  else
    rc = mlprof__export_text(r, &a.res, f, &o);
  int wrc = mlprof__out_flush(&o);
  if (!rc) rc = wrc;
  if (rc)
    fprintf(stderr, "mlprof report: cannot write the report: %s\n",
            rc == MLPROF_EIO ? strerror(o.sys_errno) : mlprof_strerror(rc));
  mlprof__out_close(&o);
  size_t missed = 0;
  for (size_t i = 0; i < f->nslo; i++) missed += f->slo[i].over > 0;
  mlprof__analysis_free(&a);
  if (rc) return 3;
  if (slo_fail && missed) {
    fprintf(stderr,
            "mlprof report: %zu of %zu latency objective%s missed "
            "(--slo-fail)\n",
            missed, nslo, nslo == 1 ? "" : "s");
    return 1;
  }
  return 0;
}
