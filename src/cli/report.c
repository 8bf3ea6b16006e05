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
    "      --slo GAUGE=NUMBER  objective on a gauge's values, in its own unit\n"
    "                       (a number without a unit: latency_ms=200)\n"
    "      --slo-window DURATION  window for the objectives (default 1s)\n"
    "      --slo-fail       exit 1 when a call of a zone (a gauge's value)\n"
    "                       went over its objective (a CI gate, as mlprof\n"
    "                       diff)\n"
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

void mlprof__report_cmd_init(mlprof__report_cmd *c) {
  memset(c, 0, sizeof *c);
  c->format = MLPROF__REPORT_TEXT;
  c->table = MLPROF__TABLE_ZONES;
  c->sort = MLPROF__SORT_TOTAL;
  c->top = TEXT_TOP;
  mlprof__findings_opts_init(&c->findings);
  c->fd = STDOUT_FILENO;
}

void mlprof__report_cmd_free(mlprof__report_cmd *c) {
  for (size_t i = 0; i < c->nslo; i++) mlprof__slo_spec_free(&c->slo[i]);
  free(c->slo);
  mlprof__filter_free(&c->filter);
  c->slo = NULL;
  c->nslo = 0;
}

/* A threshold: a finite number >= 0. */
static int parse_mb(const char *s, double *out) {
  char *end = NULL;
  double v = strtod(s, &end);
  if (end == s || *end || !(v >= 0) || v > 1e15) return -1;
  *out = v;
  return 0;
}

static int fail_usage(const char *fmt, const char *arg) {
  return mlprof__usage_error("report", fmt, arg);
}

/* --slo ZONE=DURATION: one more objective in c. */
static int add_slo(mlprof__report_cmd *c, const char *arg) {
  char why[512];
  if (mlprof__grow(&c->slo, &c->slo_cap, c->nslo + 1, sizeof *c->slo)) {
    fprintf(stderr, "mlprof report: out of memory\n");
    return 3;
  }
  if (mlprof__slo_parse(arg, &c->slo[c->nslo], why, sizeof why))
    return fail_usage("%s", why);
  c->nslo++;
  return -1;
}

/* --leak-min-mb and its kin. */
static int leak_option(mlprof__report_cmd *c, int ch, const char *arg) {
  double *to = ch == OPT_LEAK_MB        ? &c->findings.leak_min_mb
               : ch == OPT_LEAK_MB_STEP ? &c->findings.leak_min_mb_per_step
                                        : &c->findings.leak_min_mb_per_min;
  if (!parse_mb(arg, to)) return -1;
  char why[512];
  snprintf(why, sizeof why, "--%s wants a number of MB (0 or more), not '%s'",
           ch == OPT_LEAK_MB        ? "leak-min-mb"
           : ch == OPT_LEAK_MB_STEP ? "leak-min-mb-per-step"
                                    : "leak-min-mb-per-min",
           arg);
  return fail_usage("%s", why);
}

/* What the options ask for that cannot be done together. */
static int check_combinations(const mlprof__report_cmd *c, const char *table) {
  if (c->slo_fail && !c->nslo)
    return fail_usage("%s",
                      "--slo-fail needs an objective (--slo ZONE=DURATION)");
  /* The dashboard, and the CSV zones and samples tables, are written
   * without checking the objectives. */
  if (c->slo_fail && c->html)
    return fail_usage("%s", "--slo-fail does not apply to --html");
  if (c->slo_fail && c->format == MLPROF__REPORT_CSV &&
      c->table != MLPROF__TABLE_FINDINGS)
    return fail_usage("--slo-fail does not apply to --table %s",
                      table ? table : "zones");
  int filtered =
      mlprof__filter_records(&c->filter) || mlprof__filter_zones(&c->filter);
  if (filtered && c->html)
    return fail_usage("%s", "filters do not apply to --html: use mlprof html");
  if (filtered && c->table == MLPROF__TABLE_SAMPLES)
    return fail_usage("%s", "filters do not apply to --table samples");
  if (!c->html && table && c->format != MLPROF__REPORT_CSV)
    return fail_usage("--table %s applies to --format csv only", table);
  if ((c->wall || c->by_zone) && c->format != MLPROF__REPORT_FOLDED)
    return fail_usage("--%s applies to --format folded only",
                      c->wall ? "wall" : "by-zone");
  return -1;
}

/* Reads the arguments into *c. Returns -1 to go on, else the exit status
 * (0 after --help). */
