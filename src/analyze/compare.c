#include "compare.h"

#include <math.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "../model/job.h"
#include "analysis.h"
#include "diff.h"

/* The mean of measure name of subject s, or NAN. */
static double measure_mean(const mlprof__subject_stats *s, const char *name) {
  for (size_t i = 0; i < s->nm; i++)
    if (s->m[i].count && strcmp(s->m[i].name, name) == 0) return s->m[i].mean;
  return NAN;
}

/* What slowed the machine of a's run down (compare.h). */
static mlprof__run_machine machine_of(const mlprof__analysis *a) {
  mlprof__run_machine m = {NAN, NAN, NAN};
  /* The tree's run-queue wait against the CPU it used, both summed over
   * its processes tick by tick (% of a core); without a tree (a program
   * sampling itself), the processes' means summed. */
  double cpu = measure_mean(&a->res.tree, "cpu_pct");
  double runq = measure_mean(&a->res.tree, "runq_wait_pct");
  double steal = 0;
  size_t hosts = 0;
  if (isnan(runq)) cpu = runq = 0;
  for (size_t i = 0; i < a->res.nsubjects; i++) {
    const mlprof__subject_stats *s = &a->res.subjects[i];
    if (s->subject == MLPROF__SUBJECT_SYSTEM) {
      double v = measure_mean(s, "cpu_steal_pct");
      if (!isnan(v)) steal += v / 100, hosts++;
    } else if (s->subject == MLPROF__SUBJECT_PROCESS &&
               isnan(measure_mean(&a->res.tree, "runq_wait_pct"))) {
      double c = measure_mean(s, "cpu_pct"),
             w = measure_mean(s, "runq_wait_pct");
      if (!isnan(c) && !isnan(w)) cpu += c, runq += w;
    }
  }
  if (cpu + runq > 0) {
    m.wait = runq / (cpu + runq);
    m.demand = (cpu + runq) / 100;
  }
  if (hosts) m.steal = steal / (double)hosts;
  return m;
}

int mlprof__run_load(const char *path, int keep_durations,
                     const mlprof__filter *filter, mlprof__report *r,
                     mlprof__run_machine *machine, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  if (machine) *machine = (mlprof__run_machine){NAN, NAN, NAN};
  mlprof__job job;
  int rc = mlprof__job_open(&job, &path, 1, err, errlen);
  if (rc) return rc;
  mlprof__analysis_opts o;
  mlprof__analysis_opts_init(&o);
  o.keep_durations = keep_durations;
  o.filter = filter;
  if (machine) o.want |= MLPROF__ANALYSIS_RESOURCES;
  mlprof__analysis a;
  rc = mlprof__analysis_run(&job, &o, &a, err, errlen);
  mlprof__job_close(&job);
  if (rc) return rc;
  if (machine) *machine = machine_of(&a);
  *r = a.r; /* the caller's now */
  a.r = (mlprof__report){0};
  mlprof__analysis_free(&a);
  return 0;
}

static int u64_cmp(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return (a > b) - (a < b);
}

static int double_cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* The step time of run's k reports rs[0..k) (compare.h) into run. Returns
 * 0 or MLPROF_ENOMEM. */
static int step_time(mlprof__compare_run *run, const mlprof__report *const *rs,
                     size_t k) {
  double *med = malloc(k * sizeof *med);
  if (!med) return MLPROF_ENOMEM;
  size_t m = 0;
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < k; i++) {
    uint64_t *v;
    size_t n;
    if (mlprof__step_intervals(rs[i], &v, &n)) {
      free(med);
      return MLPROF_ENOMEM;
    }
    if (n) {
      double l, h;
      med[m++] = mlprof__median_sorted(v, n);
      mlprof__median_interval(v, n, &l, &h);
      lo = fmin(lo, l);
      hi = fmax(hi, h);
    }
    free(v);
  }
  if (m) {
    mlprof__sort(med, m, sizeof *med, double_cmp);
    run->step_p50_ns = m % 2 ? med[m / 2] : med[m / 2 - 1] / 2 + med[m / 2] / 2;
    run->step_lo_ns = lo;
    run->step_hi_ns = hi;
  }
  free(med);
  return 0;
}

