/* The findings' read of the spans (see findings.h): one streaming pass over
 * every profile feeding the step breakdown, the latency objectives and the
 * RSS change per zone, then the analyses that need no spans. */
#include "findings.h"

#include <math.h>
#include <stdarg.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../format/wire.h"

/* As in stats.c: deeper spans count, but not in the step breakdown. */
#define MAX_DEPTH 4096

void mlprof__findings_opts_init(mlprof__findings_opts *o) {
  *o = (mlprof__findings_opts){.leak_min_mb = 10,
                               .leak_min_mb_per_step = 0.1,
                               .leak_min_mb_per_min = 1,
                               .slo_window_ns = 1000000000ull};
}

typedef struct {
  uint8_t part_top, part_nested;
  uint8_t comm;   /* communication, by its category or name */
  uint8_t pycall; /* a Python function's call (the calls tracer's site) */
  uint32_t zone;  /* index in p.zones */
  int slo;        /* objective index, -1 */
} name_info;

/* What the ended spans at one depth whose parent has not ended covered
 * (stats.c's child[] scheme): time with a part, and the samples' CPU,
 * run-queue wait and idle CPU over them (overlap()), which their parent
 * subtracts to be classified on its own time. */
typedef struct {
  uint64_t part;
  double cpu_sum, cpu_ns, runq_sum, runq_ns, idle_sum, idle_ns;
} below_st;

typedef struct {
  below_st *acc; /* acc[d]: spans at depth d */
  size_t cap, top;
  uint64_t total[MLPROF__NPARTS];  /* every part time of the thread so far */
  uint64_t at_top[MLPROF__NPARTS]; /* total at the last depth-0 span's end */
  uint64_t cur[MLPROF__NPARTS];    /* part time of the step under way */
  uint64_t last_mark;
  int in_step;     /* a mark came, and no step end since */
  uint64_t inside; /* spans ended since the last depth-0 span */
  uint8_t *ran;    /* by zone index: the thread ran that zone */
  size_t rancap;
  /* Its communication spans, in the order they ended: nearly sorted by
   * begin, where all threads' together interleave in runs of a flush. */
  mlprof__ival *comm;
  size_t ncomm, commcap;
} thread_st;

typedef struct {
  mlprof__fpass p;
  size_t zcap, rcap;
  mlprof__map zone_by_hash; /* name hash (probed on collision) -> zone */
  /* The report's zones that may be flagged (MLPROF__FLAG_MIN_SHARE of wall
   * time or more): name hash (probed) -> index in p.r->zones. */
  mlprof__map flaggable;
  mlprof__map rss_index; /* profile << 32 | zone -> index in p.rss */
  int python; /* the profile's process ran Python (mlprof__runs_python) */
  mlprof__slo_acc *slo;
  mlprof__gpu_acc *gpu;
  uint32_t bytes_id; /* the units name "bytes" of the profile, or 0 */
  uint32_t corr_id;  /* the units name "cuda.correlation", or 0 */
  /* the profile being read */
  size_t profile;
  uint64_t offset;
  const mlprof__series *proc; /* its process's samples holding RSS */
  const mlprof__series *cpu;  /* its process's samples holding cpu_pct (and
                                 runq_wait_pct) */
  const mlprof__series *sys;  /* its host's system samples, idle CPU */
  int gpu_spans;  /* the GPU analysis reads its spans (it has work tracks) */
  size_t hint[4]; /* mlprof__series_lower's: cpu, sys; proc at begin, end */
  name_info *names;
  size_t nnames, ncap;
  mlprof__map name_ids;  /* name id -> index in names */
  mlprof__map gauge_slo; /* a gauge's name id -> its objective */
  thread_st *threads;
  size_t nthreads, tcap;
  mlprof__map tids;
  uint32_t last_tid;
  thread_st *last_thread;
  /* Spans kept until the profile ends (id: their zone's index in p.zones):
   * the communication ones, and those of zones that may be flagged, whose
   * cover by the former is measured then. */
  mlprof__ival *comm, *cand;
  size_t ncomm, commcap, ncand, candcap;
  /* Sampling of cand: kept 1 in stride, a power of two (a mask, not a
   * division, on every span). */
  uint64_t cand_seen, cand_stride;
} pass;

#define CAND_MAX 16384 /* spans kept to measure their cover (a sample) */

