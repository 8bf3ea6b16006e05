/* Bottlenecks: which zones cost the time, why, and what to do, in the
 * manner of Redis's LATENCY DOCTOR: thresholds set findings, each rendered
 * as plain advice with the numbers that triggered it (docs/findings.md has
 * the thresholds, the severity formula and the recommendation table).
 *
 * severity = 100 x impact x weight, capped at 100, where impact is the share
 * of the time the finding is about (the zone's self time over its threads'
 * time: wall time, or the summed life of the threads that ran it when they
 * ran at once; the data part of step time; the idle share of the GPU while
 * steps run; for an erratic zone the tail's share, at most the self share)
 * and weight says
 * how much of it a fix can win back: 1.0 data-bound (loading can hide
 * entirely behind compute), 0.9 I/O or waiting (can be overlapped), 0.8
 * memory and GPU underutilized, 0.6 compute (can only be made faster, or
 * given the CPU it waited for), 0.5 unclassified. A leak scores 50 + 50 x
 * min(1, growth / memory available), as it grows without bound with the length
 * of the run. */
#include <inttypes.h>
#include <math.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "findings.h"

#define DOMINANT_SHARE 0.10  /* self time / wall time */
#define OUTLIER_MIN_ZONES 10 /* p90 of zone means needs this many */
#define VARIABLE_CV 1.0      /* std / mean */
#define VARIABLE_MIN_COUNT 20
#define VARIABLE_MIN_SHARE 0.02 /* (mean - p50) x count / wall */
#define COMPUTE_CPU_PCT 50.0    /* busy: CPU >= 50% of one core */
#define WAIT_CPU_PCT 25.0       /* waiting: wall >= 4 x CPU time */
#define SATURATED_IDLE_PCT 10.0 /* the machine had no CPU to spare */
#define SATURATED_CPU_PCT 30.0  /* busy, on a saturated machine */
#define CONTENDED_RUNQ_PCT 25.0 /* runnable, waiting for a CPU */
#define COMM_COVER 0.5          /* of a waiting zone's time, communication */
#define MEMORY_RSS_PER_CALL 8e6 /* RSS growth per call, bytes */
#define DATA_SHARE 0.15         /* data loading share of step time */
#define GPU_UTIL_LOW 50.0       /* mean GPU utilization while steps run */
#define PRESSURE_AVAILABLE 0.10 /* memory available / total */
#define SWAP_GROWTH 64e6        /* bytes */

static const char rec_data[] =
    "load the next batch while this one computes: more DataLoader workers "
    "(num_workers), pin_memory=True, prefetching (prefetch_factor, "
    "persistent_workers=True); cache decoded samples or pre-process them "
    "offline; read from faster storage";
static const char rec_io[] =
    "overlap the wait with work: asynchronous or background I/O, a prefetch "
    "thread or a worker pool, larger and fewer reads; cache the data in "
    "memory or on local SSD; for network or IPC waits, batch requests";
static const char rec_comm[] =
    "the time waits for other ranks or the network: see the job's "
    "distributed findings (straggler, load_imbalance, communication_bound); "
    "balance the work and the data across ranks, overlap communication with "
    "computation (DDP bucket sizes, bucket_cap_mb; gradient accumulation "
    "with no_sync(); fewer, larger collectives)";
static const char rec_compute[] =
    "make the work cheaper: vectorised or batched operations, an optimised "
    "library (BLAS, oneDNN, cuDNN), torch.compile, lower precision, or move "
    "it to the GPU; instrument its children to find the hot spot";
static const char rec_compute_native[] =
    "make the work cheaper: vectorised (SIMD) or batched operations, an "
    "optimised library (BLAS, oneDNN), fewer allocations and copies, lower "
    "precision; instrument its children to find the hot spot";
static const char rec_compute_pycall[] =
    "make this Python function cheaper: a better algorithm, fewer calls "
    "(cache results, hoist work out of loops), or its loops moved into "
    "vectorised library calls (NumPy, torch); the self time of the functions "
    "it calls shows where inside it the time goes";
static const char rec_contended[] =
    "the machine was oversubscribed: run fewer busy processes and threads "
    "than there are cores, e.g. fewer DataLoader workers (num_workers), "
    "OMP_NUM_THREADS or torch.set_num_threads() so that the threads of every "
    "process together fit the cores, no other jobs on the node; then make the "
    "work itself cheaper";
