/* mlprof trace: a Chrome trace event file (Perfetto, chrome://tracing), or
 * Perfetto's native protobuf trace. */
#include <errno.h>
#include <fcntl.h>
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
    "  -f, --format F     json (default: Chrome trace events) or perfetto\n"
    "                     (Perfetto's protobuf trace: the same content, 2.4\n"
    "                     times smaller, for runs too large for JSON)\n"
    "  -o, --output FILE  where to write (default trace.json, or\n"
    "                     trace.pftrace for perfetto); - for standard\n"
    "                     output. The file appears only once it is complete.\n"
    "      --max-mb MB    keep the longest spans that fit in MB megabytes\n"
    "                     (10^6 bytes): the shorter ones are left out\n"
    "                     (counters, samples and step marks are all kept)\n"
    "      --warn-mb MB   warn when the trace is larger (default 256 for\n"
    "                     json: chrome://tracing fails above ~256 MB of JSON,\n"
    "                     Perfetto's UI above ~1 GB; 600 for perfetto: the\n"
    "                     UI has ~2 GB of memory, 2-4x the protobuf's size)\n"
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
  const mlprof__filter *filter;
  mlprof__chrome_result *res;
  mlprof__trace_exporter export;
} trace_job;

static int write_trace(void *ctx, mlprof__out *o, char *err, size_t errlen) {
  const trace_job *t = ctx;
  return t->export(t->job, t->filter, o, t->res, err, errlen);
}

/* For --max-mb: the least span duration that keeps the trace within max
 * bytes, found by writing it once to /dev/null with the bytes of its spans
 * by duration; 0 when everything fits, UINT64_MAX when no span does. *fits
 * is 0 when what is not a span alone is larger than max. */
static int min_duration(const trace_job *t, uint64_t max, uint64_t *min_ns,
                        int *fits, char *err, size_t errlen) {
  uint64_t bytes[MLPROF__CHROME_BUCKETS] = {0};
  mlprof__chrome_result res = {.span_bytes = bytes};
  mlprof__out o;
  int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || mlprof__out_open(&o, fd)) {
    if (fd >= 0) close(fd);
    snprintf(err, errlen, "cannot open /dev/null to size the trace");
    return MLPROF_EIO;
  }
  int rc = t->export(t->job, t->filter, &o, &res, err, errlen);
  mlprof__out_flush(&o);
  mlprof__out_close(&o);
  close(fd);
  if (rc) return rc;
  uint64_t spans = 0;
  for (int b = 0; b < MLPROF__CHROME_BUCKETS; b++) spans += bytes[b];
  uint64_t other = res.bytes - spans;
  *min_ns = 0;
  *fits = other <= max;
  if (res.bytes <= max) return 0;
  /* The longest buckets first, while they fit. */
  uint64_t total = other;
  int b = MLPROF__CHROME_BUCKETS;
  while (b > 0 && total + bytes[b - 1] <= max) total += bytes[--b];
  *min_ns =
      b < MLPROF__CHROME_BUCKETS ? mlprof__chrome_bucket_min(b) : UINT64_MAX;
  return 0;
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

/* What --max-mb left out, and a trace too large for a viewer. */
static void report_size(const mlprof__chrome_result *res, uint64_t min_ns,
                        uint64_t max_bytes, int fits, uint64_t warn_bytes,
                        int perfetto) {
  char d[32];
  if (max_bytes && (!fits || min_ns == UINT64_MAX))
    fprintf(stderr,
            "mlprof trace: warning: no span fits in --max-mb %.3g beside the "
            "counters, samples and marks (%.3g MB)\n",
            (double)max_bytes / 1e6, (double)res->bytes / 1e6);
  else if (min_ns) {
    mlprof__fmt_duration(d, sizeof d, (double)min_ns);
    fprintf(stderr,
            "mlprof trace: kept the spans of %s or longer to fit --max-mb "
            "%.3g (%.3g MB)\n",
            d, (double)max_bytes / 1e6, (double)res->bytes / 1e6);
  }
  if (res->bytes > warn_bytes && perfetto)
    fprintf(stderr,
            "mlprof trace: warning: the trace is %.3g MB: Perfetto's UI has "
            "~2 GB of memory, 2 to 4 times the protobuf's size; open it "
            "through trace_processor --httpd, or keep less with --window "
            "T0:T1, --steps A:B or --max-mb MB\n",
            (double)res->bytes / 1e6);
  else if (res->bytes > warn_bytes)
    fprintf(stderr,
            "mlprof trace: warning: the trace is %.3g MB: chrome://tracing "
            "fails above ~256 MB of JSON and Perfetto's UI above ~1 GB; "
            "--format perfetto is 2.4x smaller; or keep less with --window "
            "T0:T1, --steps A:B or --max-mb MB\n",
            (double)res->bytes / 1e6);
}

