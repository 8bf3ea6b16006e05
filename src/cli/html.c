/* mlprof html: the self-contained HTML dashboard of one or more profiles. */
#include "../export/html.h"

#include <errno.h>
#include <getopt.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "../analyze/dashboard.h"

static const char usage[] =
    "usage: mlprof html [options] PATH... -o FILE\n"
    "       mlprof html --compare [--labels A,B,...] RUN RUN... -o FILE\n"
    "       mlprof html --diff BASE NEW -o FILE\n"
    "\n"
    "Writes one self-contained HTML file (no network: inline styles, script\n"
    "and SVG charts) to open in any browser: run overview, step-time\n"
    "breakdown, zones (sortable table, mean and std, flame graph of the zone\n"
    "hierarchy), timeline of CPU, memory, GPU and power with step marks\n"
    "(drag to zoom), memory, GPUs (or why there are none), findings, and the\n"
    "process tree. PATH is a profile file or a run directory; several are\n"
    "merged. Series are downsampled (at most 2000 points each), so the file\n"
    "stays small whatever the profile's size; the full timeline is\n"
    "mlprof trace.\n"
    "\n"
    "With --compare (or --labels), each RUN is a separate run of one\n"
    "workload: the dashboard shows the first, and a Compare view holds what\n"
    "mlprof compare says of them all (per zone mean of each run, speedups\n"
    "against the slowest and the first, the fastest run; a grouped bar chart\n"
    "of the means; per zone, each run's distribution of durations; rankings\n"
    "and the recommendation).\n"
    "\n"
    "With --diff, the dashboard shows NEW and opens on a Diff view holding\n"
    "what mlprof diff says of BASE and NEW with its defaults (threshold 5%,\n"
    "alpha 0.01, at least 5 spans a side): per zone the verdict, ratio of\n"
    "medians, p-value and the uniform-shift note, with each side's\n"
    "distribution of durations. The page is written whatever the verdicts\n"
    "(mlprof diff is the regression gate).\n"
    "\n"
    "options:\n"
    "  -o, --output FILE  the HTML file to write (default report.html)\n"
    "      --title TEXT   the page's title (default: the first path)\n"
    "  -c, --compare      each PATH is a run to compare (default: merged)\n"
    "  -l, --labels LIST  names of the runs, separated by commas, in order\n"
    "                     (implies --compare; default: each path's base name)\n"
    "  -n, --top N        zones in the page at most, largest total first\n"
    "                     (default 2000; 0 for all)\n"
    "  -d, --diff         BASE NEW: the page of a regression test (above)\n"
    "  -h, --help         show this help\n"
    "\n"
    "The file is written under a temporary name and renamed when complete;\n"
    "interrupted by SIGINT or SIGTERM, it removes the unfinished file and "
    "dies\n"
    "of that signal (status 130 or 143 in a shell).\n"
    "exit status: 0 done, 1 the file could not be written, 2 bad usage or\n"
    "unreadable input (with --diff, also: no zone to compare).\n";

static int fail_usage(const char *fmt, const char *arg) {
  return mlprof__usage_error("html", fmt, arg);
}

typedef struct {
  const mlprof__analysis *d;
  const mlprof__html_opts *opts;
} page;

static int write_page(void *ctx, mlprof__out *o, char *err, size_t errlen) {
  const page *p = ctx;
  return mlprof__export_html_page(&p->d->r, &p->d->res, &p->d->f, &p->d->tree,
                                  p->opts, o);
}

/* 1 (with a message) when output is one of job's profiles: writing the page
 * would destroy it. */
static int is_profile_of(const mlprof__job *job, const char *output) {
  struct stat a, st;
  for (size_t i = 0; i < job->count; i++)
    if (stat(job->profiles[i].path, &a) == 0 && stat(output, &st) == 0 &&
        a.st_dev == st.st_dev && a.st_ino == st.st_ino) {
      fprintf(stderr, "mlprof html: %s is the profile %s; choose another -o\n",
              output, job->profiles[i].path);
      return 1;
    }
  return 0;
}

void mlprof__html_cmd_init(mlprof__html_cmd *c) {
  memset(c, 0, sizeof *c);
  c->output = "report.html";
  c->top = MLPROF__DASH_TOP;
}

void mlprof__html_cmd_free(mlprof__html_cmd *c) {
  mlprof__filter_free(&c->filter);
}

