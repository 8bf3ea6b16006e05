/* The stack sampler: a thread of the library that, hz times a second, asks
 * the registered walker (stack.h) for every Python thread's stack, interns
 * it, reads how much CPU time the thread used since its previous sample
 * (its CPU-time clock, no file) and queues the sample for the writer. It
 * never stops the program's threads: the walker reads their frames as they
 * run. Only with native stacks asked for does it signal one, on a CPU and
 * not blocking the signal, whose handler unwinds itself (native.c).
 *
 * What a tick costs is mostly system calls, so a thread that used no CPU
 * time since its previous sample (asleep, waiting on a lock, for I/O, for
 * the GIL, or for a CPU on a loaded machine) is neither walked again nor its
 * state read: its stack and its state cannot have changed, as only running
 * could change them. Only a thread that ran gets its frames walked, and its
 * state read (/proc/self/task/TID/stat, kept open in the sampler's own
 * descriptor table) unless it holds the GIL or ran nearly all the time
 * since its previous sample (then it is on a CPU). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../format/wire.h"
#include "internal.h"
#include "stack.h"

/* Samples queued past this many are dropped and counted. */
#define QUEUE_MAX (1u << 18)
/* Largest payload one take writes before it leaves the rest for later. */
#define TAKE_LIMIT (1u << 20)

typedef struct {
  uint64_t raw;
  uint32_t tid, stack, flags;
  uint64_t cpu_ns;
} pending;

enum { CPU_KNOWN = 8 }; /* on top of MLPROF__STACK_*: cpu_ns means something */

static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pending *queue;
static size_t nqueue, queue_cap;
static uint64_t n_taken, n_dropped;

/* The sampler thread's view of one thread. */
typedef struct {
  uint32_t tid;
  int stat_fd;   /* its /proc stat, -1 when it cannot be opened */
  int sys_fd;    /* its /proc syscall (GIL waits), -2 until opened */
  int status_fd; /* its /proc status (signal masks), -2 until opened */
  int gil_wait;  /* waited for the GIL at its previous sample */
  int on_cpu;    /* on a CPU (state R) at its previous sample */
  /* Its last Python-only stack and, when native frames were merged into
   * it, the merged stack (0: none). */
  uint32_t py_stack, merged;
  uint64_t cpu_ns, at_ns;
  uint64_t seen;   /* tick it was last seen */
  uint32_t stack;  /* its stack then */
  uint64_t cpu_at; /* the tick when thread_still read cpu_now */
  uint64_t cpu_now;
  /* Its last walked stack, outermost frame first, and the id of each of
   * its prefixes (NULL until it has one): the next stack interns only the
   * frames past what the two share. */
  uint32_t *fr, *node;
  size_t n;
} tstate;

typedef struct {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int stop;
  int native;     /* native frames too */
  int wait_first; /* a forked child's: no sample before one interval */
  uint64_t interval_ns;
  tstate *ts;
  size_t nts, ts_cap;
  uint64_t tick, now_ns;
} sampler;

static sampler *running;
static _Atomic unsigned rate_hz;    /* the running sampler's, for the file */
static uint64_t tick_ns = 10000000; /* a clock tick: sysconf(_SC_CLK_TCK) */
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;

static tstate *tstate_of(sampler *s, uint32_t tid) {
  for (size_t i = 0; i < s->nts; i++)
    if (s->ts[i].tid == tid) return &s->ts[i];
  if (mlprof__grow(&s->ts, &s->ts_cap, s->nts + 1, sizeof *s->ts)) return NULL;
  char stat[64];
  snprintf(stat, sizeof stat, "/proc/self/task/%u/stat", tid);
  s->ts[s->nts] = (tstate){.tid = tid,
                           .stat_fd = open(stat, O_RDONLY | O_CLOEXEC),
                           .sys_fd = -2,
                           .status_fd = -2,
                           .seen = UINT64_MAX,
                           .cpu_at = UINT64_MAX};
  return &s->ts[s->nts++];
}