static double seconds_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) +
         (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* A size in MB (10^6 bytes), more than 0. */
static int parse_mb(const char *s, uint64_t *bytes) {
  char *end = NULL;
  double v = strtod(s, &end);
  if (end == s || *end || !(v > 0) || v > 1e12) return -1;
  *bytes = (uint64_t)(v * 1e6);
  return 0;
}

enum { OPT_MAX_MB = 1000, OPT_WARN_MB };

/* The warning's default size: a viewer's limit for each format. */
#define WARN_JSON 256000000
#define WARN_PERFETTO 600000000

void mlprof__trace_cmd_init(mlprof__trace_cmd *c) { memset(c, 0, sizeof *c); }

void mlprof__trace_cmd_free(mlprof__trace_cmd *c) {
  mlprof__filter_free(&c->filter);
}

/* Reads the arguments into *c. Returns -1 to go on, else the exit status
 * (0 after --help). */
static int parse(int argc, char **argv, mlprof__trace_cmd *c) {
  static const struct option options[] = {
      {"output", required_argument, NULL, 'o'},
      {"format", required_argument, NULL, 'f'},
      {"max-mb", required_argument, NULL, OPT_MAX_MB},
      {"warn-mb", required_argument, NULL, OPT_WARN_MB},
      {"help", no_argument, NULL, 'h'},
      MLPROF__FILTER_OPTIONS,
      {NULL, 0, NULL, 0}};
  int rc = -1;
  opterr = 0;
  optind = 0; /* 0, not 1: GNU getopt then also resets its ordering mode */
  int ch;
  while (rc < 0 &&
         (ch = getopt_long(argc, argv, ":o:f:h", options, NULL)) != -1) {
    switch (ch) {
      case 'f':
        c->perfetto = strcmp(optarg, "perfetto") == 0;
        if (!c->perfetto && strcmp(optarg, "json") != 0)
          rc = fail_usage("--format wants json or perfetto, not '%s'", optarg);
        break;
      case 'o':
        if (!optarg[0]) rc = fail_usage("%s", "-o wants a file name");
        c->output = optarg;
        break;
      case OPT_MAX_MB:
      case OPT_WARN_MB:
        if (parse_mb(optarg, ch == OPT_MAX_MB ? &c->max_bytes : &c->warn_bytes))
          rc =
              fail_usage(ch == OPT_MAX_MB
                             ? "--max-mb wants a size in MB above 0, not '%s'"
                             : "--warn-mb wants a size in MB above 0, not '%s'",
                         optarg);
        break;
      case 'h':
        fputs(usage, stdout);
        fputs(mlprof__filter_help, stdout);
        rc = 0;
        break;
      default:
        rc = mlprof__cli_other_option("trace", ch, argv, &c->filter);
    }
  }
  if (rc < 0 && optind >= argc) rc = fail_usage("%s", "no profile given");
  c->paths = (const char *const *)argv + optind;
  c->npaths = (size_t)(argc - optind);
  return rc;
}

int mlprof__cmd_trace(int argc, char **argv) {
  mlprof__trace_cmd c;
  mlprof__trace_cmd_init(&c);
  int rc = parse(argc, argv, &c);
  if (rc < 0) rc = mlprof__trace_cmd_run(&c);
  mlprof__trace_cmd_free(&c);
  return rc;
}

int mlprof__trace_cmd_run(const mlprof__trace_cmd *c) {
  const char *output = c->output     ? c->output
                       : c->perfetto ? "trace.pftrace"
                                     : "trace.json";
  uint64_t max_bytes = c->max_bytes;
  uint64_t warn_bytes = c->warn_bytes ? c->warn_bytes
                        : c->perfetto ? WARN_PERFETTO
                                      : WARN_JSON;
  /* c's filter, with the least duration that --max-mb keeps (the copy
   * shares what c's owns). */
  mlprof__filter keep = c->filter, *filter = &keep;
  char err[512];
  mlprof__job job;
  if (mlprof__cli_job_open("trace", &job, c->paths, c->npaths)) return 2;
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
  trace_job tj = {
      .job = &job,
      .filter = filter,
      .res = &res,
      .export = c->perfetto ? mlprof__export_perfetto : mlprof__export_chrome};
  int rc = 0, fits = 1;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (!res.reads || !res.read_errors) {
    snprintf(err, sizeof err, "out of memory");
    rc = MLPROF_ENOMEM;
  } else if (max_bytes) {
    rc = min_duration(&tj, max_bytes, &filter->min_ns, &fits, err, sizeof err);
  }
  if (!rc && to_stdout) {
    rc = export_stdout(&tj, err, sizeof err);
  } else if (!rc) {
    rc = mlprof__cli_write_file(output, write_trace, &tj, err, sizeof err);
  }
  if (rc) {
    fprintf(stderr, "mlprof trace: %s\n", err);
  } else {
    warn_reads(&job, &res);
    if (res.warning[0])
      fprintf(stderr, "mlprof trace: warning: %s\n", res.warning);
    report_size(&res, filter->min_ns, max_bytes, fits, warn_bytes, c->perfetto);
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
  return rc == MLPROF_EINVAL ? 2 : rc ? 1 : 0; /* a filter matching nothing */
}
