/* The report model: per-zone, per-process and per-thread statistics of a job,
 * built by streaming every profile through the reader.
 *
 * Memory: no span is kept. Zones keep the raw durations of their spans (8
 * bytes a span) so percentiles are exact, up to a budget for the whole job
 * (mlprof__stats_budget); everything else is counters. Past the budget, the
 * zone whose durations take the most room counts them in a histogram
 * instead (log-linear buckets, 256 a power of two, 114 KB; only a zone of
 * more durations than that spills, so many small zones may stay past the
 * budget: memory is then bounded by the zones' number), and selection
 * passes over the profiles (mlprof__stats_select_begin) find its exact
 * percentiles: the first collects the values of the buckets that hold them
 * (when they fit the budget; else counts them in finer buckets, for another
 * pass) and sums the squared deviations for the std. A job under the budget
 * is read once and gets the same numbers as with no budget.
 *
 * Definitions (also in docs/json-schema.md):
 * - self time of a span: its duration minus the durations of its direct
 *   children (spans one level deeper on the same thread that end inside it);
 *   never below 0.
 * - percentile p (nearest rank): sort the n durations ascending; the value of
 *   rank ceil(p/100 * n) (1-based). p50 of {1,2,3,4} is 2, p99 of 100 values
 *   is the 99th smallest.
 * - std: population standard deviation (divides by n).
 * - share: zone time / job wall time, where a span inside another span of
 *   the same zone on its thread (recursion) counts only once, in the
 *   outermost. Nested zones and several threads make shares add up to more
 *   than 1; one zone on one thread is at most 1.
 * - job wall time: from the earliest profile start (job time 0) to the
 *   latest profile end; a profile ends at its END chunk, or at the latest
 *   time any of its records carries when it has none. */
#ifndef MLPROF_STATS_H
#define MLPROF_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "../format/reader.h"
#include "../model/job.h"
#include "hot.h"
#include "lines.h"
#include "memory.h"
#include "marks.h"
#include "resources.h"

typedef enum {
  MLPROF__SORT_TOTAL,
  MLPROF__SORT_SELF,
  MLPROF__SORT_MEAN,
  MLPROF__SORT_P99,
  MLPROF__SORT_COUNT
} mlprof__sort_key;

/* Parses "total", "self", "mean", "p99" or "count". Returns 0, or -1 when s
 * is none of these. */
int mlprof__sort_key_parse(const char *s, mlprof__sort_key *key);
const char *mlprof__sort_key_name(mlprof__sort_key key);

typedef struct {
  uint32_t unit; /* index into mlprof__report.units */
  uint64_t n;
  double per_s; /* n per second of the zone's total time; 0 if it is 0 */
} mlprof__zone_units;

/* mean_ns and std_ns are doubles; exporters show them as whole ns. */
static inline uint64_t mlprof__round_ns(double ns) {
  return ns > 0 && ns < 1.8e19 ? (uint64_t)(ns + 0.5) : 0;
}

typedef struct {
  char *name;      /* NUL-terminated; name_len excludes the NUL and counts */
  size_t name_len; /* any NUL byte inside the name */
  uint8_t category;
  uint64_t count, total_ns, self_ns, min_ns, max_ns;
  /* The time of its spans not inside another span of the same zone on
   * their thread: a recursive zone's time counted once. */
  uint64_t outer_ns;
  double mean_ns, std_ns;
  uint64_t p50_ns, p90_ns, p95_ns, p99_ns;
  double share;
  mlprof__zone_units *units; /* nunits, sorted by unit index */
  size_t nunits;
  /* Every duration of the zone, sorted ascending (count values), owned by
   * the report; only when the builder was told to keep them
   * (mlprof__stats_keep_durations), NULL otherwise. */
  uint64_t *durations;
} mlprof__zone_stats;

typedef struct {
  char *key, *value; /* NUL-terminated, owned */
  size_t key_len, value_len;
} mlprof__kv;

/* Appends copies of key and value to the pairs *kv (*n of them, room for
 * *cap). Returns 0, or MLPROF_ENOMEM with the pairs unchanged. */
int mlprof__kv_add(mlprof__kv **kv, size_t *n, size_t *cap, const char *key,
                   size_t klen, const char *value, size_t vlen);

