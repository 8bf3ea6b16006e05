/* The analysis driver (analysis.h): one read of each profile per pass, each
 * record forwarded by a tee visitor to every analysis of that pass, through
 * the filter (filter.h) when there is one, so that every analysis sees the
 * same records. */
#include "analysis.h"

#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* At most this many analyses share a pass: pass 1 has eight (statistics,
 * resources, tree, lines, hot functions, pyramid, memory, the dashboard's
 * stack samples). */
#define TEE_MAX 8

typedef struct {
  mlprof__visitor v[TEE_MAX];
  /* gate[i]: NULL, or a count member i's spans (span and open) wait on:
   * they join the reading at the first chunk that starts with it non-zero
   * (the hot functions' spans, which label samples of earlier chunks). */
  const size_t *gate[TEE_MAX];
  int asleep; /* some gated member has not joined yet */
  size_t n;
  /* Per callback, the members that have it, in order (tee_visitor): a
   * record costs a call per member that reads it, no test of the others. */
#define TEE_HAS(cb, ...) uint8_t cb##_at[TEE_MAX], cb##_n;
  MLPROF__VISITOR_CALLBACKS(TEE_HAS)
#undef TEE_HAS
} tee;
_Static_assert(TEE_MAX >= 8, "pass 1 tees eight analyses");

/* Forwards a callback to every member that has it, in order; the first
 * non-zero return stops the read. */
