/* The distributed analysis (docs/distributed.md, "Analysis"): for a job of
 * several ranks, the ranks' clocks on rank 0's, each rank's compute,
 * communication and waiting per step, the load balance and the straggler,
 * the collectives by kind and message size with their bandwidths, the
 * point-to-point links with each receive matched to its send (the waiting
 * for a late sender), and findings (straggler, load imbalance,
 * communication-bound, synchronisation-bound with host syncs, late sender,
 * slow link).
 *
 * Memory: per profile being read, its communication spans, its steps and
 * its names; across the job, one entry per rank and step, per collective
 * matched by group and sequence number one enter/exit pair per rank that
 * took part (the per-collective table), one record per point-to-point send
 * or receive, and per rank one time per zone it named; while a rank's
 * profile is read, its zones of depth 0 (24 bytes each, for the time
 * outside zones of its steps). No other span is
 * kept, and nothing is sized by a number a file claims (a world size, a
 * name id): a job claiming more ranks than it has profiles has none to
 * analyse. */
#ifndef MLPROF_DIST_H
#define MLPROF_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "../model/job.h"

/* The kinds of operation, from the zone's name (MPI_Allreduce, all_reduce,
 * MPI_Iallreduce done...). */
enum {
  MLPROF__OP_OTHER, /* a communication zone of no kind below (MPI_Wait) */
  MLPROF__OP_ALL_REDUCE,
  MLPROF__OP_ALL_GATHER,
  MLPROF__OP_REDUCE_SCATTER,
  MLPROF__OP_ALL_TO_ALL,
  MLPROF__OP_BROADCAST,
  MLPROF__OP_REDUCE,
  MLPROF__OP_GATHER,
  MLPROF__OP_SCATTER,
  MLPROF__OP_SCAN,
  MLPROF__OP_BARRIER,
  MLPROF__OP_SEND,
  MLPROF__OP_RECV,
  MLPROF__OP_SENDRECV,
  MLPROF__NOPS
};

/* "all_reduce", "broadcast", ... "other". */
const char *mlprof__op_name(int op);
/* The kind of a communication zone's name (len bytes): "MPI_Iallreduce",
 * "all_reduce done", "funcol.all_reduce" are all-reduces. */
int mlprof__op_of(const char *name, size_t len);
/* nccl-tests' bus bandwidth factor of a collective of n ranks: all-reduce
 * 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; broadcast,
 * reduce, gather, scatter 1; 0 for the others. */
double mlprof__op_bus_factor(int op, size_t n);

typedef struct {
  int64_t rank;
  int profile;    /* its profile in the job, -1 when none was found */
  char *hostname; /* owned, or NULL */
  /* The clock: a time t of this rank's CLOCK_MONOTONIC is rank 0's
   * t + offset_ns + drift * (c - at_ns), within +- uncertainty_ns, where c
   * is t held between at_ns and at_end_ns (the two measurements). */
  int clock; /* how it is known: 0 not at all, 1 measured (dist.clock.*),
                2 measured and narrowed by the collectives' constraint,
                3 from the collectives' constraint alone */
  double offset_ns, drift, uncertainty_ns;
  uint64_t at_ns, at_end_ns;
  /* Over its steps (or its whole run when no rank marked steps). */
  uint64_t steps;
  uint64_t run_ns;          /* the steps' time */
  uint64_t compute_ns;      /* run_ns less exposed_ns */
  uint64_t exposed_ns;      /* blocking communication (the thread waited) */
  uint64_t wait_ns;         /* of which waiting for the last participant,
                               or in a receive for a late sender */
  uint64_t p2p_wait_ns;     /* of wait_ns, in receives */
  uint64_t async_ns;        /* nonblocking operations, start to completion */
  uint64_t overlap_ns;      /* of which overlapped by computation */
  double overlap_share;     /* overlap_ns / (exposed_ns + overlap_ns) */
  uint64_t unzoned_ns;      /* of run_ns, on the step thread in no zone
                               (0 unless the rank marked steps) */
  uint64_t straggler_steps; /* steps where it computed longest */
  /* Waits shorter than the clock uncertainty, which cannot be told from
   * clock error. */
  uint64_t waits_uncertain;
  /* Zones "host sync ..." (a tensor's .item() on a device, ...): the host
   * stalled until the device caught up. */
  uint64_t host_syncs, host_sync_ns;
} mlprof__dist_rank;