int mlprof__compare_add_runs(mlprof__compare *c, const char *label,
                             const char *path, mlprof__report *r, size_t k) {
  if (mlprof__grow(&c->runs, &c->rcap, c->nruns + 1, sizeof *c->runs))
    return MLPROF_ENOMEM;
  mlprof__compare_run *run = &c->runs[c->nruns];
  memset(run, 0, sizeof *run);
  run->per_s = NAN;
  run->step_p50_ns = run->step_lo_ns = run->step_hi_ns = NAN;
  run->repeats = k;
  run->label = mlprof__dup(label, strlen(label));
  run->path = mlprof__dup(path, strlen(path));
  const mlprof__report **rs = malloc(k * sizeof *rs);
  uint64_t *walls = malloc(k * sizeof *walls);
  if (k > 1) run->more = malloc((k - 1) * sizeof *run->more);
  int rc = run->label && run->path && rs && walls && (k == 1 || run->more)
               ? 0
               : MLPROF_ENOMEM;
  for (size_t i = 0; i < k && !rc; i++) rs[i] = &r[i];
  if (!rc && k > 1) rc = mlprof__diff_pool(r, k, &run->pooled);
  if (!rc) rc = step_time(run, rs, k);
  free(rs);
  if (rc) {
    mlprof__diff_side_free(&run->pooled);
    free(run->label);
    free(run->path);
    free(run->more);
    free(walls);
    return rc;
  }
  /* Ours now: the pooled zones point into the reports, which move into
   * run without their contents moving. */
  run->report = r[0];
  for (size_t i = 1; i < k; i++) run->more[i - 1] = r[i];
  for (size_t i = 0; i < k; i++) memset(&r[i], 0, sizeof r[i]);
  c->nruns++;
  run->zones = k > 1 ? run->pooled.zones : run->report.zones;
  run->nzones = k > 1 ? run->pooled.nzones : run->report.nzones;
  double sum = 0;
  for (size_t i = 0; i < k; i++) {
    const mlprof__report *rep = i ? &run->more[i - 1] : &run->report;
    walls[i] = rep->wall_ns;
    run->spans += rep->spans;
    for (size_t t = 0; t < rep->nthreads; t++) {
      const mlprof__thread_stats *th = &rep->threads[t];
      run->busy_ns += th->busy_ns;
      run->intervals += th->marks.steps;
      sum += (double)th->step_mean_ns * (double)th->marks.steps;
    }
  }
  mlprof__sort(walls, k, sizeof *walls, u64_cmp);
  run->wall_ns = k % 2 ? walls[k / 2] : walls[k / 2 - 1] / 2 + walls[k / 2] / 2;
  free(walls);
  run->step_mean_ns = run->intervals ? sum / (double)run->intervals : NAN;
  return 0;
}

int mlprof__compare_add(mlprof__compare *c, const char *label, const char *path,
                        mlprof__report *r) {
  return mlprof__compare_add_runs(c, label, path, r, 1);
}

static int compare_zone_cmp(const void *x, const void *y) {
  const mlprof__compare_zone *a = x, *b = y;
  if (a->max_total != b->max_total) return a->max_total > b->max_total ? -1 : 1;
  return mlprof__name_cmp(a->name, a->name_len, b->name, b->name_len);
}

static double zone_mean(const mlprof__zone_stats *z) {
  return z && z->count ? z->mean_ns : NAN;
}

/* The zone's median in a run (compare.h): of its durations when kept,
 * else its p50; NAN when absent. */
static double zone_median(const mlprof__zone_stats *z) {
  if (!z || !z->count) return NAN;
  return z->durations ? mlprof__median_sorted(z->durations, z->count)
                      : (double)z->p50_ns;
}

int mlprof__compare_tied(const mlprof__compare_zone *z, size_t r) {
  const mlprof__zone_stats *a = z->stats[z->fastest], *b = z->stats[r];
  if (!a || !b || !a->count || !b->count) return 0;
  if (a->durations && b->durations) {
    /* The medians' 95% intervals overlap. */
    double alo, ahi, blo, bhi;
    mlprof__median_interval(a->durations, a->count, &alo, &ahi);
    mlprof__median_interval(b->durations, b->count, &blo, &bhi);
    return blo <= ahi && bhi >= alo;
  }
  double se = sqrt(a->std_ns * a->std_ns / (double)a->count +
                   b->std_ns * b->std_ns / (double)b->count);
  return b->mean_ns - a->mean_ns <= 1.96 * se;
}

