/* Findings: what slows a job down or makes it grow, each with the numbers
 * that show it, a severity and what to do (docs/findings.md).
 *
 * Four analyses share one model and one extra read of the spans:
 * - steps (steps.c): per step, the time in data loading, forward, backward,
 *   optimizer, communication and other; mean, p50 and p90 step time.
 * - bottlenecks (bottleneck.c): dominant, outlying and erratic zones,
 *   classified with the samples that overlap them (compute, memory, I/O or
 *   waiting), data-bound steps, an idle accelerator, memory pressure.
 * - leaks (leak.c): sustained growth of RSS and GPU memory over steps (or
 *   time), Theil-Sen slopes, one finding per growth.
 * - latency objectives (slo.c): calls of a zone over a duration, per window.
 *
 * Memory: no span is kept, but the durations of the zones named in latency
 * objectives (16 bytes a span) and one duration per step mark. */
#ifndef MLPROF_FINDINGS_H
#define MLPROF_FINDINGS_H

#include <stddef.h>
#include <stdint.h>

#include "../model/job.h"
#include "dist.h"
#include "resources.h"
#include "stats.h"

/* The parts of a step. */
enum {
  MLPROF__PART_DATA,
  MLPROF__PART_FORWARD,
  MLPROF__PART_BACKWARD,
  MLPROF__PART_OPTIMIZER,
  MLPROF__PART_COMM,
  MLPROF__PART_OTHER,
  MLPROF__NPARTS
};

/* "data", "forward", "backward", "optimizer", "communication", "other". */
const char *mlprof__part_name(int part);

/* The part a zone's time belongs to: its category when it is one of the
 * five (data, forward, backward, optimizer, communication), else its name
 * by the table of docs/findings.md (case-insensitive words: "dataloader",
 * "next_batch" -> data, "fwd" -> forward, "allreduce" -> communication...);
 * MLPROF__PART_OTHER when neither says. The name "step" alone means the
 * optimizer's step only when nested (nested != 0): an outermost "step" is
 * the training step itself. */
int mlprof__zone_part(uint8_t category, const char *name, size_t len,
                      int nested);

/* A latency objective: calls of zone should take at most objective_ns;
 * or (gauge) the values of the gauge named zone should be at most
 * objective, in the gauge's own unit (a latency_ms set per request). */
typedef struct {
  char *zone; /* owned */
  size_t zone_len;
  uint64_t objective_ns;
  int gauge;
  double objective; /* objective_ns for a zone */
} mlprof__slo_spec;

/* Parses a duration with its unit: "200ms", "1.5s", "750us" ("µs" too),
 * "20000ns". Returns 0, or -1 when s is not a positive duration with a
 * unit (or overflows). */
int mlprof__duration_parse(const char *s, uint64_t *ns);

/* Parses "ZONE=DURATION" or "GAUGE=NUMBER" (a number without a unit: the
 * gauge's own unit) into *out; the last '=' splits, so names may hold one
 * (name copied; free with mlprof__slo_spec_free). Returns 0, or -1 with a
 * one-line reason in err. */
int mlprof__slo_parse(const char *arg, mlprof__slo_spec *out, char *err,
                      size_t errlen);
void mlprof__slo_spec_free(mlprof__slo_spec *s);

typedef struct {
  double leak_min_mb;          /* growth over the run, default 10 */
  double leak_min_mb_per_step; /* slope over steps, default 0.1 */
  double leak_min_mb_per_min;  /* slope over time (no steps), default 1 */
  const mlprof__slo_spec *slo; /* latency objectives (not owned) */
  size_t nslo;
  uint64_t slo_window_ns; /* default 1 s */
} mlprof__findings_opts;

/* The defaults above, no objective. */
void mlprof__findings_opts_init(mlprof__findings_opts *o);

enum { MLPROF__STEPS_NONE, MLPROF__STEPS_MARKS, MLPROF__STEPS_ZONE };