/* The pass's zone named s, added if new; MLPROF__NONE when out of memory. */
static uint32_t zone_intern(pass *ps, const char *s, size_t n) {
  uint64_t h = mlprof__hash(s, n, MLPROF__HASH_START);
  for (;; h++) {
    uint32_t at = mlprof__map_get(&ps->zone_by_hash, h);
    if (at == MLPROF__NONE) break;
    if (ps->p.zones[at].len == n && memcmp(ps->p.zones[at].name, s, n) == 0)
      return at;
  }
  mlprof__fpass *p = &ps->p;
  char *copy = mlprof__dup(s, n);
  if (!copy || p->nzones >= MLPROF__NONE - 1 ||
      mlprof__grow(&p->zones, &ps->zcap, p->nzones + 1, sizeof *p->zones) ||
      mlprof__map_put(&ps->zone_by_hash, h, (uint32_t)p->nzones)) {
    free(copy);
    return MLPROF__NONE;
  }
  int candidate = 0;
  for (uint64_t k = mlprof__hash(s, n, MLPROF__HASH_START);; k++) {
    uint32_t at = mlprof__map_get(&ps->flaggable, k);
    if (at == MLPROF__NONE) break;
    const mlprof__zone_stats *z = &p->r->zones[at];
    if (z->name_len == n && memcmp(z->name, s, n) == 0) {
      candidate = 1;
      break;
    }
  }
  p->zones[p->nzones] =
      (mlprof__fzone){.name = copy, .len = n, .candidate = candidate};
  return (uint32_t)p->nzones++;
}

static int on_name(void *ud, const mlprof__name *n) {
  pass *ps = ud;
  if (n->kind == MLPROF__NAME_UNITS && n->name_len == 5 &&
      memcmp(n->name, "bytes", 5) == 0)
    ps->bytes_id = n->id;
  if (n->kind == MLPROF__NAME_UNITS && n->name_len == 16 &&
      memcmp(n->name, "cuda.correlation", 16) == 0)
    ps->corr_id = n->id;
  if (n->kind == MLPROF__NAME_GAUGE && ps->slo) {
    int k = mlprof__slo_match(ps->slo, n->name, n->name_len, 1);
    return k >= 0 ? mlprof__map_put(&ps->gauge_slo, n->id, (uint32_t)k) : 0;
  }
  if (n->kind != MLPROF__NAME_ZONE) return 0;
  uint32_t z = zone_intern(ps, n->name, n->name_len);
  if (z == MLPROF__NONE ||
      mlprof__grow(&ps->names, &ps->ncap, ps->nnames + 1, sizeof *ps->names) ||
      mlprof__map_put(&ps->name_ids, n->id, (uint32_t)ps->nnames))
    return MLPROF_ENOMEM;
  ps->names[ps->nnames++] = (name_info){
      .part_top =
          (uint8_t)mlprof__zone_part(n->category, n->name, n->name_len, 0),
      .part_nested =
          (uint8_t)mlprof__zone_part(n->category, n->name, n->name_len, 1),
      .comm = n->category == MLPROF_CAT_COMM ||
              mlprof__zone_part(n->category, n->name, n->name_len, 1) ==
                  MLPROF__PART_COMM,
      /* The calls tracer's sites have a file and no function; C sites
       * have both, interned names neither. */
      .pycall = n->file && n->file[0] && !(n->function && n->function[0]),
      .zone = z,
      .slo =
          ps->slo ? mlprof__slo_match(ps->slo, n->name, n->name_len, 0) : -1};
  return 0;
}

/* A gauge's value: to its objective, when one names it. */
static int on_counter(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                      double v) {
  (void)tid;
  pass *ps = ud;
  uint32_t k = ps->slo ? mlprof__map_get(&ps->gauge_slo, name) : MLPROF__NONE;
  return k == MLPROF__NONE
             ? 0
             : mlprof__slo_add_value(ps->slo, (int)k, t + ps->offset, v);
}

static thread_st *thread_find(pass *ps, uint32_t tid) {
  uint32_t at = mlprof__map_get(&ps->tids, tid);
  if (at == MLPROF__NONE) {
    if (ps->nthreads >= MLPROF__NONE - 1 ||
        mlprof__grow(&ps->threads, &ps->tcap, ps->nthreads + 1,
                     sizeof *ps->threads) ||
        mlprof__map_put(&ps->tids, tid, (uint32_t)ps->nthreads))
      return NULL;
    at = (uint32_t)ps->nthreads++;
    memset(&ps->threads[at], 0, sizeof ps->threads[at]);
  }
  ps->last_tid = tid;
  return ps->last_thread = &ps->threads[at];
}

static inline thread_st *thread_of(pass *ps, uint32_t tid) {
  if (ps->last_thread && ps->last_tid == tid) return ps->last_thread;
  return thread_find(ps, tid);
}

/* Index of the last sample at or before t with a valid value in v, or
 * SIZE_MAX; hint as mlprof__series_lower's. */
static size_t valid_at_or_before(const mlprof__series *s, const double *v,
                                 uint64_t t, size_t *hint) {
  size_t lo = t == UINT64_MAX ? s->n : mlprof__series_lower(s, t + 1, hint);
  while (lo-- > 0)
    if (!isnan(v[lo])) return lo;
  return SIZE_MAX;
}

/* ---- the list of findings ---------------------------------------------- */

