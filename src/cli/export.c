/* mlprof export: a run's tables as Parquet files, for DuckDB, Spark, pandas;
 * or its stack samples as a pprof profile. */
#include <errno.h>
#include <getopt.h>
#include <mlprof.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../analyze/analysis.h"
#include "../export/export.h"
#include "../export/parquet.h"
#include "cli.h"

static const char usage[] =
    "usage: mlprof export [options] PATH... -o DIR\n"
    "       mlprof export --format pprof [options] PATH... -o FILE\n"
    "\n"
    "Writes the run as tables in Parquet files (docs/parquet.md), one file\n"
    "per table, for DuckDB, Spark, pandas or any Parquet reader:\n"
    "  DIR/spans/part-NNNNN.parquet  every span, one file per profile\n"
    "  DIR/zones.parquet             the report's statistics per zone\n"
    "  DIR/steps.parquet             each process's steps\n"
    "  DIR/samples.parquet           every sampled measure (resources)\n"
    "  DIR/collectives.parquet       each communication call, per rank\n"
    "  DIR/findings.parquet          what mlprof report finds, with evidence\n"
    "  DIR/memory_sites.parquet      the report's allocation sites\n"
    "  DIR/allocations.parquet       every allocation record\n"
    "  DIR/stack_samples.parquet     every stack sample, by stack id\n"
    "  DIR/stacks.parquet            each profile's stacks, leaf and folded\n"
    "The schema is versioned (\"mlprof.parquet/1\" in each file's key/value\n"
    "metadata). Spans are streamed row group by row group: memory stays\n"
    "bounded whatever the run's size. Pages are compressed with zstd.\n"
    "PATH is a profile file or a run directory (one profile per process);\n"
    "all profiles are placed on one timeline. The filter options below keep\n"
    "part of the run, as in mlprof report; one that matches nothing is an\n"
    "error (exit status 2).\n"
    "\n"
    "With --format pprof, writes the run's stack samples (mlprof run\n"
    "--stacks) to FILE as a pprof profile (profile.proto, uncompressed),\n"
    "for pprof, go tool pprof, speedscope or any reader of the format: one\n"
    "sample per stack, zone, thread and step, with the values samples/count,\n"
    "wall/nanoseconds and cpu/nanoseconds (the samples taken on a CPU, the\n"
    "default) and the labels zone, step, thread, thread_name, pid, rank and\n"
    "process (docs/stacks.md, \"pprof\").\n"
    "\n"
    "options:\n"
    "  -f, --format FORMAT    parquet (the default) or pprof\n"
    "  -o, --output DIR       the directory to write (made, with its parents,\n"
    "                         when absent). Each file appears only once it\n"
    "                         is complete. With --format pprof, the file.\n"
    "      --row-group-rows N rows per row group at most (default 65536;\n"
    "                         a row group also ends at 64 MB of values)\n"
    "  -h, --help             show this help\n"
    "\n"
    "Damaged or cut-short profiles are exported as far as they are intact,\n"
    "with a warning saying what was skipped. Interrupted by SIGINT or\n"
    "SIGTERM, it removes the unfinished files and dies of that signal.\n"
    "exit status: 0 done, 1 the tables could not be written, 2 bad usage,\n"
    "a filter matching nothing, "
    "unreadable input or (pprof) no stack samples.\n";

static int fail_usage(const char *fmt, const char *arg) {
  return mlprof__usage_error("export", fmt, arg);
}

/* Says what each read skipped. */
static void warn_reads(const mlprof__job *job,
                       const mlprof__parquet_result *res) {
  for (size_t i = 0; i < job->count; i++) {
    const char *path = job->profiles[i].path;
    const mlprof__read_report *rep = &res->reads[i];
    if (res->read_errors[i][0])
      fprintf(stderr,
              "mlprof export: warning: %s: read stopped early: %s; exported "
              "what came before\n",
              path, res->read_errors[i]);
    if (rep->damaged_chunks || rep->skipped_bytes || rep->truncated_bytes ||
        rep->problem[0])
      fprintf(stderr,
              "mlprof export: warning: %s: damage found: %llu damaged chunks "
              "skipped, %llu bytes skipped, %llu bytes truncated%s%s; "
              "exported what is readable\n",
              path, (unsigned long long)rep->damaged_chunks,
              (unsigned long long)rep->skipped_bytes,
              (unsigned long long)rep->truncated_bytes,
              rep->problem[0] ? ": " : "", rep->problem);
  }
}

/* What mlprof__export_cmd_run hands write_tables. */
typedef struct {
  const mlprof__export_cmd *c;
  const mlprof__job *job;
  const mlprof__analysis *a;
  mlprof__parquet_result *res;
  char *err;
  size_t errlen;
} tables;