/* Sorts run indices by key (NAN last), shortest first, stable. */
static void rank_runs(size_t *order, const double *key, size_t n) {
  for (size_t i = 0; i < n; i++) order[i] = i;
  for (size_t i = 1; i < n; i++) {
    size_t v = order[i], k = i;
    while (k > 0) {
      double a = key[order[k - 1]], b = key[v];
      int after = isnan(a) ? !isnan(b) : (!isnan(b) && b < a);
      if (!after) break;
      order[k] = order[k - 1];
      k--;
    }
    order[k] = v;
  }
}

static double ratio(double num, double den) {
  return isnan(num) || isnan(den) || !(den > 0) ? NAN : num / den;
}

/* The total of unit name over run's repeated runs, 0 when one has none. */
static uint64_t unit_total(const mlprof__compare_run *run, const char *name) {
  uint64_t sum = 0;
  for (size_t k = 0; k < run->repeats; k++) {
    const mlprof__report *r = k ? &run->more[k - 1] : &run->report;
    uint64_t one = 0;
    for (size_t i = 0; i < r->nunits; i++)
      if (strcmp(r->units[i].name, name) == 0) one = r->units[i].total;
    if (!one) return 0;
    sum += one;
  }
  return sum;
}

/* Whether the runs of c should be ranked by throughput (compare.h): then
 * c->unit and each run's per_s are set. */
static int choose_unit(mlprof__compare *c) {
  const mlprof__report *r0 = &c->runs[0].report;
  const char *unit = NULL;
  for (size_t k = 0; k < r0->nunits + 2 && !unit; k++) {
    const char *u = k == 0   ? "samples"
                    : k == 1 ? "tokens"
                             : r0->units[k - 2].name;
    size_t i = 0;
    while (i < c->nruns && unit_total(&c->runs[i], u)) i++;
    if (i == c->nruns) unit = u;
  }
  if (!unit) return 0;
  double lo = INFINITY, hi = 0;
  for (size_t i = 0; i < c->nruns; i++) {
    mlprof__compare_run *run = &c->runs[i];
    /* A run's share of its configuration's units. */
    double total = (double)unit_total(run, unit) / (double)run->repeats;
    double work = c->step_basis
                      ? total * (double)run->repeats / (double)run->intervals
                      : total;
    lo = work < lo ? work : lo;
    hi = work > hi ? work : hi;
    /* Per second of its median step when it has steps (start-up and
     * shutdown are not what a configuration is chosen for, and one
     * preempted step is not what it costs), else of its wall. */
    run->per_s = c->step_basis  ? work * 1e9 / run->step_p50_ns
                 : run->wall_ns ? total * 1e9 / (double)run->wall_ns
                                : NAN;
    if (!(run->per_s > 0)) return 0;
  }
  if (hi <= lo * 1.01) return 0;
  for (size_t k = 0; k < r0->nunits; k++)
    if (strcmp(r0->units[k].name, unit) == 0) c->unit = r0->units[k].name;
  return 1;
}

/* The interval of run i's step time on by_step's scale (ns a step, or ns
 * a unit of work: the step's bounds over its work a step). */
static void key_interval(const mlprof__compare *c, size_t i, double *lo,
                         double *hi) {
  const mlprof__compare_run *r = &c->runs[i];
  double f = c->step_basis == MLPROF__BASIS_UNITS
                 ? 1e9 / r->per_s / r->step_p50_ns /* 1 / work a step */
                 : 1;
  *lo = r->step_lo_ns * f;
  *hi = r->step_hi_ns * f;
}

/* Marks the runs whose interval overlaps the best's (compare.h). */
static void mark_indistinct(mlprof__compare *c) {
  if (!c->step_basis) return;
  double blo, bhi;
  key_interval(c, c->best, &blo, &bhi);
  for (size_t i = 0; i < c->nruns; i++) {
    double lo, hi;
    key_interval(c, i, &lo, &hi);
    c->runs[i].indistinct = i != c->best && lo <= bhi && hi >= blo;
    c->indistinct += (size_t)c->runs[i].indistinct;
  }
}