/* Sorts key/value pairs by key and keeps, for each key, the value set last
 * (the one latest in the array); frees the strings of the others and
 * updates *n. Returns 0, or MLPROF_ENOMEM with the array unchanged. */
int mlprof__kv_dedupe(mlprof__kv *kv, size_t *n);

typedef struct {
  char *path, *hostname, *exe, *cmdline, *clock;
  char *name; /* as mlprof__job_profile's */
  uint64_t pid, ppid;
  int parent; /* index in mlprof__report.procs, -1 */
  int64_t rank, world_size;
  int clock_rejected; /* mlprof__job_profile's: a clock measurement left out */
  uint64_t offset_ns; /* start on the job timeline */
  uint64_t wall_ns;   /* end, in the profile's own time */
  uint32_t flush_interval_ms;
  uint64_t spans, dropped, unmatched;
  size_t threads;
  int clean_end;
  /* How it ended (read.end_how and .end_status when clean_end), whether it
   * is alive (mlprof__job_profile.alive), and, for a program that called
   * exec, the index of the profile of the program it became: that one's
   * spans, threads, drops and times then include this one's. */
  int alive, exec_into;
  mlprof__read_report read;
  char read_error[256]; /* the read stopped early: reason; "" otherwise */
  mlprof__kv *meta;     /* session metadata, later values overriding */
  size_t nmeta;
} mlprof__proc_stats;

typedef struct {
  size_t proc;
  uint64_t pid, tid;
  char *name; /* "" when the thread was never named */
  size_t name_len;
  uint64_t spans, busy_ns, dropped;
  /* Step marks: count, and the steps' mean and median (a step: from a mark
   * to the next mark or step end). */
  uint64_t steps, step_mean_ns, step_p50_ns;
  mlprof__marks marks; /* the marks and step ends, in job time */
} mlprof__thread_stats;

typedef struct {
  char *name;
  size_t name_len;
  uint64_t count; /* values recorded; min/max/mean ignore NaN and inf */
  double min, max, mean, last;
  /* Nearest-rank percentiles of the finite values (each kept until the
   * report is made: 8 bytes a value); NAN without one. */
  double p50, p90, p99;
} mlprof__counter_stats;

typedef struct {
  char *name;
  size_t name_len;
  uint64_t total;   /* all units of this name, inside zones or not */
  uint64_t outside; /* those recorded outside any zone */
  double per_s;     /* total per second of job wall time */
} mlprof__unit_stats;

typedef struct {
  char *name;
  size_t name_len;
  uint8_t category;
  size_t proc, thread;
  uint32_t depth;
  uint64_t begin_ns; /* profile time */
  uint64_t open_ns;  /* from begin to the profile's end */
} mlprof__open_zone;

typedef struct {
  uint64_t wall_ns, spans, dropped;
  mlprof__zone_stats *zones;
  size_t nzones;
  /* The zones to show: indices into zones, sorted by mlprof__report_sort. */
  uint32_t *order;
  size_t norder;
  mlprof__sort_key sort;
  mlprof__proc_stats *procs;
  size_t nprocs;
  mlprof__thread_stats *threads;
  size_t nthreads;
  mlprof__counter_stats *counters;
  size_t ncounters;
  mlprof__unit_stats *units;
  size_t nunits;
  mlprof__open_zone *open;
  size_t nopen;
  /* One line each: killed processes, damage, dropped events... */
  char **warnings;
  size_t nwarnings;
  /* Line timings (filled by the analysis driver, freed with the report). */
  mlprof__lines lines;
  /* Where memory goes (filled by the analysis driver, freed with the
   * report). */
  mlprof__memory mem;
  /* Hot functions from stack samples (the same). */
  mlprof__hot hot;
} mlprof__report;

/* The builder, fed one profile at a time by the analysis driver
 * (analysis.h) and by tests that drive the reader themselves. */
typedef struct mlprof__stats mlprof__stats;

/* A new, empty builder, or NULL when out of memory. */
mlprof__stats *mlprof__stats_new(void);

/* The job is read through record filters (filter.h): the report's wall
 * time is then from the first to the last record kept, in job time, so
 * that it and the zones' shares of it describe the selection. */
