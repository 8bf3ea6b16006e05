/* Step marks of one thread, kept compact: the analyses that need a thread's
 * step sequence (statistics, findings, leaks, the dashboard's tree) read it
 * through a forward cursor instead of keeping 8 bytes a mark.
 *
 * A sequence holds step marks and step ends (mlprof_step_end) in the order
 * they came. A step runs from a mark to the next entry, mark or end; from an
 * end to the next mark is no step. Entries are delta-coded varints (about
 * the size of the records in the file) in fixed-size blocks. */
#ifndef MLPROF_MARKS_H
#define MLPROF_MARKS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint8_t **blocks;
  size_t nblocks, bcap;
  uint64_t marks, ends; /* entries of each kind */
  uint64_t steps;       /* intervals from a mark to the next entry */
  uint64_t total_ns;    /* their summed durations */
  uint64_t max_ns;      /* the longest */
  uint64_t last;        /* time of the last entry */
  int in_step;          /* the last entry is a mark */
} mlprof__marks;

/* Appends a mark (end == 0) or a step end at time t; a time before the
 * previous entry's counts as that time (steps never last less than 0). An
 * end with no step under way is not kept. *m starts zeroed. Returns 0 or
 * MLPROF_ENOMEM (m is then unchanged). */
int mlprof__marks_add(mlprof__marks *m, uint64_t t, int end);
/* Frees what m holds; m is left empty. */
void mlprof__marks_free(mlprof__marks *m);

/* A forward cursor over a sequence, which must not grow while read. */
typedef struct {
  const mlprof__marks *m;
  size_t block, pos;
  uint64_t t;
} mlprof__marks_cursor;

void mlprof__marks_cursor_init(mlprof__marks_cursor *c, const mlprof__marks *m);
/* The next entry: 1 with its time and kind in *t and *end, 0 at the end. */
int mlprof__marks_next(mlprof__marks_cursor *c, uint64_t *t, int *end);

/* The nearest rank (1-based) of percentile pct (1..100) among n > 0
 * values. */
uint64_t mlprof__pct_rank(uint64_t n, unsigned pct);

/* The nearest-rank percentile pct (1..100) of the step durations of the n
 * sequences m[] taken together, exact, without a copy of the durations (a
 * radix selection: one read of the sequences per byte of the longest step).
 * 0 when they hold no step. */
uint64_t mlprof__marks_percentile(const mlprof__marks *const *m, size_t n,
                                  unsigned pct);

#endif
