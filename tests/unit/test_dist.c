/* The distributed analysis (src/analyze/dist.c) on synthetic jobs of
 * several ranks, fed through its visitor as the reader would: steps of
 * compute then an all-reduce that every rank leaves together, on clocks
 * with injected offsets and drift. */
#include <inttypes.h>
#include <mlprof.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "analyse.h"
#include "analyze/dist.h"
#include "analyze/findings.h"
#include "format/wire.h"
#include "model/job.h"
#include "synth.h"
#include "test.h"

/* Calls the visitor's callback cb, which may be NULL (the reader's
 * contract): the analysis gives an empty visitor to a profile it skips. */
#define VISIT(v, cb, ...) ((v).cb ? (v).cb((v).ud, __VA_ARGS__) : 0)

#define NR 4
#define MS 1000000.0

typedef struct {
  size_t nranks, nsteps;
  double compute_ms[NR];  /* per rank, each step */
  double idle_ms[NR];     /* then this in no zone (part of its compute) */
  double noise;           /* +- share of compute, varying by step and rank */
  double rotate_ms;       /* extra compute of rank (step % nranks) */
  double transfer_ms;     /* after the last arrival */
  double offset_ns[NR];   /* rank 0's clock less this rank's */
  double drift[NR];       /* the offset's change per ns */
  int measured;           /* dist.clock.init/final recorded */
  double measured_unc_ns; /* their stated uncertainty */
  double measured_err_ns; /* and their error (within it) */
  int hosts;              /* each rank on a host of its own */
  double wall_err_ns;     /* the wall clocks' error, rank r: r x this */
  uint64_t bytes;         /* of each all-reduce */
  int barrier;            /* a barrier after each all-reduce */
  /* A ring after them: rank r sends to r + 1, then receives from r - 1. */
  int ring;              /* 1 MPI_Recv, 2 MPI_Irecv then MPI_Wait */
  double late_ms[NR];    /* rank r sends this late */
  double link_ms[NR];    /* the message from r moves in this */
  double syncs_per_step; /* "host sync .item()" zones, in the compute */
  double sync_ms;        /* each */
  /* Nonblocking all-reduces, each a short call zone and a "done" span on a
   * track, as the recorders write them: 1, torch's (DDP's bucket, then
   * DDP's wait on a track, then a blocking all_reduce of 4 bytes of the
   * same name); 2, MPI's (two MPI_Iallreduce back to back, then an
   * MPI_Waitall zone to their completion). */
  int async;
} sim;

/* The local CLOCK_MONOTONIC of rank r at rank 0's time t. */
static double local_of(const sim *s, size_t r, double t) {
  return t - s->offset_ns[r] - s->drift[r] * (t - 1e9);
}

static double noise(size_t r, size_t k) {
  uint32_t x = (uint32_t)(r * 2654435761u + k * 40503u + 12345u);
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return (double)(x % 2001) / 1000.0 - 1.0; /* -1..1 */
}

typedef struct {
  mlprof__visitor v;
  uint32_t id;
} feed;

static uint32_t name(feed *f, uint8_t kind, uint8_t cat, const char *s) {
  mlprof__name n = {.id = ++f->id,
                    .kind = kind,
                    .category = cat,
                    .name = s,
                    .name_len = strlen(s),
                    .function = "",
                    .file = ""};
  VISIT(f->v, name, &n);
  return n.id;
}

/* A META entry, read as the job reads it. */
static void meta(mlprof__job_profile *p, const char *k, const char *v) {
  mlprof__job_take_meta(p, k, strlen(k), v, strlen(v));
}

/* A span on a track (tid from MLPROF__TRACK_TID_BASE). */
typedef struct {
  uint32_t tid, name;
  uint64_t b, e;
} tspan;

