/* mlprof diff on memory (diff.h, docs/memory.md "Comparing two runs").
 *
 * Every figure compared is a sum of allocation records' weights, so its
 * sampling variance is known (memory.h): the difference of two runs'
 * estimates, over the square root of twice the larger of their variances,
 * is a normal score under the hypothesis that both runs hold the same
 * bytes.
 * Many items are tested at once (processes, zones, sites): Holm's step-down
 * correction keeps the chance that any item of an A/A pair is named at
 * alpha. A change must also be large (the threshold, on the larger value)
 * and matter (MLPROF__MEMDIFF_MIN_SHARE of what it is part of): every
 * allocation recorded gives no sampling error at all, and a site's few
 * bytes moving between two runs is not a regression. */
#include <math.h>
#include <mlprof.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "diff.h"

const char *mlprof__memdiff_verdict_name(mlprof__memdiff_verdict v) {
  static const char *const names[] = {"grew", "shrank", "unchanged"};
  return v < MLPROF__MEMDIFF_VERDICTS ? names[v] : "?";
}

const char *mlprof__memdiff_kind_name(mlprof__memdiff_kind k) {
  static const char *const names[] = {"peak", "zone high-water", "site at peak",
                                      "site a step"};
  return k < MLPROF__MEMDIFF_KINDS ? names[k] : "?";
}

/* A site of one run, keyed for matching. */
typedef struct {
  size_t rank; /* of its process among those with records */
  const char *zone, *python, *native;
  size_t zone_len;
  const mlprof__mem_site *s;
  int side;
} site_ref;

static int str_cmp(const char *a, const char *b) {
  return strcmp(a ? a : "", b ? b : "");
}

static int site_key_cmp(const site_ref *a, const site_ref *b) {
  if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
  size_t n = a->zone_len < b->zone_len ? a->zone_len : b->zone_len;
  int c = memcmp(a->zone, b->zone, n);
  if (c || a->zone_len != b->zone_len)
    return c ? c : a->zone_len < b->zone_len ? -1 : 1;
  if ((c = str_cmp(a->python, b->python))) return c;
  return str_cmp(a->native, b->native);
}

static int site_ref_cmp(const void *x, const void *y) {
  const site_ref *a = x, *b = y;
  int c = site_key_cmp(a, b);
  return c ? c : a->side - b->side;
}

static double largest_peak(const mlprof__memory *m) {
  uint64_t p = 0;
  for (size_t i = 0; i < m->nprocs; i++)
    if (m->procs[i].peak > p) p = m->procs[i].peak;
  return (double)p;
}

/* Steps of the process of that rank, 0 when absent. */
static size_t steps_of(const mlprof__memory *m, size_t rank) {
  return rank < m->nprocs ? m->procs[rank].nsteps : 0;
}

static double alloc_of(const mlprof__memory *m, size_t rank) {
  return rank < m->nprocs ? (double)m->procs[rank].alloc_bytes : 0;
}

static int add(mlprof__memdiff *out, size_t *cap, mlprof__memdiff_item it) {
  if (mlprof__grow(&out->items, cap, out->nitems + 1, sizeof *out->items))
    return MLPROF_ENOMEM;
  out->items[out->nitems++] = it;
  return 0;
}

static int by_p(const void *x, const void *y) {
  const mlprof__memdiff_item *a = *(const mlprof__memdiff_item *const *)x,
                             *b = *(const mlprof__memdiff_item *const *)y;
  return (a->p > b->p) - (a->p < b->p);
}

static int item_cmp(const void *x, const void *y) {
  const mlprof__memdiff_item *a = x, *b = y;
  if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
  if (a->verdict != b->verdict) return a->verdict < b->verdict ? -1 : 1;
  double da = fabs(a->value[1] - a->value[0]),
         db = fabs(b->value[1] - b->value[0]);
  if (da != db) return da > db ? -1 : 1;
  return (a->proc > b->proc) - (a->proc < b->proc);
}

