/* Comparison of several runs of one workload (mlprof compare): backends,
 * configurations, machines. Each run is a job (a profile file or a run
 * directory) reduced to its report.
 *
 * Definitions (also in docs/guide.md and docs/json-schema.md):
 * - speedup of run i against run j for a zone: mean_j / mean_i, the ratio
 *   of the zone's mean durations (> 1: run i is faster). "vs slowest" takes
 *   for j the run with the largest mean for that zone, so it is >= 1; "vs
 *   first" takes the first run given.
 * - fastest run of a zone: the smallest median (ties: the earlier run): a
 *   few preempted spans move a mean, not a median. It is a tie when another
 *   run is within noise of it: their medians' 95% intervals
 *   (mlprof__median_interval) overlap; without durations kept, when the
 *   other's mean exceeds the fastest's by at most 1.96 standard errors of
 *   the difference of the two means (sqrt(std_a^2/n_a + std_b^2/n_b)). Text,
 *   JSON and the page all use this one rule. The slowest run (the
 *   speedups' reference) is still the largest mean.
 * - step time of a run: the median interval between consecutive step
 *   marks, over every process of the run (mlprof__step_intervals), with a
 *   distribution-free 95% interval (mlprof__median_interval): a median,
 *   not a mean, as one preempted step stretches a mean at will. The mean
 *   (step_mean_ns, over every thread) is shown beside it.
 * - indistinguishable: a run whose step time's interval overlaps the
 *   fastest run's (on the ranking's scale: ns a step, or ns a unit of
 *   work); the recommendation then names them together.
 * - repeated runs of one configuration (mlprof__compare_add_runs): its zones
 *   pooled over its runs (mlprof__diff_pool); its step time the median of
 *   its runs' median steps, its interval from the lowest of their lower
 *   bounds to the highest of their upper bounds (their spread counts as
 *   noise); its wall time the median of theirs; its units, busy time and
 *   step intervals summed over them.
 * - ranking by total: by the job's wall time, shortest first. Ranking by
 *   step: by step time when every run has step marks (two or more on a
 *   thread), otherwise by wall time (basis "wall"). Ties keep the order
 *   given. */
#ifndef MLPROF_COMPARE_H
#define MLPROF_COMPARE_H

#include <stddef.h>
#include <stdint.h>

#include "diff.h"
#include "filter.h"
#include "stats.h"

/* What slowed a run's machine down, from its samples (mlprof__run_load). */
typedef struct {
  /* The run-queue wait as a share of the CPU time wanted, runq / (cpu +
   * runq): of the process tree's totals (mlprof run), else summed over the
   * processes sampled; NAN where not sampled. */
  double wait;
  /* How much of a CPU the run wanted, (cpu + runq) / 100 from the same
   * sums: about 1 for a CPU-bound thread, near 0 for one that sleeps or
   * waits for I/O, above 1 for several busy threads; NAN with wait. */
  double demand;
  /* The machine's CPU steal (cpu_steal_pct / 100, the mean over its
   * samples, over hosts); NAN where not sampled. */
  double steal;
} mlprof__run_machine;

/* Builds the report of one run: path is a profile file or a run directory.
 * keep_durations: keep each zone's sorted durations (mlprof diff); filter
 * (NULL: none) as mlprof__analysis_opts.filter; machine (NULL: not wanted)
 * receives what slowed its machine down. Returns 0; MLPROF_ENOMEM with "out
 * of memory" in err; or another negative error with a one-line reason in
 * err when path cannot be opened or is not a profile (bad input). */
int mlprof__run_load(const char *path, int keep_durations,
                     const mlprof__filter *filter, mlprof__report *r,
                     mlprof__run_machine *machine, char *err, size_t errlen);

enum { MLPROF__BASIS_WALL, MLPROF__BASIS_STEPS, MLPROF__BASIS_UNITS };

/* "wall", "steps" or "units". */
const char *mlprof__compare_basis_name(int basis);

typedef struct {
  char *label, *path;    /* owned; path: the first run's */
  mlprof__report report; /* the first run's */
  /* Repeated runs of this configuration (at least 1); the reports of the
   * others (repeats - 1, owned), and with several, the zones pooled. */
  size_t repeats;
  mlprof__report *more;
  mlprof__diff_side pooled;
  const mlprof__zone_stats *zones; /* report's, or pooled's */
  size_t nzones;
  uint64_t wall_ns;    /* the median of its runs' */
  uint64_t spans;      /* summed over its runs */
  uint64_t busy_ns;    /* summed top-level zone time of every thread */
  uint64_t intervals;  /* step intervals over every thread */
  double step_mean_ns; /* mean step interval, NAN without intervals */
  /* The median step interval and its 95% interval, NAN without steps. */
  double step_p50_ns, step_lo_ns, step_hi_ns;
  double per_s;   /* units of mlprof__compare.unit per second of its median
                     step (of its wall time without steps); NAN: none */
  int indistinct; /* not the fastest, but its interval overlaps the
                     fastest's (by_step's basis, steps or units) */
  size_t rank_total, rank_step; /* 1 = fastest */
} mlprof__compare_run;