/* Runs the analysis over the simulated job into *d and *fs. */
static int run_sim(const sim *s, mlprof__findings *fs) {
  static char hosts[NR][24];
  mlprof__job_profile p[NR];
  mlprof__job job = {.profiles = p, .count = s->nranks};
  double start = 1e9; /* rank 0's time of every profile's start */
  for (size_t r = 0; r < s->nranks; r++) {
    snprintf(hosts[r], sizeof hosts[r], "h%zu", s->hosts ? r : 0);
    double mono = local_of(s, r, start);
    p[r] = (mlprof__job_profile){
        .path = "p",
        .pid = 100 + r,
        .rank = (int64_t)r,
        .world_size = (int64_t)s->nranks,
        .hostname = hosts[r],
        .start_mono_ns = (uint64_t)mono,
        /* wall = rank 0's clock + 1e12, wrong by
         * r x wall_err */
        .start_wall_ns = (uint64_t)(start + 1e12 + (double)r * s->wall_err_ns),
        .parent = -1};
  }
  memset(fs, 0, sizeof *fs);
  mlprof__dist_builder *b = mlprof__dist_begin(&job, &fs->dist);
  if (!b) return -1;
  for (size_t r = 0; r < s->nranks; r++) {
    feed f = {.id = 0};
    mlprof__dist_profile_begin(b, r, &f.v);
    uint32_t compute = name(&f, MLPROF__NAME_ZONE, 0, "compute");
    uint32_t ar = name(&f, MLPROF__NAME_ZONE, MLPROF_CAT_COMM, "MPI_Allreduce");
    uint32_t bar = name(&f, MLPROF__NAME_ZONE, MLPROF_CAT_COMM, "MPI_Barrier");
    uint32_t kcomm = name(&f, MLPROF__NAME_STRING, 0, "comm");
    uint32_t world = name(&f, MLPROF__NAME_STRING, 0, "world");
    uint32_t ubytes = name(&f, MLPROF__NAME_UNITS, 0, "bytes");
    uint32_t useq = name(&f, MLPROF__NAME_UNITS, 0, "seq");
    uint32_t send = name(&f, MLPROF__NAME_ZONE, MLPROF_CAT_COMM, "MPI_Send");
    uint32_t recv = name(&f, MLPROF__NAME_ZONE, MLPROF_CAT_COMM,
                         s->ring == 2 ? "MPI_Irecv" : "MPI_Recv");
    uint32_t done =
        name(&f, MLPROF__NAME_ZONE, MLPROF_CAT_COMM, "MPI_Irecv done");
    uint32_t wait = name(&f, MLPROF__NAME_ZONE, MLPROF_CAT_COMM, "MPI_Wait");
    uint32_t kpeer = name(&f, MLPROF__NAME_STRING, 0, "peer");
    uint32_t ktag = name(&f, MLPROF__NAME_STRING, 0, "tag");
    uint32_t zero = name(&f, MLPROF__NAME_STRING, 0, "0");
    uint32_t peers[NR];
    for (size_t q = 0; q < s->nranks; q++) {
      char v[24];
      snprintf(v, sizeof v, "%zu", q);
      peers[q] = name(&f, MLPROF__NAME_STRING, 0, v);
    }
    uint32_t sync = name(&f, MLPROF__NAME_ZONE, 0, "host sync .item()");
    uint32_t aname = name(&f, MLPROF__NAME_ZONE, MLPROF_CAT_COMM,
                          s->async == 1 ? "all_reduce" : "MPI_Iallreduce");
    uint32_t adone =
        name(&f, MLPROF__NAME_ZONE, MLPROF_CAT_COMM,
             s->async == 1 ? "all_reduce done" : "MPI_Iallreduce done");
    uint32_t await = name(&f, MLPROF__NAME_ZONE, MLPROF_CAT_COMM,
                          s->async == 1 ? "DDP wait" : "MPI_Waitall");
    /* The spans on tracks, read after the thread's (their own chunks). */
    tspan tracked[3 * 16];
    size_t ntracked = 0;
    double s0 = (double)p[r].start_mono_ns, t = start, last = 0;
    uint64_t seq = 0;
    for (size_t k = 0; k < s->nsteps; k++) {
      double c[NR], latest = 0;
      for (size_t q = 0; q < s->nranks; q++) {
        c[q] =
            (s->compute_ms[q] * (1 + s->noise * noise(q, k)) + s->idle_ms[q]) *
            MS;
        if (q == k % s->nranks) c[q] += s->rotate_ms * MS;
        if (t + c[q] > latest) latest = t + c[q];
      }
      double ex = latest + s->transfer_ms * MS;
#define LT(x) ((uint64_t)(local_of(s, r, (x)) - s0))
      VISIT(f.v, step, 1, LT(t));
      VISIT(f.v, span, 1, compute, 0, LT(t), LT(t + c[r] - s->idle_ms[r] * MS));
      double syncs = floor((double)(k + 1) * s->syncs_per_step) -
                     floor((double)k * s->syncs_per_step);
      for (double i = 0; i < syncs; i++)
        VISIT(f.v, span, 1, sync, 1, LT(t + i * s->sync_ms * MS),
              LT(t + (i + 1) * s->sync_ms * MS));
      if (s->async) {
        /* Each call takes 10 µs; its done span starts 1 µs before it. */
        int calls = s->async == 1 ? 1 : 2;
        double en = t + c[r], fin = latest + 10e3 * calls + s->transfer_ms * MS;
        for (int q = 0; q < calls; q++, en += 10e3) {
          VISIT(f.v, span, 1, aname, 0, LT(en), LT(en + 10e3));
          VISIT(f.v, span_meta, 1, kcomm, world);
          VISIT(f.v, span_units, 1, ubytes, s->bytes);
          VISIT(f.v, span_units, 1, useq, ++seq);
          if (ntracked < sizeof tracked / sizeof *tracked)
            tracked[ntracked++] =
                (tspan){MLPROF__TRACK_TID_BASE, adone, LT(en - 1e3), LT(fin)};
        }
        if (s->async == 1) {
          if (ntracked < sizeof tracked / sizeof *tracked)
            tracked[ntracked++] =
                (tspan){MLPROF__TRACK_TID_BASE + 1, await, LT(en), LT(fin)};
        } else {
          VISIT(f.v, span, 1, await, 0, LT(en), LT(fin));
        }
        t = fin;
        ex = fin + 0.1 * MS; /* then a blocking one of the same name */
        if (s->async == 1) {
          VISIT(f.v, span, 1, aname, 0, LT(t), LT(ex));
          VISIT(f.v, span_meta, 1, kcomm, world);
          VISIT(f.v, span_units, 1, ubytes, 4);
          VISIT(f.v, span_units, 1, useq, ++seq);
        } else {
          ex = t;
        }
      } else {
        VISIT(f.v, span, 1, ar, 0, LT(t + c[r]), LT(ex));
        VISIT(f.v, span_meta, 1, kcomm, world);
        VISIT(f.v, span_units, 1, ubytes, s->bytes);
        VISIT(f.v, span_units, 1, useq, ++seq);
      }
      t = ex;
      if (s->barrier) {
        /* Rank r arrives r x 10 µs late; all leave 20 µs after the last. */
        double en = t + (double)r * 1e4, out = t + 5e4;
        VISIT(f.v, span, 1, bar, 0, LT(en), LT(out));
        VISIT(f.v, span_meta, 1, kcomm, world);
        VISIT(f.v, span_units, 1, ubytes, 0);
        VISIT(f.v, span_units, 1, useq, ++seq);
        t = out;
      }
      if (s->ring) {
        size_t n = s->nranks, from = (r + n - 1) % n, to = (r + 1) % n;
        double se[NR], rx[NR], next = 0;
        for (size_t q = 0; q < n; q++) se[q] = t + s->late_ms[q] * MS;
        for (size_t q = 0; q < n; q++) {
          size_t pr = (q + n - 1) % n;
          rx[q] = fmax(se[q] + 0.05 * MS, se[pr]) + s->link_ms[pr] * MS;
          if (rx[q] > next) next = rx[q];
        }
        VISIT(f.v, span, 1, send, 0, LT(se[r]), LT(se[r] + 0.05 * MS));
        VISIT(f.v, span_meta, 1, kcomm, world);
        VISIT(f.v, span_meta, 1, kpeer, peers[to]);
        VISIT(f.v, span_meta, 1, ktag, zero);
        VISIT(f.v, span_units, 1, ubytes, s->bytes);
        double rb = se[r] + 0.05 * MS; /* the receive's call */
        if (s->ring == 2) {
          /* The completion on a track of its own, from just before the
           * call's zone to just after the wait's. */
          VISIT(f.v, span, 2, done, 0, LT(rb - 100), LT(rx[r] + 200));
          VISIT(f.v, span, 1, recv, 0, LT(rb), LT(rb + 1000));
          rb += 2000;
        } else {
          VISIT(f.v, span, 1, recv, 0, LT(rb), LT(rx[r]));
        }
        VISIT(f.v, span_meta, 1, kcomm, world);
        VISIT(f.v, span_meta, 1, kpeer, peers[from]);
        VISIT(f.v, span_meta, 1, ktag, zero);
        VISIT(f.v, span_units, 1, ubytes, s->ring == 2 ? 0 : s->bytes);
        if (s->ring == 2) VISIT(f.v, span, 1, wait, 0, LT(rb), LT(rx[r]));
        t = next;
      }
      last = t;
    }
    VISIT(f.v, step_end, 1, LT(last));
    for (size_t i = 0; i < ntracked; i++)
      VISIT(f.v, span, tracked[i].tid, tracked[i].name, 0, tracked[i].b,
            tracked[i].e);
    if (s->measured) {
      for (int m = 0; m < 2; m++) {
        double at0 = m ? last : start; /* rank 0's time of the exchange */
        double at = local_of(s, r, at0);
        double off = r ? at0 - at + s->measured_err_ns : 0;
        char v[96];
        snprintf(v, sizeof v, "%lld %lld %lld", (long long)llround(off),
                 (long long)(r ? s->measured_unc_ns : 0), (long long)at);
        meta(&p[r], m ? "dist.clock.final" : "dist.clock.init", v);
      }
    }
#undef LT
    VISIT(f.v, end, (uint64_t)(local_of(s, r, last) - s0), 0, 0);
    if (mlprof__dist_profile_end(b)) return -1;
  }
  return mlprof__dist_finish(b, fs);
}

