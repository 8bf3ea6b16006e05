#include "diff.h"

#include <fnmatch.h>
#include <math.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double mlprof__normal_sf(double z) { return 0.5 * erfc(z / sqrt(2.0)); }

double mlprof__median_sorted(const uint64_t *a, size_t n) {
  if (n == 0) return 0;
  if (n % 2) return (double)a[n / 2];
  /* Halves first: the sum of two large durations could overflow. */
  return (double)a[n / 2 - 1] / 2 + (double)a[n / 2] / 2;
}

double mlprof__mwu_min_p(uint64_t n1, uint64_t n2) {
  if (n1 == 0 || n2 == 0) return 1;
  double log_c = lgamma((double)(n1 + n2) + 1) - lgamma((double)n1 + 1) -
                 lgamma((double)n2 + 1);
  double p = 2 * exp(-log_c);
  return p < 1 ? p : 1;
}

double mlprof__mwu_exact_sf(size_t n1, size_t n2, double u) {
  if (n1 > MLPROF__MWU_EXACT_MAX || n2 > MLPROF__MWU_EXACT_MAX) return NAN;
  if (n1 == 0 || n2 == 0) return u <= 0 ? 1 : 0;
  /* f[m][n][k]: orderings of m values of one sample and n of the other with
   * U = k. The last value of the merged order belongs to one sample or the
   * other: f[m][n][k] = f[m-1][n][k-n] + f[m][n-1][k]. Two layers over m,
   * counts as doubles (only sums: no cancellation; C(100,50) ~ 1e29). */
  size_t umax = n1 * n2, row = umax + 1;
  double *prev = calloc((n2 + 1) * row, sizeof *prev);
  double *cur = calloc((n2 + 1) * row, sizeof *cur);
  if (!prev || !cur) {
    free(prev);
    free(cur);
    return NAN;
  }
  for (size_t n = 0; n <= n2; n++) prev[n * row] = 1; /* m = 0: U = 0 */
  for (size_t m = 1; m <= n1; m++) {
    size_t top = m * n2; /* U never exceeds m n */
    memset(cur, 0, (n2 + 1) * row * sizeof *cur);
    cur[0] = 1; /* n = 0 */
    for (size_t n = 1; n <= n2; n++) {
      double *c = cur + n * row, *left = cur + (n - 1) * row,
             *up = prev + n * row;
      for (size_t k = 0; k <= top && k <= m * n; k++)
        c[k] = left[k] + (k >= n ? up[k - n] : 0);
    }
    double *t = prev;
    prev = cur;
    cur = t;
  }
  const double *f = prev + n2 * row;
  double total = 0, tail = 0;
  for (size_t k = 0; k <= umax; k++) {
    total += f[k];
    if ((double)k >= u - 1e-9) tail += f[k];
  }
  free(prev);
  free(cur);
  return tail / total;
}

int mlprof__mwu_sorted(const uint64_t *a, size_t na, const uint64_t *b,
                       size_t nb, mlprof__mwu *out) {
  /* One merge pass over runs of equal values: each value of b in a run
   * counts the values of a below it, and half those equal to it. */
  double u = 0, ties = 0;
  size_t i = 0, j = 0;
  while (i < na || j < nb) {
    uint64_t v = i < na && (j >= nb || a[i] <= b[j]) ? a[i] : b[j];
    size_t below = i, ca = 0, cb = 0;
    while (i < na && a[i] == v) i++, ca++;
    while (j < nb && b[j] == v) j++, cb++;
    u += (double)cb * ((double)below + (double)ca / 2);
    double t = (double)(ca + cb);
    ties += t * t * t - t;
  }
  double n1 = (double)na, n2 = (double)nb, mu = n1 * n2 / 2;
  mlprof__mwu r = {.u = u, .ties = ties};
  if (ties == 0 && na <= MLPROF__MWU_EXACT_MAX && nb <= MLPROF__MWU_EXACT_MAX) {
    double hi = u > mu ? u : n1 * n2 - u; /* the larger of U and n1 n2 - U */
    double sf = mlprof__mwu_exact_sf(na, nb, hi);
    if (isnan(sf)) return MLPROF_ENOMEM;
    r.exact = 1;
    r.p = 2 * sf < 1 ? 2 * sf : 1;
    *out = r;
    return 0;
  }
  double n = n1 + n2;
  double var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)));
  if (!(var > 0)) {
    r.p = 1; /* every value equal: no evidence either way */
    *out = r;
    return 0;
  }
  double dev = fabs(u - mu) - 0.5;
  r.z = (dev > 0 ? dev : 0) / sqrt(var);
  if (u < mu) r.z = -r.z;
  double p = 2 * mlprof__normal_sf(fabs(r.z));
  r.p = p < 1 ? p : 1;
  *out = r;
  return 0;
}

double mlprof__t_p(double t, unsigned df) {
  if (isnan(t) || df == 0) return NAN;
  if (isinf(t)) return 0;
  /* A(t) = P(|T| < t) as a finite series in cos(theta), theta = atan(t /
   * sqrt(df)): odd df sum the odd terms, even df the even ones. */
  double th = atan(fabs(t) / sqrt((double)df)), c2 = cos(th) * cos(th);
  double a;
  if (df % 2) {
    double term = 1, sum = df > 1 ? 1 : 0;
    for (unsigned j = 1; 2 * j + 1 < df; j++)
      term *= c2 * (2.0 * j) / (2.0 * j + 1), sum += term;
    a = 2 / M_PI * (th + sin(th) * cos(th) * sum);
  } else {
    double term = 1, sum = 1;
    for (unsigned j = 1; 2 * j < df; j++)
      term *= c2 * (2.0 * j - 1) / (2.0 * j), sum += term;
    a = sin(th) * sum;
  }
  double p = 1 - a;
  return p < 0 ? 0 : p > 1 ? 1 : p;
}

void mlprof__diff_options_init(mlprof__diff_options *opt) {
  *opt = (mlprof__diff_options){.threshold = 0.05,
                                .alpha = 0.01,
                                .min_count = 5,
                                .contention = {NAN, NAN},
                                .steal = {NAN, NAN},
                                .demand = {NAN, NAN}};
}

const char *mlprof__verdict_name(mlprof__verdict v) {
  static const char *const names[] = {"slower", "faster", "new", "removed",
                                      "unchanged"};
  return v < MLPROF__VERDICT_COUNT ? names[v] : "unknown";
}

int mlprof__name_cmp(const char *a, size_t an, const char *b, size_t bn) {
  int c = memcmp(a, b, an < bn ? an : bn);
  if (c) return c;
  return (an > bn) - (an < bn);
}

static int u64_cmp(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return (a > b) - (a < b);
}

/* Fills the statistics of z that its sorted durations (z->count of them)
 * give: total, min, max, mean, std and percentiles. */
