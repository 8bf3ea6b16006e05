/* The report model, driven through its visitor callbacks with known spans:
 * every expected value below is worked out by hand. */
#include <math.h>
#include <mlprof.h>
#include <stdlib.h>

#include "analyze/filter.h"
#include "analyze/marks.h"
#include "analyze/resources.h"
#include "analyze/stats.h"
#include "format/wire.h"
#include "model/job.h"
#include "analyse.h"
#include "synth.h"
#include "test.h"

#define CHECK_NEAR(a, b)                                     \
  do {                                                       \
    double a_ = (a), b_ = (b);                               \
    if (!(fabs(a_ - b_) <= 1e-9 * (fabs(b_) + 1)))           \
      TEST_FAIL("%s == %s: %.17g != %.17g", #a, #b, a_, b_); \
  } while (0)

typedef struct {
  mlprof__stats *s;
  mlprof__visitor v;
  mlprof__report r;
} fixture;

static void profile(fixture *f, uint64_t pid, uint64_t offset_ns) {
  mlprof__job_profile p = {.path = "test.mlprof",
                           .pid = pid,
                           .ppid = 1,
                           .rank = -1,
                           .world_size = -1,
                           .hostname = "host",
                           .exe = "/usr/bin/python3",
                           .cmdline = "python3 t.py",
                           .offset_ns = offset_ns,
                           .parent = -1};
  if (!f->s) f->s = mlprof__stats_new();
  mlprof__stats_profile_begin(f->s, &p, &f->v);
}

static void name(fixture *f, uint32_t id, uint8_t kind, uint8_t cat,
                 const char *s) {
  mlprof__name n = {.id = id,
                    .kind = kind,
                    .category = cat,
                    .name = s,
                    .name_len = strlen(s),
                    .function = "",
                    .file = ""};
  f->v.name(f->v.ud, &n);
}

static void span(fixture *f, uint32_t tid, uint32_t id, uint32_t depth,
                 uint64_t begin, uint64_t end) {
  f->v.span(f->v.ud, tid, id, depth, begin, end);
}

/* Ends the profile as a clean END at end_ns would. */
static void end_clean(fixture *f, uint64_t end_ns) {
  f->v.end(f->v.ud, end_ns, 0, 0);
  mlprof__stats_profile_end(f->s, NULL, NULL);
}

static int finish(fixture *f) {
  int rc = mlprof__stats_finish(f->s, &f->r);
  f->s = NULL;
  return rc;
}

static const mlprof__zone_stats *zone(const mlprof__report *r, const char *n) {
  for (size_t i = 0; i < r->nzones; i++)
    if (strcmp(r->zones[i].name, n) == 0) return &r->zones[i];
  return NULL;
}

static void test_one_zone_exact(void) {
  fixture f = {0};
  profile(&f, 100, 0);
  name(&f, 1, MLPROF__NAME_ZONE, MLPROF_CAT_FORWARD, "forward");
  /* Durations 1..100 ns, in shuffled order so the sort matters. */
  uint64_t t = 0;
  for (uint64_t i = 0; i < 100; i++) {
    uint64_t d = (i * 37) % 100 + 1;
    span(&f, 7, 1, 0, t, t + d);
    t += d;
  }
  end_clean(&f, 10000);
  CHECK_EQ(finish(&f), 0);
  const mlprof__zone_stats *z = zone(&f.r, "forward");
  CHECK(z != NULL);
  CHECK_EQ(z->count, 100);
  CHECK_EQ(z->total_ns, 5050);
  CHECK_EQ(z->self_ns, 5050);
  CHECK_EQ(z->min_ns, 1);
  CHECK_EQ(z->max_ns, 100);
  CHECK_EQ(z->p50_ns, 50);
  CHECK_EQ(z->p90_ns, 90);
  CHECK_EQ(z->p95_ns, 95);
  CHECK_EQ(z->p99_ns, 99);
  CHECK_NEAR(z->mean_ns, 50.5);
  CHECK_NEAR(z->std_ns, sqrt((100.0 * 100.0 - 1) / 12)); /* uniform 1..n */
  CHECK_EQ(z->category, MLPROF_CAT_FORWARD);
  CHECK_NEAR(z->share, 5050.0 / 10000.0);
  CHECK_EQ(f.r.wall_ns, 10000);
  CHECK_EQ(f.r.spans, 100);
  CHECK_EQ(f.r.nwarnings, 0);
  CHECK(f.r.procs[0].clean_end);
  mlprof__report_free(&f.r);
}

static void test_percentiles_nearest_rank(void) {
  fixture f = {0};
  profile(&f, 100, 0);
  name(&f, 1, MLPROF__NAME_ZONE, 0, "four");
  name(&f, 2, MLPROF__NAME_ZONE, 0, "eight");
  name(&f, 3, MLPROF__NAME_ZONE, 0, "one");
  static const uint64_t four[] = {4, 1, 3, 2};
  for (int i = 0; i < 4; i++) span(&f, 1, 1, 0, 0, four[i]);
  static const uint64_t eight[] = {2, 4, 4, 4, 5, 5, 7, 9};
  for (int i = 0; i < 8; i++) span(&f, 1, 2, 0, 100, 100 + eight[i]);
  span(&f, 1, 3, 0, 5, 12);
  end_clean(&f, 1000);
  CHECK_EQ(finish(&f), 0);
  const mlprof__zone_stats *z = zone(&f.r, "four");
  CHECK_EQ(z->p50_ns, 2); /* rank ceil(0.5 * 4) = 2 */
  CHECK_EQ(z->p90_ns, 4); /* rank ceil(3.6) = 4 */
  CHECK_EQ(z->p99_ns, 4);
  z = zone(&f.r, "eight");
  CHECK_NEAR(z->mean_ns, 5);
  CHECK_NEAR(z->std_ns, 2); /* population std of the textbook sample */
  CHECK_EQ(z->p50_ns, 4);
  CHECK_EQ(z->p90_ns, 9); /* rank ceil(7.2) = 8 */
  z = zone(&f.r, "one");
  CHECK_EQ(z->p50_ns, 7);
  CHECK_EQ(z->p99_ns, 7);
  CHECK_NEAR(z->std_ns, 0);
  mlprof__report_free(&f.r);
}

/* A(0..100) holds B(10..30) and C(40..90); C holds D(50..60). Spans arrive
 * in the order they end: B, D, C, A. */
static void test_nested_self_time(void) {
  fixture f = {0};
  profile(&f, 100, 0);
  name(&f, 1, MLPROF__NAME_ZONE, 0, "A");
  name(&f, 2, MLPROF__NAME_ZONE, 0, "B");
  name(&f, 3, MLPROF__NAME_ZONE, 0, "C");
  name(&f, 4, MLPROF__NAME_ZONE, 0, "D");
  span(&f, 1, 2, 1, 10, 30);
  span(&f, 1, 4, 2, 50, 60);
  span(&f, 1, 3, 1, 40, 90);
  span(&f, 1, 1, 0, 0, 100);
  span(&f, 1, 1, 0, 200, 250); /* a second A, with no children */
  end_clean(&f, 300);
  CHECK_EQ(finish(&f), 0);
  CHECK_EQ(zone(&f.r, "B")->self_ns, 20);
  CHECK_EQ(zone(&f.r, "D")->self_ns, 10);
  CHECK_EQ(zone(&f.r, "C")->self_ns, 40);
  CHECK_EQ(zone(&f.r, "A")->self_ns, 30 + 50);
  CHECK_EQ(zone(&f.r, "A")->total_ns, 150);
  CHECK_EQ(f.r.nthreads, 1);
  CHECK_EQ(f.r.threads[0].busy_ns, 150);
  CHECK_EQ(f.r.threads[0].spans, 5);
  mlprof__report_free(&f.r);
}

/* Two threads whose chunks interleave: a child ends in one chunk, its parent
 * in a later one, with the other thread's chunk between. */
static void test_threads_keep_their_own_nesting(void) {
  fixture f = {0};
  profile(&f, 100, 0);
  name(&f, 1, MLPROF__NAME_ZONE, 0, "outer");
  name(&f, 2, MLPROF__NAME_ZONE, 0, "inner");
  f.v.events(f.v.ud, 1, 0);
  span(&f, 1, 2, 1, 10, 40); /* thread 1: inner 30 */
  f.v.events(f.v.ud, 2, 0);
  span(&f, 2, 2, 1, 5, 10); /* thread 2: inner 5 */
  span(&f, 2, 1, 0, 0, 20); /* thread 2: outer 20, self 15 */
  f.v.events(f.v.ud, 1, 0);
  span(&f, 1, 1, 0, 0, 100); /* thread 1: outer 100, self 70 */
  f.v.thread(f.v.ud, 2, "loader", 6);
  end_clean(&f, 100);
  CHECK_EQ(finish(&f), 0);
  CHECK_EQ(zone(&f.r, "outer")->self_ns, 70 + 15);
  CHECK_EQ(zone(&f.r, "outer")->total_ns, 120);
  CHECK_EQ(zone(&f.r, "inner")->self_ns, 35);
  CHECK_EQ(f.r.nthreads, 2);
  CHECK_EQ(f.r.procs[0].threads, 2);
  CHECK_EQ(f.r.threads[0].tid, 1);
  CHECK_EQ(f.r.threads[0].busy_ns, 100);
  CHECK_STR(f.r.threads[1].name, "loader");
  CHECK_EQ(f.r.threads[1].busy_ns, 20);
  mlprof__report_free(&f.r);
}

/* A depth-1 span is dropped: its child's time must not be charged to the
 * next depth-1 span of the thread. */
static void test_lost_parent_does_not_leak_child_time(void) {
  fixture f = {0};
  profile(&f, 100, 0);
  name(&f, 1, MLPROF__NAME_ZONE, 0, "top");
  name(&f, 2, MLPROF__NAME_ZONE, 0, "mid");
  name(&f, 3, MLPROF__NAME_ZONE, 0, "leaf");
  span(&f, 1, 3, 2, 10, 20); /* its parent "mid" never arrives */
  span(&f, 1, 1, 0, 0, 50);  /* top: no direct child recorded */
  span(&f, 1, 2, 1, 60, 70); /* a later mid with no child */
  span(&f, 1, 1, 0, 55, 80);
  end_clean(&f, 100);
  CHECK_EQ(finish(&f), 0);
  CHECK_EQ(zone(&f.r, "top")->self_ns, 50 + 15);
  CHECK_EQ(zone(&f.r, "mid")->self_ns, 10);
  mlprof__report_free(&f.r);
}

/* The same zone under different ids in two processes is one zone; wall time
 * spans both on the job timeline. */
static void test_processes_merge_by_name(void) {
  fixture f = {0};
  profile(&f, 100, 0);
  name(&f, 1, MLPROF__NAME_ZONE, 0, "step");
  name(&f, 2, MLPROF__NAME_GAUGE, 0, "loss");
  span(&f, 1, 1, 0, 0, 400);
  f.v.counter(f.v.ud, 1, 2, 100, 2.0);
  f.v.counter(f.v.ud, 1, 2, 900, 1.0);
  end_clean(&f, 1000);
  profile(&f, 200, 500);
  name(&f, 5, MLPROF__NAME_GAUGE, 0, "loss");
  name(&f, 9, MLPROF__NAME_ZONE, MLPROF_CAT_DATA, "step");
  span(&f, 3, 9, 0, 0, 600);
  f.v.counter(f.v.ud, 3, 5, 300, 4.0); /* job time 800: not the last */
  f.v.counter(f.v.ud, 3, 5, 450, NAN); /* job time 950: last, not in mean */
  end_clean(&f, 1500);
  CHECK_EQ(finish(&f), 0);
  CHECK_EQ(f.r.nzones, 1);
  CHECK_EQ(f.r.nprocs, 2);
  CHECK_EQ(f.r.wall_ns, 2000);
  const mlprof__zone_stats *z = zone(&f.r, "step");
  CHECK_EQ(z->count, 2);
  CHECK_EQ(z->total_ns, 1000);
  CHECK_EQ(z->category, MLPROF_CAT_DATA);
  CHECK_NEAR(z->share, 0.5);
  CHECK_EQ(f.r.procs[1].offset_ns, 500);
  CHECK_EQ(f.r.procs[1].wall_ns, 1500);
  CHECK_EQ(f.r.threads[1].pid, 200);
  CHECK_EQ(f.r.ncounters, 1);
  CHECK_EQ(f.r.counters[0].count, 4);
  CHECK_NEAR(f.r.counters[0].min, 1.0);
  CHECK_NEAR(f.r.counters[0].max, 4.0);
  CHECK_NEAR(f.r.counters[0].mean, 7.0 / 3);
  CHECK(isnan(f.r.counters[0].last));
  mlprof__report_free(&f.r);
}

static void test_units_inside_and_outside_zones(void) {
  fixture f = {0};
  profile(&f, 100, 0);
  name(&f, 1, MLPROF__NAME_ZONE, 0, "decode");
  name(&f, 2, MLPROF__NAME_UNITS, 0, "tokens");
  name(&f, 3, MLPROF__NAME_STRING, 0, "batch");
  name(&f, 4, MLPROF__NAME_STRING, 0, "7");
  name(&f, 5, MLPROF__NAME_UNITS, 0, "seq");
  span(&f, 1, 1, 0, 0, 500000000); /* 0.5 s */
  f.v.span_units(f.v.ud, 1, 2, 100);
  f.v.span_units(f.v.ud, 1, 5, 41); /* a collective's number: no units */
  span(&f, 1, 1, 0, 500000000, 1000000000);
  if (f.v.span_meta)
    f.v.span_meta(f.v.ud, 1, 3, 4); /* between span and units */
  f.v.span_units(f.v.ud, 1, 2, 50);
  f.v.units(f.v.ud, 1, 2, 1500000000, 30);
  f.v.span_units(f.v.ud, 1, 2, 5); /* after no span: outside */
  end_clean(&f, 2000000000);
  CHECK_EQ(finish(&f), 0);
  CHECK_EQ(f.r.nunits, 1);
  CHECK_EQ(f.r.units[0].total, 185);
  CHECK_EQ(f.r.units[0].outside, 35);
  CHECK_NEAR(f.r.units[0].per_s, 92.5);
  const mlprof__zone_stats *z = zone(&f.r, "decode");
  CHECK_EQ(z->nunits, 1);
  CHECK_EQ(z->units[0].n, 150);
  CHECK_NEAR(z->units[0].per_s, 150.0);
  mlprof__report_free(&f.r);
}

static void test_steps_open_zones_meta(void) {
  fixture f = {0};
  profile(&f, 100, 0);
  name(&f, 1, MLPROF__NAME_ZONE, 0, "serve");
  static const uint64_t marks[] = {0, 10, 30, 60};
  for (int i = 0; i < 4; i++) f.v.step(f.v.ud, 4, marks[i]);
  f.v.open(f.v.ud, 4, 1, 0, 500);
  f.v.meta(f.v.ud, "model", 5, "resnet", 6);
  f.v.meta(f.v.ud, "batch", 5, "32", 2);
  f.v.meta(f.v.ud, "model", 5, "vit", 3);
  end_clean(&f, 1000);
  CHECK_EQ(finish(&f), 0);
  CHECK_EQ(f.r.nzones, 0); /* only open: no completed span */
  CHECK_EQ(f.r.threads[0].steps, 4);
  CHECK_EQ(f.r.threads[0].step_mean_ns, 20);
  CHECK_EQ(f.r.threads[0].step_p50_ns, 20);
  CHECK_EQ(f.r.nopen, 1);
  CHECK_STR(f.r.open[0].name, "serve");
  CHECK_EQ(f.r.open[0].begin_ns, 500);
  CHECK_EQ(f.r.open[0].open_ns, 500);
  const mlprof__proc_stats *p = &f.r.procs[0];
  CHECK_EQ(p->nmeta, 2);
  CHECK_STR(p->meta[0].key, "batch");
  CHECK_STR(p->meta[1].key, "model");
  CHECK_STR(p->meta[1].value, "vit");
  mlprof__report_free(&f.r);
}

static int has_warning(const mlprof__report *r, const char *needle) {
  for (size_t i = 0; i < r->nwarnings; i++)
    if (strstr(r->warnings[i], needle)) return 1;
  return 0;
}

/* No END chunk, dropped events, damage: all said, intact data still counted. */
static void test_killed_and_damaged_profile(void) {
  fixture f = {0};
  profile(&f, 100, 0);
  name(&f, 1, MLPROF__NAME_ZONE, 0, "work");
  f.v.events(f.v.ud, 1, 3);
  span(&f, 1, 1, 0, 0, 10);
  f.v.events(f.v.ud, 1, 5);
  span(&f, 1, 1, 0, 20, 40);
  mlprof__read_report rep = {
      .chunks = 4, .damaged_chunks = 1, .skipped_bytes = 33, .last_ns = 45};
  snprintf(rep.problem, sizeof rep.problem, "bad CRC at offset 99");
  mlprof__stats_profile_end(f.s, &rep, NULL);
  CHECK_EQ(finish(&f), 0);
  const mlprof__proc_stats *p = &f.r.procs[0];
  CHECK(!p->clean_end);
  CHECK_EQ(p->wall_ns, 45);
  CHECK_EQ(p->dropped, 5);
  CHECK_EQ(f.r.dropped, 5);
  CHECK_EQ(p->read.damaged_chunks, 1);
  CHECK_EQ(zone(&f.r, "work")->count, 2);
  CHECK(has_warning(&f.r, "without a closing chunk"));
  CHECK(has_warning(&f.r, "bad CRC at offset 99"));
  CHECK(has_warning(&f.r, "5 events dropped"));
  mlprof__report_free(&f.r);
}

/* A child profile of profile index parent (a DataLoader worker). */
static void child_profile(fixture *f, uint64_t pid, int parent) {
  mlprof__job_profile p = {.path = "test.mlprof",
                           .pid = pid,
                           .ppid = 100,
                           .rank = -1,
                           .world_size = -1,
                           .hostname = "host",
                           .exe = "/usr/bin/python3",
                           .cmdline = "python3 t.py",
                           .parent = parent};
  mlprof__stats_profile_begin(f->s, &p, &f->v);
}

/* Ends the profile with an END chunk saying how (MLPROF__END_*). */
static void end_how(fixture *f, uint64_t end_ns, int how, int status) {
  f->v.end(f->v.ud, end_ns, 0, 0);
  mlprof__read_report rep = {
      .clean_end = 1, .end_how = how, .end_status = status, .last_ns = end_ns};
  mlprof__stats_profile_end(f->s, &rep, NULL);
}

/* Zones the program's own shutdown left open (workers stopped while
 * prefetching, a child signalled as its parent shut down) are listed but
 * not warned about; the others are (issue #21). */
static void test_open_at_shutdown_is_no_warning(void) {
  fixture f = {0};
  profile(&f, 100, 0); /* the main process, 10 s */
  end_how(&f, 10000000000ull, MLPROF__END_EXIT, 0);
  uint64_t near = 9900000000ull;
  child_profile(&f, 101, 0); /* a worker, inside data_fetch */
  name(&f, 1, MLPROF__NAME_ZONE, MLPROF_CAT_DATA, "data_fetch");
  f.v.open(f.v.ud, 1, 1, 0, 500);
  end_how(&f, near, MLPROF__END_EXIT, 0);
  child_profile(&f, 102, 0); /* terminated by its parent at shutdown */
  name(&f, 1, MLPROF__NAME_ZONE, 0, "encode");
  f.v.open(f.v.ud, 1, 1, 0, 500);
  end_how(&f, near, MLPROF__END_SIGNAL, 15);
  CHECK_EQ(finish(&f), 0);
  CHECK_EQ(f.r.nopen, 2);
  CHECK(!has_warning(&f.r, "still open"));
  mlprof__report_free(&f.r);
  /* The same zones open in the main process, in a child that exited on its
   * own, in a child signalled long before its parent ended: warned. */
  profile(&f, 100, 0);
  name(&f, 1, MLPROF__NAME_ZONE, MLPROF_CAT_DATA, "data_fetch");
  f.v.open(f.v.ud, 1, 1, 0, 500);
  end_how(&f, 10000000000ull, MLPROF__END_EXIT, 0);
  child_profile(&f, 101, 0);
  name(&f, 1, MLPROF__NAME_ZONE, 0, "encode");
  f.v.open(f.v.ud, 1, 1, 0, 500);
  end_how(&f, near, MLPROF__END_EXIT, 0);
  child_profile(&f, 102, 0);
  name(&f, 1, MLPROF__NAME_ZONE, 0, "encode");
  f.v.open(f.v.ud, 1, 1, 0, 500);
  end_how(&f, 1000000000ull, MLPROF__END_SIGNAL, 15);
  CHECK_EQ(finish(&f), 0);
  CHECK_EQ(f.r.nopen, 3);
  CHECK(has_warning(&f.r, "3 zones were still open at the end"));
  mlprof__report_free(&f.r);
}

static size_t count_warnings(const mlprof__report *r, const char *needle) {
  size_t n = 0;
  for (size_t i = 0; i < r->nwarnings; i++)
    n += strstr(r->warnings[i], needle) != NULL;
  return n;
}

/* Each Python process of a run without the package says the same: one line
 * with the count, one more for another reason (issue #21). */
static void test_python_not_loaded_grouped(void) {
  static const char nomod[] =
      "not loaded: ModuleNotFoundError: No module named 'mlprof'";
  fixture f = {0};
  for (uint64_t pid = 100; pid < 104; pid++) {
    profile(&f, pid, 0);
    const char *why = pid == 103 ? "not loaded: Python 3.12" : nomod;
    f.v.meta(f.v.ud, "mlprof.python", 13, why, strlen(why));
    end_clean(&f, 1000);
  }
  CHECK_EQ(finish(&f), 0);
  CHECK_EQ(count_warnings(&f.r, "python instrumentation"), 2);
  CHECK(has_warning(&f.r, "3 processes (the first: 100 ("));
  CHECK(has_warning(&f.r, "No module named 'mlprof'"));
  CHECK(has_warning(&f.r, "process 103 ("));
  CHECK(has_warning(&f.r, "python instrumentation not loaded: Python 3.12"));
  mlprof__report_free(&f.r);
}

/* A recursive zone's time counts once, in its outermost span: its share
 * of one thread is never past 100% (issue #21: wall% 369%). Spans arrive
 * in the order they end, as the reader gives them. */
static void test_recursion_counted_once(void) {
  fixture f = {0};
  profile(&f, 100, 0);
  name(&f, 1, MLPROF__NAME_ZONE, 0, "fib");
  name(&f, 2, MLPROF__NAME_ZONE, 0, "call");
  /* fib(0..100) > fib(10..90) > {fib(20..30), call(40..50) > fib(42..48)},
   * then fib(100..110) alone, then call(120..200) > fib(130..140),
   * fib(150..160), and fib(200..400) > call(210..390) > fib(220..230),
   * fib(240..250). */
  span(&f, 1, 1, 2, 20, 30);
  span(&f, 1, 1, 3, 42, 48);
  span(&f, 1, 2, 2, 40, 50);
  span(&f, 1, 1, 1, 10, 90);
  span(&f, 1, 1, 0, 0, 100);
  span(&f, 1, 1, 0, 100, 110);
  span(&f, 1, 1, 1, 130, 140);
  span(&f, 1, 1, 1, 150, 160);
  span(&f, 1, 2, 0, 120, 200);
  span(&f, 1, 1, 2, 220, 230);
  span(&f, 1, 1, 2, 240, 250);
  span(&f, 1, 2, 1, 210, 390);
  span(&f, 1, 1, 0, 200, 400);
  end_clean(&f, 400);
  CHECK_EQ(finish(&f), 0);
  const mlprof__zone_stats *fib = zone(&f.r, "fib");
  CHECK_EQ(fib->total_ns, 100 + 80 + 10 + 6 + 10 + 10 + 10 + 10 + 10 + 200);
  CHECK_EQ(fib->outer_ns, 100 + 10 + 20 + 200);
  CHECK(fabs(fib->share - 330.0 / 400) < 1e-12);
  CHECK_EQ(zone(&f.r, "call")->outer_ns, 10 + 80 + 180);
  mlprof__report_free(&f.r);
}

static void test_sort_and_top(void) {
  fixture f = {0};
  profile(&f, 100, 0);
  name(&f, 1, MLPROF__NAME_ZONE, 0, "many_short");
  name(&f, 2, MLPROF__NAME_ZONE, 0, "one_long");
  name(&f, 3, MLPROF__NAME_ZONE, 0, "middle");
  for (int i = 0; i < 10; i++) span(&f, 1, 1, 0, 0, 3); /* total 30 */
  span(&f, 1, 2, 0, 0, 100);                            /* total 100 */
  for (int i = 0; i < 2; i++) span(&f, 1, 3, 0, 0, 25); /* total 50 */
  end_clean(&f, 1000);
  CHECK_EQ(finish(&f), 0);
  CHECK_EQ(f.r.norder, 3);
  CHECK_STR(f.r.zones[f.r.order[0]].name, "one_long");
  CHECK_STR(f.r.zones[f.r.order[2]].name, "many_short");
  mlprof__report_sort(&f.r, MLPROF__SORT_COUNT, 2);
  CHECK_EQ(f.r.norder, 2);
  CHECK_STR(f.r.zones[f.r.order[0]].name, "many_short");
  CHECK_STR(f.r.zones[f.r.order[1]].name, "middle");
  mlprof__report_sort(&f.r, MLPROF__SORT_MEAN, 0);
  CHECK_STR(f.r.zones[f.r.order[1]].name, "middle");
  mlprof__sort_key k;
  CHECK_EQ(mlprof__sort_key_parse("p99", &k), 0);
  CHECK_EQ(k, MLPROF__SORT_P99);
  CHECK_EQ(mlprof__sort_key_parse("median", &k), -1);
  mlprof__report_free(&f.r);
}

/* Enough spans in one zone for the sort's partitioning (and its runs of
 * equal keys) to matter, checked against a counting reference. */
static void test_large_zone_percentiles(void) {
  fixture f = {0};
  profile(&f, 100, 0);
  name(&f, 1, MLPROF__NAME_ZONE, 0, "z");
  enum { N = 100000, RANGE = 1000 };
  static uint32_t hist[RANGE];
  memset(hist, 0, sizeof hist);
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < N; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    uint64_t d = x % RANGE;
    hist[d]++;
    span(&f, 1, 1, 0, 0, d);
  }
  end_clean(&f, RANGE);
  CHECK_EQ(finish(&f), 0);
  const mlprof__zone_stats *z = zone(&f.r, "z");
  static const unsigned ps[] = {50, 90, 95, 99};
  const uint64_t got[] = {z->p50_ns, z->p90_ns, z->p95_ns, z->p99_ns};
  for (int i = 0; i < 4; i++) {
    uint64_t rank = ((uint64_t)N * ps[i] + 99) / 100, seen = 0, want = 0;
    while (seen + hist[want] < rank) seen += hist[want++];
    CHECK_EQ(got[i], want);
  }
  mlprof__report_free(&f.r);
}