/* The test of each item, Holm's correction over all, the verdicts. */
static int judge_all(mlprof__memdiff *out, const mlprof__diff_options *opt) {
  size_t n = out->nitems;
  for (size_t i = 0; i < n; i++) {
    mlprof__memdiff_item *it = &out->items[i];
    double d = it->value[1] - it->value[0];
    /* With no change, both runs' variances are the same; the larger of
     * the two estimates stands for both, so that a run whose few samples
     * understate it (a few large blocks, most of them missed) does not
     * make a difference of chance look significant. */
    double v = fmax(it->se[0] * it->se[0], it->se[1] * it->se[1]);
    double se = sqrt(2 * v);
    if (se > 0) {
      it->z = d / se;
      it->p = erfc(fabs(it->z) / sqrt(2.0));
    } else {
      it->z = d > 0 ? INFINITY : d < 0 ? -INFINITY : 0;
      it->p = d != 0 ? 0 : 1;
    }
    if (it->p > 1) it->p = 1;
  }
  const mlprof__memdiff_item **order = malloc(n * sizeof *order + 1);
  if (!order) return MLPROF_ENOMEM;
  for (size_t i = 0; i < n; i++) order[i] = &out->items[i];
  mlprof__sort(order, n, sizeof *order, by_p);
  double run = 0; /* adjusted p-values never decrease along the order */
  for (size_t j = 0; j < n; j++) {
    mlprof__memdiff_item *it = (mlprof__memdiff_item *)order[j];
    double adj = fmin(1, (double)(n - j) * it->p);
    run = fmax(run, adj);
    it->p_holm = run;
  }
  free(order);
  for (size_t i = 0; i < n; i++) {
    mlprof__memdiff_item *it = &out->items[i];
    double d = it->value[1] - it->value[0];
    double big = fmax(it->value[0], it->value[1]);
    it->floor = fmax(it->floor, opt->threshold * big);
    int counts = it->p_holm <= opt->alpha && fabs(d) >= it->floor && d != 0;
    it->verdict = !counts ? MLPROF__MEMDIFF_UNCHANGED
                  : d > 0 ? MLPROF__MEMDIFF_GREW
                          : MLPROF__MEMDIFF_SHRANK;
    out->count[it->verdict]++;
  }
  out->regression = out->count[MLPROF__MEMDIFF_GREW] > 0;
  if (n) mlprof__sort(out->items, n, sizeof *out->items, item_cmp);
  return 0;
}

static int add_procs(const mlprof__memory *m[2], mlprof__memdiff *out,
                     size_t *cap) {
  size_t n = m[0]->nprocs > m[1]->nprocs ? m[0]->nprocs : m[1]->nprocs;
  for (size_t i = 0; i < n; i++) {
    mlprof__memdiff_item it = {.kind = MLPROF__MEMDIFF_PEAK, .proc = i};
    for (int k = 0; k < 2; k++)
      if (i < m[k]->nprocs) {
        const mlprof__mem_proc *p = &m[k]->procs[i];
        it.pid[k] = p->pid;
        it.value[k] = (double)p->peak;
        it.se[k] = sqrt(p->peak_var);
      }
    if (add(out, cap, it)) return MLPROF_ENOMEM;
  }
  return 0;
}

static int add_zones(const mlprof__memory *m[2],
                     const mlprof__diff_options *opt, double peak,
                     mlprof__memdiff *out, size_t *cap) {
  /* Few zones: matched by name, quadratic. */
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < m[k]->nzones; i++) {
      const mlprof__mem_zone *z = &m[k]->zones[i];
      if (!z->alloc_count) continue;
      size_t j = 0;
      const mlprof__mem_zone *o = NULL;
      for (; j < m[!k]->nzones; j++) {
        o = &m[!k]->zones[j];
        if (o->name_len == z->name_len &&
            !memcmp(o->name, z->name, z->name_len) && o->alloc_count)
          break;
      }
      if (j == m[!k]->nzones) o = NULL;
      if (k == 1 && o) continue; /* matched from BASE's side */
      if (z->name_len && !mlprof__diff_selected(opt, z->name)) continue;
      mlprof__memdiff_item it = {.kind = MLPROF__MEMDIFF_ZONE,
                                 .zone = z->name,
                                 .zone_len = z->name_len,
                                 .floor = MLPROF__MEMDIFF_MIN_SHARE * peak};
      it.value[k] = (double)z->peak;
      it.se[k] = sqrt(z->peak_var);
      if (o) {
        it.value[!k] = (double)o->peak;
        it.se[!k] = sqrt(o->peak_var);
      }
      if (add(out, cap, it)) return MLPROF_ENOMEM;
    }
  return 0;
}

/* Adds the site items of refs[a, b) (one key, one or both sides; a side's
 * several sites of that key summed). */
