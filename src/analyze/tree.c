#include "tree.h"

#include <math.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../format/wire.h"
#include "../format/subject.h"
#include "findings.h"
#include "stats.h"

#define NONE UINT32_MAX

/* The measures kept as series; others are in the report's summaries. */
static const char *const kept_measures[] = {"cpu_pct",
                                            "rss_bytes",
                                            "gpu_mem_bytes",
                                            "cpu_user_pct",
                                            "cpu_system_pct",
                                            "cpu_iowait_pct",
                                            "mem_used_bytes",
                                            "cpu_power_w",
                                            "cpu_temp_c",
                                            "disk_read_bytes_s",
                                            "disk_write_bytes_s",
                                            "net_rx_bytes_s",
                                            "net_tx_bytes_s",
                                            "gpu_util_pct",
                                            "gpu_mem_used_bytes",
                                            "gpu_mem_total_bytes",
                                            "gpu_temp_c",
                                            "gpu_power_w",
                                            "gpu_sm_clock_mhz"};

/* ---- global strings ------------------------------------------------------ */

typedef struct {
  char *s;
  size_t len;
  /* Step part of its zones (mlprof__zone_part), outermost and nested; from
   * the first zone that had this name. */
  uint8_t part_top, part_nested;
  uint8_t category; /* the first not none that a name record gave it */
  int8_t measure;   /* index in kept_measures, -1 */
  uint8_t is_zone;
} gname;

/* ---- the builder --------------------------------------------------------- */

/* A node of a thread's pending forest: spans that ended and whose parent has
 * not ended yet, aggregated by name under the same parent. */
typedef struct {
  uint32_t name, child, next;
  uint64_t total, count;
  uint64_t unclaimed; /* self time in its subtree with no part yet */
} tnode;

typedef struct {
  uint64_t tid;
  uint32_t *pend; /* per depth: first node of the forest, NONE */
  size_t npend;
  mlprof__marks marks;          /* its marks and step ends, job time */
  uint64_t cur[MLPROF__NPARTS]; /* the current step's time so far */
  mlprof__tree_step_bucket *b;  /* MLPROF__TREE_STEP_BUCKETS, lazily */
  uint64_t width;               /* steps per bucket */
} thread_state;

struct mlprof__tree_builder {
  mlprof__tree *t;
  gname *g; /* parallel to t->names */
  size_t g_cap;
  mlprof__strindex names; /* the lookup of t->names */
  mlprof__map nodemap;    /* (parent + 1, name) -> global node */
  mlprof__map seriesmap;
  size_t ncounters;
  /* per profile */
  const mlprof__job_profile *p;
  uint32_t host;
  mlprof__map ids;  /* file name id -> global name */
  mlprof__map tids; /* tid -> thread index */
  thread_state *th;
  size_t nth, th_cap;
  tnode *pool;
  size_t npool, pool_cap;
  uint32_t free_list;
  /* the busiest thread so far */
  mlprof__marks best_marks;
  mlprof__tree_step_bucket *best_b;
  uint64_t best_width;
};

typedef struct mlprof__tree_builder builder;

/* The global index of the string s (n bytes), added when new; NONE when out
 * of memory. */
static uint32_t intern(builder *b, const char *s, size_t n) {
  mlprof__tree *t = b->t;
  size_t before = t->nnames;
  /* Room in b->g first, so that a name in the table always has its entry. */
  if (mlprof__grow(&b->g, &b->g_cap, before + 1, sizeof *b->g)) return NONE;
  uint32_t id = mlprof__strindex_intern(&b->names, &t->names, &t->name_lens,
                                        &t->nnames, &t->names_cap, s, n);
  if (id == NONE || id < before) return id;
  gname *g = &b->g[id];
  memset(g, 0, sizeof *g);
  g->s = t->names[id];
  g->len = n;
  g->measure = -1;
  for (size_t k = 0; k < sizeof kept_measures / sizeof kept_measures[0]; k++)
    if (strcmp(g->s, kept_measures[k]) == 0 && strlen(g->s) == n)
      g->measure = (int8_t)k;
  return id;
}

