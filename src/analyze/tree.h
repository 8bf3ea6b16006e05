/* What the dashboard draws beyond the report's aggregates, gathered in one
 * streaming pass over every profile of a job (nothing per span is kept):
 *
 * - the zone call tree: zone name paths (outermost first, per thread, by
 *   nesting depth) with their summed duration and count, merged over
 *   threads and processes. A node's total is the time of its spans; its
 *   self time is that less its children's totals.
 * - time series of sampled measures (CPU, memory, GPU, power, temperature;
 *   per host and subject) and of counters, job time ascending.
 * - step marks of the thread with the most marks, and per step (from a mark
 *   to the next mark or step end) the self
 *   time of that thread's zones by part of a step (data, forward, backward,
 *   optimizer, communication, other: a zone's category, else words of its
 *   name, else the part of the zone enclosing it), in at most
 *   MLPROF__TREE_STEP_BUCKETS buckets of consecutive steps.
 *
 * Spans nested deeper than MLPROF__TREE_MAX_DEPTH are left out of the tree;
 * the tree keeps at most MLPROF__TREE_MAX_NODES nodes (a node past that is
 * counted in its parent). */
#ifndef MLPROF_TREE_H
#define MLPROF_TREE_H

#include <stddef.h>
#include <stdint.h>

#include "../model/job.h"
#include "findings.h"

#define MLPROF__TREE_MAX_DEPTH 256
#define MLPROF__TREE_MAX_NODES 1000000
#define MLPROF__TREE_STEP_BUCKETS 512
#define MLPROF__TREE_MAX_COUNTERS 64
/* Step marks kept for the dashboard: as many points as it draws
 * (MLPROF__HTML_MAX_POINTS). */
#define MLPROF__TREE_MAX_MARKS 2000

typedef struct {
  uint32_t name;   /* index into mlprof__tree.names */
  uint32_t parent; /* index of the parent node; UINT32_MAX at the top */
  uint64_t total_ns, count;
} mlprof__tree_node;

/* Subject of a counter series (beside mlprof__subject's system, process,
 * GPU). */
#define MLPROF__TREE_COUNTER 3

typedef struct {
  uint8_t subject;  /* mlprof__subject, or MLPROF__TREE_COUNTER */
  uint64_t id;      /* pid, GPU index, 0 */
  uint32_t host;    /* index into names ("" when unknown) */
  uint32_t label;   /* index into names: command, GPU model, "" */
  uint32_t measure; /* index into names: the measure or counter name */
  size_t n, cap;
  uint64_t *t; /* job time, ascending after mlprof__tree_finish */
  double *v;
} mlprof__tree_series;

typedef struct {
  uint64_t first_step, steps;       /* steps in the bucket */
  uint64_t part_ns[MLPROF__NPARTS]; /* summed over its steps */
} mlprof__tree_step_bucket;

typedef struct {
  char **names; /* every distinct string met: zone, measure, host, label */
  size_t *name_lens;
  size_t nnames;
  /* Per name: the category of its zones as the report gives it (the first
   * one not none), none for other names. */
  uint8_t *categories;
  mlprof__tree_node *nodes; /* parents before children */
  size_t nnodes;
  mlprof__tree_series *series;
  size_t nseries;
  /* Job times of the step marks of the busiest thread: of its n marks, the
   * i-th of k = min(n, MLPROF__TREE_MAX_MARKS) is mark n * i / k. */
  uint64_t *marks;
  size_t nmarks;
  mlprof__tree_step_bucket *buckets; /* complete steps only */
  size_t nbuckets;
  uint64_t spans; /* spans read */
  /* internal */
  size_t names_cap, nodes_cap, series_cap;
} mlprof__tree;

/* The builder, fed one profile at a time by the analysis driver
 * (analysis.h): begin, then for each profile of the job in order
 * profile_begin (fills *v with the callbacks to read it with), the read,
 * profile_end; then finish. A read that stops early (damage, a file gone)
 * keeps what it gave. begin returns NULL when out of memory; profile_end and
 * finish return 0 or MLPROF_ENOMEM. finish and abort free the builder; after
 * a failure or abort *t is empty. Release *t with mlprof__tree_free. */
typedef struct mlprof__tree_builder mlprof__tree_builder;
mlprof__tree_builder *mlprof__tree_begin(mlprof__tree *t);
void mlprof__tree_profile_begin(mlprof__tree_builder *b,
                                const mlprof__job_profile *p,
                                mlprof__visitor *v);
int mlprof__tree_profile_end(mlprof__tree_builder *b);
int mlprof__tree_finish(mlprof__tree_builder *b);
void mlprof__tree_abort(mlprof__tree_builder *b);

void mlprof__tree_free(mlprof__tree *t);

/* Picks at most max indices (max >= 4) of the n points v (by time) to draw
 * a series at a glance: for each of max/2 equal runs of points, its minimum
 * and its maximum, in time order, so spikes survive. Writes them to idx and
 * returns how many; all of them when n <= max. */
size_t mlprof__downsample(const double *v, size_t n, size_t max, size_t *idx);

#endif