static int u64_cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Durations mostly close to the shortest (counted) and the others spread
 * over 2^40 ns (radix-sorted after them), far from 0: the percentiles are
 * those of the sorted durations, and the spread is exact. */
static void test_wide_zone_percentiles(void) {
  fixture f = {0};
  profile(&f, 100, 0);
  name(&f, 1, MLPROF__NAME_ZONE, 0, "z");
  enum { N = 50001 };
  static uint64_t want[N];
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < N; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    uint64_t d = 1000000 + (x % 10 < 7 ? x % 5000 : x % (1ull << 40));
    want[i] = d;
    span(&f, 1, 1, 0, 0, d);
  }
  end_clean(&f, 1ull << 41);
  CHECK_EQ(finish(&f), 0);
  qsort(want, N, sizeof *want, u64_cmp);
  const mlprof__zone_stats *z = zone(&f.r, "z");
  static const unsigned ps[] = {50, 90, 95, 99};
  const uint64_t got[] = {z->p50_ns, z->p90_ns, z->p95_ns, z->p99_ns};
  for (int i = 0; i < 4; i++)
    CHECK_EQ_U64(got[i], want[((uint64_t)N * ps[i] + 99) / 100 - 1]);
  CHECK_EQ_U64(z->min_ns, want[0]);
  CHECK_EQ_U64(z->max_ns, want[N - 1]);
  double mean = 0, sq = 0;
  for (int i = 0; i < N; i++) mean += (double)want[i];
  mean /= N;
  for (int i = 0; i < N; i++)
    sq += ((double)want[i] - z->mean_ns) * ((double)want[i] - z->mean_ns);
  CHECK_NEAR(z->mean_ns, mean);
  CHECK(z->std_ns == sqrt(sq / N)); /* summed in the same (sorted) order */
  mlprof__report_free(&f.r);
}

