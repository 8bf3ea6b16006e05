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

/* The held files of the calling thread's ticks (mlprof__read_hold_begin),
 * or NULL: each file opened and closed at each read. */
static __thread mlprof__held_files *held;

/* Reads fd from offset 0 into buf (len - 1 bytes at most), NUL-terminated.
 * Returns the length, or -1 with errno set. */
static ssize_t read_from_start(int fd, char *buf, size_t len) {
  /* /proc files are generated per read call; loop until EOF or full. */
  size_t got = 0;
  while (got < len - 1) {
    ssize_t r = pread(fd, buf + got, len - 1 - got, (off_t)got);
    if (r < 0) {
      if (errno == EINTR) continue;
      buf[0] = '\0';
      return -1;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  buf[got] = '\0';
  return (ssize_t)got;
}

static int open_file(const char *full) {
  return open(full, O_RDONLY | O_CLOEXEC | O_NOCTTY);
}

/* The slot of full in h: the one holding it, else a free one; NULL when
 * the table is full. */
static mlprof__held_file *held_slot(mlprof__held_files *h, const char *full,
                                    uint64_t hash) {
  for (size_t i = 0; i < MLPROF__HELD_MAX; i++) {
    mlprof__held_file *f = &h->f[(hash + i) % MLPROF__HELD_MAX];
    if (!f->path || (f->hash == hash && strcmp(f->path, full) == 0)) return f;
  }
  return NULL;
}

/* Reads full through h: the descriptor kept from an earlier tick, read
 * again from its start, else a new one kept for the next. A descriptor that
 * fails (its process exited, the pid perhaps reused) is opened again once. */
static ssize_t read_held(mlprof__held_files *h, const char *full, char *buf,
                         size_t len) {
  uint64_t hash = mlprof__hash(full, strlen(full), MLPROF__HASH_START);
  mlprof__held_file *f = held_slot(h, full, hash);
  if (f && f->path) {
    f->tick = h->tick;
    ssize_t n = read_from_start(f->fd, buf, len);
    if (n >= 0) return n;
    close(f->fd);
    f->fd = open_file(full);
    if (f->fd < 0) return -1; /* the slot is freed at the tick's end */
    return read_from_start(f->fd, buf, len);
  }
  int fd = open_file(full);
  if (fd < 0) return -1;
  ssize_t n = read_from_start(fd, buf, len);
  int e = errno;
  if (f && n >= 0 && (f->path = strdup(full))) {
    f->hash = hash;
    f->fd = fd;
    f->tick = h->tick;
  } else {
    close(fd);
  }
  errno = e;
  return n;
}

void mlprof__read_hold_begin(mlprof__held_files *h) {
  h->tick++;
  held = h;
}

/* Closes the files of h not read at tick (all when tick is 0) and frees
 * their slots; the table is then rebuilt so that every probe run stays
 * whole. */
static void held_sweep(mlprof__held_files *h, uint64_t tick) {
  mlprof__held_file keep[MLPROF__HELD_MAX];
  size_t n = 0;
  for (size_t i = 0; i < MLPROF__HELD_MAX; i++) {
    mlprof__held_file *f = &h->f[i];
    if (!f->path) continue;
    if (tick && f->tick == tick && f->fd >= 0) {
      keep[n++] = *f;
    } else {
      if (f->fd >= 0) close(f->fd);
      free(f->path);
    }
    f->path = NULL;
  }
  for (size_t i = 0; i < n; i++)
    *held_slot(h, keep[i].path, keep[i].hash) = keep[i];
}

void mlprof__read_hold_end(mlprof__held_files *h) {
  held = NULL;
  held_sweep(h, h->tick);
}

void mlprof__read_hold_close(mlprof__held_files *h) { held_sweep(h, 0); }

ssize_t mlprof__read_at(const char *root, const char *path, char *buf,
                        size_t len) {
  char full[PATH_MAX];
  if (!buf || len == 0) {
    errno = EINVAL;
    return -1;
  }
  buf[0] = '\0';
  if (join(root, path, full, sizeof full) < 0) return -1;
  if (held) return read_held(held, full, buf, len);
  int fd = open_file(full);
  if (fd < 0) return -1;
  ssize_t n = read_from_start(fd, buf, len);
  int e = errno;
  close(fd);
  errno = e;
  return n;
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

/* links (sorted by ppid) and a parent: the links below it come first. */
typedef struct {
  const link_t *links;
  pid_t ppid;
} parent_key;

static int ppid_below(const void *ctx, size_t i) {
  const parent_key *k = ctx;
  return k->links[i].ppid < k->ppid;
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
 * of the tree instead of one per process of the machine. -1 when the
 * root's file cannot be read (the root is gone, or the kernel has no such
 * files: CONFIG_PROC_CHILDREN). */
static int tree_by_children(const char *root, pid_t *out, size_t *n, size_t max,
                            mlprof__tree_threads *th) {
  char path[96], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)out[0],
           (int)out[0]);
  if (mlprof__read_at(root, path, buf, sizeof buf) < 0) return -1;
  add_children(buf, out, n, max);
  int listing = th != NULL;
  if (th) th->ntid = th->npids = 0;
  size_t i = 0;
  for (; i < *n && *n < max; i++) {
    if (listing) th->first[i] = th->ntid;
    snprintf(path, sizeof path, "/proc/%d/task", (int)out[i]);
    DIR *d = mlprof__opendir_at(root, path);
    if (!d) continue; /* exited meanwhile */
    struct dirent *e;
    while ((e = readdir(d)) && *n < max) {
      pid_t tid = pid_name(e->d_name);
      if (tid <= 0) continue;
      if (listing && th->ntid < th->cap)
        th->tid[th->ntid++] = tid;
      else
        listing = 0; /* more threads than room: the sources list them */
      if (i == 0 && tid == out[0]) continue; /* read above */
      snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)out[i],
               (int)tid);
      if (mlprof__read_at(root, path, buf, sizeof buf) > 0)
        add_children(buf, out, n, max);
    }
    closedir(d);
  }
  if (listing) {
    th->first[i] = th->ntid;
    th->npids = i; /* a listing cut short by max is incomplete */
    if (i && *n >= max) th->npids--;
  }
  return 0;
}

/* At most this many processes are looked at in one walk (2 MiB of links). */
#define TREE_MAX_PROCS (1u << 18)

size_t mlprof__proc_tree(const char *root, pid_t pid, pid_t *out, size_t max,
                         mlprof__tree_threads *th) {
  if (th) th->npids = 0;
  if (!out || max == 0 || pid <= 0) return 0;
  out[0] = pid;
  size_t n = 1;
  if (tree_by_children(root, out, &n, max, th) == 0) return n;
  if (th) th->npids = 0;
  if (parent_of(root, pid) < 0) return 0; /* gone, or never was */

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
  if (nl) mlprof__sort(links, nl, sizeof *links, by_ppid);

  /* Breadth first: out[] is the queue. A pid is a child of one parent only,
   * so nothing is appended twice. */
  for (size_t i = 0; i < n && n < max; i++) {
    parent_key key = {links, out[i]};
    size_t lo = mlprof__lower_bound(0, nl, &key, ppid_below);
    for (size_t j = lo; j < nl && links[j].ppid == out[i] && n < max; j++)
      out[n++] = links[j].pid;
  }
  free(links);
  return n;
}
