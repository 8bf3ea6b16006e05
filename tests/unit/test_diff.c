/* mlprof diff's uniform-shift check (src/analyze/diff.c, diff.h): every zone
 * slower or faster alike points at the machine, not the code. True
 * positives (a uniform 9% shift, with and without one zone beyond it) beside
 * false-positive tests (one slower zone, noise alone, zones moving each its
 * own way, too small a shift, too few zones). */
#include <math.h>
#include <mlprof.h>
#include <stdlib.h>

#include "analyze/diff.h"
#include "analyze/stats.h"
#include "export/diff.h"
#include "format/wire.h"
#include "builder.h"
#include "test.h"

#define CHECK_NEAR(a, b, tol)                                \
  do {                                                       \
    double a_ = (a), b_ = (b);                               \
    if (!(fabs(a_ - b_) <= (tol)))                           \
      TEST_FAIL("%s == %s: %.17g != %.17g", #a, #b, a_, b_); \
  } while (0)

/* xorshift64*: a uniform double in (0, 1). */
static double uniform(uint64_t *rng) {
  *rng ^= *rng >> 12;
  *rng ^= *rng << 25;
  *rng ^= *rng >> 27;
  return ((double)((*rng * 0x2545f4914f6cdd1dull) >> 11) + 0.5) /
         9007199254740992.0;
}

/* Spans of mean centre plus noise: jitter (0 to 1) times centre,
 * exponential, as preemption stretches spans. */
typedef struct {
  uint64_t rng;
  double centre, jitter;
} noisy;

static uint64_t noisy_dur(size_t i, void *ud) {
  noisy *n = ud;
  (void)i;
  return (uint64_t)(n->centre * (1 - n->jitter * log(uniform(&n->rng))) + 0.5);
}

static const char *const names[] = {"load",      "forward", "backward", "optim",
                                    "allreduce", "eval",    "log",      "save"};

/* Two runs of zones names[0..nz): BASE at factor 1, NEW at factors[k]. */
static int diff_of(size_t nz, const double *factors, size_t nbase, size_t nnew,
                   double jitter, uint64_t seed, mlprof__report *base,
                   mlprof__report *next, mlprof__diff *d) {
  builder b;
  noisy n = {.rng = seed * 0x9e3779b97f4a7c15ull + 1, .jitter = jitter};
  build_begin(&b, 1);
  for (size_t k = 0; k < nz; k++) {
    n.centre = 10000 * (double)(k + 1);
    spans(&b, names[k], nbase, noisy_dur, &n);
  }
  build_end(&b, base);
  n.rng = (seed + 1000003) * 0x9e3779b97f4a7c15ull + 1;
  build_begin(&b, 1);
  for (size_t k = 0; k < nz; k++) {
    n.centre = 10000 * (double)(k + 1) * factors[k];
    spans(&b, names[k], nnew, noisy_dur, &n);
  }
  build_end(&b, next);
  mlprof__diff_options opt = {.threshold = 0.05, .alpha = 0.01, .min_count = 5};
  return mlprof__diff_build(base, next, &opt, d);
}

static void free_all(mlprof__report *base, mlprof__report *next,
                     mlprof__diff *d) {
  mlprof__diff_free(d);
  mlprof__report_free(base);
  mlprof__report_free(next);
}

static const mlprof__diff_zone *dz(const mlprof__diff *d, const char *name) {
  for (size_t i = 0; i < d->nzones; i++)
    if (strcmp(d->zones[i].name, name) == 0) return &d->zones[i];
  return NULL;
}

/* Every zone 9% slower (a slower machine): the shift is found, no zone is
 * beyond it; the verdicts stay, but moved with the machine: no regression. */
static void test_uniform_shift_found(void) {
  static const double f[] = {1.09, 1.09, 1.09, 1.09, 1.09, 1.09};
  mlprof__report base, next;
  mlprof__diff d;
  CHECK_EQ(diff_of(6, f, 400, 300, 0.05, 1, &base, &next, &d), 0);
  CHECK_EQ(d.shift.detected, 1);
  CHECK_EQ(d.shift.zones, 6);
  CHECK_EQ(d.shift.agreeing, 6);
  CHECK_NEAR(d.shift.ratio, 1.09, 0.01);
  CHECK(d.shift.spread >= 0 && d.shift.spread < 0.01);
  CHECK_EQ(d.shift.deviating, 0);
  CHECK_EQ(d.count[MLPROF__VERDICT_SLOWER], 6);
  CHECK_EQ(d.shift.explained, 6);
  CHECK_EQ(d.regression, 0);
  for (size_t i = 0; i < d.nzones; i++) {
    const mlprof__diff_zone *z = &d.zones[i];
    CHECK_EQ(z->machine_explains, 1);
    CHECK_EQ(z->explained_by, MLPROF__EXPLAINED_SHIFT);
    CHECK_EQ(z->in_shift, 1);
    CHECK_EQ(z->shift_verdict, MLPROF__VERDICT_UNCHANGED);
    CHECK_NEAR(z->shift_ratio, 1, 0.02);
  }
  free_all(&base, &next, &d);

  /* The same, faster: 8% less time everywhere. */
  static const double g[] = {0.92, 0.92, 0.92, 0.92, 0.92};
  CHECK_EQ(diff_of(5, g, 400, 300, 0.05, 2, &base, &next, &d), 0);
  CHECK_EQ(d.shift.detected, 1);
  CHECK_NEAR(d.shift.ratio, 0.92, 0.01);
  CHECK_EQ(d.shift.deviating, 0);
  CHECK_EQ(d.count[MLPROF__VERDICT_FASTER], 5);
  CHECK_EQ(d.shift.explained, 5);
  free_all(&base, &next, &d);
}

/* Seven zones 9% slower and one 9% x 1.25: the shift is found and that zone
 * is named as beyond it, about 25% slower than the rest. */
static void test_uniform_shift_names_the_zone_beyond(void) {
  static const double f[] = {1.09, 1.09, 1.09 * 1.25, 1.09,
                             1.09, 1.09, 1.09,        1.09};
  mlprof__report base, next;
  mlprof__diff d;
  CHECK_EQ(diff_of(8, f, 400, 300, 0.05, 3, &base, &next, &d), 0);
  CHECK_EQ(d.shift.detected, 1);
  CHECK_EQ(d.shift.zones, 8);
  CHECK_EQ(d.shift.agreeing, 7);
  CHECK_NEAR(d.shift.ratio, 1.09, 0.01);
  CHECK_EQ(d.shift.deviating, 1);
  const mlprof__diff_zone *z = dz(&d, "backward");
  CHECK(z != NULL);
  CHECK_EQ(z->shift_verdict, MLPROF__VERDICT_SLOWER);
  CHECK_NEAR(z->shift_ratio, 1.25, 0.02);
  CHECK(z->shift_test.p < 1e-10);
  CHECK_EQ(dz(&d, "forward")->shift_verdict, MLPROF__VERDICT_UNCHANGED);
  /* The zone beyond the shift is the code's: a regression. */
  CHECK_EQ(z->machine_explains, 0);
  CHECK_EQ(dz(&d, "forward")->machine_explains, 1);
  CHECK_EQ(d.shift.explained, 7);
  CHECK_EQ(d.regression, 1);
  free_all(&base, &next, &d);
}

/* One zone 20% slower, the others unchanged: a regression, no shift. */
static void test_single_slower_zone_is_no_shift(void) {
  static const double f[] = {1, 1, 1.2, 1, 1, 1};
  mlprof__report base, next;
  mlprof__diff d;
  CHECK_EQ(diff_of(6, f, 400, 300, 0.05, 4, &base, &next, &d), 0);
  CHECK_EQ(d.count[MLPROF__VERDICT_SLOWER], 1);
  CHECK_EQ(d.shift.zones, 6);
  CHECK_EQ(d.shift.detected, 0);
  CHECK_NEAR(d.shift.ratio, 1, 0.01);
  CHECK(isnan(dz(&d, "backward")->shift_ratio));
  free_all(&base, &next, &d);
  /* Half the zones slower is not most of them. */
  static const double g[] = {1.09, 1.09, 1.09, 1, 1, 1};
  CHECK_EQ(diff_of(6, g, 400, 300, 0.05, 5, &base, &next, &d), 0);
  CHECK_EQ(d.shift.detected, 0);
  free_all(&base, &next, &d);
}

/* Noise alone: both runs from one distribution, never a shift; 200 times
 * with few spans and heavy jitter (each zone's median ratio moves by ~5%,
 * so eight of them sometimes line up), 50 times with many spans. */
static void test_noise_is_no_shift(void) {
  static const double f[] = {1, 1, 1, 1, 1, 1, 1, 1};
  int found = 0;
  for (uint64_t trial = 0; trial < 250; trial++) {
    mlprof__report base, next;
    mlprof__diff d;
    int few = trial < 200;
    CHECK_EQ(diff_of(8, f, few ? 60 : 2000, few ? 40 : 1500, few ? 0.3 : 0.05,
                     100 + trial, &base, &next, &d),
             0);
    found += d.shift.detected;
    free_all(&base, &next, &d);
  }
  CHECK_EQ(found, 0);
}

/* Each zone moved its own way (-10% to +10%): few move alike. The median
 * move is about -1.6%: only the zones 5% and 7% faster are near it that
 * way. */
static void test_scattered_changes_are_no_shift(void) {
  static const double f[] = {0.90, 1.10, 0.95, 1.07, 1.02, 0.93};
  mlprof__report base, next;
  mlprof__diff d;
  CHECK_EQ(diff_of(6, f, 400, 300, 0.05, 6, &base, &next, &d), 0);
  CHECK_EQ(d.shift.detected, 0);
  CHECK(d.shift.agreeing <= 2);
  free_all(&base, &next, &d);
  /* Alike in direction, not in size: 3% to 15% slower. Within 5% of the
   * median 9% are 6%, 9% and 12%: 3 of 5. */
  static const double g[] = {1.03, 1.06, 1.09, 1.12, 1.15};
  CHECK_EQ(diff_of(5, g, 400, 300, 0.05, 7, &base, &next, &d), 0);
  CHECK_EQ(d.shift.detected, 0);
  CHECK_EQ(d.shift.agreeing, 3);
  free_all(&base, &next, &d);
}

/* Below half the threshold (1.5% against 5%), or on two zones: nothing. */
static void test_small_or_narrow_shift_is_none(void) {
  static const double f[] = {1.015, 1.015, 1.015, 1.015, 1.015};
  mlprof__report base, next;
  mlprof__diff d;
  CHECK_EQ(diff_of(5, f, 400, 300, 0.02, 7, &base, &next, &d), 0);
  CHECK_NEAR(d.shift.ratio, 1.015, 0.005);
  CHECK_EQ(d.shift.detected, 0);
  free_all(&base, &next, &d);
  static const double g[] = {1.09, 1.09};
  CHECK_EQ(diff_of(2, g, 400, 300, 0.05, 8, &base, &next, &d), 0);
  CHECK_EQ(d.shift.zones, 2);
  CHECK_EQ(d.shift.detected, 0);
  CHECK(isnan(d.shift.ratio));
  free_all(&base, &next, &d);
  /* Zones with too few spans do not count. */
  static const double h[] = {1.09, 1.09, 1.09, 1.09};
  CHECK_EQ(diff_of(4, h, 4, 4, 0.05, 9, &base, &next, &d), 0);
  CHECK_EQ(d.shift.zones, 0);
  CHECK_EQ(d.shift.detected, 0);
  free_all(&base, &next, &d);
}

/* Every zone 2x slower while NEW's processes waited for a CPU half the
 * time they wanted one (BASE: never): the machine explains 2x, so no
 * verdict is a regression; one zone 1.5x beyond it still is. Without the
 * run-queue figures, or with equal ones, the uniform shift explains it. */
static void test_slower_machine_explains_its_share(void) {
  static const double f[] = {2, 2, 2, 2};
  static const double g[] = {2, 3, 2, 2};
  mlprof__report base, next;
  mlprof__diff d;
  for (int c = 0; c < 4; c++) {
    const double *fac = c == 1 ? g : f;
    CHECK_EQ(
        diff_of(4, fac, 300, 300, 0.05, 11 + (uint64_t)c, &base, &next, &d), 0);
    /* diff_of judged with contention 0 and 0: now as the CLI would. */
    mlprof__diff_free(&d);
    mlprof__diff_options opt;
    mlprof__diff_options_init(&opt);
    if (c < 2) opt.contention[0] = 0, opt.contention[1] = 0.5;
    if (c == 3) opt.contention[0] = opt.contention[1] = 0.5;
    CHECK_EQ(mlprof__diff_build(&base, &next, &opt, &d), 0);
    CHECK_EQ(d.count[MLPROF__VERDICT_SLOWER], 4);
    if (c < 2) {
      CHECK_EQ(d.machine.slower, 1);
      CHECK_NEAR(d.machine.factor, 2, 1e-12);
      /* Every zone moved alike: the uniform shift explains them before
       * the run-queue wait is asked. */
      CHECK_EQ(d.machine.explained + d.shift.explained, c == 0 ? 4 : 3);
      CHECK_EQ(d.regression, c == 1);
      CHECK_EQ(dz(&d, "forward")->machine_explains, c == 0);
      CHECK_EQ(dz(&d, "load")->machine_explains, 1);
      char note[512];
      mlprof__diff_machine_note(note, sizeof note, &d);
      CHECK(strstr(note, "run-queue wait 0% -> 50%") != NULL);
    } else {
      /* No load recorded, or the same: every zone 2x slower alike is
       * still the machine's, by the uniform shift. */
      CHECK_EQ(d.machine.slower, 0);
      CHECK_EQ(d.machine.explained, 0);
      CHECK_EQ(d.shift.explained, 4);
      CHECK_EQ(d.regression, 0);
    }
    free_all(&base, &next, &d);
  }
}

/* Student's t: two-sided p against tables (df 1, 2, 4, 10, 1000 at the
 * 95% points, df 3 at 99%). */
static void test_t_p(void) {
  CHECK_NEAR(mlprof__t_p(12.706, 1), 0.05, 1e-4);
  CHECK_NEAR(mlprof__t_p(4.303, 2), 0.05, 1e-4);
  CHECK_NEAR(mlprof__t_p(5.841, 3), 0.01, 1e-4);
  CHECK_NEAR(mlprof__t_p(-2.776, 4), 0.05, 1e-4);
  CHECK_NEAR(mlprof__t_p(2.228, 10), 0.05, 1e-4);
  CHECK_NEAR(mlprof__t_p(1.962, 1000), 0.05, 1e-3);
  CHECK_NEAR(mlprof__t_p(0, 5), 1, 1e-12);
  CHECK_NEAR(mlprof__t_p(INFINITY, 5), 0, 1e-12);
}

/* k runs a side of zones names[0..nz): run r of a side has zone k at
 * 10 us x (k + 1) x factors[side][r][k], with 5% jitter. */
static void runs_of(size_t k, size_t nz, const double f[2][3][4],
                    mlprof__report *rep) {
  builder b;
  for (size_t side = 0; side < 2; side++)
    for (size_t r = 0; r < k; r++) {
      noisy n = {.rng = (side * 7 + r + 1) * 0x9e3779b97f4a7c15ull,
                 .jitter = 0.05};
      build_begin(&b, 1);
      for (size_t z = 0; z < nz; z++) {
        n.centre = 10000 * (double)(z + 1) * f[side][r][z];
        spans(&b, names[z], 400, noisy_dur, &n);
      }
      build_end(&b, &rep[side * k + r]);
    }
}

/* Three runs a side whose medians vary by up to 10%, each zone its own
 * way: the pooled spans call some zones slower or faster, the runs' medians
 * do not bear it out: no regression. One zone 30% slower in every NEW run
 * is one. */
static void test_several_runs_between_run_noise(void) {
  static const double aa[2][3][4] = {{{0.92, 1.04, 0.97, 1.06},
                                      {1.01, 0.95, 1.05, 0.93},
                                      {0.97, 1.00, 0.91, 1.02}},
                                     {{1.08, 1.06, 1.04, 0.97},
                                      {1.00, 0.93, 1.09, 1.05},
                                      {1.04, 1.08, 0.98, 1.09}}};
  mlprof__report rep[6];
  mlprof__diff d;
  mlprof__diff_options opt;
  mlprof__diff_options_init(&opt);
  runs_of(3, 4, aa, rep);
  CHECK_EQ(mlprof__diff_build_runs(rep, 3, rep + 3, 3, &opt, &d), 0);
  CHECK_EQ(d.side[0].runs, 3);
  CHECK_EQ(d.regression, 0);
  size_t vary = 0;
  for (size_t i = 0; i < d.nzones; i++) {
    CHECK_EQ(d.zones[i].runs[0], 3);
    CHECK(!isnan(d.zones[i].runs_p));
    vary += (size_t)d.zones[i].runs_vary;
    CHECK_EQ(d.zones[i].base->count, 1200);
  }
  CHECK(vary >= 1); /* the pooled test alone would have judged them */
  CHECK_EQ(d.shift.detected, 0);
  mlprof__diff_free(&d);
  for (int i = 0; i < 6; i++) mlprof__report_free(&rep[i]);

  double slow[2][3][4];
  memcpy(slow, aa, sizeof slow);
  for (int r = 0; r < 3; r++) slow[1][r][1] *= 1.3;
  runs_of(3, 4, slow, rep);
  CHECK_EQ(mlprof__diff_build_runs(rep, 3, rep + 3, 3, &opt, &d), 0);
  CHECK_EQ(d.regression, 1);
  const mlprof__diff_zone *z = dz(&d, "forward");
  CHECK_EQ(z->verdict, MLPROF__VERDICT_SLOWER);
  CHECK(z->runs_p < MLPROF__RUNS_ALPHA);
  mlprof__diff_free(&d);
  for (int i = 0; i < 6; i++) mlprof__report_free(&rep[i]);
}

/* CPU steal alone (no run-queue wait): 40% stolen stretches work 1/0.6. */
static void test_steal_explains_a_slower_machine(void) {
  static const double f[] = {1.6, 1.6, 1.6 * 1.5};
  mlprof__report base, next;
  mlprof__diff d;
  CHECK_EQ(diff_of(3, f, 300, 300, 0.05, 31, &base, &next, &d), 0);
  mlprof__diff_free(&d);
  mlprof__diff_options opt;
  mlprof__diff_options_init(&opt);
  opt.steal[0] = 0, opt.steal[1] = 0.4;
  CHECK_EQ(mlprof__diff_build(&base, &next, &opt, &d), 0);
  CHECK_EQ(d.machine.slower, 1);
  CHECK_NEAR(d.machine.factor, 1 / 0.6, 1e-12);
  CHECK_EQ(dz(&d, "load")->explained_by, MLPROF__EXPLAINED_LOAD);
  CHECK_EQ(dz(&d, "backward")->machine_explains, 0);
  CHECK_EQ(d.regression, 1);
  char note[512];
  mlprof__diff_machine_note(note, sizeof note, &d);
  CHECK(strstr(note, "CPU steal 0% -> 40%") != NULL);
  free_all(&base, &next, &d);
}

/* A program that sleeps (it wanted a CPU 3% of the time) is hardly
 * stretched by a run queue, however long: its zones 25% slower are not the
 * machine's. One that wanted half a CPU gets half the factor. */
static void test_machine_stretches_only_the_cpu_wanted(void) {
  static const double f[] = {1.25, 1.25, 1.25, 1.25, 1.8};
  mlprof__report base, next;
  mlprof__diff d;
  CHECK_EQ(diff_of(5, f, 300, 300, 0.05, 41, &base, &next, &d), 0);
  mlprof__diff_free(&d);
  mlprof__diff_options opt;
  mlprof__diff_options_init(&opt);
  opt.contention[0] = 0.2, opt.contention[1] = 0.6; /* factor 2 */
  opt.demand[1] = 0.03;
  CHECK_EQ(mlprof__diff_build(&base, &next, &opt, &d), 0);
  CHECK_NEAR(d.machine.factor, 2, 1e-12);
  CHECK_NEAR(d.machine.expected, 1.03, 1e-12);
  CHECK_EQ(d.machine.slower, 0);
  CHECK_EQ(d.machine.explained, 0);
  CHECK_EQ(dz(&d, "allreduce")->machine_explains, 0);
  CHECK_EQ(d.regression, 1);
  mlprof__diff_free(&d);
  opt.demand[1] = 0.5; /* expected 1.5: allreduce's 1.8 is within 25% of it */
  CHECK_EQ(mlprof__diff_build(&base, &next, &opt, &d), 0);
  CHECK_EQ(d.machine.slower, 1);
  CHECK_NEAR(d.machine.expected, 1.5, 1e-12);
  CHECK_EQ(dz(&d, "allreduce")->explained_by, MLPROF__EXPLAINED_LOAD);
  char note[512];
  mlprof__diff_machine_note(note, sizeof note, &d);
  CHECK(strstr(note, "wanted a CPU 50% of the time: 1.50x") != NULL);
  free_all(&base, &next, &d);
}

/* The diff's text and JUnit outputs come from export/ (export/diff.h). */
static void test_diff_text_and_junit(void) {
  static const double factors[] = {1, 1.5, 1};
  mlprof__report base, next;
  mlprof__diff d;
  CHECK_EQ(diff_of(3, factors, 40, 40, 0.02, 7, &base, &next, &d), 0);
  mlprof__diff_options opt = {.threshold = 0.05, .alpha = 0.01, .min_count = 5};
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_diff_text(&d, &opt, "b<", &base, "n&", &next, &o), 0);
  mlprof__out_write(&o, "", 1);
  CHECK(strstr(o.buf, "mlprof diff: base b<") != NULL);
  CHECK(strstr(o.buf, "REGRESSION: 1 zone significantly slower") != NULL);
  CHECK(strstr(o.buf, "1 slower, 0 faster, 2 unchanged") != NULL);
  o.len = 0;
  CHECK_EQ(mlprof__export_diff_junit(&d, &opt, "b<", "n&", &o), 0);
  mlprof__out_write(&o, "", 1);
  CHECK(strstr(o.buf, "tests=\"3\" failures=\"1\"") != NULL);
  CHECK(strstr(o.buf, "value=\"b&lt;\"") != NULL);
  CHECK(strstr(o.buf, "value=\"n&amp;\"") != NULL);
  CHECK(strstr(o.buf, "name=\"forward\"><failure type=\"regression\"") != NULL);
  mlprof__out_close(&o);
  free_all(&base, &next, &d);
}

const mlprof_test mlprof_tests_diff[] = {
    {"diff_text_and_junit", test_diff_text_and_junit},
    {"slower_machine_explains_its_share",
     test_slower_machine_explains_its_share},
    {"t_p", test_t_p},
    {"machine_stretches_only_the_cpu_wanted",
     test_machine_stretches_only_the_cpu_wanted},
    {"several_runs_between_run_noise", test_several_runs_between_run_noise},
    {"steal_explains_a_slower_machine", test_steal_explains_a_slower_machine},
    {"uniform_shift_found", test_uniform_shift_found},
    {"uniform_shift_names_the_zone_beyond",
     test_uniform_shift_names_the_zone_beyond},
    {"single_slower_zone_is_no_shift", test_single_slower_zone_is_no_shift},
    {"noise_is_no_shift", test_noise_is_no_shift},
    {"scattered_changes_are_no_shift", test_scattered_changes_are_no_shift},
    {"small_or_narrow_shift_is_none", test_small_or_narrow_shift_is_none},
    {NULL, NULL}};
