/* The self-contained HTML dashboard (html.h). */
#include "html.h"

#include <math.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../analyze/dashboard.h"
#include "export.h"
#include "html_assets.h"

/* A series' subject: the sampled ones by their names (resources.h), the
 * counters' own. */
static const char *subject_str(uint8_t s) {
  return s == MLPROF__TREE_COUNTER ? "counter" : mlprof__subject_name(s);
}

static void json_cstr(mlprof__out *o, const char *s) {
  mlprof__out_json_str(o, s ? s : "", s ? strlen(s) : 0);
}

/* A value with 6 significant digits: enough to draw, a third of the bytes. */
static void out_g(mlprof__out *o, double v) {
  if (!isfinite(v)) {
    mlprof__out_lit(o, "null");
    return;
  }
  if (v == floor(v) && fabs(v) < 1e15) {
    mlprof__out_i64(o, (int64_t)v);
    return;
  }
  mlprof__out_printf(o, "%.6g", v);
}

/* One series: its points downsampled to at most MLPROF__HTML_MAX_POINTS. */
static int series_json(mlprof__out *o, int first, const char *subject,
                       uint64_t id, const char *host, size_t host_len,
                       const char *label, size_t label_len, const char *measure,
                       size_t measure_len, const uint64_t *t, const double *v,
                       size_t n, size_t *idx) {
  /* Absent values (NAN) are skipped: copy the valid points first. */
  size_t m = 0;
  uint64_t *vt = malloc((n ? n : 1) * sizeof *vt);
  double *vv = malloc((n ? n : 1) * sizeof *vv);
  if (!vt || !vv) {
    free(vt);
    free(vv);
    return MLPROF_ENOMEM;
  }
  for (size_t i = 0; i < n; i++)
    if (isfinite(v[i])) {
      vt[m] = t[i];
      vv[m++] = v[i];
    }
  if (m == 0) {
    free(vt);
    free(vv);
    return 1; /* nothing written */
  }
  size_t k = mlprof__downsample(vv, m, MLPROF__HTML_MAX_POINTS, idx);
  mlprof__out_str(o, first ? "\n{\"subject\":" : ",\n{\"subject\":");
  json_cstr(o, subject);
  mlprof__out_lit(o, ",\"id\":");
  mlprof__out_u64(o, id);
  mlprof__out_lit(o, ",\"host\":");
  mlprof__out_json_str(o, host, host_len);
  mlprof__out_lit(o, ",\"label\":");
  mlprof__out_json_str(o, label, label_len);
  mlprof__out_lit(o, ",\"measure\":");
  mlprof__out_json_str(o, measure, measure_len);
  mlprof__out_lit(o, ",\"t\":[");
  for (size_t i = 0; i < k; i++) {
    if (i) mlprof__out_lit(o, ",");
    mlprof__out_u64(o, vt[idx[i]]);
  }
  mlprof__out_lit(o, "],\"v\":[");
  for (size_t i = 0; i < k; i++) {
    if (i) mlprof__out_lit(o, ",");
    out_g(o, vv[idx[i]]);
  }
  mlprof__out_lit(o, "]}");
  free(vt);
  free(vv);
  return 0;
}

/* The largest-RSS processes of the tree's series: 1 to keep series i. */
static int keep_process(const mlprof__tree *tree, size_t i,
                        const double *peak) {
  const mlprof__tree_series *s = &tree->series[i];
  if (s->subject != MLPROF__SUBJECT_PROCESS) return 1;
  /* Rank this process by the peak RSS of its rss series (its own peak for
   * every measure of the same pid and host). */
  size_t better = 0;
  double mine = peak[i];
  for (size_t j = 0; j < tree->nseries; j++) {
    const mlprof__tree_series *x = &tree->series[j];
    if (x->subject != MLPROF__SUBJECT_PROCESS || x->measure != s->measure)
      continue;
    if (peak[j] > mine || (peak[j] == mine && j < i)) better++;
  }
  return better < MLPROF__HTML_MAX_PROCESSES;
}

