/* Source "proc": one row per sampled process, from /proc/PID/{stat,status,io},
 * the entries of /proc/PID/fd and the schedstat of each of its threads. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sample.h"

/* Pids remembered between ticks for cpu_pct; a process tree larger than this
 * gets cpu_pct for the first PROC_MAX pids only. */
#define PROC_MAX 1024
/* Threads remembered between ticks for runq_wait_pct (the tree walk lists
 * as many); past them a thread's wait is not counted. */
#define TID_MAX 16384

typedef struct {
  pid_t pid;
  unsigned long long start; /* starttime: tells a reused pid apart */
  unsigned long long ticks; /* utime + stime */
  int has_wait;             /* its threads' run-queue wait was read */
  uint64_t ns;
  size_t tfirst, nt; /* its threads in the thread table */
} prev_t;

typedef struct {
  pid_t tid;
  unsigned long long wait; /* run-queue wait, ns (schedstat) */
} tprev_t;

typedef struct {
  prev_t *prev, *next; /* last tick's table, this tick's (swapped) */
  size_t nprev;
  tprev_t *tprev, *tnext; /* their threads, the same way */
  size_t ntprev, ntnext, tprev_cap, tnext_cap;
  char (*label)[32]; /* rows' command names, valid until the next call */
  double tck;        /* clock ticks per second */
} proc_state;

static int proc_open(void **state, const char *root, char *why, size_t len) {
  proc_state *s = calloc(1, sizeof *s);
  if (s) {
    s->prev = calloc(PROC_MAX, sizeof *s->prev);
    s->next = calloc(PROC_MAX, sizeof *s->next);
    s->label = calloc(PROC_MAX, sizeof *s->label);
  }
  if (!s || !s->prev || !s->next || !s->label) {
    if (s) {
      free(s->prev);
      free(s->next);
      free(s->label);
    }
    free(s);
    snprintf(why, len, "out of memory");
    return -1;
  }
  long t = sysconf(_SC_CLK_TCK);
  s->tck = t > 0 ? (double)t : 100.0;
  *state = s;
  return 0;
}

static void proc_close(void *state) {
  proc_state *s = state;
  if (!s) return;
  free(s->prev);
  free(s->next);
  free(s->label);
  free(s->tprev);
  free(s->tnext);
  free(s);
}

/* The reason a /proc file could not be read, as a static string. */
static const char *errno_reason(int e) {
  switch (e) {
    case EACCES:
    case EPERM:
      return "no permission";
    case ENOENT:
      return "not provided by this kernel";
    default:
      return "read failed";
  }
}

/* The value after "key" at the start of a line of a "Key: value" file. */
static int field_ull(const char *buf, const char *key, unsigned long long *v) {
  size_t kl = strlen(key);
  for (const char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p) {
    if (strncmp(p, key, kl) == 0) {
      char *end;
      errno = 0;
      *v = strtoull(p + kl, &end, 10);
      return end != p + kl && errno == 0 ? 0 : -1;
    }
  }
  return -1;
}

typedef struct {
  char comm[32];
  char state; /* R, S, D, Z (exited, not yet reaped), X (dead)... */
  unsigned long long minflt, majflt, utime, stime, start;
  long threads;
} stat_t;

/* Parses /proc/PID/stat; the command sits in parentheses and may hold both
 * spaces and ')', so fields are counted from the last ')'. */
static int parse_stat(const char *buf, stat_t *st) {
  const char *open = strchr(buf, '('), *close = strrchr(buf, ')');
  if (!open || !close || close < open) return -1;
  size_t cl = (size_t)(close - open - 1);
  if (cl >= sizeof st->comm) cl = sizeof st->comm - 1;
  memcpy(st->comm, open + 1, cl);
  st->comm[cl] = '\0';
  /* Field 3 (state) is the first after ')'. */
  const char *p = close + 1;
  unsigned long long f[24] = {0};
  int k = 3;
  while (*p && k <= 22) {
    while (*p == ' ') p++;
    if (!*p) break;
    if (k == 3) {
      st->state = *p++;
    } else {
      char *end;
      long long v = strtoll(p, &end, 10);
      if (end == p) return -1;
      f[k] = (unsigned long long)(v < 0 ? 0 : v);
      p = end;
    }
    k++;
  }
  if (k <= 22) return -1;
  st->minflt = f[10];
  st->majflt = f[12];
  st->utime = f[14];
  st->stime = f[15];
  st->threads = (long)f[20];
  st->start = f[22];
  return 0;
}