static sim base(void) {
  sim s = {.nranks = NR,
           .nsteps = 10,
           .compute_ms = {10, 10, 10, 10},
           .transfer_ms = 1,
           .measured = 1,
           .measured_unc_ns = 2000,
           .bytes = 1 << 20};
  return s;
}

static const mlprof__finding *find(const mlprof__findings *f,
                                   const char *type) {
  for (size_t i = 0; i < f->nfindings; i++)
    if (!strcmp(f->findings[i].type, type)) return &f->findings[i];
  return NULL;
}

static void near(double got, double want, double share, const char *what,
                 int *bad) {
  if (!(fabs(got - want) <= share * fabs(want))) {
    fprintf(stderr, "  %s: %g, want %g within %g%%\n", what, got, want,
            share * 100);
    *bad = 1;
  }
}

static void test_dist_straggler_named(void) {
  sim s = base();
  s.compute_ms[2] = 13; /* 3 ms late each step */
  s.noise = 0.01;
  mlprof__findings f;
  CHECK_EQ(run_sim(&s, &f), 0);
  const mlprof__dist *d = &f.dist;
  CHECK_EQ(d->nranks, 4);
  CHECK_EQ(d->nsteps, 10);
  CHECK_EQ(d->straggler, 2);
  CHECK_EQ(d->ranks[2].straggler_steps, 10);
  int bad = 0;
  near(d->delay_ns, 3 * MS, 0.10, "delay", &bad);
  for (size_t k = 0; k < d->nsteps; k++)
    near((double)d->steps[k].delay_ns, 3 * MS, 0.10, "step delay", &bad);
  /* The others wait for it about the delay a step; it hardly waits. */
  for (size_t r = 0; r < NR; r++)
    if (r != 2)
      near((double)d->ranks[r].wait_ns / 10, 3 * MS, 0.10, "wait", &bad);
  CHECK(d->ranks[2].wait_ns < 10 * 0.1 * 3 * MS);
  CHECK(!bad);
  CHECK(find(&f, "straggler"));
  CHECK(!find(&f, "load_imbalance"));
  /* Exact counts and bytes; nccl-tests' bus factor 2(n-1)/n. */
  CHECK_EQ(d->matched, 10);
  CHECK_EQ(d->unmatched, 0);
  CHECK_EQ(d->ncolls, 1);
  CHECK_EQ(d->colls[0].op, MLPROF__OP_ALL_REDUCE);
  CHECK_EQ(d->colls[0].count, 10);
  CHECK_EQ_U64(d->colls[0].bytes, 10ull << 20);
  CHECK_EQ_U64(d->colls[0].size_bytes, 1ull << 20);
  CHECK(fabs(d->colls[0].busbw / d->colls[0].algbw - 1.5) < 1e-9);
  /* Transfer is the 1 ms after the last arrival. */
  near((double)d->colls[0].transfer_ns, 10 * MS, 0.01, "transfer", &bad);
  CHECK(d->nzones >= 1);
  CHECK_STR(d->zones[0].name, "compute");
  CHECK(!d->zones[0].outside);
  const mlprof__finding *x = find(&f, "straggler");
  CHECK(x && strstr(x->summary, "per step it spends 2.9") &&
        strstr(x->summary, "in zone \"compute\""));
  CHECK(!bad);
  mlprof__findings_free(&f);
}

