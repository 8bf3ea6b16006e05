/* Regression test between two runs (mlprof diff): per zone, a Mann-Whitney U
 * test on the raw durations plus an effect-size threshold on the ratio of
 * medians.
 *
 * Definitions (also in docs/guide.md and docs/json-schema.md):
 * - U is counted for NEW against BASE: the number of pairs (base, new) with
 *   new > base, ties counting one half. U / (n_base n_new) estimates the
 *   probability that a NEW span is longer than a BASE span (0.5: no shift).
 * - p is two-sided. Exact (the permutation distribution of U) when neither
 *   sample has more than MLPROF__MWU_EXACT_MAX values and no value is shared;
 *   otherwise the normal approximation with the tie correction and a
 *   continuity correction of 0.5:
 *     sigma^2 = n1 n2 / 12 * ((N + 1) - sum(t^3 - t) / (N (N - 1)))
 *     z = (|U - n1 n2 / 2| - 0.5) / sigma,  p = erfc(z / sqrt 2)  (<= 1)
 *   where t runs over the sizes of the groups of equal durations. This is
 *   what scipy.stats.mannwhitneyu computes (method "exact" or "asymptotic",
 *   use_continuity=True, alternative "two-sided").
 * - median: of the sorted durations, the middle one, or the mean of the two
 *   middle ones for an even count.
 * - ratio: median NEW / median BASE; change = ratio - 1.
 *
 * A uniform shift: on a shared machine two runs of the same code differ in
 * every zone alike when the machine's speed or load changed between them.
 * Over the zones with enough spans on both sides (tested, not too few, a
 * finite ratio above 0; at least MLPROF__SHIFT_MIN_ZONES of them), with
 * l = log(ratio) per zone and m0 the median of l:
 * - a zone agrees when it moved significantly the way of m0 (p <= alpha, U
 *   on that side of its null mean, l of m0's sign) and its l lies within
 *   log(1 + max(threshold, MLPROF__SHIFT_MIN_CHANGE)) of m0;
 * - over the agreeing zones: common ratio = exp(median of their l), spread
 *   = exp(IQR of their l) - 1, quartiles interpolated linearly between the
 *   sorted values (numpy's default);
 * - the shift is detected when at least MLPROF__SHIFT_AGREE of the zones
 *   agree, their IQR is below MLPROF__SHIFT_MAX_SPREAD and the common change
 *   is at least max(MLPROF__SHIFT_MIN_CHANGE, threshold / 2) either way.
 * Then each of those zones is judged once more against the shift: BASE's
 * durations multiplied by the common ratio (rounded to whole ns) against
 * NEW's, by the same test and rule as the verdicts. A zone slower or faster
 * than the common shift moved beyond what the machine explains: a candidate
 * for a real change. A zone (and the step, and the time per unit of work,
 * judged against the shift the same way) that moved with the shift moved
 * with the machine: its verdict stands but it is no regression
 * (machine_explains, explained_by MLPROF__EXPLAINED_SHIFT).
 *
 * Several runs a side (mlprof__diff_build_runs): each side's durations are
 * pooled per zone for the test above, and each run's median of the zone is
 * kept. Between-run noise, as pyperf judges it: with at least three runs in
 * all and one a side, Student's t test (pooled variance, two-sided) on the
 * log of the runs' medians, BASE's against NEW's; a slower or faster verdict
 * stands only when that p is at most MLPROF__RUNS_ALPHA too, else the zone
 * is unchanged with runs_vary set ("likely slower: the runs vary"). */
#ifndef MLPROF_DIFF_H
#define MLPROF_DIFF_H

#include <stddef.h>
#include <stdint.h>

#include "stats.h"

/* The exact distribution is used up to this many values per sample. */
#define MLPROF__MWU_EXACT_MAX 50

/* The uniform shift (above): zones needed, share of them that must agree,
 * largest IQR of the log ratios, smallest common change. */