static int on_header(void *ud, const mlprof__header *h) {
  builder *b = ud;
  const char *host = h->hostname ? h->hostname : "";
  uint32_t id = intern(b, host, strlen(host));
  if (id == NONE) return MLPROF_ENOMEM;
  b->host = id;
  return 0;
}

static int on_name(void *ud, const mlprof__name *n) {
  builder *b = ud;
  uint32_t id = intern(b, n->name, n->name_len);
  if (id == NONE) return MLPROF_ENOMEM;
  gname *g = &b->g[id];
  /* As the report takes a zone's category (stats.c). */
  if (!g->category) g->category = n->category;
  if (n->kind == MLPROF__NAME_ZONE && !g->is_zone) {
    g->is_zone = 1;
    g->part_top = (uint8_t)mlprof__zone_part(n->category, g->s, g->len, 0);
    g->part_nested = (uint8_t)mlprof__zone_part(n->category, g->s, g->len, 1);
  }
  return mlprof__map_put(&b->ids, n->id, id) ? MLPROF_ENOMEM : 0;
}

static thread_state *thread_of(builder *b, uint64_t tid) {
  uint32_t i = mlprof__map_get(&b->tids, tid);
  if (i != NONE) return &b->th[i];
  if (mlprof__grow(&b->th, &b->th_cap, b->nth + 1, sizeof *b->th)) return NULL;
  if (mlprof__map_put(&b->tids, tid, (uint32_t)b->nth)) return NULL;
  thread_state *s = &b->th[b->nth++];
  memset(s, 0, sizeof *s);
  s->tid = tid;
  s->width = 1;
  return s;
}

static uint32_t node_new(builder *b, uint32_t name) {
  uint32_t i;
  if (b->free_list != NONE) {
    i = b->free_list;
    b->free_list = b->pool[i].next;
  } else {
    if (b->npool >= NONE - 1 ||
        mlprof__grow(&b->pool, &b->pool_cap, b->npool + 1, sizeof *b->pool))
      return NONE;
    i = (uint32_t)b->npool++;
  }
  tnode *n = &b->pool[i];
  memset(n, 0, sizeof *n);
  n->name = name;
  n->child = n->next = NONE;
  return i;
}

static void node_release(builder *b, uint32_t i) {
  b->pool[i].next = b->free_list;
  b->free_list = i;
}

/* Moves the forest starting at list under dst, merging nodes of one name. */
static void merge_into(builder *b, uint32_t dst, uint32_t list) {
  while (list != NONE) {
    uint32_t c = list;
    list = b->pool[c].next;
    uint32_t f = b->pool[dst].child;
    while (f != NONE && b->pool[f].name != b->pool[c].name) f = b->pool[f].next;
    if (f == NONE) {
      b->pool[c].next = b->pool[dst].child;
      b->pool[dst].child = c;
    } else {
      b->pool[f].total += b->pool[c].total;
      b->pool[f].count += b->pool[c].count;
      b->pool[f].unclaimed += b->pool[c].unclaimed;
      uint32_t kids = b->pool[c].child;
      node_release(b, c);
      merge_into(b, f, kids);
    }
  }
}

/* Adds the pending node i (and its subtree) to the global tree under
 * gparent, then releases it. Returns 0 or MLPROF_ENOMEM. */
static int commit(builder *b, uint32_t i, uint32_t gparent) {
  mlprof__tree *t = b->t;
  tnode *n = &b->pool[i];
  uint64_t key = ((uint64_t)(uint32_t)(gparent + 1) << 32) | n->name;
  uint32_t g = mlprof__map_get(&b->nodemap, key);
  if (g == NONE && t->nnodes < MLPROF__TREE_MAX_NODES) {
    if (mlprof__grow(&t->nodes, &t->nodes_cap, t->nnodes + 1, sizeof *t->nodes))
      return MLPROF_ENOMEM;
    g = (uint32_t)t->nnodes;
    if (mlprof__map_put(&b->nodemap, key, g)) return MLPROF_ENOMEM;
    t->nodes[g] = (mlprof__tree_node){
        .name = n->name, .parent = gparent, .total_ns = 0, .count = 0};
    t->nnodes++;
  }
  uint32_t target = g;
  if (g != NONE) {
    t->nodes[g].total_ns += n->total;
    t->nodes[g].count += n->count;
  } else {
    target = gparent; /* the tree is full: counted in the parent */
  }
  uint32_t c = n->child;
  node_release(b, i);
  while (c != NONE) {
    uint32_t next = b->pool[c].next;
    if (target == NONE) {
      /* Full at the top: drop the subtree. */
      uint32_t kids = b->pool[c].child;
      node_release(b, c);
      while (kids != NONE) {
        uint32_t k = kids;
        kids = b->pool[k].next;
        b->pool[k].next = next;
        next = k;
      }
    } else if (commit(b, c, target)) {
      return MLPROF_ENOMEM;
    }
    c = next;
  }
  return 0;
}