typedef struct {
  int source; /* MLPROF__STEPS_*: from step marks, or from a zone */
  char *zone; /* MLPROF__STEPS_ZONE: the outermost repeated zone */
  size_t zone_len;
  uint64_t count; /* steps */
  size_t threads; /* threads whose steps were counted */
  uint64_t total_ns;
  double mean_ns;
  uint64_t p50_ns, p90_ns;
  uint64_t part_ns[MLPROF__NPARTS]; /* summed over the steps */
  double share[MLPROF__NPARTS];     /* part_ns / total_ns */
  uint64_t first_ns, last_ns;       /* job time the steps span */
} mlprof__steps;

/* A number behind a finding; the key names its unit by its suffix (_ns,
 * _pct, _bytes, _mb, _share...). */
typedef struct {
  const char *key;
  double value;
} mlprof__evidence;

#define MLPROF__MAX_EVIDENCE 14

typedef struct {
  const char *type; /* data_bound, compute, io_wait, memory,
                       gpu_underutilized, memory_leak, hotspot,
                       gil_contention */
  char *zone;       /* the zone it is about, or NULL (the steps, the
                       machine, a process) */
  size_t zone_len;
  const char *flagged; /* why it was looked at: dominant, outlier,
                          variable, steps, memory, leak, gil */
  double severity;     /* 0..100, docs/findings.md */
  char *summary;       /* one line, plain language, with the numbers */
  mlprof__evidence ev[MLPROF__MAX_EVIDENCE];
  size_t nev;
  const char *recommendation;
  const char *note; /* a caveat (e.g. not sampled), or NULL */
} mlprof__finding;

typedef struct {
  char *name;
  size_t name_len;
  uint64_t spans;    /* spans whose RSS change was measured */
  uint64_t positive; /* of which RSS grew */
  double mean_change_bytes;
} mlprof__leak_zone;

typedef struct {
  const char *measure; /* rss_bytes, gpu_mem_bytes (a process) or
                          gpu_mem_used_bytes (a GPU) */
  uint8_t subject;     /* MLPROF__SUBJECT_PROCESS or _GPU */
  uint64_t id;         /* pid or GPU index */
  const char *hostname;
  int process;              /* the process's profile in the report, -1 */
  int by_steps;             /* slope over step marks (else over time only) */
  double slope_mb_per_step; /* NAN when not by steps */
  double slope_mb_per_min;
  double growth_mb;            /* slope x the length of the growth */
  double trend_z;              /* Mann-Kendall z of the growth's samples */
  uint64_t begin_ns, end_ns;   /* job time */
  double begin_step, end_step; /* NAN when not by steps */
  size_t points;
  mlprof__leak_zone *zones; /* RSS grew in most of their calls */
  size_t nzones;
} mlprof__leak;

/* For a gauge's objective, the _ns fields are 0 and the values are in p50,
 * p95, p99 (and max, objective): the gauge's unit. For a zone's, those hold
 * the same as the _ns fields. A gauge's "calls" are its values. */
typedef struct {
  uint64_t start_ns; /* job time */
  uint64_t count, over;
  uint64_t p50_ns, p95_ns, p99_ns;
  double p50, p95, p99;
} mlprof__slo_window;

typedef struct {
  char *zone; /* or the gauge's name */
  size_t zone_len;
  int gauge;
  uint64_t objective_ns, window_ns;
  uint64_t count, over;
  double share_over; /* over / count, 0 without calls */
  uint64_t p50_ns, p95_ns, p99_ns, max_ns;
  double objective, p50, p95, p99, max;
  mlprof__slo_window *windows; /* windows holding calls, by time */
  size_t nwindows;
  size_t windows_missed; /* windows where a call went over */
} mlprof__slo_result;

/* Kernel time launched from a zone: the innermost zone open on the thread
 * that made the kernel's launching API call, when it made it (CUPTI's
 * correlation ids, docs/gpu.md). */
