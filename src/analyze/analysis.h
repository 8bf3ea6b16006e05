/* The analysis driver: the one place where a job's profiles are read for
 * analysis and where their records enter every analysis (statistics,
 * resources, findings with steps, leaks and latency objectives, call tree,
 * the timeline's level-of-detail pyramid).
 * Every front end (report, html, serve, compare, diff, the Python module)
 * calls mlprof__analysis_run and renders what it returns.
 *
 * Passes (docs/architecture.md): the first reads each profile once and feeds
 * the statistics, the samples, the tree and the pyramid through one
 * visitor. A second
 * read of the spans is made only when an analysis needs the first pass's
 * results while it reads them: the findings (the samples' series over each
 * span) and the resources' zone averages (the same, only when some process
 * was sampled). So a report of zones reads each profile once, a dashboard
 * twice. A job whose spans outgrow the statistics' budget of raw durations
 * (stats.h) is read again between the two, by the statistics alone, once or
 * more, for its exact percentiles. */
#ifndef MLPROF_ANALYSIS_H
#define MLPROF_ANALYSIS_H

#include <stddef.h>

#include "../model/job.h"
#include "filter.h"
#include "findings.h"
#include "flame.h"
#include "lod.h"
#include "resources.h"
#include "stats.h"
#include "tree.h"

/* The analyses a caller wants (mlprof__analysis_opts.want). */
enum {
  MLPROF__ANALYSIS_STATS = 1,     /* the report: zones, processes, threads */
  MLPROF__ANALYSIS_RESOURCES = 2, /* the samples' summary */
  MLPROF__ANALYSIS_FINDINGS = 4,  /* needs, so implies, the two above */
  MLPROF__ANALYSIS_TREE = 8,      /* the dashboard's tree and series */
  MLPROF__ANALYSIS_LOD = 16,      /* the span timeline's pyramid */
  MLPROF__ANALYSIS_FLAME = 32     /* the dashboard's stack samples; implies
                                     the statistics (the hot functions) */
};

typedef struct {
  unsigned want; /* MLPROF__ANALYSIS_* or'ed */
  /* Keep each zone's sorted durations (mlprof__zone_stats.durations). */
  int keep_durations;
  /* Raw durations the statistics hold at most (mlprof__stats_budget);
   * mlprof__analysis_opts_init sets MLPROF__STATS_BUDGET. */
  size_t durations_budget;
  mlprof__findings_opts findings; /* latency objectives, leak thresholds */
  /* The zones to show (mlprof__report_sort), applied after the findings,
   * which use every zone. */
  mlprof__sort_key sort;
  size_t top; /* 0: all */
  /* What enters the analyses and which zones the report and the call tree
   * keep (filter.h; borrowed), or NULL: everything. Zones not shown are
   * removed from the report and the tree after the findings, which use
   * every zone. The pyramid keeps it for its windows: with
   * MLPROF__ANALYSIS_LOD it must outlive the analysis. */
  const mlprof__filter *filter;
  /* 1 (mlprof__analysis_opts_init): a filter that matches nothing is an
   * error (MLPROF_EINVAL, the reason in err); 0 for live views, where what
   * it matches may not have run yet. */
  int filter_must_match;
  size_t lod_items; /* the pyramid's items at most (lod.h); 0: no cap */
  /* With MLPROF__ANALYSIS_FLAME: every row and node kept
   * (mlprof__flame_uncapped), for exports of every stack. */
  int flame_uncapped;
} mlprof__analysis_opts;

/* The statistics alone, findings options at their defaults, every zone by
 * total. */
void mlprof__analysis_opts_init(mlprof__analysis_opts *o);

typedef struct {
  unsigned have; /* the analyses built: want and what it implies */
  mlprof__report r;
  mlprof__resources res;
  mlprof__findings f;
  mlprof__tree tree;
  mlprof__lod lod;
  mlprof__flame flame;
  size_t reads; /* profile files read, for tests and benchmarks */
} mlprof__analysis;

/* Reads the profiles of job as the wanted analyses need and fills *a (the
 * caller's, any content). Damage and a read that stops part-way are not
 * errors: the report records them in its processes and warnings. Returns 0,
 * MLPROF_ENOMEM with "out of memory" in err, or MLPROF_EINVAL when the
 * filter matches nothing (opts->filter_must_match) with a line saying which
 * options and what the job has in err; *a then needs no
 * mlprof__analysis_free (it is empty). */
int mlprof__analysis_run(const mlprof__job *job,
                         const mlprof__analysis_opts *opts, mlprof__analysis *a,
                         char *err, size_t errlen);

/* Frees what mlprof__analysis_run built; *a is left empty. */
void mlprof__analysis_free(mlprof__analysis *a);

#endif
