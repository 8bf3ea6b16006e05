/* Filters in the analysis driver (src/analyze/filter.h) on a synthetic job
 * whose every number is known:
 *
 * train.mlprof: pid 300 "train", job time 0. Thread 1 "main": steps i = 0..4
 *   of 100 ns: "step" i*100..i*100+90 (depth 0) holding "fwd" (forward)
 *   +10..+60 and "load" (data) +60..+80; step marks at 0, 100, ..., 500.
 *   Thread 2 "worker": "load" at i*100+5..+15.
 * child.mlprof: pid 301 "child" (parent 300), started 50 ns later, thread 7
 *   unnamed: "load" at 0..10, 100..110, 200..210 of its time (job 50, 150,
 *   250); no step marks. */
#include <mlprof.h>
#include <stdlib.h>

#include "analyze/analysis.h"
#include "export/export.h"
#include "synth.h"
#include "test.h"

typedef struct {
  char dir[64], train[96], child[96];
  mlprof__job job;
} filter_job;

static void span(payload *p, int64_t *t, uint32_t name, uint32_t depth,
                 int64_t begin, uint64_t dur) {
  p_u8(p, MLPROF__REC_SPAN);
  p_uv(p, name);
  p_uv(p, depth);
  p_sv(p, begin - *t);
  p_uv(p, dur);
  *t = begin;
}

static void step_mark(payload *p, int64_t *t, int64_t at) {
  p_u8(p, MLPROF__REC_STEP);
  p_sv(p, at - *t);
  *t = at;
}

static void events_begin(payload *p, uint32_t tid) {
  p_uv(p, tid);
  p_uv(p, 0);
  p_uv(p, 0);
}

static void thread_name(FILE *f, uint32_t tid, const char *name) {
  payload p = {.n = 0};
  p_uv(&p, tid);
  p_cstr(&p, name);
  chunk(f, MLPROF__CHUNK_THREAD, &p);
}

enum { STEP = 1, FWD, LOAD };

static void names(FILE *f) {
  payload p = {.n = 0};
  p_uv(&p, 3);
  p_name(&p, STEP, MLPROF__NAME_ZONE, MLPROF_CAT_NONE, "step");
  p_name(&p, FWD, MLPROF__NAME_ZONE, MLPROF_CAT_FORWARD, "fwd");
  p_name(&p, LOAD, MLPROF__NAME_ZONE, MLPROF_CAT_DATA, "load");
  chunk(f, MLPROF__CHUNK_NAMES, &p);
}

static int write_job(filter_job *j) {
  snprintf(j->dir, sizeof j->dir, "/tmp/mlprof-filter-XXXXXX");
  if (!mkdtemp(j->dir)) return -1;
  snprintf(j->train, sizeof j->train, "%s/train-300.mlprof", j->dir);
  snprintf(j->child, sizeof j->child, "%s/child-301.mlprof", j->dir);
  FILE *f = synth_open(j->train, 1);
  if (!f) return -1;
  synth_header(f, 300, 1, 1000, "h", "train");
  names(f);
  payload p = {.n = 0};
  int64_t t = 0;
  events_begin(&p, 1);
  for (int i = 0; i < 5; i++) {
    step_mark(&p, &t, i * 100);
    span(&p, &t, FWD, 1, i * 100 + 10, 50);
    span(&p, &t, LOAD, 1, i * 100 + 60, 20);
    span(&p, &t, STEP, 0, i * 100, 90);
  }
  step_mark(&p, &t, 500);
  chunk(f, MLPROF__CHUNK_EVENTS, &p);
  t = 0;
  events_begin(&p, 2);
  for (int i = 0; i < 5; i++) span(&p, &t, LOAD, 0, i * 100 + 5, 10);
  chunk(f, MLPROF__CHUNK_EVENTS, &p);
  /* Named after their spans, as a thread named late is. */
  thread_name(f, 1, "main");
  thread_name(f, 2, "worker");
  synth_end(f, 600);
  fclose(f);

  f = synth_open(j->child, 1);
  if (!f) return -1;
  synth_header(f, 301, 300, 1050, "h", "child");
  names(f);
  t = 0;
  events_begin(&p, 7);
  for (int i = 0; i < 3; i++) span(&p, &t, LOAD, 0, i * 100, 10);
  chunk(f, MLPROF__CHUNK_EVENTS, &p);
  synth_end(f, 300);
  fclose(f);
  char err[256];
  const char *dir = j->dir;
  return mlprof__job_open(&j->job, &dir, 1, err, sizeof err);
}

