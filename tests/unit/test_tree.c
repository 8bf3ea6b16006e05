/* The call tree and what the dashboard draws from it (src/analyze/tree.c,
 * the "tree", "marks" and "step_buckets" of the HTML page's data), on
 * profiles written by hand (synth.h) with known times.
 *
 * The job of tree_job(): profile A (pid 100, start_mono 1000: job offset 0)
 * and profile B (pid 200, start_mono 1500: job offset 500).
 *
 * A, thread 7: three iterations i = 0, 1, 2 at T = 1000 i + 100:
 *   step       [T, T+900)      depth 0  no category, no part by name
 *     get_batch  [T, T+100)      depth 1  data by its name
 *     forward    [T+100, T+500)  depth 1  category forward
 *       attn       [T+150, T+300)  depth 2
 *       mlp        [T+300, T+450)  depth 2
 *     backward   [T+500, T+850)  depth 1  category backward
 *       attn       [T+550, T+650)  depth 2
 *   a step mark at 1000 i + 1000, and counter loss = 1 / (i + 1) there.
 * A, thread 8 (no marks):
 *   step [0, 500) > forward [100, 300); recurse [600, 900) > recurse
 *   [650, 750); orphan [1000, 1100) at depth 1 whose parent never ends;
 *   deep [1200, 1210) at depth 300 (past MLPROF__TREE_MAX_DEPTH).
 * A samples: system cpu_user_pct 30 at 3000; energy_j (a measure the tree
 * does not keep) 5 at 3000.
 * B, thread 9: step [0, 300) > forward [0, 200) > attn [0, 100), and
 *   HOSTILE [200, 250) at depth 1. B samples: system cpu_user_pct 10 at
 *   500 and 20 at 1500 (job 1000 and 2000). */
#include <math.h>
#include <stdarg.h>
#include <mlprof.h>
#include <stdlib.h>
#include <unistd.h>

#include "analyze/stats.h"
#include "analyze/tree.h"
#include "export/html.h"
#include "model/job.h"
#include "analyse.h"
#include "synth.h"
#include "test.h"

#define HOSTILE "<b>\"x\"\xff\n"

typedef struct {
  payload p;
  uint64_t t;
} events;

static void ev_begin(events *e, uint64_t tid) {
  e->p.n = 0;
  e->t = 0;
  p_uv(&e->p, tid);
  p_uv(&e->p, 0); /* dropped */
  p_uv(&e->p, 0); /* base */
}

static void ev_span(events *e, uint32_t name, uint32_t depth, uint64_t begin,
                    uint64_t end) {
  p_u8(&e->p, MLPROF__REC_SPAN);
  p_uv(&e->p, name);
  p_uv(&e->p, depth);
  p_sv(&e->p, (int64_t)begin - (int64_t)e->t);
  p_uv(&e->p, end - begin);
  e->t = begin;
}

static void ev_mark(events *e, uint64_t at) {
  p_u8(&e->p, MLPROF__REC_STEP);
  p_sv(&e->p, (int64_t)at - (int64_t)e->t);
  e->t = at;
}

static void ev_counter(events *e, uint32_t name, uint64_t at, double v) {
  p_u8(&e->p, MLPROF__REC_GAUGE);
  p_uv(&e->p, name);
  p_sv(&e->p, (int64_t)at - (int64_t)e->t);
  p_f64(&e->p, v);
  e->t = at;
}

enum {
  STEP = 1,
  FORWARD,
  ATTN,
  MLP,
  BACKWARD,
  GET_BATCH,
  RECURSE,
  ORPHAN,
  DEEP,
  LOSS,
  CPU_USER,
  ENERGY,
  HOSTILE_ID
};