static int tree_series(const mlprof__tree *tree, mlprof__out *o, size_t *idx) {
  int first = 1, rc = 0;
  /* peak[i]: the peak RSS of the process of series i (0 when unknown). */
  double *peak = calloc(tree->nseries ? tree->nseries : 1, sizeof *peak);
  if (!peak) return MLPROF_ENOMEM;
  for (size_t i = 0; i < tree->nseries; i++) {
    const mlprof__tree_series *s = &tree->series[i];
    if (s->subject != MLPROF__SUBJECT_PROCESS ||
        strcmp(tree->names[s->measure], "rss_bytes") != 0)
      continue;
    double mx = 0;
    for (size_t k = 0; k < s->n; k++)
      if (s->v[k] > mx) mx = s->v[k];
    for (size_t j = 0; j < tree->nseries; j++)
      if (tree->series[j].subject == MLPROF__SUBJECT_PROCESS &&
          tree->series[j].id == s->id && tree->series[j].host == s->host)
        peak[j] = mx;
  }
  for (size_t i = 0; i < tree->nseries && rc <= 0; i++) {
    const mlprof__tree_series *s = &tree->series[i];
    if (!keep_process(tree, i, peak)) continue;
    rc = series_json(o, first, subject_str(s->subject), s->id,
                     tree->names[s->host], tree->name_lens[s->host],
                     tree->names[s->label], tree->name_lens[s->label],
                     tree->names[s->measure], tree->name_lens[s->measure], s->t,
                     s->v, s->n, idx);
    if (rc == 0) first = 0;
  }
  free(peak);
  return rc < 0 ? rc : 0;
}

/* Series from the resources (no tree): the columns they keep. */
static int res_series(const mlprof__resources *res, mlprof__out *o,
                      size_t *idx) {
  static const char *const proc_cols[MLPROF__NCOLS] = {"cpu_pct", "rss_bytes",
                                                       "gpu_mem_bytes"};
  static const char *const gpu_cols[MLPROF__NCOLS] = {
      "gpu_util_pct", "gpu_mem_used_bytes", NULL};
  static const char *const sys_cols[MLPROF__NCOLS] = {
      "cpu_iowait_pct", "mem_available_bytes", "swap_used_bytes"};
  int first = 1, rc = 0;
  size_t procs = 0;
  for (size_t i = 0; i < res->nseries && rc <= 0; i++) {
    const mlprof__series *s = &res->series[i];
    const char *const *cols = s->subject == MLPROF__SUBJECT_PROCESS ? proc_cols
                              : s->subject == MLPROF__SUBJECT_GPU   ? gpu_cols
                                                                    : sys_cols;
    if (s->subject == MLPROF__SUBJECT_PROCESS &&
        procs++ >= MLPROF__HTML_MAX_PROCESSES)
      continue;
    const char *host = s->hostname ? s->hostname : "";
    for (int c = 0; c < MLPROF__NCOLS && rc <= 0; c++) {
      if (!cols[c] || !s->v[c]) continue;
      rc = series_json(o, first, subject_str(s->subject), s->id, host,
                       strlen(host), "", 0, cols[c], strlen(cols[c]), s->t,
                       s->v[c], s->n, idx);
      if (rc == 0) first = 0;
    }
  }
  return rc < 0 ? rc : 0;
}

typedef struct {
  uint64_t total;
  uint32_t i;
} node_rank;