static void remove_job(filter_job *j) {
  mlprof__job_close(&j->job);
  unlink(j->train);
  unlink(j->child);
  rmdir(j->dir);
}

typedef struct {
  uint64_t step, fwd, load; /* spans per zone, 0 when not shown */
  uint64_t step_self;
  uint64_t steps; /* the step breakdown's count */
  size_t nwarnings;
} counts;

/* Runs the findings (the report and the steps) through filter f. */
static char why[512]; /* the last run's error */

static int run(filter_job *j, const mlprof__filter *f, counts *c) {
  mlprof__analysis_opts o;
  mlprof__analysis_opts_init(&o);
  o.want = MLPROF__ANALYSIS_FINDINGS;
  o.filter = f;
  mlprof__analysis a;
  int rc = mlprof__analysis_run(&j->job, &o, &a, why, sizeof why);
  if (rc) return rc;
  memset(c, 0, sizeof *c);
  for (size_t i = 0; i < a.r.nzones; i++) {
    const mlprof__zone_stats *z = &a.r.zones[i];
    if (!strcmp(z->name, "step")) {
      c->step = z->count;
      c->step_self = z->self_ns;
    }
    if (!strcmp(z->name, "fwd")) c->fwd = z->count;
    if (!strcmp(z->name, "load")) c->load = z->count;
  }
  c->steps = a.f.steps.count;
  c->nwarnings = a.r.nwarnings;
  mlprof__analysis_free(&a);
  return 0;
}

/* Adds selector s of kind to a fresh filter and runs it. */
static int run_sel(filter_job *j, int kind, const char *s, counts *c) {
  mlprof__filter f = {0};
  char err[256];
  int rc = mlprof__filter_add(&f, kind, s, err, sizeof err);
  if (!rc) rc = run(j, &f, c);
  mlprof__filter_free(&f);
  return rc;
}

#define OPEN_JOB(j)                                   \
  filter_job j;                                       \
  do {                                                \
    if (write_job(&j)) TEST_FAIL("cannot write job"); \
  } while (0)

/* Without a filter: everything, the reference for the others. */
static void test_filter_none(void) {
  OPEN_JOB(j);
  counts c;
  mlprof__filter f = {0};
  int rc = run(&j, &f, &c);
  remove_job(&j);
  CHECK_EQ(rc, 0);
  CHECK_EQ(c.step, 5);
  CHECK_EQ(c.fwd, 5);
  CHECK_EQ(c.load, 5 + 5 + 3);
  CHECK_EQ(c.step_self, 5 * (90 - 50 - 20));
  CHECK_EQ(c.steps, 5);
}

/* Zone filters choose the zones shown; the parent's self time and the steps
 * are the whole job's. */
static void test_filter_zones_keep_self_time(void) {
  OPEN_JOB(j);
  counts c, cat;
  int rc = run_sel(&j, MLPROF__SEL_EXCLUDE, "fw*", &c);
  mlprof__filter f = {.categories = 1u << MLPROF_CAT_DATA};
  if (!rc) rc = run(&j, &f, &cat);
  remove_job(&j);
  CHECK_EQ(rc, 0);
  CHECK_EQ(c.fwd, 0);
  CHECK_EQ(c.step, 5);
  CHECK_EQ(c.load, 13);
  CHECK_EQ(c.step_self, 5 * 20);
  CHECK_EQ(c.steps, 5);
  CHECK_EQ(cat.step, 0);
  CHECK_EQ(cat.fwd, 0);
  CHECK_EQ(cat.load, 13);
}

static void test_filter_zone_glob(void) {
  OPEN_JOB(j);
  counts c;
  int rc = run_sel(&j, MLPROF__SEL_ZONE, "[sl]*", &c);
  remove_job(&j);
  CHECK_EQ(rc, 0);
  CHECK_EQ(c.step, 5);
  CHECK_EQ(c.fwd, 0);
  CHECK_EQ(c.load, 13);
}

