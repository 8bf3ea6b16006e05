/* Exporters: a report as text, JSON or CSV, and a job as a Chrome trace.
 *
 * Each writes through an mlprof__out the caller opened and flushes; none
 * flushes or closes it. Each returns 0, or the first error of the writer
 * (MLPROF_EIO, MLPROF_ENOMEM), or MLPROF_ENOMEM for its own memory. */
#ifndef MLPROF_EXPORT_H
#define MLPROF_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "../analyze/analysis.h"
#include "../analyze/compare.h"
#include "../analyze/findings.h"
#include "../analyze/resources.h"
#include "../analyze/stats.h"
#include "../model/job.h"
#include "escape.h"

/* Aligned tables for a terminal, no colour: a header with the run's facts
 * and warnings, then zones (r->order), when f is not NULL the step
 * breakdown, findings, leaks and latency objectives, then processes,
 * threads, steps, counters,
 * units, zones open at the end, session metadata, and when res is not NULL
 * and was sampled, the resource summary: per host the system and each GPU
 * (or why there are none), then each process's own measures under the
 * process, the tree's totals, processes sampled that have no profile of
 * their own, sources that did not run and why, energy and carbon. Values
 * are shown with their unit (from the measure name's suffix); an absent
 * measure shows its reason. Names are made safe for a terminal and cut to a
 * column width. */
int mlprof__export_text(const mlprof__report *r, const mlprof__resources *res,
                        const mlprof__findings *f, mlprof__out *o);

/* The report as one JSON object of schema "mlprof.report/1"
 * (docs/json-schema.md); zones listed in r->order; with "resources" and each
 * zone's "samples" from res (may be NULL: "resources" is then null and no
 * zone has samples); "steps", "findings", "leaks" and "slo" from f (may be
 * NULL: those fields are then left out). */
int mlprof__export_json(const mlprof__report *r, const mlprof__resources *res,
                        const mlprof__findings *f, mlprof__out *o);
/* mlprof__export_json less what grows with the run's allocation sites and
 * steps, for the HTML page, whose own "memory" data (html.h) holds what it
 * draws of them, bounded: "memory" without "sites" and without its
 * processes' "step_peak_bytes". */
int mlprof__export_json_page(const mlprof__report *r,
                             const mlprof__resources *res,
                             const mlprof__findings *f, mlprof__out *o);

/* The zone table (r->order) as CSV with a header row, times in ns. */
/* The line timings of r (lines.c): a table per function for the text
 * report (returns 0 or the first error), the key "lines" for the JSON one;
 * nothing when no lines were timed. */
int mlprof__export_lines_text(const mlprof__report *r, mlprof__out *o);
/* Bytes v in b, 3 significant digits in decimal units ("381 MB", "12 B");
 * negative values keep their sign. */
void mlprof__fmt_bytes(char *b, size_t len, double v);

/* The memory section (r->mem; docs/memory.md): nothing when no process
 * recorded allocations. Returns 0 or the first error. */
int mlprof__export_memory_text(const mlprof__report *r, mlprof__out *o);
/* The report's "memory" member, a leading comma included
 * (docs/json-schema.md); page: without the sites and the processes' step
 * peaks (mlprof__export_json_page). */
void mlprof__export_memory_json(const mlprof__report *r, int page,
                                mlprof__out *o);
void mlprof__export_lines_json(const mlprof__report *r, mlprof__out *o);

/* Hot functions from stack samples (hot.c): the text report's sections,
 * the JSON report's key "hot"; nothing when no stack was sampled. Folded
 * stacks: one line per distinct stack, "outer;...;inner COUNT", frames
 * named "function (file:line)", counting the samples on a CPU (wall: every
 * sample), with the innermost zone as a root frame "[zone]" (by_zone). */
int mlprof__export_hot_text(const mlprof__report *r, mlprof__out *o);
/* One line under the step breakdown: the functions the samples taken in no
 * zone found most (the step's "other" time); nothing without such samples. */
int mlprof__export_hot_other_text(const mlprof__report *r, mlprof__out *o);
void mlprof__export_hot_json(const mlprof__report *r, mlprof__out *o);
int mlprof__export_folded(const mlprof__report *r, int wall, int by_zone,
                          mlprof__out *o);
/* The stack samples as an uncompressed pprof profile (perftools.profiles.
 * Profile; docs/stacks.md, "pprof"): one sample per row of f (built
 * uncapped, from the same read as r), with values samples/count,
 * wall/nanoseconds and cpu/nanoseconds (the samples taken on a CPU) and
 * labels zone, step, thread, thread_name, pid, rank and process where
 * known; a location per frame, a function per function of r's hot
 * functions. */
int mlprof__export_pprof(const mlprof__report *r, const mlprof__flame *f,
                         mlprof__out *o);

int mlprof__export_csv(const mlprof__report *r, mlprof__out *o);

/* The findings as CSV, most severe first: rank, severity, type, zone,
 * flagged, summary, evidence (key=value pairs joined by ';'),
 * recommendation, note. */
int mlprof__export_findings_csv(const mlprof__findings *f, mlprof__out *o);

/* Every sample of job as CSV, streamed profile by profile (nothing but the
 * names of the profile being read is kept): a header row, then one row per
 * measure of each sample row: time_ns (job timeline), subject (system,
 * process, gpu), id (pid, GPU index, 0), label, measure, value (empty when
 * absent), absent (the reason, empty when valid), host. Returns 0,
 * MLPROF_ENOMEM or the writer's error with a one-line reason in err; a
 * damaged or cut-short profile is not an error (reads gets what each read
 * found when not NULL, job->count entries). */
