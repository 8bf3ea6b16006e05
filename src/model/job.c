/* A job: the profiles named on a command line, placed on one timeline. See
 * job.h. Only each profile's HEADER chunk is read here. */
#include "job.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mlprof.h"

/* What the header callback returns to stop the read once it has the header;
 * positive, so it cannot be taken for an mlprof error. */
#define HEADER_TAKEN 1

#define PROFILE_SUFFIX ".mlprof"

typedef struct {
  char **v;
  size_t n, cap;
} strlist;

/* Appends s, which the list then owns (freed here on failure). */
static int strlist_push(strlist *l, char *s) {
  if (!s) return MLPROF_ENOMEM;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16;
    char **v = realloc(l->v, cap * sizeof *v);
    if (!v) {
      free(s);
      return MLPROF_ENOMEM;
    }
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = s;
  return 0;
}

static void strlist_free(strlist *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_profile_name(const char *name) {
  size_t n = strlen(name), k = strlen(PROFILE_SUFFIX);
  return n > k && strcmp(name + n - k, PROFILE_SUFFIX) == 0;
}

/* Appends the *.mlprof regular files directly in dir, sorted by name. */
static int list_dir(const char *dir, strlist *files, char *err, size_t errlen) {
  DIR *d = opendir(dir);
  if (!d) {
    snprintf(err, errlen, "%s: %s", dir, strerror(errno));
    return MLPROF_EIO;
  }
  size_t first = files->n, dlen = strlen(dir);
  const char *sep = dlen && dir[dlen - 1] == '/' ? "" : "/";
  int rc = 0;
  struct dirent *e;
  while (!rc && (e = readdir(d))) {
    if (!is_profile_name(e->d_name)) continue;
    size_t size = dlen + strlen(e->d_name) + 2;
    char *path = malloc(size);
    if (!path) {
      rc = MLPROF_ENOMEM;
      break;
    }
    snprintf(path, size, "%s%s%s", dir, sep, e->d_name);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
      free(path);
      continue;
    }
    rc = strlist_push(files, path);
  }
  closedir(d);
  if (rc) {
    snprintf(err, errlen, "%s: out of memory", dir);
    return rc;
  }
  if (files->n == first) {
    snprintf(err, errlen, "%s: no mlprof profiles in this directory", dir);
    return MLPROF_EINVAL;
  }
  qsort(files->v + first, files->n - first, sizeof *files->v, cmp_str);
  return 0;
}

/* Joins argv with spaces into a new string. */
static char *join_args(uint32_t argc, const char *const *argv) {
  size_t size = 1;
  for (uint32_t i = 0; i < argc; i++) size += strlen(argv[i]) + 1;
  char *s = malloc(size), *w = s;
  if (!s) return NULL;
  for (uint32_t i = 0; i < argc; i++) {
    size_t n = strlen(argv[i]);
    if (i) *w++ = ' ';
    memcpy(w, argv[i], n);
    w += n;
  }
  *w = '\0';
  return s;
}

static int take_header(void *ud, const mlprof__header *h) {
  mlprof__job_profile *p = ud;
  p->pid = h->pid;
  p->ppid = h->ppid;
  p->rank = h->rank;
  p->world_size = h->world_size;
  p->start_wall_ns = h->start_wall_ns;
  p->start_mono_ns = h->start_mono_ns;
  p->hostname = strdup(h->hostname);
  p->exe = strdup(h->exe);
  p->exec_seq = h->exec_seq;
  p->cmdline = join_args(h->argc, h->argv);
  if (!p->hostname || !p->exe || !p->cmdline) return MLPROF_ENOMEM;
  return HEADER_TAKEN;
}

static int cmp_profile(const void *a, const void *b) {
  const mlprof__job_profile *x = a, *y = b;
  if (x->offset_ns != y->offset_ns) return x->offset_ns < y->offset_ns ? -1 : 1;
  if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
  return strcmp(x->path, y->path);
}

/* Same process on the same host. */
static int same_process(const mlprof__job_profile *a,
                        const mlprof__job_profile *b) {
  return a->pid == b->pid && strcmp(a->hostname, b->hostname) == 0;
}

/* Places the profiles on one timeline, sorts them, links parents and the
 * programs of a chain of execs, and sees which processes of this host are
 * alive. */