static void zone_names(FILE *f) {
  payload p = {.n = 0};
  p_uv(&p, 13);
  p_name(&p, STEP, MLPROF__NAME_ZONE, 0, "step");
  p_name(&p, FORWARD, MLPROF__NAME_ZONE, MLPROF_CAT_FORWARD, "forward");
  p_name(&p, ATTN, MLPROF__NAME_ZONE, 0, "attn");
  p_name(&p, MLP, MLPROF__NAME_ZONE, 0, "mlp");
  p_name(&p, BACKWARD, MLPROF__NAME_ZONE, MLPROF_CAT_BACKWARD, "backward");
  p_name(&p, GET_BATCH, MLPROF__NAME_ZONE, 0, "get_batch");
  p_name(&p, RECURSE, MLPROF__NAME_ZONE, 0, "recurse");
  p_name(&p, ORPHAN, MLPROF__NAME_ZONE, 0, "orphan");
  p_name(&p, DEEP, MLPROF__NAME_ZONE, 0, "deep");
  p_name(&p, LOSS, MLPROF__NAME_GAUGE, 0, "loss");
  p_name(&p, CPU_USER, MLPROF__NAME_MEASURE, 0, "cpu_user_pct");
  p_name(&p, ENERGY, MLPROF__NAME_MEASURE, 0, "energy_j");
  p_name(&p, HOSTILE_ID, MLPROF__NAME_ZONE, 0, HOSTILE);
  chunk(f, MLPROF__CHUNK_NAMES, &p);
}

/* A SAMPLES chunk of system rows of one measure (and energy_j when set). */
static void system_samples(FILE *f, const uint64_t *t, const double *v,
                           size_t n, int energy) {
  payload p = {.n = 0};
  p_uv(&p, t[0]);
  for (size_t i = 0; i < n; i++) {
    row_begin(&p, MLPROF__SUBJECT_SYSTEM, 0, 0,
              i ? (int64_t)(t[i] - t[i - 1]) : 0, energy ? 2 : 1);
    m_valid(&p, CPU_USER, v[i]);
    if (energy) m_valid(&p, ENERGY, 5);
  }
  chunk(f, MLPROF__CHUNK_SAMPLES, &p);
}

typedef struct {
  char dir[64], a[128], b[128];
  mlprof__job job;
} tree_job;

static int tree_job_open(tree_job *j) {
  snprintf(j->dir, sizeof j->dir, "/tmp/mlprof-tree-XXXXXX");
  if (!mkdtemp(j->dir)) return -1;
  snprintf(j->a, sizeof j->a, "%s/a.mlprof", j->dir);
  snprintf(j->b, sizeof j->b, "%s/b.mlprof", j->dir);

  FILE *f = synth_open(j->a, 1);
  if (!f) return -1;
  synth_header(f, 100, 1, 1000, "h", "/bin/train");
  zone_names(f);
  events e;
  ev_begin(&e, 7);
  for (uint64_t i = 0; i < 3; i++) {
    uint64_t t = 1000 * i + 100;
    ev_span(&e, GET_BATCH, 1, t, t + 100);
    ev_span(&e, ATTN, 2, t + 150, t + 300);
    ev_span(&e, MLP, 2, t + 300, t + 450);
    ev_span(&e, FORWARD, 1, t + 100, t + 500);
    ev_span(&e, ATTN, 2, t + 550, t + 650);
    ev_span(&e, BACKWARD, 1, t + 500, t + 850);
    ev_span(&e, STEP, 0, t, t + 900);
    ev_mark(&e, 1000 * i + 1000);
    ev_counter(&e, LOSS, 1000 * i + 1000, 1.0 / (double)(i + 1));
  }
  ev_counter(&e, LOSS, 3100, NAN); /* not a point of the series */
  chunk(f, MLPROF__CHUNK_EVENTS, &e.p);
  ev_begin(&e, 8);
  ev_span(&e, FORWARD, 1, 100, 300);
  ev_span(&e, STEP, 0, 0, 500);
  ev_span(&e, RECURSE, 1, 650, 750);
  ev_span(&e, RECURSE, 0, 600, 900);
  ev_span(&e, ORPHAN, 1, 1000, 1100);
  ev_span(&e, DEEP, 300, 1200, 1210);
  chunk(f, MLPROF__CHUNK_EVENTS, &e.p);
  static const uint64_t ta[] = {3000};
  static const double va[] = {30};
  system_samples(f, ta, va, 1, 1);
  synth_end(f, 3200);
  fclose(f);

  f = synth_open(j->b, 1);
  if (!f) return -1;
  synth_header(f, 200, 100, 1500, "h", "/bin/worker");
  zone_names(f);
  ev_begin(&e, 9);
  ev_span(&e, ATTN, 2, 0, 100);
  ev_span(&e, FORWARD, 1, 0, 200);
  ev_span(&e, HOSTILE_ID, 1, 200, 250);
  ev_span(&e, STEP, 0, 0, 300);
  chunk(f, MLPROF__CHUNK_EVENTS, &e.p);
  static const uint64_t tb[] = {500, 1500};
  static const double vb[] = {10, 20};
  system_samples(f, tb, vb, 2, 0);
  synth_end(f, 2000);
  fclose(f);

  char err[256];
  const char *paths[] = {j->dir};
  return mlprof__job_open(&j->job, paths, 1, err, sizeof err);
}