static int write_tables(void *ctx) {
  tables *t = ctx;
  mlprof__parquet_opts po = t->c->parquet;
  po.filter = &t->c->filter;
  return mlprof__export_parquet(t->job, &t->a->r, &t->a->f, t->c->output, &po,
                                t->res, t->err, t->errlen);
}

/* mkdir -p path: 0, or -1 with errno. */
static int make_dirs(const char *path) {
  char p[4096];
  size_t n = strlen(path);
  if (n >= sizeof p) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(p, path, n + 1);
  for (size_t i = 1; i <= n; i++)
    if (p[i] == '/' || p[i] == '\0') {
      char c = p[i];
      p[i] = '\0';
      if (mkdir(p, 0755) && errno != EEXIST) return -1;
      p[i] = c;
    }
  return 0;
}

static int write_pprof(void *ctx, mlprof__out *o, char *err, size_t errlen) {
  const mlprof__analysis *a = ctx;
  int rc = mlprof__export_pprof(&a->r, &a->flame, o);
  if (rc) snprintf(err, errlen, "%s", mlprof_strerror(rc));
  return rc;
}

/* --format pprof. */
static int pprof_run(const mlprof__export_cmd *c) {
  struct stat st, pst;
  if (stat(c->output, &st) == 0 && S_ISDIR(st.st_mode)) {
    fprintf(stderr, "mlprof export: %s is a directory; -o wants a file\n",
            c->output);
    return 2;
  }
  mlprof__job job;
  if (mlprof__cli_job_open("export", &job, c->paths, c->npaths)) return 2;
  for (size_t i = 0; i < job.count; i++)
    if (stat(c->output, &st) == 0 && stat(job.profiles[i].path, &pst) == 0 &&
        st.st_dev == pst.st_dev && st.st_ino == pst.st_ino) {
      fprintf(stderr,
              "mlprof export: %s is the profile %s; choose another -o\n",
              c->output, job.profiles[i].path);
      mlprof__job_close(&job);
      return 2;
    }
  char err[512];
  mlprof__analysis_opts ao;
  mlprof__analysis_opts_init(&ao);
  ao.want = MLPROF__ANALYSIS_STATS | MLPROF__ANALYSIS_FLAME;
  ao.flame_uncapped = 1;
  ao.filter = &c->filter;
  mlprof__analysis a;
  int rc = mlprof__analysis_run(&job, &ao, &a, err, sizeof err);
  mlprof__job_close(&job);
  if (rc) {
    fprintf(stderr, "mlprof export: %s\n", err);
    return rc == MLPROF_EINVAL ? 2 : 1; /* a filter matching nothing: 2 */
  }
  if (!a.flame.samples) {
    fprintf(stderr,
            "mlprof export: no stack samples in the run (record them with "
            "mlprof run --stacks HZ)\n");
    mlprof__analysis_free(&a);
    return 2;
  }
  rc = mlprof__cli_write_file(c->output, write_pprof, &a, err, sizeof err);
  if (rc)
    fprintf(stderr, "mlprof export: %s\n", err);
  else
    fprintf(stderr,
            "mlprof export: %llu stack samples (%zu stacks by zone, thread "
            "and step) to %s\n",
            (unsigned long long)a.flame.samples, a.flame.nrows, c->output);
  mlprof__analysis_free(&a);
  return rc ? 1 : 0;
}

