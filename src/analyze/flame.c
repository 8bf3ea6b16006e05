/* The dashboard's stack samples (flame.h).
 *
 * The hot functions resolve each sample's stack and zone and hand it here
 * (their sink) once the profile is read, its step marks with it: each
 * sample is given its step (docs/guide.md, "Filters": those of the
 * profile's thread with the most marks, else its nearest ancestor's) and
 * added to the row of its (node, zone, thread, step), nothing kept per
 * sample but the timeline's selection. While the rows grow
 * past a multiple of their cap, steps are grouped in pairs, and pairs of
 * pairs, so the build stays bounded; at the end the stacks are cut to the
 * largest nodes and the steps grouped further until the rows fit. */
#include "flame.h"

#include <mlprof.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "marks.h"

/* Rows the build holds at most before it groups steps further. */
#define BUILD_ROWS (8 * MLPROF__FLAME_ROWS)
/* The fewest nodes the cut goes down to before rows are left out. */
#define MIN_NODES 64

typedef struct {
  uint32_t tid;
  mlprof__marks m;
} tmarks;

/* Rows by (node, zone, thread, step): two maps pair the four, a third the
 * pairs. */
typedef struct {
  mlprof__flame_row *rows;
  size_t n, cap;
  mlprof__map ab, cd, row;
  uint32_t nab, ncd;
} rowset;

struct mlprof__flame_builder {
  mlprof__flame *out;
  const mlprof__job *job;
  rowset rs;
  size_t profile;
  uint32_t proc;       /* this profile's procs index, MLPROF__NONE: none */
  mlprof__map pthread; /* tid -> threads index, this profile */
  mlprof__map ptm;     /* tid -> index in tm */
  tmarks *tm;
  size_t ntm, tm_cap;
  /* The steps of this profile, looked up at its first sample (the read is
   * over then): the entries (times on the clock of profile src) and for
   * each the marks up to it, MLPROF__NONE for a step end. */
  int ready, src;
  uint64_t *st_t;
  uint32_t *st_k;
  size_t nst, st_cap, st_kcap;
  mlprof__marks *steps; /* per profile: the marks its steps come from */
  size_t procs_cap, threads_cap, marks_cap;
  uint64_t seq; /* samples offered to the marks */
  int uncapped; /* mlprof__flame_uncapped */
  int err;
};

static int fail(mlprof__flame_builder *b) {
  b->err = MLPROF_ENOMEM;
  return MLPROF_ENOMEM;
}

/* ---- rows ---------------------------------------------------------------- */

static uint32_t pair(mlprof__map *m, uint32_t *n, uint32_t x, uint32_t y) {
  uint64_t key = ((uint64_t)x << 32) | y;
  uint32_t i = mlprof__map_get(m, key);
  if (i != MLPROF__NONE) return i;
  if (mlprof__map_put(m, key, *n)) return MLPROF__NONE;
  return (*n)++;
}

/* Adds x's counts to the row of x's key. 0 or MLPROF_ENOMEM. */
static int rows_add(rowset *s, const mlprof__flame_row *x) {
  uint32_t a = pair(&s->ab, &s->nab, x->node, x->zone);
  uint32_t c = pair(&s->cd, &s->ncd, x->thread, x->step);
  if (a == MLPROF__NONE || c == MLPROF__NONE) return MLPROF_ENOMEM;
  uint64_t key = ((uint64_t)a << 32) | c;
  uint32_t i = mlprof__map_get(&s->row, key);
  if (i == MLPROF__NONE) {
    if (mlprof__grow(&s->rows, &s->cap, s->n + 1, sizeof *s->rows) ||
        mlprof__map_put(&s->row, key, (uint32_t)s->n))
      return MLPROF_ENOMEM;
    i = (uint32_t)s->n++;
    s->rows[i] = *x;
    s->rows[i].n = s->rows[i].n_cpu = s->rows[i].wall_ns = s->rows[i].cpu_ns =
        0;
  }
  mlprof__flame_row *r = &s->rows[i];
  r->n += x->n;
  r->n_cpu += x->n_cpu;
  r->wall_ns += x->wall_ns;
  r->cpu_ns += x->cpu_ns;
  return 0;
}

static void rows_free_maps(rowset *s) {
  mlprof__map_clear(&s->ab);
  mlprof__map_clear(&s->cd);
  mlprof__map_clear(&s->row);
}