/* A straggler whose extra time is in no zone (it sleeps between its
 * compute zone and the all-reduce): its explanation names the time outside
 * zones, per step, not a zone's; the zone comes second, by what it adds. */
static void test_dist_straggler_outside_zones(void) {
  sim s = base();
  s.compute_ms[1] = 10.5; /* 0.5 ms more in "compute" */
  s.idle_ms[1] = 6;       /* and 6 ms in no zone, each step */
  s.noise = 0.01;
  mlprof__findings f;
  CHECK_EQ(run_sim(&s, &f), 0);
  const mlprof__dist *d = &f.dist;
  CHECK_EQ(d->straggler, 1);
  int bad = 0;
  near(d->delay_ns, 6.5 * MS, 0.10, "delay", &bad);
  CHECK(d->nzones >= 2);
  CHECK(d->zones[0].outside);
  CHECK_STR(d->zones[0].name, "time outside zones");
  near(((double)d->zones[0].straggler_ns - d->zones[0].others_ns) /
           (double)d->nsteps,
       6 * MS, 0.02, "outside zones a step", &bad);
  /* The other ranks' steps are all compute and all-reduce zones. */
  CHECK(d->ranks[0].unzoned_ns < 1000);
  CHECK(!d->zones[1].outside);
  CHECK_STR(d->zones[1].name, "compute");
  near(((double)d->zones[1].straggler_ns - d->zones[1].others_ns) /
           (double)d->nsteps,
       0.5 * MS, 0.25, "compute a step", &bad);
  CHECK(!bad);
  const mlprof__finding *x = find(&f, "straggler");
  CHECK(x != NULL);
  if (x) {
    CHECK(strstr(x->summary, "per step it spends 6") != NULL);
    CHECK(strstr(x->summary, "time outside zones") != NULL);
  }
  mlprof__findings_free(&f);
}

static void test_dist_balanced_no_finding(void) {
  sim s = base();
  s.noise = 0.03; /* noise alone */
  mlprof__findings f;
  CHECK_EQ(run_sim(&s, &f), 0);
  CHECK_EQ(f.dist.straggler, -1);
  CHECK_EQ(f.nfindings, 0);
  CHECK(f.dist.load_balance > 0.95);
  mlprof__findings_free(&f);
}

static void test_dist_imbalance_without_straggler(void) {
  sim s = base();
  s.rotate_ms = 3; /* a different slowest rank each step */
  mlprof__findings f;
  CHECK_EQ(run_sim(&s, &f), 0);
  CHECK_EQ(f.dist.straggler, -1);
  CHECK(find(&f, "load_imbalance"));
  mlprof__findings_free(&f);
}

static void test_dist_communication_bound(void) {
  sim s = base();
  s.transfer_ms = 8; /* 8 of every 18 ms moving data */
  mlprof__findings f;
  CHECK_EQ(run_sim(&s, &f), 0);
  CHECK(find(&f, "communication_bound"));
  CHECK(!find(&f, "straggler"));
  mlprof__findings_free(&f);
  s = base();
  CHECK_EQ(run_sim(&s, &f), 0);
  CHECK(!find(&f, "communication_bound"));
  mlprof__findings_free(&f);
}

static void test_dist_synchronisation_bound(void) {
  sim s = base();
  s.compute_ms[0] = s.compute_ms[1] = s.compute_ms[2] = s.compute_ms[3] = 0.1;
  s.transfer_ms = 0.02;
  s.bytes = 8; /* a metric all-reduced every step, then a barrier */
  s.barrier = 1;
  mlprof__findings f;
  CHECK_EQ(run_sim(&s, &f), 0);
  CHECK(find(&f, "synchronisation_bound"));
  CHECK_EQ(f.dist.ncolls, 2); /* all_reduce of 8 bytes, barrier */
  mlprof__findings_free(&f);
}

/* A straggler 3 ms late at a small all-reduce every step: the others'
 * waiting there is the straggler's finding, not synchronisation too. */
static void test_dist_straggler_at_small_collective(void) {
  sim s = base();
  s.compute_ms[2] = 13;
  s.bytes = 8;
  mlprof__findings f;
  CHECK_EQ(run_sim(&s, &f), 0);
  CHECK(find(&f, "straggler"));
  CHECK(!find(&f, "synchronisation_bound"));
  mlprof__findings_free(&f);
}

static void test_dist_alignment_recovers_offsets(void) {
  sim s = base();
  s.offset_ns[1] = -7e9; /* a time namespace 7 s ahead */
  s.offset_ns[2] = 0.5e9;
  s.offset_ns[3] = 123456;
  s.drift[1] = 2e-5; /* 20 ppm */
  s.drift[3] = -1e-5;
  s.measured_err_ns = 1500; /* within the stated 2 µs */
  s.hosts = 1;
  s.compute_ms[2] = 13;
  mlprof__findings f;
  CHECK_EQ(run_sim(&s, &f), 0);
  const mlprof__dist *d = &f.dist;
  for (size_t r = 1; r < NR; r++) {
    const mlprof__dist_rank *x = &d->ranks[r];
    CHECK(x->clock >= 1);
    /* At a local time: the offset stated, against the injected one. */
    double t0 = 1.005e9, local = local_of(&s, r, t0);
    double c = fmin(fmax(local, (double)x->at_ns), (double)x->at_end_ns);
    double got = x->offset_ns + x->drift * (c - (double)x->at_ns);
    double want = t0 - local;
    if (!(fabs(got - want) <= x->uncertainty_ns + 1)) {
      fprintf(stderr, "  rank %zu: offset %f, want %f within %f\n", r, got,
              want, x->uncertainty_ns);
      CHECK(0);
    }
    CHECK(fabs(x->drift - s.drift[r]) < 1e-7);
  }
  /* Aligned, the straggler and the waits are as on one clock. */
  CHECK_EQ(d->straggler, 2);
  int bad = 0;
  near((double)d->ranks[0].wait_ns / 10, 3 * MS, 0.02, "wait", &bad);
  CHECK(!bad);
  mlprof__findings_free(&f);
}