#define MLPROF__SHIFT_MIN_ZONES 3
#define MLPROF__SHIFT_AGREE 0.75
#define MLPROF__SHIFT_MAX_SPREAD 0.03
#define MLPROF__SHIFT_MIN_CHANGE 0.01

/* The between-run test's level (pyperf's 95%). */
#define MLPROF__RUNS_ALPHA 0.05

typedef struct {
  double u;    /* U of the second sample against the first (see above) */
  double z;    /* normal score, signed: > 0 when the second is larger; 0
                  for the exact method */
  double p;    /* two-sided p-value, in [0, 1] */
  int exact;   /* 1: exact distribution, 0: normal approximation */
  double ties; /* sum over groups of equal values of t^3 - t */
} mlprof__mwu;

/* The upper tail of the standard normal distribution, P(Z > z), from erfc
 * (accurate far into the tail, where 1 - cdf would round to 0). */
double mlprof__normal_sf(double z);

/* The Mann-Whitney U test of b against a, both sorted ascending (na and nb
 * values, each at least 1), in O(na + nb) plus, for the exact method,
 * O(na^2 nb^2) time at most (about 6 million steps at the limit). Returns 0,
 * or MLPROF_ENOMEM (the exact method's table) with *out untouched. */
int mlprof__mwu_sorted(const uint64_t *a, size_t na, const uint64_t *b,
                       size_t nb, mlprof__mwu *out);

/* P(U >= u) under the null hypothesis for samples of n1 and n2 values
 * without ties (n1, n2 <= MLPROF__MWU_EXACT_MAX), from the exact
 * distribution; NAN when out of memory or past the limit. */
double mlprof__mwu_exact_sf(size_t n1, size_t n2, double u);

/* The smallest two-sided p-value any permutation test can give for samples
 * of n1 and n2 values: 2 / C(n1 + n2, n1), at most 1. */
double mlprof__mwu_min_p(uint64_t n1, uint64_t n2);

/* The two-sided p-value of Student's t statistic t with df >= 1 degrees of
 * freedom, P(|T| >= |t|), exact for whole df (Abramowitz and Stegun
 * 26.7.3-4). */
double mlprof__t_p(double t, unsigned df);

/* The step intervals of every process of r (each process's steps as
 * mlprof__report_marks gives them), sorted ascending, into a new array
 * *out (NULL when none; the caller frees it) of *n. Returns 0 or
 * MLPROF_ENOMEM. */
int mlprof__step_intervals(const mlprof__report *r, uint64_t **out, size_t *n);

/* A distribution-free 95% interval for the median of n >= 1 sorted values:
 * the order statistics of ranks n/2 -+ 1.96 sqrt(n)/2 (rounded outwards,
 * within 1..n) into *lo and *hi. */
void mlprof__median_interval(const uint64_t *a, size_t n, double *lo,
                             double *hi);

/* The median of n sorted values (0 for none). */
double mlprof__median_sorted(const uint64_t *a, size_t n);

typedef enum {
  MLPROF__VERDICT_SLOWER,
  MLPROF__VERDICT_FASTER,
  MLPROF__VERDICT_NEW,
  MLPROF__VERDICT_REMOVED,
  MLPROF__VERDICT_UNCHANGED,
  MLPROF__VERDICT_COUNT
} mlprof__verdict;

/* "slower", "faster", "new", "removed", "unchanged". */
const char *mlprof__verdict_name(mlprof__verdict v);

typedef struct {
  double threshold;   /* smallest |change| that counts, e.g. 0.05 */
  double alpha;       /* significance level, e.g. 0.01 */
  uint64_t min_count; /* fewer spans on either side: too few samples */
  /* Glob patterns (fnmatch); a zone is compared when its name matches one.
   * None: every zone. */
  const char *const *zones;
  size_t nzones;
  /* Each run's contention for CPU (BASE, NEW): the process tree's
   * run-queue wait as a share of the CPU time it wanted, runq / (cpu +
   * runq), from mlprof__run_load; NAN when not sampled. With several runs a
   * side, the mean of its runs'. */
  double contention[2];
  /* Each run's CPU steal (BASE, NEW): the share of the machine's CPU time
   * the hypervisor gave other guests, 0 to 1; NAN when not sampled. */
  double steal[2];
  /* How much of a CPU each run wanted (mlprof__run_machine.demand); NAN:
   * unknown, taken as 1 (CPU-bound). */
  double demand[2];
} mlprof__diff_options;