/* Adds ns of part to the step the thread is in. A step runs from a mark to
 * the thread's next mark or step end, as the report counts steps: time
 * before the first mark or after a step end is in no step, and the time of
 * a step reaches its bucket only when the entry that ends it comes
 * (step_end), so a step cut short by the end of the profile is left out. */
static void bucket_add(thread_state *th, int part, uint64_t ns) {
  if (th->marks.in_step) th->cur[part] += ns;
}

/* The entry ending step th->marks.steps - 1, dur long: its time goes to its
 * bucket, two buckets merging into one whenever the steps outgrow them. As
 * the report counts a step, its parts are scaled to fit in it (a part's
 * span across a mark lands whole in the step where it ends), and the rest
 * of its time, in zones without a part or in none, is "other". */
static void step_end(thread_state *th, uint64_t dur) {
  uint64_t k = (th->marks.steps - 1) / th->width;
  while (k >= MLPROF__TREE_STEP_BUCKETS) {
    for (size_t i = 0; i < MLPROF__TREE_STEP_BUCKETS / 2; i++)
      for (int p = 0; p < MLPROF__NPARTS; p++)
        th->b[i].part_ns[p] =
            th->b[2 * i].part_ns[p] + th->b[2 * i + 1].part_ns[p];
    memset(th->b + MLPROF__TREE_STEP_BUCKETS / 2, 0,
           MLPROF__TREE_STEP_BUCKETS / 2 * sizeof *th->b);
    th->width *= 2;
    k = (th->marks.steps - 1) / th->width;
  }
  uint64_t sum = 0, parts = 0;
  for (int p = 0; p < MLPROF__PART_OTHER; p++) sum += th->cur[p];
  double scale = sum > dur ? (double)dur / (double)sum : 1;
  for (int p = 0; p < MLPROF__PART_OTHER; p++) {
    uint64_t v = (uint64_t)((double)th->cur[p] * scale);
    th->b[k].part_ns[p] += v;
    parts += v;
    th->cur[p] = 0;
  }
  th->b[k].part_ns[MLPROF__PART_OTHER] += dur > parts ? dur - parts : 0;
}

static int on_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin, uint64_t end) {
  builder *b = ud;
  b->t->spans++;
  if (depth >= MLPROF__TREE_MAX_DEPTH) return 0;
  uint32_t gid = mlprof__map_get(&b->ids, name);
  if (gid == NONE) return 0;
  thread_state *th = thread_of(b, tid);
  if (!th) return MLPROF_ENOMEM;
  size_t had = th->npend;
  if (mlprof__grow(&th->pend, &th->npend, (size_t)depth + 2, sizeof *th->pend))
    return MLPROF_ENOMEM;
  for (size_t i = had; i < th->npend; i++) th->pend[i] = NONE;
  uint64_t dur = end > begin ? end - begin : 0;
  uint32_t kids = th->pend[depth + 1];
  th->pend[depth + 1] = NONE;
  uint64_t child_ns = 0, unclaimed = 0;
  for (uint32_t c = kids; c != NONE; c = b->pool[c].next) {
    child_ns += b->pool[c].total;
    unclaimed += b->pool[c].unclaimed;
    b->pool[c].unclaimed = 0;
  }
  uint64_t self = dur > child_ns ? dur - child_ns : 0;
  const gname *g = &b->g[gid];
  int part = depth ? g->part_nested : g->part_top;
  /* The step part of self time: the zone's own, else its parent's. */
  if (part != MLPROF__PART_OTHER) {
    bucket_add(th, part, self + unclaimed);
    unclaimed = 0;
  } else {
    unclaimed += self;
  }

  uint32_t n = th->pend[depth];
  while (n != NONE && b->pool[n].name != gid) n = b->pool[n].next;
  if (n == NONE) {
    n = node_new(b, gid);
    if (n == NONE) return MLPROF_ENOMEM;
    b->pool[n].next = th->pend[depth];
    th->pend[depth] = n;
  }
  b->pool[n].total += dur;
  b->pool[n].count++;
  b->pool[n].unclaimed += unclaimed;
  merge_into(b, n, kids);
  if (depth == 0) {
    uint32_t list = th->pend[0];
    th->pend[0] = NONE;
    while (list != NONE) {
      uint32_t next = b->pool[list].next;
      if (commit(b, list, NONE)) return MLPROF_ENOMEM;
      list = next;
    }
  }
  return 0;
}

