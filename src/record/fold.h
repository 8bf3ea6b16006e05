/* Folding a flush interval's sampled allocation records (docs/memory.md,
 * "File growth"; docs/format.md, chunk 11, tag 3): the writer (writer.c)
 * hands over what every thread recorded since the last flush; an allocation
 * freed within the interval is not written with its free but counted in a
 * sum of its site (zone and stack), unless it was live when the process's
 * live bytes, or its zone's, rose above their highest so far.
 * So the file grows with the sites and the blocks that outlive a flush, not
 * with the allocations, and these figures of the Memory section stay what
 * the records one by one would give: totals (in the sums), what is live at
 * every flush and at the end, the process's peak and what held it, each
 * zone's high-water mark. What a fold loses is when a folded allocation was
 * live: the live bytes at other moments of the interval (a step mark, a
 * step's own peak, the series between peaks) are seen without it. */
#ifndef MLPROF_FOLD_H
#define MLPROF_FOLD_H

#include <stddef.h>
#include <stdint.h>

#define MLPROF__FOLD_NONE UINT32_MAX

/* One allocation record of the interval, as the writer read it. */
typedef struct {
  void *thread;          /* whose records it is part of (opaque here) */
  uint64_t ns, addr;     /* time (profile ns) and address */
  uint64_t size, weight; /* size 0: a free */
  uint64_t stack;
  uint32_t zone;
  /* Set by mlprof__fold_interval: */
  uint32_t partner; /* the record it pairs with, or MLPROF__FOLD_NONE */
  uint8_t folded;   /* counted in a sum, not written */
} mlprof__fold_rec;

/* The folded allocations of one site made on one thread: count of them,
 * sums of their sizes and weights, the sum of weight * (weight - size)
 * (their sampling variance, docs/memory.md), saturated at UINT64_MAX, and
 * the time of the latest free among them. run is the index of the first
 * record of the thread's records in the interval's array. */
typedef struct {
  uint32_t run, zone;
  uint64_t stack, count, size, weight, var, ns;
} mlprof__fold_sum;

typedef struct mlprof__fold mlprof__fold;

/* A folder with no block live. NULL when memory is short. */
mlprof__fold *mlprof__fold_new(void);
void mlprof__fold_free(mlprof__fold *f);

/* Forgets the blocks f follows: records were written without it (every
 * allocation recorded, or an interval too large to hold), so what it knew of
 * the live blocks no longer holds. From then on it keeps every interval's
 * highest point whole, not only a new highest of the file; a fold stays
 * right whatever f knows. */
void mlprof__fold_forget(mlprof__fold *f);

/* Decides the fate of the interval's n records r (n < UINT32_MAX), which
 * hold every thread's records in the order the writer read them, each
 * thread's in one contiguous run. Replayed in time order as readers replay
 * them (a free ends the latest allocation of its address before it), an
 * allocation and the free that ends it are folded unless the allocation
 * was live when the live bytes of the process, or of its zone, first
 * reached their highest of the interval, above their highest so far in the
 * file (any highest of the interval, once f forgot or could not follow a
 * block: then it cannot know the file's). Only a pair made after lo and
 * freed before hi (ns) folds: the caller has every record of that stretch,
 * whichever thread made it (the writer drains one thread after another,
 * which record on meanwhile), so no record of its address between the two
 * is in another interval. Then *sums, *nsums (f's, valid
 * until the next call) hold the folded allocations per thread run and site,
 * in run order. Blocks allocated and not freed are followed into the next
 * intervals (at most 262144). Returns 0, or MLPROF_ENOMEM with nothing
 * folded (the records are then written one by one; f has forgotten). */
int mlprof__fold_interval(mlprof__fold *f, mlprof__fold_rec *r, size_t n,
                          uint64_t lo, uint64_t hi,
                          const mlprof__fold_sum **sums, size_t *nsums);

#endif