/* mlprof diff's defaults, the one copy: threshold 5%, alpha 0.01, 5 spans
 * a side at least, every zone, contention and steal unknown. */
void mlprof__diff_options_init(mlprof__diff_options *opt);

/* NEW's machine was slower when its contention or its steal is higher by
 * at least MLPROF__MACHINE_MIN_WAIT and they stretch CPU-bound work by at
 * least MLPROF__MACHINE_MIN_CHANGE: factor = (1 - c_base)(1 - s_base) /
 * ((1 - c_new)(1 - s_new)), the ratio of the shares of wanted time a run
 * got a CPU that ran it (s: steal, 0 on both sides unless both are known).
 * Only the time a run wanted a CPU is stretched: what the machine explains
 * of a zone's wall time is expected = 1 + d (factor - 1), d = NEW's demand
 * (at most 1; 1 when unknown); slower needs expected - 1 >= that change. */
#define MLPROF__MACHINE_MIN_WAIT 0.05
#define MLPROF__MACHINE_MIN_CHANGE 0.05
/* A slower zone (or the step) is then judged against expected by the
 * verdicts' rule with a threshold of at least this: beyond it, a change of
 * the code; within it, "no more than the machine explains". */
#define MLPROF__MACHINE_TOLERANCE 0.25

/* What explains a verdict that is no regression (mlprof__diff_zone). */
enum {
  MLPROF__EXPLAINED_NONE,
  MLPROF__EXPLAINED_LOAD,  /* run-queue wait and steal (diff_machine) */
  MLPROF__EXPLAINED_SHIFT, /* the uniform shift (diff_shift) */
};

typedef struct {
  const char *name; /* borrowed from the reports */
  size_t name_len;
  uint8_t category;
  const mlprof__zone_stats *base, *next; /* NULL when absent from that run */
  mlprof__verdict verdict;
  /* Unchanged because a side has fewer than min_count spans, or because no
   * outcome could reach alpha with so few (mlprof__mwu_min_p > alpha). */
  int too_few;
  double median_base, median_new; /* NAN when absent */
  double ratio; /* median_new / median_base; INFINITY when only the base
                   median is 0, 1 when both are; NAN when a side is absent */
  int tested;   /* test holds a result (both sides present) */
  mlprof__mwu test;
  /* One of the zones of the uniform shift's statistics. */
  int in_shift;
  /* Against the common shift, when one was detected and in_shift: ratio /
   * common ratio, the test of BASE scaled by the common ratio against NEW,
   * and the verdict by it (slower, faster or unchanged). */
  double shift_ratio; /* NAN otherwise */
  mlprof__mwu shift_test;
  mlprof__verdict shift_verdict;
  /* Slower (or faster), but not beyond what NEW's slower machine
   * (mlprof__diff.machine) or the common shift explains: no regression;
   * explained_by says which. */
  int machine_explains;
  int explained_by;
  /* Between runs (several runs a side, above): runs of each side that have
   * the zone, the test's p (NAN when not tested), the runs' spread
   * (exp(pooled std of the log medians) - 1), and runs_vary: the durations'
   * verdict was slower or faster, the runs' medians did not bear it out. */
  size_t runs[2];
  double runs_p, runs_spread;
  int runs_vary;
} mlprof__diff_zone;