typedef struct {
  const char *name; /* borrowed from a run's report */
  size_t name_len;
  uint8_t category;
  /* Per run (nruns entries): the zone's statistics, NULL when the run has
   * no such zone; speedups, NAN when not defined (zone absent there or in
   * the reference run, or a mean of 0). */
  const mlprof__zone_stats **stats;
  double *vs_slowest, *vs_first;
  size_t fastest, slowest; /* run indices */
  int tie;                 /* another run is within noise of the fastest */
  uint64_t max_total;      /* largest total over the runs (the order) */
} mlprof__compare_zone;

typedef struct {
  mlprof__compare_run *runs;
  size_t nruns, rcap;
  mlprof__compare_zone *zones; /* by max_total, largest first, then name */
  size_t nzones;
  size_t *by_total, *by_step; /* run indices, fastest first */
  /* What by_step ranks by: MLPROF__BASIS_UNITS, throughput in units of
   * `unit` per second (compare_run.per_s), when every run counts that unit
   * ("samples" first, then "tokens", then any unit all runs have) and the
   * runs' work differs by more than 1% (units per step, or without steps
   * the units in all): runs that do more work a step are compared by what
   * they get done; else MLPROF__BASIS_STEPS, step time, when every run has
   * steps; else MLPROF__BASIS_WALL. */
  int step_basis;
  const char *unit; /* with MLPROF__BASIS_UNITS: borrowed from run 0 */
  /* The fastest run by the step ranking, and its speedups (ratios of step
   * times, of throughputs or of wall times, as step_basis says) against the
   * slowest run and the first. */
  size_t best, worst;
  double best_vs_slowest, best_vs_first;
  size_t indistinct; /* runs indistinguishable from the best */
} mlprof__compare;

/* Whether run r's median for zone z is within noise of the fastest run's
 * (the rule above; the fastest itself is); 0 when r has no such zone. */
int mlprof__compare_tied(const mlprof__compare_zone *z, size_t r);

/* Adds a run: takes the report (*r is emptied) and copies label and path.
 * Returns 0 or MLPROF_ENOMEM (then *r is still the caller's). */
int mlprof__compare_add(mlprof__compare *c, const char *label, const char *path,
                        mlprof__report *r);

/* Adds k >= 1 repeated runs of one configuration (r[0..k), each emptied),
 * as one run of the comparison (definitions above); path is the first's.
 * With k > 1 the reports must hold their durations. Returns 0 or
 * MLPROF_ENOMEM (then r[] are still the caller's). */
int mlprof__compare_add_runs(mlprof__compare *c, const char *label,
                             const char *path, mlprof__report *r, size_t k);

/* Computes zones, speedups and rankings of the runs added (at least one).
 * Returns 0 or MLPROF_ENOMEM. */
int mlprof__compare_finish(mlprof__compare *c);

/* Frees everything, the runs' reports included; *c is left empty. */
void mlprof__compare_free(mlprof__compare *c);

/* Loads the runs at paths[0..n) (n >= 1) into *c (empty) and finishes the
 * comparison: what mlprof compare and mlprof html --compare share. sizes
 * (NULL: every run its own configuration) groups the paths into ngroups
 * configurations of sizes[g] repeated runs each (summing to n); labels and
 * default names are then one a configuration (its first path's).
 * keep_durations: keep each zone's sorted durations (the page's
 * distributions), as mlprof__run_load. labels:
 * n non-empty labels separated by commas, or NULL for the base name of each
 * path (trailing slashes ignored; the whole path for runs whose base names
 * are equal); filter (NULL: none) applies to every run. Returns 0;
 * MLPROF_ENOMEM with "out of memory" in err; or another negative error with a
 * one-line reason in err when labels does not hold n labels or a run cannot be
 * read (bad usage or input). On error *c is left empty. */
int mlprof__compare_load(mlprof__compare *c, const char *const *paths, size_t n,
                         const size_t *sizes, size_t ngroups,
                         int keep_durations, const char *labels,
                         const mlprof__filter *filter, char *err,
                         size_t errlen);

/* One line naming the fastest run and by how much, into b (labels included
 * as they are: the caller escapes the line for its format). */
void mlprof__compare_recommendation(const mlprof__compare *c, char *b,
                                    size_t len);

#endif