int mlprof__compare_finish(mlprof__compare *c) {
  size_t n = c->nruns, nrefs = 0;
  for (size_t i = 0; i < n; i++) nrefs += c->runs[i].nzones;
  mlprof__zone_ref *refs = malloc((nrefs ? nrefs : 1) * sizeof *refs);
  double *keys = calloc(n ? n : 1, sizeof *keys);
  c->by_total = malloc((n ? n : 1) * sizeof *c->by_total);
  c->by_step = malloc((n ? n : 1) * sizeof *c->by_step);
  int rc = refs && keys && c->by_total && c->by_step ? 0 : MLPROF_ENOMEM;
  size_t k = 0;
  for (size_t i = 0; i < n && !rc; i++)
    for (size_t z = 0; z < c->runs[i].nzones; z++)
      refs[k++] = (mlprof__zone_ref){&c->runs[i].zones[z], i};
  if (!rc && nrefs)
    mlprof__sort(refs, nrefs, sizeof *refs, mlprof__zone_ref_cmp);
  size_t ndistinct = 0;
  for (size_t i = 0; i < nrefs; i++)
    ndistinct +=
        i == 0 ||
        mlprof__name_cmp(refs[i].z->name, refs[i].z->name_len,
                         refs[i - 1].z->name, refs[i - 1].z->name_len) != 0;
  if (!rc && ndistinct && !(c->zones = calloc(ndistinct, sizeof *c->zones)))
    rc = MLPROF_ENOMEM;
  for (size_t i = 0; i < nrefs && !rc;) {
    mlprof__compare_zone *z = &c->zones[c->nzones++];
    z->name = refs[i].z->name;
    z->name_len = refs[i].z->name_len;
    z->category = refs[i].z->category;
    z->stats = calloc(n, sizeof *z->stats);
    z->vs_slowest = malloc(n * sizeof *z->vs_slowest);
    z->vs_first = malloc(n * sizeof *z->vs_first);
    if (!z->stats || !z->vs_slowest || !z->vs_first) {
      rc = MLPROF_ENOMEM;
      break;
    }
    size_t e = i;
    while (e < nrefs && mlprof__name_cmp(refs[e].z->name, refs[e].z->name_len,
                                         z->name, z->name_len) == 0) {
      /* A zone appears once per report: names are merged by the stats. */
      z->stats[refs[e].run] = refs[e].z;
      if (refs[e].z->total_ns > z->max_total)
        z->max_total = refs[e].z->total_ns;
      e++;
    }
    i = e;
    int have = 0;
    for (size_t r = 0; r < n; r++) {
      double m = zone_mean(z->stats[r]);
      if (isnan(m)) continue;
      if (!have || zone_median(z->stats[r]) < zone_median(z->stats[z->fastest]))
        z->fastest = r;
      if (!have || m > zone_mean(z->stats[z->slowest])) z->slowest = r;
      have = 1;
    }
    for (size_t r = 0; r < n; r++)
      z->tie |= r != z->fastest && mlprof__compare_tied(z, r);
    double slow = zone_mean(z->stats[z->slowest]),
           first = zone_mean(z->stats[0]);
    for (size_t r = 0; r < n; r++) {
      double m = zone_mean(z->stats[r]);
      z->vs_slowest[r] = ratio(slow, m);
      z->vs_first[r] = ratio(first, m);
    }
  }
  free(refs);
  if (!rc && c->nzones)
    mlprof__sort(c->zones, c->nzones, sizeof *c->zones, compare_zone_cmp);
  if (!rc) {
    for (size_t i = 0; i < n; i++) keys[i] = (double)c->runs[i].wall_ns;
    rank_runs(c->by_total, keys, n);
    c->step_basis = n > 0 ? MLPROF__BASIS_STEPS : MLPROF__BASIS_WALL;
    for (size_t i = 0; i < n; i++)
      if (!c->runs[i].intervals || isnan(c->runs[i].step_p50_ns))
        c->step_basis = MLPROF__BASIS_WALL;
    if (n > 1 && choose_unit(c)) c->step_basis = MLPROF__BASIS_UNITS;
    for (size_t i = 0; i < n && c->step_basis; i++)
      keys[i] = c->step_basis == MLPROF__BASIS_STEPS
                    ? c->runs[i].step_p50_ns
                    : 1e9 / c->runs[i].per_s; /* ns a unit: lower first */
    rank_runs(c->by_step, keys, n);
    for (size_t i = 0; i < n; i++) {
      c->runs[c->by_total[i]].rank_total = i + 1;
      c->runs[c->by_step[i]].rank_step = i + 1;
    }
    if (n) {
      c->best = c->by_step[0];
      c->worst = c->by_step[n - 1];
      c->best_vs_slowest = ratio(keys[c->worst], keys[c->best]);
      c->best_vs_first = ratio(keys[0], keys[c->best]);
      mark_indistinct(c);
    }
  }
  free(keys);
  return rc;
}