static int cmp_rank(const void *a, const void *b) {
  const node_rank *x = a, *y = b;
  if (x->total != y->total) return x->total > y->total ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

/* The call tree: the largest nodes whose ancestors are all in. */
static int tree_json(const mlprof__tree *tree, mlprof__out *o) {
  size_t n = tree->nnodes;
  node_rank *rank = malloc((n ? n : 1) * sizeof *rank);
  int32_t *map = malloc((n ? n : 1) * sizeof *map);
  int32_t *names = malloc((tree->nnames ? tree->nnames : 1) * sizeof *names);
  if (!rank || !map || !names) {
    free(rank);
    free(map);
    free(names);
    return MLPROF_ENOMEM;
  }
  for (size_t i = 0; i < n; i++)
    rank[i] = (node_rank){tree->nodes[i].total_ns, (uint32_t)i};
  mlprof__sort(rank, n, sizeof *rank, cmp_rank);
  for (size_t i = 0; i < n; i++) map[i] = -2; /* not chosen */
  for (size_t i = 0; i < n && i < MLPROF__HTML_MAX_NODES; i++)
    map[rank[i].i] = -1;
  for (size_t i = 0; i < tree->nnames; i++) names[i] = -1;
  /* Parents come before children: one pass keeps a chosen node when its
   * parent was kept, numbering kept nodes and their names in order. */
  int32_t kept = 0, nnames = 0;
  mlprof__out_lit(o, "{\"nodes\":[");
  for (size_t i = 0; i < n; i++) {
    const mlprof__tree_node *x = &tree->nodes[i];
    if (map[i] != -1) continue;
    if (x->parent != UINT32_MAX && map[x->parent] < 0) {
      map[i] = -2;
      continue;
    }
    map[i] = kept++;
    if (names[x->name] < 0) names[x->name] = nnames++;
    mlprof__out_str(o, kept > 1 ? ",[" : "[");
    mlprof__out_i64(o, names[x->name]);
    mlprof__out_lit(o, ",");
    mlprof__out_i64(o, x->parent == UINT32_MAX ? -1 : map[x->parent]);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, x->total_ns);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, x->count);
    mlprof__out_lit(o, "]");
  }
  mlprof__out_lit(o, "],\"names\":[");
  /* names[] maps name -> position; write them in position order. */
  int32_t *order = (int32_t *)map; /* reuse: n >= nnames */
  for (size_t i = 0; i < tree->nnames; i++)
    if (names[i] >= 0) order[names[i]] = (int32_t)i;
  for (int32_t k = 0; k < nnames; k++) {
    if (k) mlprof__out_lit(o, ",");
    mlprof__out_json_str(o, tree->names[order[k]], tree->name_lens[order[k]]);
  }
  mlprof__out_lit(o, "]}");
  free(rank);
  free(map);
  free(names);
  return 0;
}

/* A zone's distribution (html.h), or null. */
static void dist_json(mlprof__out *o, const mlprof__zone_stats *z) {
  if (!z || !z->durations) {
    mlprof__out_lit(o, "null");
    return;
  }
  for (unsigned k = 0; k <= MLPROF__HTML_DIST_STEPS; k++) {
    mlprof__out_str(o, k ? "," : "[");
    mlprof__out_u64(
        o, mlprof__percentile_sorted(z->durations, z->count,
                                     k * 100 / MLPROF__HTML_DIST_STEPS));
  }
  mlprof__out_lit(o, "]");
}

/* "compare", "compare_dist", "diff" and "diff_dist" (html.h). */
static int runs_json(const mlprof__html_opts *opts, mlprof__out *o) {
  int rc = 0;
  const mlprof__compare *c = opts->compare;
  mlprof__out_lit(o, ",\n\"compare\":");
  if (c)
    rc = mlprof__export_compare_json(c, o);
  else
    mlprof__out_lit(o, "null");
  mlprof__out_lit(o, ",\n\"compare_dist\":[");
  for (size_t i = 0; c && i < c->nzones; i++) {
    mlprof__out_str(o, i ? ",\n[" : "[");
    for (size_t k = 0; k < c->nruns; k++) {
      if (k) mlprof__out_lit(o, ",");
      dist_json(o, c->zones[i].stats[k]);
    }
    mlprof__out_lit(o, "]");
  }
  const mlprof__html_diff *df = opts->diff;
  mlprof__out_lit(o, "],\n\"diff\":");
  if (!rc && df)
    rc = mlprof__export_diff_json(df->d, df->opt, df->bpath, df->base,
                                  df->npath, df->next, o);
  else
    mlprof__out_lit(o, "null");
  mlprof__out_lit(o, ",\n\"diff_dist\":[");
  for (size_t i = 0; df && i < df->d->nzones; i++) {
    mlprof__out_str(o, i ? ",\n[" : "[");
    dist_json(o, df->d->zones[i].base);
    mlprof__out_lit(o, ",");
    dist_json(o, df->d->zones[i].next);
    mlprof__out_lit(o, "]");
  }
  mlprof__out_lit(o, "]");
  return rc;
}