/* Entries of /proc/PID/fd, or -1 with errno. Since Linux 6.2 procfs gives
 * their count as the directory's size, which a stat reads without listing
 * them; elsewhere (and in fixture trees, root not "") the size is no count. */
static long count_fds(const char *root, pid_t pid) {
  char path[64];
  struct stat st;
  snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
  if (!root[0] && stat(path, &st) == 0 && st.st_size > 0)
    return (long)st.st_size;
  DIR *d = mlprof__opendir_at(root, path);
  if (!d) return -1;
  long n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* Adds the run time of thread tid of pid (its schedstat) to *on_cpu and
 * appends its run-queue wait to s->tnext (when there is room). 0, or -1
 * with errno. */
static int add_schedstat(proc_state *s, const char *root, pid_t pid,
                         const char *tid, unsigned long long *on_cpu) {
  char path[96], buf[128];
  snprintf(path, sizeof path, "/proc/%d/task/%.20s/schedstat", (int)pid, tid);
  if (mlprof__read_at(root, path, buf, sizeof buf) <= 0) return -1;
  char *end;
  *on_cpu += strtoull(buf, &end, 10);
  unsigned long long wait = strtoull(end, &end, 10);
  if (s->ntnext < TID_MAX && mlprof__grow(&s->tnext, &s->tnext_cap,
                                          s->ntnext + 1, sizeof *s->tnext) == 0)
    s->tnext[s->ntnext++] = (tprev_t){(pid_t)atoi(tid), wait};
  return 0;
}

/* Reads the run-queue wait (ns, the second field of schedstat: time
 * runnable but not running) of each thread of pid into s->tnext: those in
 * tids (ntids of them) when the tree walk listed them, else those its task
 * directory lists. Returns NULL, or why it cannot be had. */
static const char *runq_wait(proc_state *s, const char *root, pid_t pid,
                             const pid_t *tids, size_t ntids) {
  unsigned long long on_cpu = 0;
  int threads = 0, err = ENOENT;
  if (tids) {
    for (size_t k = 0; k < ntids; k++) {
      char tid[16];
      snprintf(tid, sizeof tid, "%d", (int)tids[k]);
      if (add_schedstat(s, root, pid, tid, &on_cpu) < 0)
        err = errno; /* the thread exited, or no schedstat */
      else
        threads++;
    }
  } else {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = mlprof__opendir_at(root, path);
    if (!d) return errno_reason(errno);
    struct dirent *e;
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.') continue;
      if (add_schedstat(s, root, pid, e->d_name, &on_cpu) < 0)
        err = errno;
      else
        threads++;
    }
    closedir(d);
  }
  if (!threads) return errno_reason(err);
  /* A kernel without sched_info shows "0 0 0" for every thread. */
  return on_cpu ? NULL : "not counted by this kernel (schedstat is 0)";
}

/* The run-queue wait of the threads read this tick from s->tnext[from] on
 * since pv's tick, over dt ns: *all, and *before, the part of it waited
 * before that tick. The kernel adds a wait to a thread's count only when
 * the thread gets a CPU, all at once: a thread starved over several ticks
 * shows its whole wait in the interval it got a CPU in, and a wait d that
 * ended at a time uniform over the interval lies before it by d^2 / 2dt
 * when d < dt, by d - dt/2 past that (the expected value). A thread seen for
 * the first time counts its whole wait; one that exited, none. */