/* Reads the arguments into *c. Returns -1 to go on, else the exit status
 * (0 after --help). */
static int parse(int argc, char **argv, mlprof__html_cmd *c) {
  static const struct option options[] = {
      {"output", required_argument, NULL, 'o'},
      {"title", required_argument, NULL, 'T'},
      {"top", required_argument, NULL, 'n'},
      {"compare", no_argument, NULL, 'c'},
      {"labels", required_argument, NULL, 'l'},
      {"diff", no_argument, NULL, 'd'},
      {"help", no_argument, NULL, 'h'},
      MLPROF__FILTER_OPTIONS,
      {NULL, 0, NULL, 0}};
  int rc = -1;
  opterr = 0;
  optind = 0; /* 0, not 1: GNU getopt then also resets its ordering mode */
  int ch;
  while (rc < 0 &&
         (ch = getopt_long(argc, argv, ":o:n:cl:dh", options, NULL)) != -1) {
    switch (ch) {
      case 'o':
        if (!optarg[0]) rc = fail_usage("%s", "-o wants a file name");
        c->output = optarg;
        break;
      case 'T':
        c->title = optarg;
        break;
      case 'n':
        if (mlprof__parse_count(optarg, &c->top))
          rc = fail_usage("--top wants a whole number (0 for all), not '%s'",
                          optarg);
        break;
      case 'c':
        c->compare = 1;
        break;
      case 'l':
        c->labels = optarg;
        c->compare = 1;
        break;
      case 'd':
        c->diff = 1;
        break;
      case 'h':
        fputs(usage, stdout);
        fputs(mlprof__filter_help, stdout);
        rc = 0;
        break;
      default:
        rc = mlprof__cli_other_option("html", ch, argv, &c->filter);
    }
  }
  if (rc < 0 && optind >= argc) rc = fail_usage("%s", "no profile given");
  if (rc < 0 && c->diff && c->compare)
    rc = fail_usage("%s", "--diff takes no --compare or --labels");
  if (rc < 0 && c->diff && argc - optind != 2)
    rc = fail_usage("%s", "--diff wants two runs: BASE NEW");
  c->paths = (const char *const *)argv + optind;
  c->npaths = (size_t)(argc - optind);
  return rc;
}

int mlprof__cmd_html(int argc, char **argv) {
  mlprof__html_cmd c;
  mlprof__html_cmd_init(&c);
  int rc = parse(argc, argv, &c);
  if (rc < 0) rc = mlprof__html_cmd_run(&c);
  mlprof__html_cmd_free(&c);
  return rc;
}

/* The diff of --diff: BASE and NEW read keeping their durations, compared
 * with mlprof diff's defaults. Returns 0 or the exit status (then nothing
 * is left to free). */
static int diff_load(const char *const *paths, const mlprof__filter *filter,
                     mlprof__report *base, mlprof__report *next,
                     mlprof__diff_options *opt, mlprof__diff *d) {
  char err[512];
  *base = (mlprof__report){0};
  *next = (mlprof__report){0};
  mlprof__run_machine m[2];
  int rc = mlprof__run_load(paths[0], 1, filter, base, &m[0], err, sizeof err);
  if (!rc)
    rc = mlprof__run_load(paths[1], 1, filter, next, &m[1], err, sizeof err);
  for (int i = 0; i < 2 && !rc; i++)
    opt->contention[i] = m[i].wait, opt->steal[i] = m[i].steal,
    opt->demand[i] = m[i].demand;
  if (!rc && mlprof__diff_build(base, next, opt, d)) {
    snprintf(err, sizeof err, "out of memory");
    rc = MLPROF_ENOMEM;
  }
  if (!rc && d->nzones == 0) {
    mlprof__diff_free(d);
    snprintf(err, sizeof err, "neither run has any zone to compare");
    rc = MLPROF_EINVAL;
  }
  if (!rc) return 0;
  fprintf(stderr, "mlprof html: %s\n", err);
  mlprof__report_free(base);
  mlprof__report_free(next);
  return rc == MLPROF_ENOMEM ? 1 : 2;
}

static void diff_free(mlprof__diff *d, mlprof__report *base,
                      mlprof__report *next) {
  mlprof__diff_free(d);
  mlprof__report_free(base);
  mlprof__report_free(next);
}

