/* What the machine and the processes were doing: the samples of a job
 * summarised per subject (the system, each process, each GPU), the process
 * tree's totals, energy and carbon, and for each zone the samples that
 * overlap it (docs/sampling.md, docs/json-schema.md).
 *
 * Definitions:
 * - a measure's mean, min and max are over the valid, finite values of its
 *   rows; first and last are the earliest and latest on the job timeline. A
 *   measure that was never valid keeps the reason it was absent (the latest
 *   one).
 * - subjects are per host: the system of a host, a process (host + pid), a
 *   GPU (host + index); rows of the same subject from several profiles (each
 *   process sampling the system in-process) are merged.
 * - tree totals: in a profile that samples a process tree from outside (the
 *   one `mlprof run` writes), the rows of one tick are summed over the
 *   processes alive at that tick (rss_bytes, cpu_pct, threads,
 *   gpu_mem_bytes, read_bytes, write_bytes, open_files); mean and max are
 *   over ticks.
 * - energy: a cumulative counter (cpu_energy_j of a host's system,
 *   gpu_energy_j of a GPU) gives last minus first within the profile that
 *   sampled it; when several profiles sampled the same subject (in-process
 *   sampling in several processes), the largest such difference is taken,
 *   as they measured the same hardware. Summed over hosts and GPUs.
 *   carbon_g = energy in kWh x intensity (g CO2e per kWh:
 *   MLPROF_CARBON_G_PER_KWH, else a world average).
 * - zone samples: for each span, the samples of its own process (and the
 *   GPUs of its host) with times inside it, or, for a span shorter than the
 *   interval, the first sample after it, which covers it; weighted by span
 *   duration over all spans of the zone. rss change: RSS at the first sample
 *   at or after the end less RSS at the last sample at or before the begin.
 *   iowait: the host's cpu_iowait_pct, averaged the same way; runq wait:
 *   the process's runq_wait_pct, as cpu_pct. */
#ifndef MLPROF_RESOURCES_H
#define MLPROF_RESOURCES_H

#include <stddef.h>
#include <stdint.h>

#include "../model/job.h"
#include "../format/subject.h"

/* mlprof__subject_stats.subject of the tree totals. */
#define MLPROF__SUBJECT_TREE 255

typedef struct {
  const char *name;      /* owned by the mlprof__resources */
  uint64_t count;        /* valid, finite values */
  uint64_t absent_count; /* rows where it was absent */
  double mean, min, max, first, last;
  uint64_t first_ns, last_ns; /* job time of first and last */
  const char *absent; /* why it was missing, when count == 0; else NULL */
} mlprof__measure_stats;

typedef struct {
  uint8_t subject; /* mlprof__subject; MLPROF__SUBJECT_TREE for the tree */
  uint64_t id;
  const char *label; /* "" when none */
  const char *hostname;
  size_t profile; /* index in the job of the profile that sampled it */
  int process;    /* a process's own profile in the job (same host and
                     pid; of several, as exec makes them, the latest
                     to start before its last row), -1 when it has
                     none or is not a process */
  uint64_t rows;
  uint64_t first_ns, last_ns; /* job time of its first and last row */
  mlprof__measure_stats *m;   /* in order of first appearance */
  size_t nm;
} mlprof__subject_stats;

typedef struct {
  const char *name, *reason; /* reason: "" when available */
  const char *hostname;
  int available;
  size_t profile;  /* the first profile that reported this status */
  size_t profiles; /* how many profiles of that host reported it */
} mlprof__source_status;

typedef struct {
  const char *zone; /* name */
  size_t zone_len;
  int has_cpu, has_gpu, has_rss, has_iowait, has_runq;
  double cpu_pct, gpu_util_pct, rss_change_bytes;
  double iowait_pct;    /* the host's cpu_iowait_pct over the zone's spans */
  double runq_wait_pct; /* the process's runq_wait_pct, as cpu_pct */
} mlprof__zone_samples;

/* Columns of an mlprof__series; their meaning depends on the subject. */
#define MLPROF__NCOLS 4
enum {
  /* process */
  MLPROF__COL_CPU_PCT = 0, /* cpu_pct */
  MLPROF__COL_RSS = 1,     /* rss_bytes */
  MLPROF__COL_GPU_MEM = 2, /* gpu_mem_bytes (every 10th tick only) */
  MLPROF__COL_RUNQ = 3,    /* runq_wait_pct */
  /* GPU */
  MLPROF__COL_GPU_UTIL = 0,     /* gpu_util_pct */
  MLPROF__COL_GPU_MEM_USED = 1, /* gpu_mem_used_bytes */
  /* system */
  MLPROF__COL_IOWAIT = 0,        /* cpu_iowait_pct */
  MLPROF__COL_MEM_AVAILABLE = 1, /* mem_available_bytes */
  MLPROF__COL_SWAP_USED = 2,     /* swap_used_bytes */
  MLPROF__COL_IDLE = 3           /* cpu_idle_pct */
};