/* ---- resources: samples summarised (synth.h describes the job) ----------- */

static const mlprof__subject_stats *find_subject(const mlprof__resources *r,
                                                 uint8_t kind, uint64_t id) {
  for (size_t i = 0; i < r->nsubjects; i++)
    if (r->subjects[i].subject == kind && r->subjects[i].id == id)
      return &r->subjects[i];
  return NULL;
}

typedef struct {
  char dir[64], root[128], child[128];
  mlprof__job job;
} sampled_job;

static int open_sampled(sampled_job *j) {
  snprintf(j->dir, sizeof j->dir, "/tmp/mlprof-res-XXXXXX");
  if (synth_sampled_job(j->dir, j->root, j->child, sizeof j->root)) return -1;
  char err[256];
  const char *paths[] = {j->dir};
  if (mlprof__job_open(&j->job, paths, 1, err, sizeof err)) {
    fprintf(stderr, "  job_open: %s\n", err);
    return -1;
  }
  return 0;
}

static void close_sampled(sampled_job *j) {
  mlprof__job_close(&j->job);
  synth_remove(j->dir, j->root, j->child);
}

static void test_resources_exact(void) {
  sampled_job j;
  CHECK_EQ(open_sampled(&j), 0);
  setenv("MLPROF_CARBON_G_PER_KWH", "500", 1);
  mlprof__analysis a;
  char err[256];
  int rc = analyse(&j.job, MLPROF__ANALYSIS_RESOURCES, &a, err, sizeof err);
  mlprof__resources r = a.res;
  unsetenv("MLPROF_CARBON_G_PER_KWH");
  /* job order: root (offset 0), child (offset 500) */
  CHECK_EQ(j.job.profiles[1].pid, 200);
  close_sampled(&j);
  if (rc) TEST_FAIL("build: %s", err);
  CHECK(r.sampled);
  CHECK_EQ(r.nsubjects, 4);
  /* system, GPU, then processes */
  CHECK_EQ(r.subjects[0].subject, MLPROF__SUBJECT_SYSTEM);
  CHECK_EQ(r.subjects[1].subject, MLPROF__SUBJECT_GPU);
  CHECK_STR(r.subjects[1].label, SYNTH_GPU_LABEL);
  CHECK_EQ(r.ngpus, 1);
  CHECK(r.gpu_absent == NULL);

  const mlprof__subject_stats *p =
      find_subject(&r, MLPROF__SUBJECT_PROCESS, 200);
  CHECK(p != NULL);
  CHECK_EQ(p->process, 1); /* its own profile, by host and pid */
  CHECK_STR(p->label, "python3");
  CHECK_EQ(p->rows, 3);
  const mlprof__measure_stats *m = mlprof__subject_measure(p, "cpu_pct");
  CHECK(m != NULL);
  CHECK_EQ(m->count, 2);
  CHECK_EQ(m->absent_count, 1);
  CHECK(m->absent == NULL);
  CHECK_NEAR(m->mean, 60);
  CHECK_NEAR(m->max, 70);
  CHECK_NEAR(m->min, 50);
  m = mlprof__subject_measure(p, "rss_bytes");
  CHECK_NEAR(m->mean, 200);
  CHECK_NEAR(m->max, 300);
  CHECK_NEAR(m->first, 100);
  CHECK_NEAR(m->last, 200);
  CHECK_EQ(m->first_ns, 1000);
  CHECK_EQ(m->last_ns, 3000);

  const mlprof__subject_stats *w =
      find_subject(&r, MLPROF__SUBJECT_PROCESS, 201);
  CHECK(w != NULL);
  CHECK_EQ(w->process, -1); /* wrote no profile */
  CHECK_NEAR(mlprof__subject_measure(w, "cpu_pct")->mean, 20);

  m = mlprof__subject_measure(&r.subjects[0], "cpu_temp_c");
  CHECK(m != NULL);
  CHECK_EQ(m->count, 0);
  CHECK_EQ(m->absent_count, 3);
  CHECK_STR(m->absent, SYNTH_REASON);

  /* Tree: ticks 1000 (rss 100), 2000 (rss 350, cpu 60), 3000 (rss 350, cpu
   * 100); the child that appeared at 2000 is counted from then. */
  CHECK_EQ(r.tree.rows, 3);
  CHECK_EQ(r.tree_processes, 2);
  m = mlprof__subject_measure(&r.tree, "rss_bytes");
  CHECK(m != NULL);
  CHECK_EQ(m->count, 3);
  CHECK_NEAR(m->mean, 800.0 / 3);
  CHECK_NEAR(m->max, 350);
  m = mlprof__subject_measure(&r.tree, "cpu_pct");
  CHECK_EQ(m->count, 2);
  CHECK_NEAR(m->mean, 80);
  CHECK_NEAR(m->max, 100);

  /* Energy: 3600 J CPU + 3600 J GPU = 2 Wh; at 500 g/kWh, 1 g. */
  CHECK(r.has_cpu_energy);
  CHECK(r.has_gpu_energy);
  CHECK_NEAR(r.cpu_energy_j, 3600);
  CHECK_NEAR(r.gpu_energy_j, 3600);
  CHECK_NEAR(r.intensity_g_per_kwh, 500);
  CHECK_STR(r.intensity_source, "MLPROF_CARBON_G_PER_KWH");
  CHECK_NEAR(r.carbon_g, 1.0);

  CHECK_EQ(r.nsources, 3);
  int nvml = 0;
  for (size_t i = 0; i < r.nsources; i++)
    if (strcmp(r.sources[i].name, "nvml") == 0) {
      nvml = 1;
      CHECK(!r.sources[i].available);
      CHECK_STR(r.sources[i].reason, "no NVML: libnvidia-ml.so.1 not found");
      CHECK_STR(r.sources[i].hostname, "h");
      CHECK_EQ(r.sources[i].profiles, 1);
    }
  CHECK(nvml);

  /* fwd (job 1500..2500): the sample at 2000 (cpu 50, GPU 20); RSS 100 at
   * 1000 before it, 200 at 3000 after it. tiny (2100..2200): no sample
   * inside, the one at 3000 covers it (cpu 70, GPU 40); RSS 300 -> 200. */
  CHECK_EQ(r.nzones, 2);
  const mlprof__zone_samples *z = mlprof__resources_zone(&r, "fwd", 3);
  CHECK(z != NULL);
  CHECK(z->has_cpu && z->has_gpu && z->has_rss);
  CHECK_NEAR(z->cpu_pct, 50);
  CHECK_NEAR(z->gpu_util_pct, 20);
  CHECK_NEAR(z->rss_change_bytes, 100);
  z = mlprof__resources_zone(&r, "tiny", 4);
  CHECK(z != NULL);
  CHECK_NEAR(z->cpu_pct, 70);
  CHECK_NEAR(z->gpu_util_pct, 40);
  CHECK_NEAR(z->rss_change_bytes, -100);
  CHECK(mlprof__resources_zone(&r, "fw", 2) == NULL);
  mlprof__resources_free(&r);
}