static int add_site(const mlprof__memory *m[2], const site_ref *refs, size_t a,
                    size_t b, double peak, mlprof__memdiff *out, size_t *cap) {
  const site_ref *r = &refs[a];
  size_t rank = r->rank;
  int per_step = steps_of(m[0], rank) && steps_of(m[1], rank);
  mlprof__memdiff_item at = {.kind = MLPROF__MEMDIFF_SITE_PEAK,
                             .proc = rank,
                             .zone = r->zone,
                             .zone_len = r->zone_len,
                             .python = r->python,
                             .native = r->native,
                             .floor = MLPROF__MEMDIFF_MIN_SHARE * peak};
  mlprof__memdiff_item st = at;
  st.kind = MLPROF__MEMDIFF_SITE_STEP;
  st.per_step = per_step;
  double var_at[2] = {0, 0}, var_st[2] = {0, 0}, per_run[2];
  for (int k = 0; k < 2; k++) {
    double steps = per_step ? (double)steps_of(m[k], rank) : 1;
    per_run[k] = alloc_of(m[k], rank) / steps;
    if (rank < m[k]->nprocs) at.pid[k] = st.pid[k] = m[k]->procs[rank].pid;
  }
  for (size_t i = a; i < b; i++) {
    const mlprof__mem_site *s = refs[i].s;
    int k = refs[i].side;
    double steps = per_step ? (double)steps_of(m[k], rank) : 1;
    at.value[k] += (double)s->at_peak;
    var_at[k] += s->at_peak_var;
    st.value[k] += (double)s->alloc_bytes / steps;
    var_st[k] += s->alloc_var / (steps * steps);
  }
  for (int k = 0; k < 2; k++) {
    at.se[k] = sqrt(var_at[k]);
    st.se[k] = sqrt(var_st[k]);
  }
  st.floor = MLPROF__MEMDIFF_MIN_SHARE * fmax(per_run[0], per_run[1]);
  if ((at.value[0] > 0 || at.value[1] > 0) && add(out, cap, at))
    return MLPROF_ENOMEM;
  if ((st.value[0] > 0 || st.value[1] > 0) && add(out, cap, st))
    return MLPROF_ENOMEM;
  return 0;
}

static int add_sites(const mlprof__memory *m[2],
                     const mlprof__diff_options *opt, double peak,
                     mlprof__memdiff *out, size_t *cap) {
  size_t n = m[0]->nsites + m[1]->nsites, k = 0;
  site_ref *refs = malloc(n * sizeof *refs + 1);
  if (!refs) return MLPROF_ENOMEM;
  for (int side = 0; side < 2; side++)
    for (size_t i = 0; i < m[side]->nsites; i++) {
      const mlprof__mem_site *s = &m[side]->sites[i];
      const mlprof__mem_zone *z = &m[side]->zones[s->zone];
      if (z->name_len && !mlprof__diff_selected(opt, z->name)) continue;
      refs[k++] = (site_ref){s->mproc,    z->name, s->python, s->native,
                             z->name_len, s,       side};
    }
  mlprof__sort(refs, k, sizeof *refs, site_ref_cmp);
  int rc = 0;
  for (size_t a = 0, b; !rc && a < k; a = b) {
    for (b = a + 1; b < k && !site_key_cmp(&refs[a], &refs[b]);) b++;
    rc = add_site(m, refs, a, b, peak, out, cap);
  }
  free(refs);
  return rc;
}

int mlprof__memdiff_build(const mlprof__memory *base,
                          const mlprof__memory *next,
                          const mlprof__diff_options *opt,
                          mlprof__memdiff *out) {
  memset(out, 0, sizeof *out);
  if (!base->nprocs || !next->nprocs) return 0;
  const mlprof__memory *m[2] = {base, next};
  out->compared = 1;
  for (int k = 0; k < 2; k++) {
    out->exact[k] = 1;
    for (size_t i = 0; i < m[k]->nprocs; i++) {
      out->exact[k] &= m[k]->procs[i].exact;
      if (m[k]->procs[i].mean > out->mean[k])
        out->mean[k] = m[k]->procs[i].mean;
    }
  }
  double peak = fmax(largest_peak(base), largest_peak(next));
  size_t cap = 0;
  int rc = add_procs(m, out, &cap);
  if (!rc) rc = add_zones(m, opt, peak, out, &cap);
  if (!rc) rc = add_sites(m, opt, peak, out, &cap);
  if (!rc) rc = judge_all(out, opt);
  if (rc) mlprof__memdiff_free(out);
  return rc;
}

void mlprof__memdiff_free(mlprof__memdiff *m) {
  free(m->items);
  memset(m, 0, sizeof *m);
}
