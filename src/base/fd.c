/* The library's descriptors live in descriptor tables of their own, never in
 * the program's. A thread of the library (the writer, the sampler) starts by
 * taking a private, empty table: the files it opens then have numbers in that
 * table only, so the program can neither see them (/proc/self/fd, an fstat of
 * every number), nor close them (close, closefrom, close_range, dup2), nor be
 * handed their numbers by its own open(), and a forked or exec'd child never
 * inherits them. This holds whether the library is preloaded, linked or
 * loaded by Python, with no function of the C library interposed: checking a
 * descriptor after the fact, or guarding close(), always leaves a window or a
 * way round (a linked library does not come before libc in symbol lookup).
 *
 * The table is made with close_range(0, ~0U, CLOSE_RANGE_UNSHARE) (Linux
 * 5.9): the kernel gives the thread a new table and copies none of the
 * program's descriptors into it. Older kernels: unshare(CLONE_FILES), then
 * the copies of the program's descriptors are closed at once (for those few
 * microseconds the program's files have one more reference). Where both are
 * refused (a seccomp filter), the thread shares the program's table as
 * before; docs/guide.md says what that leaves. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base.h"

#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif

static _Thread_local int private_table;

/* Closes every descriptor of the calling thread's (just unshared) table:
 * close_range where the kernel has it, else what /proc lists. */
static void close_all(void) {
  if (syscall(SYS_close_range, 0U, ~0U, 0U) == 0) return;
  DIR *d = opendir("/proc/thread-self/fd");
  if (!d) return;
  int self = dirfd(d);
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') {
      int fd = atoi(e->d_name);
      if (fd != self) close(fd);
    }
  closedir(d);
}

int mlprof__fd_private(void) {
  if (private_table) return 0;
  /* For the tests of what is left where the kernel refuses a table. */
  const char *shared = mlprof__env("MLPROF_FD_SHARED");
  if (shared && shared[0] == '1') return -1;
  if (syscall(SYS_close_range, 0U, ~0U, CLOSE_RANGE_UNSHARE) != 0) {
    if (unshare(CLONE_FILES) != 0) return -1;
    close_all();
  }
  private_table = 1;
  return 0;
}

int mlprof__fd_is_private(void) { return private_table; }

typedef struct {
  int (*fn)(void *);
  void *arg;
  int rc, err;
} call;

static void *call_main(void *p) {
  call *c = p;
  mlprof__fd_private();
  c->rc = c->fn(c->arg);
  c->err = errno;
  return NULL;
}

int mlprof__thread_start(pthread_t *t, void *(*fn)(void *), void *arg) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(t, NULL, fn, arg);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return rc;
}

void mlprof__cond_init_mono(pthread_cond_t *c) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(c, &ca);
  pthread_condattr_destroy(&ca);
}

int mlprof__fd_run_private(int (*fn)(void *), void *arg) {
  call c = {fn, arg, -1, 0};
  pthread_t t;
  if (mlprof__thread_start(&t, call_main, &c) != 0)
    return fn(arg); /* no thread: here, as before */
  pthread_join(t, NULL);
  errno = c.err;
  return c.rc;
}

/* Lines a thread with a private table could not write (no pidfd_getfd),
 * written by the next line from a thread of the program's. */
static char pending[2048];
static size_t npending;
static atomic_flag pending_busy = ATOMIC_FLAG_INIT;

static void write_all(int fd, const char *buf, size_t len) {
  while (len) {
    ssize_t k = write(fd, buf, len);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;
    buf += k;
    len -= (size_t)k;
  }
}

/* The program's stderr (its descriptor 2 now, whatever it is), duplicated
 * into the calling thread's private table; -1 where pidfd_getfd is refused. */
static int program_stderr(void) {
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_getfd)
  int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
  if (pidfd < 0) return -1;
  int fd = (int)syscall(SYS_pidfd_getfd, pidfd, STDERR_FILENO, 0);
  close(pidfd);
  return fd;
#else
  return -1;
#endif
}

void mlprof__fd_stderr(const char *buf, size_t len) {
  int saved = errno;
  if (private_table) {
    /* Its descriptor 2 is not the program's stderr (it may be the profile). */
    int fd = program_stderr();
    if (fd >= 0) {
      write_all(fd, buf, len);
      close(fd);
    } else if (!atomic_flag_test_and_set(&pending_busy)) {
      if (len <= sizeof pending - npending) {
        memcpy(pending + npending, buf, len);
        npending += len;
      }
      atomic_flag_clear(&pending_busy);
    }
    errno = saved;
    return;
  }
  if (!atomic_flag_test_and_set(&pending_busy)) {
    if (npending) write_all(STDERR_FILENO, pending, npending);
    npending = 0;
    atomic_flag_clear(&pending_busy);
  }
  write_all(STDERR_FILENO, buf, len);
  errno = saved;
}