static void test_dist_barrier_constraint(void) {
  /* No measured offsets, hosts whose wall clocks are 5 ms apart a rank:
   * the collectives alone place the ranks within the 1 ms every rank
   * spends in each all-reduce after the last arrival. */
  sim s = base();
  s.measured = 0;
  s.hosts = 1;
  s.wall_err_ns = 5e6;
  mlprof__findings f;
  CHECK_EQ(run_sim(&s, &f), 0);
  const mlprof__dist *d = &f.dist;
  for (size_t r = 1; r < NR; r++) {
    const mlprof__dist_rank *x = &d->ranks[r];
    CHECK_EQ(x->clock, 3);
    CHECK(x->uncertainty_ns <= 1.01 * MS);
    CHECK(fabs(x->offset_ns) <= x->uncertainty_ns + 1);
  }
  mlprof__findings_free(&f);
  /* Measured offsets of +-10 ms are narrowed the same way. */
  s = base();
  s.measured_unc_ns = 1e7;
  s.measured_err_ns = 4e6;
  CHECK_EQ(run_sim(&s, &f), 0);
  for (size_t r = 1; r < NR; r++) {
    const mlprof__dist_rank *x = &f.dist.ranks[r];
    CHECK_EQ(x->clock, 2);
    CHECK(x->uncertainty_ns <= 1.01 * MS);
    CHECK(fabs(x->offset_ns) <= x->uncertainty_ns + 1);
  }
  mlprof__findings_free(&f);
}

/* Nonblocking all-reduces, rank 2 3 ms late each step: each done span is
 * paired with its call zone, so the others wait about 3 ms a step, it
 * hardly waits, and the wait is not taken for transfer. */
static void check_async(int async) {
  sim s = base();
  s.async = async;
  s.compute_ms[2] = 13;
  s.noise = 0.01;
  mlprof__findings f;
  CHECK_EQ(run_sim(&s, &f), 0);
  const mlprof__dist *d = &f.dist;
  CHECK_EQ(d->straggler, 2);
  int bad = 0;
  for (size_t r = 0; r < NR; r++)
    if (r != 2)
      near((double)d->ranks[r].wait_ns / 10, 3 * MS, 0.10, "wait", &bad);
  for (size_t k = 0; k < d->nsteps; k++)
    near((double)d->steps[k].wait_ns, 3 * 3 * MS, 0.15, "step wait", &bad);
  CHECK(!bad);
  CHECK(d->ranks[2].wait_ns < 10 * 0.1 * 3 * MS);
  CHECK(find(&f, "straggler"));
  CHECK(!find(&f, "communication_bound"));
  mlprof__findings_free(&f);
}

static void test_dist_async_waiting_torch(void) { check_async(1); }

/* Two overlapping MPI_Iallreduce a step wait for the same rank: the
 * waiting is counted once. */
static void test_dist_async_waiting_mpi(void) { check_async(2); }

static void test_dist_op_kinds(void) {
  CHECK_EQ(mlprof__op_of("MPI_Allreduce", 13), MLPROF__OP_ALL_REDUCE);
  CHECK_EQ(mlprof__op_of("MPI_Iallreduce done", 19), MLPROF__OP_ALL_REDUCE);
  CHECK_EQ(mlprof__op_of("all_reduce", 10), MLPROF__OP_ALL_REDUCE);
  CHECK_EQ(mlprof__op_of("all_gather_into_tensor", 22), MLPROF__OP_ALL_GATHER);
  CHECK_EQ(mlprof__op_of("MPI_Reduce_scatter_block", 24),
           MLPROF__OP_REDUCE_SCATTER);
  CHECK_EQ(mlprof__op_of("MPI_Bcast", 9), MLPROF__OP_BROADCAST);
  CHECK_EQ(mlprof__op_of("MPI_Isend", 9), MLPROF__OP_SEND);
  CHECK_EQ(mlprof__op_of("irecv", 5), MLPROF__OP_RECV);
  CHECK_EQ(mlprof__op_of("MPI_Sendrecv", 12), MLPROF__OP_SENDRECV);
  CHECK_EQ(mlprof__op_of("MPI_Waitall", 11), MLPROF__OP_OTHER);
  /* torch's functional collectives, their completion and their wait */
  CHECK_EQ(mlprof__op_of("funcol.all_reduce", 17), MLPROF__OP_ALL_REDUCE);
  CHECK_EQ(mlprof__op_of("funcol.reduce_scatter_tensor done", 33),
           MLPROF__OP_REDUCE_SCATTER);
  CHECK_EQ(mlprof__op_of("funcol.all_gather_single", 24),
           MLPROF__OP_ALL_GATHER);
  CHECK_EQ(mlprof__op_of("funcol.wait_tensor", 18), MLPROF__OP_OTHER);
  CHECK(fabs(mlprof__op_bus_factor(MLPROF__OP_ALL_REDUCE, 8) - 1.75) < 1e-12);
  CHECK(fabs(mlprof__op_bus_factor(MLPROF__OP_ALL_GATHER, 4) - 0.75) < 1e-12);
  CHECK(fabs(mlprof__op_bus_factor(MLPROF__OP_ALL_TO_ALL, 2) - 0.5) < 1e-12);
  CHECK(mlprof__op_bus_factor(MLPROF__OP_BROADCAST, 4) == 1);
  CHECK(mlprof__op_bus_factor(MLPROF__OP_BARRIER, 4) == 0);
}