static const char rec_memory[] =
    "allocate less per call: reuse buffers, drop references kept across "
    "steps, smaller batches or activation checkpointing; watch for swapping";
static const char rec_gpu[] =
    "give the GPU more work per launch: a larger batch, mixed precision "
    "(torch.autocast), fewer host synchronisations (.item(), .cpu(), "
    "printing tensors in the loop), CUDA graphs or torch.compile for many "
    "small kernels; make sure the input pipeline keeps up";
static const char rec_pressure[] =
    "the machine ran short of memory: a smaller batch, fewer DataLoader "
    "workers (each holds a copy of the dataset object), activation "
    "checkpointing, or a machine with more memory";
static const char rec_leak[] =
    "memory is kept across steps: look for lists of losses or outputs that "
    "hold tensors (store loss.item() or .detach()), caches without a bound, "
    "growing queues; the zones listed grew memory in most of their calls";
static const char rec_leak_native[] =
    "memory is allocated and not freed while the program runs: run it under a "
    "leak checker (valgrind --leak-check=full, heaptrack, AddressSanitizer's "
    "LeakSanitizer); look for caches without a bound and growing queues; the "
    "zones listed grew memory in most of their calls";
static const char rec_leak_profiler[] =
    "another profiler ran in this process (torch.profiler, backend=\"torch\") "
    "and holds its events in memory until it exports them: the growth may be "
    "its own; compare with a run without it (backend=\"mlprof\") before "
    "looking for objects kept across steps (lists of losses holding tensors, "
    "caches without a bound, growing queues)";
static const char rec_hotspot[] =
    "the largest share of time, cause not classified: profile with sampling "
    "(`mlprof run`, MLPROF_SAMPLE_MS) or instrument its parts";
static const char rec_mixed[] =
    "part computing, part waiting: instrument its parts to separate them, "
    "then follow the compute and I/O advice for each";

/* 3 significant digits with a unit, as the text report shows durations. */
static const char *dur(char *b, size_t len, double ns) {
  static const struct {
    double div;
    const char *unit;
  } units[] = {{1e9, "s"}, {1e6, "ms"}, {1e3, "us"}, {1, "ns"}};
  size_t i = 0;
  while (i + 1 < sizeof units / sizeof units[0] && ns < units[i].div) i++;
  double v = ns / units[i].div;
  snprintf(b, len,
           v < 10    ? "%.2f %s"
           : v < 100 ? "%.1f %s"
                     : "%.0f %s",
           v, units[i].unit);
  return b;
}

static double severity(double impact, double weight) {
  double s = 100 * impact * weight;
  return s > 100 ? 100 : s < 0 ? 0 : s;
}

/* The profiler's own work ("mlprof hooks": the PyTorch layer hooks) is
 * recorded in zones named "mlprof ..." so that it stays out of the user's
 * zones' self time; it is no hotspot of the user's code to act on. */
static int own_zone(const mlprof__zone_stats *z) {
  return z->name_len > 7 && memcmp(z->name, "mlprof ", 7) == 0;
}

/* Where the data-bound finding points: the data zone with most time. */
static const mlprof__zone_stats *data_zone(const mlprof__report *r) {
  const mlprof__zone_stats *best = NULL;
  for (size_t i = 0; i < r->nzones; i++) {
    const mlprof__zone_stats *z = &r->zones[i];
    if (mlprof__zone_part(z->category, z->name, z->name_len, 1) !=
        MLPROF__PART_DATA)
      continue;
    if (!best || z->total_ns > best->total_ns) best = z;
  }
  return best;
}