mlprof__finding *mlprof__finding_add(mlprof__findings *f, const char *type,
                                     const char *zone, size_t zone_len,
                                     const char *fmt, ...) {
  char line[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  mlprof__finding *x = realloc(f->findings, (f->nfindings + 1) * sizeof *x);
  if (!x) return NULL;
  f->findings = x;
  x = &f->findings[f->nfindings];
  memset(x, 0, sizeof *x);
  x->type = type;
  x->summary = mlprof__dup(line, strlen(line));
  if (zone) x->zone = mlprof__dup(zone, zone_len), x->zone_len = zone_len;
  if (!x->summary || (zone && !x->zone)) {
    free(x->summary);
    free(x->zone);
    return NULL;
  }
  f->nfindings++;
  return x;
}

void mlprof__finding_ev(mlprof__finding *x, const char *key, double value) {
  if (x->nev < MLPROF__MAX_EVIDENCE)
    x->ev[x->nev++] = (mlprof__evidence){key, value};
}

static int finding_cmp(const void *a, const void *b) {
  const mlprof__finding *x = a, *y = b;
  if (x->severity != y->severity) return x->severity > y->severity ? -1 : 1;
  int c = strcmp(x->type, y->type);
  if (c) return c;
  if (!x->zone || !y->zone) return (x->zone != NULL) - (y->zone != NULL);
  size_t n = x->zone_len < y->zone_len ? x->zone_len : y->zone_len;
  c = memcmp(x->zone, y->zone, n);
  return c ? c : (x->zone_len > y->zone_len) - (x->zone_len < y->zone_len);
}

void mlprof__findings_sort(mlprof__findings *f) {
  if (f->nfindings > 1)
    mlprof__sort(f->findings, f->nfindings, sizeof *f->findings, finding_cmp);
}

/* Index of the first sample at or after t with a valid value in v, or
 * SIZE_MAX. */
static size_t valid_at_or_after(const mlprof__series *s, const double *v,
                                uint64_t t, size_t *hint) {
  for (size_t lo = mlprof__series_lower(s, t, hint); lo < s->n; lo++)
    if (!isnan(v[lo])) return lo;
  return SIZE_MAX;
}

int mlprof__runs_python(const mlprof__report *r, int prof) {
  if (prof < 0 || (size_t)prof >= r->nprocs) return 1; /* a GPU's memory */
  const mlprof__proc_stats *ps = &r->procs[prof];
  if (mlprof__proc_meta(ps, "mlprof.python") ||
      mlprof__proc_meta(ps, "mlprof.torch"))
    return 1;
  const char *exe = ps->exe ? ps->exe : "";
  const char *base = strrchr(exe, '/');
  base = base ? base + 1 : exe;
  return strncmp(base, "python", 6) == 0 ||
         (ps->name && strncmp(ps->name, "python", 6) == 0);
}

const mlprof__fzone *mlprof__fpass_zone(const mlprof__fpass *p,
                                        const char *name, size_t len) {
  for (size_t i = 0; i < p->nzones; i++)
    if (p->zones[i].len == len && memcmp(p->zones[i].name, name, len) == 0)
      return &p->zones[i];
  return NULL;
}

/* Adds the CPU of the sample intervals overlapping [b, e] to zone z, each
 * in proportion to the overlap: unlike a plain mean of the samples inside,
 * a sample whose interval mostly precedes the span barely counts. */
static void overlap(const mlprof__series *s, int col, double *sum,
                    double *weight, uint64_t b, uint64_t e, size_t *hint) {
  const double *v = s->v[col];
  size_t k = valid_at_or_before(s, v, b, hint);
  uint64_t t0 = k == SIZE_MAX ? 0 : s->t[k];
  int have0 = k != SIZE_MAX;
  for (k = k == SIZE_MAX ? 0 : k + 1; k < s->n; k++) {
    if (isnan(v[k])) continue;
    uint64_t t1 = s->t[k], start = have0 ? t0 : t1;
    if (start >= e && e > b) break;
    uint64_t lo = start > b ? start : b, hi = t1 < e ? t1 : e;
    double ns = hi > lo ? (double)(hi - lo) : 0;
    if (e == b && start <= b && t1 >= b) ns = 1; /* an instant */
    if (ns > 0) {
      *sum += ns * v[k];
      *weight += ns;
    }
    t0 = t1;
    have0 = 1;
    if (t1 >= e) break;
  }
}

static int rss_change(pass *ps, uint32_t zone, uint64_t b, uint64_t e) {
  const mlprof__series *s = ps->proc;
  const double *rss = s->v[MLPROF__COL_RSS];
  size_t i0 = valid_at_or_before(s, rss, b, &ps->hint[2]);
  size_t i1 = valid_at_or_after(s, rss, e, &ps->hint[3]);
  if (i0 == SIZE_MAX || i1 == SIZE_MAX || i1 <= i0) return 0;
  double d = rss[i1] - rss[i0];
  uint64_t key = (uint64_t)ps->profile << 32 | zone;
  uint32_t at = mlprof__map_get(&ps->rss_index, key);
  mlprof__fpass *p = &ps->p;
  if (at == MLPROF__NONE) {
    if (p->nrss >= MLPROF__NONE - 1 ||
        mlprof__grow(&p->rss, &ps->rcap, p->nrss + 1, sizeof *p->rss) ||
        mlprof__map_put(&ps->rss_index, key, (uint32_t)p->nrss))
      return MLPROF_ENOMEM;
    at = (uint32_t)p->nrss++;
    p->rss[at] =
        (mlprof__rss_acc){.zone = zone, .profile = (uint32_t)ps->profile};
  }
  p->rss[at].spans++;
  p->rss[at].positive += d > 0;
  p->rss[at].sum += d;
  return 0;
}

/* The samples' CPU, run-queue wait and idle CPU over [begin, end] (none
 * over a track's span). */
static below_st samples_over(pass *ps, int track, uint64_t begin,
                             uint64_t end) {
  below_st all = {.part = 0};
  if (ps->cpu && !track)
    overlap(ps->cpu, MLPROF__COL_CPU_PCT, &all.cpu_sum, &all.cpu_ns,
            begin + ps->offset, end + ps->offset, &ps->hint[0]);
  if (ps->cpu && !track)
    overlap(ps->cpu, MLPROF__COL_RUNQ, &all.runq_sum, &all.runq_ns,
            begin + ps->offset, end + ps->offset, &ps->hint[0]);
  if (ps->sys && !track)
    overlap(ps->sys, MLPROF__COL_IDLE, &all.idle_sum, &all.idle_ns,
            begin + ps->offset, end + ps->offset, &ps->hint[1]);
  return all;
}

static int on_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin, uint64_t end) {
  pass *ps = ud;
  uint32_t ni = mlprof__map_get(&ps->name_ids, name);
  if (ni == MLPROF__NONE) return 0;
  const name_info *n = &ps->names[ni];
  thread_st *th = thread_of(ps, tid);
  if (!th) return MLPROF_ENOMEM;
  uint64_t dur = end > begin ? end - begin : 0;
  /* The process's CPU is not a track's spans' (they are not its code). */
  int track = tid >= MLPROF__TRACK_TID_BASE;
  /* Without samples in this profile every sum of them stays zero. */
  int sampled = ps->cpu || ps->sys;
  below_st own = {.part = 0};
  if (depth < MAX_DEPTH) {
    /* Innermost part wins: a span with a part takes its duration less what
     * parts deeper inside it took already. */
    if ((size_t)depth + 2 > th->cap &&
        mlprof__grow(&th->acc, &th->cap, (size_t)depth + 2, sizeof *th->acc))
      return MLPROF_ENOMEM;
    for (size_t k = th->top; k < (size_t)depth + 2; k++)
      if (sampled)
        th->acc[k] = (below_st){.part = 0};
      else
        th->acc[k].part = 0;
    const below_st *in = &th->acc[depth + 1];
    uint64_t below = in->part, covered = below;
    int part = depth ? n->part_nested : n->part_top;
    if (part != MLPROF__PART_OTHER) {
      uint64_t mine = dur > below ? dur - below : 0;
      th->total[part] += mine;
      if (th->in_step) th->cur[part] += mine;
      covered = dur > below ? dur : below;
    }
    below_st *at = &th->acc[depth];
    at->part += covered;
    if (sampled) {
      below_st all = samples_over(ps, track, begin, end);
      /* Its own time: the samples over it less those over its children. */
      own.cpu_sum = fmax(0, all.cpu_sum - in->cpu_sum);
      own.cpu_ns = fmax(0, all.cpu_ns - in->cpu_ns);
      own.runq_sum = fmax(0, all.runq_sum - in->runq_sum);
      own.runq_ns = fmax(0, all.runq_ns - in->runq_ns);
      own.idle_sum = fmax(0, all.idle_sum - in->idle_sum);
      own.idle_ns = fmax(0, all.idle_ns - in->idle_ns);
      at->cpu_sum += all.cpu_sum;
      at->cpu_ns += all.cpu_ns;
      at->runq_sum += all.runq_sum;
      at->runq_ns += all.runq_ns;
      at->idle_sum += all.idle_sum;
      at->idle_ns += all.idle_ns;
    }
    th->top = (size_t)depth + 1;
  } else if (sampled) {
    own = samples_over(ps, track, begin, end);
  }
  if (depth == 0 && !track) {
    /* Every span that ended since the previous depth-0 span is inside this
     * one: its parts are what the totals gained since. A track's spans
     * (another profiler's operators) are never taken for the steps. */
    mlprof__fzone *z = &ps->p.zones[n->zone];
    z->top_count++;
    z->top_ns += dur;
    z->top_parents += th->inside > 0;
    th->inside = 0;
    for (int k = 0; k < MLPROF__NPARTS; k++) {
      z->top_part[k] += th->total[k] - th->at_top[k];
      th->at_top[k] = th->total[k];
    }
  } else {
    th->inside++;
  }
  if (n->slo >= 0 && mlprof__slo_add(ps->slo, n->slo, end + ps->offset, dur))
    return MLPROF_ENOMEM;
  mlprof__fzone *fz = &ps->p.zones[n->zone];
  if (sampled) {
    fz->cpu_sum += own.cpu_sum;
    fz->cpu_ns += own.cpu_ns;
    fz->runq_sum += own.runq_sum;
    fz->runq_ns += own.runq_ns;
    fz->idle_sum += own.idle_sum;
    fz->idle_ns += own.idle_ns;
  }
  fz->thread_spans += !track;
  if (!track) {
    fz->pycall_spans += n->pycall;
    fz->python_spans += ps->python;
    if (n->zone >= th->rancap || !th->ran[n->zone]) {
      size_t old = th->rancap;
      if (mlprof__grow(&th->ran, &th->rancap, (size_t)n->zone + 1,
                       sizeof *th->ran))
        return MLPROF_ENOMEM;
      memset(th->ran + old, 0, th->rancap - old);
      th->ran[n->zone] = 1;
      fz->threads++;
      fz->thread_ns += ps->profile < ps->p.r->nprocs
                           ? (double)ps->p.r->procs[ps->profile].wall_ns
                           : 0;
    }
  }
  if (n->comm) {
    if (th->ncomm + 1 > th->commcap &&
        mlprof__grow(&th->comm, &th->commcap, th->ncomm + 1, sizeof *th->comm))
      return MLPROF_ENOMEM;
    th->comm[th->ncomm++] = (mlprof__ival){begin, end, n->zone};
  } else if (!track && fz->candidate &&
             (ps->cand_seen++ & (ps->cand_stride - 1)) == 0) {
    /* A sample of them, every cand_stride-th: when CAND_MAX are kept, every
     * other one is let go and the stride doubles, so a profile of any size
     * keeps at most CAND_MAX (the cover is a share: a sample measures it). */
    if (ps->ncand == CAND_MAX) {
      for (size_t i = 0; i < CAND_MAX / 2; i++) ps->cand[i] = ps->cand[2 * i];
      ps->ncand = CAND_MAX / 2;
      ps->cand_stride *= 2;
    }
    if (mlprof__grow(&ps->cand, &ps->candcap, ps->ncand + 1, sizeof *ps->cand))
      return MLPROF_ENOMEM;
    ps->cand[ps->ncand++] = (mlprof__ival){begin, end, n->zone};
  }
  if (ps->gpu_spans && mlprof__gpu_span(ps->gpu, tid, n->zone, fz->name,
                                        fz->len, depth, n->comm, begin, end))
    return MLPROF_ENOMEM;
  /* Another profiler's spans are not the program's code: never blamed for
   * its memory. */
  if (track)
    ps->p.track_spans[ps->profile]++;
  else if (ps->proc &&
           rss_change(ps, n->zone, begin + ps->offset, end + ps->offset))
    return MLPROF_ENOMEM;
  return 0;
}