/* The first item of r that begins at or after t (r->n when none). */
typedef struct {
  const mlprof__lod_run *r;
  uint64_t t;
} run_key;

/* The items that begin before t come first. */
static int begins_before(const void *ctx, size_t i) {
  const run_key *k = ctx;
  return k->r->items[i].begin < k->t;
}

static size_t begins_from(const mlprof__lod_run *r, uint64_t t) {
  run_key key = {r, t};
  return mlprof__lower_bound(0, r->n, &key, begins_before);
}

/* A span's n entries a: [["key","value"]...],[["unit",n]...]. */
static void span_args_json(const mlprof__lod *l, const mlprof__lod_arg *a,
                           size_t n, mlprof__out *o) {
  for (int units = 0; units < 2; units++) {
    mlprof__out_str(o, units ? ",[" : "[");
    int first = 1;
    for (size_t i = 0; i < n; i++) {
      if ((a[i].value == MLPROF__NONE) != units) continue;
      mlprof__out_str(o, first ? "[" : ",[");
      first = 0;
      mlprof__out_json_str(o, l->strs[a[i].key], l->str_lens[a[i].key]);
      mlprof__out_lit(o, ",");
      if (units)
        mlprof__out_u64(o, a[i].n);
      else
        mlprof__out_json_str(o, l->strs[a[i].value], l->str_lens[a[i].value]);
      mlprof__out_lit(o, "]");
    }
    mlprof__out_lit(o, "]");
  }
}

/* "args" of mlprof__export_timeline_json: those of the items of level k in
 * [t0, t1) that are one span each, or null past max_bytes. */
static int timeline_args(const mlprof__lod *l, size_t k, uint64_t t0,
                         uint64_t t1, size_t max_bytes, mlprof__out *o) {
  mlprof__out a;
  if (mlprof__out_open(&a, -1)) return MLPROF_ENOMEM;
  int first = 1;
  for (size_t i = 0; i < l->ntracks && a.len <= max_bytes; i++) {
    const mlprof__lod_track *t = &l->tracks[i];
    const mlprof__lod_run *r = &t->lv[k];
    if (!t->nargs) continue;
    for (size_t j = mlprof__lod_find(r, t0), b = begins_from(r, t1);
         j < b && a.len <= max_bytes; j++) {
      size_t n;
      const mlprof__lod_item *it = &r->items[j];
      const mlprof__lod_arg *x =
          it->count == 1 ? mlprof__lod_args(t, it->begin, it->end, &n) : NULL;
      if (!x || !n) continue;
      mlprof__out_str(&a, first ? "[" : ",\n[");
      first = 0;
      mlprof__out_u64(&a, i);
      mlprof__out_lit(&a, ",");
      mlprof__out_u64(&a, it->begin);
      mlprof__out_lit(&a, ",");
      mlprof__out_u64(&a, it->end);
      mlprof__out_lit(&a, ",");
      span_args_json(l, x, n, &a);
      mlprof__out_lit(&a, "]");
    }
  }
  int rc = a.err;
  if (!rc && a.len <= max_bytes) {
    mlprof__out_lit(o, ",\n\"args\":[");
    mlprof__out_write(o, a.buf, a.len);
    mlprof__out_lit(o, "]");
  } else if (!rc) {
    mlprof__out_lit(o, ",\n\"args\":null");
  }
  mlprof__out_close(&a);
  return rc;
}