static void test_dist_one_rank_is_not_a_job(void) {
  sim s = base();
  s.nranks = 1;
  mlprof__findings f;
  CHECK_EQ(run_sim(&s, &f), 0);
  CHECK_EQ(f.dist.nranks, 0);
  CHECK_EQ(f.nfindings, 0);
  mlprof__findings_free(&f);
}

/* A ring whose rank 1 sends 5 ms late each step: rank 2, its receiver,
 * waits for it, the others do not; the link's time is the transfer. */
static void late_sender(int ring) {
  sim s = base();
  s.ring = ring;
  s.late_ms[1] = 5;
  for (size_t r = 0; r < NR; r++) s.link_ms[r] = 0.1;
  mlprof__findings f;
  CHECK_EQ(run_sim(&s, &f), 0);
  const mlprof__dist *d = &f.dist;
  int bad = 0;
  double want = ring == 2 ? 4.95 * MS - 2000 : 4.95 * MS;
  near((double)d->ranks[2].p2p_wait_ns / 10, want, 0.01, "rank 2", &bad);
  for (size_t r = 0; r < NR; r++)
    if (r != 2) CHECK_EQ_U64(d->ranks[r].p2p_wait_ns, 0);
  CHECK(d->ranks[2].wait_ns >= d->ranks[2].p2p_wait_ns);
  uint64_t steps = 0;
  for (size_t k = 0; k < d->nsteps; k++) steps += d->steps[k].wait_ns;
  CHECK(steps >= d->ranks[2].p2p_wait_ns);
  CHECK_EQ(d->nlinks, NR);
  const mlprof__dist_link *l = &d->links[1];
  CHECK_EQ(l->src, 1);
  CHECK_EQ(l->dst, 2);
  CHECK_EQ(l->matched, 10);
  near((double)l->wait_ns, 10 * want, 0.01, "link wait", &bad);
  near((double)l->time_ns, 10 * 0.1 * MS, 0.05, "link transfer", &bad);
  CHECK(!bad);
  const mlprof__finding *x = find(&f, "late_sender");
  CHECK(x);
  if (x) CHECK(strstr(x->summary, "rank 1 sends late: rank 2 waited"));
  /* Equal links however late the sender: none is slow. */
  CHECK(!find(&f, "slow_link"));
  mlprof__findings_free(&f);
}

static void test_dist_late_sender_recv(void) { late_sender(1); }

static void test_dist_late_sender_irecv(void) { late_sender(2); }

static void test_dist_equal_links_no_finding(void) {
  sim s = base();
  s.ring = 1;
  s.noise = 0.03;
  for (size_t r = 0; r < NR; r++) {
    s.link_ms[r] = 0.1;
    s.late_ms[r] = 0.01 * (double)r; /* within the noise */
  }
  mlprof__findings f;
  CHECK_EQ(run_sim(&s, &f), 0);
  CHECK_EQ(f.dist.nlinks, NR);
  CHECK(f.dist.slowest_link >= 0);
  CHECK_EQ(f.nfindings, 0);
  mlprof__findings_free(&f);
}

static void test_dist_slow_link_named(void) {
  sim s = base();
  s.ring = 1;
  for (size_t r = 0; r < NR; r++) s.link_ms[r] = 0.1;
  s.link_ms[2] = 1; /* 2 -> 3 ten times slower */
  mlprof__findings f;
  CHECK_EQ(run_sim(&s, &f), 0);
  CHECK_EQ(f.dist.slowest_link, 2);
  const mlprof__finding *x = find(&f, "slow_link");
  CHECK(x);
  if (x) CHECK(strstr(x->summary, "from rank 2 to rank 3"));
  CHECK(!find(&f, "late_sender"));
  mlprof__findings_free(&f);
  /* Messages of 1000 bytes: their time is latency, not bandwidth. */
  s.bytes = 1000;
  CHECK_EQ(run_sim(&s, &f), 0);
  CHECK_EQ(f.dist.slowest_link, 2);
  CHECK(!find(&f, "slow_link"));
  mlprof__findings_free(&f);
}

/* Two .item() syncs of 1.5 ms in each 10 ms step: synchronisation-bound,
 * with the syncs a step in its evidence. */
static void test_dist_host_syncs_every_step(void) {
  sim s = base();
  s.syncs_per_step = 2;
  s.sync_ms = 1.5;
  mlprof__findings f;
  CHECK_EQ(run_sim(&s, &f), 0);
  CHECK_EQ_U64(f.dist.ranks[0].host_syncs, 20);
  CHECK_EQ_U64(f.dist.ranks[3].host_sync_ns, (uint64_t)(20 * 1.5 * MS));
  const mlprof__finding *x = find(&f, "synchronisation_bound");
  CHECK(x);
  if (x) {
    CHECK(strstr(x->summary, "2 host syncs a step"));
    CHECK(strstr(x->recommendation, "every N steps"));
  }
  mlprof__findings_free(&f);
}

/* Syncs as long in total (27% of the time) but every other step (a log,
 * a checkpoint), or every step but short: no finding. */
static void test_dist_rare_host_syncs_no_finding(void) {
  sim s = base();
  s.syncs_per_step = 0.5;
  s.sync_ms = 6;
  mlprof__findings f;
  CHECK_EQ(run_sim(&s, &f), 0);
  CHECK_EQ_U64(f.dist.ranks[1].host_syncs, 5);
  CHECK_EQ(f.nfindings, 0);
  mlprof__findings_free(&f);
  s.syncs_per_step = 2;
  s.sync_ms = 0.01;
  CHECK_EQ(run_sim(&s, &f), 0);
  CHECK_EQ_U64(f.dist.ranks[1].host_syncs, 20);
  CHECK_EQ(f.nfindings, 0);
  mlprof__findings_free(&f);
}