/* A mark (end == 0) or a step end at t: the step under way, if any, ends
 * there (as in mlprof__marks, whose counts and durations the breakdown
 * takes); a mark begins the next. */
static int on_span_units(void *ud, uint32_t tid, uint32_t name, uint64_t n) {
  pass *ps = ud;
  (void)tid;
  if (name && (name == ps->bytes_id || name == ps->corr_id))
    mlprof__gpu_span_units(ps->gpu, name == ps->corr_id, n);
  return 0;
}

static int step_entry(pass *ps, uint32_t tid, uint64_t t, int end) {
  if (mlprof__gpu_step(ps->gpu, tid, t, end)) return MLPROF_ENOMEM;
  thread_st *th = thread_of(ps, tid);
  if (!th) return MLPROF_ENOMEM;
  mlprof__fpass *p = &ps->p;
  uint64_t jt = t + ps->offset;
  if (th->in_step) {
    uint64_t dur = t > th->last_mark ? t - th->last_mark : 0;
    uint64_t sum = 0;
    for (int k = 0; k < MLPROF__NPARTS; k++) sum += th->cur[k];
    /* A part span across a mark lands whole in the step where it ends:
     * scale so the parts never exceed the step. */
    double scale = sum > dur ? (double)dur / (double)sum : 1;
    for (int k = 0; k < MLPROF__NPARTS; k++)
      p->step_part[k] += (uint64_t)((double)th->cur[k] * scale);
    uint64_t first = th->last_mark + ps->offset;
    if (!p->step_first || first < p->step_first) p->step_first = first;
    if (jt > p->step_last) p->step_last = jt;
  }
  memset(th->cur, 0, sizeof th->cur);
  /* Times run forward, as in mlprof__marks. */
  if (t > th->last_mark) th->last_mark = t;
  th->in_step = !end;
  return 0;
}