int mlprof__export_timeline_json(const mlprof__lod *l, uint64_t t0, uint64_t t1,
                                 uint64_t res, size_t max_items,
                                 size_t args_bytes, mlprof__out *o) {
  mlprof__out_lit(o, "{\"names\":[");
  for (size_t i = 0; i < l->nnames; i++) {
    if (i) mlprof__out_lit(o, ",");
    mlprof__out_json_str(o, l->names[i], l->name_lens[i]);
  }
  mlprof__out_lit(o, "],\n\"tracks\":[");
  for (size_t i = 0; i < l->ntracks; i++) {
    const mlprof__lod_track *t = &l->tracks[i];
    mlprof__out_str(o, i ? ",[" : "[");
    mlprof__out_u64(o, t->pid);
    mlprof__out_lit(o, ",");
    mlprof__out_i64(o, t->rank);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, t->process);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, t->tid);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, t->thread);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, t->depth);
    mlprof__out_lit(o, "]");
  }
  mlprof__out_lit(o, "],\n\"levels\":[");
  size_t total = 0, finest = MLPROF__LOD_LEVELS;
  int merged = 0; /* the finest level written merges some span */
  for (size_t k = MLPROF__LOD_LEVELS; k-- > l->first;) {
    if (k + 1 < MLPROF__LOD_LEVELS && mlprof__lod_res(k + 1) <= res) break;
    size_t n = 0;
    int exact = 1;
    for (size_t i = 0; i < l->ntracks; i++) {
      const mlprof__lod_run *r = &l->tracks[i].lv[k];
      size_t a = mlprof__lod_find(r, t0), b = begins_from(r, t1);
      for (size_t j = a; j < b && exact; j++) exact = r->items[j].count == 1;
      n += b > a ? b - a : 0;
    }
    /* The coarsest level always goes: without it nothing draws. */
    if (k + 1 < MLPROF__LOD_LEVELS && total + n > max_items) break;
    total += n;
    finest = k;
    merged = !exact;
    mlprof__out_str(
        o, k + 1 < MLPROF__LOD_LEVELS ? ",\n{\"res\":" : "\n{\"res\":");
    mlprof__out_u64(o, mlprof__lod_res(k));
    if (exact) mlprof__out_lit(o, ",\"exact\":true");
    mlprof__out_lit(o, ",\"items\":[");
    int first = 1;
    for (size_t i = 0; i < l->ntracks; i++) {
      const mlprof__lod_run *r = &l->tracks[i].lv[k];
      size_t a = mlprof__lod_find(r, t0), b = begins_from(r, t1);
      if (b <= a) continue;
      mlprof__out_str(o, first ? "[" : ",\n[");
      first = 0;
      mlprof__out_u64(o, i);
      uint64_t prev = 0;
      for (size_t j = a; j < b; j++) {
        const mlprof__lod_item *it = &r->items[j];
        mlprof__out_lit(o, ",");
        mlprof__out_u64(o, it->begin - prev);
        mlprof__out_lit(o, ",");
        mlprof__out_u64(o, it->end - it->begin);
        mlprof__out_lit(o, ",");
        mlprof__out_u64(o, it->name);
        mlprof__out_lit(o, ",");
        mlprof__out_u64(o, it->count);
        mlprof__out_lit(o, ",");
        mlprof__out_u64(o, it->busy_ns);
        prev = it->begin;
      }
      mlprof__out_lit(o, "]");
    }
    mlprof__out_lit(o, "]}");
    /* Spans kept whole at this level stay whole at every finer one. */
    if (exact) break;
  }
  mlprof__out_lit(o, "]");
  if (merged && finest > mlprof__lod_level(res))
    mlprof__out_lit(o, ",\"coarser\":true");
  /* The finest level written holds every span a coarser one kept whole. */
  int rc = 0;
  if (args_bytes && finest < MLPROF__LOD_LEVELS)
    rc = timeline_args(l, finest, t0, t1, args_bytes, o);
  if (l->args_missed) {
    mlprof__out_lit(o, ",\"args_missed\":");
    mlprof__out_u64(o, l->args_missed);
  }
  mlprof__out_lit(o, "}");
  return rc ? rc : o->err;
}