int mlprof__export_samples_csv(const mlprof__job *job, mlprof__out *o,
                               mlprof__read_report *reads, char *err,
                               size_t errlen);

/* Span durations in buckets, four per power of two, for sizing a trace by
 * the durations its spans keep (mlprof trace --max-mb). */
#define MLPROF__CHROME_BUCKETS 252
/* The bucket of a duration, and the least duration of a bucket. */
int mlprof__chrome_bucket(uint64_t ns);
uint64_t mlprof__chrome_bucket_min(int b);

typedef struct {
  uint64_t events; /* trace events written */
  uint64_t bytes;  /* the trace's size */
  /* NULL, or MLPROF__CHROME_BUCKETS counters: the bytes of the span events
   * of each duration bucket are added to them. */
  uint64_t *span_bytes;
  char warning[512];          /* the filter's (mlprof__filter_prepare), or "" */
  mlprof__read_report *reads; /* one per profile of the job, in job order */
  char (*read_errors)[256];   /* per profile: why its read stopped, or "" */
} mlprof__chrome_result;

/* Streams every profile of job into a Chrome trace event file ("JSON Object
 * Format", loads in Perfetto and chrome://tracing): one process per profile,
 * one track per thread, spans as complete events with their metadata and
 * units as args, counters as counter tracks, step marks as instant events,
 * sampled measures as counter tracks (a process's under its own process, the
 * system's under a "system" pseudo-process, each GPU under "GPU N (label)";
 * valid values only),
 * zones still open at the end as complete events to the profile's end with
 * args {"open": true}. Times are µs with ns precision, on the job's
 * timeline. Nothing is collected in memory but names and one pending span
 * per thread.
 *
 * filter (NULL: none) chooses the records and leaves out the spans of the
 * zones it does not show (filter.h).
 *
 * res (may be NULL) receives the event count, the size and, when its arrays
 * are set
 * (job->count entries each), what each read found: damage is not an error,
 * and a read that stops part-way keeps what it wrote. Returns 0, MLPROF_ENOMEM
 * or the writer's error, with a one-line reason in err. */
int mlprof__export_chrome(const mlprof__job *job, const mlprof__filter *filter,
                          mlprof__out *o, mlprof__chrome_result *res, char *err,
                          size_t errlen);

/* The same job as Perfetto's native protobuf trace (a Trace message: a
 * stream of TracePackets, docs/guide.md "Traces"), with the same filter, the
 * same processes, threads, counters, samples, open zones and timeline
 * (timestamps in ns, the Chrome trace's µs times 1000, on the default trace
 * clock), written as chrome.c writes: same arguments, same results and
 * errors; res->events counts track descriptors, slices, instants and
 * counter values, and span_bytes the bytes of each span's begin and end. Each
 * profile is a packet sequence of its own with its names interned; every
 * string is made valid UTF-8 (invalid bytes become U+FFFD). */
int mlprof__export_perfetto(const mlprof__job *job,
                            const mlprof__filter *filter, mlprof__out *o,
                            mlprof__chrome_result *res, char *err,
                            size_t errlen);

/* What mlprof trace calls: mlprof__export_chrome or mlprof__export_perfetto. */
typedef int (*mlprof__trace_exporter)(const mlprof__job *job,
                                      const mlprof__filter *filter,
                                      mlprof__out *o,
                                      mlprof__chrome_result *res, char *err,
                                      size_t errlen);

/* A format of the report, by name: "text", "json", "csv" (the zone table)
 * or "findings-csv". write renders an analysis run with findings when
 * findings is set (with the report alone otherwise: the zone table needs
 * neither samples nor findings). mlprof__report_format_find returns NULL
 * for an unknown name. */
typedef struct {
  const char *name;
  int (*write)(const mlprof__analysis *a, mlprof__out *o);
  int findings;
} mlprof__report_format;
const mlprof__report_format *mlprof__report_format_find(const char *name);

/* One frame of mlprof top, after its title line: the window's end on the
 * job's timeline and its length, processes, threads and spans, the steps'
 * rate and breakdown, GPU utilisation, tables of the processes, the five
 * busiest threads and the zones (a->r.order, by sort), the warnings that
 * show_warning accepts (NULL: all), and the three most severe findings.
 * Returns 0 or the writer's error. */
typedef struct {
  uint64_t job_ns;    /* the window's end, job time */
  uint64_t window_ns; /* its length */
  mlprof__sort_key sort;
  int (*show_warning)(void *ctx, const char *w, size_t n);
  void *ctx;
} mlprof__top_frame;
int mlprof__export_top_text(const mlprof__analysis *a,
                            const mlprof__top_frame *fr, mlprof__out *o);

/* The comparison as aligned text for a terminal: the runs (wall, spans,
 * steps, step time, ranks), then the first top zones (0: all) with each
 * run's count, mean, p50, p99 and speedups, the runs' warnings and the
 * recommendation. Returns 0, MLPROF_ENOMEM or the writer's error. */
int mlprof__export_compare_text(const mlprof__compare *c, size_t top,
                                mlprof__out *o);

/* The comparison as one JSON object of schema "mlprof.compare/1"
 * (docs/json-schema.md), every label, path and zone name escaped by
 * mlprof__out_json_str (so it can sit inside an HTML <script>). Returns 0
 * or the writer's error. */
int mlprof__export_compare_json(const mlprof__compare *c, mlprof__out *o);

#endif