typedef struct {
  uint64_t index;    /* 0 for the first step */
  int64_t straggler; /* the rank that computed longest */
  uint64_t delay_ns; /* its compute less the mean of the others' */
  double imbalance;  /* (max - mean) / mean of the ranks' compute */
  uint64_t mean_compute_ns, max_compute_ns;
  uint64_t wait_ns; /* summed over the ranks */
} mlprof__dist_step;

/* The collectives of one kind and one message size (a power of two). */
typedef struct {
  int op;
  uint64_t size_bytes;  /* the bucket: messages of size in [size, 2 size) */
  size_t ranks;         /* participants */
  uint64_t count;       /* collectives (each counted once for all ranks) */
  uint64_t bytes;       /* their sizes summed (nccl-tests' size) */
  uint64_t time_ns;     /* mean over the participants, summed */
  uint64_t wait_ns;     /* mean over the participants, summed */
  uint64_t transfer_ns; /* time after the last participant arrived */
  double algbw, busbw;  /* bytes per second over transfer_ns; NAN unknown */
} mlprof__dist_coll;

/* Point-to-point traffic from src to dst: the sender's messages, each
 * matched with its receive where one was found (by group, ranks, tag and
 * order). A matched message's time is its transfer, the receive's time
 * after the sender entered its send; the time before is the receiver's
 * waiting for a late sender. An unmatched one's time is the send's. */
typedef struct {
  int64_t src, dst;
  uint64_t count, bytes, time_ns;
  uint64_t matched; /* messages matched with their receive */
  uint64_t wait_ns; /* the receiver's waiting for this sender */
  double bandwidth; /* bytes / time_ns in bytes per second */
} mlprof__dist_link;

/* A zone the straggler spent more time in than the other ranks, or
 * (outside) the time of its steps in no zone, over the run: per step,
 * divide by the job's steps. */
typedef struct {
  char *name;            /* MLPROF__OUTSIDE_ZONES when outside */
  uint64_t straggler_ns; /* its time in the zone */
  double others_ns;      /* the other ranks' mean */
  int outside;
} mlprof__dist_zone;

#define MLPROF__OUTSIDE_ZONES "time outside zones"

#define MLPROF__DIST_ZONES 3

typedef struct {
  size_t nranks; /* 0: not a job of several ranks (nothing else is set) */
  mlprof__dist_rank *ranks; /* by rank */
  mlprof__dist_step *steps; /* steps every rank made */
  size_t nsteps;
  mlprof__dist_coll *colls; /* by kind, then size */
  size_t ncolls;
  mlprof__dist_link *links; /* by src, then dst */
  size_t nlinks;
  int slowest_link;   /* index of links, -1 */
  uint64_t matched;   /* collectives seen by every participant */
  uint64_t unmatched; /* operations with a group and seq not matched */
  /* POP efficiencies of the useful (compute) time: load balance = mean /
   * max, communication efficiency = max / run time, parallel = product. */
  double load_balance, comm_efficiency, parallel_efficiency;
  int64_t straggler; /* the straggler overall, -1 */
  double delay_ns;   /* its mean delay over the steps it straggled */
  mlprof__dist_zone zones[MLPROF__DIST_ZONES]; /* where it differs */
  size_t nzones;
} mlprof__dist;

typedef struct mlprof__dist_builder mlprof__dist_builder;
struct mlprof__findings;

/* Fed by the analysis driver like the findings: begin (NULL when out of
 * memory), per profile of job in order profile_begin (fills *v), the read,
 * profile_end; then finish, which fills *d, adds the distributed findings
 * to f and sorts f's findings again. finish returns 0 or MLPROF_ENOMEM (*d
 * is then empty); finish and abort free the builder. A job of fewer than
 * two ranks gives an empty *d. Release *d with mlprof__dist_free. */
mlprof__dist_builder *mlprof__dist_begin(const mlprof__job *job,
                                         mlprof__dist *d);
void mlprof__dist_profile_begin(mlprof__dist_builder *b, size_t index,
                                mlprof__visitor *v);
int mlprof__dist_profile_end(mlprof__dist_builder *b);
int mlprof__dist_finish(mlprof__dist_builder *b, struct mlprof__findings *f);
void mlprof__dist_abort(mlprof__dist_builder *b);
void mlprof__dist_free(mlprof__dist *d);

#endif
