/* The sampler thread: at every tick (absolute times, so it does not drift)
 * it asks each source for rows and hands them to the profile writer. Used in
 * the profiled process (its own process and the system) and by `mlprof run`
 * (the whole process tree of the command, from outside). It reads /proc and
 * /sys in a descriptor table of its own (src/base/fd.c); a source whose
 * library keeps descriptors for the process (NVML) is called in a helper
 * thread that stays in the program's table. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mlprof.h"
#include "sample.h"

#define MAX_PIDS 1024
#define MAX_ROWS (MAX_PIDS + 64)
#define MAX_SOURCES 16
#define MAX_TIDS 16384

/* A thread in the program's descriptor table that runs one call at a time
 * for the sampler (fn NULL: idle). */
typedef struct {
  pthread_t thread;
  int started, quit;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  void (*fn)(void *);
  void *arg;
} shared_runner;

struct mlprof__sampler {
  mlprof__sample_sink sink;
  uint64_t interval_ns;
  pid_t tree; /* sample this process's tree; 0: only the calling process */
  int no_gpu;
  char root[256];
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int stop;
  shared_runner shared;
  void *state[MAX_SOURCES];
  int open[MAX_SOURCES];
  pid_t pids[MAX_PIDS];
  mlprof__row rows[MAX_ROWS];
  /* The threads the tree walk lists, for the sources. */
  pid_t tids[MAX_TIDS];
  size_t first[MAX_PIDS + 1];
  mlprof__tree_threads threads;
  /* Sampling a tree from outside, the sampler runs in mlprof run's own
   * process, where no program code runs to close descriptors: its files
   * stay open from one tick to the next. */
  mlprof__held_files held;
};

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *runner_main(void *arg) {
  shared_runner *r = arg;
  pthread_setname_np(pthread_self(), "mlprof-gpu");
  mlprof__quiet = 1;
  pthread_mutex_lock(&r->lock);
  for (;;) {
    while (!r->fn && !r->quit) pthread_cond_wait(&r->cond, &r->lock);
    if (!r->fn) break;
    void (*fn)(void *) = r->fn;
    pthread_mutex_unlock(&r->lock);
    fn(r->arg);
    pthread_mutex_lock(&r->lock);
    r->fn = NULL;
    pthread_cond_broadcast(&r->cond);
  }
  pthread_mutex_unlock(&r->lock);
  return NULL;
}

/* Starts the runner from a thread still in the program's table (its signals
 * blocked, as the sampler's are). */
static void runner_start(shared_runner *r) {
  pthread_mutex_init(&r->lock, NULL);
  pthread_cond_init(&r->cond, NULL);
  r->started = pthread_create(&r->thread, NULL, runner_main, r) == 0;
}

static void runner_stop(shared_runner *r) {
  if (!r->started) return;
  pthread_mutex_lock(&r->lock);
  r->quit = 1;
  pthread_cond_broadcast(&r->cond);
  pthread_mutex_unlock(&r->lock);
  pthread_join(r->thread, NULL);
  r->started = 0;
}

/* One call of a source, in the runner when the source needs the program's
 * table and the runner is there, else here. */
typedef struct {
  mlprof__sampler *s;
  size_t i;
  int op; /* 0 start, 1 sample, 2 close */
  const mlprof__sample_ctx *ctx;
  char *why;
  size_t len;
  int rc;
} source_call;

static void source_run(void *arg) {
  source_call *c = arg;
  const mlprof__source *src = mlprof__sources[c->i];
  void **state = &c->s->state[c->i];
  if (c->op == 0)
    c->rc = src->start(*state, c->why, c->len);
  else if (c->op == 1)
    c->rc = src->sample(*state, c->ctx, c->s->rows, MAX_ROWS, c->why, c->len);
  else
    src->close(*state);
}

static int source_call_op(mlprof__sampler *s, size_t i, int op,
                          const mlprof__sample_ctx *ctx, char *why,
                          size_t len) {
  source_call c = {s, i, op, ctx, why, len, -1};
  shared_runner *r = &s->shared;
  if (!mlprof__sources[i]->program_fds || !r->started) {
    source_run(&c);
    return c.rc;
  }
  pthread_mutex_lock(&r->lock);
  r->fn = source_run;
  r->arg = &c;
  pthread_cond_broadcast(&r->cond);
  while (r->fn) pthread_cond_wait(&r->cond, &r->lock);
  pthread_mutex_unlock(&r->lock);
  return c.rc;
}

static int gpu_off(const mlprof__sampler *s, const mlprof__source *src) {
  return s->no_gpu && strcmp(src->name, "nvml") == 0;
}

