/* Reports in the Prometheus text exposition format (version 0.0.4), for
 * scraping long jobs through mlprof serve's /metrics.
 *
 * Families (each once, with every run's series under it):
 * - mlprof_run_wall_seconds, mlprof_run_spans, mlprof_run_dropped_events,
 *   mlprof_run_processes, mlprof_run_zones: gauges per run.
 * - mlprof_zone_duration_seconds: a summary per zone (labels run, zone,
 *   category) with the exact quantiles 0.5, 0.9, 0.95, 0.99, _sum, _count.
 * - mlprof_zone_self_seconds: gauge per zone.
 * - mlprof_system_<measure>, mlprof_gpu_<measure>, mlprof_process_<measure>:
 *   the latest sampled value (labels run, host, and gpu or pid with label);
 *   mlprof_tree_<measure>: the process tree's total, mean over ticks.
 *   Measure names are sanitised to [a-zA-Z0-9_], units spelled out
 *   (cpu_user_s: cpu_user_seconds, disk_read_bytes_s:
 *   disk_read_bytes_per_second).
 * - mlprof_rank_<figure>: per rank of a distributed job (labels run, rank,
 *   host; docs/distributed.md): steps, run, compute, exposed communication,
 *   waiting, asynchronous communication, overlap (seconds over its steps),
 *   straggler steps, and mlprof_rank_straggler (1 for the straggler
 *   overall, else 0); mlprof_dist_load_balance, _communication_efficiency,
 *   _parallel_efficiency per run. None for a run without ranks.
 * Label values are escaped (backslash, quote, newline) and made valid UTF-8,
 * so a zone name cannot break the format. */
#ifndef MLPROF_PROM_H
#define MLPROF_PROM_H

#include <stddef.h>

#include "../analyze/dist.h"
#include "../analyze/resources.h"
#include "../analyze/stats.h"
#include "escape.h"

typedef struct {
  const char *run; /* the run label's value */
  const mlprof__report *r;
  const mlprof__resources *res; /* may be NULL */
  const mlprof__dist *dist;     /* may be NULL: no ranks */
} mlprof__prom_run;

/* Writes the metrics of n runs. Returns 0, MLPROF_ENOMEM or the writer's
 * error. */
int mlprof__export_prom(const mlprof__prom_run *runs, size_t n, mlprof__out *o);

#endif