static int parse(int argc, char **argv, mlprof__report_cmd *c) {
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
  int rc = -1, top_given = 0;
  const char *table = NULL;
  opterr = 0;
  optind = 0; /* 0, not 1: GNU getopt then also resets its ordering mode */
  int ch;
  while (rc < 0 &&
         (ch = getopt_long(argc, argv, ":f:s:n:t:h", options, NULL)) != -1) {
    switch (ch) {
      case 'f':
        if (strcmp(optarg, "text") == 0)
          c->format = MLPROF__REPORT_TEXT;
        else if (strcmp(optarg, "json") == 0)
          c->format = MLPROF__REPORT_JSON;
        else if (strcmp(optarg, "csv") == 0)
          c->format = MLPROF__REPORT_CSV;
        else if (strcmp(optarg, "folded") == 0)
          c->format = MLPROF__REPORT_FOLDED;
        else
          rc = fail_usage("unknown format '%s': use text, json, csv or folded",
                          optarg);
        break;
      case 's':
        if (mlprof__sort_key_parse(optarg, &c->sort))
          rc = fail_usage(
              "unknown sort key '%s': use total, self, mean, p99 or count",
              optarg);
        break;
      case 'n':
        if (mlprof__parse_count(optarg, &c->top))
          rc = fail_usage("--top wants a whole number (0 for all), not '%s'",
                          optarg);
        top_given = 1;
        break;
      case 't':
        if (strcmp(optarg, "zones") == 0)
          c->table = MLPROF__TABLE_ZONES;
        else if (strcmp(optarg, "samples") == 0)
          c->table = MLPROF__TABLE_SAMPLES;
        else if (strcmp(optarg, "findings") == 0)
          c->table = MLPROF__TABLE_FINDINGS;
        else
          rc = fail_usage("unknown table '%s': use zones, findings or samples",
                          optarg);
        table = optarg;
        break;
      case OPT_SLO:
        rc = add_slo(c, optarg);
        break;
      case OPT_SLO_WINDOW:
        if (mlprof__duration_parse(optarg, &c->findings.slo_window_ns))
          rc = fail_usage(
              "--slo-window wants a duration with a unit (ns, us, ms, s), "
              "not '%s'",
              optarg);
        break;
      case OPT_SLO_FAIL:
        c->slo_fail = 1;
        break;
      case OPT_LEAK_MB:
      case OPT_LEAK_MB_STEP:
      case OPT_LEAK_MB_MIN:
        rc = leak_option(c, ch, optarg);
        break;
      case OPT_HTML:
        c->html = optarg;
        break;
      case OPT_WALL:
        c->wall = 1;
        break;
      case OPT_BY_ZONE:
        c->by_zone = 1;
        break;
      case 'h':
        fputs(usage, stdout);
        fputs(mlprof__filter_help, stdout);
        return 0;
      default:
        rc = mlprof__cli_other_option("report", ch, argv, &c->filter);
    }
  }
  if (rc < 0 && optind >= argc) rc = fail_usage("%s", "no profile given");
  if (rc < 0) rc = check_combinations(c, table);
  if (!top_given && c->format != MLPROF__REPORT_TEXT) c->top = 0;
  c->paths = (const char *const *)argv + optind;
  c->npaths = (size_t)(argc - optind);
  return rc;
}

int mlprof__cmd_report(int argc, char **argv) {
  mlprof__report_cmd c;
  mlprof__report_cmd_init(&c);
  int rc = parse(argc, argv, &c);
  if (rc < 0) rc = mlprof__report_cmd_run(&c);
  mlprof__report_cmd_free(&c);
  return rc;
}

