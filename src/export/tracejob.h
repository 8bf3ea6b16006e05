/* What the trace exporters (chrome.c, perfetto.c) share: the processes a job
 * is drawn as. Each profile is a process, keyed by its pid where no other
 * profile has it; what was sampled but is not a profiled process (the
 * system, each GPU, a process without a profile) is a pseudo-process of its
 * own. */
#ifndef MLPROF_TRACEJOB_H
#define MLPROF_TRACEJOB_H

#include <stddef.h>
#include <stdint.h>

#include "../analyze/filter.h"
#include "../base/base.h"
#include "../model/job.h"
#include "export.h"

/* Pseudo-processes for what is not a profiled process; above any Linux pid
 * (2^22) and any pid given to profiles sharing one (2^22 + job index). */
#define MLPROF__TRACE_SYSTEM_PID(host) ((1ull << 23) + (host))
#define MLPROF__TRACE_GPU_PID(host, index) \
  ((1ull << 24) + ((uint64_t)(host) << 16) + ((index)&0xffffu))
#define MLPROF__TRACE_UNPROFILED_PID (1ull << 30)

typedef struct {
  const mlprof__job *job;
  uint64_t *tpids;        /* trace pid of each profile */
  size_t *hosts;          /* host index of each profile */
  int *next_same;         /* next profile (job order) of the same host, pid */
  mlprof__map first_of;   /* host << 32 | pid -> first profile with them */
  mlprof__map unprofiled; /* host << 32 | pid -> n: UNPROFILED_PID + n */
  uint64_t next_pseudo;   /* n for the next process without a profile */
} mlprof__trace_plan;

/* Every profile's trace pid and host index, and the profiles of each host
 * and pid, before any event: samples of one profile (`mlprof run`'s) are
 * drawn under the processes of others. Returns 0 or MLPROF_ENOMEM; either
 * way mlprof__trace_plan_free frees what it holds. */
int mlprof__trace_plan_init(mlprof__trace_plan *plan, const mlprof__job *job);
void mlprof__trace_plan_free(mlprof__trace_plan *plan);

/* The trace pid of process pid of host at job time t: the profile of that
 * pid which started last before t (exec keeps a pid), or a pseudo-process of
 * its own when it wrote no profile; *fresh is set to 1 when that
 * pseudo-process is new (the caller names it "pid N ..."), else 0. *rc gets
 * MLPROF_ENOMEM when memory is short. */
uint64_t mlprof__trace_process_pid(mlprof__trace_plan *plan, size_t host,
                                   uint64_t pid, uint64_t t, int *fresh,
                                   int *rc);

/* The name a profile's process is shown with ("rank R (host)", "name pid
 * (rank R)", "name pid") in label, and its place among the processes in
 * *order: ranks first in rank order, then the job's other processes. */
void mlprof__trace_process_label(const mlprof__job *job, size_t index,
                                 char *label, size_t size, size_t *order);

/* The profile a trace exporter is reading, set by mlprof__trace_walk before
 * its begin: the profile, its trace pid and host index (the plan's), and
 * its END chunk's time once read (end_seen; the exporter sets them). */
typedef struct {
  const mlprof__job_profile *prof;
  uint64_t pid, end_ns;
  int end_seen;
  size_t host;
} mlprof__trace_at;

/* What a trace exporter does around each profile's read (mlprof__trace_walk):
 * at is set, then begin is called before it (index: the profile's), finish
 * after it with what the read found; each returns 0, MLPROF_ENOMEM or the
 * output's error. */
typedef struct {
  void *ud;
  mlprof__trace_at *at;
  int (*begin)(void *ud, size_t index);
  int (*finish)(void *ud, const mlprof__read_report *rep);
} mlprof__trace_emitter;

/* The walk both trace exporters (chrome.c, perfetto.c) make over job, placed
 * by plan: filter (may be
 * NULL) prepared for job, its warning in res (may be NULL); every profile read
 * through v, filtered, between e's begin and finish; what each read found
 * in res->reads and res->read_errors when given; a filter whose zones match
 * none of the run's refused. Returns 0, MLPROF_ENOMEM, MLPROF_EINVAL or o's
 * error, with a one-line reason in err. */
int mlprof__trace_walk(const mlprof__job *job, const mlprof__trace_plan *plan,
                       const mlprof__filter *filter, const mlprof__visitor *v,
                       const mlprof__trace_emitter *e, mlprof__out *o,
                       mlprof__chrome_result *res, char *err, size_t errlen);

/* A profile's live bytes (its allocation records replayed in time order, as
 * docs/memory.md says), drawn by both exporters as the counter
 * MLPROF__TRACE_LIVE_NAME: the highest value of each millisecond, so that a
 * peak shows whatever the number of records. Folded allocations
 * (allocated and freed within one flush) are not read: they add nothing to
 * the live bytes at any flush, nor at the peaks, whose allocations the
 * writer keeps one by one. */
#define MLPROF__TRACE_LIVE_NAME "live bytes (allocations)"

typedef struct {
  uint64_t t, addr, weight; /* weight 0: a free */
  uint64_t seq;
} mlprof__trace_mem;

typedef struct {
  mlprof__trace_mem *rec;
  size_t n, cap;
} mlprof__trace_live;

/* An allocation record of the profile being read (mlprof__visitor's alloc
 * and alloc_free); a track's (a CUDA device's, another address space) is
 * left out. Returns 0 or MLPROF_ENOMEM. */
int mlprof__trace_live_alloc(mlprof__trace_live *l, const mlprof__alloc *a);
int mlprof__trace_live_free_at(mlprof__trace_live *l, uint32_t tid, uint64_t t,
                               uint64_t addr);

/* Calls point(ud, t, bytes) for each millisecond with records, t its start
 * in the profile's time, in order; then empties l for the next profile.
 * Returns 0 or MLPROF_ENOMEM. */
int mlprof__trace_live_replay(mlprof__trace_live *l,
                              void (*point)(void *ud, uint64_t t,
                                            uint64_t bytes),
                              void *ud);

#endif