const char *mlprof__compare_basis_name(int basis) {
  return basis == MLPROF__BASIS_UNITS   ? "units"
         : basis == MLPROF__BASIS_STEPS ? "steps"
                                        : "wall";
}

void mlprof__compare_free(mlprof__compare *c) {
  for (size_t i = 0; i < c->nruns; i++) {
    free(c->runs[i].label);
    free(c->runs[i].path);
    mlprof__diff_side_free(&c->runs[i].pooled);
    mlprof__report_free(&c->runs[i].report);
    for (size_t k = 0; k + 1 < c->runs[i].repeats; k++)
      mlprof__report_free(&c->runs[i].more[k]);
    free(c->runs[i].more);
  }
  for (size_t i = 0; i < c->nzones; i++) {
    free(c->zones[i].stats);
    free(c->zones[i].vs_slowest);
    free(c->zones[i].vs_first);
  }
  free(c->runs);
  free(c->zones);
  free(c->by_total);
  free(c->by_step);
  memset(c, 0, sizeof *c);
}

/* The last component of a path, trailing slashes ignored, into b. */
static void base_name(char *b, size_t len, const char *path) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--;
  size_t start = n;
  while (start > 0 && path[start - 1] != '/') start--;
  size_t k = n - start < len - 1 ? n - start : len - 1;
  memcpy(b, path + start, k);
  b[k] = '\0';
}

/* Splits a copy of list at commas into n labels. Returns 0, or -1 when the
 * count differs from n or a label is empty. */
static int split_labels(char *list, char **labels, size_t n) {
  size_t k = 0;
  for (char *p = list;;) {
    char *comma = strchr(p, ',');
    if (comma) *comma = '\0';
    if (!*p || k == n) return -1;
    labels[k++] = p;
    if (!comma) break;
    p = comma + 1;
  }
  return k == n ? 0 : -1;
}

int mlprof__compare_load(mlprof__compare *c, const char *const *paths, size_t n,
                         const size_t *sizes, size_t ngroups,
                         int keep_durations, const char *labels,
                         const mlprof__filter *filter, char *err,
                         size_t errlen) {
  memset(c, 0, sizeof *c);
  if (!sizes) ngroups = n;
  /* first[g]: the index in paths of configuration g's first run. */
  size_t *first = calloc(ngroups + 1, sizeof *first);
  char *list = labels ? mlprof__dup(labels, strlen(labels)) : NULL;
  char **lab = calloc(ngroups ? ngroups : 1, sizeof *lab);
  char(*names)[256] = calloc(ngroups ? ngroups : 1, sizeof *names);
  mlprof__report *r = calloc(n ? n : 1, sizeof *r);
  int rc = 0;
  if ((labels && !list) || !lab || !names || !first || !r) {
    snprintf(err, errlen, "out of memory");
    rc = MLPROF_ENOMEM;
  }
  for (size_t g = 0; g < ngroups && !rc; g++)
    first[g + 1] = first[g] + (sizes ? sizes[g] : 1);
  if (rc) {
  } else if (list && split_labels(list, lab, ngroups)) {
    snprintf(err, errlen,
             "--labels wants %zu non-empty labels separated by commas, one "
             "per %s",
             ngroups, sizes ? "configuration" : "run");
    rc = MLPROF_EINVAL;
  } else if (!list) {
    for (size_t g = 0; g < ngroups; g++) {
      base_name(names[g], sizeof names[g], paths[first[g]]);
      lab[g] = names[g];
    }
    /* Runs with the same base name (a/out, b/out) go by their paths. */
    for (size_t i = 0; i < ngroups; i++)
      for (size_t k = 0; k < ngroups; k++)
        if (k != i && strcmp(names[i], names[k]) == 0)
          lab[i] = (char *)paths[first[i]];
  }
  for (size_t g = 0; g < ngroups && !rc; g++) {
    size_t k = first[g + 1] - first[g];
    /* Repeated runs are pooled from their durations. */
    int keep = keep_durations || k > 1;
    for (size_t i = 0; i < k && !rc; i++)
      rc = mlprof__run_load(paths[first[g] + i], keep, filter, &r[i], NULL, err,
                            errlen);
    if (!rc &&
        (rc = mlprof__compare_add_runs(c, lab[g], paths[first[g]], r, k)))
      snprintf(err, errlen, "out of memory");
    /* Emptied when added; what a failure left (run_load empties r[i]
     * first, calloc the others). */
    for (size_t i = 0; i < k; i++) mlprof__report_free(&r[i]);
  }
  if (!rc && (rc = mlprof__compare_finish(c)))
    snprintf(err, errlen, "out of memory");
  if (rc) mlprof__compare_free(c);
  free(first);
  free(list);
  free(lab);
  free(names);
  free(r);
  return rc;
}