/* Threads by a name given after their spans, by number, and as tracks. */
static void test_filter_threads_and_tracks(void) {
  OPEN_JOB(j);
  counts byname, bytid, track, both;
  int rc = run_sel(&j, MLPROF__SEL_THREAD, "work*", &byname);
  if (!rc) rc = run_sel(&j, MLPROF__SEL_THREAD, "7", &bytid);
  if (!rc) rc = run_sel(&j, MLPROF__SEL_TRACK, "train/main", &track);
  mlprof__filter f = {0};
  char err[256];
  if (!rc) rc = mlprof__filter_add(&f, MLPROF__SEL_TRACK, "301/7", err, 256);
  if (!rc) rc = mlprof__filter_add(&f, MLPROF__SEL_THREAD, "worker", err, 256);
  if (!rc) rc = run(&j, &f, &both);
  mlprof__filter_free(&f);
  remove_job(&j);
  CHECK_EQ(rc, 0);
  CHECK_EQ(byname.load, 5);
  CHECK_EQ(byname.step, 0);
  CHECK_EQ(bytid.load, 3);
  CHECK_EQ(track.step, 5);
  CHECK_EQ(track.load, 5);
  CHECK_EQ(track.steps, 5);
  CHECK_EQ(both.load, 8);
}

static void test_filter_processes_and_ranks(void) {
  OPEN_JOB(j);
  counts name, pid, rank;
  int rc = run_sel(&j, MLPROF__SEL_PROCESS, "chi*", &name);
  if (!rc) rc = run_sel(&j, MLPROF__SEL_PROCESS, "300", &pid);
  /* No profile has a rank: an error naming why, not an empty report. */
  int rrc = run_sel(&j, MLPROF__SEL_RANK, "0", &rank);
  int norank = strstr(why, "this run has no ranks") != NULL;
  int nrc = run_sel(&j, MLPROF__SEL_PROCESS, "nosuch", &rank);
  int listed = strstr(why, "match no process of this run: ") != NULL;
  remove_job(&j);
  CHECK_EQ(rc, 0);
  CHECK_EQ(name.load, 3);
  CHECK_EQ(name.step, 0);
  CHECK_EQ(pid.load, 10);
  CHECK_EQ(pid.step, 5);
  CHECK_EQ(rrc, MLPROF_EINVAL);
  CHECK(norank);
  CHECK_EQ(nrc, MLPROF_EINVAL);
  CHECK(listed);
}

/* Steps 1:3 are main's marks 1 to 3 (job time 100..300); the child has no
 * marks and takes its parent's. */
static void test_filter_steps(void) {
  OPEN_JOB(j);
  counts c, warm, past;
  mlprof__filter f = {.steps = 1, .step_from = 1, .step_to = 3};
  int rc = run(&j, &f, &c);
  mlprof__filter w = {.steps = 1, .step_from = 4, .step_to = UINT64_MAX};
  if (!rc) rc = run(&j, &w, &warm);
  mlprof__filter p = {.steps = 1, .step_from = 9, .step_to = UINT64_MAX};
  int prc = run(&j, &p, &past);
  int said = strstr(why, "select no step: this run has 6 steps (0:6)") != NULL;
  remove_job(&j);
  CHECK_EQ(rc, 0);
  CHECK_EQ(c.step, 2);
  CHECK_EQ(c.fwd, 2);
  CHECK_EQ(c.load, 2 + 2 + 2);
  CHECK_EQ(c.steps, 2);
  CHECK_EQ(c.nwarnings, 0);
  CHECK_EQ(warm.step, 1);
  CHECK_EQ(warm.load, 2); /* main and worker; the child ended before */
  CHECK_EQ(warm.steps, 1);
  CHECK_EQ(prc, MLPROF_EINVAL); /* past the last step: says so */
  CHECK(said);
}

/* A process without step marks, nor a parent with some, is left out (with a
 * warning where others are kept): with none left, steps select nothing and
 * the error says that no process marks steps. */
