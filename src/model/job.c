/* A job: the profiles named on a command line, placed on one timeline. See
 * job.h. Only each profile's HEADER chunk is read here, and a rank's META
 * chunks for its clock offsets: its EVENTS, most of its bytes, are passed
 * over unread (mlprof__read_file_meta). */
#include "job.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/base.h"
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
  if (mlprof__grow(&l->v, &l->cap, l->n + 1, sizeof *l->v)) {
    free(s);
    return MLPROF_ENOMEM;
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
  mlprof__sort(files->v + first, files->n - first, sizeof *files->v, cmp_str);
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
  p->local_rank = h->local_rank;
  p->job_id = strdup(h->job_id);
  p->start_wall_ns = h->start_wall_ns;
  p->start_mono_ns = h->start_mono_ns;
  p->header_damaged = h->damaged;
  p->hostname = strdup(h->hostname);
  p->exe = strdup(h->exe);
  p->exec_seq = h->exec_seq;
  p->cmdline = join_args(h->argc, h->argv);
  const char *arg0 = h->argc && *h->argv[0] ? h->argv[0] : h->exe;
  const char *slash = strrchr(arg0, '/');
  p->name = strdup(slash && slash[1] ? slash + 1 : arg0);
  if (!p->job_id || !p->hostname || !p->exe || !p->cmdline || !p->name)
    return MLPROF_ENOMEM;
  /* A rank's clock offsets are in META chunks further on. */
  return p->rank >= 0 ? 0 : HEADER_TAKEN;
}

/* Between the two measurements the offset moves linearly; before the first
 * and after the last it stays (a drift measured over a short run would be
 * extrapolated with its error). The values are within MLPROF__CLOCK_MAX, so
 * their differences are within int64_t. */
static void set_drift(mlprof__job_profile *p) {
  const int64_t *at = p->clock_at_ns, *off = p->clock_off_ns;
  uint64_t s = p->start_mono_ns;
  if (!p->has_clock[0] || !p->has_clock[1] || at[1] <= at[0] ||
      (uint64_t)at[0] < s)
    return;
  p->drift = (double)(off[1] - off[0]) / (double)(at[1] - at[0]);
  p->drift_from_ns = (uint64_t)at[0] - s;
  p->drift_to_ns = (uint64_t)at[1] - s;
}

/* Reads n integers within +-MLPROF__CLOCK_MAX from s into v. Returns 0, or
 * -1 when s does not start with them. */
static int parse_clock(const char *s, int64_t *v, int n) {
  for (int i = 0; i < n; i++) {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || errno || x >= MLPROF__CLOCK_MAX || x <= -MLPROF__CLOCK_MAX)
      return -1;
    v[i] = x;
    s = end;
  }
  return 0;
}

/* See job.h. dist.clock.init and dist.clock.final are
 * "OFFSET_NS UNCERTAINTY_NS AT_NS". */
int mlprof__job_take_meta(void *ud, const char *key, size_t klen,
                          const char *value, size_t vlen) {
  mlprof__job_profile *p = ud;
  int k = klen == 15 && !memcmp(key, "dist.clock.init", 15)    ? 0
          : klen == 16 && !memcmp(key, "dist.clock.final", 16) ? 1
                                                               : -1;
  char v[128];
  int64_t x[3]; /* offset, uncertainty, at */
  if (k < 0) return 0;
  if (vlen >= sizeof v) {
    p->clock_rejected = 1;
    return 0;
  }
  memcpy(v, value, vlen);
  v[vlen] = '\0';
  if (parse_clock(v, x, 3) || x[1] < 0 || x[2] < 0) {
    p->clock_rejected = 1;
    return 0;
  }
  p->has_clock[k] = 1;
  p->clock_off_ns[k] = x[0];
  p->clock_unc_ns[k] = x[1];
  p->clock_at_ns[k] = x[2];
  set_drift(p);
  return 0;
}

static int has_clock(const mlprof__job_profile *p) {
  return p->has_clock[0] || p->has_clock[1];
}

/* Sums and differences of clock values from files, held at the ends of
 * int64_t: a hostile header must not overflow them. */
static int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  return !__builtin_add_overflow(a, b, &r) ? r : b < 0 ? INT64_MIN : INT64_MAX;
}

static int64_t sat_sub(int64_t a, int64_t b) {
  int64_t r;
  return !__builtin_sub_overflow(a, b, &r) ? r : b > 0 ? INT64_MIN : INT64_MAX;
}

