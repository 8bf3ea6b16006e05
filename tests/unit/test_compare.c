/* mlprof diff and mlprof compare: the statistics against known values, the
 * verdicts and speedups on reports built from known spans.
 *
 * Reference values were computed independently (tests/unit comments give the
 * inputs): U by counting pairs, the exact p-value by enumerating every one of
 * the C(n1+n2, n1) assignments of ranks, the normal approximation with
 * math.erfc. The first case is the example of the scipy.stats.mannwhitneyu
 * documentation, whose printed results are p = 0.1111111111111111 (exact) and
 * p = 0.11134688653314041 (asymptotic). */
#include <math.h>
#include <mlprof.h>
#include <stdlib.h>

#include "analyze/compare.h"
#include "analyze/diff.h"
#include "analyze/stats.h"
#include "export/export.h"
#include "format/wire.h"
#include "builder.h"
#include "test.h"

#define CHECK_NEAR(a, b, rel)                                \
  do {                                                       \
    double a_ = (a), b_ = (b);                               \
    if (!(fabs(a_ - b_) <= (rel)*fabs(b_)))                  \
      TEST_FAIL("%s == %s: %.17g != %.17g", #a, #b, a_, b_); \
  } while (0)

static int u64_cmp(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return (a > b) - (a < b);
}

static void sorted(uint64_t *v, size_t n) { qsort(v, n, sizeof *v, u64_cmp); }

static void test_normal_sf(void) {
  CHECK_NEAR(mlprof__normal_sf(0), 0.5, 1e-15);
  CHECK_NEAR(mlprof__normal_sf(1.959963984540054), 0.025, 1e-12);
  CHECK_NEAR(mlprof__normal_sf(-1), 0.8413447460685429, 1e-14);
  /* Far in the tail, where 1 - cdf would be 0. */
  CHECK_NEAR(mlprof__normal_sf(10), 7.619853024160527e-24, 1e-10);
}

static void test_median(void) {
  uint64_t a[] = {1, 2, 3, 4}, b[] = {1, 3, 7}, c[] = {5};
  CHECK_NEAR(mlprof__median_sorted(a, 4), 2.5, 0);
  CHECK_NEAR(mlprof__median_sorted(b, 3), 3, 0);
  CHECK_NEAR(mlprof__median_sorted(c, 1), 5, 0);
  uint64_t big[] = {UINT64_MAX - 1, UINT64_MAX - 1};
  CHECK_NEAR(mlprof__median_sorted(big, 2), (double)(UINT64_MAX - 1), 1e-15);
}

/* scipy docs: males = [19, 22, 16, 29, 24], females = [20, 11, 17, 12];
 * mannwhitneyu(males, females) -> U = 17, p = 0.1111111111111111 (exact:
 * 7 of the 126 assignments have U >= 17, doubled). */
static void test_mwu_scipy_example_exact(void) {
  uint64_t f[] = {20, 11, 17, 12}, m[] = {19, 22, 16, 29, 24};
  sorted(f, 4);
  sorted(m, 5);
  mlprof__mwu r;
  CHECK_EQ(mlprof__mwu_sorted(f, 4, m, 5, &r), 0);
  CHECK_EQ(r.exact, 1);
  CHECK_NEAR(r.u, 17, 0);
  CHECK_NEAR(r.p, 0.1111111111111111, 1e-12);
  CHECK_NEAR(mlprof__mwu_exact_sf(4, 5, 17), 7.0 / 126, 1e-12);
  CHECK_NEAR(mlprof__mwu_exact_sf(5, 4, 17), 7.0 / 126, 1e-12);
  CHECK_NEAR(mlprof__mwu_exact_sf(5, 4, 0), 1, 1e-12);
  /* Swapped: U = 20 - 17 = 3, same two-sided p. */
  CHECK_EQ(mlprof__mwu_sorted(m, 5, f, 4, &r), 0);
  CHECK_NEAR(r.u, 3, 0);
  CHECK_NEAR(r.p, 0.1111111111111111, 1e-12);
}

/* a = 10, 12, ..., 28; b = 11, 15, ..., 47 (10 each, no ties): U = 75;
 * 5821 of the 184756 assignments have U >= 75: p = 2 * 5821 / 184756. */
static void test_mwu_exact_ten(void) {
  uint64_t a[10], b[10];
  for (int i = 0; i < 10; i++) {
    a[i] = 10 + 2 * (uint64_t)i;
    b[i] = 11 + 4 * (uint64_t)i;
  }
  mlprof__mwu r;
  CHECK_EQ(mlprof__mwu_sorted(a, 10, b, 10, &r), 0);
  CHECK_EQ(r.exact, 1);
  CHECK_NEAR(r.u, 75, 0);
  CHECK_NEAR(r.p, 0.06301283855463422, 1e-12);
}

/* With ties: normal approximation, tie term sum(t^3 - t) = 156,
 * z = (|126.5 - 78| - 0.5) / sigma = 2.6240088166844364,
 * p = 0.008690153557972303 (scipy, method="asymptotic"). */
static void test_mwu_ties_normal(void) {
  uint64_t a[] = {1, 2, 2, 3, 3, 3, 4, 5, 5, 6, 7, 8};
  uint64_t b[] = {3, 4, 4, 5, 6, 6, 7, 8, 9, 9, 10, 11, 12};
  mlprof__mwu r;
  CHECK_EQ(mlprof__mwu_sorted(a, 12, b, 13, &r), 0);
  CHECK_EQ(r.exact, 0);
  CHECK_NEAR(r.u, 126.5, 0);
  CHECK_NEAR(r.ties, 156, 0);
  CHECK_NEAR(r.z, 2.6240088166844364, 1e-12);
  CHECK_NEAR(r.p, 0.008690153557972303, 1e-10);
  /* The other way round: z changes sign, p does not. */
  CHECK_EQ(mlprof__mwu_sorted(b, 13, a, 12, &r), 0);
  CHECK_NEAR(r.u, 12 * 13 - 126.5, 0);
  CHECK_NEAR(r.z, -2.6240088166844364, 1e-12);
  CHECK_NEAR(r.p, 0.008690153557972303, 1e-10);
}

/* 0..99 against 30..129: U = 7550, ties 70 pairs of 2 (420),
 * z = 6.229583500529608, p = 4.676768383107438e-10. */
static void test_mwu_large_shift(void) {
  uint64_t a[100], b[100];
  for (int i = 0; i < 100; i++) {
    a[i] = (uint64_t)i;
    b[i] = (uint64_t)i + 30;
  }
  mlprof__mwu r;
  CHECK_EQ(mlprof__mwu_sorted(a, 100, b, 100, &r), 0);
  CHECK_EQ(r.exact, 0);
  CHECK_NEAR(r.u, 7550, 0);
  CHECK_NEAR(r.ties, 420, 0);
  CHECK_NEAR(r.z, 6.229583500529608, 1e-12);
  CHECK_NEAR(r.p, 4.676768383107438e-10, 1e-9);
}

static void test_mwu_degenerate(void) {
  uint64_t a[] = {5, 5, 5}, b[] = {5, 5};
  mlprof__mwu r;
  CHECK_EQ(mlprof__mwu_sorted(a, 3, b, 2, &r), 0);
  CHECK_NEAR(r.u, 3, 0);
  CHECK_NEAR(r.p, 1, 0);
  uint64_t one[] = {1}, two[] = {2};
  CHECK_EQ(mlprof__mwu_sorted(one, 1, two, 1, &r), 0);
  CHECK_EQ(r.exact, 1);
  CHECK_NEAR(r.p, 1, 0);
  /* 2 / C(10, 5) and 2 / C(8, 4): four spans a side can never reach 0.01. */
  CHECK_NEAR(mlprof__mwu_min_p(5, 5), 0.007936507936507936, 1e-12);
  CHECK_NEAR(mlprof__mwu_min_p(4, 4), 0.02857142857142857, 1e-12);
  CHECK_NEAR(mlprof__mwu_min_p(0, 4), 1, 0);
  CHECK(mlprof__mwu_min_p(1000000, 1000000) == 0);
}

/* ---- reports from known spans ------------------------------------------- */

static void steps(builder *b, size_t n, uint64_t interval) {
  for (size_t i = 0; i < n; i++) {
    b->v.step(b->v.ud, 1, b->t);
    b->t += interval;
  }
}

/* Durations around a centre: base * (1 + k/1000) for k spread over
 * -50..+50 by a fixed permutation (no randomness). */
typedef struct {
  double base;
} around;

static uint64_t dur_around(size_t i, void *ud) {
  const around *a = ud;
  int k = (int)((i * 37) % 101) - 50;
  return (uint64_t)(a->base * (1 + k / 1000.0) + 0.5);
}

static const mlprof__diff_zone *dz(const mlprof__diff *d, const char *name) {
  for (size_t i = 0; i < d->nzones; i++)
    if (strcmp(d->zones[i].name, name) == 0) return &d->zones[i];
  return NULL;
}

static void test_keep_durations(void) {
  builder b;
  mlprof__report r;
  around a = {1000};
  build_begin(&b, 1);
  spans(&b, "z", 101, dur_around, &a);
  build_end(&b, &r);
  CHECK(r.zones[0].durations != NULL);
  for (size_t i = 1; i < 101; i++)
    CHECK(r.zones[0].durations[i - 1] <= r.zones[0].durations[i]);
  CHECK_EQ_U64(r.zones[0].durations[0], r.zones[0].min_ns);
  CHECK_EQ_U64(r.zones[0].durations[100], r.zones[0].max_ns);
  mlprof__report_free(&r);
  build_begin(&b, 0); /* the default: nothing kept */
  spans(&b, "z", 101, dur_around, &a);
  build_end(&b, &r);
  CHECK(r.zones[0].durations == NULL);
  mlprof__report_free(&r);
}

static void test_diff_verdicts(void) {
  builder b;
  mlprof__report base, next;
  around same = {10000}, slow = {12000}, fast = {8000}, shift2 = {10200},
         small_b = {1000}, small_n = {3000};
  build_begin(&b, 1);
  spans(&b, "same", 400, dur_around, &same);
  spans(&b, "slow", 400, dur_around, &same);
  spans(&b, "fast", 400, dur_around, &same);
  spans(&b, "tiny_shift", 400, dur_around, &same);
  spans(&b, "small", 4, dur_around, &small_b);
  spans(&b, "gone", 10, dur_around, &same);
  build_end(&b, &base);
  build_begin(&b, 1);
  spans(&b, "same", 300, dur_around, &same);
  spans(&b, "slow", 300, dur_around, &slow);
  spans(&b, "fast", 300, dur_around, &fast);
  spans(&b, "tiny_shift", 300, dur_around, &shift2);
  spans(&b, "small", 4, dur_around, &small_n);
  spans(&b, "added", 10, dur_around, &same);
  build_end(&b, &next);

  mlprof__diff_options opt = {.threshold = 0.05, .alpha = 0.01, .min_count = 5};
  mlprof__diff d;
  CHECK_EQ(mlprof__diff_build(&base, &next, &opt, &d), 0);
  CHECK_EQ(d.nzones, 7);
  CHECK_EQ(d.regression, 1);
  CHECK_EQ(d.count[MLPROF__VERDICT_SLOWER], 1);
  CHECK_EQ(d.count[MLPROF__VERDICT_FASTER], 1);
  CHECK_EQ(d.count[MLPROF__VERDICT_NEW], 1);
  CHECK_EQ(d.count[MLPROF__VERDICT_REMOVED], 1);
  CHECK_EQ(d.count[MLPROF__VERDICT_UNCHANGED], 3);
  CHECK_STR(d.zones[0].name, "slow"); /* slower ones come first */
  CHECK_STR(d.zones[1].name, "fast");
  const mlprof__diff_zone *z = dz(&d, "slow");
  CHECK_EQ(z->verdict, MLPROF__VERDICT_SLOWER);
  CHECK_NEAR(z->ratio, 1.2, 1e-3);
  CHECK(z->test.p < 1e-50);
  CHECK(z->test.u > 300 * 400 / 2);
  CHECK_EQ(dz(&d, "fast")->verdict, MLPROF__VERDICT_FASTER);
  z = dz(&d, "same");
  CHECK_EQ(z->verdict, MLPROF__VERDICT_UNCHANGED);
  CHECK_NEAR(z->ratio, 1, 0);
  CHECK(z->test.p > 0.5);
  /* Significant, but 2% is below the 5% threshold. */
  z = dz(&d, "tiny_shift");
  CHECK_EQ(z->verdict, MLPROF__VERDICT_UNCHANGED);
  CHECK(z->test.p < 1e-10);
  CHECK_EQ(z->too_few, 0);
  /* Three times slower, but 4 spans a side cannot reach alpha. */
  z = dz(&d, "small");
  CHECK_EQ(z->verdict, MLPROF__VERDICT_UNCHANGED);
  CHECK_EQ(z->too_few, 1);
  CHECK_EQ(z->tested, 1);
  z = dz(&d, "gone");
  CHECK_EQ(z->verdict, MLPROF__VERDICT_REMOVED);
  CHECK(z->next == NULL && isnan(z->ratio));
  CHECK_EQ(dz(&d, "added")->verdict, MLPROF__VERDICT_NEW);
  mlprof__diff_free(&d);

  /* A larger threshold lets the slower zone pass; --zone keeps a subset. */
  opt.threshold = 0.25;
  CHECK_EQ(mlprof__diff_build(&base, &next, &opt, &d), 0);
  CHECK_EQ(d.regression, 0);
  mlprof__diff_free(&d);
  const char *pats[] = {"s*"};
  opt = (mlprof__diff_options){.threshold = 0.05,
                               .alpha = 0.01,
                               .min_count = 5,
                               .zones = pats,
                               .nzones = 1};
  CHECK_EQ(mlprof__diff_build(&base, &next, &opt, &d), 0);
  CHECK_EQ(d.nzones, 3); /* same, slow, small */
  CHECK_EQ(d.filtered, 4);
  CHECK_EQ(d.regression, 1);
  mlprof__diff_free(&d);
  mlprof__report_free(&base);
  mlprof__report_free(&next);
}

/* xorshift64*: deterministic noise. */
static uint64_t rng(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545f4914f6cdd1dull;
}

typedef struct {
  uint64_t state;
} noise;

/* 10 µs plus exponential noise of mean 2 µs, rounded to 100 ns so values
 * tie (as a coarse clock makes them). */
static uint64_t dur_noise(size_t i, void *ud) {
  (void)i;
  noise *n = ud;
  double u = ((double)(rng(&n->state) >> 11) + 0.5) / 9007199254740992.0;
  double ns = 10000 - 2000 * log(u);
  return (uint64_t)(ns / 100 + 0.5) * 100;
}

/* The false-positive side: both runs drawn from one distribution, 300
 * times. No zone may be judged slower or faster, and the test must be
 * calibrated: about 1% of the p-values fall at or below 0.01. */
static void test_diff_noise_alone(void) {
  int significant = 0, verdicts = 0;
  for (int trial = 0; trial < 300; trial++) {
    builder b;
    mlprof__report base, next;
    noise n = {0x9e3779b97f4a7c15ull * (uint64_t)(trial + 1)};
    build_begin(&b, 1);
    spans(&b, "z", 200, dur_noise, &n);
    build_end(&b, &base);
    build_begin(&b, 1);
    spans(&b, "z", 150, dur_noise, &n);
    build_end(&b, &next);
    mlprof__diff_options opt = {
        .threshold = 0.05, .alpha = 0.01, .min_count = 5};
    mlprof__diff d;
    CHECK_EQ(mlprof__diff_build(&base, &next, &opt, &d), 0);
    significant += d.zones[0].test.p <= 0.01;
    verdicts += d.zones[0].verdict != MLPROF__VERDICT_UNCHANGED;
    mlprof__diff_free(&d);
    mlprof__report_free(&base);
    mlprof__report_free(&next);
  }
  CHECK_EQ(verdicts, 0);
  if (significant > 9) TEST_FAIL("%d of 300 p-values <= 0.01", significant);
}

/* ---- compare ------------------------------------------------------------ */

static uint64_t dur_fixed(size_t i, void *ud) {
  (void)i;
  return *(uint64_t *)ud;
}

/* A run: ten "step" spans of step_ns each, an optional "extra" zone, then
 * eleven step marks interval apart. */
static void make_run(mlprof__report *r, uint64_t step_ns, uint64_t interval,
                     int with_extra) {
  builder b;
  build_begin(&b, 0);
  spans(&b, "step", 10, dur_fixed, &step_ns);
  if (with_extra) {
    uint64_t e = 500;
    spans(&b, "extra", 4, dur_fixed, &e);
  }
  steps(&b, 11, interval);
  build_end(&b, r);
}

static void test_compare_speedups_and_ranks(void) {
  mlprof__compare c = {0};
  mlprof__report r;
  /* Step zone means 150, 100, 300; step intervals 1500, 1000, 3000. */
  make_run(&r, 150, 1500, 1);
  CHECK_EQ(mlprof__compare_add(&c, "mid", "runs/mid", &r), 0);
  make_run(&r, 100, 1000, 0);
  CHECK_EQ(mlprof__compare_add(&c, "fast", "runs/fast", &r), 0);
  make_run(&r, 300, 3000, 1);
  CHECK_EQ(mlprof__compare_add(&c, "slow", "runs/slow", &r), 0);
  CHECK_EQ(mlprof__compare_finish(&c), 0);

  CHECK_EQ(c.nzones, 2);
  const mlprof__compare_zone *z = &c.zones[0];
  CHECK_STR(z->name, "step"); /* largest total first */
  CHECK_EQ(z->fastest, 1);
  CHECK_EQ(z->slowest, 2);
  CHECK_NEAR(z->vs_slowest[0], 2.0, 1e-12); /* 300 / 150 */
  CHECK_NEAR(z->vs_slowest[1], 3.0, 1e-12); /* 300 / 100 */
  CHECK_NEAR(z->vs_slowest[2], 1.0, 1e-12);
  CHECK_NEAR(z->vs_first[0], 1.0, 1e-12);
  CHECK_NEAR(z->vs_first[1], 1.5, 1e-12); /* 150 / 100 */
  CHECK_NEAR(z->vs_first[2], 0.5, 1e-12); /* 150 / 300 */
  z = &c.zones[1];
  CHECK_STR(z->name, "extra");
  CHECK(z->stats[1] == NULL);
  CHECK(isnan(z->vs_slowest[1]) && isnan(z->vs_first[1]));
  CHECK_NEAR(z->vs_slowest[0], 1.0, 1e-12);

  CHECK_EQ(c.step_basis, 1);
  CHECK_NEAR(c.runs[0].step_mean_ns, 1500, 1e-12);
  CHECK_EQ(c.by_step[0], 1);
  CHECK_EQ(c.by_step[1], 0);
  CHECK_EQ(c.by_step[2], 2);
  CHECK_EQ(c.by_total[0], 1);
  CHECK_EQ(c.by_total[2], 2);
  CHECK_EQ(c.runs[1].rank_step, 1);
  CHECK_EQ(c.runs[2].rank_total, 3);
  CHECK_EQ(c.best, 1);
  CHECK_EQ(c.worst, 2);
  CHECK_NEAR(c.best_vs_slowest, 3.0, 1e-12);
  CHECK_NEAR(c.best_vs_first, 1.5, 1e-12);
  mlprof__compare_free(&c);
}

static void test_compare_without_steps_uses_wall(void) {
  mlprof__compare c = {0};
  mlprof__report r;
  builder b;
  uint64_t d1 = 400, d2 = 200;
  build_begin(&b, 0);
  spans(&b, "z", 5, dur_fixed, &d1);
  build_end(&b, &r); /* wall 2000 */
  CHECK_EQ(mlprof__compare_add(&c, "a", "a", &r), 0);
  build_begin(&b, 0);
  spans(&b, "z", 5, dur_fixed, &d2);
  build_end(&b, &r); /* wall 1000 */
  CHECK_EQ(mlprof__compare_add(&c, "b", "b", &r), 0);
  CHECK_EQ(mlprof__compare_finish(&c), 0);
  CHECK_EQ(c.step_basis, 0);
  CHECK(isnan(c.runs[0].step_mean_ns));
  CHECK_EQ(c.by_step[0], 1);
  CHECK_NEAR(c.best_vs_slowest, 2.0, 1e-12);
  CHECK_NEAR(c.best_vs_first, 2.0, 1e-12);
  mlprof__compare_free(&c);
}

/* The comparison's text comes from export/ (export.h). */
static void test_compare_text(void) {
  mlprof__compare c = {0};
  mlprof__report r;
  make_run(&r, 150, 1500, 1);
  CHECK_EQ(mlprof__compare_add(&c, "mid", "runs/mid", &r), 0);
  make_run(&r, 100, 1000, 0);
  CHECK_EQ(mlprof__compare_add(&c, "fa\x1bst", "runs/fast", &r), 0);
  CHECK_EQ(mlprof__compare_finish(&c), 0);
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_compare_text(&c, 1, &o), 0);
  mlprof__out_write(&o, "", 1);
  CHECK(strstr(o.buf, "mlprof compare: 2 runs") != NULL);
  CHECK(strstr(o.buf, "Zones (1 of 2, by largest total") != NULL);
  CHECK(strstr(o.buf, "1.50x") != NULL); /* fast against mid, step zone */
  CHECK(strstr(o.buf, "\nRecommendation: ") != NULL);
  CHECK(strchr(o.buf, 0x1b) == NULL); /* the label made terminal-safe */
  mlprof__out_close(&o);
  mlprof__compare_free(&c);
}

const mlprof_test mlprof_tests_compare[] = {
    {"compare_text", test_compare_text},
    {"normal_sf", test_normal_sf},
    {"median", test_median},
    {"mwu_scipy_example_exact", test_mwu_scipy_example_exact},
    {"mwu_exact_ten", test_mwu_exact_ten},
    {"mwu_ties_normal", test_mwu_ties_normal},
    {"mwu_large_shift", test_mwu_large_shift},
    {"mwu_degenerate", test_mwu_degenerate},
    {"keep_durations", test_keep_durations},
    {"diff_verdicts", test_diff_verdicts},
    {"diff_noise_alone", test_diff_noise_alone},
    {"compare_speedups_and_ranks", test_compare_speedups_and_ranks},
    {"compare_without_steps_uses_wall", test_compare_without_steps_uses_wall},
    {NULL, NULL}};
