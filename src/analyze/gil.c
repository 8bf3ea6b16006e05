/* GIL contention (findings.h): in a process whose stack samples say who
 * held the GIL and who waited for it (hot.h, mlprof__hot_gil), threads that
 * spent a large share of their sampled time waiting to take it run by turns
 * instead of in parallel. The finding names them and the functions that
 * held the GIL meanwhile. */
#include <inttypes.h>
#include <mlprof.h>
#include <stdio.h>
#include <string.h>

#include "../base/base.h"
#include "findings.h"

/* A thread contends when it waited for the GIL this share of its time... */
#define WAIT_SHARE 0.2
/* ...and at least this long (a short burst at start-up is no finding). */
#define WAIT_MIN_NS 200000000ull
#define SHOWN 4

static const char rec_gil[] =
    "the threads take turns on the GIL instead of running in parallel: move "
    "CPU-bound Python work to processes (multiprocessing, DataLoader "
    "num_workers > 0), into native code that releases the GIL (NumPy, torch "
    "operators, a C extension with Py_BEGIN_ALLOW_THREADS), or run it on a "
    "free-threaded CPython (3.13t); else fewer Python threads";

static int one(const mlprof__fpass *p, const mlprof__hot_gil *g,
               mlprof__findings *f) {
  const mlprof__hot *h = &p->r->hot;
  size_t n = 0;
  uint64_t wait = 0, wall = 0;
  double worst = 0;
  for (size_t i = 0; i < g->nthreads; i++) {
    const mlprof__hot_gil_thread *t = &g->threads[i];
    double share = t->wall_ns ? (double)t->wait_ns / (double)t->wall_ns : 0;
    if (share < WAIT_SHARE || t->wait_ns < WAIT_MIN_NS) continue;
    n++;
    wait += t->wait_ns;
    wall += t->wall_ns;
    if (share > worst) worst = share;
  }
  if (!n) return 0;
  char threads[384] = "", holders[384] = "", d[32], w[32];
  mlprof__fmt_duration(d, sizeof d, (double)wait);
  mlprof__fmt_duration(w, sizeof w, (double)wall);
  size_t at = 0, shown = 0;
  /* The threads by wait, most first (hot.c sorted them). */
  for (size_t i = 0; i < g->nthreads && shown < SHOWN; i++) {
    const mlprof__hot_gil_thread *t = &g->threads[i];
    double share = t->wall_ns ? (double)t->wait_ns / (double)t->wall_ns : 0;
    if (share < WAIT_SHARE || t->wait_ns < WAIT_MIN_NS) continue;
    int k = snprintf(threads + at, sizeof threads - at, "%s%s%s%u %.0f%%",
                     shown ? ", " : "", t->name[0] ? t->name : "thread ",
                     t->name[0] ? " " : "", (unsigned)t->tid, share * 100);
    if (k > 0 && (size_t)k < sizeof threads - at) at += (size_t)k;
    shown++;
  }
  if (n > shown && at < sizeof threads)
    snprintf(threads + at, sizeof threads - at, " and %zu more", n - shown);
  at = 0;
  for (size_t i = 0; i < g->ntop; i++) {
    const char *fn = "<truncated>", *file = "";
    if (g->top[i].func < h->nfuncs) {
      fn = h->funcs[g->top[i].func].function;
      file = h->funcs[g->top[i].func].file;
    }
    const char *slash = strrchr(file, '/');
    int k = snprintf(
        holders + at, sizeof holders - at, "%s%s (%s:%u) %.0f%%", i ? ", " : "",
        fn, slash ? slash + 1 : file, (unsigned)g->top[i].line,
        g->held_ns ? 100.0 * (double)g->top[i].ns / (double)g->held_ns : 0.0);
    if (k > 0 && (size_t)k < sizeof holders - at) at += (size_t)k;
  }
  mlprof__finding *x =
      mlprof__finding_add(f, "gil_contention", NULL, 0,
                          "GIL contention in process %" PRIu64
                          ": %zu thread%s waited for the "
                          "GIL %s of %s sampled (%s); the GIL's holders ran %s",
                          g->pid, n, n == 1 ? "" : "s", d, w, threads,
                          holders[0] ? holders : "no Python frame");
  if (!x) return MLPROF_ENOMEM;
  x->flagged = "gil";
  double mean = wall ? (double)wait / (double)wall : 0;
  double sev = 100 * mean * 0.8;
  x->severity = sev > 100 ? 100 : sev;
  x->recommendation = rec_gil;
  mlprof__finding_ev(x, "pid", (double)g->pid);
  mlprof__finding_ev(x, "threads_waiting", (double)n);
  mlprof__finding_ev(x, "gil_wait_ns", (double)wait);
  mlprof__finding_ev(x, "threads_wall_ns", (double)wall);
  mlprof__finding_ev(x, "gil_wait_share", mean);
  mlprof__finding_ev(x, "worst_wait_share", worst);
  mlprof__finding_ev(x, "gil_held_ns", (double)g->held_ns);
  if (g->ntop && g->held_ns)
    mlprof__finding_ev(x, "top_holder_share",
                       (double)g->top[0].ns / (double)g->held_ns);
  return 0;
}

int mlprof__gil_find(const mlprof__fpass *p, mlprof__findings *f) {
  int rc = 0;
  for (size_t i = 0; p->r && i < p->r->hot.ngil && !rc; i++)
    rc = one(p, &p->r->hot.gil[i], f);
  return rc;
}