/* Whether the thread is running or waiting for a CPU (state R): what it
 * does then is work, not waiting; -1 when unknown. *cpu gets its CPU time
 * (utime + stime, in ns of clock ticks), UINT64_MAX when unknown. One read
 * of /proc/self/task/TID/stat. */
static int thread_stat(tstate *t, uint64_t *cpu) {
  char buf[512];
  *cpu = UINT64_MAX;
  if (t->stat_fd < 0) return -1;
  ssize_t n = pread(t->stat_fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = 0;
  /* "tid (comm) S ...": the comm may hold ')' itself; the last one ends it.
   * utime and stime are the 14th and 15th fields, the 12th and 13th after
   * the state. */
  const char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ') return -1;
  int run = p[2] == 'R';
  p += 3;
  for (int field = 0; field < 11 && p; field++) p = strchr(p + 1, ' ');
  if (p) {
    char *end;
    unsigned long long ut = strtoull(p + 1, &end, 10);
    unsigned long long st = strtoull(end, NULL, 10);
    *cpu = (ut + st) * tick_ns;
  }
  return run;
}

/* The CPU time of thread tid of this process in ns, from its CPU-time
 * clock (the kernel's id for a thread's clock: ~tid << 3, per thread,
 * scheduler time, as glibc's pthread_getcpuclockid makes it); UINT64_MAX
 * when it cannot be read (the thread ended). */
static uint64_t thread_cpu(uint32_t tid) {
  clockid_t id = (clockid_t)((~(unsigned)tid << 3) | 4u | 2u);
  struct timespec t;
  if (clock_gettime(id, &t) != 0) return UINT64_MAX;
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* A descriptor of /proc/self/task/TID/NAME kept in *fd (-2: not opened
 * yet, -1: cannot be); reads it whole into buf (cap bytes, NUL-ended).
 * Returns the length, or -1. */
static ssize_t task_read(uint32_t tid, const char *name, int *fd, char *buf,
                         size_t cap) {
  if (*fd == -2) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%u/%s", tid, name);
    *fd = open(path, O_RDONLY | O_CLOEXEC);
  }
  if (*fd < 0) return -1;
  ssize_t n = pread(*fd, buf, cap - 1, 0);
  if (n <= 0) return -1;
  buf[n] = 0;
  return n;
}

/* The GIL's state (the api's interp_set): a thread asleep on a futex in
 * these bytes waits for the GIL. */
static _Atomic uintptr_t gil_lo, gil_len;

void mlprof__stacks_gil_set(const void *gil, size_t len) {
  atomic_store(&gil_len, (uintptr_t)len);
  atomic_store(&gil_lo, (uintptr_t)gil);
}

/* Whether thread t (off a CPU) is in a futex wait on the GIL: the system
 * call it is blocked in, from /proc/self/task/TID/syscall ("NR arg0 ..."),
 * readable for the threads of one's own process. */
static int waits_for_gil(tstate *t) {
  uintptr_t lo = atomic_load(&gil_lo), len = atomic_load(&gil_len);
  char buf[256];
  if (!lo || !len ||
      task_read(t->tid, "syscall", &t->sys_fd, buf, sizeof buf) < 0)
    return 0;
  char *end;
  long nr = strtol(buf, &end, 10);
  if (end == buf || nr != SYS_futex) return 0;
  unsigned long long addr = strtoull(end, NULL, 16);
  return addr >= lo && addr - lo < len;
}

/* Whether the native signal can be sent to thread t: not blocked by it nor
 * still pending there (a program that waits for signals with sigwait must
 * never be handed ours). */
static int may_signal(tstate *t, int sig) {
  char buf[4096];
  if (task_read(t->tid, "status", &t->status_fd, buf, sizeof buf) < 0) return 0;
  unsigned long long bit = 1ull << (sig - 1);
  static const char *const keys[] = {"\nSigPnd:", "\nShdPnd:", "\nSigBlk:"};
  for (size_t i = 0; i < 3; i++) {
    const char *p = strstr(buf, keys[i]);
    if (!p) return 0;
    if (strtoull(p + strlen(keys[i]), NULL, 16) & bit) return 0;
  }
  return 1;
}

/* The sampler whose walker is running (its thread only). */
static sampler *walking;

int mlprof__stacks_thread_still(uint32_t tid) {
  sampler *s = walking;
  tstate *ts = s ? tstate_of(s, tid) : NULL;
  if (!ts) return 0;
  ts->cpu_at = s->tick;
  ts->cpu_now = thread_cpu(tid);
  return ts->seen != UINT64_MAX && ts->stack && ts->cpu_now != UINT64_MAX &&
         ts->cpu_now == ts->cpu_ns;
}

/* The id of t's stack, interning only the frames its previous stack did
 * not share; mlprof__stack_intern's id when ts is NULL or cannot keep it. */
static uint32_t intern_after(tstate *ts, const mlprof__stack_thread *t) {
  size_t n = t->n;
  if (!ts || !n || n > MLPROF__STACK_MAX_DEPTH)
    return mlprof__stack_intern(t->frames, n);
  if (!ts->fr) {
    ts->fr = malloc(2 * MLPROF__STACK_MAX_DEPTH * sizeof *ts->fr);
    if (!ts->fr) return mlprof__stack_intern(t->frames, n);
    ts->node = ts->fr + MLPROF__STACK_MAX_DEPTH;
    ts->n = 0;
  }
  size_t k = 0; /* outermost frames shared with the previous stack */
  while (k < n && k < ts->n && ts->fr[k] == t->frames[n - 1 - k]) k++;
  uint32_t id = k ? ts->node[k - 1] : 0;
  for (size_t i = k; i < n; i++) {
    ts->fr[i] = t->frames[n - 1 - i];
    ts->node[i] = id = mlprof__stack_push(id, ts->fr[i]);
    if (!id) {
      ts->n = 0;
      return 0;
    }
  }
  ts->n = n;
  return id;
}

/* t with native frames merged in (into frames, room for max) when it is
 * on a CPU and its handler answers; t itself otherwise. */
/* Whether t's innermost Python frame is no longer the one its frames were
 * read with (the walker says where to look): a thread that called a Python
 * function or returned from one in the evaluation loop it was in (3.11+
 * does not enter a new one) would get native frames from one place under
 * Python frames from another. */
static int moved(const mlprof__stack_thread *t) {
  const void *now;
  if (!(t->flags & MLPROF__STACK_TOP)) return 0;
  return mlprof__stack_read(&now, t->top_at, sizeof now) != 0 || now != t->top;
}

static mlprof__stack_thread with_native(sampler *s, tstate *ts,
                                        const mlprof__stack_thread *t,
                                        uint32_t *frames, size_t max) {
  static uintptr_t pcs[MLPROF__NATIVE_MAX];
  int sig = mlprof__native_signal();
  if (!sig || !t->n || !t->entry || !may_signal(ts, sig)) return *t;
  uint64_t wait = s->interval_ns / 2 < 5000000u ? s->interval_ns / 2 : 5000000u;
  long n = mlprof__native_capture(t->tid, pcs, MLPROF__NATIVE_MAX, wait);
  if (n <= 0 || moved(t)) return *t;
  mlprof__stack_thread m = *t;
  m.n = mlprof__native_merge(pcs, (size_t)n, t->frames, t->entry, t->n, frames,
                             max);
  if (!m.n) return *t;
  m.frames = frames;
  m.entry = NULL;
  return m;
}

static void on_thread(void *ctx, const mlprof__stack_thread *t) {
  static uint32_t merged[MLPROF__STACK_MAX_DEPTH];
  sampler *s = ctx;
  /* Its own time, once its frames were read: the tick's start may be
   * milliseconds earlier (threads walked before it, native captures), and
   * a zone begun meanwhile would lose the frames it runs. */
  pending p = {mlprof__now(), t->tid, 0,
               t->flags & (MLPROF__STACK_HAS_GIL | MLPROF__STACK_GIL_KNOWN), 0};
  tstate *ts = tstate_of(s, t->tid);
  int r = 0, still = 0;
  uint64_t c = UINT64_MAX;
  if (ts) {
    c = ts->cpu_at == s->tick ? ts->cpu_now : thread_cpu(t->tid);
    /* A thread that used no CPU time since its previous sample is in the
     * state it was in then (only running can change it); one that ran
     * since and holds the GIL runs (it gives the GIL up to wait), and so
     * does one that used nearly all of the time since (nine tenths or
     * more): no need to read their state. */
    int known = c != UINT64_MAX && ts->seen != UINT64_MAX;
    if (known && c > ts->cpu_ns && s->now_ns > ts->at_ns &&
        ((t->flags & MLPROF__STACK_HAS_GIL) ||
         10 * (c - ts->cpu_ns) >= 9 * (s->now_ns - ts->at_ns))) {
      r = 1;
    } else if (!known || c != ts->cpu_ns) {
      uint64_t from_stat;
      r = thread_stat(ts, &from_stat);
      if (c == UINT64_MAX) c = from_stat;
    } else {
      still = 1;
    }
  }
  if (ts && (t->flags & MLPROF__STACK_SAME)) {
    p.stack = ts->stack;
  } else if (ts && s->native && r > 0) {
    uint32_t py = intern_after(ts, t);
    mlprof__stack_thread m =
        with_native(s, ts, t, merged, MLPROF__STACK_MAX_DEPTH);
    if (m.frames == merged) {
      /* A merged stack shares no prefix with a Python-only one: interned
       * whole. */
      p.stack = ts->merged = mlprof__stack_intern(m.frames, m.n);
    } else if (ts->merged && ts->py_stack == py) {
      /* No answer in time (a loaded machine): its Python frames are those
       * of its previous sample, whose native frames stand for this one. */
      p.stack = ts->merged;
    } else {
      p.stack = py;
      ts->merged = 0;
    }
    ts->py_stack = py;
  } else {
    p.stack = intern_after(ts, t);
  }
  if (ts) {
    if (c != UINT64_MAX && ts->seen != UINT64_MAX && c >= ts->cpu_ns &&
        s->now_ns > ts->at_ns) {
      p.cpu_ns = c - ts->cpu_ns;
      p.flags |= CPU_KNOWN;
    }
    /* Its state, else whether it ran for at least half the time since its
     * previous sample. One that did not run since then keeps its state: a
     * busy thread preempted on a loaded machine waits for a CPU (R), on
     * a CPU by that definition, not asleep. */
    if (r > 0 || (still && ts->on_cpu) ||
        (r < 0 && (p.flags & CPU_KNOWN) &&
         2 * p.cpu_ns >= s->now_ns - ts->at_ns))
      p.flags |= MLPROF__STACK_ON_CPU;
    ts->on_cpu = (p.flags & MLPROF__STACK_ON_CPU) != 0;
    /* Waiting for the GIL: in a futex wait on it, asleep or woken and not
     * back on a CPU yet (runnable: a loaded machine's waiters are that
     * often). A thread that did not run since its previous sample is where
     * it was then. */
    if ((p.flags & MLPROF__STACK_GIL_KNOWN) &&
        !(p.flags & MLPROF__STACK_HAS_GIL)) {
      if (ts->seen != UINT64_MAX && c != UINT64_MAX && c == ts->cpu_ns)
        p.flags |= ts->gil_wait ? MLPROF__STACK_GIL_WAIT : 0;
      else if (waits_for_gil(ts))
        p.flags |= MLPROF__STACK_GIL_WAIT;
    }
    ts->gil_wait = (p.flags & MLPROF__STACK_GIL_WAIT) != 0;
    if (c != UINT64_MAX) ts->cpu_ns = c;
    ts->at_ns = s->now_ns;
    ts->seen = s->tick;
    ts->stack = p.stack;
  }
  pthread_mutex_lock(&queue_lock);
  if (nqueue < QUEUE_MAX &&
      !mlprof__grow(&queue, &queue_cap, nqueue + 1, sizeof *queue)) {
    queue[nqueue++] = p;
    n_taken++;
  } else {
    n_dropped++;
  }
  pthread_mutex_unlock(&queue_lock);
}

static void tstate_close(tstate *t) {
  if (t->stat_fd >= 0) close(t->stat_fd);
  if (t->sys_fd >= 0) close(t->sys_fd);
  if (t->status_fd >= 0) close(t->status_fd);
  free(t->fr);
}

/* Forgets the threads not seen for a second (they ended). */
static void sweep(sampler *s, uint64_t keep_ticks) {
  size_t j = 0;
  for (size_t i = 0; i < s->nts; i++) {
    if (s->tick - s->ts[i].seen > keep_ticks && s->ts[i].seen != UINT64_MAX) {
      tstate_close(&s->ts[i]);
      continue;
    }
    s->ts[j++] = s->ts[i];
  }
  s->nts = j;
}

static void *sampler_main(void *arg) {
  sampler *s = arg;
  pthread_setname_np(pthread_self(), "mlprof-stacks");
  mlprof__fd_private();
  long hz = sysconf(_SC_CLK_TCK);
  if (hz > 0) tick_ns = 1000000000u / (uint64_t)hz;
  uint64_t next = mlprof__mono_ns();
  uint64_t keep = 1000000000u / s->interval_ns + 1;
  pthread_mutex_lock(&s->lock);
  while (!s->stop) {
    pthread_mutex_unlock(&s->lock);
    const mlprof__stack_walker *w = mlprof__stack_walker_get();
    if (s->wait_first) {
      s->wait_first = 0;
    } else if (w && w->each && atomic_load(&mlprof__on)) {
      /* A forked child's profile starts on its first event: a sample. */
      if (atomic_load(&mlprof__child_pending)) mlprof__session_child_start();
      s->now_ns = mlprof__mono_ns();
      walking = s;
      w->each(on_thread, s);
      walking = NULL;
      if (++s->tick % keep == 0) sweep(s, keep);
    }
    pthread_mutex_lock(&s->lock);
    next += s->interval_ns;
    uint64_t now = mlprof__mono_ns();
    if (next < now) next = now; /* overran: no burst */
    struct timespec at = {(time_t)(next / 1000000000u),
                          (long)(next % 1000000000u)};
    while (!s->stop &&
           pthread_cond_timedwait(&s->cond, &s->lock, &at) != ETIMEDOUT) {
    }
  }
  pthread_mutex_unlock(&s->lock);
  for (size_t i = 0; i < s->nts; i++) tstate_close(&s->ts[i]);
  free(s->ts);
  return NULL;
}

/* Samples per second the session wants (0: none). The thread is made once
 * both a session wants stacks and a walker is registered, whichever comes
 * last: a program with no Python gets no thread. */
static int want_hz, want_native;
/* What the parent wanted, in a forked child until its session starts. */
static int parent_hz;
/* The next thread made is a forked child's (mlprof__stacks_fork_child). */
static int child_thread;

static int start_locked(void) {
  int hz = want_hz, rc = 0;
  if (hz <= 0 || running || !mlprof__stack_walker_get()) return 0;
  sampler *s = calloc(1, sizeof *s);
  rc = MLPROF_ENOMEM;
  if (!s) goto out;
  s->interval_ns = 1000000000u / (unsigned)hz;
  s->native = want_native && mlprof__native_start() == 0;
  if (want_native && !s->native)
    mlprof__warn_once(NULL, "no native stacks here (%s): Python frames only",
                      mlprof__native_why());
  s->wait_first = child_thread;
  child_thread = 0;
  mlprof__cond_init_mono(&s->cond);
  pthread_mutex_init(&s->lock, NULL);
  int err = mlprof__thread_start(&s->thread, sampler_main, s);
  rc = MLPROF_ETHREAD;
  if (err) {
    if (s->native) mlprof__native_stop();
    free(s);
    goto out;
  }
  running = s;
  atomic_store(&rate_hz, (unsigned)hz);
  rc = 0;
out:
  return rc;
}

int mlprof__stacks_start(int hz, int native) {
  pthread_mutex_lock(&start_lock);
  want_hz = hz <= 0 ? 0 : hz > 10000 ? 10000 : hz;
  want_native = native != 0;
  int rc = start_locked();
  pthread_mutex_unlock(&start_lock);
  return rc;
}

void mlprof__stacks_walker_ready(void) {
  pthread_mutex_lock(&start_lock);
  int rc = start_locked();
  pthread_mutex_unlock(&start_lock);
  if (rc)
    mlprof__warn_once(NULL, "cannot start the stack sampler: %s",
                      mlprof_strerror(rc));
}

void mlprof__stacks_stop(void) {
  pthread_mutex_lock(&start_lock);
  want_hz = 0;
  sampler *s = running;
  running = NULL;
  pthread_mutex_unlock(&start_lock);
  if (!s) return;
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  if (s->native) mlprof__native_stop();
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

void mlprof__stacks_after_fork(void) {
  /* The parent's sampler thread is not here; its memory is left alone (its
   * lock may be held by it). The queue holds the parent's samples. */
  running = NULL;
  parent_hz = want_hz;
  want_hz = 0; /* the child's session asks again when it starts */
  pthread_mutex_init(&start_lock, NULL);
  pthread_mutex_init(&queue_lock, NULL);
  nqueue = 0;
  n_taken = n_dropped = 0;
  mlprof__stack_after_fork();
  mlprof__native_after_fork();
}

void mlprof__stacks_fork_child(void) {
  /* The sampler goes on in the child, and the child's profile starts with
   * its first sample, one interval from now: a child that execs at once (a
   * subprocess with a preexec_fn) leaves no profile of its own. */
  if (parent_hz <= 0 || !atomic_load(&mlprof__child_pending)) return;
  pthread_mutex_lock(&start_lock);
  want_hz = parent_hz;
  child_thread = 1;
  int rc = start_locked();
  child_thread = 0;
  pthread_mutex_unlock(&start_lock);
  if (rc)
    mlprof__warn_once(NULL, "cannot start the stack sampler: %s",
                      mlprof_strerror(rc));
}

void mlprof__stacks_counts(uint64_t *taken, uint64_t *dropped) {
  pthread_mutex_lock(&queue_lock);
  *taken = n_taken;
  *dropped = n_dropped;
  pthread_mutex_unlock(&queue_lock);
}

int mlprof__stacks_take(uint8_t **out, size_t *len, size_t *cap,
                        uint64_t (*to_ns)(void *ctx, uint64_t raw), void *ctx) {
  /* The samples first, then the definitions: every stack they name was
   * made before they were queued. */
  pthread_mutex_lock(&queue_lock);
  size_t n = nqueue;
  pending *q = queue;
  queue = NULL;
  nqueue = queue_cap = 0;
  pthread_mutex_unlock(&queue_lock);
  int rc = mlprof__stacks_defs_take(out, len, cap, TAKE_LIMIT);
  uint64_t ref = 0;
  unsigned hz = atomic_load(&rate_hz);
  if (n && hz && !rc && !mlprof__grow(out, cap, *len + 12, 1)) {
    /* What a sample stands for, before the samples. */
    uint8_t *p = *out + *len;
    *p++ = MLPROF__STK_RATE;
    *len = (size_t)(mlprof__put_uv(p, hz) - *out);
  }
  for (size_t i = 0; i < n && !rc; i++) {
    if (mlprof__grow(out, cap, *len + 60, 1)) {
      rc = MLPROF_ENOMEM;
      break;
    }
    uint8_t *p = *out + *len;
    uint64_t t = to_ns(ctx, q[i].raw);
    *p++ = MLPROF__STK_SAMPLE;
    p = mlprof__put_sv(p, (int64_t)(t - ref));
    ref = t;
    p = mlprof__put_uv(p, q[i].tid);
    p = mlprof__put_uv(p, q[i].stack);
    p = mlprof__put_uv(p, q[i].flags);
    if (q[i].flags & CPU_KNOWN) p = mlprof__put_uv(p, q[i].cpu_ns);
    *len = (size_t)(p - *out);
  }
  free(q);
  return rc;
}