static void tree_job_close(tree_job *j) {
  mlprof__job_close(&j->job);
  unlink(j->a);
  unlink(j->b);
  rmdir(j->dir);
}

/* The node at a path of names joined by '/' (HOSTILE has no '/'), or -1. */
static long node_at(const mlprof__tree *t, const char *path) {
  uint32_t parent = UINT32_MAX;
  long found = -1;
  while (*path) {
    const char *slash = strchr(path, '/');
    size_t len = slash ? (size_t)(slash - path) : strlen(path);
    found = -1;
    for (size_t i = 0; i < t->nnodes; i++) {
      const mlprof__tree_node *n = &t->nodes[i];
      if (n->parent == parent && t->name_lens[n->name] == len &&
          memcmp(t->names[n->name], path, len) == 0) {
        if (found >= 0) return -2; /* two nodes for one path */
        found = (long)i;
      }
    }
    if (found < 0) return -1;
    parent = (uint32_t)found;
    path += len + (slash != NULL);
  }
  return found;
}

/* A node's self time: its total less its children's totals. */
static uint64_t self_of(const mlprof__tree *t, long node) {
  uint64_t kids = 0;
  for (size_t i = 0; i < t->nnodes; i++)
    if (t->nodes[i].parent == (uint32_t)node) kids += t->nodes[i].total_ns;
  return t->nodes[node].total_ns - kids;
}

static const struct {
  const char *path;
  uint64_t total, count, self;
} expected_nodes[] = {
    /* A t7 3 x 900, t8 500, B 300; self 3 x 50 + 300 + 50 */
    {"step", 3500, 5, 500},
    {"step/get_batch", 300, 3, 300},
    /* A t7 3 x 400, t8 200, B 200; self 3 x 100 + 200 + 100 */
    {"step/forward", 1600, 5, 600},
    {"step/forward/attn", 550, 4, 550},
    {"step/forward/mlp", 450, 3, 450},
    {"step/backward", 1050, 3, 750},
    {"step/backward/attn", 300, 3, 300},
    {"step/" HOSTILE, 50, 1, 50},
    {"recurse", 300, 1, 200},
    {"recurse/recurse", 100, 1, 100},
    {"orphan", 100, 1, 100},
};
#define NEXPECTED (sizeof expected_nodes / sizeof expected_nodes[0])

static void test_tree_shape_totals_and_self(void) {
  tree_job j;
  CHECK_EQ(tree_job_open(&j), 0);
  mlprof__analysis a;
  char err[256];
  int rc = analyse(&j.job, MLPROF__ANALYSIS_TREE, &a, err, sizeof err);
  mlprof__tree t = a.tree;
  tree_job_close(&j);
  if (rc) TEST_FAIL("tree_build: %s", err);
  CHECK_EQ(t.spans, 21 + 6 + 4);
  CHECK_EQ(t.nnodes, NEXPECTED);
  for (size_t i = 0; i < NEXPECTED; i++) {
    long n = node_at(&t, expected_nodes[i].path);
    if (n < 0)
      TEST_FAIL("no single node for %s (%ld)", expected_nodes[i].path, n);
    if (t.nodes[n].total_ns != expected_nodes[i].total ||
        t.nodes[n].count != expected_nodes[i].count ||
        self_of(&t, n) != expected_nodes[i].self)
      TEST_FAIL("%s: total %" PRIu64 " count %" PRIu64 " self %" PRIu64
                ", want %" PRIu64 " %" PRIu64 " %" PRIu64,
                expected_nodes[i].path, t.nodes[n].total_ns, t.nodes[n].count,
                self_of(&t, n), expected_nodes[i].total,
                expected_nodes[i].count, expected_nodes[i].self);
  }
  /* Parents come before their children. */
  for (size_t i = 0; i < t.nnodes; i++)
    if (t.nodes[i].parent != UINT32_MAX) CHECK(t.nodes[i].parent < i);
  /* Past the depth limit: counted as read, not in the tree. */
  CHECK_EQ(node_at(&t, "deep"), -1);
  for (size_t i = 0; i < t.nnodes; i++)
    CHECK(strcmp(t.names[t.nodes[i].name], "deep") != 0);
  mlprof__tree_free(&t);
  CHECK_EQ(t.nnodes, 0);
  CHECK(t.nodes == NULL);
}