static void runq_delta(const proc_state *s, const prev_t *pv, size_t from,
                       double dt, double *all, double *before) {
  const tprev_t *old = s->tprev + pv->tfirst;
  size_t h = 0;
  *all = *before = 0;
  for (size_t k = from; k < s->ntnext; k++) {
    const tprev_t *t = &s->tnext[k];
    unsigned long long w0 = 0;
    /* The threads come in the same order tick after tick: the search
     * starts where the last one was found. */
    for (size_t j = 0; j < pv->nt; j++) {
      size_t at = (h + j) % pv->nt;
      if (old[at].tid == t->tid) {
        w0 = old[at].wait;
        h = at + 1;
        break;
      }
    }
    double d = t->wait > w0 ? (double)(t->wait - w0) : 0;
    *all += d;
    *before += d < dt ? d * d / (2 * dt) : d - dt / 2;
  }
}

static const prev_t *find_prev(const proc_state *s, pid_t pid) {
  for (size_t i = 0; i < s->nprev; i++)
    if (s->prev[i].pid == pid) return &s->prev[i];
  return NULL;
}

static int proc_sample(void *state, const mlprof__sample_ctx *ctx,
                       mlprof__row *out, int max, char *why, size_t len) {
  proc_state *s = state;
  const char *root = ctx->root;
  size_t nnext = 0;
  int rows = 0;
  char buf[8192], path[64]; /* status grows with the CPU and node masks */
  for (size_t i = 0; i < ctx->npids && rows < max && rows < PROC_MAX; i++) {
    pid_t pid = ctx->pids[i];
    stat_t st;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    /* A zombie has exited (its parent has not reaped it yet): it has no
     * memory, and sampling it would make its measures absent until it
     * is reaped. Skipped, as a process gone. */
    if (mlprof__read_at(root, path, buf, sizeof buf) <= 0 ||
        parse_stat(buf, &st) < 0 || st.state == 'Z' || st.state == 'X')
      continue; /* exited (or never was): skipped silently */
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    if (mlprof__read_at(root, path, buf, sizeof buf) <= 0) continue;

    mlprof__row *r = &out[rows];
    memset(r, 0, sizeof *r);
    r->subject = MLPROF__SUBJECT_PROCESS;
    r->id = (uint64_t)pid;
    memcpy(s->label[rows], st.comm, sizeof st.comm);
    r->label = s->label[rows];

    mlprof__row_put(r, "cpu_user_s", (double)st.utime / s->tck, NULL);
    mlprof__row_put(r, "cpu_system_s", (double)st.stime / s->tck, NULL);
    unsigned long long ticks = st.utime + st.stime;
    const prev_t *pv = find_prev(s, pid);
    if (!pv || pv->start != st.start)
      mlprof__row_put(r, "cpu_pct", 0, "first sample");
    else if (ctx->now_ns <= pv->ns)
      mlprof__row_put(r, "cpu_pct", 0, "no time elapsed");
    else
      mlprof__row_put(r, "cpu_pct",
                      (double)(ticks >= pv->ticks ? ticks - pv->ticks : 0) /
                          s->tck / ((double)(ctx->now_ns - pv->ns) / 1e9) *
                          100.0,
                      NULL);
    const mlprof__tree_threads *th = ctx->threads;
    int listed = th && i < th->npids;
    size_t tfirst = s->ntnext;
    const char *no_wait =
        runq_wait(s, root, pid, listed ? th->tid + th->first[i] : NULL,
                  listed ? th->first[i + 1] - th->first[i] : 0);
    if (no_wait) {
      mlprof__row_put(r, "runq_wait_pct", 0, no_wait);
      mlprof__row_put(r, "runq_wait_before_pct", 0, no_wait);
    } else if (!pv || pv->start != st.start || !pv->has_wait) {
      mlprof__row_put(r, "runq_wait_pct", 0, "first sample");
      mlprof__row_put(r, "runq_wait_before_pct", 0, "first sample");
    } else if (ctx->now_ns <= pv->ns) {
      mlprof__row_put(r, "runq_wait_pct", 0, "no time elapsed");
      mlprof__row_put(r, "runq_wait_before_pct", 0, "no time elapsed");
    } else {
      double dt = (double)(ctx->now_ns - pv->ns), all, before;
      runq_delta(s, pv, tfirst, dt, &all, &before);
      mlprof__row_put(r, "runq_wait_pct", all / dt * 100.0, NULL);
      mlprof__row_put(r, "runq_wait_before_pct", before / dt * 100.0, NULL);
    }
    if (nnext < PROC_MAX)
      s->next[nnext++] =
          (prev_t){pid,    st.start,          ticks, !no_wait, ctx->now_ns,
                   tfirst, s->ntnext - tfirst};
    else
      s->ntnext = tfirst; /* not remembered: nor are its threads */

    /* Kernel threads have no memory lines: those are absent, not 0. */
    unsigned long long v;
    if (field_ull(buf, "VmRSS:", &v) == 0)
      mlprof__row_put(r, "rss_bytes", (double)v * 1024.0, NULL);
    else
      mlprof__row_put(r, "rss_bytes", 0, "no VmRSS in /proc/PID/status");
    if (field_ull(buf, "VmHWM:", &v) == 0)
      mlprof__row_put(r, "peak_rss_bytes", (double)v * 1024.0, NULL);
    else
      mlprof__row_put(r, "peak_rss_bytes", 0, "no VmHWM in /proc/PID/status");
    mlprof__row_put(r, "minor_faults", (double)st.minflt, NULL);
    mlprof__row_put(r, "major_faults", (double)st.majflt, NULL);
    if (field_ull(buf, "voluntary_ctxt_switches:", &v) == 0)
      mlprof__row_put(r, "voluntary_switches", (double)v, NULL);
    else
      mlprof__row_put(r, "voluntary_switches", 0, "not in /proc/PID/status");
    if (field_ull(buf, "nonvoluntary_ctxt_switches:", &v) == 0)
      mlprof__row_put(r, "involuntary_switches", (double)v, NULL);
    else
      mlprof__row_put(r, "involuntary_switches", 0, "not in /proc/PID/status");
    mlprof__row_put(r, "threads", (double)st.threads, NULL);

    snprintf(path, sizeof path, "/proc/%d/io", (int)pid);
    if (mlprof__read_at(root, path, buf, sizeof buf) < 0) {
      const char *why_io = errno_reason(errno);
      mlprof__row_put(r, "read_bytes", 0, why_io);
      mlprof__row_put(r, "write_bytes", 0, why_io);
    } else {
      if (field_ull(buf, "read_bytes:", &v) == 0)
        mlprof__row_put(r, "read_bytes", (double)v, NULL);
      else
        mlprof__row_put(r, "read_bytes", 0, "not in /proc/PID/io");
      if (field_ull(buf, "write_bytes:", &v) == 0)
        mlprof__row_put(r, "write_bytes", (double)v, NULL);
      else
        mlprof__row_put(r, "write_bytes", 0, "not in /proc/PID/io");
    }

    long fds = count_fds(root, pid);
    if (fds < 0)
      mlprof__row_put(r, "open_files", 0, errno_reason(errno));
    else
      mlprof__row_put(r, "open_files", (double)fds, NULL);
    rows++;
  }
  /* Pids not seen this tick are forgotten: pids come and go. */
  prev_t *t = s->prev;
  s->prev = s->next;
  s->next = t;
  s->nprev = nnext;
  tprev_t *tt = s->tprev;
  size_t tcap = s->tprev_cap;
  s->tprev = s->tnext;
  s->tprev_cap = s->tnext_cap;
  s->ntprev = s->ntnext;
  s->tnext = tt;
  s->tnext_cap = tcap;
  s->ntnext = 0;
  return rows;
}

const mlprof__source mlprof__source_proc = {
    .name = "proc",
    .open = proc_open,
    .sample = proc_sample,
    .close = proc_close,
};