int mlprof__export_cmd_run(const mlprof__export_cmd *c) {
  if (c->pprof) return pprof_run(c);
  struct stat st;
  if (stat(c->output, &st) == 0 && !S_ISDIR(st.st_mode)) {
    fprintf(stderr, "mlprof export: %s is not a directory; -o wants one\n",
            c->output);
    return 2;
  }
  mlprof__job job;
  if (mlprof__cli_job_open("export", &job, c->paths, c->npaths)) return 2;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  char err[512];
  mlprof__analysis_opts ao;
  mlprof__analysis_opts_init(&ao);
  ao.want = MLPROF__ANALYSIS_FINDINGS;
  ao.filter = &c->filter;
  mlprof__analysis a;
  int rc = mlprof__analysis_run(&job, &ao, &a, err, sizeof err);
  if (rc) {
    fprintf(stderr, "mlprof export: %s\n", err);
    mlprof__job_close(&job);
    return rc == MLPROF_EINVAL ? 2 : 1; /* a filter matching nothing: 2 */
  }
  if (make_dirs(c->output)) {
    fprintf(stderr, "mlprof export: cannot create %s: %s\n", c->output,
            strerror(errno));
    mlprof__analysis_free(&a);
    mlprof__job_close(&job);
    return 1;
  }
  mlprof__parquet_result res = {
      .reads = calloc(job.count, sizeof *res.reads),
      .read_errors = calloc(job.count, sizeof *res.read_errors)};
  if (!res.reads || !res.read_errors) {
    snprintf(err, sizeof err, "out of memory");
    rc = MLPROF_ENOMEM;
  } else {
    /* SIGINT or SIGTERM meanwhile: no temporary table is left behind. */
    tables t = {c, &job, &a, &res, err, sizeof err};
    rc = mlprof__cli_guarded(write_tables, &t, mlprof__parquet_unlink_temps);
  }
  mlprof__analysis_free(&a);
  if (rc) {
    fprintf(stderr, "mlprof export: %s\n", err);
  } else {
    warn_reads(&job, &res);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) +
                  (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    fprintf(
        stderr,
        "mlprof export: %llu spans (%llu files), %llu zones, %llu steps, "
        "%llu samples, %llu collectives, %llu findings, %llu allocations, "
        "%llu memory sites, %llu stack samples, %llu stacks from %zu "
        "profile%s to %s (%.3g MB) in %.2f s\n",
        (unsigned long long)res.spans, (unsigned long long)res.span_files,
        (unsigned long long)res.zones, (unsigned long long)res.steps,
        (unsigned long long)res.samples, (unsigned long long)res.collectives,
        (unsigned long long)res.findings, (unsigned long long)res.allocations,
        (unsigned long long)res.memory_sites,
        (unsigned long long)res.stack_samples, (unsigned long long)res.stacks,
        job.count, job.count == 1 ? "" : "s", c->output,
        (double)res.bytes / 1e6, secs);
  }
  free(res.reads);
  free(res.read_errors);
  mlprof__job_close(&job);
  return rc ? 1 : 0;
}

enum { OPT_ROW_GROUP_ROWS = 1000 };

void mlprof__export_cmd_init(mlprof__export_cmd *c) { memset(c, 0, sizeof *c); }

void mlprof__export_cmd_free(mlprof__export_cmd *c) {
  mlprof__filter_free(&c->filter);
}

/* Reads the arguments into *c. Returns -1 to go on, else the exit status
 * (0 after --help). */
static int parse(int argc, char **argv, mlprof__export_cmd *c) {
  static const struct option options[] = {
      {"format", required_argument, NULL, 'f'},
      {"output", required_argument, NULL, 'o'},
      {"row-group-rows", required_argument, NULL, OPT_ROW_GROUP_ROWS},
      {"help", no_argument, NULL, 'h'},
      MLPROF__FILTER_OPTIONS,
      {NULL, 0, NULL, 0}};
  int rc = -1;
  opterr = 0;
  optind = 0; /* 0, not 1: GNU getopt then also resets its ordering mode */
  int ch;
  while (rc < 0 &&
         (ch = getopt_long(argc, argv, ":f:o:h", options, NULL)) != -1) {
    switch (ch) {
      case 'f':
        c->pprof = strcmp(optarg, "pprof") == 0;
        if (!c->pprof && strcmp(optarg, "parquet") != 0)
          rc = fail_usage("unknown format '%s': use parquet or pprof", optarg);
        break;
      case 'o':
        if (!optarg[0]) rc = fail_usage("%s", "-o wants a path");
        c->output = optarg;
        break;
      case OPT_ROW_GROUP_ROWS: {
        uint64_t n;
        if (mlprof__parse_count(optarg, &n) || n == 0 || n > (1u << 30))
          rc = fail_usage(
              "--row-group-rows wants a whole number from 1 to 2^30, not '%s'",
              optarg);
        else
          c->parquet.pq.row_group_rows = (size_t)n;
        break;
      }
      case 'h':
        fputs(usage, stdout);
        fputs(mlprof__filter_help, stdout);
        rc = 0;
        break;
      default:
        rc = mlprof__cli_other_option("export", ch, argv, &c->filter);
    }
  }
  if (rc < 0 && c->pprof && c->parquet.pq.row_group_rows)
    rc = fail_usage("%s", "--row-group-rows applies to --format parquet only");
  if (rc < 0 && optind >= argc) rc = fail_usage("%s", "no profile given");
  if (rc < 0 && !c->output)
    rc = fail_usage("%s", c->pprof ? "no output file given (-o FILE)"
                                   : "no output directory given (-o DIR)");
  c->paths = (const char *const *)argv + optind;
  c->npaths = (size_t)(argc - optind);
  return rc;
}

int mlprof__cmd_export(int argc, char **argv) {
  mlprof__export_cmd c;
  mlprof__export_cmd_init(&c);
  int rc = parse(argc, argv, &c);
  if (rc < 0) rc = mlprof__export_cmd_run(&c);
  mlprof__export_cmd_free(&c);
  return rc;
}