static void open_sources(mlprof__sampler *s) {
  /* The runner must be made while this thread is still in the program's
   * table: a thread shares the table of the thread that creates it. */
  int shared = 0;
  for (size_t i = 0; i < mlprof__nsources && i < MAX_SOURCES; i++)
    shared |=
        mlprof__sources[i]->program_fds && !gpu_off(s, mlprof__sources[i]);
  if (shared && !mlprof__fd_is_private()) runner_start(&s->shared);
  mlprof__fd_private();
  shared = 0;
  for (size_t i = 0; i < mlprof__nsources && i < MAX_SOURCES; i++) {
    const mlprof__source *src = mlprof__sources[i];
    char why[256] = "";
    if (gpu_off(s, src))
      snprintf(why, sizeof why, "GPU sampling switched off (MLPROF_GPU=0)");
    else if (src->program_fds && !s->shared.started && mlprof__fd_is_private())
      /* Its descriptors would be in the sampler's table, not the program's. */
      snprintf(why, sizeof why, "no thread could be started to run it");
    else
      s->open[i] =
          src->open(&s->state[i], s->root, why, sizeof why) == 0 &&
          (!src->start || source_call_op(s, i, 0, NULL, why, sizeof why) == 0);
    shared |= s->open[i] && src->program_fds;
    s->sink.source(s->sink.ctx, src->name, s->open[i], s->open[i] ? "" : why);
  }
  if (!shared) runner_stop(&s->shared); /* no GPU here: no thread kept */
}

static void tick(mlprof__sampler *s, uint64_t n) {
  mlprof__sample_ctx ctx = {.root = s->root, .pids = s->pids, .tick = n};
  if (s->tree) {
    mlprof__read_hold_begin(&s->held);
    s->threads = (mlprof__tree_threads){
        .tid = s->tids, .first = s->first, .cap = MAX_TIDS};
    ctx.npids =
        mlprof__proc_tree(s->root, s->tree, s->pids, MAX_PIDS, &s->threads);
    ctx.threads = &s->threads;
  } else {
    s->pids[0] = getpid();
    ctx.npids = 1;
  }
  uint64_t raw = s->sink.now();
  ctx.now_ns = mono_ns();
  for (size_t i = 0; i < mlprof__nsources && i < MAX_SOURCES; i++) {
    if (!s->open[i]) continue;
    const mlprof__source *src = mlprof__sources[i];
    char why[256] = "";
    int rows = source_call_op(s, i, 1, &ctx, why, sizeof why);
    if (rows < 0) {
      /* Failed for good (a GPU lost): say so once, go on without it. */
      mlprof__warn_once(NULL, "sampling source %s stopped: %s", src->name, why);
      s->sink.source(s->sink.ctx, src->name, 0, why);
      source_call_op(s, i, 2, NULL, NULL, 0);
      s->open[i] = 0;
    } else if (rows > 0) {
      s->sink.rows(s->sink.ctx, raw, s->rows, rows);
    }
  }
  if (s->tree) mlprof__read_hold_end(&s->held);
}

static void *sampler_main(void *arg) {
  mlprof__sampler *s = arg;
  /* Named by itself: naming another thread opens a /proc file in the
   * caller's descriptor table. */
  pthread_setname_np(pthread_self(), "mlprof-sampler");
  mlprof__quiet = 1;
  open_sources(s);
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  pthread_mutex_lock(&s->lock);
  for (uint64_t n = 0; !s->stop; n++) {
    pthread_mutex_unlock(&s->lock);
    tick(s, n);
    pthread_mutex_lock(&s->lock);
    uint64_t at = (uint64_t)next.tv_sec * 1000000000u + (uint64_t)next.tv_nsec +
                  s->interval_ns;
    uint64_t now = mono_ns();
    if (at < now) at = now; /* overran (a stalled /proc read): no burst */
    next.tv_sec = (time_t)(at / 1000000000u);
    next.tv_nsec = (long)(at % 1000000000u);
    while (!s->stop &&
           pthread_cond_timedwait(&s->cond, &s->lock, &next) != ETIMEDOUT) {
    }
  }
  pthread_mutex_unlock(&s->lock);
  for (size_t i = 0; i < mlprof__nsources && i < MAX_SOURCES; i++)
    if (s->open[i]) source_call_op(s, i, 2, NULL, NULL, 0);
  runner_stop(&s->shared);
  mlprof__read_hold_close(&s->held);
  return NULL;
}

int mlprof__sampler_start(mlprof__sampler **out,
                          const mlprof__sample_sink *sink, uint32_t interval_ms,
                          pid_t tree, const char *root, int no_gpu) {
  mlprof__sampler *s = calloc(1, sizeof *s);
  if (!s) return MLPROF_ENOMEM;
  s->sink = *sink;
  s->interval_ns = (uint64_t)interval_ms * 1000000u;
  s->tree = tree;
  s->no_gpu = no_gpu;
  snprintf(s->root, sizeof s->root, "%s", root ? root : "");
  mlprof__cond_init_mono(&s->cond);
  pthread_mutex_init(&s->lock, NULL);
  if (mlprof__thread_start(&s->thread, sampler_main, s) != 0) {
    free(s);
    return MLPROF_ETHREAD;
  }
  *out = s;
  return 0;
}

void mlprof__sampler_stop(mlprof__sampler *s) {
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->lock);
  free(s);
}