typedef struct {
  char *zone;
  size_t zone_len;
  uint64_t kernels, gpu_ns;
} mlprof__gpu_launched;

typedef struct mlprof__findings {
  int sampled;      /* some process of the job was sampled */
  const char *note; /* what could not be analysed and why, or NULL */
  mlprof__steps steps;
  mlprof__finding *findings; /* by severity, largest first */
  size_t nfindings;
  mlprof__leak *leaks;
  size_t nleaks;
  size_t leak_series; /* memory series looked at */
  mlprof__slo_result *slo;
  size_t nslo;
  mlprof__gpu_launched *launched; /* by gpu_ns, largest first */
  size_t nlaunched;
  /* Kernels with a correlation id whose launch was not seen, or was made
   * under no zone, and their time. */
  uint64_t launch_unattributed, launch_unattributed_ns;
  mlprof__findings_opts opts; /* as used (slo not kept) */
  /* A job of several ranks (dist.h; filled by the analysis driver with the
   * findings, its own findings among the ones above). */
  mlprof__dist dist;
} mlprof__findings;

/* The builder, fed the spans of one profile at a time by the analysis
 * driver (analysis.h), in a pass after the one that built r (its zone
 * statistics) and res (samples: may be NULL or unsampled, then causes are
 * left unclassified and said so). begin (NULL when out of memory; opts NULL
 * for the defaults, its objectives not kept), then for each profile of job
 * in order profile_begin (fills *v with the callbacks to read it with), the
 * read, profile_end; then finish, which also uses res->zones, so it comes
 * after the zone pass. finish returns 0 or MLPROF_ENOMEM (*f is then
 * empty); finish and abort free the builder. Damage in a file is not an
 * error here. Release *f with mlprof__findings_free. */
typedef struct mlprof__findings_builder mlprof__findings_builder;
mlprof__findings_builder *mlprof__findings_begin(
    const mlprof__job *job, const mlprof__report *r,
    const mlprof__resources *res, const mlprof__findings_opts *opts,
    mlprof__findings *f);
void mlprof__findings_profile_begin(mlprof__findings_builder *b, size_t index,
                                    mlprof__visitor *v);
/* 0 or MLPROF_ENOMEM. */
int mlprof__findings_profile_end(mlprof__findings_builder *b);
int mlprof__findings_finish(mlprof__findings_builder *b);
void mlprof__findings_abort(mlprof__findings_builder *b);

void mlprof__findings_free(mlprof__findings *f);

/* ---- between the analysis files ------------------------------------------
 */

#define MLPROF__COMM_NAMES 3
/* The least share of wall time a flagged zone costs (bottleneck.c's
 * outlier rule; the others ask more). */
#define MLPROF__FLAG_MIN_SHARE 0.01

/* A zone name seen in the pass, across profiles. */
typedef struct {
  char *name;
  size_t len;
  uint64_t top_count, top_ns; /* spans at depth 0 */
  uint64_t top_parents;       /* of which with zones inside */
  /* CPU % of the process during the zone's own time (its spans less the
   * zones inside them): each sample's cpu_pct holds over the interval since
   * the previous sample, and counts in proportion to how much of that
   * interval the zone's own time covers. */
  double cpu_sum, cpu_ns;
  double runq_sum, runq_ns; /* the process's runq_wait_pct, the same way */
  double idle_sum, idle_ns; /* the host's cpu_idle_pct, the same way */
  uint64_t top_part[MLPROF__NPARTS]; /* their parts (other excluded) */
  /* Spans on threads: a zone seen on tracks only (another profiler's
   * events, operations in flight) is not the program's code. */
  uint64_t thread_spans;
  /* Of which Python calls (the calls tracer's), and spans in processes
   * that ran Python; the threads that ran it, and their time (the wall time
   * of each one's process: a thread's own life is not recorded). */
  uint64_t pycall_spans, python_spans;
  uint32_t threads;
  double thread_ns;
  /* Zones that may be flagged (total >= 1% of wall time), not
   * communication themselves: their thread spans' time, and how much of it
   * communication spans of their process (comm zones, tracks such as "DDP
   * wait") covered, over the union of those; comm_by: the names that covered
   * most (approximate). */
  int candidate;
  uint64_t span_ns, comm_ns;
  struct {
    uint32_t zone; /* index of the comm zone's mlprof__fzone */
    uint64_t ns;
  } comm_by[MLPROF__COMM_NAMES];
} mlprof__fzone;