/* ---- hostile files: claims, name ids and clocks ------------------------- */

/* This test process (the runner forks each) may map at most 512 MiB: what a
 * few small files hold, many times over. A sanitizer's shadow memory needs
 * more address space than that, so its build goes without. */
static void limit_memory(void) {
#ifndef __SANITIZE_ADDRESS__
  struct rlimit rl = {512u << 20, 512u << 20};
  setrlimit(RLIMIT_AS, &rl);
#endif
}

typedef struct {
  int64_t world;      /* the world size its header claims */
  size_t collectives; /* all-reduces over "world", seq 0, 1, ... */
  uint32_t lost_id;   /* a zone span of this id, never announced (0: none) */
  uint64_t start_mono, start_wall;
  const char *clock_init, *clock_final; /* META values, or NULL */
} hostile;

enum { H_AR = 1, H_GROUP, H_WORLD, H_SEQ, H_BYTES, H_COMPUTE };

/* Writes rank's profile rN.mlprof in dir as h says: each collective after
 * 0.8 ms of compute, 0.1 ms long, 1 ms apart. 0, or -1. */
static int hostile_rank(const char *dir, int rank, const hostile *h) {
  char path[256], host[16];
  snprintf(path, sizeof path, "%s/r%d.mlprof", dir, rank);
  snprintf(host, sizeof host, "h%d", rank);
  FILE *f = synth_open(path, 4);
  if (!f) return -1;
  synth_rank_header(f, 100 + (uint64_t)rank, 1, h->start_wall, h->start_mono,
                    rank, h->world, host, "/usr/bin/train");
  payload p = {.n = 0};
  p_uv(&p, 6);
  p_name(&p, H_AR, MLPROF__NAME_ZONE, MLPROF_CAT_COMM, "all_reduce");
  p_name(&p, H_GROUP, MLPROF__NAME_STRING, 0, "group");
  p_name(&p, H_WORLD, MLPROF__NAME_STRING, 0, "world");
  p_name(&p, H_SEQ, MLPROF__NAME_UNITS, 0, "seq");
  p_name(&p, H_BYTES, MLPROF__NAME_UNITS, 0, "bytes");
  p_name(&p, H_COMPUTE, MLPROF__NAME_ZONE, 0, "compute");
  chunk(f, MLPROF__CHUNK_NAMES, &p);
  synth_events e = {.f = f, .tid = 1};
  uint64_t t = 0;
  for (size_t i = 0; i < h->collectives; i++, t += 1000000) {
    synth_ev_span(&e, H_COMPUTE, 0, t, t + 800000);
    synth_ev_span(&e, H_AR, 0, t + 850000, t + 950000);
    synth_ev_span_meta(&e, H_GROUP, H_WORLD);
    synth_ev_span_units(&e, H_SEQ, i);
    synth_ev_span_units(&e, H_BYTES, 4096);
  }
  if (h->lost_id) synth_ev_span(&e, h->lost_id, 0, t, t + 1000);
  synth_ev_flush(&e);
  if (h->clock_init) synth_meta(f, "dist.clock.init", h->clock_init);
  if (h->clock_final) synth_meta(f, "dist.clock.final", h->clock_final);
  synth_end(f, t + 1000);
  return fclose(f) ? -1 : 0;
}

/* Writes ranks 0 and 1 (h[0], h[1]) into a new directory dir (room for
 * 64 bytes) and opens them as a job. 0, or -1. */
static int hostile_job(char *dir, const hostile *h, mlprof__job *job) {
  snprintf(dir, 64, "/tmp/mlprof-hostile-XXXXXX");
  if (!mkdtemp(dir) || hostile_rank(dir, 0, &h[0]) ||
      hostile_rank(dir, 1, &h[1]))
    return -1;
  const char *paths[] = {dir};
  char err[256];
  return mlprof__job_open(job, paths, 1, err, sizeof err) ? -1 : 0;
}

static void hostile_remove(const char *dir) {
  char path[256];
  for (int r = 0; r < 2; r++) {
    snprintf(path, sizeof path, "%s/r%d.mlprof", dir, r);
    unlink(path);
  }
  rmdir(dir);
}

/* Ranks 0 and 1 of a job claiming 2^20 ranks (or 4096, with as many
 * collectives as real files would hold): the analysis sizes nothing by the
 * claim, and with ranks missing has no job of ranks to analyse. */
static void test_dist_claimed_world_size_sizes_nothing(void) {
  static const struct {
    int64_t world;
    size_t collectives;
  } cases[] = {{1 << 20, 200}, {4096, 20000}};
  limit_memory();
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    hostile h = {.world = cases[c].world,
                 .collectives = cases[c].collectives,
                 .start_mono = 1000000000,
                 .start_wall = 1700000000000000000ull};
    hostile both[2] = {h, h};
    char dir[64], err[256];
    mlprof__job job;
    mlprof__analysis a;
    if (hostile_job(dir, both, &job)) TEST_FAIL("cannot write the job");
    int rc = analyse(&job, MLPROF__ANALYSIS_FINDINGS, &a, err, sizeof err);
    mlprof__job_close(&job);
    hostile_remove(dir);
    if (rc) TEST_FAIL("world %lld: %s", (long long)cases[c].world, err);
    CHECK_EQ(a.f.dist.nranks, 0);
    CHECK_EQ(a.r.nprocs, 2);
    mlprof__analysis_free(&a);
  }
}

/* A rank's span of an id never announced, far past any the file holds
 * (150 000 000, and near 2^32): it costs its own entry only, and the job's
 * analysis is whole, the id's zone shown as "name #ID". */