static void stats_of_durations(mlprof__zone_stats *z) {
  uint64_t n = z->count;
  double sum = 0, sq = 0;
  z->total_ns = 0;
  for (uint64_t i = 0; i < n; i++) {
    z->total_ns += z->durations[i];
    sum += (double)z->durations[i];
  }
  if (!n) return;
  z->mean_ns = sum / (double)n;
  for (uint64_t i = 0; i < n; i++) {
    double e = (double)z->durations[i] - z->mean_ns;
    sq += e * e;
  }
  z->std_ns = n > 1 ? sqrt(sq / (double)(n - 1)) : 0;
  z->min_ns = z->durations[0];
  z->max_ns = z->durations[n - 1];
  z->p50_ns = z->durations[mlprof__pct_rank(n, 50) - 1];
  z->p90_ns = z->durations[mlprof__pct_rank(n, 90) - 1];
  z->p95_ns = z->durations[mlprof__pct_rank(n, 95) - 1];
  z->p99_ns = z->durations[mlprof__pct_rank(n, 99) - 1];
}

/* One zone of several runs, refs[0..n) (sorted by run), merged into *z:
 * durations concatenated and sorted (owned; NULL when a run kept none),
 * counts and times summed; each run's median into med[run]. */
static int merge_zone(const mlprof__zone_stats *const *refs, const size_t *run,
                      size_t n, mlprof__zone_stats *z, double *med) {
  *z = *refs[0];
  z->units = NULL, z->nunits = 0, z->durations = NULL;
  z->count = z->self_ns = z->outer_ns = 0;
  int kept = 1;
  for (size_t i = 0; i < n; i++) {
    z->count += refs[i]->count;
    z->self_ns += refs[i]->self_ns;
    z->outer_ns += refs[i]->outer_ns;
    kept &= refs[i]->durations != NULL || refs[i]->count == 0;
    med[run[i]] = refs[i]->durations ? mlprof__median_sorted(refs[i]->durations,
                                                             refs[i]->count)
                                     : NAN;
  }
  if (!kept || !z->count) return 0;
  if (!(z->durations = malloc(z->count * sizeof *z->durations)))
    return MLPROF_ENOMEM;
  uint64_t at = 0;
  for (size_t i = 0; i < n; i++) {
    memcpy(z->durations + at, refs[i]->durations,
           refs[i]->count * sizeof *z->durations);
    at += refs[i]->count;
  }
  mlprof__sort(z->durations, z->count, sizeof *z->durations, u64_cmp);
  stats_of_durations(z);
  return 0;
}

int mlprof__zone_ref_cmp(const void *x, const void *y) {
  const mlprof__zone_ref *a = x, *b = y;
  int c =
      mlprof__name_cmp(a->z->name, a->z->name_len, b->z->name, b->z->name_len);
  if (c) return c;
  return (a->run > b->run) - (a->run < b->run);
}

/* Pools the zones of k runs into *s (mlprof__diff_side). Returns 0 or
 * MLPROF_ENOMEM (then *s holds what to free). */
static int pool_side(const mlprof__report *runs, size_t k,
                     mlprof__diff_side *s) {
  memset(s, 0, sizeof *s);
  s->runs = k;
  s->owned = k > 1;
  size_t nrefs = 0;
  for (size_t r = 0; r < k; r++) nrefs += runs[r].nzones;
  if (!(s->steps = malloc(k * sizeof *s->steps))) return MLPROF_ENOMEM;
  if (!nrefs) return 0;
  mlprof__zone_ref *refs = malloc(nrefs * sizeof *refs);
  const mlprof__zone_stats **zs = malloc(nrefs * sizeof *zs);
  size_t *run = malloc(nrefs * sizeof *run);
  s->zones = calloc(nrefs, sizeof *s->zones);
  s->medians = malloc(nrefs * k * sizeof *s->medians);
  int rc = refs && zs && run && s->zones && s->medians ? 0 : MLPROF_ENOMEM;
  size_t n = 0;
  for (size_t r = 0; r < k && !rc; r++)
    for (size_t i = 0; i < runs[r].nzones; i++)
      refs[n++] = (mlprof__zone_ref){&runs[r].zones[i], r};
  if (!rc) mlprof__sort(refs, n, sizeof *refs, mlprof__zone_ref_cmp);
  for (size_t i = 0; i < n && !rc;) {
    size_t e = i;
    while (e < n &&
           mlprof__zone_ref_cmp(&(mlprof__zone_ref){refs[e].z, 0},
                                &(mlprof__zone_ref){refs[i].z, 0}) == 0) {
      zs[e - i] = refs[e].z;
      run[e - i] = refs[e].run;
      e++;
    }
    double *med = s->medians + s->nzones * k;
    for (size_t r = 0; r < k; r++) med[r] = NAN;
    mlprof__zone_stats *z = &s->zones[s->nzones++];
    if (k == 1) {
      *z = *zs[0]; /* borrows its durations */
      med[0] =
          z->durations ? mlprof__median_sorted(z->durations, z->count) : NAN;
    } else {
      rc = merge_zone(zs, run, e - i, z, med);
    }
    i = e;
  }
  free(refs);
  free(zs);
  free(run);
  return rc;
}

void mlprof__diff_side_free(mlprof__diff_side *s) {
  for (size_t i = 0; s->owned && i < s->nzones; i++)
    free(s->zones[i].durations);
  free(s->zones);
  free(s->medians);
  free(s->steps);
  memset(s, 0, sizeof *s);
}

int mlprof__diff_pool(const mlprof__report *runs, size_t k,
                      mlprof__diff_side *s) {
  int rc = pool_side(runs, k, s);
  if (rc) mlprof__diff_side_free(s);
  return rc;
}

/* The between-run test (diff.h) of BASE's run medians mb[0..kb) against
 * NEW's mn[0..kn) (NAN: a run without the zone) into z. */
static void between_runs(mlprof__diff_zone *z, const double *mb, size_t kb,
                         const double *mn, size_t kn) {
  double sum[2] = {0, 0}, sq[2] = {0, 0};
  size_t n[2] = {0, 0};
  const double *m[2] = {mb, mn};
  size_t k[2] = {kb, kn};
  z->runs_p = z->runs_spread = NAN;
  for (int s = 0; s < 2; s++)
    for (size_t r = 0; r < k[s]; r++)
      if (m[s][r] > 0 && isfinite(m[s][r])) n[s]++, sum[s] += log(m[s][r]);
  z->runs[0] = n[0], z->runs[1] = n[1];
  if (!n[0] || !n[1] || n[0] + n[1] < 3) return;
  for (int s = 0; s < 2; s++)
    for (size_t r = 0; r < k[s]; r++)
      if (m[s][r] > 0 && isfinite(m[s][r])) {
        double e = log(m[s][r]) - sum[s] / (double)n[s];
        sq[s] += e * e;
      }
  unsigned df = (unsigned)(n[0] + n[1] - 2);
  double var = (sq[0] + sq[1]) / df;
  double diff = sum[1] / (double)n[1] - sum[0] / (double)n[0];
  double se = sqrt(var * (1.0 / (double)n[0] + 1.0 / (double)n[1]));
  z->runs_spread = expm1(sqrt(var));
  z->runs_p = se > 0 ? mlprof__t_p(diff / se, df) : diff != 0 ? 0 : 1;
  if ((z->verdict == MLPROF__VERDICT_SLOWER ||
       z->verdict == MLPROF__VERDICT_FASTER) &&
      z->runs_p > MLPROF__RUNS_ALPHA) {
    z->verdict = MLPROF__VERDICT_UNCHANGED;
    z->runs_vary = 1;
  }
}

