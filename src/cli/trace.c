/* mlprof trace: a Chrome trace event file (Perfetto, chrome://tracing). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <mlprof.h>
#include <signal.h>
#include <stdatomic.h>
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

/* ---- an interrupted export leaves no temporary file ----------------------
 *
 * mlprof__write_atomically writes to FILE.tmp.XXXXXX and renames it when
 * done. SIGINT or SIGTERM would end the process mid-write and leave that
 * temporary behind, so while it exists its path sits in a static buffer and
 * the handler unlinks it (unlink, signal and raise are async-signal-safe),
 * then dies of the same signal with its default action: the parent sees a
 * death by SIGINT (a shell's 130) or SIGTERM (143), as without the handler.
 * The temporary's name comes from its descriptor (/proc/self/fd), checked
 * to be the same file, when the export starts; until then the two signals
 * are blocked, so one that comes while mkstemp makes the file waits until
 * its path is known. */
static char tmp_path[PATH_MAX];
static volatile sig_atomic_t tmp_armed;

static void on_fatal_signal(int sig) {
  int saved = errno;
  if (tmp_armed) unlink(tmp_path);
  signal(sig, SIG_DFL);
  raise(sig); /* pending until this handler returns, which it then never does */
  errno = saved;
}

/* Notes the path of the file open on fd for the handler. */
static void arm_tmp(int fd) {
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0 || (size_t)n >= sizeof path - 1) return;
  path[n] = '\0';
  struct stat a, b;
  if (fstat(fd, &a) != 0 || stat(path, &b) != 0 || a.st_dev != b.st_dev ||
      a.st_ino != b.st_ino)
    return;
  tmp_armed = 0;
  atomic_signal_fence(memory_order_seq_cst);
  memcpy(tmp_path, path, (size_t)n + 1);
  atomic_signal_fence(memory_order_seq_cst);
  tmp_armed = 1;
}

typedef struct {
  int sig;
  struct sigaction old;
  int installed;
} saved_handler;

/* Installs the handler for SIGINT and SIGTERM, except where they are
 * ignored (a command started in the background keeps ignoring SIGINT). */
static void handlers_install(saved_handler *h, size_t n) {
  for (size_t i = 0; i < n; i++) {
    h[i].installed = 0;
    if (sigaction(h[i].sig, NULL, &h[i].old) != 0 ||
        h[i].old.sa_handler == SIG_IGN)
      continue;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t k = 0; k < n; k++) sigaddset(&sa.sa_mask, h[k].sig);
    h[i].installed = sigaction(h[i].sig, &sa, NULL) == 0;
  }
}

static void handlers_restore(saved_handler *h, size_t n) {
  tmp_armed = 0;
  for (size_t i = 0; i < n; i++)
    if (h[i].installed) sigaction(h[i].sig, &h[i].old, NULL);
}

/* Exports job to fd; returns 0 or an mlprof error with a reason in err. */
typedef struct {
  const mlprof__job *job;
  mlprof__chrome_result *res;
  /* o is the temporary file: note its path for the handler, then unblock
   * the signals (set the mask to unblocked) */
  int arm;
  sigset_t unblocked;
} trace_job;

static int write_trace(void *ctx, mlprof__out *o, char *err, size_t errlen) {
  const trace_job *t = ctx;
  if (t->arm) {
    arm_tmp(o->fd);
    sigprocmask(SIG_SETMASK, &t->unblocked, NULL);
  }
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
  if (mlprof__job_open(&job, (const char *const *)argv + optind,
                       (size_t)(argc - optind), err, sizeof err)) {
    fprintf(stderr, "mlprof trace: %s\n", err);
    return 2;
  }
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
    saved_handler h[] = {{.sig = SIGINT}, {.sig = SIGTERM}};
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigprocmask(SIG_BLOCK, &block, &tj.unblocked);
    tj.arm = 1;
    handlers_install(h, sizeof h / sizeof h[0]);
    rc = mlprof__write_atomically(output, write_trace, &tj, err, sizeof err);
    /* A signal still blocked (no export started) comes now, with no file. */
    sigprocmask(SIG_SETMASK, &tj.unblocked, NULL);
    handlers_restore(h, sizeof h / sizeof h[0]);
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