static void rows_free(rowset *s) {
  rows_free_maps(s);
  free(s->rows);
  memset(s, 0, sizeof *s);
}

/* *to: the n rows of from with their nodes through map (NULL: as they are)
 * and their steps grouped by 2^shift. 0 or MLPROF_ENOMEM (to empty). */
static int regroup(const mlprof__flame_row *from, size_t n, const uint32_t *map,
                   size_t nmap, unsigned shift, rowset *to) {
  memset(to, 0, sizeof *to);
  for (size_t i = 0; i < n; i++) {
    mlprof__flame_row x = from[i];
    if (map && x.node < nmap) x.node = map[x.node];
    if (x.step != MLPROF__NONE) x.step >>= shift;
    if (rows_add(to, &x)) {
      rows_free(to);
      return MLPROF_ENOMEM;
    }
  }
  return 0;
}

/* Groups the build's steps in pairs. 0 or MLPROF_ENOMEM. */
static int coarsen(mlprof__flame_builder *b) {
  rowset s;
  if (regroup(b->rs.rows, b->rs.n, NULL, 0, 1, &s)) return fail(b);
  rows_free(&b->rs);
  b->rs = s;
  b->out->step_width *= 2;
  return 0;
}

/* ---- reading a profile --------------------------------------------------- */

static uint32_t thread_of(mlprof__flame_builder *b, uint32_t tid) {
  uint32_t i = mlprof__map_get(&b->pthread, tid);
  if (i != MLPROF__NONE) return i;
  mlprof__flame *f = b->out;
  if (b->proc == MLPROF__NONE) {
    const mlprof__job_profile *p = &b->job->profiles[b->profile];
    if (mlprof__grow(&f->procs, &b->procs_cap, f->nprocs + 1, sizeof *f->procs))
      return MLPROF__NONE;
    char *name =
        mlprof__dup(p->name ? p->name : "", p->name ? strlen(p->name) : 0);
    if (!name) return MLPROF__NONE;
    f->procs[f->nprocs] = (mlprof__flame_proc){p->pid, p->rank, name};
    b->proc = (uint32_t)f->nprocs++;
  }
  char *name = mlprof__dup("", 0);
  if (!name ||
      mlprof__grow(&f->threads, &b->threads_cap, f->nthreads + 1,
                   sizeof *f->threads) ||
      mlprof__map_put(&b->pthread, tid, (uint32_t)f->nthreads)) {
    free(name);
    return MLPROF__NONE;
  }
  f->threads[f->nthreads] = (mlprof__flame_thread){b->proc, tid, name};
  return (uint32_t)f->nthreads++;
}

static int on_thread(void *ud, uint32_t tid, const char *name, size_t len) {
  mlprof__flame_builder *b = ud;
  uint32_t i = thread_of(b, tid);
  char *s = i == MLPROF__NONE ? NULL : mlprof__dup(name, len);
  if (!s) return fail(b);
  free(b->out->threads[i].name);
  b->out->threads[i].name = s;
  return 0;
}

static int mark(mlprof__flame_builder *b, uint32_t tid, uint64_t t, int end) {
  uint32_t i = mlprof__map_get(&b->ptm, tid);
  if (i == MLPROF__NONE) {
    if (mlprof__grow(&b->tm, &b->tm_cap, b->ntm + 1, sizeof *b->tm) ||
        mlprof__map_put(&b->ptm, tid, (uint32_t)b->ntm))
      return fail(b);
    i = (uint32_t)b->ntm++;
    b->tm[i] = (tmarks){.tid = tid};
  }
  return mlprof__marks_add(&b->tm[i].m, t, end) ? fail(b) : 0;
}

static int on_step(void *ud, uint32_t tid, uint64_t t) {
  return mark(ud, tid, t, 0);
}

static int on_step_end(void *ud, uint32_t tid, uint64_t t) {
  return mark(ud, tid, t, 1);
}

void mlprof__flame_profile_begin(mlprof__flame_builder *b, size_t i,
                                 mlprof__visitor *v) {
  *v = (mlprof__visitor){
      .ud = b, .thread = on_thread, .step = on_step, .step_end = on_step_end};
  b->profile = i;
  b->proc = MLPROF__NONE;
  b->ready = 0;
}

/* Keeps one sample in stride for the timeline, halving the kept ones
 * (every other) when they pass the cap. 0 or MLPROF_ENOMEM. */