static void test_tree_series_sorted_and_kept(void) {
  tree_job j;
  CHECK_EQ(tree_job_open(&j), 0);
  mlprof__analysis a;
  char err[256];
  int rc = analyse(&j.job, MLPROF__ANALYSIS_TREE, &a, err, sizeof err);
  mlprof__tree t = a.tree;
  tree_job_close(&j);
  if (rc) TEST_FAIL("tree_build: %s", err);
  /* cpu_user_pct of the system (energy_j is not kept), and the counter. */
  CHECK_EQ(t.nseries, 2);
  const mlprof__tree_series *cpu = NULL, *loss = NULL;
  for (size_t i = 0; i < t.nseries; i++) {
    const char *m = t.names[t.series[i].measure];
    if (strcmp(m, "cpu_user_pct") == 0) cpu = &t.series[i];
    if (strcmp(m, "loss") == 0) loss = &t.series[i];
  }
  CHECK(cpu && loss);
  CHECK_EQ(cpu->subject, MLPROF__SUBJECT_SYSTEM);
  CHECK_STR(t.names[cpu->host], "h");
  /* Two profiles sampled the same host: one series, by job time. */
  CHECK_EQ(cpu->n, 3);
  static const uint64_t want_t[] = {1000, 2000, 3000};
  static const double want_v[] = {10, 20, 30};
  for (size_t i = 0; i < 3; i++) {
    CHECK_EQ_U64(cpu->t[i], want_t[i]);
    CHECK(cpu->v[i] == want_v[i]);
  }
  CHECK_EQ(loss->subject, MLPROF__TREE_COUNTER);
  CHECK_EQ(loss->n, 3); /* NaN left out */
  for (size_t i = 0; i < 3; i++) {
    CHECK_EQ_U64(loss->t[i], 1000 * (i + 1));
    CHECK(loss->v[i] == 1.0 / (double)(i + 1));
  }
  mlprof__tree_free(&t);
}

/* Three marks on thread 7 close two steps (the intervals between
 * consecutive marks, as the report counts them): iterations 1 and 2. Per
 * step: get_batch 100 as data; forward 400 (its own 100 and attn's and
 * mlp's 150 each, which have no part of their own); backward 350 (with its
 * attn); other 150: the step zone's own 50 and the 100 between it and the
 * next mark (a step's time is mark to mark). Iteration 0 ends before the first
 * mark: in no step. */
static void test_tree_step_buckets(void) {
  tree_job j;
  CHECK_EQ(tree_job_open(&j), 0);
  mlprof__analysis a;
  char err[256];
  int rc = analyse(&j.job, MLPROF__ANALYSIS_TREE, &a, err, sizeof err);
  mlprof__tree t = a.tree;
  tree_job_close(&j);
  if (rc) TEST_FAIL("tree_build: %s", err);
  CHECK_EQ(t.nmarks, 3);
  CHECK_EQ_U64(t.marks[0], 1000);
  CHECK_EQ_U64(t.marks[2], 3000);
  CHECK_EQ(t.nbuckets, 2);
  static const uint64_t want[MLPROF__NPARTS] = {100, 400, 350, 0, 0, 150};
  for (size_t k = 0; k < t.nbuckets; k++) {
    CHECK_EQ_U64(t.buckets[k].first_step, k);
    CHECK_EQ_U64(t.buckets[k].steps, 1);
    for (int p = 0; p < MLPROF__NPARTS; p++)
      if (t.buckets[k].part_ns[p] != want[p])
        TEST_FAIL("bucket %zu, %s: %" PRIu64 " != %" PRIu64, k,
                  mlprof__part_name(p), t.buckets[k].part_ns[p], want[p]);
  }
  mlprof__tree_free(&t);
}

/* The dashboard's step breakdown is the report's: same parts from the same
 * names (one classifier), summed over the same steps. */