static int on_step(void *ud, uint32_t tid, uint64_t t) {
  return step_entry(ud, tid, t, 0);
}

static int on_step_end(void *ud, uint32_t tid, uint64_t t) {
  return step_entry(ud, tid, t, 1);
}

/* The samples of jp's process holding column col, or NULL. */
static const mlprof__series *proc_series(const mlprof__resources *res,
                                         const mlprof__job_profile *jp,
                                         int col) {
  if (!res) return NULL;
  const char *host = jp->hostname ? jp->hostname : "";
  for (size_t i = 0; i < res->nseries; i++) {
    const mlprof__series *s = &res->series[i];
    if (s->subject == MLPROF__SUBJECT_PROCESS && s->id == jp->pid &&
        strcmp(s->hostname, host) == 0)
      for (size_t k = 0; k < s->n; k++)
        if (!isnan(s->v[col][k])) return s;
  }
  return NULL;
}

static int ival_less(const mlprof__ival *x, const mlprof__ival *y) {
  return x->id != y->id ? x->id < y->id : x->b < y->b;
}

/* Sorts a by zone, then begin: a natural merge sort, as the spans come
 * nearly in that order (each thread's by end). Returns 0 or MLPROF_ENOMEM
 * (a unchanged). */
static int ival_sort(mlprof__ival *a, size_t n) {
  size_t i = 1;
  while (i < n && !ival_less(&a[i], &a[i - 1])) i++;
  if (i >= n) return 0;
  mlprof__ival *t = malloc(n * sizeof *t), *src = a, *dst = t;
  if (!t) return MLPROF_ENOMEM;
  for (size_t runs = 0; runs != 1;) {
    runs = 0;
    for (size_t lo = 0; lo < n; runs++) {
      size_t mid = lo + 1, hi;
      while (mid < n && !ival_less(&src[mid], &src[mid - 1])) mid++;
      for (hi = mid < n ? mid + 1 : n;
           hi < n && !ival_less(&src[hi], &src[hi - 1]);)
        hi++;
      size_t x = lo, y = mid, o = lo;
      while (x < mid && y < hi)
        dst[o++] = ival_less(&src[y], &src[x]) ? src[y++] : src[x++];
      while (x < mid) dst[o++] = src[x++];
      while (y < hi) dst[o++] = src[y++];
      lo = hi;
    }
    mlprof__ival *w = src;
    src = dst;
    dst = w;
  }
  if (src != a) memcpy(a, src, n * sizeof *a);
  free(t);
  return 0;
}