int mlprof__export_span_json(const mlprof__lod *l, size_t track, uint64_t begin,
                             uint64_t end, mlprof__out *o) {
  if (track >= l->ntracks || end < begin) return MLPROF_EINVAL;
  const mlprof__lod_track *t = &l->tracks[track];
  size_t n;
  const mlprof__lod_arg *a = mlprof__lod_args(t, begin, end, &n);
  /* Self time: less the spans one deeper on its thread that begin inside
   * it, at the finest level (a summary at most to the span's end). */
  uint64_t self = end - begin;
  for (size_t i = 0; i < l->ntracks; i++) {
    const mlprof__lod_track *c = &l->tracks[i];
    if (c->profile != t->profile || c->tid != t->tid ||
        c->depth != t->depth + 1)
      continue;
    const mlprof__lod_run *r = &c->lv[l->first];
    for (size_t j = begins_from(r, begin); j < r->n; j++) {
      const mlprof__lod_item *it = &r->items[j];
      if (it->begin >= end) break;
      uint64_t d =
          it->busy_ns < end - it->begin ? it->busy_ns : end - it->begin;
      self -= d < self ? d : self;
    }
  }
  mlprof__out_lit(o, "{\"self_ns\":");
  mlprof__out_u64(o, self);
  mlprof__out_lit(o, ",\"args\":[");
  span_args_json(l, a, n, o);
  mlprof__out_lit(o, "],\"args_missed\":");
  mlprof__out_u64(o, l->args_missed);
  mlprof__out_lit(o, "}\n");
  return o->err;
}

int mlprof__export_html_data(const mlprof__report *r,
                             const mlprof__resources *res,
                             const mlprof__findings *f,
                             const mlprof__tree *tree,
                             const mlprof__html_opts *opts, mlprof__out *o) {
  mlprof__html_opts none = {0};
  if (!opts) opts = &none;
  size_t *idx = malloc(MLPROF__HTML_MAX_POINTS * sizeof *idx);
  if (!idx) return MLPROF_ENOMEM;
  int rc = 0;
  mlprof__out_lit(o, "{\"title\":");
  json_cstr(o, opts->title ? opts->title : "mlprof report");
  mlprof__out_str(o, opts->data_url ? ",\"live\":true" : ",\"live\":false");
  mlprof__out_lit(o, ",\"data_url\":");
  if (opts->data_url)
    json_cstr(o, opts->data_url);
  else
    mlprof__out_lit(o, "null");
  mlprof__out_lit(o, ",\n\"report\":");
  rc = mlprof__export_json_page(r, res, f, o);
  mlprof__out_lit(o, ",\n\"tree\":");
  if (!rc && tree)
    rc = tree_json(tree, o);
  else
    mlprof__out_lit(o, "null");
  mlprof__out_lit(o, ",\n\"series\":[");
  if (!rc && tree)
    rc = tree_series(tree, o, idx);
  else if (!rc && res)
    rc = res_series(res, o, idx);
  mlprof__out_lit(o, "],\n\"marks\":[");
  if (tree && tree->nmarks) {
    size_t n = tree->nmarks,
           k = n < MLPROF__HTML_MAX_POINTS ? n : MLPROF__HTML_MAX_POINTS;
    for (size_t i = 0; i < k; i++) {
      if (i) mlprof__out_lit(o, ",");
      mlprof__out_u64(o, tree->marks[n * i / k]);
    }
  }
  mlprof__out_lit(o, "],\n\"step_buckets\":[");
  for (size_t i = 0; tree && i < tree->nbuckets; i++) {
    const mlprof__tree_step_bucket *b = &tree->buckets[i];
    mlprof__out_str(o, i ? ",[" : "[");
    mlprof__out_u64(o, b->first_step);
    mlprof__out_lit(o, ",");
    mlprof__out_u64(o, b->steps);
    for (int p = 0; p < MLPROF__NPARTS; p++) {
      mlprof__out_lit(o, ",");
      mlprof__out_u64(o, b->part_ns[p]);
    }
    mlprof__out_lit(o, "]");
  }
  mlprof__out_lit(o, "],\n\"memory\":");
  if (!rc) rc = mlprof__export_html_memory(r, o);
  if (!rc) rc = runs_json(opts, o);
  mlprof__out_lit(o, ",\n\"stacks\":");
  if (!rc) rc = mlprof__export_html_stacks(r ? &r->hot : NULL, opts->flame, o);
  mlprof__out_lit(o, ",\n\"timeline\":");
  if (!rc && opts->lod)
    rc = mlprof__export_timeline_json(
        opts->lod, 0, UINT64_MAX, 0, MLPROF__DASH_LOD_ITEMS,
        opts->span_url ? 0 : MLPROF__DASH_LOD_ARGS_BYTES, o);
  else
    mlprof__out_lit(o, "null");
  mlprof__out_lit(o, ",\"timeline_url\":");
  if (opts->timeline_url)
    json_cstr(o, opts->timeline_url);
  else
    mlprof__out_lit(o, "null");
  mlprof__out_lit(o, ",\"span_url\":");
  if (opts->span_url)
    json_cstr(o, opts->span_url);
  else
    mlprof__out_lit(o, "null");
  mlprof__out_lit(o, "}\n");
  free(idx);
  return rc ? rc : o->err;
}

