/* mlprof trace: a Chrome trace event file (Perfetto, chrome://tracing). */
#include <errno.h>
#include <getopt.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../export/export.h"
#include "../model/job.h"
#include "cli.h"

static const char usage[] =
    "usage: mlprof trace [options] PATH...\n"
    "\n"
    "Writes a Chrome trace event file (JSON) that opens in Perfetto\n"
    "(ui.perfetto.dev) and chrome://tracing: one process per profile, one "
    "track\n"
    "per thread, zones as slices with their metadata, counters as counter\n"
    "tracks, step marks as instant events, sampled measures as counter tracks\n"
    "(under their process, a \"system\" process and one \"GPU N\" process per\n"
    "GPU), zones still open at the end as\n"
    "slices to the end of their profile with args {\"open\": true}.\n"
    "PATH is a profile file or a run directory (one profile per process);\n"
    "all profiles are placed on one timeline.\n"
    "\n"
    "options:\n"
    "  -o, --output FILE  where to write (default trace.json); - for standard\n"
    "                     output. The file appears only once it is complete.\n"
    "  -h, --help         show this help\n"
    "\n"
    "exit status: 0 done, 1 the trace could not be written, 2 bad usage or\n"
    "unreadable input. Interrupted by SIGINT or SIGTERM, it removes the\n"
    "unfinished file and dies of that signal (status 130 or 143 in a shell).\n";

static int fail_usage(const char *fmt, const char *arg) {
  return mlprof__usage_error("trace", fmt, arg);
}

/* Whether path names the same file as one of the job's profiles: writing
 * there would replace the profile with its own trace. */
static const char *overwrites_input(const char *path, const mlprof__job *job) {
  struct stat out, in;
  if (stat(path, &out) != 0) return NULL;
  for (size_t i = 0; i < job->count; i++)
    if (stat(job->profiles[i].path, &in) == 0 && in.st_dev == out.st_dev &&
        in.st_ino == out.st_ino)
      return job->profiles[i].path;
  return NULL;
}

/* Says what each read found that the trace cannot show. */
static void warn_reads(const mlprof__job *job,
                       const mlprof__chrome_result *res) {
  for (size_t i = 0; i < job->count; i++) {
    const char *path = job->profiles[i].path;
    const mlprof__read_report *rep = &res->reads[i];
    if (res->read_errors[i][0])
      fprintf(stderr, "mlprof trace: warning: %s: read stopped early: %s\n",
              path, res->read_errors[i]);
    if (rep->damaged_chunks || rep->skipped_bytes || rep->truncated_bytes ||
        rep->problem[0])
      fprintf(stderr,
              "mlprof trace: warning: %s: damage found: %llu damaged chunks, "
              "%llu bytes skipped, %llu bytes truncated%s%s\n",
              path, (unsigned long long)rep->damaged_chunks,
              (unsigned long long)rep->skipped_bytes,
              (unsigned long long)rep->truncated_bytes,
              rep->problem[0] ? ": " : "", rep->problem);
    if (!rep->clean_end && !res->read_errors[i][0])
      fprintf(stderr,
              "mlprof trace: warning: %s: profile ended without a closing "
              "chunk: process was killed or is still running; up to one "
              "flush interval missing\n",
              path);
  }
}

/* Exports job to o; returns 0 or an mlprof error with a reason in err. */
typedef struct {
  const mlprof__job *job;
  mlprof__chrome_result *res;
} trace_job;

static int write_trace(void *ctx, mlprof__out *o, char *err, size_t errlen) {
  const trace_job *t = ctx;
  return mlprof__export_chrome(t->job, o, t->res, err, errlen);
}

/* To standard output (-o -): there is no file to replace. */
static int export_stdout(trace_job *t, char *err, size_t errlen) {
  mlprof__out o;
  if (mlprof__out_open(&o, STDOUT_FILENO)) {
    snprintf(err, errlen, "out of memory");
    return MLPROF_ENOMEM;
  }
  int rc = write_trace(t, &o, err, errlen);
  int wrc = mlprof__out_flush(&o);
  if (!rc && wrc) rc = wrc;
  if (rc == MLPROF_EIO && o.err == MLPROF_EIO)
    snprintf(err, errlen, "cannot write the trace: %s", strerror(o.sys_errno));
  mlprof__out_close(&o);
  return rc;
}

static double seconds_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) +
         (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

int mlprof__cmd_trace(int argc, char **argv) {
  static const struct option options[] = {
      {"output", required_argument, NULL, 'o'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  const char *output = "trace.json";
  opterr = 0;
  optind = 0; /* 0, not 1: GNU getopt then also resets its ordering mode */
  int ch;
  while ((ch = getopt_long(argc, argv, ":o:h", options, NULL)) != -1) {
    switch (ch) {
      case 'o':
        if (!optarg[0]) return fail_usage("%s", "-o wants a file name");
        output = optarg;
        break;
      case 'h':
        fputs(usage, stdout);
        return 0;
      default:
        return mlprof__option_error("trace", ch, argv, optind, optopt);
    }
  }
  if (optind >= argc) return fail_usage("%s", "no profile given");

  char err[512];
  mlprof__job job;
  if (mlprof__cli_job_open("trace", &job, (const char *const *)argv + optind,
                           (size_t)(argc - optind)))
    return 2;
  int to_stdout = strcmp(output, "-") == 0;
  struct stat st;
  if (!to_stdout && stat(output, &st) == 0 && S_ISDIR(st.st_mode)) {
    fprintf(stderr, "mlprof trace: %s is a directory; -o wants a file name\n",
            output);
    mlprof__job_close(&job);
    return 2;
  }
  const char *input = to_stdout ? NULL : overwrites_input(output, &job);
  if (input) {
    fprintf(stderr, "mlprof trace: %s is the profile %s; choose another -o\n",
            output, input);
    mlprof__job_close(&job);
    return 2;
  }
  mlprof__chrome_result res = {
      .reads = calloc(job.count, sizeof *res.reads),
      .read_errors = calloc(job.count, sizeof *res.read_errors)};
  trace_job tj = {.job = &job, .res = &res};
  int rc;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (!res.reads || !res.read_errors) {
    snprintf(err, sizeof err, "out of memory");
    rc = MLPROF_ENOMEM;
  } else if (to_stdout) {
    rc = export_stdout(&tj, err, sizeof err);
  } else {
    rc = mlprof__cli_write_file(output, write_trace, &tj, err, sizeof err);
  }
  if (rc) {
    fprintf(stderr, "mlprof trace: %s\n", err);
  } else {
    warn_reads(&job, &res);
    double secs = seconds_since(&t0);
    fprintf(stderr,
            "mlprof trace: %llu events from %zu profile%s to %s in %.2f s\n",
            (unsigned long long)res.events, job.count,
            job.count == 1 ? "" : "s", to_stdout ? "standard output" : output,
            secs);
  }
  free(res.reads);
  free(res.read_errors);
  mlprof__job_close(&job);
  return rc ? 1 : 0;
}
