/* Leaks: memory that grows and keeps growing (docs/findings.md).
 *
 * Each memory series (a process's RSS and GPU memory; a GPU's memory used
 * when no process GPU memory was sampled) is put on an axis of steps (the
 * step marks of the process's own profile, at least 10; a sample between
 * two marks gets a fractional step, one between a step end and the next
 * mark is left out) or else of minutes. Windows of an
 * eighth of the points, moving by half a window, are tested for a trend:
 * Mann-Kendall z >= 3 (about p = 0.001, one-sided) and a Theil-Sen slope at
 * least the threshold. Consecutive growing windows (they overlap) merge into
 * one candidate growth when they cover a quarter of the points or more; when
 * no candidate is a leak, the whole series is one (a slow leak under
 * noise). A candidate is a leak only when growth goes on (leak()):
 * start-up, a one-time allocation and a cache filling up grow, then stop.
 * One finding per leak, never one per window. */
#include <math.h>
#include <mlprof.h>
#include <stdlib.h>
#include <string.h>

#include "findings.h"

#define MB 1e6
#define MAX_POINTS 300 /* per trend test: 45k pairs */
#define Z_MIN 3.0
#define PIECES 8 /* of a growth, for its spread */
/* Without step marks, the least time a growth must last to be told from a
 * process ramping up to its working set (a compiler, a tool that reads its
 * input then exits): both grow until the end. */
#define MIN_SPAN_NO_STEPS_NS 30000000000ull

static int dbl_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double mlprof__median(double *a, size_t n) {
  if (!n) return NAN;
  mlprof__sort(a, n, sizeof *a, dbl_cmp);
  return n % 2 ? a[n / 2] : (a[n / 2 - 1] + a[n / 2]) / 2;
}

/* The i-th of m indices spread evenly over n points. */
static size_t pick(size_t i, size_t m, size_t n) {
  return m < 2 ? 0 : (size_t)((double)i * (double)(n - 1) / (double)(m - 1));
}

double mlprof__theil_sen(const double *x, const double *y, size_t n,
                         size_t max_points) {
  size_t m = n < max_points ? n : max_points;
  if (m < 2) return NAN;
  double *s = malloc(m * (m - 1) / 2 * sizeof *s);
  if (!s) return NAN;
  size_t k = 0;
  for (size_t i = 0; i < m; i++)
    for (size_t j = i + 1; j < m; j++) {
      size_t a = pick(i, m, n), b = pick(j, m, n);
      if (x[b] != x[a]) s[k++] = (y[b] - y[a]) / (x[b] - x[a]);
    }
  double med = mlprof__median(s, k);
  free(s);
  return med;
}

double mlprof__mann_kendall_z(const double *y, size_t n, size_t max_points) {
  size_t m = n < max_points ? n : max_points;
  if (m < 3) return 0;
  double S = 0;
  for (size_t i = 0; i < m; i++)
    for (size_t j = i + 1; j < m; j++) {
      double d = y[pick(j, m, n)] - y[pick(i, m, n)];
      S += (d > 0) - (d < 0);
    }
  /* No tie correction: ties lower the true variance, so z is conservative. */
  double var = (double)m * (double)(m - 1) * (2.0 * (double)m + 5) / 18;
  if (S == 0) return 0;
  return (S - (S > 0 ? 1 : -1)) / sqrt(var);
}

typedef struct {
  double *x;  /* axis: steps or minutes */
  double *tm; /* minutes */
  double *y;  /* MB */
  uint64_t *t;
  size_t n;
} points;

typedef struct {
  double min_slope, min_mb;
  uint64_t min_span_ns; /* the least duration of a leak (0: any) */
} limits;

typedef struct {
  size_t a, b; /* points [a, b) */
  double slope, slope_min, growth, z;
} growth;

static int trend(const points *p, size_t a, size_t b, growth *g) {
  size_t n = b - a;
  g->a = a;
  g->b = b;
  g->slope = mlprof__theil_sen(p->x + a, p->y + a, n, MAX_POINTS);
  g->slope_min = mlprof__theil_sen(p->tm + a, p->y + a, n, MAX_POINTS);
  g->z = mlprof__mann_kendall_z(p->y + a, n, MAX_POINTS);
  g->growth = g->slope * (p->x[b - 1] - p->x[a]);
  return isnan(g->slope) ? -1 : 0;
}