static int step_entry(builder *b, uint32_t tid, uint64_t t, int end) {
  thread_state *th = thread_of(b, tid);
  if (!th) return MLPROF_ENOMEM;
  if (!th->b && !(th->b = calloc(MLPROF__TREE_STEP_BUCKETS, sizeof *th->b)))
    return MLPROF_ENOMEM;
  uint64_t steps = th->marks.steps, total = th->marks.total_ns;
  if (mlprof__marks_add(&th->marks, t + b->p->offset_ns, end))
    return MLPROF_ENOMEM;
  if (th->marks.steps > steps) step_end(th, th->marks.total_ns - total);
  return 0;
}

static int on_step(void *ud, uint32_t tid, uint64_t t) {
  return step_entry(ud, tid, t, 0);
}

static int on_step_end(void *ud, uint32_t tid, uint64_t t) {
  return step_entry(ud, tid, t, 1);
}

/* The series of (this profile's host, subject, id, measure), made when new
 * and create is set. NULL when out of memory or not made. */
static mlprof__tree_series *series_of(builder *b, uint8_t subject, uint64_t id,
                                      uint32_t measure, uint32_t label,
                                      int create) {
  mlprof__tree *t = b->t;
  uint64_t key = ((uint64_t)(b->host & 0xffff) << 48) |
                 ((uint64_t)subject << 44) |
                 ((uint64_t)(measure & 0xfff) << 32) | (id & 0xffffffffu);
  uint32_t i = mlprof__map_get(&b->seriesmap, key);
  /* The key is compact; confirm it names the same series. */
  while (i != NONE) {
    mlprof__tree_series *s = &t->series[i];
    if (s->subject == subject && s->id == id && s->measure == measure &&
        s->host == b->host) {
      if (s->label == 0 || (label && s->label != label)) s->label = label;
      return s;
    }
    key = key * 0x9e3779b97f4a7c15ull + 1;
    i = mlprof__map_get(&b->seriesmap, key);
  }
  if (!create) return NULL;
  if (mlprof__grow(&t->series, &t->series_cap, t->nseries + 1,
                   sizeof *t->series))
    return NULL;
  if (mlprof__map_put(&b->seriesmap, key, (uint32_t)t->nseries)) return NULL;
  mlprof__tree_series *s = &t->series[t->nseries++];
  memset(s, 0, sizeof *s);
  s->subject = subject;
  s->id = id;
  s->host = b->host;
  s->label = label;
  s->measure = measure;
  return s;
}

static int series_add(mlprof__tree_series *s, uint64_t t, double v) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    uint64_t *tt = realloc(s->t, cap * sizeof *tt);
    if (!tt) return MLPROF_ENOMEM;
    s->t = tt;
    double *vv = realloc(s->v, cap * sizeof *vv);
    if (!vv) return MLPROF_ENOMEM;
    s->v = vv;
    s->cap = cap;
  }
  s->t[s->n] = t;
  s->v[s->n] = v;
  s->n++;
  return 0;
}

static int on_sample(void *ud, const mlprof__sample_row *row) {
  builder *b = ud;
  if (row->subject > MLPROF__SUBJECT_GPU) return 0;
  uint32_t label = row->label ? mlprof__map_get(&b->ids, row->label) : NONE;
  if (label == NONE) label = 0;
  for (uint32_t k = 0; k < row->n; k++) {
    const mlprof__sample_measure *m = &row->m[k];
    if (!m->valid || !isfinite(m->value)) continue;
    uint32_t gid = mlprof__map_get(&b->ids, m->name);
    if (gid == NONE || b->g[gid].measure < 0) continue;
    mlprof__tree_series *s = series_of(b, row->subject, row->id, gid, label, 1);
    if (!s || series_add(s, row->t + b->p->offset_ns, m->value))
      return MLPROF_ENOMEM;
  }
  return 0;
}