/* A function's self time in the two runs, from their stack samples (each
 * sample's time to its innermost function; functions matched by name and
 * the file's last path component, so that runs from two checkouts match).
 * Per step when both runs have step marks: each step's self time (0 in a
 * step where it was never innermost), the steps compared by the zones' test
 * (Mann-Whitney U) and rule (mlprof__diff_options), with the ratio of the
 * means for the medians'. Per run otherwise: the samples it was innermost
 * in, k_b and k_n (one a sample, whatever time each stands for), by the
 * conditional test of two Poisson counts: with each run's density d
 * (samples / sampled wall time), k_n given K = k_b + k_n is binomial with
 * p = d_n / (d_b + d_n) when the self times are equal (normal approximation,
 * continuity correction 0.5); too few below min_count samples. The same
 * rule with the ratio of the self times. A side with none of its time is
 * "new" or "removed" only when significant. With several runs a side, the
 * steps of a side's runs are pooled; per run, a side's self time is the
 * mean of its runs' and its samples are pooled (d times its runs). */
typedef struct {
  const char *function, *file; /* borrowed; file: its last component */
  uint32_t line;          /* its first line (NEW's, else BASE's); 0: unknown */
  double base_ns, new_ns; /* self time a step (per_step), else in the run */
  double ratio; /* new_ns / base_ns; INFINITY when only base_ns is 0 */
  double p;     /* two-sided */
  int too_few;  /* fewer than min_count steps (samples) a side, or no
                   outcome could reach alpha */
  mlprof__verdict verdict;
} mlprof__diff_func;

/* The functions compared: those with 1% of a run's sampled self time or
 * more in either run, the MLPROF__DIFF_FUNCS largest. */
#define MLPROF__DIFF_FUNCS 50
#define MLPROF__DIFF_FUNC_MIN_SHARE 0.01

typedef struct {
  double base, next; /* the runs' contention (options), NAN: unknown */
  double steal_base, steal_next; /* the runs' steal (options), NAN: unknown */
  double factor;                 /* above; NAN when unknown */
  double demand;                 /* d above, 0 to 1 */
  double expected;  /* above: what zones are judged against; NAN: unknown */
  int slower;       /* NEW's machine was markedly slower (above) */
  size_t explained; /* slower zones (and the step) it explains */
} mlprof__diff_machine;

/* One side's runs, pooled: their zones merged by name (sorted by name;
 * with one run, copies of its zone statistics that borrow its durations;
 * with several, durations merged and owned), and each run's median of each
 * zone and of its step. */
typedef struct {
  size_t runs;
  mlprof__zone_stats *zones;
  size_t nzones;
  int owned;       /* zones[].durations are owned */
  double *medians; /* nzones x runs, NAN where a run lacks the zone */
  double *steps;   /* runs: each run's median step interval, NAN: none */
} mlprof__diff_side;

typedef struct {
  int detected;
  size_t zones;     /* zones compared with enough spans (in_shift) */
  size_t agreeing;  /* of those, moved the common way by about as much */
  double ratio;     /* common ratio; NAN with too few zones */
  double spread;    /* exp(IQR of the agreeing log ratios) - 1; NAN with
                       too few zones or none agreeing */
  size_t deviating; /* zones slower or faster than the common shift */
  size_t explained; /* verdicts (zones, step) that moved with it */
} mlprof__diff_shift;

/* Memory (mlprof__memdiff_build; docs/memory.md, "Comparing two runs"):
 * what each run's allocation records estimate, compared item by item. */
typedef enum {
  MLPROF__MEMDIFF_PEAK,      /* a process's peak of live bytes */
  MLPROF__MEMDIFF_ZONE,      /* a zone's high-water mark */
  MLPROF__MEMDIFF_SITE_PEAK, /* a site's bytes live at its process's peak */
  MLPROF__MEMDIFF_SITE_STEP, /* a site's bytes allocated a step */
  MLPROF__MEMDIFF_KINDS
} mlprof__memdiff_kind;

typedef enum {
  MLPROF__MEMDIFF_GREW,
  MLPROF__MEMDIFF_SHRANK,
  MLPROF__MEMDIFF_UNCHANGED,
  MLPROF__MEMDIFF_VERDICTS
} mlprof__memdiff_verdict;

/* A change counts only when it is at least this share of the figure it is
 * part of: the larger run's process peak for zones and sites at the peak,
 * the site's process's bytes allocated a step for sites a step. */