static int data_bound(const mlprof__fpass *p, mlprof__findings *f,
                      const mlprof__zone_stats **folded) {
  const mlprof__steps *s = &f->steps;
  *folded = NULL;
  if (s->count < 3 || s->share[MLPROF__PART_DATA] < DATA_SHARE) return 0;
  const mlprof__zone_stats *z = data_zone(p->r);
  char a[32], b[32];
  double share = s->share[MLPROF__PART_DATA];
  double per_step = (double)s->part_ns[MLPROF__PART_DATA] / (double)s->count;
  const mlprof__zone_samples *zs =
      z && p->res ? mlprof__resources_zone(p->res, z->name, z->name_len) : NULL;
  char cpu[96] = "";
  if (zs && zs->has_cpu)
    snprintf(cpu, sizeof cpu, "; the process's CPU while loading: %.0f%%",
             zs->cpu_pct);
  mlprof__finding *x = mlprof__finding_add(
      f, "data_bound", z ? z->name : NULL, z ? z->name_len : 0,
      "steps wait on data loading: %.1f%% of step time (%s of %s per step "
      "over %" PRIu64 " steps)%s",
      share * 100, dur(a, sizeof a, per_step), dur(b, sizeof b, s->mean_ns),
      s->count, cpu);
  if (!x) return MLPROF_ENOMEM;
  x->flagged = "steps";
  x->severity = severity(share, 1.0);
  x->recommendation = rec_data;
  mlprof__finding_ev(x, "data_share", share);
  mlprof__finding_ev(x, "data_per_step_ns", per_step);
  mlprof__finding_ev(x, "step_mean_ns", s->mean_ns);
  mlprof__finding_ev(x, "steps", (double)s->count);
  if (zs && zs->has_cpu) mlprof__finding_ev(x, "cpu_pct", zs->cpu_pct);
  if (zs && zs->has_runq)
    mlprof__finding_ev(x, "runq_wait_pct", zs->runq_wait_pct);
  if (zs && zs->has_iowait) mlprof__finding_ev(x, "iowait_pct", zs->iowait_pct);
  *folded = z;
  return 0;
}

/* Mean GPU utilization while the steps run (or over the whole run). */
static int gpu_idle(const mlprof__fpass *p, mlprof__findings *f) {
  const mlprof__resources *res = p->res;
  if (!res) return 0;
  double sum = 0, n = 0, used = 0;
  size_t gpus = 0;
  const mlprof__steps *s = &f->steps;
  for (size_t i = 0; i < res->nseries; i++) {
    const mlprof__series *se = &res->series[i];
    if (se->subject == MLPROF__SUBJECT_PROCESS)
      for (size_t k = 0; k < se->n; k++)
        used += se->v[MLPROF__COL_GPU_MEM][k] > 0;
    if (se->subject != MLPROF__SUBJECT_GPU) continue;
    int any = 0;
    for (size_t k = 0; k < se->n; k++) {
      double u = se->v[MLPROF__COL_GPU_UTIL][k];
      if (isnan(u)) continue;
      any = 1;
      used += u > 0;
      if (s->source == MLPROF__STEPS_MARKS &&
          (se->t[k] < s->first_ns || se->t[k] > s->last_ns))
        continue;
      sum += u;
      n++;
    }
    gpus += any;
  }
  if (!gpus || !used) return 0; /* no GPU sampled, or this job never used one */
  double util = n ? sum / n : NAN;
  const char *during = "while the steps ran";
  if (s->source == MLPROF__STEPS_ZONE) {
    const mlprof__zone_samples *zs =
        mlprof__resources_zone(res, s->zone, s->zone_len);
    if (zs && zs->has_gpu) util = zs->gpu_util_pct;
  } else if (s->source == MLPROF__STEPS_NONE) {
    during = "over the run";
  }
  if (isnan(util) || util >= GPU_UTIL_LOW) return 0;
  mlprof__finding *x = mlprof__finding_add(
      f, "gpu_underutilized", NULL, 0,
      "GPU utilization averaged %.0f%% %s (%zu GPU%s sampled)", util, during,
      gpus, gpus == 1 ? "" : "s");
  if (!x) return MLPROF_ENOMEM;
  x->flagged = "steps";
  x->severity = severity(1 - util / 100, 0.8);
  x->recommendation = rec_gpu;
  mlprof__finding_ev(x, "gpu_util_pct", util);
  mlprof__finding_ev(x, "gpus", (double)gpus);
  return 0;
}