static void test_tree_steps_match_report(void) {
  tree_job j;
  CHECK_EQ(tree_job_open(&j), 0);
  mlprof__analysis a;
  char err[256];
  int rc = analyse(&j.job, MLPROF__ANALYSIS_TREE | MLPROF__ANALYSIS_FINDINGS,
                   &a, err, sizeof err);
  mlprof__tree t = a.tree;
  mlprof__report r = a.r;
  mlprof__resources res = a.res;
  mlprof__findings f = a.f;
  tree_job_close(&j);
  if (rc) TEST_FAIL("build: %s", err);
  CHECK_EQ(f.steps.source, MLPROF__STEPS_MARKS);
  for (int p = 0; p < MLPROF__NPARTS; p++) {
    uint64_t sum = 0;
    for (size_t k = 0; k < t.nbuckets; k++) sum += t.buckets[k].part_ns[p];
    if (sum != f.steps.part_ns[p])
      TEST_FAIL("%s: dashboard %" PRIu64 " != report %" PRIu64,
                mlprof__part_name(p), sum, f.steps.part_ns[p]);
  }
  mlprof__findings_free(&f);
  mlprof__resources_free(&res);
  mlprof__report_free(&r);
  mlprof__tree_free(&t);
}

/* Many steps: buckets hold several consecutive steps each, at most
 * MLPROF__TREE_STEP_BUCKETS of them, and every step's time is counted once. */
static void test_tree_many_steps_fold_into_buckets(void) {
  char dir[] = "/tmp/mlprof-tree-XXXXXX", path[128];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/m.mlprof", dir);
  FILE *f = synth_open(path, 1);
  CHECK(f != NULL);
  synth_header(f, 100, 1, 0, "h", "/bin/train");
  zone_names(f);
  /* 1201 marks: 1200 steps of forward 10 ns (step i at 100 i + 100). */
  enum { MARKS = 1201 };
  events e;
  size_t done = 0;
  while (done < MARKS) {
    ev_begin(&e, 7);
    for (size_t k = 0; k < 200 && done < MARKS; k++, done++) {
      uint64_t t = 100 * (uint64_t)done;
      if (done) ev_span(&e, FORWARD, 0, t - 50, t - 40);
      ev_mark(&e, t);
    }
    chunk(f, MLPROF__CHUNK_EVENTS, &e.p);
  }
  synth_end(f, 100 * MARKS);
  fclose(f);
  mlprof__job job;
  char err[256];
  const char *paths[] = {path};
  CHECK_EQ(mlprof__job_open(&job, paths, 1, err, sizeof err), 0);
  mlprof__analysis a;
  int rc = analyse(&job, MLPROF__ANALYSIS_TREE, &a, err, sizeof err);
  mlprof__tree t = a.tree;
  mlprof__job_close(&job);
  unlink(path);
  rmdir(dir);
  if (rc) TEST_FAIL("tree_build: %s", err);
  CHECK_EQ(t.nmarks, MARKS);
  CHECK(t.nbuckets <= MLPROF__TREE_STEP_BUCKETS);
  CHECK(t.nbuckets >= MLPROF__TREE_STEP_BUCKETS / 4);
  uint64_t steps = 0, fwd = 0;
  for (size_t k = 0; k < t.nbuckets; k++) {
    CHECK_EQ_U64(t.buckets[k].first_step, steps);
    steps += t.buckets[k].steps;
    fwd += t.buckets[k].part_ns[MLPROF__PART_FORWARD];
    CHECK_EQ_U64(t.buckets[k].part_ns[MLPROF__PART_FORWARD],
                 10 * t.buckets[k].steps);
  }
  CHECK_EQ_U64(steps, MARKS - 1);
  CHECK_EQ_U64(fwd, 10 * (MARKS - 1));
  mlprof__tree_free(&t);
}

static void test_downsample_keeps_extremes(void) {
  size_t idx[8];
  static const double v[] = {5, 1, 9, 3, 7, 2, 8, 4};
  /* Two runs of four: each run's minimum and maximum, in time order. */
  CHECK_EQ(mlprof__downsample(v, 8, 4, idx), 4);
  CHECK_EQ(idx[0], 1);
  CHECK_EQ(idx[1], 2);
  CHECK_EQ(idx[2], 5);
  CHECK_EQ(idx[3], 6);
  /* Few enough points: all of them. */
  CHECK_EQ(mlprof__downsample(v, 3, 4, idx), 3);
  CHECK_EQ(idx[2], 2);
  /* A flat run gives one point. */
  static const double flat[] = {2, 2, 2, 2, 1, 3, 1, 3};
  CHECK_EQ(mlprof__downsample(flat, 8, 4, idx), 3);
  CHECK_EQ(idx[0], 0);
  CHECK_EQ(idx[1], 4);
  CHECK_EQ(idx[2], 5);
}