/* One subject's samples over time, for analyses that need more than the
 * summaries (leaks, bottlenecks): job times ascending, values NAN where the
 * measure was absent or not in that row. Owned by the mlprof__resources. */
typedef struct {
  uint8_t subject; /* MLPROF__SUBJECT_PROCESS, _GPU or _SYSTEM */
  const char *hostname;
  uint64_t id; /* pid, GPU index, 0 */
  size_t n;
  uint64_t *t;
  double *v[MLPROF__NCOLS];
} mlprof__series;

/* The first index of s with t >= x (s->n when none): the one lower-bound
 * search over samples. hint (may be NULL) holds the last answer of this
 * caller; the search gallops from it, so that a stream of times that
 * mostly ascends (spans as they are read) costs O(1) per call instead of
 * O(log n). */
size_t mlprof__series_lower(const mlprof__series *s, uint64_t x, size_t *hint);

typedef struct {
  int sampled;                     /* any SOURCES or SAMPLES chunk was read */
  mlprof__subject_stats *subjects; /* by host, then system, GPUs, processes */
  size_t nsubjects;
  mlprof__subject_stats tree;     /* nm == 0 when no tree was sampled;
                                     rows counts the ticks */
  size_t tree_processes;          /* distinct processes in the tree's rows */
  mlprof__source_status *sources; /* last status of each source, per host,
                                     identical ones merged */
  size_t nsources;
  size_t ngpus;           /* GPU subjects */
  const char *gpu_absent; /* no GPU subject: why (the nvml source's reason,
                             or "no GPU found"); NULL when there are GPUs */
  int has_cpu_energy, has_gpu_energy;
  double cpu_energy_j, gpu_energy_j, carbon_g, intensity_g_per_kwh;
  const char *cpu_energy_absent, *gpu_energy_absent; /* when not has_* */
  const char *cpu_energy_method, *gpu_energy_method;
  const char *intensity_source;
  mlprof__zone_samples *zones; /* zones with at least one measure,
                                  sorted by name (bytes) */
  size_t nzones;
  mlprof__series *series; /* processes, then GPUs, then systems */
  size_t nseries;
  /* internal */
  char **strings;
  size_t nstrings, strings_cap;
} mlprof__resources;

/* The builder, fed one profile at a time by the analysis driver
 * (analysis.h): begin, then for each profile of the job in order
 * profile_begin (fills *v with the callbacks to read it with: name, source,
 * sample), the read, profile_end; then finish, which completes *r but for
 * its zones (r->zones, the zone pass below). Damage in a file is not an
 * error here (the report shows it). begin returns NULL when out of memory;
 * the other steps return 0 or MLPROF_ENOMEM. finish and abort free the
 * builder; after a failure *r is empty. */
typedef struct mlprof__resources_builder mlprof__resources_builder;
mlprof__resources_builder *mlprof__resources_begin(mlprof__resources *r);
int mlprof__resources_profile_begin(mlprof__resources_builder *b,
                                    const mlprof__job_profile *p, size_t index,
                                    mlprof__visitor *v);
int mlprof__resources_profile_end(mlprof__resources_builder *b);
int mlprof__resources_finish(mlprof__resources_builder *b,
                             const mlprof__job *job);
void mlprof__resources_abort(mlprof__resources_builder *b);

/* The zone pass: the spans again, once r's samples are known (after
 * mlprof__resources_finish), to average them over each zone into r->zones.
 * begin sets *z to NULL when no process was sampled (no pass is needed),
 * else to a new pass; it returns 0 or MLPROF_ENOMEM. zones_profile returns
 * 1 and fills *v when profile p (its process or its host's GPUs) was
 * sampled, 0 when p need not be read for it. finish fills r->zones and
 * frees z: 0 or MLPROF_ENOMEM (then r->zones is left partial; free r). */
typedef struct mlprof__zone_pass mlprof__zone_pass;
int mlprof__resources_zones_begin(mlprof__resources *r, mlprof__zone_pass **z);
int mlprof__resources_zones_profile(mlprof__zone_pass *z,
                                    const mlprof__job_profile *p,
                                    mlprof__visitor *v);
int mlprof__resources_zones_finish(mlprof__zone_pass *z);
void mlprof__resources_zones_abort(mlprof__zone_pass *z);

void mlprof__resources_free(mlprof__resources *r);

/* The stats of measure name in s, or NULL. */
const mlprof__measure_stats *mlprof__subject_measure(
    const mlprof__subject_stats *s, const char *name);

/* The samples of zone name (len bytes), or NULL when none overlapped it. */
const mlprof__zone_samples *mlprof__resources_zone(const mlprof__resources *r,
                                                   const char *name,
                                                   size_t len);

/* "system", "process", "gpu", "tree" or "unknown". */
const char *mlprof__subject_name(uint8_t subject);

#endif