#define MLPROF__MEMDIFF_MIN_SHARE 0.01

typedef struct {
  mlprof__memdiff_kind kind;
  size_t proc;      /* the process (peak, sites): its rank among the
                       processes with allocation records, in job order */
  uint64_t pid[2];  /* that process in BASE and NEW; 0 when absent */
  const char *zone; /* zones and sites; borrowed from the reports */
  size_t zone_len;
  const char *python, *native; /* sites (mlprof__mem_site); borrowed */
  int per_step;    /* SITE_STEP: a step (1) or over the run (0: a side
                      has no step marks) */
  double value[2]; /* bytes, BASE and NEW (0: absent there) */
  double se[2];    /* their standard errors from sampling (0: exact) */
  double z;        /* (NEW - BASE) / sqrt(2 max(se0^2, se1^2)); INFINITY with
                      both exact and a difference; 0 with none */
  double p;        /* two-sided, from the normal distribution */
  double p_holm;   /* p adjusted by Holm over every item of the diff */
  double floor;    /* the least change that counts (share, threshold) */
  mlprof__memdiff_verdict verdict;
} mlprof__memdiff_item;

typedef struct {
  int compared;   /* both runs recorded allocations */
  int exact[2];   /* every allocation recorded, per run */
  double mean[2]; /* the sampling mean read back (0: exact or unknown) */
  mlprof__memdiff_item *items; /* by kind, then grew, shrank, unchanged,
                                  each by |change| largest first */
  size_t nitems;
  size_t count[MLPROF__MEMDIFF_VERDICTS];
  int regression; /* some item grew */
} mlprof__memdiff;

/* "grew", "shrank", "unchanged". */
const char *mlprof__memdiff_verdict_name(mlprof__memdiff_verdict v);
/* "peak", "zone high-water", "site at peak", "site a step". */
const char *mlprof__memdiff_kind_name(mlprof__memdiff_kind k);

typedef struct {
  mlprof__diff_zone *zones; /* slower, faster, new, removed, unchanged; then
                               by |change| largest first, then by name */
  size_t nzones;
  size_t count[MLPROF__VERDICT_COUNT];
  size_t filtered; /* zones left out by the patterns */
  int regression;  /* some zone, or the step, is slower beyond what the
                      machine explains */
  mlprof__diff_shift shift;
  /* The step, judged as a zone whose spans are the step intervals (from a
   * mark to the next mark or step end) of each run's process with the most
   * step marks, by the same test and rule: has_step when both runs have
   * steps; step.name is "step", its sides point into step_side (owned). */
  int has_step;
  mlprof__diff_zone step;
  mlprof__zone_stats step_side[2];
  /* The wall time per unit of work, when both runs count the same unit
   * ("samples", else "tokens", else the first both count) and have steps:
   * each step interval divided by the run's units a step (the unit's total
   * over the run / its step marks), judged as the step. Its values are ns times
   * unit_scale (a power of ten that keeps a short time per unit precise):
   * divide its medians by unit_scale. When the runs' work a step differs by
   * more than 1% (work_differs), the step's verdict alone is no regression:
   * this one decides, and the zones' verdicts (their spans did different
   * work too) are shown but no regression. */
  int has_unit;
  const char *unit; /* borrowed from BASE's report */
  double unit_scale;
  double work[2];         /* units a step (a step mark), BASE and NEW */
  uint64_t step_marks[2]; /* the step marks of step_side's process */
  int work_differs;
  mlprof__diff_zone per_unit;
  mlprof__zone_stats unit_side[2];
  mlprof__diff_machine machine;
  mlprof__diff_side side[2]; /* BASE's runs, NEW's runs */
  int time_regression;       /* regression by the zones, the step or per unit */
  mlprof__memdiff mem;       /* its growth is a regression too */
  /* The functions (above), when both runs have stack samples: slower,
   * faster, new, removed (each by |change|, largest first), unchanged (by
   * self time, largest first).
   * They decide no regression: the zones and the step do. */
  int funcs_per_step; /* 1: per step, 0: per run */
  mlprof__diff_func *funcs;
  size_t nfuncs;
  size_t func_count[MLPROF__VERDICT_COUNT];
} mlprof__diff;