static int memory_pressure(const mlprof__fpass *p, mlprof__findings *f) {
  const mlprof__resources *res = p->res;
  if (!res) return 0;
  for (size_t i = 0; i < res->nsubjects; i++) {
    const mlprof__subject_stats *s = &res->subjects[i];
    if (s->subject != MLPROF__SUBJECT_SYSTEM) continue;
    const mlprof__measure_stats *tot =
        mlprof__subject_measure(s, "mem_total_bytes");
    const mlprof__measure_stats *av =
        mlprof__subject_measure(s, "mem_available_bytes");
    const mlprof__measure_stats *sw =
        mlprof__subject_measure(s, "swap_used_bytes");
    double low = av && av->count && tot && tot->count && tot->max > 0
                     ? av->min / tot->max
                     : NAN;
    double swap = sw && sw->count ? sw->max - sw->min : 0;
    int pressed = !isnan(low) && low < PRESSURE_AVAILABLE;
    if (!pressed && swap < SWAP_GROWTH) continue;
    char host[64] = "";
    if (s->hostname[0]) snprintf(host, sizeof host, " on %.40s", s->hostname);
    mlprof__finding *x = mlprof__finding_add(
        f, "memory", NULL, 0,
        "memory ran short%s: as little as %.1f%% of memory available, swap "
        "in use grew by %.0f MB",
        host, isnan(low) ? 100.0 : low * 100, swap / 1e6);
    if (!x) return MLPROF_ENOMEM;
    x->flagged = "memory";
    x->severity = severity(pressed ? 1 - low : 0.75, 0.8);
    x->recommendation = rec_pressure;
    if (!isnan(low)) mlprof__finding_ev(x, "mem_available_min_share", low);
    if (av && av->count)
      mlprof__finding_ev(x, "mem_available_min_bytes", av->min);
    mlprof__finding_ev(x, "swap_growth_bytes", swap);
  }
  return 0;
}

static int dbl_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int same_name(const char *a, size_t alen, const char *b, size_t blen) {
  return a && b && alen == blen && memcmp(a, b, alen) == 0;
}