/* RSS change of the spans of one zone in one process. */
typedef struct {
  uint32_t zone; /* index of its mlprof__fzone */
  uint32_t profile;
  uint64_t spans, positive;
  double sum;
} mlprof__rss_acc;

/* What the span pass gathered, for the analyses. */
typedef struct {
  const mlprof__job *job;
  const mlprof__report *r;
  const mlprof__resources *res;
  mlprof__fzone *zones;
  size_t nzones;
  mlprof__rss_acc *rss;
  size_t nrss;
  /* Per profile of the job: spans on tracks, another profiler's events
   * (torch.profiler's operators), whose buffers live in that process. */
  uint64_t *track_spans;
  /* The steps of every thread (r's marks): their parts, and the job time
   * from the first one's beginning to the last one's end. */
  uint64_t step_part[MLPROF__NPARTS];
  uint64_t step_first, step_last;
} mlprof__fpass;

/* Whether profile prof of the job ran Python: its metadata has
 * "mlprof.python" or "mlprof.torch" (mlprof run's start-up module), or its
 * program is a python; 1 for prof -1 (a GPU: its memory is a framework's). */
int mlprof__runs_python(const mlprof__report *r, int prof);

/* The pass's zone named name, or NULL. */
const mlprof__fzone *mlprof__fpass_zone(const mlprof__fpass *p,
                                        const char *name, size_t len);

/* steps.c: the breakdown from the pass. Returns 0 or MLPROF_ENOMEM. */
int mlprof__steps_finish(mlprof__fpass *p, mlprof__steps *s);
/* leak.c: leaks of every memory series of res. 0 or MLPROF_ENOMEM. */
int mlprof__leaks_find(const mlprof__fpass *p, mlprof__findings *f);
/* bottleneck.c: every finding (leaks included, from f->leaks), sorted.
 * 0 or MLPROF_ENOMEM. */
int mlprof__bottlenecks_find(const mlprof__fpass *p, mlprof__findings *f);
/* gil.c: GIL contention in each process whose stack samples say who held
 * and who waited for the GIL (r->hot.gil). 0 or MLPROF_ENOMEM. */
int mlprof__gil_find(const mlprof__fpass *p, mlprof__findings *f);
/* findings.c: the list of findings, which every detector (bottleneck.c,
 * leak.c, dist.c) adds to. Adds a finding with a copy of zone (may be NULL)
 * and the summary printf makes; returns it (evidence to be added), or NULL
 * when out of memory. */