void mlprof__stats_selection(mlprof__stats *s);

/* Starts the next profile of the job (p is copied). Fills *v with the
 * visitor to read that profile with; its ud is s. Returns 0 or
 * MLPROF_ENOMEM. Callbacks return MLPROF_ENOMEM when memory runs out. */
int mlprof__stats_profile_begin(mlprof__stats *s, const mlprof__job_profile *p,
                                mlprof__visitor *v);

/* Ends the current profile: rep is what the read found (may be NULL), and
 * read_error a reason when the read stopped early (NULL or ""). Returns 0 or
 * MLPROF_ENOMEM. */
int mlprof__stats_profile_end(mlprof__stats *s, const mlprof__read_report *rep,
                              const char *read_error);

/* Computes the statistics into *r (sorted by total, every zone shown) and
 * frees s whatever the outcome. Returns 0 or MLPROF_ENOMEM (then *r is
 * empty). Release *r with mlprof__report_free. */
int mlprof__stats_finish(mlprof__stats *s, mlprof__report *r);

/* Makes mlprof__stats_finish keep each zone's sorted durations in
 * mlprof__zone_stats.durations (for tests on the raw durations, such as
 * mlprof diff) instead of freeing them: 8 bytes a span stay in memory until
 * mlprof__report_free. Off by default. */
void mlprof__stats_keep_durations(mlprof__stats *s, int keep);

/* The default budget: room for 2^24 raw durations (128 MB), so a job of up
 * to 16 M spans (10 M, the report's budget in docs/guide.md, included) is
 * read once. */
#define MLPROF__STATS_BUDGET ((size_t)1 << 24)

/* Sets the room for raw durations, in durations, for the whole job: what
 * the zones keep in the first pass (counted as allocated) and what a
 * selection pass collects. Not applied while keeping durations. */
void mlprof__stats_budget(mlprof__stats *s, size_t durations);

/* The selection passes, after the last mlprof__stats_profile_end: while
 * mlprof__stats_select_begin returns 1, read every profile of the job
 * again, in the first pass's order and through the same filter, each with
 * the visitor mlprof__stats_select_profile fills (ud is s), then call
 * mlprof__stats_select_end. select_begin returns 0 when no pass is needed
 * (always, for a job under the budget), end returns 0; both return
 * MLPROF_ENOMEM when out of memory (then free s). Skipping them leaves a
 * spilled zone's percentiles and std at 0. A file that changed between
 * passes gives percentiles from what it held, never a crash. */
int mlprof__stats_select_begin(mlprof__stats *s);
void mlprof__stats_select_profile(mlprof__stats *s, mlprof__visitor *v);
int mlprof__stats_select_end(mlprof__stats *s);

/* Percentile p (0 to 100) of n sorted values by nearest rank (above): the
 * value of rank ceil(p * n / 100), the smallest for p 0; 0 for none. */
uint64_t mlprof__percentile_sorted(const uint64_t *a, size_t n, unsigned p);

/* Frees an unfinished builder (NULL is fine). */
void mlprof__stats_free(mlprof__stats *s);

/* Orders the zones by key, largest first (ties by name), and keeps the first
 * top in r->order (0: all). */
void mlprof__report_sort(mlprof__report *r, mlprof__sort_key key, size_t top);

/* How process p ended, in a word: "exit" and "signal" (with
 * p->read.end_status), "exec" (into a program that recorded nothing),
 * "shutdown" (mlprof_shutdown, or a file older than format 1.2), "running",
 * "killed", or "unknown" (no closing chunk, and the process belongs to
 * another host). */
const char *mlprof__proc_end(const mlprof__proc_stats *p);

/* The value of the session metadata key of a process (NUL-terminated, owned
 * by the report), or NULL when it has none. */
const char *mlprof__proc_meta(const mlprof__proc_stats *p, const char *key);

/* The step marks of process proc (an index into r->procs): those of its
 * thread with the most marks, the one rule for which thread gives a
 * process's steps; NULL when it has no thread. */
const mlprof__marks *mlprof__report_marks(const mlprof__report *r, size_t proc);

void mlprof__report_free(mlprof__report *r);

#endif
