/* The dashboard's stack samples: each sample of the hot functions (hot.h)
 * kept with what the dashboard filters its flame graph by (the innermost
 * zone, the step, the process, the thread; the rank is the process's), as
 * rows of samples that share all of them, and a bounded selection of the
 * samples themselves with their times for the span timeline.
 *
 * Bounded for any run: rows at most MLPROF__FLAME_ROWS, stacks cut to the
 * MLPROF__FLAME_NODES largest nodes, samples on the timeline at most
 * MLPROF__FLAME_MARKS (docs/guide.md, "Stacks" view, says what each cap
 * drops). */
#ifndef MLPROF_FLAME_H
#define MLPROF_FLAME_H

#include <stddef.h>
#include <stdint.h>

#include "../model/job.h"
#include "hot.h"

/* Rows in the result at most (about 40 bytes each in a page). */
#define MLPROF__FLAME_ROWS 16384
/* Stack nodes the rows name at most: the largest by total time. */
#define MLPROF__FLAME_NODES 5000
/* Samples kept with their times at most (about 12 bytes each in a page). */
#define MLPROF__FLAME_MARKS 30000
/* A row's node when its stack was in none of the nodes kept (a root too
 * small to keep, with all it called). */
#define MLPROF__FLAME_OTHER (MLPROF__NONE - 1)

/* Samples of one stack in one zone, thread and bucket of steps. */
typedef struct {
  uint32_t node;     /* the hot nodes' index; MLPROF__NONE: no Python frame;
                        MLPROF__FLAME_OTHER */
  uint32_t zone;     /* hot zone_names' index, 0: no zone */
  uint32_t thread;   /* threads' index */
  uint32_t step;     /* step / step_width; MLPROF__NONE: in no step */
  uint64_t n, n_cpu; /* samples; those on a CPU */
  uint64_t wall_ns, cpu_ns; /* the time they stand for; on a CPU */
} mlprof__flame_row;

typedef struct {
  uint64_t pid;
  int64_t rank; /* -1: unknown */
  char *name;   /* the process's (job.h) */
} mlprof__flame_proc;

typedef struct {
  uint32_t proc; /* procs' index */
  uint32_t tid;
  char *name; /* "" when the profile named it not */
} mlprof__flame_thread;

/* A sample on the timeline: job ns, thread, node (as a row's), on a CPU. */
typedef struct {
  uint64_t t;
  uint32_t thread, node;
  int on_cpu;
} mlprof__flame_mark;

typedef struct {
  mlprof__flame_row *rows; /* by thread, zone, step, node */
  size_t nrows;
  mlprof__flame_proc *procs;
  size_t nprocs;
  mlprof__flame_thread *threads;
  size_t nthreads;
  mlprof__flame_mark *marks; /* by thread, then time */
  size_t nmarks;
  uint64_t samples;     /* every sample counted */
  uint64_t mark_stride; /* marks: one sample in mark_stride (1: all) */
  uint64_t step_width;  /* steps per bucket (a row's step), 1 or more */
  uint64_t steps;       /* the most steps of a process (0: no step) */
  uint32_t nodes_cap;   /* the nodes kept at most (MLPROF__FLAME_NODES, or
                           fewer when the rows needed it) */
  /* Samples whose stack was cut to the nearest node kept (the time stays
   * in that caller), and those of rows left out past MLPROF__FLAME_ROWS
   * (the last resort; their time is missing). */
  uint64_t merged, merged_ns, dropped, dropped_ns;
} mlprof__flame;

typedef struct mlprof__flame_builder mlprof__flame_builder;

/* A builder filling *out (zeroed here) from hb's samples (it sets hb's
 * sink), for the profiles of job, which must outlive the builder. NULL when
 * memory is short. */
mlprof__flame_builder *mlprof__flame_begin(mlprof__flame *out,
                                           mlprof__hot_builder *hb,
                                           const mlprof__job *job);
/* The visitor that reads profile i's thread names and step marks. */
void mlprof__flame_profile_begin(mlprof__flame_builder *b, size_t i,
                                 mlprof__visitor *v);
/* Adds the profile's samples (after mlprof__hot_profile_end). 0 or
 * MLPROF_ENOMEM. */
int mlprof__flame_profile_end(mlprof__flame_builder *b);
/* Keeps every row and node: no cap, no step grouped (mlprof export
 * --format pprof, which writes every stack). Before the first profile. */
void mlprof__flame_uncapped(mlprof__flame_builder *b);
/* Applies the caps with h's nodes (the finished hot functions of the same
 * read) and frees b: 0, or MLPROF_ENOMEM with *out freed. b may be NULL. */
int mlprof__flame_finish(mlprof__flame_builder *b, const mlprof__hot *h);
/* Frees b and what it built, after a failure elsewhere. NULL is fine. */
void mlprof__flame_abort(mlprof__flame_builder *b);
void mlprof__flame_free(mlprof__flame *f);

#endif