static void fmt_basis(char *b, size_t len, const mlprof__compare *c,
                      size_t run) {
  const mlprof__compare_run *r = &c->runs[run];
  if (c->step_basis == MLPROF__BASIS_UNITS)
    snprintf(b, len, "%.4g %.32s/s", r->per_s, c->unit);
  else
    mlprof__fmt_duration(b, len,
                         c->step_basis ? r->step_p50_ns : (double)r->wall_ns);
}

/* The labels of the runs indistinguishable from the best, "a, b and c",
 * into b. */
static void indistinct_labels(char *b, size_t len, const mlprof__compare *c) {
  size_t at = 0, k = 0;
  b[0] = '\0';
  for (size_t i = 0; i < c->nruns && at < len; i++) {
    if (!c->runs[i].indistinct) continue;
    k++;
    int w = snprintf(b + at, len - at, "%s%.64s",
                     k == 1               ? ""
                     : k == c->indistinct ? " and "
                                          : ", ",
                     c->runs[i].label);
    if (w > 0) at += (size_t)w;
  }
}

void mlprof__compare_recommendation(const mlprof__compare *c, char *b,
                                    size_t len) {
  char units[64];
  snprintf(units, sizeof units, "%.32s per second of the median step",
           c->unit ? c->unit : "");
  const char *basis = c->step_basis == MLPROF__BASIS_UNITS ? units
                      : c->step_basis                      ? "median step time"
                                                           : "wall time";
  const char *best = c->runs[c->best].label, *worst = c->runs[c->worst].label,
             *first = c->runs[0].label;
  char tb[64], tw[64], tf[64], same[512], also[600] = "";
  fmt_basis(tb, sizeof tb, c, c->best);
  fmt_basis(tw, sizeof tw, c, c->worst);
  fmt_basis(tf, sizeof tf, c, 0);
  indistinct_labels(same, sizeof same, c);
  if (c->indistinct)
    snprintf(also, sizeof also, " (or %s: within noise of it)", same);
  if (c->nruns < 2) {
    snprintf(b, len, "only one run: nothing to compare");
  } else if (c->best == c->worst || !(c->best_vs_slowest > 1)) {
    snprintf(b, len, "no run is faster than the others by %s (%s)", basis, tb);
  } else if (c->indistinct + 1 == c->nruns) {
    snprintf(b, len,
             "%.64s and %s are indistinguishable by %s: their 95%% intervals "
             "overlap (%s vs %s); rerun with more steps to tell them apart",
             best, same, basis, tb, tw);
  } else if (c->best == 0) {
    snprintf(b, len,
             "use %.64s (the first run)%s: fastest by %s, %.2fx faster than "
             "the slowest, %.64s (%s vs %s)",
             best, also, basis, c->best_vs_slowest, worst, tb, tw);
  } else {
    snprintf(b, len,
             "use %.64s%s: fastest by %s, %.2fx faster than the slowest, "
             "%.64s (%s vs %s), and %.2fx faster than the first, %.64s (%s)",
             best, also, basis, c->best_vs_slowest, worst, tb, tw,
             c->best_vs_first, first, tf);
  }
}