static void test_filter_steps_without_marks(void) {
  OPEN_JOB(j);
  mlprof__job alone;
  char err[256];
  const char *child = j.child;
  int rc = mlprof__job_open(&alone, &child, 1, err, sizeof err);
  mlprof__filter f = {.steps = 1, .step_from = 0, .step_to = UINT64_MAX};
  mlprof__analysis_opts o;
  mlprof__analysis_opts_init(&o);
  o.filter = &f;
  mlprof__analysis a;
  int opened = rc == 0;
  if (!rc) rc = mlprof__analysis_run(&alone, &o, &a, err, sizeof err);
  if (opened) mlprof__job_close(&alone);
  remove_job(&j);
  CHECK_EQ(rc, MLPROF_EINVAL);
  CHECK(strstr(err, "no process of this run marks steps") != NULL);
}

/* A window keeps what begins in [t0, t1) of the job's time. */
static void test_filter_window(void) {
  OPEN_JOB(j);
  counts c;
  mlprof__filter f = {.window = 1, .t0 = 0, .t1 = 150};
  int rc = run(&j, &f, &c);
  remove_job(&j);
  CHECK_EQ(rc, 0);
  CHECK_EQ(c.step, 2);
  CHECK_EQ(c.fwd, 2);
  CHECK_EQ(c.load, 1 + 2 + 1); /* main 60; worker 5, 105; child 50 */
  CHECK_EQ(c.steps, 1);        /* marks 0 and 100 */
}

/* A job of one process with step ends, as a schedule records them: marks at
 * 0 and 100, an end at 200 (a gap until 400), a mark at 400, an end at 500.
 * Its steps: 0 is 0..100, 1 is 100..200, 2 is 400..500. "fwd" spans of 20 ns
 * begin at 10, 110, 250 (in the gap), 410 and 520 (after the last end). */
static void write_step_end_job(filter_job *j) {
  snprintf(j->dir, sizeof j->dir, "/tmp/mlprof-filter-XXXXXX");
  if (!mkdtemp(j->dir)) TEST_FAIL("cannot make a directory");
  snprintf(j->train, sizeof j->train, "%s/train-300.mlprof", j->dir);
  snprintf(j->child, sizeof j->child, "%s/none", j->dir);
  FILE *f = synth_open(j->train, 1);
  if (!f) TEST_FAIL("cannot write job");
  synth_header(f, 300, 1, 1000, "h", "train");
  names(f);
  payload p = {.n = 0};
  int64_t t = 0;
  events_begin(&p, 1);
  step_mark(&p, &t, 0);
  span(&p, &t, FWD, 0, 10, 20);
  step_mark(&p, &t, 100);
  span(&p, &t, FWD, 0, 110, 20);
  p_u8(&p, MLPROF__REC_STEP_END); /* the window ends: a gap until 400 */
  p_sv(&p, 200 - t);
  t = 200;
  span(&p, &t, FWD, 0, 250, 20);
  step_mark(&p, &t, 400);
  span(&p, &t, FWD, 0, 410, 20);
  p_u8(&p, MLPROF__REC_STEP_END);
  p_sv(&p, 500 - t);
  t = 500;
  span(&p, &t, FWD, 0, 520, 20);
  chunk(f, MLPROF__CHUNK_EVENTS, &p);
  synth_end(f, 600);
  fclose(f);
  char err[256];
  const char *dir = j->dir;
  if (mlprof__job_open(&j->job, &dir, 1, err, sizeof err))
    TEST_FAIL("cannot open job");
}

/* Step ends pass a filter as marks do: steps stay the steps between a mark
 * and the next mark or step end, not across a gap. */
static void test_filter_keeps_step_ends(void) {
  filter_job j;
  write_step_end_job(&j);
  counts all, windowed;
  mlprof__filter none = {0}, w = {.window = 1, .t0 = 0, .t1 = 1000};
  int rc = run(&j, &none, &all);
  if (!rc) rc = run(&j, &w, &windowed);
  remove_job(&j);
  CHECK_EQ(rc, 0);
  CHECK_EQ(all.steps, 3);
  CHECK_EQ(windowed.steps, 3);
}

/* Steps A:B end where step B-1 ends, at a step end as at a mark: the gap
 * after an end and what follows the last end are in no selected step. */