int mlprof__diff_selected(const mlprof__diff_options *opt, const char *name) {
  if (!opt->nzones) return 1;
  for (size_t i = 0; i < opt->nzones; i++)
    if (fnmatch(opt->zones[i], name, 0) == 0) return 1;
  return 0;
}

static double abs_log_ratio(const mlprof__diff_zone *z) {
  if (isnan(z->ratio)) return -1;
  if (z->ratio <= 0 || isinf(z->ratio)) return INFINITY;
  return fabs(log(z->ratio));
}

static int diff_zone_cmp(const void *x, const void *y) {
  const mlprof__diff_zone *a = x, *b = y;
  if (a->verdict != b->verdict) return a->verdict < b->verdict ? -1 : 1;
  double ea = abs_log_ratio(a), eb = abs_log_ratio(b);
  if (ea != eb) return ea > eb ? -1 : 1;
  if (a->verdict == MLPROF__VERDICT_NEW ||
      a->verdict == MLPROF__VERDICT_REMOVED) {
    uint64_t ta = (a->base ? a->base : a->next)->total_ns,
             tb = (b->base ? b->base : b->next)->total_ns;
    if (ta != tb) return ta > tb ? -1 : 1;
  }
  return mlprof__name_cmp(a->name, a->name_len, b->name, b->name_len);
}

/* The rule of docs/guide.md: slower (faster) when the test is significant
 * at alpha, U is above (below) its null mean and the ratio of medians
 * beyond 1 + threshold (1 - threshold). */
static mlprof__verdict rule(double p, double ratio, int up, int down,
                            const mlprof__diff_options *opt) {
  if (p > opt->alpha) return MLPROF__VERDICT_UNCHANGED;
  if (ratio > 1 + opt->threshold && up) return MLPROF__VERDICT_SLOWER;
  if (ratio < 1 - opt->threshold && down) return MLPROF__VERDICT_FASTER;
  return MLPROF__VERDICT_UNCHANGED;
}

static mlprof__verdict verdict(const mlprof__mwu *t, double ratio, uint64_t nb,
                               uint64_t nn, const mlprof__diff_options *opt) {
  double half = (double)nb * (double)nn / 2;
  return rule(t->p, ratio, t->u > half, t->u < half, opt);
}

/* The verdict of a zone present in both runs. */
static int judge(mlprof__diff_zone *z, const mlprof__diff_options *opt) {
  const mlprof__zone_stats *b = z->base, *n = z->next;
  z->median_base = mlprof__median_sorted(b->durations, b->count);
  z->median_new = mlprof__median_sorted(n->durations, n->count);
  if (z->median_base > 0)
    z->ratio = z->median_new / z->median_base;
  else
    z->ratio = z->median_new > 0 ? INFINITY : 1;
  z->verdict = MLPROF__VERDICT_UNCHANGED;
  if (!b->durations || !n->durations) return 0; /* not kept: no test */
  int rc = mlprof__mwu_sorted(b->durations, b->count, n->durations, n->count,
                              &z->test);
  if (rc) return rc;
  z->tested = 1;
  if (b->count < opt->min_count || n->count < opt->min_count ||
      mlprof__mwu_min_p(b->count, n->count) > opt->alpha) {
    z->too_few = 1;
    return 0;
  }
  z->verdict = verdict(&z->test, z->ratio, b->count, n->count, opt);
  return 0;
}

/* ---- the uniform shift (diff.h) ------------------------------------------ */