/* The report and the resources in one read give what each gives alone. */
static void test_resources_with_report(void) {
  sampled_job j;
  CHECK_EQ(open_sampled(&j), 0);
  mlprof__analysis a;
  char err[256];
  int rc = analyse(&j.job, MLPROF__ANALYSIS_STATS | MLPROF__ANALYSIS_RESOURCES,
                   &a, err, sizeof err);
  mlprof__report rep = a.r;
  mlprof__resources r = a.res;
  close_sampled(&j);
  if (rc) TEST_FAIL("build: %s", err);
  CHECK_EQ(rep.nprocs, 2);
  CHECK_EQ(rep.spans, 2);
  CHECK_EQ(r.nsubjects, 4);
  CHECK_EQ(r.tree.rows, 3);
  CHECK_NEAR(r.cpu_energy_j, 3600);
  CHECK_NEAR(r.carbon_g, 7200 / 3.6e6 * 475);
  CHECK(strstr(r.intensity_source, "world average") != NULL);
  CHECK_NEAR(mlprof__resources_zone(&r, "fwd", 3)->cpu_pct, 50);
  mlprof__report_free(&rep);
  mlprof__resources_free(&r);
}

/* No samples: nothing sampled, nothing invented, and no second read. */
static void test_resources_unsampled(void) {
  char dir[] = "/tmp/mlprof-res-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[128];
  snprintf(path, sizeof path, "%s/a.mlprof", dir);
  FILE *f = synth_open(path, 0);
  synth_header(f, 5, 1, 0, "h", "/bin/x");
  synth_end(f, 10);
  fclose(f);
  mlprof__job job;
  char err[256];
  const char *paths[] = {path};
  CHECK_EQ(mlprof__job_open(&job, paths, 1, err, sizeof err), 0);
  mlprof__analysis a;
  int rc = analyse(&job, MLPROF__ANALYSIS_RESOURCES, &a, err, sizeof err);
  mlprof__resources r = a.res;
  mlprof__job_close(&job);
  unlink(path);
  rmdir(dir);
  CHECK_EQ(rc, 0);
  CHECK_EQ(a.reads, 1); /* nothing sampled: no zone pass */
  CHECK(!r.sampled);
  CHECK_EQ(r.nsubjects, 0);
  CHECK_EQ(r.tree.nm, 0);
  CHECK(!r.has_cpu_energy && !r.has_gpu_energy);
  CHECK(r.gpu_absent == NULL);
  mlprof__resources_free(&r);
}