static int64_t clamp_u64(uint64_t v) {
  return v > INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* What moves p's start from its own clock onto rank 0's (r0), in the base
 * (monotonic or wall) of the job: 0 for a profile of no measured rank. */
static int64_t clock_shift(const mlprof__job_profile *p,
                           const mlprof__job_profile *r0, int one_host) {
  if (!r0 || !has_clock(p)) return 0;
  int64_t off = p->clock_off_ns[p->has_clock[0] ? 0 : 1];
  if (one_host) return off;
  int64_t mine =
      sat_sub(clamp_u64(p->start_mono_ns), clamp_u64(p->start_wall_ns));
  int64_t r0s =
      sat_sub(clamp_u64(r0->start_mono_ns), clamp_u64(r0->start_wall_ns));
  return sat_add(off, sat_sub(mine, r0s));
}

/* See job.h. */
uint64_t mlprof__job_time(const mlprof__job_profile *p, uint64_t t) {
  uint64_t c = t < p->drift_from_ns ? p->drift_from_ns
               : t > p->drift_to_ns ? p->drift_to_ns
                                    : t;
  /* Within the change of offset between the measurements, under 2^63. */
  double moved = p->drift * (double)(c - p->drift_from_ns);
  if (!(fabs(moved) < 0x1p62)) moved = moved < 0 ? -0x1p62 : 0x1p62;
  return p->offset_ns + t + (uint64_t)llround(moved);
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
  /* A profile whose header was damaged has no host or start: it takes no
   * part in choosing the clock and is placed at 0. */
  int one_host = 1;
  const char *host = NULL;
  for (size_t i = 0; i < n; i++)
    if (!ps[i].header_damaged && !host)
      host = ps[i].hostname;
    else if (!ps[i].header_damaged && strcmp(ps[i].hostname, host) != 0)
      one_host = 0;
  /* Ranks that measured their clock are placed on rank 0's; a rank's
   * children (no measurement, same rank and host) move with it. */
  const mlprof__job_profile *r0 = NULL;
  for (size_t i = 0; i < n && !r0; i++)
    if (ps[i].rank == 0 && has_clock(&ps[i])) r0 = &ps[i];
  int64_t min = INT64_MAX;
  for (size_t i = 0; i < n; i++) {
    const mlprof__job_profile *clocked = &ps[i];
    for (size_t j = 0; j < n && !has_clock(clocked); j++)
      if (ps[i].rank >= 0 && has_clock(&ps[j]) && ps[j].rank == ps[i].rank &&
          !strcmp(ps[j].hostname, ps[i].hostname) &&
          !strcmp(ps[j].job_id, ps[i].job_id))
        clocked = &ps[j];
    int64_t s = clamp_u64(one_host ? ps[i].start_mono_ns : ps[i].start_wall_ns);
    /* offset_ns holds the start on the common clock until min is known. */
    ps[i].offset_ns = (uint64_t)sat_add(s, clock_shift(clocked, r0, one_host));
    if (!ps[i].header_damaged && (int64_t)ps[i].offset_ns < min)
      min = (int64_t)ps[i].offset_ns;
  }
  /* offset_ns - min wraps in uint64_t to the difference, which is in
   * [0, 2^64) when the start is not before min. */
  for (size_t i = 0; i < n; i++)
    ps[i].offset_ns = ps[i].header_damaged || (int64_t)ps[i].offset_ns < min
                          ? 0
                          : ps[i].offset_ns - (uint64_t)min;
  mlprof__sort(ps, n, sizeof *ps, cmp_profile);
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
  char here[256] = "";
  gethostname(here, sizeof here - 1);
  for (size_t i = 0; i < n; i++)
    ps[i].alive = strcmp(ps[i].hostname, here) != 0
                      ? -1
                      : ps[i].pid > 0 && ps[i].pid <= INT32_MAX &&
                            (kill((pid_t)ps[i].pid, 0) == 0 || errno == EPERM);
}

/* Files of a listed directory that are not profiles: counted, not fatal. */
typedef struct {
  size_t n, empty;
  char *first; /* the first one's path, owned */
} skipped;

/* Counts path as skipped; takes it (keeps the first, frees the others). */
static void skip(skipped *sk, char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && st.st_size == 0) sk->empty++;
  if (sk->n++)
    free(path);
  else
    sk->first = path;
}

/* "skipped 3 files: 2 empty, 1 not an mlprof profile; first: PATH". */
static char *skipped_line(const skipped *sk) {
  size_t other = sk->n - sk->empty, size = strlen(sk->first) + 128;
  char *s = malloc(size);
  if (!s) return NULL;
  snprintf(s, size, "skipped %zu file%s: ", sk->n, sk->n == 1 ? "" : "s");
  if (sk->empty)
    snprintf(s + strlen(s), size - strlen(s), "%zu empty%s", sk->empty,
             other ? ", " : "");
  if (other)
    snprintf(s + strlen(s), size - strlen(s), "%zu not an mlprof profile",
             other);
  snprintf(s + strlen(s), size - strlen(s), "; first: %s", sk->first);
  return s;
}

/* Whether path is one of the paths given (not found in a directory). */
static int named(const char *path, const char *const *paths, size_t npaths) {
  for (size_t i = 0; i < npaths; i++)
    if (strcmp(path, paths[i]) == 0) return 1;
  return 0;
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
  skipped sk = {0};
  for (size_t i = 0; i < files.n && !rc; i++) {
    mlprof__job_profile *p = &job->profiles[job->count];
    mlprof__visitor v = {
        .ud = p, .header = take_header, .meta = mlprof__job_take_meta};
    p->path = files.v[i];
    files.v[i] = NULL;
    job->count++;
    rc = mlprof__read_file_meta(p->path, &v, NULL, err, errlen);
    if (rc == HEADER_TAKEN) {
      rc = 0;
    } else if (rc == MLPROF_EFORMAT && !named(p->path, paths, npaths)) {
      rc = 0;
      err[0] = '\0';
      skip(&sk, p->path);
      job->count--;
      memset(p, 0, sizeof *p);
    } else if (rc == MLPROF_ENOMEM) {
      snprintf(err, errlen, "%s: out of memory", p->path);
    }
  }
  strlist_free(&files);
  if (!rc && sk.n && !(job->skipped = skipped_line(&sk))) {
    snprintf(err, errlen, "out of memory");
    rc = MLPROF_ENOMEM;
  }
  if (!rc && job->count == 0) {
    snprintf(err, errlen, "no readable mlprof profile: %s", job->skipped);
    rc = MLPROF_EFORMAT;
  }
  free(sk.first);
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
    free(p->job_id);
    free(p->hostname);
    free(p->exe);
    free(p->cmdline);
    free(p->name);
  }
  free(job->profiles);
  free(job->skipped);
  memset(job, 0, sizeof *job);
}
