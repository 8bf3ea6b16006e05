/* The HTML dashboard: one self-contained page (inline CSS and hand-written
 * JavaScript, charts drawn as inline SVG, no request to anywhere) that
 * renders the JSON report plus what the dashboard draws beyond it: the zone
 * call tree (flame graph), downsampled time series (CPU, memory, GPU,
 * power, counters) with step marks, and the step-time breakdown.
 *
 * The data sits in the page as JSON inside <script type="application/json">:
 * every string is escaped by mlprof__out_json_str, whose output holds no
 * '<', '>' or '&', so no profile string can end the element. The script puts
 * strings into the page as text, never as markup. A Content-Security-Policy
 * forbids every load but the page's own inline code (and, live, requests to
 * the server it came from). */
#ifndef MLPROF_HTML_H
#define MLPROF_HTML_H

#include "../analyze/compare.h"
#include "../analyze/findings.h"
#include "../analyze/flame.h"
#include "../analyze/hot.h"
#include "../analyze/lod.h"
#include "../analyze/resources.h"
#include "../analyze/stats.h"
#include "../analyze/tree.h"
#include "../model/job.h"
#include "diff.h"
#include "escape.h"

/* Points per time series at most (min and max of equal runs of samples). */
#define MLPROF__HTML_MAX_POINTS 2000
/* Nodes of the call tree in the page at most (the largest by total). */
#define MLPROF__HTML_MAX_NODES 5000
/* Process series in the page at most (the processes with the largest RSS). */
#define MLPROF__HTML_MAX_PROCESSES 16
/* Memory allocation sites in the page at most (html_memory.c): the leaks
 * and the largest at the peak, then the largest allocators; the rest of a
 * process's sites summed into one. */
#define MLPROF__HTML_MEM_SITES 2000
/* Step marks per process in the page's memory data at most (evenly
 * picked). */
#define MLPROF__HTML_MEM_STEPS 1000
/* Sites per group of steps (mlprof__mem_group) in the page at most: the
 * largest, the others of the group summed into one. */
#define MLPROF__HTML_MEM_STEP_SITES 100
/* A zone's distribution in the page: its percentiles 0, 100 / STEPS, ...,
 * 100 (nearest rank, stats.h). */
#define MLPROF__HTML_DIST_STEPS 20

/* What mlprof diff found between two runs, for the page's Diff view (the
 * arguments of mlprof__export_diff_json). */
typedef struct {
  const mlprof__diff *d;
  const mlprof__diff_options *opt;
  const char *bpath, *npath;
  const mlprof__report *base, *next; /* built keeping durations */
} mlprof__html_diff;

typedef struct {
  const char *title;    /* page title; NULL: "mlprof report" */
  const char *data_url; /* live page: the URL it polls every second for its
                           data (mlprof__export_html_data); NULL: a static
                           file that makes no request */
  const mlprof__compare *compare; /* finished, two runs or more: the page's
                                     Compare view; NULL: no such view */
  const mlprof__html_diff *diff;  /* the page's Diff view; NULL: none */
  const mlprof__lod *lod;         /* the span timeline's pyramid; NULL: none */
  /* live page: the URL that answers a window of the timeline
   * (mlprof__export_timeline_json), ?t0=&t1=&res= appended; NULL: none */
  const char *timeline_url;
  /* live page: the URL that answers a span's details
   * (mlprof__export_span_json), ?track=&t0=&t1= appended; NULL: none */
  const char *span_url;
  /* The stack samples' attribution (flame.h) for the page's Stacks view and
   * the samples on the span timeline; NULL: none. */
  const mlprof__flame *flame;
} mlprof__html_opts;

/* The page's data as one JSON object: {"report": the JSON report
 * (mlprof__export_json_page, with the findings f when not NULL), "tree":
 * {"names":
 * [...], "nodes": [[name, parent
 * (-1 at the top), total_ns, count], ...]}, "series": [{"subject", "id",
 * "host", "label", "measure", "t": [job ns...], "v": [...]}], "marks": [job
 * ns of step marks], "step_buckets": [[first step, steps, data, forward,
 * backward, optimizer, communication, other ns summed over the steps]],
 * "title", "live", "data_url", "compare": mlprof__export_compare_json of
 * opts->compare, or null, "compare_dist": per zone of "compare", per run,
 * the zone's distribution or null, "diff": mlprof__export_diff_json of
 * opts->diff, or null, "diff_dist": per zone of "diff", [base, new]
 * distributions, "timeline": mlprof__export_timeline_json of opts->lod with
 * at most MLPROF__DASH_LOD_ITEMS items (and args in at most
 * MLPROF__DASH_LOD_ARGS_BYTES when the page is static), or null,
 * "timeline_url", "span_url", "memory": mlprof__export_html_memory,
 * "stacks": mlprof__export_html_stacks of the report's hot functions and
 * opts->flame}. A
 * distribution is the zone's percentiles 0, 5, ..., 100
 * of its durations in ns (MLPROF__HTML_DIST_STEPS + 1 values), null when
 * the run has no such zone or its durations were not kept. tree may be NULL:
 * then the series come from res (per process CPU, RSS, GPU memory; per GPU
 * utilization and memory) and there is no call tree, marks or step breakdown.
 * Returns 0 or the writer's error. */
int mlprof__export_html_data(const mlprof__report *r,
                             const mlprof__resources *res,
                             const mlprof__findings *f,
                             const mlprof__tree *tree,
                             const mlprof__html_opts *opts, mlprof__out *o);