/* ---- the dashboard's data ------------------------------------------------ */

/* The tree of the job through the zone filters given as pairs of a kind
 * and a pattern (MLPROF__FILTER_CATEGORY for a category), ended by -1. */
static int filtered_tree(mlprof__tree *t, ...) {
  tree_job j;
  if (tree_job_open(&j)) return -1;
  mlprof__filter f = {0};
  char err[256];
  int rc = 0;
  va_list ap;
  va_start(ap, t);
  for (int kind; !rc && (kind = va_arg(ap, int)) >= 0;)
    rc =
        mlprof__filter_add(&f, kind, va_arg(ap, const char *), err, sizeof err);
  va_end(ap);
  mlprof__analysis_opts o;
  mlprof__analysis_opts_init(&o);
  o.want = MLPROF__ANALYSIS_TREE;
  o.filter = &f;
  mlprof__analysis a;
  if (!rc) rc = mlprof__analysis_run(&j.job, &o, &a, err, sizeof err);
  if (!rc) *t = a.tree;
  mlprof__filter_free(&f);
  tree_job_close(&j);
  return rc;
}

typedef struct {
  const char *path;
  uint64_t total, count, self;
} node_want;

/* t has exactly the nodes of want (n), parents before children. */
static void check_nodes(const mlprof__tree *t, const node_want *want,
                        size_t n) {
  for (size_t i = 0; i < n; i++) {
    long k = node_at(t, want[i].path);
    if (k < 0) TEST_FAIL("no single node for %s (%ld)", want[i].path, k);
    if (t->nodes[k].total_ns != want[i].total ||
        t->nodes[k].count != want[i].count || self_of(t, k) != want[i].self)
      TEST_FAIL("%s: total %" PRIu64 " count %" PRIu64 " self %" PRIu64
                ", want %" PRIu64 " %" PRIu64 " %" PRIu64,
                want[i].path, t->nodes[k].total_ns, t->nodes[k].count,
                self_of(t, k), want[i].total, want[i].count, want[i].self);
  }
  CHECK_EQ(t->nnodes, n);
  for (size_t i = 0; i < t->nnodes; i++)
    if (t->nodes[i].parent != UINT32_MAX) CHECK(t->nodes[i].parent < i);
}

/* --zone and --category: the outermost nodes of the zones shown are the
 * roots, merged by name, with their whole subtrees. */
static void test_tree_zone_filter_keeps_subtrees(void) {
  static const node_want fwd[] = {{"forward", 1600, 5, 600},
                                  {"forward/attn", 550, 4, 550},
                                  {"forward/mlp", 450, 3, 450}};
  mlprof__tree t;
  CHECK_EQ(filtered_tree(&t, MLPROF__SEL_ZONE, "forward", -1), 0);
  check_nodes(&t, fwd, 3);
  mlprof__tree_free(&t);
  /* attn has no category: kept inside forward's subtree. */
  CHECK_EQ(filtered_tree(&t, MLPROF__FILTER_CATEGORY, "forward", -1), 0);
  check_nodes(&t, fwd, 3);
  mlprof__tree_free(&t);
  /* attn under forward and under backward: one root. */
  static const node_want attn[] = {{"attn", 850, 7, 850}};
  CHECK_EQ(filtered_tree(&t, MLPROF__SEL_ZONE, "at*", -1), 0);
  check_nodes(&t, attn, 1);
  mlprof__tree_free(&t);
  /* A zone shown nowhere: an empty tree. */
  CHECK_EQ(filtered_tree(&t, MLPROF__SEL_ZONE, "nothing", -1), 0);
  CHECK_EQ(t.nnodes, 0);
  mlprof__tree_free(&t);
}

/* --exclude: the node goes, its children move up into its parent and merge
 * with their namesakes there; the parent's total is unchanged, so its
 * frame keeps the removed zone's own time. */