size_t mlprof__ival_merge(mlprof__ival *a, size_t n, int any) {
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (m && (any || a[m - 1].id == a[i].id) && a[i].b <= a[m - 1].e) {
      if (a[i].e > a[m - 1].e) a[m - 1].e = a[i].e;
    } else {
      a[m++] = a[i];
    }
  }
  return m;
}

typedef struct {
  const mlprof__ival *a;
  uint64_t t;
} ival_key;

/* The intervals that end by t come first. */
static int ends_by(const void *ctx, size_t i) {
  const ival_key *k = ctx;
  return k->a[i].e <= k->t;
}

size_t mlprof__ival_after(const mlprof__ival *a, size_t n, uint64_t t) {
  return mlprof__lower_bound(0, n, &(ival_key){a, t}, ends_by);
}

uint64_t mlprof__ival_cover(const mlprof__ival *a, size_t n, uint64_t b,
                            uint64_t e) {
  uint64_t ns = 0;
  for (size_t i = mlprof__ival_after(a, n, b); i < n && a[i].b < e; i++) {
    uint64_t x = a[i].b > b ? a[i].b : b, y = a[i].e < e ? a[i].e : e;
    ns += y > x ? y - x : 0;
  }
  return ns;
}

/* How much of each kept span of a zone that may be flagged the
 * communication of its process covered: all of it together (their union),
 * and by name. */