static int keep_mark(mlprof__flame_builder *b, uint64_t t,
                     const mlprof__flame_row *s) {
  mlprof__flame *f = b->out;
  if (b->seq++ % f->mark_stride) return 0;
  if (mlprof__grow(&f->marks, &b->marks_cap, f->nmarks + 1, sizeof *f->marks))
    return fail(b);
  f->marks[f->nmarks++] =
      (mlprof__flame_mark){t, s->thread, s->node, s->n_cpu != 0};
  if (f->nmarks > MLPROF__FLAME_MARKS) {
    size_t k = 0;
    for (size_t i = 0; i < f->nmarks; i += 2) f->marks[k++] = f->marks[i];
    f->nmarks = k;
    f->mark_stride *= 2;
  }
  return 0;
}

/* The profile whose step marks profile i's steps are (i's own thread with
 * the most marks, kept in b->steps[i]; else its nearest ancestor's), or -1. */
static int steps_source(mlprof__flame_builder *b, size_t i) {
  size_t best = b->ntm;
  for (size_t k = 0; k < b->ntm; k++)
    if (b->tm[k].m.marks &&
        (best == b->ntm || b->tm[k].m.marks > b->tm[best].m.marks))
      best = k;
  if (best < b->ntm) {
    b->steps[i] = b->tm[best].m;
    memset(&b->tm[best].m, 0, sizeof b->tm[best].m);
    return (int)i;
  }
  int j = b->job->profiles[i].parent;
  for (size_t hops = 0; j >= 0 && hops < b->job->count; hops++) {
    if (b->steps[j].marks) return j;
    j = b->job->profiles[j].parent;
  }
  return -1;
}

/* Looks up this profile's steps (steps_source) and lists their entries.
 * 0 or MLPROF_ENOMEM. */
static int prepare(mlprof__flame_builder *b) {
  b->ready = 1;
  b->nst = 0;
  b->src = steps_source(b, b->profile);
  if (b->src < 0) return 0;
  const mlprof__marks *m = &b->steps[b->src];
  if (m->marks > b->out->steps) b->out->steps = m->marks;
  mlprof__marks_cursor c;
  mlprof__marks_cursor_init(&c, m);
  uint64_t t;
  int end;
  uint32_t k = 0;
  while (mlprof__marks_next(&c, &t, &end)) {
    if (mlprof__grow(&b->st_t, &b->st_cap, b->nst + 1, sizeof *b->st_t) ||
        mlprof__grow(&b->st_k, &b->st_kcap, b->nst + 1, sizeof *b->st_k))
      return fail(b);
    k += !end && k < MLPROF__NONE - 1;
    b->st_t[b->nst] = t;
    b->st_k[b->nst++] = end ? MLPROF__NONE : k;
  }
  return 0;
}

/* The step (from 0) at time t of the steps' clock, MLPROF__NONE in none:
 * that of the last entry at or before t, when it is a mark. */
typedef struct {
  const mlprof__flame_builder *b;
  uint64_t t;
} step_key;

static int step_at_or_before(const void *ctx, size_t i) {
  const step_key *k = ctx;
  return k->b->st_t[i] <= k->t;
}

static uint32_t step_at(const mlprof__flame_builder *b, uint64_t t) {
  size_t lo =
      mlprof__lower_bound(0, b->nst, &(step_key){b, t}, step_at_or_before);
  if (lo == 0 || b->st_k[lo - 1] == MLPROF__NONE) return MLPROF__NONE;
  return b->st_k[lo - 1] - 1;
}

/* The hot functions' sink (hot.h): the sample into its row and, one in
 * mark_stride, onto the timeline. */
static int on_sample(void *ctx, uint32_t tid, uint64_t t, uint32_t node,
                     uint32_t zone, uint32_t flags, uint64_t ns) {
  mlprof__flame_builder *b = ctx;
  mlprof__flame *f = b->out;
  if (!b->ready && prepare(b)) return b->err;
  uint32_t th = thread_of(b, tid);
  if (th == MLPROF__NONE) return fail(b);
  const mlprof__job_profile *p = &b->job->profiles[b->profile];
  uint64_t jt = mlprof__job_time(p, t);
  uint32_t step = MLPROF__NONE;
  if (b->src >= 0) {
    /* On the clock of the profile the steps come from. */
    const mlprof__job_profile *sp = &b->job->profiles[b->src];
    uint64_t st = sp == p ? t : jt > sp->offset_ns ? jt - sp->offset_ns : 0;
    step = step_at(b, st);
    if (step != MLPROF__NONE) step = (uint32_t)(step / f->step_width);
  }
  int cpu = (flags & MLPROF__SAMPLE_ON_CPU) != 0;
  mlprof__flame_row x = {.node = node,
                         .zone = zone,
                         .thread = th,
                         .step = step,
                         .n = 1,
                         .n_cpu = (uint64_t)cpu,
                         .wall_ns = ns,
                         .cpu_ns = cpu ? ns : 0};
  f->samples++;
  if (rows_add(&b->rs, &x) || keep_mark(b, jt, &x)) return fail(b);
  if (!b->uncapped && b->rs.n > BUILD_ROWS && f->step_width < f->steps)
    coarsen(b);
  return b->err;
}