/* --table samples: every sample as CSV, streamed to fd. */
static int samples_csv(const mlprof__job *job, int fd) {
  char err[512];
  mlprof__out o;
  mlprof__read_report *reads =
      calloc(job->count ? job->count : 1, sizeof *reads);
  if (!reads || mlprof__out_open(&o, fd)) {
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

/* The report's format (export/formats.c) for c's --format and --table. */
static const mlprof__report_format *format_of(const mlprof__report_cmd *c) {
  if (c->format == MLPROF__REPORT_FOLDED)
    return mlprof__report_format_find(
        c->wall ? (c->by_zone ? "folded-wall-zone" : "folded-wall")
                : (c->by_zone ? "folded-zone" : "folded"));
  return mlprof__report_format_find(c->format == MLPROF__REPORT_JSON   ? "json"
                                    : c->format == MLPROF__REPORT_TEXT ? "text"
                                    : c->table == MLPROF__TABLE_FINDINGS
                                        ? "findings-csv"
                                        : "csv");
}

/* The report of a finished analysis in c's format on c->fd. Returns 0 or
 * 3 after a message. */
static int write_report(const mlprof__report_cmd *c,
                        const mlprof__analysis *a) {
  mlprof__out o;
  if (mlprof__out_open(&o, c->fd)) {
    fprintf(stderr, "mlprof report: out of memory\n");
    return 3;
  }
  int rc = format_of(c)->write(a, &o);
  int wrc = mlprof__out_flush(&o);
  if (!rc) rc = wrc;
  if (rc)
    fprintf(stderr, "mlprof report: cannot write the report: %s\n",
            rc == MLPROF_EIO ? strerror(o.sys_errno) : mlprof_strerror(rc));
  mlprof__out_close(&o);
  return rc ? 3 : 0;
}

/* What the analysis says beside the report, on stderr: objectives of no
 * zone or gauge, and the warnings of the formats that cannot carry them.
 * Returns 2 after a message for a gauge's objective (a number without a
 * unit) on a name that is a zone and no gauge (a unit forgotten), else 0. */
static int warn(const mlprof__report_cmd *c, const mlprof__analysis *a) {
  const mlprof__findings *f = &a->f;
  const mlprof__report *r = &a->r;
  for (size_t i = 0; i < f->nslo; i++) {
    const mlprof__slo_result *s = &f->slo[i];
    if (s->count) continue;
    int zone = 0;
    for (size_t k = 0; k < r->nzones && s->gauge && !zone; k++)
      zone = r->zones[k].name_len == s->zone_len &&
             !memcmp(r->zones[k].name, s->zone, s->zone_len);
    if (zone) {
      fprintf(stderr,
              "mlprof report: --slo %.*s=%g: %.*s is a zone, not a gauge: "
              "its objective is a duration with a unit (%.*s=%gms)\n",
              (int)s->zone_len, s->zone, s->objective, (int)s->zone_len,
              s->zone, (int)s->zone_len, s->zone, s->objective);
      return 2;
    }
    fputs("mlprof report: warning: --slo ", stderr);
    fwrite(s->zone, 1, s->zone_len, stderr);
    fputs(s->gauge ? ": no such gauge in the profiles (no values)\n"
                   : ": no such zone in the profiles (no calls)\n",
          stderr);
  }
  /* Text carries its warnings in its header; the machine formats keep them
   * in the data (JSON) or have no room for them (CSV), so say them here. */
  if (c->format != MLPROF__REPORT_TEXT)
    for (size_t i = 0; i < a->r.nwarnings; i++)
      fprintf(stderr, "mlprof report: warning: %s\n", a->r.warnings[i]);
  return 0;
}

int mlprof__report_cmd_run(const mlprof__report_cmd *c) {
  if (c->html) {
    /* The dashboard is mlprof html's: one way to make it. */
    mlprof__html_cmd h;
    mlprof__html_cmd_init(&h);
    h.output = c->html;
    h.paths = c->paths;
    h.npaths = c->npaths;
    int rc = mlprof__html_cmd_run(&h);
    mlprof__html_cmd_free(&h);
    return rc;
  }
  mlprof__job job;
  if (mlprof__cli_job_open("report", &job, c->paths, c->npaths)) return 2;
  if (c->table == MLPROF__TABLE_SAMPLES) {
    int rc = samples_csv(&job, c->fd);
    mlprof__job_close(&job);
    return rc;
  }
  mlprof__analysis_opts ao;
  mlprof__analysis_opts_init(&ao);
  if (format_of(c)->findings) ao.want = MLPROF__ANALYSIS_FINDINGS;
  ao.findings = c->findings;
  ao.findings.slo = c->slo;
  ao.findings.nslo = c->nslo;
  ao.sort = c->sort;
  ao.top = c->top;
  ao.filter = &c->filter;
  char err[512];
  mlprof__analysis a;
  int rc = mlprof__analysis_run(&job, &ao, &a, err, sizeof err);
  mlprof__job_close(&job);
  if (rc) {
    fprintf(stderr, "mlprof report: %s\n", err);
    return rc == MLPROF_EINVAL ? 2 : 3; /* a filter matching nothing: 2 */
  }
  if ((rc = warn(c, &a))) {
    mlprof__analysis_free(&a);
    return rc;
  }
  if (c->format == MLPROF__REPORT_FOLDED && !a.r.hot.samples)
    fprintf(stderr,
            "mlprof report: no stack samples in these profiles (Python "
            "programs under mlprof run, or Profiler(stacks=...); "
            "docs/stacks.md)\n");
  rc = write_report(c, &a);
  size_t missed = 0;
  for (size_t i = 0; i < a.f.nslo; i++) missed += a.f.slo[i].over > 0;
  mlprof__analysis_free(&a);
  if (rc) return rc;
  if (c->slo_fail && missed) {
    fprintf(stderr,
            "mlprof report: %zu of %zu latency objective%s missed "
            "(--slo-fail)\n",
            missed, c->nslo, c->nslo == 1 ? "" : "s");
    return 1;
  }
  return 0;
}