/* A zone of one of several runs, and the order diff and compare match
 * them in: by name (bytes, a prefix first), then by run. */
typedef struct {
  const mlprof__zone_stats *z;
  size_t run;
} mlprof__zone_ref;
int mlprof__zone_ref_cmp(const void *x, const void *y);
int mlprof__name_cmp(const char *a, size_t an, const char *b, size_t bn);

/* Pools the zones of k >= 1 runs into *s (mlprof__diff_side): what diff
 * does for each side, for compare's repeated runs. The runs must outlive
 * *s. Returns 0 or MLPROF_ENOMEM (then *s is empty). */
int mlprof__diff_pool(const mlprof__report *runs, size_t k,
                      mlprof__diff_side *s);

void mlprof__diff_side_free(mlprof__diff_side *s);

/* Compares every zone of base and next (matched by name), and their steps,
 * under opt. Both
 * reports must have been built with mlprof__stats_keep_durations and must
 * outlive *d (d borrows their names and zones). Returns 0 or MLPROF_ENOMEM
 * (then *d is empty). */
int mlprof__diff_build(const mlprof__report *base, const mlprof__report *next,
                       const mlprof__diff_options *opt, mlprof__diff *d);

/* The same with several runs a side: nbase reports of BASE's runs, nnext of
 * NEW's (each at least 1), judged as above (several runs a side). */
int mlprof__diff_build_runs(const mlprof__report *base, size_t nbase,
                            const mlprof__report *next, size_t nnext,
                            const mlprof__diff_options *opt, mlprof__diff *d);

void mlprof__diff_free(mlprof__diff *d);

/* Compares the memory of two reports (processes matched by their rank
 * among those with allocation records, zones by name, sites by process,
 * zone and stack text) into *out: each item's estimates, their sampling
 * errors, a two-sided z test on their difference with Holm's correction
 * over all items, and the verdict: grew or shrank when p_holm <= alpha and
 * the change is at least opt->threshold of the larger value and at least
 * MLPROF__MEMDIFF_MIN_SHARE of the figure it belongs to. Zones and sites
 * are kept when their zone matches opt's patterns. The reports must
 * outlive *out. Returns 0 or MLPROF_ENOMEM (then *out is empty). */
int mlprof__memdiff_build(const mlprof__memory *base,
                          const mlprof__memory *next,
                          const mlprof__diff_options *opt,
                          mlprof__memdiff *out);

void mlprof__memdiff_free(mlprof__memdiff *m);

/* Whether name matches opt's zone patterns (all match when there are
 * none). */
int mlprof__diff_selected(const mlprof__diff_options *opt, const char *name);

/* Whether d's step is a regression by itself: slower, not explained by the
 * machine, and the runs' work a step the same (else per_unit decides). */
int mlprof__diff_step_slower(const mlprof__diff *d);

/* For a zone judged with too few samples, or whose runs varied too much
 * (runs_vary): "slower" or "faster" when its change is beyond the threshold
 * the way U leans (the verdict the test could not give), else NULL. */
const char *mlprof__diff_likely(const mlprof__diff_zone *z,
                                const mlprof__diff_options *opt);

/* The slower machine's note (d->machine.slower) as one sentence in b: the
 * runs' run-queue waits and steal, the slowdown they explain, the verdicts
 * it explains. */
void mlprof__diff_machine_note(char *b, size_t len, const mlprof__diff *d);

/* The uniform shift's note (d->shift.detected) as one sentence in b: how
 * many zones moved together, by how much, that the machine more likely than
 * the code moved them (and whether its run-queue wait and steal show it),
 * and what to do about it. */
void mlprof__diff_shift_note(char *b, size_t len, const mlprof__diff *d);

#endif