int mlprof__flame_profile_end(mlprof__flame_builder *b) {
  /* A profile without samples keeps its marks for its children. */
  if (!b->ready && !b->err) prepare(b);
  for (size_t i = 0; i < b->ntm; i++) mlprof__marks_free(&b->tm[i].m);
  b->ntm = b->nst = 0;
  b->ready = 0;
  mlprof__map_clear(&b->ptm);
  mlprof__map_clear(&b->pthread);
  return b->err;
}

mlprof__flame_builder *mlprof__flame_begin(mlprof__flame *out,
                                           mlprof__hot_builder *hb,
                                           const mlprof__job *job) {
  memset(out, 0, sizeof *out);
  mlprof__flame_builder *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->steps = calloc(job->count ? job->count : 1, sizeof *b->steps);
  if (!b->steps) {
    free(b);
    return NULL;
  }
  b->out = out;
  b->job = job;
  out->mark_stride = out->step_width = 1;
  out->nodes_cap = MLPROF__FLAME_NODES;
  mlprof__hot_set_sink(hb, on_sample, b);
  return b;
}

/* ---- the caps ------------------------------------------------------------ */

typedef struct {
  uint64_t total;
  uint32_t i;
} ranked;

static int by_total(const void *a, const void *b) {
  const ranked *x = a, *y = b;
  if (x->total != y->total) return x->total > y->total ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

static int by_wall(const void *a, const void *b) {
  const mlprof__flame_row *x = a, *y = b;
  if (x->wall_ns != y->wall_ns) return x->wall_ns > y->wall_ns ? -1 : 1;
  return 0;
}

static int by_key(const void *a, const void *b) {
  const mlprof__flame_row *x = a, *y = b;
  if (x->thread != y->thread) return x->thread < y->thread ? -1 : 1;
  if (x->zone != y->zone) return x->zone < y->zone ? -1 : 1;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  return (x->node > y->node) - (x->node < y->node);
}

static int by_thread_time(const void *a, const void *b) {
  const mlprof__flame_mark *x = a, *y = b;
  if (x->thread != y->thread) return x->thread < y->thread ? -1 : 1;
  return (x->t > y->t) - (x->t < y->t);
}

/* Cuts the stacks to the largest nodes and groups steps until the rows fit
 * (flame.h). Returns 0 or MLPROF_ENOMEM. */
static int cap_rows(mlprof__flame_builder *b, const mlprof__hot *h) {
  mlprof__flame *f = b->out;
  if (b->uncapped) {
    rows_free_maps(&b->rs);
    mlprof__sort(b->rs.rows, b->rs.n, sizeof *b->rs.rows, by_key);
    f->rows = b->rs.rows;
    f->nrows = b->rs.n;
    f->nodes_cap = h->nnodes > UINT32_MAX ? UINT32_MAX : (uint32_t)h->nnodes;
    memset(&b->rs, 0, sizeof b->rs);
    mlprof__sort(f->marks, f->nmarks, sizeof *f->marks, by_thread_time);
    return 0;
  }
  size_t nn = h->nnodes;
  uint64_t *tot = calloc(nn ? nn : 1, sizeof *tot);
  ranked *order = malloc((nn ? nn : 1) * sizeof *order);
  uint32_t *map = malloc((nn ? nn : 1) * sizeof *map);
  uint8_t *keep = malloc(nn ? nn : 1);
  int rc = tot && order && map && keep ? 0 : MLPROF_ENOMEM;
  rowset fit = {0};
  unsigned shift = 0;
  if (!rc) {
    for (size_t i = 0; i < b->rs.n; i++)
      if (b->rs.rows[i].node < nn)
        tot[b->rs.rows[i].node] += b->rs.rows[i].wall_ns;
    /* A parent's index is below its children's (hot.c makes it first). */
    for (size_t i = nn; i-- > 0;)
      if (h->nodes[i].parent != MLPROF__NONE) tot[h->nodes[i].parent] += tot[i];
    for (size_t i = 0; i < nn; i++) order[i] = (ranked){tot[i], (uint32_t)i};
    mlprof__sort(order, nn, sizeof *order, by_total);
  }
  for (size_t cap = MLPROF__FLAME_NODES; !rc; cap /= 2) {
    /* A parent totals at least its child and ranks first on a tie, so the
     * nodes kept hold every ancestor of theirs. */
    memset(keep, 0, nn);
    for (size_t i = 0; i < nn && i < cap && order[i].total; i++)
      keep[order[i].i] = 1;
    for (size_t i = 0; i < nn; i++) {
      uint32_t up = h->nodes[i].parent;
      map[i] = keep[i]              ? (uint32_t)i
               : up == MLPROF__NONE ? MLPROF__FLAME_OTHER
                                    : map[up];
    }
    rows_free(&fit);
    shift = 0;
    rc = regroup(b->rs.rows, b->rs.n, map, nn, shift, &fit);
    while (!rc && fit.n > MLPROF__FLAME_ROWS &&
           (f->step_width << shift) < f->steps) {
      rows_free(&fit);
      rc = regroup(b->rs.rows, b->rs.n, map, nn, ++shift, &fit);
    }
    f->nodes_cap = (uint32_t)cap;
    if (rc || fit.n <= MLPROF__FLAME_ROWS || cap / 2 < MIN_NODES) break;
  }
  if (!rc) {
    for (size_t i = 0; i < b->rs.n; i++) {
      const mlprof__flame_row *x = &b->rs.rows[i];
      if (x->node < nn && map[x->node] != x->node) {
        f->merged += x->n;
        f->merged_ns += x->wall_ns;
      }
    }
    rows_free_maps(&fit);
    if (fit.n > MLPROF__FLAME_ROWS) {
      mlprof__sort(fit.rows, fit.n, sizeof *fit.rows, by_wall);
      for (size_t i = MLPROF__FLAME_ROWS; i < fit.n; i++) {
        f->dropped += fit.rows[i].n;
        f->dropped_ns += fit.rows[i].wall_ns;
      }
      fit.n = MLPROF__FLAME_ROWS;
    }
    mlprof__sort(fit.rows, fit.n, sizeof *fit.rows, by_key);
    f->rows = fit.rows;
    f->nrows = fit.n;
    f->step_width <<= shift;
    for (size_t i = 0; i < f->nmarks; i++)
      if (f->marks[i].node < nn) f->marks[i].node = map[f->marks[i].node];
    mlprof__sort(f->marks, f->nmarks, sizeof *f->marks, by_thread_time);
  } else {
    rows_free(&fit);
  }
  free(tot);
  free(order);
  free(map);
  free(keep);
  return rc;
}

void mlprof__flame_uncapped(mlprof__flame_builder *b) { b->uncapped = 1; }

static void builder_free(mlprof__flame_builder *b) {
  rows_free(&b->rs);
  for (size_t i = 0; i < b->ntm; i++) mlprof__marks_free(&b->tm[i].m);
  free(b->tm);
  free(b->st_t);
  free(b->st_k);
  for (size_t i = 0; i < b->job->count; i++) mlprof__marks_free(&b->steps[i]);
  free(b->steps);
  mlprof__map_clear(&b->ptm);
  mlprof__map_clear(&b->pthread);
  free(b);
}

int mlprof__flame_finish(mlprof__flame_builder *b, const mlprof__hot *h) {
  if (!b) return 0;
  int rc = b->err ? b->err : cap_rows(b, h);
  if (rc) mlprof__flame_free(b->out);
  builder_free(b);
  return rc;
}

void mlprof__flame_abort(mlprof__flame_builder *b) {
  if (!b) return;
  mlprof__flame_free(b->out);
  builder_free(b);
}

void mlprof__flame_free(mlprof__flame *f) {
  free(f->rows);
  for (size_t i = 0; i < f->nprocs; i++) free(f->procs[i].name);
  free(f->procs);
  for (size_t i = 0; i < f->nthreads; i++) free(f->threads[i].name);
  free(f->threads);
  free(f->marks);
  memset(f, 0, sizeof *f);
}
