/* The one way into /proc and /sys: every read goes below a root, so that the
 * tests run the sources on fixture trees, and the process tree walk. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sample.h"

/* root + path into out; -1 with ENAMETOOLONG when it does not fit. */
static int join(const char *root, const char *path, char *out, size_t len) {
  int n = snprintf(out, len, "%s%s", root ? root : "", path);
  if (n < 0 || (size_t)n >= len) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return 0;
}

ssize_t mlprof__read_at(const char *root, const char *path, char *buf,
                        size_t len) {
  char full[PATH_MAX];
  if (!buf || len == 0) {
    errno = EINVAL;
    return -1;
  }
  buf[0] = '\0';
  if (join(root, path, full, sizeof full) < 0) return -1;
  int fd = open(full, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return -1;
  /* /proc files are generated per read call; loop until EOF or full. */
  size_t got = 0;
  while (got < len - 1) {
    ssize_t r = read(fd, buf + got, len - 1 - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      close(fd);
      buf[0] = '\0';
      errno = e;
      return -1;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  close(fd);
  buf[got] = '\0';
  return (ssize_t)got;
}

DIR *mlprof__opendir_at(const char *root, const char *path) {
  char full[PATH_MAX];
  if (join(root, path, full, sizeof full) < 0) return NULL;
  return opendir(full);
}

/* A /proc entry name that is a pid, or 0. */
static pid_t pid_name(const char *s) {
  long v = 0;
  if (!*s) return 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9' || v > INT_MAX / 10) return 0;
    v = v * 10 + (*s - '0');
  }
  return (pid_t)v;
}

/* The parent of pid from root/proc/PID/stat, or -1 when it cannot be read.
 * The command name may hold spaces and parentheses: fields restart after the
 * last ')'. */
static pid_t parent_of(const char *root, pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  if (mlprof__read_at(root, path, buf, sizeof buf) <= 0) return -1;
  char *p = strrchr(buf, ')');
  if (!p) return -1;
  char state;
  int ppid;
  if (sscanf(p + 1, " %c %d", &state, &ppid) != 2) return -1;
  return (pid_t)ppid;
}

typedef struct {
  pid_t pid, ppid;
} link_t;

static int by_ppid(const void *a, const void *b) {
  const link_t *x = a, *y = b;
  return (x->ppid > y->ppid) - (x->ppid < y->ppid);
}

/* Appends the pids of a children file not yet in out. */
static void add_children(const char *buf, pid_t *out, size_t *n, size_t max) {
  for (const char *p = buf; *p && *n < max;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p) break;
    p = end;
    if (v <= 0 || v > INT_MAX) continue;
    size_t k = 0;
    while (k < *n && out[k] != (pid_t)v) k++;
    if (k == *n) out[(*n)++] = (pid_t)v;
  }
}

/* The tree through /proc/PID/task/TID/children (one file per thread: a child
 * is listed under the thread that forked it). Costs a few reads per thread
 * of the tree instead of one per process of the machine. -1 when the kernel
 * has no such files (CONFIG_PROC_CHILDREN). */
static int tree_by_children(const char *root, pid_t *out, size_t *n,
                            size_t max) {
  char path[96], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)out[0],
           (int)out[0]);
  if (mlprof__read_at(root, path, buf, sizeof buf) < 0) return -1;
  for (size_t i = 0; i < *n && *n < max; i++) {
    snprintf(path, sizeof path, "/proc/%d/task", (int)out[i]);
    DIR *d = mlprof__opendir_at(root, path);
    if (!d) continue; /* exited meanwhile */
    struct dirent *e;
    while ((e = readdir(d)) && *n < max) {
      pid_t tid = pid_name(e->d_name);
      if (tid <= 0) continue;
      snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)out[i],
               (int)tid);
      if (mlprof__read_at(root, path, buf, sizeof buf) > 0)
        add_children(buf, out, n, max);
    }
    closedir(d);
  }
  return 0;
}

/* At most this many processes are looked at in one walk (2 MiB of links). */
#define TREE_MAX_PROCS (1u << 18)

size_t mlprof__proc_tree(const char *root, pid_t pid, pid_t *out, size_t max) {
  if (!out || max == 0 || pid <= 0 || parent_of(root, pid) < 0) return 0;
  out[0] = pid;
  size_t n = 1;
  if (tree_by_children(root, out, &n, max) == 0) return n;

  /* Without children files: every process's parent link, sorted. */
  DIR *d = mlprof__opendir_at(root, "/proc");
  if (!d) return n;
  link_t *links = NULL;
  size_t nl = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    pid_t p = pid_name(e->d_name);
    if (p <= 0 || p == pid) continue;
    pid_t pp = parent_of(root, p);
    if (pp <= 0) continue; /* gone, or a root of the system */
    if (nl == TREE_MAX_PROCS ||
        mlprof__grow(&links, &cap, nl + 1, sizeof *links))
      break;
    links[nl].pid = p;
    links[nl].ppid = pp;
    nl++;
  }
  closedir(d);
  if (nl) qsort(links, nl, sizeof *links, by_ppid);

  /* Breadth first: out[] is the queue. A pid is a child of one parent only,
   * so nothing is appended twice. */
  for (size_t i = 0; i < n && n < max; i++) {
    size_t lo = 0, hi = nl;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (links[mid].ppid < out[i])
        lo = mid + 1;
      else
        hi = mid;
    }
    for (size_t j = lo; j < nl && links[j].ppid == out[i] && n < max; j++)
      out[n++] = links[j].pid;
  }
  free(links);
  return n;
}