#define TEE(cb, params, ...)                                              \
  static int tee_##cb params {                                            \
    const tee *m = ud;                                                    \
    if (m->cb##_n == 1) /* a tail call */                                 \
      return m->v[m->cb##_at[0]].cb(m->v[m->cb##_at[0]].ud, __VA_ARGS__); \
    for (size_t k = 0; k < m->cb##_n; k++) {                              \
      const mlprof__visitor *mv = &m->v[m->cb##_at[k]];                   \
      int rc = mv->cb(mv->ud, __VA_ARGS__);                               \
      if (rc) return rc;                                                  \
    }                                                                     \
    return 0;                                                             \
  }

MLPROF__VISITOR_CALLBACKS(TEE)
#undef TEE

/* Member i reads callback cb now: it has it, and it is not a span (span,
 * open) of a member whose gate is still shut (the names are constants:
 * the comparisons fold away). */
#define TEE_READS(t, i, cb)                           \
  ((t)->v[i].cb && (!(t)->gate[i] || *(t)->gate[i] || \
                    (strcmp(#cb, "span") && strcmp(#cb, "open"))))

/* Lists, per callback, the members that read it now. */
static void tee_lists(tee *t) {
  t->asleep = 0;
  for (size_t i = 0; i < t->n; i++) t->asleep |= t->gate[i] && !*t->gate[i];
#define HAS(cb, ...)                \
  t->cb##_n = 0;                    \
  for (size_t i = 0; i < t->n; i++) \
    if (TEE_READS(t, i, cb)) t->cb##_at[t->cb##_n++] = (uint8_t)i;
  MLPROF__VISITOR_CALLBACKS(HAS)
#undef HAS
}

/* A chunk begins: the members whose gates opened join, then the chunk is
 * forwarded. */
static int tee_chunk_gated(void *ud, uint16_t type, uint64_t off,
                           uint32_t len) {
  tee *t = ud;
  if (t->asleep) tee_lists(t);
  return tee_chunk(ud, type, off, len);
}

/* The visitor to read with: the one member as it is (no forwarding cost for
 * a pass of one analysis), else the tee, with only the callbacks some
 * member has so the reader skips what nobody reads. Fills t's lists. */
static mlprof__visitor tee_visitor(tee *t) {
  /* Members that read nothing (an analysis with nothing to do in this
   * profile) are left out. */
  size_t n = 0;
  for (size_t i = 0; i < t->n; i++) {
    int reads = 0;
#define READS(cb, ...) reads |= t->v[i].cb != NULL;
    MLPROF__VISITOR_CALLBACKS(READS)
#undef READS
    if (reads) {
      t->gate[n] = t->gate[i];
      t->v[n++] = t->v[i];
    }
  }
  t->n = n;
  if (t->n == 1) return t->v[0];
  /* Every callback some member has, asleep or not, is the tee's. */
  mlprof__visitor v = {.ud = (void *)t};
#define HAS(cb, ...)                \
  for (size_t i = 0; i < t->n; i++) \
    if (t->v[i].cb) v.cb = tee_##cb;
  MLPROF__VISITOR_CALLBACKS(HAS)
#undef HAS
  tee_lists(t);
  if (t->asleep) v.chunk = tee_chunk_gated;
  return v;
}

/* Reads profile p through the members of t: 0 when it was read (damage and
 * a read that stops early included: why says why), or MLPROF_ENOMEM. The
 * profile's first read leaves its mark in marks[i], by which the later ones
 * read it again (mlprof__read_file_again: its CRCs are checked once). */
static int read_profile(mlprof__analysis *a, mlprof__filtered *fd, size_t i,
                        const mlprof__job_profile *p, tee *t,
                        mlprof__read_mark *marks, mlprof__read_report *rep,
                        int *rd, char *why, size_t whylen) {
  mlprof__visitor v = tee_visitor(t);
  mlprof__filter_read fr = {0};
  if (fd) mlprof__filter_visitor(fd, i, &fr, &v, &v);
  memset(rep, 0, sizeof *rep);
  why[0] = '\0';
  a->reads++;
  if (marks[i].valid) {
    *rd = mlprof__read_file_again(p->path, &marks[i], &v, rep, why, whylen);
  } else {
    *rd = mlprof__read_file(p->path, &v, rep, why, whylen);
    marks[i] = rep->mark;
  }
  mlprof__filter_read_free(&fr);
  if (*rd == MLPROF_ENOMEM) return *rd;
  if (*rd && !why[0]) snprintf(why, whylen, "%s", mlprof_strerror(*rd));
  return 0;
}

void mlprof__analysis_opts_init(mlprof__analysis_opts *o) {
  memset(o, 0, sizeof *o);
  o->want = MLPROF__ANALYSIS_STATS;
  mlprof__findings_opts_init(&o->findings);
  o->sort = MLPROF__SORT_TOTAL;
  o->durations_budget = MLPROF__STATS_BUDGET;
  o->filter_must_match = 1;
}

/* The statistics' selection passes (stats.h), when some zone outgrew the
 * budget of raw durations: the spans again, for that zone's percentiles.
 * Returns 0 or MLPROF_ENOMEM. */
static int select_passes(const mlprof__job *job, mlprof__filtered *fd,
                         mlprof__read_mark *marks, mlprof__analysis *a,
                         mlprof__stats *s) {
  int rc;
  while ((rc = mlprof__stats_select_begin(s)) > 0) {
    for (size_t i = 0; i < job->count; i++) {
      tee t = {.n = 1};
      mlprof__stats_select_profile(s, &t.v[0]);
      mlprof__read_report rep;
      char why[256];
      int rd = 0;
      /* A file that went away or broke since pass 1 keeps what it gave. */
      if ((rc = read_profile(a, fd, i, &job->profiles[i], &t, marks, &rep, &rd,
                             why, sizeof why)))
        return rc;
    }
    if ((rc = mlprof__stats_select_end(s))) return rc;
  }
  return rc;
}

/* Pass 1: every profile once, for the statistics, the samples, the tree
 * and the pyramid, which need nothing but the records. */
static int first_pass(const mlprof__job *job, unsigned want,
                      const mlprof__analysis_opts *opts, mlprof__filtered *fd,
                      mlprof__read_mark *marks, mlprof__analysis *a) {
  mlprof__stats *s = NULL;
  mlprof__resources_builder *rb = NULL;
  mlprof__tree_builder *tb = NULL;
  mlprof__lines_builder *lnb = NULL;
  mlprof__lines lines;
  mlprof__hot_builder *hb = NULL;
  mlprof__hot hot;
  mlprof__lod_builder *lb = NULL;
  mlprof__memory_builder *mb = NULL;
  mlprof__memory mem;
  mlprof__flame_builder *fb = NULL;
  int rc = 0;
  if (want & MLPROF__ANALYSIS_STATS) {
    if (!(s = mlprof__stats_new()) || !(lnb = mlprof__lines_begin(&lines)) ||
        !(hb = mlprof__hot_begin(&hot)))
      rc = MLPROF_ENOMEM;
    if (s) mlprof__stats_keep_durations(s, opts->keep_durations);
    if (s) mlprof__stats_budget(s, opts->durations_budget);
    if (s && fd) mlprof__stats_selection(s);
  }
  if (!rc && (want & MLPROF__ANALYSIS_STATS) &&
      !(mb = mlprof__memory_begin(&mem)))
    rc = MLPROF_ENOMEM;
  if (!rc && hb && (want & MLPROF__ANALYSIS_FLAME) &&
      !(fb = mlprof__flame_begin(&a->flame, hb, job)))
    rc = MLPROF_ENOMEM;
  if (fb && opts->flame_uncapped) mlprof__flame_uncapped(fb);
  if (!rc && (want & MLPROF__ANALYSIS_RESOURCES) &&
      !(rb = mlprof__resources_begin(&a->res)))
    rc = MLPROF_ENOMEM;
  if (!rc && (want & MLPROF__ANALYSIS_TREE) &&
      !(tb = mlprof__tree_begin(&a->tree)))
    rc = MLPROF_ENOMEM;
  if (!rc && (want & MLPROF__ANALYSIS_LOD) &&
      !(lb = mlprof__lod_begin(&a->lod, opts->lod_items)))
    rc = MLPROF_ENOMEM;
  for (size_t i = 0; i < job->count && !rc; i++) {
    const mlprof__job_profile *p = &job->profiles[i];
    tee t = {.n = 0};
    if (s) rc = mlprof__stats_profile_begin(s, p, &t.v[t.n++]);
    if (!rc && rb) rc = mlprof__resources_profile_begin(rb, p, i, &t.v[t.n++]);
    if (!rc && tb) mlprof__tree_profile_begin(tb, p, &t.v[t.n++]);
    if (!rc && lnb) mlprof__lines_profile_begin(lnb, &t.v[t.n++]);
    if (!rc && hb) {
      t.gate[t.n] = mlprof__hot_samples(hb);
      mlprof__hot_profile_begin(hb, &t.v[t.n++]);
    }
    if (!rc && lb) rc = mlprof__lod_profile_begin(lb, p, i, &t.v[t.n++]);
    if (!rc && mb) mlprof__memory_profile_begin(mb, i, p->pid, &t.v[t.n++]);
    if (!rc && fb) mlprof__flame_profile_begin(fb, i, &t.v[t.n++]);
    mlprof__read_report rep;
    char why[256];
    int rd = 0;
    if (!rc && t.n)
      rc = read_profile(a, fd, i, p, &t, marks, &rep, &rd, why, sizeof why);
    if (!rc && s) rc = mlprof__stats_profile_end(s, &rep, rd ? why : NULL);
    if (!rc && rb) rc = mlprof__resources_profile_end(rb);
    if (!rc && tb) rc = mlprof__tree_profile_end(tb);
    if (!rc && lnb) rc = mlprof__lines_profile_end(lnb);
    if (!rc && hb) rc = mlprof__hot_profile_end(hb);
    if (!rc && lb) rc = mlprof__lod_profile_end(lb);
    if (!rc && mb) rc = mlprof__memory_profile_end(mb);
    /* After the hot functions', which hand it the profile's samples. */
    if (!rc && fb) rc = mlprof__flame_profile_end(fb);
  }
  if (!rc && s) rc = select_passes(job, fd, marks, a, s);
  mlprof__lines_finish(lnb);
  if (hb) {
    /* Frees hb; hot is freed on failure. */
    int hrc = mlprof__hot_finish(hb);
    if (!rc)
      rc = hrc;
    else if (!hrc)
      mlprof__hot_free(&hot);
  }
  if (fb && !rc) {
    /* Frees fb; the flame is freed on failure. */
    rc = mlprof__flame_finish(fb, &hot);
    fb = NULL;
    if (rc) mlprof__hot_free(&hot);
  }
  mlprof__flame_abort(fb);
  if (rc) {
    if (lnb) mlprof__lines_free(&lines);
    mlprof__stats_free(s);
    mlprof__resources_abort(rb);
    mlprof__tree_abort(tb);
    mlprof__lod_abort(lb);
    mlprof__memory_abort(mb);
    return rc;
  }
  /* Each finish frees its builder, whatever the outcome. */
  if (s) rc = mlprof__stats_finish(s, &a->r);
  if (s && !rc) {
    a->r.lines = lines;
    a->r.hot = hot;
  } else if (lnb) {
    mlprof__lines_free(&lines);
    if (hb) mlprof__hot_free(&hot);
  }
  if (rb) {
    int rrc = mlprof__resources_finish(rb, job);
    if (!rc) rc = rrc;
  }
  if (tb) {
    int trc = mlprof__tree_finish(tb);
    if (!rc) rc = trc;
  }
  if (lb) {
    int lrc = mlprof__lod_finish(lb);
    if (!rc) rc = lrc;
  }
  if (mb) {
    int mrc = mlprof__memory_finish(mb);
    if (!rc && !mrc && s)
      a->r.mem = mem;
    else if (!mrc)
      mlprof__memory_free(&mem);
    if (!rc) rc = mrc;
  }
  return rc;
}

/* Pass 2, only when wanted: the spans again, for the analyses that need
 * the samples' series of pass 1 while they read them (the findings, and the
 * resources' zone averages when some process was sampled). Profiles that
 * neither needs are not read. */
static int second_pass(const mlprof__job *job, unsigned want,
                       const mlprof__analysis_opts *opts, mlprof__filtered *fd,
                       mlprof__read_mark *marks, mlprof__analysis *a) {
  mlprof__zone_pass *zp = NULL;
  mlprof__findings_builder *fb = NULL;
  mlprof__dist_builder *db = NULL;
  int rc = 0;
  if (want & MLPROF__ANALYSIS_RESOURCES)
    rc = mlprof__resources_zones_begin(&a->res, &zp);
  if (!rc && (want & MLPROF__ANALYSIS_FINDINGS) &&
      !(fb = mlprof__findings_begin(job, &a->r, &a->res, &opts->findings,
                                    &a->f)))
    rc = MLPROF_ENOMEM;
  if (fb && !(db = mlprof__dist_begin(job, &a->f.dist))) rc = MLPROF_ENOMEM;
  for (size_t i = 0; i < job->count && !rc && (zp || fb); i++) {
    const mlprof__job_profile *p = &job->profiles[i];
    tee t = {.n = 0};
    if (zp) t.n += (size_t)mlprof__resources_zones_profile(zp, p, &t.v[t.n]);
    if (fb) mlprof__findings_profile_begin(fb, i, &t.v[t.n++]);
    if (db) mlprof__dist_profile_begin(db, i, &t.v[t.n++]);
    mlprof__read_report rep;
    char why[256];
    int rd = 0;
    /* A file that went away or broke since pass 1 keeps what it gave. */
    if (t.n)
      rc = read_profile(a, fd, i, p, &t, marks, &rep, &rd, why, sizeof why);
    if (fb && mlprof__findings_profile_end(fb) && !rc) rc = MLPROF_ENOMEM;
    if (!rc && db) rc = mlprof__dist_profile_end(db);
  }
  if (rc) {
    mlprof__resources_zones_abort(zp);
    mlprof__dist_abort(db);
    mlprof__findings_abort(fb);
    return rc;
  }
  /* The findings use the zone averages: those first. */
  if (zp) rc = mlprof__resources_zones_finish(zp);
  if (fb && rc) {
    mlprof__dist_abort(db);
    mlprof__findings_abort(fb);
  } else if (fb) {
    rc = mlprof__findings_finish(fb);
    /* The distributed findings join the others, already sorted. */
    if (rc)
      mlprof__dist_abort(db);
    else
      rc = mlprof__dist_finish(db, &a->f);
  }
  return rc;
}

/* Removes the zones f does not show from r. */
/* Keeps the zones of r that f shows. With must_match, when r had zones and
 * f shows none of them, says so in err with a few of their names and
 * returns 1 (r unchanged); else 0. */
static int keep_zones(mlprof__report *r, const mlprof__filter *f,
                      int must_match, char *err, size_t errlen) {
  size_t n = 0;
  for (size_t i = 0; i < r->nzones; i++)
    n += mlprof__filter_zone(f, r->zones[i].name, r->zones[i].category) != 0;
  if (!n && r->nzones && must_match) {
    size_t at = (size_t)snprintf(
        err, errlen, "--zone/--category/--exclude match no zone of this run: ");
    for (size_t i = 0; i < r->nzones && i < 6 && at < errlen; i++)
      at += (size_t)snprintf(err + at, errlen - at, "%s\"%s\"", i ? ", " : "",
                             r->zones[i].name);
    if (at < errlen && r->nzones > 6)
      snprintf(err + at, errlen - at, " and %zu more", r->nzones - 6);
    return 1;
  }
  n = 0;
  for (size_t i = 0; i < r->nzones; i++) {
    mlprof__zone_stats *z = &r->zones[i];
    if (mlprof__filter_zone(f, z->name, z->category)) {
      r->zones[n++] = *z;
      continue;
    }
    free(z->name);
    free(z->units);
    free(z->durations);
  }
  r->nzones = n;
  return 0;
}

/* What f does to a name of the tree (filter.h). */
enum { FATE_KNOWN = 1, FATE_SHOWN = 2, FATE_EXCLUDED = 4 };

/* The fate of name k of t, worked out on first use into how[k]. */
static unsigned name_fate(const mlprof__tree *t, const mlprof__filter *f,
                          uint8_t *how, uint32_t k) {
  if (!how[k]) {
    how[k] = FATE_KNOWN;
    if (mlprof__filter_zone(f, t->names[k], t->categories[k]))
      how[k] |= FATE_SHOWN;
    if (mlprof__filter_excluded(f, t->names[k])) how[k] |= FATE_EXCLUDED;
  }
  return how[k];
}

/* Narrows t to the zones f shows, in place (docs/guide.md, "Filters"): the
 * roots become the outermost nodes of zones shown, merged by name; under
 * them, a node of an excluded zone is removed and its children merged into
 * its parent, whose frame keeps the removed zone's own time. Parents stay
 * before children. Returns 0 or MLPROF_ENOMEM (t is then half done: free
 * it). */
static int keep_subtrees(mlprof__tree *t, const mlprof__filter *f) {
  /* Per old node: the new node its children go under; NONE outside every
   * subtree kept. New nodes are made in old order, never after the old
   * node being read, so t->nodes is rewritten as it is read. */
  uint32_t *up = malloc((t->nnodes ? t->nnodes : 1) * sizeof *up);
  uint8_t *how = calloc(t->nnames ? t->nnames : 1, 1);
  mlprof__map made = {0}; /* (new parent + 1, name) -> new node */
  int rc = up && how ? 0 : MLPROF_ENOMEM;
  size_t n = 0;
  for (size_t i = 0; i < t->nnodes && !rc; i++) {
    mlprof__tree_node x = t->nodes[i];
    uint32_t at = x.parent == MLPROF__NONE ? MLPROF__NONE : up[x.parent];
    unsigned fate = name_fate(t, f, how, x.name);
    if (at == MLPROF__NONE ? !(fate & FATE_SHOWN) : (fate & FATE_EXCLUDED)) {
      up[i] = at;
      continue;
    }
    uint64_t key = ((uint64_t)(uint32_t)(at + 1) << 32) | x.name;
    uint32_t k = mlprof__map_get(&made, key);
    if (k == MLPROF__NONE) {
      k = (uint32_t)n;
      if ((rc = mlprof__map_put(&made, key, k))) break;
      t->nodes[n++] = (mlprof__tree_node){.name = x.name, .parent = at};
    }
    t->nodes[k].total_ns += x.total_ns;
    t->nodes[k].count += x.count;
    up[i] = k;
  }
  if (!rc) t->nnodes = n;
  free(up);
  free(how);
  mlprof__map_clear(&made);
  return rc;
}

/* Adds line to r's warnings. Returns 0 or MLPROF_ENOMEM. */
static int add_warning(mlprof__report *r, const char *line) {
  char **w = realloc(r->warnings, (r->nwarnings + 1) * sizeof *w);
  if (!w) return MLPROF_ENOMEM;
  r->warnings = w;
  if (!(w[r->nwarnings] = mlprof__dup(line, strlen(line))))
    return MLPROF_ENOMEM;
  r->nwarnings++;
  return 0;
}

int mlprof__analysis_run(const mlprof__job *job,
                         const mlprof__analysis_opts *opts, mlprof__analysis *a,
                         char *err, size_t errlen) {
  memset(a, 0, sizeof *a);
  unsigned want = opts->want;
  if (want & MLPROF__ANALYSIS_FINDINGS)
    want |= MLPROF__ANALYSIS_STATS | MLPROF__ANALYSIS_RESOURCES;
  if (want & MLPROF__ANALYSIS_FLAME) want |= MLPROF__ANALYSIS_STATS;
  a->have = want;
  const mlprof__filter *f = opts->filter;
  mlprof__filtered *fd = NULL;
  char warn[512] = "";
  int rc = 0;
  if (f && mlprof__filter_records(f))
    rc = mlprof__filter_prepare(f, job, 0, &fd, warn, sizeof warn);
  const char *none =
      opts->filter_must_match && !rc ? mlprof__filtered_unmatched(fd) : NULL;
  if (none) {
    snprintf(err, errlen, "%s", none);
    mlprof__filtered_free(fd);
    memset(a, 0, sizeof *a);
    return MLPROF_EINVAL;
  }
  mlprof__read_mark *marks = NULL;
  if (!rc && !(marks = calloc(job->count ? job->count : 1, sizeof *marks)))
    rc = MLPROF_ENOMEM;
  if (!rc) rc = first_pass(job, want, opts, fd, marks, a);
  if (!rc) rc = second_pass(job, want, opts, fd, marks, a);
  free(marks);
  /* Hot functions per step part, once the findings know the steps. */
  if (!rc && (want & MLPROF__ANALYSIS_FINDINGS) &&
      a->f.steps.source != MLPROF__STEPS_NONE)
    rc = mlprof__hot_steps(&a->r.hot, a->f.steps.source == MLPROF__STEPS_MARKS,
                           a->f.steps.zone, a->f.steps.zone_len);
  /* The pyramid's windows read the profiles again through the same filter
   * (lod.h). */
  if (!rc && (want & MLPROF__ANALYSIS_LOD)) {
    a->lod.filtered = fd;
    fd = NULL;
  }
  mlprof__filtered_free(fd);
  if (!rc && warn[0] && (want & MLPROF__ANALYSIS_STATS))
    rc = add_warning(&a->r, warn);
  if (!rc && (want & MLPROF__ANALYSIS_TREE) && f && mlprof__filter_zones(f))
    rc = keep_subtrees(&a->tree, f);
  if (rc) {
    mlprof__analysis_free(a);
    snprintf(err, errlen, "out of memory");
    return rc;
  }
  if ((want & MLPROF__ANALYSIS_STATS) && f && mlprof__filter_zones(f) &&
      keep_zones(&a->r, f, opts->filter_must_match, err, errlen)) {
    mlprof__analysis_free(a);
    return MLPROF_EINVAL;
  }
  if (want & MLPROF__ANALYSIS_STATS)
    mlprof__report_sort(&a->r, opts->sort, opts->top);
  return 0;
}

void mlprof__analysis_free(mlprof__analysis *a) {
  mlprof__report_free(&a->r);
  mlprof__resources_free(&a->res);
  mlprof__findings_free(&a->f);
  mlprof__tree_free(&a->tree);
  mlprof__lod_free(&a->lod);
  mlprof__flame_free(&a->flame);
  memset(a, 0, sizeof *a);
}