/* With --compare or --diff: each run but the dashboard's opens, and none
 * is the output. Returns 0 or 2 after a message. */
static int check_other_runs(const mlprof__html_cmd *c) {
  for (size_t i = 0; i < c->npaths; i++) {
    if (i == (size_t)c->diff) continue; /* the dashboard's, checked */
    mlprof__job other;
    if (mlprof__cli_job_open("html", &other, c->paths + i, 1)) return 2;
    int rc = is_profile_of(&other, c->output) ? 2 : 0;
    mlprof__job_close(&other);
    if (rc) return rc;
  }
  return 0;
}

/* The warnings of a run's report, after its path when not NULL. */
static void warn(const mlprof__report *r, const char *path) {
  for (size_t w = 0; w < r->nwarnings; w++)
    fprintf(stderr, "mlprof html: warning: %s%s%s\n", path ? path : "",
            path ? ": " : "", r->warnings[w]);
}

int mlprof__html_cmd_run(const mlprof__html_cmd *c) {
  const char *const *paths = c->paths, *output = c->output;
  size_t npaths = c->npaths;
  int compare = c->compare, diff = c->diff;
  const mlprof__filter *filter = &c->filter;
  struct stat st;
  if (stat(output, &st) == 0 && S_ISDIR(st.st_mode)) {
    fprintf(stderr, "mlprof html: %s is a directory; -o wants a file name\n",
            output);
    return 2;
  }
  char err[512];
  mlprof__job job;
  /* The dashboard is the first run's, or NEW's for a diff. */
  if (mlprof__cli_job_open("html", &job, paths + diff,
                           compare || diff ? 1 : npaths))
    return 2;
  if (is_profile_of(&job, output)) {
    mlprof__job_close(&job);
    return 2;
  }
  /* Compared runs: each read on its own (the dashboard is the first's). */
  mlprof__compare cmp = {0};
  int rc = 0;
  if (compare || diff) {
    rc = check_other_runs(c);
    if (!rc && compare &&
        (rc = mlprof__compare_load(&cmp, paths, npaths, NULL, 0, 1, c->labels,
                                   filter, err, sizeof err))) {
      fprintf(stderr, "mlprof html: %s\n", err);
      rc = rc == MLPROF_ENOMEM ? 1 : 2;
    }
    if (rc) {
      mlprof__job_close(&job);
      return rc;
    }
  }
  mlprof__diff_options dopt;
  mlprof__diff_options_init(&dopt);
  mlprof__report base, next;
  mlprof__diff dd = {0};
  if (diff && (rc = diff_load(paths, filter, &base, &next, &dopt, &dd))) {
    mlprof__job_close(&job);
    return rc;
  }
  mlprof__html_diff hd = {&dd, &dopt, paths[0], paths[1], &base, &next};
  mlprof__analysis_opts ao;
  mlprof__dash_opts(&ao, c->top);
  ao.filter = filter;
  mlprof__analysis d;
  rc = mlprof__analysis_run(&job, &ao, &d, err, sizeof err);
  mlprof__job_close(&job);
  if (rc) {
    fprintf(stderr, "mlprof html: %s\n", err);
    mlprof__compare_free(&cmp);
    if (diff) diff_free(&dd, &base, &next);
    return rc == MLPROF_EINVAL ? 2 : 1; /* a filter matching nothing: 2 */
  }
  warn(&d.r, NULL);
  if (diff) warn(&base, paths[0]);
  for (size_t i = 1; i < cmp.nruns; i++)
    warn(&cmp.runs[i].report, cmp.runs[i].path);
  /* One run has nothing to compare: no Compare view. */
  mlprof__html_opts opts = {.title = c->title ? c->title : paths[diff],
                            .compare = cmp.nruns >= 2 ? &cmp : NULL,
                            .diff = diff ? &hd : NULL,
                            .lod = &d.lod};
  page pg = {&d, &opts};
  rc = mlprof__cli_write_file(output, write_page, &pg, err, sizeof err);
  mlprof__analysis_free(&d);
  mlprof__compare_free(&cmp);
  if (diff) diff_free(&dd, &base, &next);
  if (rc) {
    fprintf(stderr, "mlprof html: %s\n", err);
    return 1;
  }
  if (stat(output, &st) == 0)
    fprintf(stderr, "mlprof html: wrote %s (%.1f kB)\n", output,
            (double)st.st_size / 1e3);
  return 0;
}