static void test_tree_exclude_moves_children_up(void) {
  static const node_want want[] = {
      /* self 500 + forward's 600 + backward's 750 */
      {"step", 3500, 5, 1850},          {"step/get_batch", 300, 3, 300},
      {"step/attn", 850, 7, 850},       {"step/mlp", 450, 3, 450},
      {"step/" HOSTILE, 50, 1, 50},     {"recurse", 300, 1, 200},
      {"recurse/recurse", 100, 1, 100}, {"orphan", 100, 1, 100},
  };
  mlprof__tree t;
  CHECK_EQ(filtered_tree(&t, MLPROF__SEL_EXCLUDE, "forward",
                         MLPROF__SEL_EXCLUDE, "backward", -1),
           0);
  check_nodes(&t, want, sizeof want / sizeof want[0]);
  mlprof__tree_free(&t);
  /* An excluded root: its children are roots. A zone excluded at every
   * depth (recurse) leaves nothing. */
  static const node_want top[] = {
      {"get_batch", 300, 3, 300},    {"forward", 1600, 5, 600},
      {"forward/attn", 550, 4, 550}, {"forward/mlp", 450, 3, 450},
      {"backward", 1050, 3, 750},    {"backward/attn", 300, 3, 300},
      {HOSTILE, 50, 1, 50},          {"orphan", 100, 1, 100},
  };
  CHECK_EQ(filtered_tree(&t, MLPROF__SEL_EXCLUDE, "step", MLPROF__SEL_EXCLUDE,
                         "recurse", -1),
           0);
  check_nodes(&t, top, sizeof top / sizeof top[0]);
  mlprof__tree_free(&t);
  /* Inside a zone's subtree. */
  static const node_want inside[] = {
      {"step", 3500, 5, 500},           {"step/get_batch", 300, 3, 300},
      {"step/forward", 1600, 5, 1150},  {"step/forward/mlp", 450, 3, 450},
      {"step/backward", 1050, 3, 1050}, {"step/" HOSTILE, 50, 1, 50},
  };
  CHECK_EQ(filtered_tree(&t, MLPROF__SEL_ZONE, "step", MLPROF__SEL_EXCLUDE,
                         "attn", -1),
           0);
  check_nodes(&t, inside, sizeof inside / sizeof inside[0]);
  mlprof__tree_free(&t);
}

/* Parses the "tree" object of the page's data: nodes as [name, parent,
 * total, count] and the names, JSON-escaped, as they are written. */
typedef struct {
  long node[64][4];
  size_t nnodes;
  char names[64][64];
  size_t nnames;
} page_tree;

static int parse_page_tree(const char *s, page_tree *pt) {
  const char *p = strstr(s, "\"tree\":{\"nodes\":[");
  if (!p) return -1;
  p += strlen("\"tree\":{\"nodes\":[");
  pt->nnodes = pt->nnames = 0;
  while (*p == '[' || *p == ',') {
    if (*p == ',') p++;
    if (*p != '[' || pt->nnodes == 64) return -1;
    p++;
    for (int k = 0; k < 4; k++) {
      char *end;
      pt->node[pt->nnodes][k] = strtol(p, &end, 10);
      if (end == p || (*end != ',' && *end != ']')) return -1;
      p = end + 1;
    }
    pt->nnodes++;
  }
  if (strncmp(p, "],\"names\":[", 11) != 0) return -1;
  p += 11;
  while (*p == '"') {
    const char *q = p + 1;
    while (*q && *q != '"') q += *q == '\\' ? 2 : 1;
    size_t len = (size_t)(q - p - 1);
    if (!*q || len >= sizeof pt->names[0] || pt->nnames == 64) return -1;
    memcpy(pt->names[pt->nnames], p + 1, len);
    pt->names[pt->nnames++][len] = '\0';
    p = q + 1;
    if (*p == ',') p++;
  }
  return *p == ']' ? 0 : -1;
}