static int comm_cover(pass *ps) {
  if (!ps->ncand) return 0;
  /* The threads' spans one thread after another: a sort of as many runs as
   * threads, not of one a flush. */
  for (size_t i = 0; i < ps->nthreads; i++) {
    thread_st *th = &ps->threads[i];
    if (!th->ncomm) continue;
    if (mlprof__grow(&ps->comm, &ps->commcap, ps->ncomm + th->ncomm,
                     sizeof *ps->comm))
      return MLPROF_ENOMEM;
    memcpy(ps->comm + ps->ncomm, th->comm, th->ncomm * sizeof *th->comm);
    ps->ncomm += th->ncomm;
    free(th->comm);
    th->comm = NULL;
    th->ncomm = th->commcap = 0;
  }
  mlprof__ival *all = NULL;
  size_t nall = 0, ngroups = 0, *group = NULL;
  if (ps->ncomm) {
    if (ival_sort(ps->comm, ps->ncomm)) return MLPROF_ENOMEM;
    ps->ncomm = mlprof__ival_merge(ps->comm, ps->ncomm, 0);
    /* Where each zone's intervals begin in comm, and where they end. */
    if (!(group = malloc((ps->ncomm + 1) * sizeof *group)))
      return MLPROF_ENOMEM;
    for (size_t i = 0; i < ps->ncomm; i++)
      if (!i || ps->comm[i].id != ps->comm[i - 1].id) group[ngroups++] = i;
    group[ngroups] = ps->ncomm;
  }
  if (ngroups == 1) {
    /* One zone's intervals, disjoint and sorted already: their union. */
    nall = ps->ncomm;
  } else if (ps->ncomm) {
    if (!(all = malloc(ps->ncomm * sizeof *all))) {
      free(group);
      return MLPROF_ENOMEM;
    }
    memcpy(all, ps->comm, ps->ncomm * sizeof *all);
    for (size_t i = 0; i < ps->ncomm; i++) all[i].id = 0;
    if (ival_sort(all, ps->ncomm)) {
      free(all);
      free(group);
      return MLPROF_ENOMEM;
    }
    nall = mlprof__ival_merge(all, ps->ncomm, 1);
  }
  for (size_t i = 0; i < ps->ncand; i++) {
    const mlprof__ival *c = &ps->cand[i];
    mlprof__fzone *z = &ps->p.zones[c->id];
    z->span_ns += c->e > c->b ? c->e - c->b : 0;
    z->comm_ns += mlprof__ival_cover(all ? all : ps->comm, nall, c->b, c->e);
    for (size_t k = 0; k < ngroups; k++) {
      size_t g = group[k], end = group[k + 1];
      uint64_t ns = mlprof__ival_cover(ps->comm + g, end - g, c->b, c->e);
      if (ns) {
        /* Its slot, a free one, or the least one's if it covered more. */
        size_t at = 0;
        for (size_t j = 0; j < MLPROF__COMM_NAMES; j++) {
          if (z->comm_by[j].ns && z->comm_by[j].zone == ps->comm[g].id) {
            at = j;
            break;
          }
          if (z->comm_by[j].ns < z->comm_by[at].ns) at = j;
        }
        if (z->comm_by[at].ns && z->comm_by[at].zone == ps->comm[g].id)
          z->comm_by[at].ns += ns;
        else if (ns > z->comm_by[at].ns)
          z->comm_by[at].zone = ps->comm[g].id, z->comm_by[at].ns = ns;
      }
    }
  }
  free(all);
  free(group);
  return 0;
}

/* Frees the threads. */
static void profile_end(pass *ps) {
  for (size_t i = 0; i < ps->nthreads; i++) {
    free(ps->threads[i].acc);
    free(ps->threads[i].ran);
    free(ps->threads[i].comm);
  }
  ps->nthreads = 0;
  ps->nnames = 0;
  ps->last_thread = NULL;
  ps->ncomm = ps->ncand = 0;
  mlprof__map_clear(&ps->tids);
  mlprof__map_clear(&ps->name_ids);
  mlprof__map_clear(&ps->gauge_slo);
}

static void pass_free(pass *ps) {
  for (size_t i = 0; i < ps->nthreads; i++) {
    free(ps->threads[i].acc);
    free(ps->threads[i].ran);
    free(ps->threads[i].comm);
  }
  free(ps->threads);
  free(ps->names);
  free(ps->comm);
  free(ps->cand);
  mlprof__map_clear(&ps->tids);
  mlprof__map_clear(&ps->name_ids);
  mlprof__map_clear(&ps->gauge_slo);
  mlprof__map_clear(&ps->zone_by_hash);
  mlprof__map_clear(&ps->flaggable);
  mlprof__map_clear(&ps->rss_index);
  for (size_t i = 0; i < ps->p.nzones; i++) free(ps->p.zones[i].name);
  free(ps->p.zones);
  free(ps->p.rss);
  free(ps->p.track_spans);
  mlprof__slo_abort(ps->slo);
  mlprof__gpu_free(ps->gpu);
}

struct mlprof__findings_builder {
  pass ps;
  mlprof__findings *f;
};

void mlprof__findings_abort(mlprof__findings_builder *b) {
  if (!b) return;
  pass_free(&b->ps);
  mlprof__findings_free(b->f);
  free(b);
}