static int grows(const growth *g, const limits *l) {
  return g->z >= Z_MIN && g->slope >= l->min_slope;
}

/* Whether candidate g of p is a leak, its growth then set to what the
 * series shows. Beyond the trend and the thresholds:
 * - it goes on to the end: the last quarter of the series (5 points at
 *   least) still rises at half g's slope or more, so a step or a ramp
 *   followed by a plateau is not a leak;
 * - it is spread: of PIECES equal pieces of g, at least three quarters of
 *   the consecutive medians rise, so one jump is not a leak;
 * - its growth, slope x length, is never more than the series' rise over g
 *   (max - min): a slope cannot claim memory that was never seen;
 * - without step marks, it lasts MIN_SPAN_NO_STEPS_NS or more: a process
 *   ramping up to its working set until it exits grows until the end too. */
static int leak(const points *p, growth *g, const limits *l) {
  if (!grows(g, l) || p->t[g->b - 1] - p->t[g->a] < l->min_span_ns) return 0;
  size_t tail = p->n / 4 > 5 ? p->n / 4 : 5, a = p->n - tail;
  double tail_slope = mlprof__theil_sen(p->x + a, p->y + a, tail, MAX_POINTS);
  if (isnan(tail_slope) || tail_slope < g->slope / 2) return 0;
  size_t n = g->b - g->a, k = n / 2 < PIECES ? n / 2 : PIECES, rises = 0;
  double prev = NAN, piece[MAX_POINTS];
  for (size_t i = 0; i < k; i++) {
    size_t from = g->a + i * n / k, len = g->a + (i + 1) * n / k - from;
    size_t m = len < MAX_POINTS ? len : MAX_POINTS;
    for (size_t j = 0; j < m; j++) piece[j] = p->y[from + pick(j, m, len)];
    double med = mlprof__median(piece, m);
    rises += i && med > prev;
    prev = med;
  }
  if (4 * rises < 3 * (k - 1)) return 0;
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = g->a; i < g->b; i++) {
    lo = fmin(lo, p->y[i]);
    hi = fmax(hi, p->y[i]);
  }
  g->growth = fmin(g->growth, hi - lo);
  return g->growth >= l->min_mb;
}

/* Finds the leaks of p into out (at most max). */
static void find_growths(const points *p, const limits *l, growth *out,
                         size_t *nout, size_t max) {
  *nout = 0;
  size_t n = p->n;
  if (n < 10) return;
  size_t w = n / 8 > 10 ? n / 8 : 10;
  if (n >= 2 * w) {
    size_t stride = w / 2;
    size_t run_a = 0, run_b = 0;
    int in_run = 0;
    for (size_t s = 0;; s += stride) {
      if (s + w > n) s = n - w; /* the last window ends at the last point */
      growth g;
      int up = trend(p, s, s + w, &g) == 0 && grows(&g, l);
      if (up && !in_run) {
        in_run = 1;
        run_a = s;
      }
      if (up) run_b = s + w;
      int last = s + w >= n;
      if ((!up || last) && in_run) {
        in_run = 0;
        growth seg;
        if (run_b - run_a >= n / 4 && *nout < max &&
            trend(p, run_a, run_b, &seg) == 0 && leak(p, &seg, l))
          out[(*nout)++] = seg;
      }
      if (last) break;
    }
  }
  /* One leak, one finding: runs of growing windows cut apart by a window
   * that did not grow (a stall, a burst of noise) are one growth when,
   * taken together, they are a leak. */
  growth joined;
  if (*nout > 1 && trend(p, out[0].a, out[*nout - 1].b, &joined) == 0 &&
      leak(p, &joined, l)) {
    out[0] = joined;
    *nout = 1;
  }
  growth all;
  if (!*nout && trend(p, 0, n, &all) == 0 && leak(p, &all, l))
    out[(*nout)++] = all;
}