static void arrange(mlprof__job *job) {
  mlprof__job_profile *ps = job->profiles;
  size_t n = job->count;
  int one_host = 1;
  for (size_t i = 1; i < n; i++)
    if (strcmp(ps[i].hostname, ps[0].hostname) != 0) one_host = 0;
  uint64_t min = UINT64_MAX;
  for (size_t i = 0; i < n; i++) {
    uint64_t s = one_host ? ps[i].start_mono_ns : ps[i].start_wall_ns;
    if (s < min) min = s;
  }
  for (size_t i = 0; i < n; i++)
    ps[i].offset_ns =
        (one_host ? ps[i].start_mono_ns : ps[i].start_wall_ns) - min;
  qsort(ps, n, sizeof *ps, cmp_profile);
  /* A pid can be reused: the parent is the latest process with that pid on
   * the same host that started no later than the child. */
  for (size_t i = 0; i < n; i++) {
    ps[i].parent = -1;
    for (size_t j = 0; j < n && ps[j].offset_ns <= ps[i].offset_ns; j++)
      if (j != i && ps[j].pid == ps[i].ppid &&
          strcmp(ps[j].hostname, ps[i].hostname) == 0)
        ps[i].parent = (int)j;
  }
  /* The next program of a chain started after this one, with the next
   * number: the earliest such (a reused pid starts a chain afresh at 0). */
  for (size_t i = 0; i < n; i++) {
    ps[i].exec_next = -1;
    for (size_t j = i + 1; j < n && ps[i].exec_next < 0; j++)
      if (ps[j].exec_seq == ps[i].exec_seq + 1 && same_process(&ps[i], &ps[j]))
        ps[i].exec_next = (int)j;
  }
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  for (size_t i = 0; i < n; i++)
    ps[i].alive = strcmp(ps[i].hostname, host) != 0
                      ? -1
                      : ps[i].pid > 0 && ps[i].pid <= INT32_MAX &&
                            (kill((pid_t)ps[i].pid, 0) == 0 || errno == EPERM);
}

/* See job.h. On failure *job is left empty. */
int mlprof__job_open(mlprof__job *job, const char *const *paths, size_t npaths,
                     char *err, size_t errlen) {
  char ebuf[512];
  if (!err || !errlen) {
    err = ebuf;
    errlen = sizeof ebuf;
  }
  err[0] = '\0';
  memset(job, 0, sizeof *job);
  strlist files = {0};
  int rc = 0;
  if (npaths == 0) {
    snprintf(err, errlen, "no profile given");
    return MLPROF_EINVAL;
  }
  for (size_t i = 0; i < npaths && !rc; i++) {
    struct stat st;
    if (stat(paths[i], &st) != 0) {
      if (errno == ENOENT)
        snprintf(err, errlen, "%s: no such file or directory", paths[i]);
      else
        snprintf(err, errlen, "%s: %s", paths[i], strerror(errno));
      rc = MLPROF_EIO;
    } else if (S_ISDIR(st.st_mode)) {
      rc = list_dir(paths[i], &files, err, errlen);
    } else if ((rc = strlist_push(&files, strdup(paths[i])))) {
      snprintf(err, errlen, "%s: out of memory", paths[i]);
    }
  }
  if (!rc && !(job->profiles = calloc(files.n, sizeof *job->profiles))) {
    snprintf(err, errlen, "out of memory");
    rc = MLPROF_ENOMEM;
  }
  for (size_t i = 0; i < files.n && !rc; i++) {
    mlprof__job_profile *p = &job->profiles[i];
    mlprof__visitor v = {.ud = p, .header = take_header};
    p->path = files.v[i];
    files.v[i] = NULL;
    job->count++;
    rc = mlprof__read_file(p->path, &v, NULL, err, errlen);
    if (rc == HEADER_TAKEN)
      rc = 0;
    else if (rc == MLPROF_ENOMEM)
      snprintf(err, errlen, "%s: out of memory", p->path);
  }
  strlist_free(&files);
  if (rc) {
    mlprof__job_close(job);
    return rc;
  }
  arrange(job);
  return 0;
}

/* See job.h. Leaves *job empty; closing an empty job is harmless. */
void mlprof__job_close(mlprof__job *job) {
  for (size_t i = 0; i < job->count; i++) {
    mlprof__job_profile *p = &job->profiles[i];
    free(p->path);
    free(p->hostname);
    free(p->exe);
    free(p->cmdline);
  }
  free(job->profiles);
  memset(job, 0, sizeof *job);
}