static int zones(const mlprof__fpass *p, mlprof__findings *f,
                 const mlprof__zone_stats *folded) {
  const mlprof__report *r = p->r;
  if (!r->wall_ns || !r->nzones) return 0;
  double wall = (double)r->wall_ns;
  /* The 90th percentile of zone means (nearest rank). */
  double p90 = INFINITY;
  if (r->nzones >= OUTLIER_MIN_ZONES) {
    double *means = malloc(r->nzones * sizeof *means);
    if (!means) return MLPROF_ENOMEM;
    for (size_t i = 0; i < r->nzones; i++) means[i] = r->zones[i].mean_ns;
    mlprof__sort(means, r->nzones, sizeof *means, dbl_cmp);
    p90 = means[mlprof__pct_rank(r->nzones, 90) - 1];
    free(means);
  }
  for (size_t i = 0; i < r->nzones; i++) {
    const mlprof__zone_stats *z = &r->zones[i];
    /* The data-bound finding is about the data part: its zones (the
     * workers' loading, the main process's wait for it) are not listed
     * again. */
    if (!z->count || own_zone(z) ||
        (folded && mlprof__zone_part(z->category, z->name, z->name_len, 1) ==
                       MLPROF__PART_DATA))
      continue;
    const mlprof__fzone *fz = mlprof__fpass_zone(p, z->name, z->name_len);
    if (fz && !fz->thread_spans) continue; /* on tracks only */
    if (f->steps.source == MLPROF__STEPS_ZONE &&
        same_name(z->name, z->name_len, f->steps.zone, f->steps.zone_len))
      continue;
    /* Shares of its threads' time (the life of each thread that ran it)
     * when that is more than wall time (threads that ran at once): the
     * zones of two busy threads never add up past 100%. */
    double span = fz && fz->thread_ns > wall ? fz->thread_ns : wall;
    uint32_t nthreads = span > wall ? fz->threads : 1;
    double self = (double)z->self_ns / span;
    if (self > 1) self = 1;
    double cv = z->mean_ns > 0 ? z->std_ns / z->mean_ns : 0;
    double tail =
        z->mean_ns > (double)z->p50_ns
            ? (z->mean_ns - (double)z->p50_ns) * (double)z->count / span
            : 0;
    if (tail > 1) tail = 1;
    const char *why = NULL;
    double impact = self;
    /* An erratic zone's tail is of its inclusive durations, which hold its
     * children's: it weighs at most its own (self) time, so a parent of
     * erratic children is not blamed for them. */
    if (self >= DOMINANT_SHARE)
      why = "dominant";
    else if (z->mean_ns > p90 && self >= MLPROF__FLAG_MIN_SHARE)
      why = "outlier";
    else if (z->count >= VARIABLE_MIN_COUNT && cv >= VARIABLE_CV &&
             fmin(tail, self) >= VARIABLE_MIN_SHARE) {
      why = "variable";
      impact = fmin(tail, self);
    }
    if (!why) continue;
    const mlprof__zone_samples *zs0 =
        p->res ? mlprof__resources_zone(p->res, z->name, z->name_len) : NULL;
    /* The CPU and run-queue shares weighted by overlap (findings.h), in
     * place of the plain means of the samples inside the spans. */
    mlprof__zone_samples zcopy;
    const mlprof__zone_samples *zs = zs0;
    double busy = COMPUTE_CPU_PCT, idle = NAN;
    if (fz && fz->cpu_ns > 0) {
      if (zs0)
        zcopy = *zs0;
      else
        memset(&zcopy, 0, sizeof zcopy);
      zcopy.has_cpu = 1;
      zcopy.cpu_pct = fz->cpu_sum / fz->cpu_ns;
      zcopy.has_runq = fz->runq_ns > 0;
      zcopy.runq_wait_pct = zcopy.has_runq ? fz->runq_sum / fz->runq_ns : 0;
      zs = &zcopy;
    }
    /* Time runnable but not running was wanted on the CPU: a zone starved
     * by other work is busy, not waiting. */
    double runq = zs && zs->has_runq ? zs->runq_wait_pct : 0;
    double wanted = zs && zs->has_cpu ? zs->cpu_pct + runq : NAN;
    /* Without the run-queue wait, a guess: other work contends only for a
     * busy zone's CPU, never for a waiting one's, so on a saturated machine
     * busy starts lower. With it, the zone's own wait says. */
    if (fz && fz->idle_ns > 0) idle = fz->idle_sum / fz->idle_ns;
    if (!isnan(idle) && idle < SATURATED_IDLE_PCT && !(zs && zs->has_runq))
      busy = SATURATED_CPU_PCT;
    char a[32], b[32], of[48] = "wall time", what[200];
    if (nthreads > 1)
      snprintf(of, sizeof of, "its %" PRIu32 " threads' time", nthreads);
    if (!strcmp(why, "variable"))
      snprintf(what, sizeof what,
               "erratic: std %.1fx the mean, p50 %s, mean %s; %.1f%% of %s in "
               "its own code",
               cv, dur(a, sizeof a, (double)z->p50_ns),
               dur(b, sizeof b, z->mean_ns), self * 100, of);
    else
      snprintf(what, sizeof what,
               "%.1f%% of %s in its own code (mean %s, %" PRIu64 " calls)",
               self * 100, of, dur(a, sizeof a, z->mean_ns), z->count);
    /* Advice for what the zone is: a Python function (the calls tracer's),
     * code of a Python process (PyTorch's), or native code. */
    const char *compute_rec =
        fz && fz->thread_spans && fz->pycall_spans == fz->thread_spans
            ? rec_compute_pycall
        : !fz || fz->python_spans ? rec_compute
                                  : rec_compute_native;
    const char *type, *rec, *note = NULL;
    double weight;
    char cause[200];
    int pressure = 0;
    for (size_t k = 0; k < f->nfindings; k++)
      pressure |=
          !strcmp(f->findings[k].type, "memory") && f->findings[k].zone == NULL;
    /* Communication, or a wait under communication spans of its process
     * (comm zones inside it, "DDP wait" on a track): the other ranks or the
     * network hold it, not I/O. */
    int comm = z->category == MLPROF_CAT_COMM ||
               mlprof__zone_part(z->category, z->name, z->name_len, 1) ==
                   MLPROF__PART_COMM;
    double cover = comm ? 1
                   : fz && fz->span_ns
                       ? (double)fz->comm_ns / (double)fz->span_ns
                       : 0;
    char names[160] = "";
    for (size_t k = 0; fz && !comm && k < MLPROF__COMM_NAMES; k++) {
      size_t at = strlen(names);
      if (fz->comm_by[k].ns)
        snprintf(names + at, sizeof names - at, "%s%.40s", at ? ", " : "",
                 p->zones[fz->comm_by[k].zone].name);
    }
    if (zs && zs->has_rss &&
        ((zs->rss_change_bytes >= MEMORY_RSS_PER_CALL && !(wanted >= busy)) ||
         (pressure && zs->rss_change_bytes > 0))) {
      type = "memory";
      rec = rec_memory;
      weight = 0.8;
      snprintf(cause, sizeof cause, "RSS grows %.1f MB per call",
               zs->rss_change_bytes / 1e6);
    } else if (comm || (zs && zs->has_cpu && zs->cpu_pct <= WAIT_CPU_PCT &&
                        !(wanted >= busy) && cover >= COMM_COVER)) {
      type = "communication_wait";
      rec = rec_comm;
      weight = 0.5;
      if (comm)
        snprintf(cause, sizeof cause, "communication (by its %s)",
                 z->category == MLPROF_CAT_COMM ? "category" : "name");
      else
        snprintf(cause, sizeof cause,
                 "waiting for communication: CPU %.0f%% of a core, %.0f%% of "
                 "its time under %.120s",
                 zs->cpu_pct, cover * 100, names);
    } else if (wanted >= busy && runq >= CONTENDED_RUNQ_PCT) {
      type = "compute";
      rec = rec_contended;
      weight = 0.6;
      snprintf(cause, sizeof cause,
               "contended: wanted %.0f%% of a core but got %.0f%%, runnable "
               "and waiting for a CPU %.0f%% of the time (no CPU it may run on "
               "was free)",
               wanted, zs->cpu_pct, runq);
    } else if (wanted >= busy) {
      type = "compute";
      rec = compute_rec;
      weight = 0.6;
      snprintf(
          cause, sizeof cause, "busy on CPU: %.0f%% of a core while it runs%s",
          zs->cpu_pct,
          busy < COMPUTE_CPU_PCT ? " (on a machine with no idle CPU)" : "");
    } else if (zs && zs->has_cpu && zs->cpu_pct <= WAIT_CPU_PCT) {
      type = "io_wait";
      rec = rec_io;
      weight = 0.9;
      double ratio = zs->cpu_pct > 0 ? 100 / zs->cpu_pct : INFINITY;
      char io[64] = "";
      if (zs->has_iowait)
        snprintf(io, sizeof io, ", system iowait %.0f%%", zs->iowait_pct);
      char times[48] = "no CPU time at all";
      if (isfinite(ratio))
        snprintf(times, sizeof times, "wall time %.0fx CPU time", ratio);
      snprintf(cause, sizeof cause,
               "waiting: CPU %.0f%% of a core while it runs (%s)%s",
               zs->cpu_pct, times, io);
    } else if (zs && zs->has_cpu) {
      type = "hotspot";
      rec = rec_mixed;
      weight = 0.5;
      snprintf(cause, sizeof cause, "CPU %.0f%% of a core while it runs",
               zs->cpu_pct);
    } else if (z->category == MLPROF_CAT_IO) {
      type = "io_wait";
      rec = rec_io;
      weight = 0.9;
      snprintf(cause, sizeof cause, "an I/O zone (by its category)");
      note = "not sampled: classified by its category only";
    } else {
      type = "hotspot";
      rec = rec_hotspot;
      weight = 0.5;
      snprintf(cause, sizeof cause, "cause not classified");
      note = "no samples overlapped it: only the spans are known";
    }
    mlprof__finding *x = mlprof__finding_add(f, type, z->name, z->name_len,
                                             "%s; %s", what, cause);
    if (!x) return MLPROF_ENOMEM;
    x->flagged = why;
    x->severity = severity(impact, weight);
    x->recommendation = rec;
    x->note = note;
    mlprof__finding_ev(x, "self_share", self);
    mlprof__finding_ev(x, "self_ns", (double)z->self_ns);
    mlprof__finding_ev(x, "mean_ns", z->mean_ns);
    mlprof__finding_ev(x, "count", (double)z->count);
    mlprof__finding_ev(x, "cv", cv);
    if (!strcmp(why, "outlier")) mlprof__finding_ev(x, "p90_of_means_ns", p90);
    if (!strcmp(why, "variable")) mlprof__finding_ev(x, "tail_share", tail);
    if (zs && zs->has_cpu) {
      mlprof__finding_ev(x, "cpu_pct", zs->cpu_pct);
      if (zs->cpu_pct > 0)
        mlprof__finding_ev(x, "wall_over_cpu", 100 / zs->cpu_pct);
    }
    if (zs && zs->has_runq)
      mlprof__finding_ev(x, "runq_wait_pct", zs->runq_wait_pct);
    if (zs && zs->has_iowait)
      mlprof__finding_ev(x, "iowait_pct", zs->iowait_pct);
    if (zs && zs->has_rss)
      mlprof__finding_ev(x, "rss_change_bytes", zs->rss_change_bytes);
    if (zs && zs->has_gpu)
      mlprof__finding_ev(x, "gpu_util_pct", zs->gpu_util_pct);
    if (!isnan(idle)) mlprof__finding_ev(x, "system_idle_pct", idle);
    if (cover > 0) mlprof__finding_ev(x, "comm_share", cover);
  }
  return 0;
}