/* The job profile of host/pid with the most step marks, or -1. */
static int profile_of(const mlprof__fpass *p, const char *host, uint64_t pid,
                      int any_pid) {
  int best = -1;
  uint64_t most = 0;
  for (size_t i = 0; i < p->job->count; i++) {
    const mlprof__job_profile *jp = &p->job->profiles[i];
    if (strcmp(jp->hostname ? jp->hostname : "", host) != 0) continue;
    if (!any_pid && jp->pid != pid) continue;
    const mlprof__marks *m = mlprof__report_marks(p->r, i);
    uint64_t n = m ? m->marks : 0;
    if (best < 0 || n > most) {
      best = (int)i;
      most = n;
    }
  }
  return best;
}

/* A step axis over a thread's marks, read forward: entry a is the last at
 * or before the time asked, b the one after it (if has_b); k steps end at
 * or before a. */
typedef struct {
  mlprof__marks_cursor c;
  uint64_t a, b, k, last;
  int a_end, b_end, has_a, has_b;
} step_axis;

static void axis_init(step_axis *x, const mlprof__marks *m) {
  memset(x, 0, sizeof *x);
  mlprof__marks_cursor_init(&x->c, m);
  x->has_a = mlprof__marks_next(&x->c, &x->a, &x->a_end);
  x->has_b = x->has_a && mlprof__marks_next(&x->c, &x->b, &x->b_end);
}

/* Step coordinate of job time t into *at: k + the fraction of step k that
 * has passed. 0 when t is in no step (before the first mark, after the last
 * entry, or between a step end and the next mark). Times asked should
 * ascend; an earlier one reads the marks again. */
static int step_at(step_axis *x, const mlprof__marks *m, uint64_t t,
                   double *at) {
  if (t < x->last) axis_init(x, m);
  x->last = t;
  if (!x->has_a || t < x->a) return 0;
  while (x->has_b && x->b <= t) {
    x->k += !x->a_end;
    x->a = x->b;
    x->a_end = x->b_end;
    x->has_b = mlprof__marks_next(&x->c, &x->b, &x->b_end);
  }
  if (t == x->a)
    *at = (double)x->k;
  else if (x->a_end || !x->has_b)
    return 0;
  else
    *at = (double)x->k + (double)(t - x->a) / (double)(x->b - x->a);
  return 1;
}

static int zone_cmp(const void *a, const void *b) {
  double x = ((const mlprof__leak_zone *)a)->mean_change_bytes *
             (double)((const mlprof__leak_zone *)a)->spans;
  double y = ((const mlprof__leak_zone *)b)->mean_change_bytes *
             (double)((const mlprof__leak_zone *)b)->spans;
  return x > y ? -1 : x < y;
}

/* Zones of profile prof whose RSS change is positive in 3 of 4 measured
 * calls or more (5 calls at least), largest growth first, at most 5. */
static int leak_zones(const mlprof__fpass *p, int prof, mlprof__leak *lk) {
  size_t cap = 0;
  for (size_t i = 0; i < p->nrss; i++) {
    const mlprof__rss_acc *a = &p->rss[i];
    if ((int)a->profile != prof || a->spans < 5 || a->sum <= 0 ||
        (double)a->positive < 0.75 * (double)a->spans)
      continue;
    const mlprof__fzone *z = &p->zones[a->zone];
    char *name = mlprof__dup(z->name, z->len);
    if (!name ||
        mlprof__grow(&lk->zones, &cap, lk->nzones + 1, sizeof *lk->zones)) {
      free(name);
      return MLPROF_ENOMEM;
    }
    lk->zones[lk->nzones++] = (mlprof__leak_zone){
        name, z->len, a->spans, a->positive, a->sum / (double)a->spans};
  }
  if (lk->nzones > 1)
    mlprof__sort(lk->zones, lk->nzones, sizeof *lk->zones, zone_cmp);
  while (lk->nzones > 5) free(lk->zones[--lk->nzones].name);
  return 0;
}