/* ---- the analysis driver: one read per pass ------------------------------ */

/* The statistics, the samples and the tree share the first read of each
 * profile; the findings and the zone averages the second: a dashboard reads
 * each profile twice, a report of zones once (it used to be eight and one). */
static void test_analysis_reads_once_per_pass(void) {
  sampled_job j;
  CHECK_EQ(open_sampled(&j), 0);
  static const struct {
    unsigned want;
    size_t reads; /* per profile */
  } cases[] = {
      {MLPROF__ANALYSIS_STATS, 1},
      {MLPROF__ANALYSIS_TREE, 1},
      {MLPROF__ANALYSIS_STATS | MLPROF__ANALYSIS_TREE, 1},
      {MLPROF__ANALYSIS_RESOURCES, 2}, /* sampled: the zone averages */
      {MLPROF__ANALYSIS_FINDINGS, 2},
      {MLPROF__ANALYSIS_FINDINGS | MLPROF__ANALYSIS_TREE, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mlprof__analysis a;
    char err[256];
    int rc = analyse(&j.job, cases[i].want, &a, err, sizeof err);
    size_t reads = a.reads;
    mlprof__analysis_free(&a);
    if (rc) {
      close_sampled(&j);
      TEST_FAIL("run: %s", err);
    }
    if (reads != cases[i].reads * j.job.count) {
      close_sampled(&j);
      TEST_FAIL("want %#x: %zu reads of %zu profiles", cases[i].want, reads,
                j.job.count);
    }
  }
  close_sampled(&j);
}

/* What an analysis gives alone, it gives beside the others in one read. */
static void test_analysis_shared_read_matches_alone(void) {
  sampled_job j;
  CHECK_EQ(open_sampled(&j), 0);
  mlprof__analysis all, tree, res;
  char err[256];
  int rc = analyse(&j.job, MLPROF__ANALYSIS_FINDINGS | MLPROF__ANALYSIS_TREE,
                   &all, err, sizeof err);
  if (!rc) rc = analyse(&j.job, MLPROF__ANALYSIS_TREE, &tree, err, sizeof err);
  if (!rc)
    rc = analyse(&j.job, MLPROF__ANALYSIS_RESOURCES, &res, err, sizeof err);
  close_sampled(&j);
  if (rc) TEST_FAIL("run: %s", err);
  CHECK_EQ(all.have, MLPROF__ANALYSIS_STATS | MLPROF__ANALYSIS_RESOURCES |
                         MLPROF__ANALYSIS_FINDINGS | MLPROF__ANALYSIS_TREE);
  CHECK_EQ(all.r.spans, 2);
  CHECK_EQ(all.tree.spans, tree.tree.spans);
  CHECK_EQ(all.tree.nnodes, tree.tree.nnodes);
  CHECK_EQ(all.tree.nseries, tree.tree.nseries);
  CHECK_EQ(all.res.nsubjects, res.res.nsubjects);
  CHECK_EQ(all.res.nseries, res.res.nseries);
  CHECK_EQ(all.res.nzones, res.res.nzones);
  CHECK_NEAR(mlprof__resources_zone(&all.res, "fwd", 3)->cpu_pct, 50);
  CHECK_NEAR(all.res.cpu_energy_j, res.res.cpu_energy_j);
  CHECK(all.f.sampled);
  mlprof__analysis_free(&all);
  mlprof__analysis_free(&tree);
  mlprof__analysis_free(&res);
}

static int u64_order(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Two sequences of marks and step ends spanning many blocks, with steps
 * from 0 ns to hours: the cursor gives back every entry kept, the counts
 * hold, and each percentile is the nearest rank of the sorted durations. */
static void test_marks_exact(void) {
  enum { N = 20000 };
  mlprof__marks m[2] = {{0}};
  uint64_t *want = malloc(2 * N * sizeof *want), *times = malloc(N * 8);
  int *ends = malloc(N * sizeof *ends);
  size_t nwant = 0;
  uint64_t rnd = 12345;
  for (int s = 0; s < 2; s++) {
    uint64_t t = 1000 + (uint64_t)s, kept = 0;
    int in_step = 0;
    for (int i = 0; i < N; i++) {
      rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
      uint64_t d = (rnd >> 33) % 7 == 0 ? (rnd >> 20) : (rnd >> 50);
      int end = (rnd >> 10) % 5 == 0;
      t += d;
      CHECK_EQ(mlprof__marks_add(&m[s], t, end), 0);
      if (end && !in_step) continue; /* an end with no step is dropped */
      if (in_step) want[nwant++] = t - times[kept - 1];
      times[kept] = t;
      ends[kept++] = end;
      in_step = !end;
    }
    if (s == 0) {
      mlprof__marks_cursor c;
      mlprof__marks_cursor_init(&c, &m[0]);
      uint64_t t0;
      int e, i = 0;
      while (mlprof__marks_next(&c, &t0, &e)) {
        CHECK_EQ_U64(t0, times[i]);
        CHECK_EQ(e, ends[i]);
        i++;
      }
      CHECK_EQ_U64((uint64_t)i, kept);
      CHECK_EQ_U64(m[0].marks + m[0].ends, kept);
      CHECK(m[0].nblocks > 2);
    }
  }
  CHECK_EQ_U64(m[0].steps + m[1].steps, nwant);
  qsort(want, nwant, sizeof *want, u64_order);
  const mlprof__marks *both[] = {&m[0], &m[1]};
  static const unsigned pcts[] = {1, 50, 90, 99, 100};
  for (size_t k = 0; k < sizeof pcts / sizeof pcts[0]; k++) {
    size_t rank = (nwant * pcts[k] + 99) / 100;
    CHECK_EQ_U64(mlprof__marks_percentile(both, 2, pcts[k]), want[rank - 1]);
  }
  CHECK_EQ_U64(mlprof__marks_percentile(both, 0, 50), 0);
  mlprof__marks_free(&m[0]);
  mlprof__marks_free(&m[1]);
  free(want);
  free(times);
  free(ends);
}

/* ---- the budget of raw durations: exact percentiles past it -------------- */

typedef enum {
  D_UNIFORM,
  D_NARROW,
  D_CONSTANT,
  D_BIMODAL,
  D_HEAVY,
  D_KINDS
} dist_kind;

static uint64_t xorshift(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* A duration of zone z drawn from kind: uniform over 1 ms; 64 clusters of
 * 1000 adjacent values, 65536 apart, in one bucket of the histogram (for
 * small budgets: refined into buckets about 1000 wide, a cluster each, then
 * collected); one value a zone; two narrow modes (many equal values) 25,000
 * times apart; a heavy tail (a value below 1000 doubled a geometric number
 * of times, up to 2^50). */
static uint64_t draw(dist_kind kind, uint32_t z, uint64_t *x) {
  uint64_t r = xorshift(x);
  switch (kind) {
    case D_UNIFORM:
      return r % 1000000;
    case D_NARROW:
      return (1ull << 30) + r % 64 * 65536 + (r >> 40) % 1000;
    case D_CONSTANT:
      return 1000 + z;
    case D_BIMODAL:
      return r >> 63 ? 200 + r % 16 : 5000000 + r % 7;
    default: {
      int k = __builtin_ctzll(xorshift(x) | 1ull << 50);
      return (r % 1000 + 1) << k;
    }
  }
}

typedef struct {
  char dir[64];
  char path[4][96];
  size_t n;
  mlprof__job job;
} budget_job;

/* A job of nprof profiles, each of spans spans on one thread over nzones
 * zones, durations of kind (every span at depth 0, from time 0). */
static int budget_job_write(budget_job *j, size_t nprof, uint32_t nzones,
                            size_t spans, dist_kind kind, uint64_t seed) {
  snprintf(j->dir, sizeof j->dir, "/tmp/mlprof-budget-XXXXXX");
  if (!mkdtemp(j->dir)) return -1;
  const char *paths[4];
  uint64_t x = seed;
  j->n = 0;
  for (size_t k = 0; k < nprof; k++, j->n++) {
    char *path = j->path[k];
    snprintf(path, sizeof j->path[k], "%s/p-%zu.mlprof", j->dir, k);
    paths[k] = path;
    FILE *f = synth_open(path, 1);
    if (!f) return -1;
    synth_header(f, 100 + k, 1, 1000 + k, "h", "w");
    payload p = {.n = 0};
    p_uv(&p, nzones);
    for (uint32_t z = 0; z < nzones; z++) {
      char nm[16];
      snprintf(nm, sizeof nm, "z%u", z);
      p_name(&p, z + 1, MLPROF__NAME_ZONE, MLPROF_CAT_NONE, nm);
    }
    chunk(f, MLPROF__CHUNK_NAMES, &p);
    synth_events e = {.f = f, .tid = 1};
    for (size_t i = 0; i < spans; i++) {
      uint32_t z = (uint32_t)(xorshift(&x) % nzones);
      synth_ev_span(&e, z + 1, 0, 0, draw(kind, z, &x));
    }
    synth_ev_flush(&e);
    synth_end(f, 1ull << 52);
    fclose(f);
  }
  char err[256];
  return mlprof__job_open(&j->job, paths, j->n, err, sizeof err);
}

static void budget_job_remove(budget_job *j) {
  mlprof__job_close(&j->job);
  for (size_t i = 0; i < j->n; i++) unlink(j->path[i]);
  rmdir(j->dir);
}

static int run_budget(const budget_job *j, unsigned want, size_t budget,
                      const mlprof__filter *f, mlprof__analysis *a) {
  mlprof__analysis_opts o;
  mlprof__analysis_opts_init(&o);
  o.want = want;
  o.durations_budget = budget;
  o.filter = f;
  char err[256];
  return mlprof__analysis_run(&j->job, &o, a, err, sizeof err);
}

/* Every number of every zone, as the report built with every duration in
 * memory has it; std to rounding (the squares are summed in another
 * order). */
static void check_same_zones(const mlprof__report *want,
                             const mlprof__report *got) {
  CHECK_EQ(got->nzones, want->nzones);
  CHECK_EQ_U64(got->spans, want->spans);
  for (size_t i = 0; i < want->nzones; i++) {
    const mlprof__zone_stats *w = &want->zones[i], *g = &got->zones[i];
    CHECK_STR(g->name, w->name);
    CHECK_EQ_U64(g->count, w->count);
    CHECK_EQ_U64(g->total_ns, w->total_ns);
    CHECK_EQ_U64(g->self_ns, w->self_ns);
    CHECK_EQ_U64(g->min_ns, w->min_ns);
    CHECK_EQ_U64(g->max_ns, w->max_ns);
    CHECK_EQ_U64(g->p50_ns, w->p50_ns);
    CHECK_EQ_U64(g->p90_ns, w->p90_ns);
    CHECK_EQ_U64(g->p95_ns, w->p95_ns);
    CHECK_EQ_U64(g->p99_ns, w->p99_ns);
    CHECK(g->mean_ns == w->mean_ns);
    if (!(fabs(g->std_ns - w->std_ns) <= 1e-12 * w->std_ns))
      TEST_FAIL("zone %s: std %.17g != %.17g", w->name, g->std_ns, w->std_ns);
    CHECK_EQ(got->order[i], want->order[i]);
  }
}

/* Past a budget of 0 (every zone spills, and every interval is refined to
 * one value), small ones (some zones keep their durations, the selection
 * collects) and one only the larger jobs outgrow (zones of 12,000 spans or
 * more, so every one can spill): the same numbers as all
 * in memory, over several kinds of data, zone counts and profiles. */
static void test_budget_exact_percentiles(void) {
  static const size_t budgets[] = {0, 5000, 50000, 150000};
  static const struct {
    size_t profiles;
    uint32_t zones;
  } shapes[] = {{1, 1}, {1, 5}, {3, 2}, {4, 9}};
  for (int kind = 0; kind < D_KINDS; kind++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      budget_job j;
      if (budget_job_write(&j, shapes[s].profiles, shapes[s].zones, 60000,
                           (dist_kind)kind, 7 + (uint64_t)kind * 31 + s)) {
        budget_job_remove(&j);
        TEST_FAIL("cannot write the job");
      }
      mlprof__analysis all;
      CHECK_EQ(run_budget(&j, MLPROF__ANALYSIS_STATS, MLPROF__STATS_BUDGET,
                          NULL, &all),
               0);
      CHECK_EQ(all.reads, j.n); /* under the budget: one read */
      for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
        mlprof__analysis a;
        CHECK_EQ(run_budget(&j, MLPROF__ANALYSIS_STATS, budgets[b], NULL, &a),
                 0);
        /* More spans than room: selection passes; else one read. */
        if ((a.reads > j.n) != (all.r.spans > budgets[b])) {
          mlprof__analysis_free(&a);
          TEST_FAIL("kind %d shape %zu budget %zu: %zu reads of %zu", kind, s,
                    budgets[b], a.reads, j.n);
        }
        check_same_zones(&all.r, &a.r);
        mlprof__analysis_free(&a);
        if (mlprof_test_failed) {
          fprintf(stderr, "  kind %d, shape %zu, budget %zu\n", kind, s,
                  budgets[b]);
          break;
        }
      }
      mlprof__analysis_free(&all);
      budget_job_remove(&j);
      if (mlprof_test_failed) return;
    }
}

/* The findings and the tree read the report the selection passes
 * completed; a filter applies to every pass alike. */
static void test_budget_with_findings_and_filter(void) {
  budget_job j;
  if (budget_job_write(&j, 3, 4, 60000, D_HEAVY, 99)) {
    budget_job_remove(&j);
    TEST_FAIL("cannot write the job");
  }
  unsigned want = MLPROF__ANALYSIS_FINDINGS | MLPROF__ANALYSIS_TREE;
  mlprof__filter f = {.min_ns = 1000};
  mlprof__analysis all, a;
  CHECK_EQ(run_budget(&j, want, MLPROF__STATS_BUDGET, &f, &all), 0);
  CHECK_EQ(run_budget(&j, want, 1000, &f, &a), 0);
  CHECK(a.reads > all.reads);
  CHECK(all.r.zones[0].min_ns >= 1000);
  check_same_zones(&all.r, &a.r);
  CHECK_EQ(a.f.nfindings, all.f.nfindings);
  mlprof__analysis_free(&a);
  mlprof__analysis_free(&all);
  budget_job_remove(&j);
}

/* Zones with fewer durations than a histogram has buckets keep them raw
 * past the budget: spilling them would take more room, not less. */
static void test_budget_small_zones_stay_raw(void) {
  budget_job j;
  if (budget_job_write(&j, 2, 9, 3000, D_UNIFORM, 5)) {
    budget_job_remove(&j);
    TEST_FAIL("cannot write the job");
  }
  mlprof__analysis all, a;
  CHECK_EQ(
      run_budget(&j, MLPROF__ANALYSIS_STATS, MLPROF__STATS_BUDGET, NULL, &all),
      0);
  CHECK_EQ(run_budget(&j, MLPROF__ANALYSIS_STATS, 0, NULL, &a), 0);
  CHECK_EQ(a.reads, j.n);
  check_same_zones(&all.r, &a.r);
  mlprof__analysis_free(&a);
  mlprof__analysis_free(&all);
  budget_job_remove(&j);
}

/* mlprof__series_lower with a hint answers as a plain lower-bound search,
 * for times in order, backwards, at random and repeated, on series with
 * equal times, and on the empty series. */
static void test_series_lower_with_hints(void) {
  uint64_t t[200];
  for (size_t i = 0; i < 200; i++) t[i] = 10 * (i / 2); /* pairs equal */
  for (size_t n = 0; n <= 200; n += 40) {
    mlprof__series s = {.n = n, .t = t};
    size_t hint = 0, bad = 0;
    unsigned x = 12345;
    for (size_t q = 0; q < 3000; q++) {
      uint64_t v = q < 1000   ? q        /* ascending */
                   : q < 2000 ? 2000 - q /* descending */
                              : (x = x * 1103515245u + 12345u) % 1100;
      size_t want = 0;
      while (want < n && t[want] < v) want++;
      size_t got = mlprof__series_lower(&s, v, &hint);
      bad += got != want || hint != want ||
             mlprof__series_lower(&s, v, NULL) != want;
    }
    size_t stale = 7 * n + 5; /* past the end: a start like any other */
    bad += mlprof__series_lower(&s, 55, &stale) !=
           mlprof__series_lower(&s, 55, NULL);
    CHECK_EQ(bad, 0);
  }
}

const mlprof_test mlprof_tests_stats[] = {
    {"series_lower_with_hints", test_series_lower_with_hints},
    {"resources_exact", test_resources_exact},
    {"resources_with_report", test_resources_with_report},
    {"resources_unsampled", test_resources_unsampled},
    {"analysis_reads_once_per_pass", test_analysis_reads_once_per_pass},
    {"analysis_shared_read_matches_alone",
     test_analysis_shared_read_matches_alone},
    {"one_zone_exact", test_one_zone_exact},
    {"percentiles_nearest_rank", test_percentiles_nearest_rank},
    {"nested_self_time", test_nested_self_time},
    {"threads_keep_their_own_nesting", test_threads_keep_their_own_nesting},
    {"lost_parent_does_not_leak_child_time",
     test_lost_parent_does_not_leak_child_time},
    {"processes_merge_by_name", test_processes_merge_by_name},
    {"units_inside_and_outside_zones", test_units_inside_and_outside_zones},
    {"steps_open_zones_meta", test_steps_open_zones_meta},
    {"killed_and_damaged_profile", test_killed_and_damaged_profile},
    {"open_at_shutdown_is_no_warning", test_open_at_shutdown_is_no_warning},
    {"python_not_loaded_grouped", test_python_not_loaded_grouped},
    {"recursion_counted_once", test_recursion_counted_once},
    {"sort_and_top", test_sort_and_top},
    {"large_zone_percentiles", test_large_zone_percentiles},
    {"wide_zone_percentiles", test_wide_zone_percentiles},
    {"marks_exact", test_marks_exact},
    {"budget_exact_percentiles", test_budget_exact_percentiles},
    {"budget_with_findings_and_filter", test_budget_with_findings_and_filter},
    {"budget_small_zones_stay_raw", test_budget_small_zones_stay_raw},
    {NULL, NULL}};