static void test_html_data_tree_marks_and_steps(void) {
  tree_job j;
  CHECK_EQ(tree_job_open(&j), 0);
  mlprof__analysis a;
  char err[256];
  int rc = analyse(&j.job, MLPROF__ANALYSIS_TREE | MLPROF__ANALYSIS_STATS, &a,
                   err, sizeof err);
  mlprof__tree t = a.tree;
  mlprof__report r = a.r;
  tree_job_close(&j);
  if (rc) TEST_FAIL("build: %s", err);
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_html_data(&r, NULL, NULL, &t, NULL, &o), 0);
  char *end = mlprof__out_space(&o, 1);
  *end = '\0';
  const char *s = o.buf;
  page_tree pt;
  CHECK_EQ(parse_page_tree(s, &pt), 0);
  CHECK_EQ(pt.nnodes, NEXPECTED);
  /* Every node of the page, by its path of escaped names. */
  for (size_t i = 0; i < NEXPECTED; i++) {
    char want[128];
    snprintf(want, sizeof want, "%s", expected_nodes[i].path);
    if (strstr(want, HOSTILE))
      snprintf(want, sizeof want,
               "step/\\u003cb\\u003e\\\"x\\\"\xef\xbf\xbd\\u000a");
    size_t hit = 0;
    for (size_t k = 0; k < pt.nnodes; k++) {
      char path[256] = "";
      const char *parts[8];
      size_t np = 0;
      for (long n = (long)k; n >= 0 && np < 8; n = pt.node[n][1]) {
        if (pt.node[n][1] >= (long)k && n != (long)k) TEST_FAIL("parent after");
        parts[np++] = pt.names[pt.node[n][0]];
      }
      while (np--) {
        strcat(path, parts[np]);
        if (np) strcat(path, "/");
      }
      if (strcmp(path, want) == 0) {
        hit++;
        CHECK_EQ(pt.node[k][2], expected_nodes[i].total);
        CHECK_EQ(pt.node[k][3], expected_nodes[i].count);
      }
    }
    if (hit != 1) TEST_FAIL("%s: %zu nodes in the page", want, hit);
  }
  CHECK(strstr(s, "\"marks\":[1000,2000,3000]"));
  CHECK(strstr(s,
               "\"step_buckets\":[[0,1,100,400,350,0,0,150],"
               "[1,1,100,400,350,0,0,150]]"));
  CHECK(strstr(s,
               "{\"subject\":\"system\",\"id\":0,\"host\":\"h\",\"label\":"
               "\"\",\"measure\":\"cpu_user_pct\",\"t\":[1000,2000,3000],"
               "\"v\":[10,20,30]}"));
  CHECK(strstr(s,
               "{\"subject\":\"counter\",\"id\":0,\"host\":\"h\",\"label\":"
               "\"\",\"measure\":\"loss\",\"t\":[1000,2000,3000],"
               "\"v\":[1,0.5,0.333333]}"));
  CHECK(strstr(s, "<b>") == NULL);
  mlprof__out_close(&o);
  mlprof__report_free(&r);
  mlprof__tree_free(&t);
}

/* A job without spans or marks: an empty tree, and the page says so. */
static void test_html_data_empty_tree(void) {
  char dir[] = "/tmp/mlprof-tree-XXXXXX", path[128];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/e.mlprof", dir);
  FILE *f = synth_open(path, 1);
  CHECK(f != NULL);
  synth_header(f, 100, 1, 0, "h", "/bin/idle");
  synth_end(f, 10);
  fclose(f);
  mlprof__job job;
  char err[256];
  const char *paths[] = {path};
  CHECK_EQ(mlprof__job_open(&job, paths, 1, err, sizeof err), 0);
  mlprof__analysis a;
  int rc = analyse(&job, MLPROF__ANALYSIS_TREE | MLPROF__ANALYSIS_STATS, &a,
                   err, sizeof err);
  mlprof__tree t = a.tree;
  mlprof__report r = a.r;
  mlprof__job_close(&job);
  unlink(path);
  rmdir(dir);
  if (rc) TEST_FAIL("build: %s", err);
  CHECK_EQ(t.nnodes, 0);
  CHECK_EQ(t.nbuckets, 0);
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_html_data(&r, NULL, NULL, &t, NULL, &o), 0);
  char *end = mlprof__out_space(&o, 1);
  *end = '\0';
  CHECK(strstr(o.buf, "\"tree\":{\"nodes\":[],\"names\":[]}"));
  CHECK(strstr(o.buf, "\"marks\":[],\n\"step_buckets\":[]"));
  mlprof__out_close(&o);
  mlprof__report_free(&r);
  mlprof__tree_free(&t);
}

const mlprof_test mlprof_tests_tree[] = {
    {"shape_totals_and_self", test_tree_shape_totals_and_self},
    {"series_sorted_and_kept", test_tree_series_sorted_and_kept},
    {"step_buckets", test_tree_step_buckets},
    {"steps_match_report", test_tree_steps_match_report},
    {"zone_filter_keeps_subtrees", test_tree_zone_filter_keeps_subtrees},
    {"exclude_moves_children_up", test_tree_exclude_moves_children_up},
    {"many_steps_fold_into_buckets", test_tree_many_steps_fold_into_buckets},
    {"downsample_keeps_extremes", test_downsample_keeps_extremes},
    {"html_data_tree_marks_and_steps", test_html_data_tree_marks_and_steps},
    {"html_data_empty_tree", test_html_data_empty_tree},
    {NULL, NULL}};