static void test_dist_far_name_ids_cost_their_entry(void) {
  static const uint32_t ids[] = {150000000u, 3000000000u};
  limit_memory();
  for (size_t c = 0; c < sizeof ids / sizeof *ids; c++) {
    hostile h = {.world = 2,
                 .collectives = 20,
                 .start_mono = 1000000000,
                 .start_wall = 1700000000000000000ull};
    hostile both[2] = {h, h};
    both[0].lost_id = ids[c];
    char dir[64], err[256], want[32];
    mlprof__job job;
    mlprof__analysis a;
    if (hostile_job(dir, both, &job)) TEST_FAIL("cannot write the job");
    int rc = analyse(&job, MLPROF__ANALYSIS_FINDINGS, &a, err, sizeof err);
    mlprof__job_close(&job);
    hostile_remove(dir);
    if (rc) TEST_FAIL("id %u: %s", ids[c], err);
    CHECK_EQ(a.f.dist.nranks, 2);
    CHECK_EQ_U64(a.f.dist.matched, 20);
    snprintf(want, sizeof want, "name #%u", ids[c]);
    int found = 0;
    for (size_t z = 0; z < a.r.nzones; z++)
      found |= strcmp(a.r.zones[z].name, want) == 0 && a.r.zones[z].count == 1;
    CHECK(found);
    mlprof__analysis_free(&a);
  }
}

/* Clock offsets and starts near the ends of int64_t (hostile META values
 * and headers): no arithmetic overflows (the sanitizer build checks), a
 * measurement past MLPROF__CLOCK_MAX is left out and said, one within it
 * is taken. */
static void test_dist_clock_offsets_at_int64_ends(void) {
  static const struct {
    uint64_t mono0, wall0, mono1, wall1;
    const char *init0, *init1, *final1;
    int rejected1;
  } cases[] = {
      {1000, 1000, 1000, 1000, "0 0 0", "9223372036854775000 10 5",
       "-9223372036854775000 10 6", 1},
      {UINT64_MAX, 0, 0, UINT64_MAX, "4611686018427387903 0 0",
       "-4611686018427387903 10 5",
       "4611686018427387903 10 4611686018427387903", 0},
      {INT64_MAX, 1, 1, INT64_MAX, "-4611686018427387903 0 0",
       "4611686018427387903 0 1", "-4611686018427387903 0 2", 0},
      {1000, 1000, 1000, 1000, "0 0 0", "99999999999999999999 1 1", NULL, 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    hostile h[2] = {{.world = 2,
                     .collectives = 5,
                     .start_mono = cases[c].mono0,
                     .start_wall = cases[c].wall0,
                     .clock_init = cases[c].init0},
                    {.world = 2,
                     .collectives = 5,
                     .start_mono = cases[c].mono1,
                     .start_wall = cases[c].wall1,
                     .clock_init = cases[c].init1,
                     .clock_final = cases[c].final1}};
    char dir[64], err[256];
    mlprof__job job;
    mlprof__analysis a;
    if (hostile_job(dir, h, &job)) TEST_FAIL("cannot write the job");
    const mlprof__job_profile *r1 = NULL;
    for (size_t i = 0; i < job.count; i++) {
      if (job.profiles[i].rank == 1) r1 = &job.profiles[i];
      /* Times far along a profile are placed without overflow too. */
      (void)mlprof__job_time(&job.profiles[i], UINT64_MAX / 2);
      (void)mlprof__job_time(&job.profiles[i], 0);
    }
    CHECK(r1 != NULL);
    CHECK_EQ(r1->clock_rejected, cases[c].rejected1);
    CHECK_EQ(r1->has_clock[0], !cases[c].rejected1);
    int rc = analyse(&job, MLPROF__ANALYSIS_FINDINGS, &a, err, sizeof err);
    mlprof__job_close(&job);
    hostile_remove(dir);
    if (rc) TEST_FAIL("case %zu: %s", c, err);
    int said = 0;
    for (size_t w = 0; w < a.r.nwarnings; w++)
      said |= strstr(a.r.warnings[w], "clock offset to rank 0") != NULL;
    CHECK_EQ(said, cases[c].rejected1);
    mlprof__analysis_free(&a);
  }
}

const mlprof_test mlprof_tests_dist[] = {
    {"straggler_named", test_dist_straggler_named},
    {"straggler_outside_zones", test_dist_straggler_outside_zones},
    {"balanced_no_finding", test_dist_balanced_no_finding},
    {"imbalance_without_straggler", test_dist_imbalance_without_straggler},
    {"communication_bound", test_dist_communication_bound},
    {"synchronisation_bound", test_dist_synchronisation_bound},
    {"straggler_at_small_collective", test_dist_straggler_at_small_collective},
    {"alignment_recovers_offsets", test_dist_alignment_recovers_offsets},
    {"barrier_constraint", test_dist_barrier_constraint},
    {"async_waiting_torch", test_dist_async_waiting_torch},
    {"async_waiting_mpi", test_dist_async_waiting_mpi},
    {"op_kinds", test_dist_op_kinds},
    {"one_rank_is_not_a_job", test_dist_one_rank_is_not_a_job},
    {"late_sender_recv", test_dist_late_sender_recv},
    {"late_sender_irecv", test_dist_late_sender_irecv},
    {"equal_links_no_finding", test_dist_equal_links_no_finding},
    {"slow_link_named", test_dist_slow_link_named},
    {"host_syncs_every_step", test_dist_host_syncs_every_step},
    {"rare_host_syncs_no_finding", test_dist_rare_host_syncs_no_finding},
    {"claimed_world_size_sizes_nothing",
     test_dist_claimed_world_size_sizes_nothing},
    {"far_name_ids_cost_their_entry", test_dist_far_name_ids_cost_their_entry},
    {"clock_offsets_at_int64_ends", test_dist_clock_offsets_at_int64_ends},
    {NULL, NULL}};