mlprof__findings_builder *mlprof__findings_begin(
    const mlprof__job *job, const mlprof__report *r,
    const mlprof__resources *res, const mlprof__findings_opts *opts,
    mlprof__findings *f) {
  memset(f, 0, sizeof *f);
  mlprof__findings_opts_init(&f->opts);
  if (opts) f->opts = *opts;
  if (!f->opts.slo_window_ns) f->opts.slo_window_ns = 1000000000ull;
  mlprof__findings_builder *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->f = f;
  b->ps.p = (mlprof__fpass){.job = job, .r = r, .res = res};
  size_t nprof = job->count ? job->count : 1;
  b->ps.p.track_spans = calloc(nprof, sizeof *b->ps.p.track_spans);
  int rc = 0;
  for (size_t i = 0; i < r->nzones && !rc; i++) {
    const mlprof__zone_stats *z = &r->zones[i];
    if ((double)z->total_ns < MLPROF__FLAG_MIN_SHARE * (double)r->wall_ns)
      continue;
    uint64_t k = mlprof__hash(z->name, z->name_len, MLPROF__HASH_START);
    while (mlprof__map_get(&b->ps.flaggable, k) != MLPROF__NONE) k++;
    rc = mlprof__map_put(&b->ps.flaggable, k, (uint32_t)i);
  }
  if (rc || !b->ps.p.track_spans || !(b->ps.gpu = mlprof__gpu_begin()) ||
      (f->opts.nslo && !(b->ps.slo = mlprof__slo_begin(&f->opts)))) {
    mlprof__findings_abort(b);
    return NULL;
  }
  return b;
}

void mlprof__findings_profile_begin(mlprof__findings_builder *b, size_t index,
                                    mlprof__visitor *v) {
  pass *ps = &b->ps;
  const mlprof__resources *res = ps->p.res;
  const mlprof__job_profile *jp = &ps->p.job->profiles[index];
  ps->profile = index;
  ps->offset = jp->offset_ns;
  ps->cand_seen = 0;
  ps->cand_stride = 1;
  ps->python = mlprof__runs_python(ps->p.r, (int)index);
  ps->proc = proc_series(res, jp, MLPROF__COL_RSS);
  ps->cpu = proc_series(res, jp, MLPROF__COL_CPU_PCT);
  ps->sys = NULL;
  for (size_t k = 0; res && k < res->nseries && ps->cpu; k++)
    if (res->series[k].subject == MLPROF__SUBJECT_SYSTEM &&
        !strcmp(res->series[k].hostname, jp->hostname ? jp->hostname : ""))
      ps->sys = &res->series[k];
  b->f->sampled |= ps->proc != NULL;
  ps->bytes_id = ps->corr_id = 0;
  /* Out of memory here leaves the profile's GPU spans unread. */
  ps->gpu_spans = mlprof__gpu_profile_begin(ps->gpu, ps->p.r, index) == 1;
  *v = (mlprof__visitor){.ud = ps,
                         .name = on_name,
                         .span = on_span,
                         .span_units = on_span_units,
                         .counter = on_counter,
                         .step = on_step,
                         .step_end = on_step_end};
}

int mlprof__findings_profile_end(mlprof__findings_builder *b) {
  int rc = comm_cover(&b->ps);
  int rg = mlprof__gpu_profile_end(b->ps.gpu, b->ps.profile, b->ps.p.nzones);
  if (!rc) rc = rg;
  profile_end(&b->ps);
  return rc;
}

int mlprof__findings_finish(mlprof__findings_builder *b) {
  pass *ps = &b->ps;
  mlprof__findings *f = b->f;
  f->opts.slo = NULL;
  f->opts.nslo = 0;
  int rc = mlprof__steps_finish(&ps->p, &f->steps);
  if (!rc && ps->slo) {
    rc = mlprof__slo_finish(ps->slo, f);
    ps->slo = NULL;
  }
  if (!rc) rc = mlprof__leaks_find(&ps->p, f);
  if (!rc) rc = mlprof__bottlenecks_find(&ps->p, f);
  if (!rc) rc = mlprof__gil_find(&ps->p, f);
  if (!rc && !(rc = mlprof__gpu_finish(ps->gpu, &ps->p, f)))
    mlprof__findings_sort(f);
  pass_free(ps);
  if (rc) mlprof__findings_free(f);
  free(b);
  return rc;
}

void mlprof__findings_free(mlprof__findings *f) {
  free(f->steps.zone);
  for (size_t i = 0; i < f->nfindings; i++) {
    free(f->findings[i].zone);
    free(f->findings[i].summary);
  }
  free(f->findings);
  for (size_t i = 0; i < f->nleaks; i++) {
    for (size_t k = 0; k < f->leaks[i].nzones; k++)
      free(f->leaks[i].zones[k].name);
    free(f->leaks[i].zones);
  }
  free(f->leaks);
  for (size_t i = 0; i < f->nslo; i++) {
    free(f->slo[i].zone);
    free(f->slo[i].windows);
  }
  free(f->slo);
  for (size_t i = 0; i < f->nlaunched; i++) free(f->launched[i].zone);
  free(f->launched);
  mlprof__dist_free(&f->dist);
  memset(f, 0, sizeof *f);
}