/* The page's "memory" (docs/memory.md), or null when no process recorded
 * allocations: {"exact", "processes": [{"pid", "cuda_device" (only for
 * a CUDA device's memory, a process entry of its own), "exact", "peak_bytes",
 * "peak_ns" (job ns), "allocated_bytes", "live_end_bytes", "t": [job ns],
 * "v": [live bytes] (at most MLPROF__MEM_SERIES + 1 points, each the
 * highest of its stretch of time; the peak among them), "steps": [job ns of
 * step marks, at most MLPROF__HTML_MEM_STEPS], "step_groups": [[first step
 * (1: the step the first mark begins), steps, t0, t1 (job ns), peak bytes,
 * peak ns]] (mlprof__mem_group)}] (the
 * MLPROF__HTML_MAX_PROCESSES with the largest peaks, largest first),
 * "zones": [zone names; "" outside any], "sites": [[process (index in
 * "processes"), zone (index in "zones"), bytes at the process's peak,
 * allocated, count, live at the end, leak bytes per step (0: no leak),
 * [frame ids, outermost first], its index in the report's memory.sites
 * (mlprof__export_json's: the page's report leaves them out), the program's
 * Python lines and the native frame as the report names them ("": none)]]
 * (at most MLPROF__HTML_MEM_SITES), "other": per process [at peak, allocated,
 * count, live at end] of the sites left out, "other_sites": how many,
 * "step_sites": [[process, group (index in its "step_groups"), site (index
 * in "sites"; -1: the group's sites left out, summed), allocated there,
 * count, bytes at the group's peak]] (at most MLPROF__HTML_MEM_STEP_SITES
 * sites per group), "frames":
 * [frame texts, "file:line function" or "[symbol+0xOFF]"]}. Returns 0,
 * MLPROF_ENOMEM or the writer's error. */
int mlprof__export_html_memory(const mlprof__report *r, mlprof__out *o);

/* The pyramid l for the time window [t0, t1) of the job: {"names": [...],
 * "tracks": [[pid, rank (-1: unknown), process name, tid, thread name,
 * depth]...] (names as indices into names), "levels": [{"res": ns,
 * "items": [[track, begin, duration, zone name, count, busy ns, begin,
 * ...]...]}...], "args": [[track, begin, end, metadata, units]...],
 * "args_missed": n}: the levels from the coarsest down to the coarsest of
 * resolution at most res (0: down to the finest kept), while they hold at
 * most max_items items in the window together, and down to the first that
 * merges no span in the window ("exact": true; the finer ones are the
 * same); an item's begin is the
 * previous item's in the array plus the number written (the first: job
 * ns). "args" (when args_bytes is not 0): the metadata ([["key", "value"]
 * ...]) and units ([["unit", n]...]) of the spans of the finest level
 * written that have some, or null when they take more than args_bytes.
 * "args_missed" (when not 0): metadata entries and units the pyramid did
 * not keep (its cap). "coarser": true when the finest level written merges
 * spans in the window and is coarser than the one res asks for (l does not
 * hold it, or max_items stopped the levels): zoomed in, a narrower window
 * has them. Returns 0 or the writer's error. */
int mlprof__export_timeline_json(const mlprof__lod *l, uint64_t t0, uint64_t t1,
                                 uint64_t res, size_t max_items,
                                 size_t args_bytes, mlprof__out *o);

/* The details of the span [begin, end) (job ns) of the pyramid's track:
 * {"self_ns": its duration less its children's (from the finest level),
 * "args": [metadata, units] as in mlprof__export_timeline_json,
 * "args_missed": n}. Returns 0, MLPROF_EINVAL when there is no such track
 * or end < begin, or the writer's error. */
int mlprof__export_span_json(const mlprof__lod *l, size_t track, uint64_t begin,
                             uint64_t end, mlprof__out *o);

/* The stack samples of h as f attributes them, or null when there are none
 * (f NULL included): {"interval_ns", "samples", "unresolved", "steps" (the
 * most steps of a process), "step_width" (steps per bucket), "nodes_cap",
 * "merged", "merged_ns", "dropped", "dropped_ns", "mark_stride" (flame.h),
 * "files": [...], "funcs": [file, name, first line, ...], "nodes": [parent
 * (-1: a root), func, line, ...] (parents first), "zones": ["", ...] (0: no
 * zone), "procs": [[pid, rank (-1: none), name]...], "threads": [[proc, tid,
 * name]...], "rows": [node (-1: no Python frame), zone, thread, step bucket
 * (-1: no step), samples, samples on a CPU, ns, ns on a CPU, ...], "marks":
 * [[thread, job ns, code, ns since the previous, code, ...]...] with code
 * (node + 1) * 2 + 1 when on a CPU}. Flat arrays hold their tuples one
 * after the other. Returns 0 or the writer's error. */
int mlprof__export_html_stacks(const mlprof__hot *h, const mlprof__flame *f,
                               mlprof__out *o);

/* The whole page with that data inside. Returns 0 or the writer's error. */
int mlprof__export_html_page(const mlprof__report *r,
                             const mlprof__resources *res,
                             const mlprof__findings *f,
                             const mlprof__tree *tree,
                             const mlprof__html_opts *opts, mlprof__out *o);

/* The page for a report without a call tree (no flame graph, no step
 * breakdown; series from res). */
int mlprof__export_html(const mlprof__report *r, const mlprof__resources *res,
                        const mlprof__findings *f, mlprof__out *o);

#endif