mlprof__finding *mlprof__finding_add(mlprof__findings *f, const char *type,
                                     const char *zone, size_t zone_len,
                                     const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Adds the number key (static) to x's evidence; past MLPROF__MAX_EVIDENCE
 * it is left out. */
void mlprof__finding_ev(mlprof__finding *x, const char *key, double value);
/* Sorts f's findings, most severe first, then by type and zone. */
void mlprof__findings_sort(mlprof__findings *f);

/* Median of a (n values, reordered); NAN when n is 0. */
double mlprof__median(double *a, size_t n);
/* Theil-Sen slope of y over x (n points; at most max_points of them, evenly
 * spaced, are used): the median of the pairwise slopes. NAN when fewer than
 * 2 points or out of memory. */
double mlprof__theil_sen(const double *x, const double *y, size_t n,
                         size_t max_points);
/* Mann-Kendall trend statistic of y in order (same subsampling): z > 0 when
 * y grows; |z| >= 3 is significant at about p = 0.001. */
double mlprof__mann_kendall_z(const double *y, size_t n, size_t max_points);

/* An interval of time [b, e) with an id (a thread, a zone), as the analyses
 * that measure how much of a span other spans cover keep them (gpu.c,
 * findings.c). */
typedef struct {
  uint64_t b, e;
  uint32_t id;
} mlprof__ival;

/* Merges a[0, n), sorted by id then begin, into disjoint intervals: those
 * that overlap or touch become one, of the same id, or of any id when any (it
 * keeps the first's id). Returns how many remain, at the front of a. */
size_t mlprof__ival_merge(mlprof__ival *a, size_t n, int any);
/* The first of the disjoint sorted intervals a[0, n) that ends after t; n
 * when none does. */
size_t mlprof__ival_after(const mlprof__ival *a, size_t n, uint64_t t);
/* The time of [b, e) under the disjoint sorted intervals a[0, n) (ids
 * aside); 0 when e <= b. */
uint64_t mlprof__ival_cover(const mlprof__ival *a, size_t n, uint64_t b,
                            uint64_t e);

/* gpu.c: CUDA activity (CUPTI's tracks) against the steps, profile by
 * profile: GPU idle time in steps and the zones open meanwhile, host-device
 * copies and synchronisations per step, kernel time by the zone that
 * launched it (f->launched). begin: NULL when out of memory.
 * profile_begin takes the profile's tracks from r's threads and returns 1
 * when some are GPU work (then span wants the spans; without, span need not
 * be called), 0 when none are, or MLPROF_ENOMEM; span takes each span (zone:
 * its index in the pass's zones, name its name, comm: a zone of communication),
 * span_units the units of the span just given (bytes, or the correlation id
 * when correlation), step a step mark (end 0) or step end of a thread;
 * profile_end measures and forgets the profile's spans; finish adds the
 * findings to f (zone names from p). The others return 0 or MLPROF_ENOMEM; free
 * frees a. */
typedef struct mlprof__gpu_acc mlprof__gpu_acc;
mlprof__gpu_acc *mlprof__gpu_begin(void);
int mlprof__gpu_profile_begin(mlprof__gpu_acc *a, const mlprof__report *r,
                              size_t profile);
int mlprof__gpu_span(mlprof__gpu_acc *a, uint32_t tid, uint32_t zone,
                     const char *name, size_t len, uint32_t depth, int comm,
                     uint64_t begin, uint64_t end);
void mlprof__gpu_span_units(mlprof__gpu_acc *a, int correlation, uint64_t n);
int mlprof__gpu_step(mlprof__gpu_acc *a, uint32_t tid, uint64_t t, int end);
int mlprof__gpu_profile_end(mlprof__gpu_acc *a, size_t profile, size_t nzones);
int mlprof__gpu_finish(mlprof__gpu_acc *a, const mlprof__fpass *p,
                       mlprof__findings *f);
void mlprof__gpu_free(mlprof__gpu_acc *a);

/* slo.c: the objectives' state during the pass. */
typedef struct mlprof__slo_acc mlprof__slo_acc;
mlprof__slo_acc *mlprof__slo_begin(const mlprof__findings_opts *o);
/* The objective for the zone (gauge 0) or the gauge (1) named name, or -1;
 * then mlprof__slo_add its calls' ends and durations (a gauge's times and
 * values: mlprof__slo_add_value). */
int mlprof__slo_match(const mlprof__slo_acc *a, const char *name, size_t len,
                      int gauge);
int mlprof__slo_add_value(mlprof__slo_acc *a, int index, uint64_t t_ns,
                          double v);
int mlprof__slo_add(mlprof__slo_acc *a, int index, uint64_t end_ns,
                    uint64_t dur_ns);
/* Fills f->slo and frees a (also on failure). 0 or MLPROF_ENOMEM. */
int mlprof__slo_finish(mlprof__slo_acc *a, mlprof__findings *f);
void mlprof__slo_abort(mlprof__slo_acc *a);

#endif
