/* Filters: which records of a job enter an analysis or an export, and which
 * zones are shown (docs/guide.md, "Filters").
 *
 * Two kinds, with different effects on the numbers:
 * - zone filters (zone and exclude patterns, categories) choose which zones
 *   are shown. Every span still counts where it is nested: a parent's self
 *   time, the step breakdown and the findings are those of the whole job.
 *   The analysis driver applies them to the finished report and call tree
 *   (the tree keeps the subtrees of the zones shown, without the excluded
 *   zones); the trace leaves the spans of the other zones out.
 * - record filters (processes, threads, tracks, ranks, steps, a time window)
 *   choose which records enter at all: spans (by their begin), zones still
 *   open, counters, units, step marks and samples. The analysis then sees
 *   the job as if nothing else had been recorded, so a span whose children
 *   fall outside a window has them in its self time.
 *
 * Steps are those of a process's thread with the most step marks, as the
 * analyses count them (marks.h), numbered from 0: step k runs from mark k to
 * the next mark or step end. Steps A:B select, per process, the time from
 * the begin of step A to the end of step B-1 (B open, or step B-1 never
 * ended: to the profile's end); a gap after a step end within is kept. A
 * process without step marks takes its nearest ancestor's steps; with none, it
 * is left out (and a warning says so). */
#ifndef MLPROF_FILTER_H
#define MLPROF_FILTER_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "../format/reader.h"
#include "../model/job.h"

/* What a selector matches. */
enum {
  MLPROF__SEL_ZONE,    /* a zone name (a glob, fnmatch(3)) */
  MLPROF__SEL_EXCLUDE, /* a zone name not to show (a glob) */
  MLPROF__SEL_PROCESS, /* a pid, or a process name (a glob) */
  MLPROF__SEL_THREAD,  /* a tid, or a thread name (a glob) */
  MLPROF__SEL_TRACK,   /* PROCESS/THREAD: one process's threads */
  MLPROF__SEL_RANK,    /* a rank (a number) */
  MLPROF__NSEL,
  /* The options that set the other fields (mlprof__filter_add). */
  MLPROF__FILTER_CATEGORY = MLPROF__NSEL, /* a category's name */
  MLPROF__FILTER_STEPS,                   /* A:B, steps from 0 */
  MLPROF__FILTER_SKIP_WARMUP,             /* N: the same as steps N: */
  MLPROF__FILTER_WINDOW,                  /* T0:T1, durations with a unit */
  MLPROF__FILTER_NKINDS
};

typedef struct {
  int kind;
  const char *s; /* borrowed: the caller keeps it alive */
} mlprof__selector;

/* A filter, empty when zeroed (every record, every zone). Selectors of one
 * kind are alternatives; kinds, steps and the window must all hold. */
typedef struct {
  mlprof__selector *sel; /* owned (mlprof__filter_free) */
  size_t nsel, cap;
  unsigned categories; /* 1 << mlprof_category for each one shown; 0: all */
  int steps;           /* 1: only steps step_from to step_to (exclusive) */
  uint64_t step_from, step_to; /* step_to UINT64_MAX: to the end */
  int window;                  /* 1: only records that begin in [t0, t1) */
  uint64_t t0, t1;             /* job time, ns; t1 UINT64_MAX: open */
  uint64_t min_ns;             /* spans shorter than this are left out */
} mlprof__filter;

/* Adds to f what the filter option kind (a selector or MLPROF__FILTER_*)
 * says with its argument s, as the command line's --zone, --steps, ...
 * spell it (docs/guide.md, "Filters"): the one parser of these options, for
 * the CLI and the Python module. A selector borrows s. Returns 0, or
 * MLPROF_ENOMEM, or MLPROF_EINVAL with a one-line reason in err naming the
 * command-line option (a track without '/', steps 5:3, an unknown
 * category); f is then unchanged. */
int mlprof__filter_add(mlprof__filter *f, int kind, const char *s, char *err,
                       size_t errlen);
void mlprof__filter_free(mlprof__filter *f);

/* Whether f has any record filter (then a job must be prepared) or any
 * zone filter. */
int mlprof__filter_records(const mlprof__filter *f);
int mlprof__filter_zones(const mlprof__filter *f);

/* Whether a zone of this name and category is shown: the zone patterns
 * (any) and categories select it, and no exclude pattern matches it. */
int mlprof__filter_zone(const mlprof__filter *f, const char *name,
                        uint8_t category);
/* Whether an exclude pattern matches the zone name. */
int mlprof__filter_excluded(const mlprof__filter *f, const char *name);

/* A filter applied to one job: what each profile keeps. */
typedef struct mlprof__filtered mlprof__filtered;

/* Prepares f for job (f must outlive *out; job only this call); zones != 0
 * makes the visitors also leave out the spans of zones not shown (for exports).
 * Reads the profiles once more when threads are selected by name or steps are
 * selected (their names and step marks). warn gets one line on processes
 * left out that the user may not expect ("" when none). Returns 0 or
 * MLPROF_ENOMEM. */
int mlprof__filter_prepare(const mlprof__filter *f, const mlprof__job *job,
                           int zones, mlprof__filtered **out, char *warn,
                           size_t warnlen);

/* The state of one read through a prepared filter, the caller's: reads
 * of one mlprof__filtered may run at the same time (mlprof serve's window
 * reads), each with its own. Zero it before its first use; release it with
 * mlprof__filter_read_free. */
typedef struct {
  const mlprof__filtered *fd;
  const struct mlprof__filter_prof *cur; /* the profile being read */
  mlprof__visitor inner;
  mlprof__map names; /* zone name id -> 1 shown, 2 not */
  int drop_args;     /* the last span was dropped: its meta and units too */
  size_t zones_shown, zones_hidden; /* zone names met, by what f does */
} mlprof__filter_read;

/* The visitor to read profile i of the job with (its whole file, or chunks
 * of it again by the offsets the chunk callback gave): it forwards to inner
 * what the filter keeps (inner itself when it keeps everything), its state
 * in *r. One profile at a time per r: the next call replaces the last one's
 * state. */
void mlprof__filter_visitor(const mlprof__filtered *fd, size_t i,
                            mlprof__filter_read *r,
                            const mlprof__visitor *inner, mlprof__visitor *out);
void mlprof__filter_read_free(mlprof__filter_read *r);

/* Why the record filters of fd keep nothing of its job, a line naming the
 * options and what the job has ("--steps/--skip-warmup select no step: this
 * run has 29 steps (0:29)"), or NULL when they keep something (fd NULL
 * too). */
const char *mlprof__filtered_unmatched(const mlprof__filtered *fd);

/* Frees what mlprof__filter_prepare made (NULL is fine). */
void mlprof__filtered_free(mlprof__filtered *fd);

#endif