static int on_counter(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                      double v) {
  builder *b = ud;
  if (!isfinite(v)) return 0;
  uint32_t gid = mlprof__map_get(&b->ids, name);
  if (gid == NONE) return 0;
  mlprof__tree_series *s = series_of(b, MLPROF__TREE_COUNTER, 0, gid, 0, 0);
  if (!s) {
    if (b->ncounters >= MLPROF__TREE_MAX_COUNTERS) return 0;
    s = series_of(b, MLPROF__TREE_COUNTER, 0, gid, 0, 1);
    if (!s) return MLPROF_ENOMEM;
    b->ncounters++;
  }
  return series_add(s, t + b->p->offset_ns, v);
}

/* Name 0 is "", so a label or host of 0 reads as none. */
builder *mlprof__tree_begin(mlprof__tree *t) {
  memset(t, 0, sizeof *t);
  builder *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->t = t;
  b->free_list = NONE;
  if (intern(b, "", 0) == NONE) {
    mlprof__tree_abort(b);
    return NULL;
  }
  return b;
}

void mlprof__tree_profile_begin(builder *b, const mlprof__job_profile *p,
                                mlprof__visitor *v) {
  b->p = p;
  b->host = 0;
  *v = (mlprof__visitor){.ud = b,
                         .header = on_header,
                         .name = on_name,
                         .span = on_span,
                         .step = on_step,
                         .step_end = on_step_end,
                         .sample = on_sample,
                         .counter = on_counter};
}

/* Pending spans (parents still open) go to the top of the tree; the busiest
 * thread's marks are kept. */
int mlprof__tree_profile_end(builder *b) {
  int rc = 0;
  for (size_t i = 0; i < b->nth; i++) {
    thread_state *th = &b->th[i];
    for (size_t d = 0; d < th->npend && !rc; d++) {
      uint32_t list = th->pend[d];
      th->pend[d] = NONE;
      while (list != NONE && !rc) {
        uint32_t next = b->pool[list].next;
        rc = commit(b, list, NONE);
        list = next;
      }
    }
    if (!rc && th->marks.marks > b->best_marks.marks) {
      mlprof__marks_free(&b->best_marks);
      free(b->best_b);
      b->best_marks = th->marks;
      b->best_b = th->b;
      b->best_width = th->width;
      memset(&th->marks, 0, sizeof th->marks);
      th->b = NULL;
    }
    free(th->pend);
    mlprof__marks_free(&th->marks);
    free(th->b);
  }
  b->nth = 0;
  mlprof__map_clear(&b->tids);
  mlprof__map_clear(&b->ids);
  b->npool = 0;
  b->free_list = NONE;
  return rc;
}

typedef struct {
  uint64_t t;
  double v;
} tv;

static int cmp_tv(const void *a, const void *b) {
  uint64_t x = ((const tv *)a)->t, y = ((const tv *)b)->t;
  return (x > y) - (x < y);
}

/* Sorts a series by time: profiles of several processes sampling the same
 * subject interleave. */
static int series_sort(mlprof__tree_series *s) {
  size_t i;
  for (i = 1; i < s->n && s->t[i - 1] <= s->t[i]; i++) {
  }
  if (i >= s->n) return 0;
  tv *a = malloc(s->n * sizeof *a);
  if (!a) return MLPROF_ENOMEM;
  for (size_t k = 0; k < s->n; k++) a[k] = (tv){s->t[k], s->v[k]};
  mlprof__sort(a, s->n, sizeof *a, cmp_tv);
  for (size_t k = 0; k < s->n; k++) {
    s->t[k] = a[k].t;
    s->v[k] = a[k].v;
  }
  free(a);
  return 0;
}