static const char *label_of(const mlprof__resources *res, const char *host,
                            uint8_t subject, uint64_t id) {
  for (size_t i = 0; i < res->nsubjects; i++) {
    const mlprof__subject_stats *s = &res->subjects[i];
    if (s->subject == subject && s->id == id && !strcmp(s->hostname, host))
      return s->label;
  }
  return "";
}

static int leaks(const mlprof__fpass *p, mlprof__findings *f) {
  for (size_t i = 0; i < f->nleaks; i++) {
    const mlprof__leak *lk = &f->leaks[i];
    /* What was left to grow into: the host's least memory available. */
    double avail = NAN;
    for (size_t k = 0; k < p->res->nseries; k++) {
      const mlprof__series *s = &p->res->series[k];
      if (s->subject != MLPROF__SUBJECT_SYSTEM ||
          strcmp(s->hostname, lk->hostname))
        continue;
      for (size_t j = 0; j < s->n; j++) {
        double v = s->v[MLPROF__COL_MEM_AVAILABLE][j];
        if (!isnan(v) && (isnan(avail) || v < avail)) avail = v;
      }
    }
    const char *label = label_of(p->res, lk->hostname, lk->subject, lk->id);
    char who[128], rate[96], zonesl[200] = "";
    snprintf(who, sizeof who, "%s of %s %" PRIu64 "%s%.40s%s",
             !strcmp(lk->measure, "rss_bytes") ? "RSS" : "GPU memory",
             lk->subject == MLPROF__SUBJECT_GPU ? "GPU" : "pid", lk->id,
             label[0] ? " (" : "", label, label[0] ? ")" : "");
    if (lk->by_steps)
      snprintf(rate, sizeof rate,
               "%.2f MB per step (%.1f MB/min) over steps %.0f-%.0f",
               lk->slope_mb_per_step, lk->slope_mb_per_min, lk->begin_step,
               lk->end_step);
    else
      snprintf(rate, sizeof rate, "%.2f MB/min over %.1f s",
               lk->slope_mb_per_min, (double)(lk->end_ns - lk->begin_ns) / 1e9);
    for (size_t k = 0; k < lk->nzones && k < 3; k++) {
      size_t at = strlen(zonesl);
      snprintf(zonesl + at, sizeof zonesl - at, "%s%.40s",
               k ? ", " : "; grew in most calls of: ", lk->zones[k].name);
    }
    /* Another profiler's buffers are in the process's memory too. */
    uint64_t other = lk->process >= 0 ? p->track_spans[lk->process] : 0;
    char otherl[96] = "";
    if (other)
      snprintf(otherl, sizeof otherl,
               "; another profiler's buffers (%" PRIu64
               " events on its tracks) are in this memory",
               other);
    mlprof__finding *x = mlprof__finding_add(
        f, "memory_leak", lk->nzones ? lk->zones[0].name : NULL,
        lk->nzones ? lk->zones[0].name_len : 0, "%s grows %s: +%.0f MB%s%s",
        who, rate, lk->growth_mb, zonesl, otherl);
    if (!x) return MLPROF_ENOMEM;
    double ref = !isnan(avail) && avail > 0 ? avail : 0;
    x->flagged = "leak";
    x->severity = 50 + (ref ? 50 * fmin(1, lk->growth_mb * 1e6 / ref) : 0);
    x->recommendation = other ? rec_leak_profiler
                        : mlprof__runs_python(p->r, lk->process)
                            ? rec_leak
                            : rec_leak_native;
    if (other) {
      x->note = "part or all of the growth may be another profiler's buffers";
      mlprof__finding_ev(x, "other_profiler_spans", (double)other);
    }
    if (lk->by_steps)
      mlprof__finding_ev(x, "slope_mb_per_step", lk->slope_mb_per_step);
    mlprof__finding_ev(x, "slope_mb_per_min", lk->slope_mb_per_min);
    mlprof__finding_ev(x, "growth_mb", lk->growth_mb);
    mlprof__finding_ev(x, "trend_z", lk->trend_z);
    mlprof__finding_ev(x, "pid_or_gpu", (double)lk->id);
    if (ref) mlprof__finding_ev(x, "mem_available_min_bytes", ref);
  }
  return 0;
}