static void test_filter_steps_end_at_step_ends(void) {
  filter_job j;
  write_step_end_job(&j);
  counts one, last, all;
  mlprof__filter f1 = {.steps = 1, .step_from = 1, .step_to = 2};
  mlprof__filter f2 = {.steps = 1, .step_from = 2, .step_to = 3};
  mlprof__filter fa = {.steps = 1, .step_from = 0, .step_to = UINT64_MAX};
  int rc = run(&j, &f1, &one);
  if (!rc) rc = run(&j, &f2, &last);
  if (!rc) rc = run(&j, &fa, &all);
  remove_job(&j);
  CHECK_EQ(rc, 0);
  CHECK_EQ(one.fwd, 1); /* 110, not 250 in the gap */
  CHECK_EQ(one.steps, 1);
  CHECK_EQ(last.fwd, 1); /* 410, not 520 after the end */
  CHECK_EQ(last.steps, 1);
  CHECK_EQ(all.fwd, 5); /* an open range: to the profile's end */
  CHECK_EQ(all.steps, 3);
}

static void test_filter_bad_selectors(void) {
  mlprof__filter f = {0};
  char err[256];
  CHECK_EQ(mlprof__filter_add(&f, MLPROF__SEL_TRACK, "main", err, 256),
           MLPROF_EINVAL);
  CHECK(strstr(err, "PROCESS/THREAD"));
  CHECK_EQ(mlprof__filter_add(&f, MLPROF__SEL_RANK, "x1", err, 256),
           MLPROF_EINVAL);
  CHECK_EQ(mlprof__filter_add(&f, MLPROF__FILTER_STEPS, "5:3", err, 256),
           MLPROF_EINVAL);
  CHECK(strstr(err, "--steps wants A:B"));
  CHECK_EQ(mlprof__filter_add(&f, MLPROF__FILTER_CATEGORY, "gpu", err, 256),
           MLPROF_EINVAL);
  CHECK_EQ(f.nsel, 0);
  CHECK_EQ(f.steps + f.categories, 0);
  CHECK_EQ(mlprof__filter_add(&f, MLPROF__FILTER_WINDOW, "1s:", err, 256), 0);
  CHECK_EQ(f.t0, 1000000000ull);
  CHECK_EQ(f.t1, UINT64_MAX);
  mlprof__filter_free(&f);
}

/* trace --max-mb sizes spans by duration bucket: each duration falls in the
 * bucket whose least duration is at most it and whose next bucket's is
 * above it. */
static void test_filter_trace_buckets(void) {
  uint64_t x[] = {0,
                  1,
                  3,
                  4,
                  5,
                  7,
                  8,
                  9,
                  1000,
                  1023,
                  1024,
                  123456789,
                  UINT64_MAX / 3,
                  UINT64_MAX};
  for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) {
    int b = mlprof__chrome_bucket(x[i]);
    CHECK(b >= 0 && b < MLPROF__CHROME_BUCKETS);
    CHECK(mlprof__chrome_bucket_min(b) <= x[i]);
    if (b + 1 < MLPROF__CHROME_BUCKETS)
      CHECK(mlprof__chrome_bucket_min(b + 1) > x[i]);
  }
  CHECK_EQ(mlprof__chrome_bucket(UINT64_MAX), MLPROF__CHROME_BUCKETS - 1);
}

const mlprof_test mlprof_tests_filter[] = {
    {"none", test_filter_none},
    {"zones_keep_self_time", test_filter_zones_keep_self_time},
    {"zone_glob", test_filter_zone_glob},
    {"threads_and_tracks", test_filter_threads_and_tracks},
    {"processes_and_ranks", test_filter_processes_and_ranks},
    {"steps", test_filter_steps},
    {"steps_without_marks", test_filter_steps_without_marks},
    {"window", test_filter_window},
    {"keeps_step_ends", test_filter_keeps_step_ends},
    {"steps_end_at_step_ends", test_filter_steps_end_at_step_ends},
    {"bad_selectors", test_filter_bad_selectors},
    {"trace_buckets", test_filter_trace_buckets},
    {NULL, NULL}};