static void builder_free(builder *b) {
  free(b->g);
  mlprof__strindex_free(&b->names);
  mlprof__map_clear(&b->nodemap);
  mlprof__map_clear(&b->seriesmap);
  mlprof__map_clear(&b->ids);
  mlprof__map_clear(&b->tids);
  for (size_t i = 0; i < b->nth; i++) {
    free(b->th[i].pend);
    mlprof__marks_free(&b->th[i].marks);
    free(b->th[i].b);
  }
  free(b->th);
  free(b->pool);
  mlprof__marks_free(&b->best_marks);
  free(b->best_b);
  free(b);
}

void mlprof__tree_abort(builder *b) {
  if (!b) return;
  mlprof__tree_free(b->t);
  builder_free(b);
}

/* Fills t->marks with m's marks evenly picked (tree.h). */
static int keep_marks(mlprof__tree *t, const mlprof__marks *m) {
  uint64_t n = m->marks;
  size_t k = n < MLPROF__TREE_MAX_MARKS ? (size_t)n : MLPROF__TREE_MAX_MARKS;
  if (!(t->marks = malloc(k * sizeof *t->marks))) return MLPROF_ENOMEM;
  mlprof__marks_cursor c;
  mlprof__marks_cursor_init(&c, m);
  uint64_t at, j = 0;
  int end;
  while (t->nmarks < k && mlprof__marks_next(&c, &at, &end)) {
    if (end) continue;
    if (j++ == n * t->nmarks / k) t->marks[t->nmarks++] = at;
  }
  return 0;
}

int mlprof__tree_finish(builder *b) {
  mlprof__tree *t = b->t;
  int rc = 0;
  if (!(t->categories = malloc(t->nnames ? t->nnames : 1))) rc = MLPROF_ENOMEM;
  for (size_t i = 0; i < t->nnames && !rc; i++)
    t->categories[i] = b->g[i].category;
  for (size_t i = 0; i < t->nseries && !rc; i++)
    rc = series_sort(&t->series[i]);
  if (!rc && b->best_marks.marks) rc = keep_marks(t, &b->best_marks);
  if (!rc && b->best_marks.marks) {
    /* Buckets of complete steps. */
    uint64_t w = b->best_width, steps = b->best_marks.steps;
    size_t nb = (size_t)((steps + w - 1) / w);
    if (nb > MLPROF__TREE_STEP_BUCKETS) nb = MLPROF__TREE_STEP_BUCKETS;
    t->buckets = calloc(nb ? nb : 1, sizeof *t->buckets);
    if (!t->buckets) {
      rc = MLPROF_ENOMEM;
    } else {
      for (size_t k = 0; k < nb; k++) {
        t->buckets[k] = b->best_b[k];
        t->buckets[k].first_step = k * w;
        uint64_t last = (k + 1) * w < steps ? (k + 1) * w : steps;
        t->buckets[k].steps = last - k * w;
      }
      t->nbuckets = nb;
    }
  }
  builder_free(b);
  if (rc) mlprof__tree_free(t);
  return rc;
}

void mlprof__tree_free(mlprof__tree *t) {
  for (size_t i = 0; i < t->nnames; i++) free(t->names[i]);
  free(t->names);
  free(t->name_lens);
  free(t->categories);
  free(t->nodes);
  for (size_t i = 0; i < t->nseries; i++) {
    free(t->series[i].t);
    free(t->series[i].v);
  }
  free(t->series);
  free(t->marks);
  free(t->buckets);
  memset(t, 0, sizeof *t);
}

size_t mlprof__downsample(const double *v, size_t n, size_t max, size_t *idx) {
  if (n <= max) {
    for (size_t i = 0; i < n; i++) idx[i] = i;
    return n;
  }
  size_t runs = max / 2, k = 0;
  for (size_t r = 0; r < runs; r++) {
    size_t lo = n * r / runs, hi = n * (r + 1) / runs;
    if (hi <= lo) continue;
    size_t mn = lo, mx = lo;
    for (size_t i = lo + 1; i < hi; i++) {
      if (v[i] < v[mn]) mn = i;
      if (v[i] > v[mx]) mx = i;
    }
    if (mn == mx) {
      idx[k++] = mn;
    } else {
      idx[k++] = mn < mx ? mn : mx;
      idx[k++] = mn < mx ? mx : mn;
    }
  }
  return k;
}