static int analyse(const mlprof__fpass *p, mlprof__findings *f, size_t *cap,
                   const mlprof__series *s, int col, const char *measure) {
  const double *v = s->v[col];
  size_t valid = 0;
  for (size_t i = 0; i < s->n; i++) valid += !isnan(v[i]);
  if (valid < 10) return 0;
  int prof =
      profile_of(p, s->hostname, s->id, s->subject != MLPROF__SUBJECT_PROCESS);
  const mlprof__marks *m =
      prof >= 0 ? mlprof__report_marks(p->r, (size_t)prof) : NULL;
  int by_steps = m && m->marks >= 10;
  step_axis axis;
  if (by_steps) axis_init(&axis, m);
  points pt = {0};
  pt.x = malloc(valid * sizeof *pt.x);
  pt.tm = malloc(valid * sizeof *pt.tm);
  pt.y = malloc(valid * sizeof *pt.y);
  pt.t = malloc(valid * sizeof *pt.t);
  int rc = 0;
  if (!pt.x || !pt.tm || !pt.y || !pt.t) rc = MLPROF_ENOMEM;
  for (size_t i = 0; i < s->n && !rc; i++) {
    if (isnan(v[i])) continue;
    pt.tm[pt.n] = (double)s->t[i] / 60e9;
    pt.x[pt.n] = pt.tm[pt.n];
    if (by_steps && !step_at(&axis, m, s->t[i], &pt.x[pt.n])) continue;
    pt.t[pt.n] = s->t[i];
    pt.y[pt.n++] = v[i] / MB;
  }
  growth g[8];
  size_t ng = 0;
  limits l = {
      by_steps ? f->opts.leak_min_mb_per_step : f->opts.leak_min_mb_per_min,
      f->opts.leak_min_mb, by_steps ? 0 : MIN_SPAN_NO_STEPS_NS};
  if (!rc && pt.n >= 10) {
    f->leak_series++;
    find_growths(&pt, &l, g, &ng, sizeof g / sizeof g[0]);
  }
  for (size_t i = 0; i < ng && !rc; i++) {
    if (mlprof__grow(&f->leaks, cap, f->nleaks + 1, sizeof *f->leaks)) {
      rc = MLPROF_ENOMEM;
      break;
    }
    mlprof__leak *lk = &f->leaks[f->nleaks++];
    *lk = (mlprof__leak){
        .measure = measure,
        .subject = s->subject,
        .id = s->id,
        .hostname = s->hostname,
        .process = s->subject == MLPROF__SUBJECT_PROCESS ? prof : -1,
        .by_steps = by_steps,
        .slope_mb_per_step = by_steps ? g[i].slope : NAN,
        .slope_mb_per_min = g[i].slope_min,
        .growth_mb = g[i].growth,
        .trend_z = g[i].z,
        .begin_ns = pt.t[g[i].a],
        .end_ns = pt.t[g[i].b - 1],
        .begin_step = by_steps ? pt.x[g[i].a] : NAN,
        .end_step = by_steps ? pt.x[g[i].b - 1] : NAN,
        .points = g[i].b - g[i].a};
    if (col == MLPROF__COL_RSS && s->subject == MLPROF__SUBJECT_PROCESS &&
        prof >= 0)
      rc = leak_zones(p, prof, lk);
  }
  free(pt.x);
  free(pt.tm);
  free(pt.y);
  free(pt.t);
  return rc;
}

int mlprof__leaks_find(const mlprof__fpass *p, mlprof__findings *f) {
  const mlprof__resources *res = p->res;
  if (!res) return 0;
  size_t cap = 0;
  int rc = 0, proc_gpu = 0;
  for (size_t i = 0; i < res->nseries && !rc; i++) {
    const mlprof__series *s = &res->series[i];
    if (s->subject != MLPROF__SUBJECT_PROCESS) continue;
    rc = analyse(p, f, &cap, s, MLPROF__COL_RSS, "rss_bytes");
    for (size_t k = 0; k < s->n && !proc_gpu; k++)
      proc_gpu = !isnan(s->v[MLPROF__COL_GPU_MEM][k]);
    if (!rc) rc = analyse(p, f, &cap, s, MLPROF__COL_GPU_MEM, "gpu_mem_bytes");
  }
  /* A GPU's own memory only where no process's was sampled: the same
   * growth is not reported twice. */
  for (size_t i = 0; i < res->nseries && !rc && !proc_gpu; i++)
    if (res->series[i].subject == MLPROF__SUBJECT_GPU)
      rc = analyse(p, f, &cap, &res->series[i], MLPROF__COL_GPU_MEM_USED,
                   "gpu_mem_used_bytes");
  return rc;
}