static const char rec_callee[] =
    "start with that function: most of the zone's time is spent under it "
    "(`mlprof report`, Hot functions by zone, shows its lines)";

/* A zone's finding gets the callee most of its sampled time was under
 * (mlprof__hot_callee); a zone with no finding that took CALLEE_MIN_SHARE
 * of the sampled time or more gets a finding of its own. */
#define CALLEE_MIN_SHARE 0.05

static int callees(const mlprof__fpass *p, mlprof__findings *f) {
  const mlprof__hot *h = &p->r->hot;
  size_t had = f->nfindings;
  for (size_t z = 0; z < h->nzones; z++) {
    const mlprof__hot_zone *hz = &h->zones[z];
    size_t len = strlen(hz->name);
    double share = 0;
    /* The profiler's own zones are no finding about the user's code. */
    int own = len > 7 && memcmp(hz->name, "mlprof ", 7) == 0;
    uint32_t fn = len && !own ? mlprof__hot_callee(h, hz->name, len, &share)
                              : MLPROF__NONE;
    if (fn == MLPROF__NONE) continue;
    const mlprof__hot_func *c = &h->funcs[fn];
    char where[640];
    if (c->first_line)
      snprintf(where, sizeof where, "%s (%s:%u)", c->function, c->file,
               (unsigned)c->first_line);
    else
      snprintf(where, sizeof where, "%s (%s)", c->function, c->file);
    int found = 0;
    for (size_t i = 0; i < had; i++) {
      mlprof__finding *x = &f->findings[i];
      if (!x->zone || x->zone_len != len || memcmp(x->zone, hz->name, len))
        continue;
      char line[1024];
      snprintf(line, sizeof line, "%s; %.0f%% of its sampled time under %s",
               x->summary, share * 100, where);
      char *d = mlprof__dup(line, strlen(line));
      if (!d) return MLPROF_ENOMEM;
      free(x->summary);
      x->summary = d;
      mlprof__finding_ev(x, "callee_share", share);
      found = 1;
    }
    double of = h->wall_ns ? (double)hz->wall_ns / (double)h->wall_ns : 0;
    if (found || of < CALLEE_MIN_SHARE) continue;
    mlprof__finding *x = mlprof__finding_add(
        f, "callee", hz->name, len,
        "%.0f%% of the time sampled in the zone is under one callee, %s",
        share * 100, where);
    if (!x) return MLPROF_ENOMEM;
    x->flagged = "stacks";
    x->severity = severity(of * share, 0.5);
    x->recommendation = rec_callee;
    mlprof__finding_ev(x, "callee_share", share);
    mlprof__finding_ev(x, "zone_sampled_ns", (double)hz->wall_ns);
    mlprof__finding_ev(x, "zone_sampled_share", of);
    mlprof__finding_ev(x, "samples", (double)hz->samples);
  }
  return 0;
}

int mlprof__bottlenecks_find(const mlprof__fpass *p, mlprof__findings *f) {
  const mlprof__zone_stats *folded = NULL;
  int rc = data_bound(p, f, &folded);
  if (!rc) rc = gpu_idle(p, f);
  if (!rc) rc = memory_pressure(p, f);
  if (!rc) rc = zones(p, f, folded);
  if (!rc) rc = callees(p, f);
  if (!rc && p->res) rc = leaks(p, f);
  if (rc) return rc;
  if (!f->sampled)
    f->note =
        "no process was sampled: dominant zones are listed but their cause "
        "(compute, memory, I/O) is not classified, and leaks are not looked "
        "for; run under `mlprof run` or set MLPROF_SAMPLE_MS";
  mlprof__findings_sort(f);
  return 0;
}