int mlprof__export_html_page(const mlprof__report *r,
                             const mlprof__resources *res,
                             const mlprof__findings *f,
                             const mlprof__tree *tree,
                             const mlprof__html_opts *opts, mlprof__out *o) {
  const char *title = opts && opts->title ? opts->title : "mlprof report";
  int live = opts && opts->data_url;
  mlprof__out_lit(o,
                  "<!DOCTYPE html>\n<html lang=\"en\"><head><meta "
                  "charset=\"utf-8\">\n<meta name=\"viewport\" "
                  "content=\"width=device-width,initial-scale=1\">\n");
  /* Nothing may load from anywhere; a live page may ask its own server. */
  mlprof__out_lit(o,
                  "<meta http-equiv=\"Content-Security-Policy\" "
                  "content=\"default-src 'none'; style-src 'unsafe-inline'; "
                  "script-src 'unsafe-inline'; img-src data:; connect-src ");
  if (live)
    mlprof__out_lit(o, "'self'");
  else
    mlprof__out_lit(o, "'none'");
  mlprof__out_lit(o, "\">\n<title>");
  mlprof__out_html_text(o, title, strlen(title));
  mlprof__out_lit(o, "</title>\n<style>\n");
  mlprof__out_write(o, html_css, sizeof html_css - 1);
  mlprof__out_lit(o, "</style></head>\n<body>\n<header><h1 id=\"title\">");
  mlprof__out_html_text(o, title, strlen(title));
  mlprof__out_lit(o,
                  "</h1><span class=\"sub\" id=\"sub\"></span><span "
                  "class=\"live\" id=\"live\"></span></header>\n<nav "
                  "id=\"nav\"></nav>\n<main id=\"main\"><noscript>This report "
                  "draws its tables and charts with JavaScript; use mlprof "
                  "report for text.</noscript></main>\n<script "
                  "id=\"mlprof-data\" type=\"application/json\">");
  int rc = mlprof__export_html_data(r, res, f, tree, opts, o);
  mlprof__out_lit(o, "</script>\n<script>\n");
  mlprof__out_write(o, html_js, sizeof html_js - 1);
  mlprof__out_lit(o, "</script>\n</body></html>\n");
  return rc ? rc : o->err;
}

int mlprof__export_html(const mlprof__report *r, const mlprof__resources *res,
                        const mlprof__findings *f, mlprof__out *o) {
  return mlprof__export_html_page(r, res, f, NULL, NULL, o);
}
