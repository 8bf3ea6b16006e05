/* What the subcommands share: argument handling, and writing a file that an
 * interruption never leaves half-written. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

int mlprof__usage_error(const char *cmd, const char *fmt, const char *arg) {
  fprintf(stderr, "mlprof %s: ", cmd);
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (see mlprof %s --help)\n", cmd);
  return 2;
}

int mlprof__option_error(const char *cmd, int ch, char **argv, int optind_,
                         int optopt_) {
  if (ch == ':')
    return mlprof__usage_error(cmd, "%s needs a value", argv[optind_ - 1]);
  char opt[3] = {'-', (char)optopt_, '\0'};
  return mlprof__usage_error(cmd, "unknown option '%s'",
                             optopt_ ? opt : argv[optind_ - 1]);
}

int mlprof__cli_job_open(const char *cmd, mlprof__job *job,
                         const char *const *paths, size_t npaths) {
  char err[512];
  if (mlprof__job_open(job, paths, npaths, err, sizeof err)) {
    fprintf(stderr, "mlprof %s: %s\n", cmd, err);
    return 2;
  }
  if (job->skipped)
    fprintf(stderr, "mlprof %s: warning: %s\n", cmd, job->skipped);
  return 0;
}

/* ---- an interrupted write leaves no temporary file -----------------------
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
/* What else an interrupted write leaves (mlprof__cli_guarded). */
static void (*volatile tmp_cleanup)(void);

static void on_fatal_signal(int sig) {
  int saved = errno;
  if (tmp_armed) unlink(tmp_path);
  if (tmp_cleanup) tmp_cleanup();
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
  tmp_cleanup = NULL;
  for (size_t i = 0; i < n; i++)
    if (h[i].installed) sigaction(h[i].sig, &h[i].old, NULL);
}

typedef struct {
  mlprof__write_fn fn;
  void *ctx;
  sigset_t unblocked; /* the mask to restore once the temporary is known */
} armed_write;

static int write_armed(void *ctx, mlprof__out *o, char *err, size_t errlen) {
  const armed_write *a = ctx;
  arm_tmp(o->fd);
  sigprocmask(SIG_SETMASK, &a->unblocked, NULL);
  return a->fn(a->ctx, o, err, errlen);
}

int mlprof__cli_guarded(int (*fn)(void *ctx), void *ctx,
                        void (*cleanup)(void)) {
  saved_handler h[] = {{.sig = SIGINT}, {.sig = SIGTERM}};
  tmp_cleanup = cleanup;
  handlers_install(h, sizeof h / sizeof h[0]);
  int rc = fn(ctx);
  handlers_restore(h, sizeof h / sizeof h[0]);
  return rc;
}

int mlprof__cli_write_file(const char *path, mlprof__write_fn fn, void *ctx,
                           char *err, size_t errlen) {
  armed_write a = {.fn = fn, .ctx = ctx};
  saved_handler h[] = {{.sig = SIGINT}, {.sig = SIGTERM}};
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigprocmask(SIG_BLOCK, &block, &a.unblocked);
  handlers_install(h, sizeof h / sizeof h[0]);
  int rc = mlprof__write_atomically(path, write_armed, &a, err, errlen);
  /* A signal still blocked (the write never started) comes now, no file. */
  sigprocmask(SIG_SETMASK, &a.unblocked, NULL);
  handlers_restore(h, sizeof h / sizeof h[0]);
  return rc;
}