static int double_cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* The q-quantile of n >= 1 sorted values, interpolated linearly between the
 * two nearest (numpy's default). */
static double quantile_sorted(const double *v, size_t n, double q) {
  double pos = q * (double)(n - 1);
  size_t i = (size_t)pos;
  if (i + 1 >= n) return v[n - 1];
  return v[i] + (pos - (double)i) * (v[i + 1] - v[i]);
}

/* The verdict of z against an expected ratio (a common shift, or what the
 * machine's contention explains): BASE's durations scaled by it against
 * NEW's, by the rule of judge(); the ratio beyond it in *beyond, the test in
 * *t, the verdict in *out. Returns 0 or MLPROF_ENOMEM. */
static int judge_against(const mlprof__diff_zone *z, double common,
                         const mlprof__diff_options *opt, double *beyond,
                         mlprof__mwu *t, mlprof__verdict *out) {
  const mlprof__zone_stats *b = z->base, *n = z->next;
  uint64_t *scaled = malloc(b->count * sizeof *scaled);
  if (!scaled) return MLPROF_ENOMEM;
  /* Scaling keeps the order: the scaled durations are sorted too. */
  for (size_t i = 0; i < b->count; i++) {
    double v = (double)b->durations[i] * common;
    scaled[i] = v < 1.8e19 ? (uint64_t)llround(v) : UINT64_MAX;
  }
  int rc = mlprof__mwu_sorted(scaled, b->count, n->durations, n->count, t);
  free(scaled);
  if (rc) return rc;
  *beyond = z->ratio / common;
  *out = verdict(t, *beyond, b->count, n->count, opt);
  return 0;
}

static int judge_shift(mlprof__diff_zone *z, double common,
                       const mlprof__diff_options *opt) {
  return judge_against(z, common, opt, &z->shift_ratio, &z->shift_test,
                       &z->shift_verdict);
}

/* The uniform shift as the machine's (diff.h): each slower or faster
 * verdict of a zone that moved with the shift, and of the step and the time
 * per unit of work when they did too, is explained by it. */
static int explain_shift(mlprof__diff *d, const mlprof__diff_options *opt) {
  mlprof__diff_shift *s = &d->shift;
  if (!s->detected) return 0;
  for (size_t i = 0; i <= d->nzones + 1; i++) {
    mlprof__diff_zone *z = i < d->nzones    ? &d->zones[i]
                           : i == d->nzones ? &d->step
                                            : &d->per_unit;
    if ((i == d->nzones && !d->has_step) ||
        (i == d->nzones + 1 && !d->has_unit) ||
        (z->verdict != MLPROF__VERDICT_SLOWER &&
         z->verdict != MLPROF__VERDICT_FASTER))
      continue;
    if (i >= d->nzones) {
      int rc = judge_shift(z, s->ratio, opt);
      if (rc) return rc;
    } else if (!z->in_shift) {
      continue;
    }
    /* Moving less than the shift the same way, or the other way, is no
     * regression either: only beyond it is the code's. */
    if (z->shift_verdict == z->verdict) continue;
    z->machine_explains = 1;
    z->explained_by = MLPROF__EXPLAINED_SHIFT;
    s->explained++;
  }
  return 0;
}

/* The machine (mlprof__diff.machine): when NEW's run waited for a CPU
 * markedly more than BASE's, each slower zone and the step are judged
 * once more against the slowdown that waiting explains. */
static int judge_machine(mlprof__diff *d, const mlprof__diff_options *opt) {
  mlprof__diff_machine *m = &d->machine;
  m->base = opt->contention[0];
  m->next = opt->contention[1];
  m->steal_base = opt->steal[0];
  m->steal_next = opt->steal[1];
  m->factor = m->expected = NAN;
  int wait = !isnan(m->base) && !isnan(m->next) && m->next < 1;
  int steal =
      !isnan(m->steal_base) && !isnan(m->steal_next) && m->steal_next < 1;
  if (!wait && !steal) return 0;
  double cb = wait ? m->base : 0, cn = wait ? m->next : 0;
  double sb = steal ? m->steal_base : 0, sn = steal ? m->steal_next : 0;
  m->factor = (1 - cb) * (1 - sb) / ((1 - cn) * (1 - sn));
  m->demand = isnan(opt->demand[1]) ? 1 : fmin(1, fmax(0, opt->demand[1]));
  m->expected = 1 + m->demand * (m->factor - 1);
  m->slower = (cn - cb >= MLPROF__MACHINE_MIN_WAIT ||
               sn - sb >= MLPROF__MACHINE_MIN_WAIT) &&
              m->expected - 1 >= MLPROF__MACHINE_MIN_CHANGE;
  /* The factor is a whole run's average over coarse samples: a zone is
   * beyond it only by MLPROF__MACHINE_TOLERANCE at least. */
  mlprof__diff_options wide = *opt;
  if (wide.threshold < MLPROF__MACHINE_TOLERANCE)
    wide.threshold = MLPROF__MACHINE_TOLERANCE;
  for (size_t i = 0; m->slower && i <= d->nzones + 1; i++) {
    mlprof__diff_zone *z = i < d->nzones    ? &d->zones[i]
                           : i == d->nzones ? &d->step
                                            : &d->per_unit;
    if (z->verdict != MLPROF__VERDICT_SLOWER || z->machine_explains ||
        (i == d->nzones && !d->has_step) ||
        (i == d->nzones + 1 && !d->has_unit))
      continue;
    double beyond;
    mlprof__mwu t;
    mlprof__verdict v;
    int rc = judge_against(z, m->expected, &wide, &beyond, &t, &v);
    if (rc) return rc;
    if (v == MLPROF__VERDICT_SLOWER) continue;
    z->machine_explains = 1;
    z->explained_by = MLPROF__EXPLAINED_LOAD;
    m->explained++;
  }
  return 0;
}

/* Whether z moved significantly the way of the log ratio m (the test, U
 * on that side of its null mean) by about as much: within tol of m. */
static int agrees(const mlprof__diff_zone *z, double m, double tol,
                  const mlprof__diff_options *opt) {
  double l = log(z->ratio);
  double half = (double)z->base->count * (double)z->next->count / 2;
  int up = m > 0 && l > 0 && z->test.u > half;
  int down = m < 0 && l < 0 && z->test.u < half;
  return (up || down) && z->test.p <= opt->alpha && fabs(l - m) <= tol;
}

/* Looks for a uniform shift over the judged zones. Returns 0 or
 * MLPROF_ENOMEM. */
static int find_shift(mlprof__diff *d, const mlprof__diff_options *opt) {
  mlprof__diff_shift *s = &d->shift;
  *s = (mlprof__diff_shift){.ratio = NAN, .spread = NAN};
  for (size_t i = 0; i < d->nzones; i++) {
    mlprof__diff_zone *z = &d->zones[i];
    z->shift_ratio = NAN;
    z->shift_verdict = MLPROF__VERDICT_UNCHANGED;
    z->in_shift =
        z->tested && !z->too_few && isfinite(z->ratio) && z->ratio > 0;
    s->zones += (size_t)z->in_shift;
  }
  if (s->zones < MLPROF__SHIFT_MIN_ZONES) return 0;
  double *l = malloc(s->zones * sizeof *l);
  if (!l) return MLPROF_ENOMEM;
  size_t n = 0;
  for (size_t i = 0; i < d->nzones; i++)
    if (d->zones[i].in_shift) l[n++] = log(d->zones[i].ratio);
  mlprof__sort(l, n, sizeof *l, double_cmp);
  double m0 = quantile_sorted(l, n, 0.5);
  /* The zones that moved with the median one; the common shift and its
   * spread are theirs, so the zones beyond it do not blur them. */
  double tol = log1p(fmax(opt->threshold, MLPROF__SHIFT_MIN_CHANGE));
  n = 0;
  for (size_t i = 0; i < d->nzones; i++) {
    const mlprof__diff_zone *z = &d->zones[i];
    if (z->in_shift && agrees(z, m0, tol, opt)) l[n++] = log(z->ratio);
  }
  s->agreeing = n;
  double m = m0, iqr = NAN;
  if (n) {
    mlprof__sort(l, n, sizeof *l, double_cmp);
    m = quantile_sorted(l, n, 0.5);
    iqr = quantile_sorted(l, n, 0.75) - quantile_sorted(l, n, 0.25);
  }
  free(l);
  s->ratio = exp(m);
  s->spread = expm1(iqr);
  s->detected =
      (double)s->agreeing >= MLPROF__SHIFT_AGREE * (double)s->zones &&
      iqr < MLPROF__SHIFT_MAX_SPREAD &&
      fabs(s->ratio - 1) >= fmax(MLPROF__SHIFT_MIN_CHANGE, opt->threshold / 2);
  if (!s->detected) return 0;
  for (size_t i = 0; i < d->nzones; i++) {
    mlprof__diff_zone *z = &d->zones[i];
    if (!z->in_shift) continue;
    int rc = judge_shift(z, s->ratio, opt);
    if (rc) return rc;
    s->deviating += z->shift_verdict != MLPROF__VERDICT_UNCHANGED;
  }
  return 0;
}

int mlprof__step_intervals(const mlprof__report *r, uint64_t **out, size_t *n) {
  size_t steps = 0;
  *out = NULL;
  *n = 0;
  for (size_t i = 0; i < r->nprocs; i++) {
    const mlprof__marks *m = mlprof__report_marks(r, i);
    if (m) steps += m->steps;
  }
  if (!steps) return 0;
  uint64_t *v = malloc(steps * sizeof *v);
  if (!v) return MLPROF_ENOMEM;
  for (size_t i = 0; i < r->nprocs; i++) {
    const mlprof__marks *m = mlprof__report_marks(r, i);
    if (!m) continue;
    mlprof__marks_cursor c;
    mlprof__marks_cursor_init(&c, m);
    uint64_t t, prev = 0, k = 0;
    int end, open = 0;
    while (mlprof__marks_next(&c, &t, &end) && k < m->steps) {
      if (open) v[(*n)++] = t - prev, k++;
      open = !end;
      prev = t;
    }
  }
  mlprof__sort(v, *n, sizeof *v, u64_cmp);
  *out = v;
  return 0;
}

void mlprof__median_interval(const uint64_t *a, size_t n, double *lo,
                             double *hi) {
  double h = 1.96 * sqrt((double)n) / 2;
  double l = floor((double)n / 2 - h), u = ceil((double)n / 2 + h) + 1;
  size_t li = l < 1 ? 1 : (size_t)l, ui = u > (double)n ? n : (size_t)u;
  *lo = (double)a[li - 1];
  *hi = (double)a[ui - 1];
}

/* The step intervals of each of the k runs r[0..k) (mlprof__step_intervals:
 * a run of several processes, rounds or ranks, is judged on all its steps,
 * not on one process's) into *z: durations sorted (owned), count, total,
 * mean and p99; their step marks into *marks; each run's median interval
 * into med[run] (NAN: none). Returns 0 (count 0 when no run has a step) or
 * MLPROF_ENOMEM. */
static int step_side(const mlprof__report *r, size_t k, mlprof__zone_stats *z,
                     uint64_t *marks, double *med) {
  memset(z, 0, sizeof *z);
  *marks = 0;
  for (size_t run = 0; run < k; run++) {
    med[run] = NAN;
    for (size_t i = 0; i < r[run].nprocs; i++) {
      const mlprof__marks *m = mlprof__report_marks(&r[run], i);
      if (m) *marks += m->marks;
    }
    uint64_t *v;
    size_t n;
    if (mlprof__step_intervals(&r[run], &v, &n)) return MLPROF_ENOMEM;
    if (!n) continue;
    uint64_t *grown = realloc(z->durations, (z->count + n) * sizeof *grown);
    if (!grown) {
      free(v);
      return MLPROF_ENOMEM;
    }
    z->durations = grown;
    memcpy(z->durations + z->count, v, n * sizeof *v);
    z->count += n;
    med[run] = mlprof__median_sorted(v, n);
    free(v);
  }
  if (!z->count) return 0;
  mlprof__sort(z->durations, z->count, sizeof *z->durations, u64_cmp);
  for (size_t i = 0; i < z->count; i++) z->total_ns += z->durations[i];
  z->mean_ns = (double)z->total_ns / (double)z->count;
  z->p99_ns = z->durations[mlprof__pct_rank(z->count, 99) - 1];
  return 0;
}

/* The step of both sides, judged as a zone (mlprof__diff.step). */
static int judge_step(const mlprof__report *base, const mlprof__report *next,
                      const mlprof__diff_options *opt, mlprof__diff *d) {
  mlprof__diff_side *sb = &d->side[0], *sn = &d->side[1];
  int rc =
      step_side(base, sb->runs, &d->step_side[0], &d->step_marks[0], sb->steps);
  if (!rc)
    rc = step_side(next, sn->runs, &d->step_side[1], &d->step_marks[1],
                   sn->steps);
  if (rc || !d->step_side[0].count || !d->step_side[1].count) return rc;
  d->has_step = 1;
  d->step = (mlprof__diff_zone){.name = "step",
                                .name_len = 4,
                                .base = &d->step_side[0],
                                .next = &d->step_side[1]};
  rc = judge(&d->step, opt);
  if (!rc) between_runs(&d->step, sb->steps, sb->runs, sn->steps, sn->runs);
  return rc;
}

/* The total of unit name over the k runs r[0..k), 0 when a run has none. */
static uint64_t unit_total(const mlprof__report *r, size_t k,
                           const char *name) {
  uint64_t sum = 0;
  for (size_t run = 0; run < k; run++) {
    uint64_t one = 0;
    for (size_t i = 0; i < r[run].nunits; i++)
      if (strcmp(r[run].units[i].name, name) == 0) one = r[run].units[i].total;
    if (!one) return 0;
    sum += one;
  }
  return sum;
}

/* The step's time per unit of work (mlprof__diff.per_unit), after
 * judge_step. */
static int judge_unit(const mlprof__report *base, const mlprof__report *next,
                      const mlprof__diff_options *opt, mlprof__diff *d) {
  if (!d->has_step) return 0;
  size_t kb = d->side[0].runs, kn = d->side[1].runs;
  const char *unit = NULL;
  for (size_t k = 0; k < base->nunits + 2 && !unit; k++) {
    const char *u = k == 0   ? "samples"
                    : k == 1 ? "tokens"
                             : base->units[k - 2].name;
    if (unit_total(base, kb, u) && unit_total(next, kn, u)) unit = u;
  }
  if (!unit) return 0;
  const mlprof__report *r[2] = {base, next};
  size_t runs[2] = {kb, kn};
  double ns_a_unit = INFINITY;
  for (int i = 0; i < 2; i++) {
    d->work[i] =
        (double)unit_total(r[i], runs[i], unit) / (double)d->step_marks[i];
    double x = d->step_side[i].mean_ns / d->work[i];
    if (x < ns_a_unit) ns_a_unit = x;
  }
  d->unit_scale = 1;
  while (ns_a_unit * d->unit_scale < 1e6 && d->unit_scale < 1e9)
    d->unit_scale *= 10;
  for (int i = 0; i < 2; i++) {
    const mlprof__zone_stats *st = &d->step_side[i];
    mlprof__zone_stats *z = &d->unit_side[i];
    *z = (mlprof__zone_stats){.count = st->count};
    if (!(z->durations = malloc(st->count * sizeof *z->durations)))
      return MLPROF_ENOMEM;
    double f = d->unit_scale / d->work[i];
    for (size_t k = 0; k < st->count; k++) {
      z->durations[k] = (uint64_t)llround((double)st->durations[k] * f);
      z->total_ns += z->durations[k];
    }
    z->mean_ns = (double)z->total_ns / (double)z->count;
    z->p99_ns = z->durations[mlprof__pct_rank(z->count, 99) - 1];
  }
  for (size_t k = 0; k < base->nunits; k++)
    if (strcmp(base->units[k].name, unit) == 0) d->unit = base->units[k].name;
  double lo = fmin(d->work[0], d->work[1]), hi = fmax(d->work[0], d->work[1]);
  d->work_differs = hi > lo * 1.01;
  d->has_unit = 1;
  d->per_unit = (mlprof__diff_zone){.name = "step per unit",
                                    .name_len = 13,
                                    .base = &d->unit_side[0],
                                    .next = &d->unit_side[1]};
  int rc = judge(&d->per_unit, opt);
  if (rc) return rc;
  /* Each run's median step over its side's work a step: the step's
   * between-run test, each side's values scaled alike. */
  double *per[2] = {malloc(kb * sizeof(double)), malloc(kn * sizeof(double))};
  if (!per[0] || !per[1]) rc = MLPROF_ENOMEM;
  for (int i = 0; i < 2 && !rc; i++)
    for (size_t run = 0; run < runs[i]; run++)
      per[i][run] = d->side[i].steps[run] * d->unit_scale / d->work[i];
  if (!rc) between_runs(&d->per_unit, per[0], kb, per[1], kn);
  free(per[0]);
  free(per[1]);
  return rc;
}

/* ---- functions (mlprof__diff_func) --------------------------------------- */

typedef struct {
  const char *file, *function;
  uint32_t line;     /* its first line: NEW's where NEW has it */
  double tot[2];     /* self time (ns) in each run */
  double samples[2]; /* the samples it was innermost in, in each run */
  uint64_t *vals[2]; /* per step, when per step */
  uint32_t at;       /* its index before sorting */
} fentry;

typedef struct {
  fentry *e;
  size_t n, cap;
  mlprof__map ix; /* hash of file and function -> first entry of it */
} fset;

/* The entry of (file, function), added if new; MLPROF__NONE when out of
 * memory. Files are matched by their last component: two runs of one
 * script from two checkouts or environments are the same code. */
static uint32_t fentry_of(fset *s, const char *path, const char *function) {
  const char *file = strrchr(path, '/');
  file = file ? file + 1 : path;
  uint64_t h = mlprof__hash(file, strlen(file) + 1, MLPROF__HASH_START);
  h = mlprof__hash(function, strlen(function), h);
  for (;; h++) {
    uint32_t at = mlprof__map_get(&s->ix, h);
    if (at == MLPROF__NONE) break;
    if (!strcmp(s->e[at].file, file) && !strcmp(s->e[at].function, function))
      return at;
  }
  if (s->n >= MLPROF__NONE - 1 ||
      mlprof__grow(&s->e, &s->cap, s->n + 1, sizeof *s->e) ||
      mlprof__map_put(&s->ix, h, (uint32_t)s->n))
    return MLPROF__NONE;
  s->e[s->n] = (fentry){.file = file, .function = function};
  return (uint32_t)s->n++;
}

static int fentry_cmp(const void *x, const void *y) {
  const fentry *a = x, *b = y;
  double ma = fmax(a->tot[0], a->tot[1]), mb = fmax(b->tot[0], b->tot[1]);
  if (ma != mb) return ma > mb ? -1 : 1;
  int c = strcmp(a->function, b->function);
  return c ? c : strcmp(a->file, b->file);
}

static int diff_func_cmp(const void *x, const void *y) {
  const mlprof__diff_func *a = x, *b = y;
  if (a->verdict != b->verdict) return a->verdict < b->verdict ? -1 : 1;
  /* The unchanged by their time, the largest first. */
  double ta = fmax(a->base_ns, a->new_ns), tb = fmax(b->base_ns, b->new_ns);
  if (a->verdict == MLPROF__VERDICT_UNCHANGED && ta != tb)
    return ta > tb ? -1 : 1;
  double ea = a->ratio > 0 ? fabs(log(a->ratio)) : INFINITY,
         eb = b->ratio > 0 ? fabs(log(b->ratio)) : INFINITY;
  if (ea != eb) return ea > eb ? -1 : 1;
  if (ta != tb) return ta > tb ? -1 : 1;
  return strcmp(a->function, b->function);
}

/* One side's runs (BASE's or NEW's): their hot functions and, per run,
 * each function's entry. */
typedef struct {
  const mlprof__hot **h;
  uint32_t **map;
  size_t n;
  uint64_t steps;          /* marked steps, all runs */
  double samples, wall_ns; /* all runs' samples, and the time they cover */
} fside;

/* The kept entries' per-step values of side k (all its runs' steps, zero
 * but where a function was innermost), sorted. */
static int step_values(const fside *sd, fset *s, size_t keep, int k) {
  for (size_t i = 0; i < keep; i++)
    if (!(s->e[i].vals[k] = calloc(sd->steps, sizeof(uint64_t))))
      return MLPROF_ENOMEM;
  uint64_t at = 0; /* the run's first step among the side's */
  for (size_t r = 0; r < sd->n; r++) {
    const mlprof__hot *h = sd->h[r];
    for (size_t i = 0; i < h->nstep_self; i++) {
      const mlprof__hot_step_self *x = &h->step_self[i];
      uint32_t e = sd->map[r][x->func];
      if (e < keep && x->step < h->marked_steps)
        s->e[e].vals[k][at + x->step] += x->self_ns;
    }
    at += h->marked_steps;
  }
  for (size_t i = 0; i < keep; i++)
    mlprof__sort(s->e[i].vals[k], sd->steps, sizeof(uint64_t), u64_cmp);
  return 0;
}

/* Side k's runs into sd and their functions into s. Returns 0 or
 * MLPROF_ENOMEM. */
static int side_funcs(const mlprof__report *runs, size_t n, int per_step, int k,
                      fside *sd, fset *s, double *all) {
  for (size_t r = 0; r < n; r++) {
    const mlprof__hot *h = sd->h[r] = &runs[r].hot;
    if (!(sd->map[r] = malloc((h->nfuncs ? h->nfuncs : 1) * sizeof **sd->map)))
      return MLPROF_ENOMEM;
    for (size_t i = 0; i < h->nfuncs; i++) {
      if ((sd->map[r][i] = fentry_of(s, h->funcs[i].file,
                                     h->funcs[i].function)) == MLPROF__NONE)
        return MLPROF_ENOMEM;
      /* BASE's side comes first: NEW's line wins. */
      if (h->funcs[i].first_line)
        s->e[sd->map[r][i]].line = h->funcs[i].first_line;
    }
    sd->steps += h->marked_steps;
    sd->samples += (double)h->samples;
    sd->wall_ns += (double)h->wall_ns;
    if (per_step) {
      for (size_t i = 0; i < h->nstep_self; i++) {
        double ns = (double)h->step_self[i].self_ns;
        s->e[sd->map[r][h->step_self[i].func]].tot[k] += ns;
        *all += ns;
      }
      continue;
    }
    for (size_t i = 0; i < h->nrows; i++) {
      s->e[sd->map[r][h->rows[i].func]].tot[k] += (double)h->rows[i].self;
      *all += (double)h->rows[i].self;
    }
    for (size_t i = 0; i < h->nstacks; i++) {
      const mlprof__hot_stack *x = &h->stacks[i];
      if (x->node == MLPROF__NONE) continue;
      uint32_t fn = h->frames[h->nodes[x->node].frame].func;
      s->e[sd->map[r][fn]].samples[k] += (double)x->samples;
    }
  }
  return 0;
}

/* Fills d->funcs from the runs' stack samples (mlprof__diff_func): the
 * steps of a side's runs pooled; per run, the mean of its runs. */
static int judge_funcs(const mlprof__report *base, size_t nbase,
                       const mlprof__report *next, size_t nnext,
                       const mlprof__diff_options *opt, mlprof__diff *d) {
  const mlprof__report *runs[2] = {base, next};
  size_t nruns[2] = {nbase, nnext};
  int per_step = 1;
  for (int k = 0; k < 2; k++)
    for (size_t r = 0; r < nruns[k]; r++) {
      if (!runs[k][r].hot.samples) return 0;
      per_step &= runs[k][r].hot.marked_steps > 0;
    }
  fset s = {0};
  fside sd[2];
  memset(sd, 0, sizeof sd);
  double all[2] = {0, 0};
  int rc = 0;
  for (int k = 0; k < 2 && !rc; k++) {
    sd[k].n = nruns[k];
    sd[k].h = calloc(nruns[k], sizeof *sd[k].h);
    sd[k].map = calloc(nruns[k], sizeof *sd[k].map);
    rc = sd[k].h && sd[k].map
             ? side_funcs(runs[k], nruns[k], per_step, k, &sd[k], &s, &all[k])
             : MLPROF_ENOMEM;
  }
  /* Largest first: the entries sorted, each function mapped to its
   * entry's new place (the entries hold no pointer yet). */
  size_t keep = 0;
  if (!rc) {
    uint32_t *rank = malloc((s.n ? s.n : 1) * sizeof *rank);
    if (!rank) rc = MLPROF_ENOMEM;
    for (size_t i = 0; !rc && i < s.n; i++) s.e[i].at = (uint32_t)i;
    if (!rc) {
      mlprof__sort(s.e, s.n, sizeof *s.e, fentry_cmp);
      for (size_t i = 0; i < s.n; i++) rank[s.e[i].at] = (uint32_t)i;
      for (int k = 0; k < 2; k++)
        for (size_t r = 0; r < sd[k].n; r++)
          for (size_t i = 0; i < sd[k].h[r]->nfuncs; i++)
            sd[k].map[r][i] = rank[sd[k].map[r][i]];
      while (keep < s.n && keep < MLPROF__DIFF_FUNCS &&
             (s.e[keep].tot[0] >= MLPROF__DIFF_FUNC_MIN_SHARE * all[0] ||
              s.e[keep].tot[1] >= MLPROF__DIFF_FUNC_MIN_SHARE * all[1]))
        keep++;
    }
    free(rank);
  }
  if (!rc && per_step)
    for (int k = 0; k < 2 && !rc; k++) rc = step_values(&sd[k], &s, keep, k);
  if (!rc && keep && !(d->funcs = calloc(keep, sizeof *d->funcs)))
    rc = MLPROF_ENOMEM;
  for (size_t i = 0; i < keep && !rc; i++) {
    const fentry *e = &s.e[i];
    mlprof__diff_func *f = &d->funcs[d->nfuncs++];
    f->function = e->function;
    f->file = e->file;
    f->line = e->line;
    double b, n, p;
    int up, down;
    if (per_step) {
      uint64_t nb = sd[0].steps, nn = sd[1].steps;
      b = e->tot[0] / (double)nb;
      n = e->tot[1] / (double)nn;
      mlprof__mwu t;
      if ((rc = mlprof__mwu_sorted(e->vals[0], nb, e->vals[1], nn, &t))) break;
      double half = (double)nb * (double)nn / 2;
      p = t.p;
      up = t.u > half;
      down = t.u < half;
      f->too_few = nb < opt->min_count || nn < opt->min_count ||
                   mlprof__mwu_min_p(nb, nn) > opt->alpha;
    } else {
      b = e->tot[0] / (double)nbase;
      n = e->tot[1] / (double)nnext;
      /* The samples themselves (one a sample, whatever time it stands
       * for), each side's taken at its own density (samples a second: a
       * sampler that fell behind on a loaded machine took fewer) over its
       * runs. */
      double kb = e->samples[0], kn = e->samples[1], all_k = kb + kn;
      double db = sd[0].wall_ns > 0 ? sd[0].samples / sd[0].wall_ns : 0;
      double dn = sd[1].wall_ns > 0 ? sd[1].samples / sd[1].wall_ns : 0;
      db *= (double)nbase;
      dn *= (double)nnext;
      double pi = db + dn > 0 ? dn / (db + dn) : 0.5, mean = all_k * pi;
      double sdev = sqrt(all_k * pi * (1 - pi));
      double z = sdev > 0 ? (fabs(kn - mean) - 0.5) / sdev : 0;
      p = z > 0 ? fmin(1, 2 * mlprof__normal_sf(z)) : 1;
      up = kn > mean;
      down = kn < mean;
      f->too_few = all_k < (double)opt->min_count;
    }
    f->base_ns = b;
    f->new_ns = n;
    f->ratio = b > 0 ? n / b : n > 0 ? INFINITY : 1;
    f->p = p;
    f->verdict = f->too_few ? MLPROF__VERDICT_UNCHANGED
                            : rule(p, f->ratio, up, down, opt);
    if (f->verdict == MLPROF__VERDICT_SLOWER && b <= 0)
      f->verdict = MLPROF__VERDICT_NEW;
    if (f->verdict == MLPROF__VERDICT_FASTER && n <= 0)
      f->verdict = MLPROF__VERDICT_REMOVED;
    d->func_count[f->verdict]++;
  }
  if (!rc) {
    d->funcs_per_step = per_step;
    if (d->nfuncs)
      mlprof__sort(d->funcs, d->nfuncs, sizeof *d->funcs, diff_func_cmp);
  }
  for (size_t i = 0; i < s.n; i++) {
    free(s.e[i].vals[0]);
    free(s.e[i].vals[1]);
  }
  free(s.e);
  mlprof__map_clear(&s.ix);
  for (int k = 0; k < 2; k++) {
    for (size_t r = 0; sd[k].map && r < sd[k].n; r++) free(sd[k].map[r]);
    free(sd[k].map);
    free(sd[k].h);
  }
  return rc;
}

const char *mlprof__diff_likely(const mlprof__diff_zone *z,
                                const mlprof__diff_options *opt) {
  if (!(z->too_few || z->runs_vary) || !z->tested) return NULL;
  double half = (double)z->base->count * (double)z->next->count / 2;
  if (z->ratio > 1 + opt->threshold && z->test.u > half) return "slower";
  if (z->ratio < 1 - opt->threshold && z->test.u < half) return "faster";
  return NULL;
}

int mlprof__diff_build_runs(const mlprof__report *base, size_t nbase,
                            const mlprof__report *next, size_t nnext,
                            const mlprof__diff_options *opt, mlprof__diff *d) {
  memset(d, 0, sizeof *d);
  mlprof__diff_side *sb = &d->side[0], *sn = &d->side[1];
  int rc = pool_side(base, nbase, sb);
  if (!rc) rc = pool_side(next, nnext, sn);
  size_t cap = sb->nzones + sn->nzones;
  if (!rc && cap && !(d->zones = calloc(cap, sizeof *d->zones)))
    rc = MLPROF_ENOMEM;
  size_t i = 0, j = 0;
  while (!rc && (i < sb->nzones || j < sn->nzones)) {
    int c = i >= sb->nzones ? 1
            : j >= sn->nzones
                ? -1
                : mlprof__name_cmp(sb->zones[i].name, sb->zones[i].name_len,
                                   sn->zones[j].name, sn->zones[j].name_len);
    size_t bi = i, ni = j;
    const mlprof__zone_stats *b = c <= 0 ? &sb->zones[i++] : NULL;
    const mlprof__zone_stats *n = c >= 0 ? &sn->zones[j++] : NULL;
    const mlprof__zone_stats *any = b ? b : n;
    if (!mlprof__diff_selected(opt, any->name)) {
      d->filtered++;
      continue;
    }
    mlprof__diff_zone *z = &d->zones[d->nzones++];
    *z = (mlprof__diff_zone){.name = any->name,
                             .name_len = any->name_len,
                             .category = any->category,
                             .base = b,
                             .next = n,
                             .median_base = NAN,
                             .median_new = NAN,
                             .ratio = NAN,
                             .runs_p = NAN,
                             .runs_spread = NAN};
    if (!b) {
      z->verdict = MLPROF__VERDICT_NEW;
      z->median_new =
          mlprof__median_sorted(n->durations, n->durations ? n->count : 0);
    } else if (!n) {
      z->verdict = MLPROF__VERDICT_REMOVED;
      z->median_base =
          mlprof__median_sorted(b->durations, b->durations ? b->count : 0);
    } else if (!(rc = judge(z, opt))) {
      between_runs(z, sb->medians + bi * nbase, nbase, sn->medians + ni * nnext,
                   nnext);
    }
  }
  if (!rc) rc = find_shift(d, opt);
  if (!rc) rc = judge_step(base, next, opt, d);
  if (!rc) rc = judge_unit(base, next, opt, d);
  if (!rc) rc = explain_shift(d, opt);
  if (!rc) rc = judge_machine(d, opt);
  /* Memory: the first run of each side (its sampling error is its own). */
  if (!rc) rc = mlprof__memdiff_build(&base->mem, &next->mem, opt, &d->mem);
  if (!rc) rc = judge_funcs(base, nbase, next, nnext, opt, d);
  if (rc) {
    mlprof__diff_free(d);
    return rc;
  }
  if (d->nzones)
    mlprof__sort(d->zones, d->nzones, sizeof *d->zones, diff_zone_cmp);
  int other_work = d->has_unit && d->work_differs;
  for (size_t k = 0; k < d->nzones; k++) {
    const mlprof__diff_zone *z = &d->zones[k];
    d->count[z->verdict]++;
    d->regression |= z->verdict == MLPROF__VERDICT_SLOWER &&
                     !z->machine_explains && !other_work;
  }
  d->regression |= mlprof__diff_step_slower(d);
  d->regression |= d->has_unit &&
                   d->per_unit.verdict == MLPROF__VERDICT_SLOWER &&
                   !d->per_unit.machine_explains;
  d->time_regression = d->regression;
  d->regression |= d->mem.regression;
  return 0;
}

int mlprof__diff_build(const mlprof__report *base, const mlprof__report *next,
                       const mlprof__diff_options *opt, mlprof__diff *d) {
  return mlprof__diff_build_runs(base, 1, next, 1, opt, d);
}

int mlprof__diff_step_slower(const mlprof__diff *d) {
  return d->has_step && d->step.verdict == MLPROF__VERDICT_SLOWER &&
         !d->step.machine_explains && !(d->has_unit && d->work_differs);
}

void mlprof__diff_free(mlprof__diff *d) {
  free(d->zones);
  mlprof__memdiff_free(&d->mem);
  free(d->funcs);
  mlprof__diff_side_free(&d->side[0]);
  mlprof__diff_side_free(&d->side[1]);
  free(d->unit_side[0].durations);
  free(d->unit_side[1].durations);
  free(d->step_side[0].durations);
  free(d->step_side[1].durations);
  memset(d, 0, sizeof *d);
}

/* "run-queue wait 3.1x higher (31% of the time wanted against 10%)" or
 * "... 0% -> 12%" when BASE's is 0, into b; "" when unknown. */
static void wait_words(char *b, size_t len, const mlprof__diff_machine *m) {
  b[0] = '\0';
  if (isnan(m->base) || isnan(m->next)) return;
  if (m->base > 0.0005)
    snprintf(b, len,
             "run-queue wait %.1fx %s (its processes waited for a CPU %.0f%% "
             "of the time they wanted one, against %.0f%% for BASE)",
             m->next >= m->base ? m->next / m->base : m->base / m->next,
             m->next >= m->base ? "higher" : "lower", m->next * 100,
             m->base * 100);
  else
    snprintf(b, len,
             "run-queue wait %.0f%% -> %.0f%% (the share of the time its "
             "processes wanted a CPU that they waited for one)",
             m->base * 100, m->next * 100);
}

/* "CPU steal 0% -> 12%" into b; "" when unknown. */
static void steal_words(char *b, size_t len, const mlprof__diff_machine *m) {
  b[0] = '\0';
  if (!isnan(m->steal_base) && !isnan(m->steal_next))
    snprintf(b, len, "CPU steal %.0f%% -> %.0f%%", m->steal_base * 100,
             m->steal_next * 100);
}

void mlprof__diff_shift_note(char *b, size_t len, const mlprof__diff *d) {
  const mlprof__diff_shift *s = &d->shift;
  const mlprof__diff_machine *m = &d->machine;
  char who[64], wait[256], steal[64], seen[400] = "";
  if (s->agreeing == s->zones)
    snprintf(who, sizeof who, "all %zu zones", s->zones);
  else
    snprintf(who, sizeof who, "%zu of %zu zones", s->agreeing, s->zones);
  wait_words(wait, sizeof wait, m);
  steal_words(steal, sizeof steal, m);
  if (m->slower)
    snprintf(seen, sizeof seen, " (%s%s%s)", wait, *wait && *steal ? ", " : "",
             steal);
  else if (*wait || *steal)
    snprintf(seen, sizeof seen,
             " (its %s%s%s did not change enough to say so: the CPU's "
             "frequency, or other programs' use of memory and caches, may "
             "have)",
             *wait ? "run-queue wait" : "", *wait && *steal ? " and " : "",
             *steal ? "steal" : "");
  snprintf(b, len,
           "%s are %.1f%% %s together (spread %.1f%%): the machine was %s%s, "
           "more likely than the code; a verdict that moved with it is no "
           "regression; rerun both interleaved or on an idle machine",
           who, fabs(s->ratio - 1) * 100, s->ratio > 1 ? "slower" : "faster",
           s->spread * 100, s->ratio > 1 ? "slower" : "faster", seen);
}

void mlprof__diff_machine_note(char *b, size_t len, const mlprof__diff *d) {
  const mlprof__diff_machine *m = &d->machine;
  char wait[256], steal[64];
  wait_words(wait, sizeof wait, m);
  steal_words(steal, sizeof steal, m);
  char part[128] = "";
  if (m->demand < 0.95)
    snprintf(part, sizeof part,
             " (its processes wanted a CPU %.0f%% of the time: %.2fx of their "
             "time)",
             m->demand * 100, m->expected);
  int at = snprintf(b, len,
                    "the machine was slower for NEW: %s%s%s, which stretches "
                    "CPU-bound work %.2fx%s",
                    wait, *wait && *steal ? ", " : "", steal, m->factor, part);
  if (m->explained && at > 0 && (size_t)at < len)
    snprintf(b + at, len - (size_t)at,
             "; %zu slower verdict%s no more than that %s not counted as a "
             "regression",
             m->explained, m->explained == 1 ? "" : "s",
             m->explained == 1 ? "is" : "are");
}
