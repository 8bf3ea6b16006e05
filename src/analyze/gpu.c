/* GPU activity against the steps (docs/findings.md, "GPU activity"): the
 * spans CUPTI's capture puts on tracks ("cuda:DEV stream S" for kernels,
 * copies and memsets, "cuda:ctx C sync" for synchronisations) are read
 * beside the steps of the same profile. Per device: the time no kernel,
 * copy or memset ran while a step ran, and the zones open on the step's
 * thread meanwhile (the innermost one takes the time); per step: the
 * host-device copies and the synchronisations.
 *
 * Memory: the GPU spans and the thread spans of a profile that has GPU
 * tracks (32 bytes each) until its end; nothing of a profile without. */
#include <math.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../format/wire.h"
#include "findings.h"

enum { WORK_KERNEL, WORK_H2D, WORK_D2H, WORK_OTHER, WORK_NCCL };

typedef struct {
  uint64_t b, e, bytes;
  uint32_t dev, corr;
  uint8_t kind;
} gspan;

/* A CUDA API call: the thread that made it (the OS's id, as the profile's
 * threads), when, and the correlation id of what it launched. */
typedef struct {
  uint64_t b;
  uint32_t tid, corr;
} apicall;

/* A kernel's launch: thread, time, and the kernel's time. */
typedef struct {
  uint64_t t, ns;
  uint32_t tid;
} launch;

typedef struct {
  uint64_t b, e;
  uint32_t tid, zone, depth;
  uint8_t comm; /* a zone of communication */
} cspan;

/* A track: GPU work of device dev, synchronisations, or the API calls of
 * thread dev. */
enum { TRACK_WORK, TRACK_SYNC, TRACK_API };
typedef struct {
  uint32_t tid, dev;
  int kind;
} track;

typedef struct {
  uint32_t tid;
  uint64_t last;
  int open;
} marker;

/* What one profile's device did in its steps. */
typedef struct {
  size_t profile;
  uint32_t dev;
  uint64_t steps, step_ns, idle_ns, gap_ns;
  uint32_t top[3]; /* zones (MLPROF__NONE: none) */
  uint64_t top_ns[3];
  uint64_t nozone_ns; /* gap time under no zone */
} idle_res;

typedef struct {
  size_t profile;
  uint64_t steps, step_ns;
  uint64_t h2d, d2h, copy_bytes, copy_ns;
  uint64_t syncs, sync_ns;
  /* Communication (NCCL kernels, communication zones) in the steps, and
   * how much of it no compute kernel ran beside. */
  uint64_t comm_ns, exposed_ns, nccl;
} xfer_res;

struct mlprof__gpu_acc {
  track *tracks;
  size_t ntracks, trcap;
  gspan *g;
  size_t ng, gcap;
  mlprof__ival *syncs;
  size_t nsyncs, scap;
  cspan *c;
  size_t nc, ccap;
  mlprof__ival *steps; /* id: the step's thread */
  size_t nsteps, stcap;
  marker *marks;
  size_t nmarks, mcap;
  int active;   /* the profile has GPU work tracks: its spans are kept */
  int last_gpu; /* the last span was GPU work: index in g, else -1 */
  int last_api; /* the last span was an API call: index in api, else -1 */
  apicall *api;
  size_t napi, apicap;
  /* Kernel time by the zone whose thread launched it (index of the pass's
   * zones), across the job; kernels whose launch was not found. */
  struct {
    uint64_t kernels, ns;
  } * by_zone;
  size_t bzcap;
  uint64_t unmatched, unmatched_ns, matched;
  idle_res *idle;
  size_t nidle, icap;
  xfer_res *xfer;
  size_t nxfer, xcap;
};

mlprof__gpu_acc *mlprof__gpu_begin(void) {
  mlprof__gpu_acc *a = calloc(1, sizeof *a);
  if (a) a->last_gpu = a->last_api = -1;
  return a;
}

static const track *track_of(const mlprof__gpu_acc *a, uint32_t tid) {
  for (size_t i = 0; i < a->ntracks; i++)
    if (a->tracks[i].tid == tid) return &a->tracks[i];
  return NULL;
}

/* Takes the track tid when its name is one of CUPTI's (cupti.c). */
static int add_track(mlprof__gpu_acc *a, uint64_t tid, const char *name,
                     size_t len) {
  if (tid < MLPROF__TRACK_TID_BASE || tid > UINT32_MAX || len >= 64) return 0;
  char s[64];
  memcpy(s, name, len);
  s[len] = '\0';
  unsigned dev, stream;
  int n = 0;
  track t = {.tid = (uint32_t)tid};
  if (sscanf(s, "cuda:%u stream %u%n", &dev, &stream, &n) == 2 &&
      (size_t)n == len)
    t.dev = dev;
  else if (n = 0,
           sscanf(s, "cuda:ctx %u sync%n", &dev, &n) == 1 && (size_t)n == len)
    t.kind = TRACK_SYNC;
  else if (n = 0, sscanf(s, "cuda api %u%n", &dev, &n) == 1 && (size_t)n == len)
    t.kind = TRACK_API, t.dev = dev;
  else
    return 0;
  if (track_of(a, t.tid)) return 0;
  if (mlprof__grow(&a->tracks, &a->trcap, a->ntracks + 1, sizeof *a->tracks))
    return MLPROF_ENOMEM;
  a->tracks[a->ntracks++] = t;
  return 0;
}

int mlprof__gpu_profile_begin(mlprof__gpu_acc *a, const mlprof__report *r,
                              size_t profile) {
  a->ntracks = 0;
  for (size_t i = 0; i < r->nthreads; i++) {
    const mlprof__thread_stats *t = &r->threads[i];
    if (t->proc != profile) continue;
    int rc = add_track(a, t->tid, t->name, t->name_len);
    if (rc) return rc;
  }
  a->active = 0;
  a->last_gpu = a->last_api = -1;
  for (size_t i = 0; i < a->ntracks; i++)
    a->active |= a->tracks[i].kind == TRACK_WORK;
  return a->active;
}

static int has_word(const char *name, size_t len, const char *w) {
  size_t n = strlen(w);
  return len == n && memcmp(name, w, n) == 0;
}

/* Whether a kernel's name holds "nccl", in any case. */
static int nccl_kernel(const char *name, size_t len) {
  for (size_t i = 0; i + 4 <= len; i++)
    if ((name[i] | 32) == 'n' && (name[i + 1] | 32) == 'c' &&
        (name[i + 2] | 32) == 'c' && (name[i + 3] | 32) == 'l')
      return 1;
  return 0;
}

int mlprof__gpu_span(mlprof__gpu_acc *a, uint32_t tid, uint32_t zone,
                     const char *name, size_t len, uint32_t depth, int comm,
                     uint64_t begin, uint64_t end) {
  a->last_gpu = a->last_api = -1;
  if (!a->active) return 0;
  if (tid < MLPROF__TRACK_TID_BASE) {
    if (mlprof__grow(&a->c, &a->ccap, a->nc + 1, sizeof *a->c))
      return MLPROF_ENOMEM;
    a->c[a->nc++] = (cspan){begin, end, tid, zone, depth, (uint8_t) !!comm};
    return 0;
  }
  const track *t = track_of(a, tid);
  if (!t) return 0;
  if (t->kind == TRACK_SYNC) {
    if (mlprof__grow(&a->syncs, &a->scap, a->nsyncs + 1, sizeof *a->syncs))
      return MLPROF_ENOMEM;
    a->syncs[a->nsyncs++] = (mlprof__ival){begin, end, 0};
    return 0;
  }
  if (t->kind == TRACK_API) {
    if (mlprof__grow(&a->api, &a->apicap, a->napi + 1, sizeof *a->api))
      return MLPROF_ENOMEM;
    a->api[a->napi] = (apicall){begin, t->dev, 0};
    a->last_api = (int)a->napi++;
    return 0;
  }
  if (mlprof__grow(&a->g, &a->gcap, a->ng + 1, sizeof *a->g))
    return MLPROF_ENOMEM;
  uint8_t kind = WORK_KERNEL;
  if (has_word(name, len, "memcpy HtoD"))
    kind = WORK_H2D;
  else if (has_word(name, len, "memcpy DtoH"))
    kind = WORK_D2H;
  else if (len >= 6 &&
           (memcmp(name, "memcpy", 6) == 0 || has_word(name, len, "memset")))
    kind = WORK_OTHER;
  else if (nccl_kernel(name, len))
    kind = WORK_NCCL;
  a->g[a->ng] = (gspan){begin, end, 0, t->dev, 0, kind};
  a->last_gpu = (int)a->ng++;
  return 0;
}

void mlprof__gpu_span_units(mlprof__gpu_acc *a, int correlation, uint64_t n) {
  if (correlation && a->last_api >= 0)
    a->api[a->last_api].corr = (uint32_t)n;
  else if (correlation && a->last_gpu >= 0)
    a->g[a->last_gpu].corr = (uint32_t)n;
  else if (!correlation && a->last_gpu >= 0)
    a->g[a->last_gpu].bytes += n;
}

int mlprof__gpu_step(mlprof__gpu_acc *a, uint32_t tid, uint64_t t, int end) {
  if (!a->active) return 0;
  marker *m = NULL;
  for (size_t i = 0; i < a->nmarks && !m; i++)
    if (a->marks[i].tid == tid) m = &a->marks[i];
  if (!m) {
    if (mlprof__grow(&a->marks, &a->mcap, a->nmarks + 1, sizeof *a->marks))
      return MLPROF_ENOMEM;
    m = &a->marks[a->nmarks++];
    *m = (marker){.tid = tid};
  }
  if (m->open && t > m->last) {
    if (mlprof__grow(&a->steps, &a->stcap, a->nsteps + 1, sizeof *a->steps))
      return MLPROF_ENOMEM;
    a->steps[a->nsteps++] = (mlprof__ival){m->last, t, tid};
  }
  if (t > m->last) m->last = t;
  m->open = !end;
  return 0;
}

static int ival_by_begin(const void *x, const void *y) {
  const mlprof__ival *a = x, *b = y;
  if (a->id != b->id) return a->id < b->id ? -1 : 1;
  return (a->b > b->b) - (a->b < b->b);
}

static int gspan_cmp(const void *x, const void *y) {
  const gspan *a = x, *b = y;
  if (a->dev != b->dev) return a->dev < b->dev ? -1 : 1;
  return (a->b > b->b) - (a->b < b->b);
}

/* Without step marks: the depth-0 thread spans of the profile's outermost
 * repeated zone (as steps.c chooses it across the job: two spans or more,
 * most holding zones, the largest total). */
static int steps_from_zone(mlprof__gpu_acc *a, size_t nzones) {
  uint64_t *count = calloc(nzones ? nzones : 1, 3 * sizeof *count);
  if (!count) return MLPROF_ENOMEM;
  uint64_t *total = count + nzones, *parents = total + nzones;
  /* A depth-0 span holds zones when deeper spans of its thread ended since
   * that thread's previous depth-0 span (spans come by their end). */
  for (size_t i = 0; i < a->nc; i++) {
    const cspan *s = &a->c[i];
    if (s->depth || s->zone >= nzones) continue;
    count[s->zone]++;
    total[s->zone] += s->e - s->b;
    for (size_t k = i; k-- > 0;) {
      if (a->c[k].tid != s->tid) continue;
      parents[s->zone] += a->c[k].depth > 0;
      break;
    }
  }
  size_t best = nzones;
  for (size_t z = 0; z < nzones; z++)
    if (count[z] >= 2 && parents[z] * 2 >= count[z] &&
        (best == nzones || total[z] > total[best]))
      best = z;
  free(count);
  for (size_t i = 0; best < nzones && i < a->nc; i++) {
    const cspan *s = &a->c[i];
    if (s->depth || s->zone != best) continue;
    if (mlprof__grow(&a->steps, &a->stcap, a->nsteps + 1, sizeof *a->steps))
      return MLPROF_ENOMEM;
    a->steps[a->nsteps++] = (mlprof__ival){s->b, s->e, s->tid};
  }
  return 0;
}

/* The step holding t (steps sorted by thread, then begin: the first
 * thread's), or NULL. */
static const mlprof__ival *step_at(const mlprof__gpu_acc *a, uint64_t t) {
  for (size_t i = 0; i < a->nsteps; i++)
    if (a->steps[i].b <= t && t < a->steps[i].e) return &a->steps[i];
  return NULL;
}

/* One device's idle time in the steps and the zones open then. */
static int device_idle(mlprof__gpu_acc *a, size_t profile, const gspan *g,
                       size_t n, uint64_t *zone_ns, size_t nzones) {
  mlprof__ival *busy = malloc(n * sizeof *busy), *gaps = NULL;
  size_t nb = 0, ngaps = 0, gcap = 0;
  uint64_t *below = NULL;
  size_t bcap = 0;
  int rc = MLPROF_ENOMEM;
  if (!busy) return rc;
  for (size_t i = 0; i < n; i++) busy[i] = (mlprof__ival){g[i].b, g[i].e, 0};
  nb = mlprof__ival_merge(busy, n, 1);
  idle_res r = {.profile = profile, .dev = g[0].dev};
  memset(zone_ns, 0, nzones * sizeof *zone_ns);
  for (size_t s = 0; s < a->nsteps; s++) {
    const mlprof__ival *st = &a->steps[s];
    r.steps++;
    r.step_ns += st->e - st->b;
    r.idle_ns += st->e - st->b - mlprof__ival_cover(busy, nb, st->b, st->e);
    /* The step's gaps: its time between the busy intervals. */
    uint64_t t = st->b;
    size_t lo = mlprof__ival_after(busy, nb, st->b);
    for (size_t k = lo; k <= nb; k++) {
      uint64_t gb = k < nb ? busy[k].b : st->e, ge = k < nb ? busy[k].e : 0;
      if (gb > st->e) gb = st->e;
      if (gb > t) {
        if (mlprof__grow(&gaps, &gcap, ngaps + 1, sizeof *gaps)) goto out;
        gaps[ngaps++] = (mlprof__ival){t, gb, st->id};
      }
      if (k == nb || gb >= st->e) break;
      if (ge > t) t = ge;
    }
  }
  mlprof__sort(gaps, ngaps, sizeof *gaps, ival_by_begin);
  /* The innermost zone open on the step's thread takes the gap time: a
   * span's overlap less its children's (spans come by their end, children
   * first). */
  for (size_t i = 0; i < ngaps; i++) r.gap_ns += gaps[i].e - gaps[i].b;
  uint64_t zoned = 0;
  for (size_t i = 0; i < ngaps;) {
    size_t j = i;
    while (j < ngaps && gaps[j].id == gaps[i].id) j++;
    uint32_t tid = gaps[i].id;
    for (size_t k = 0; k < a->nc; k++) {
      const cspan *c = &a->c[k];
      if (c->tid != tid) continue;
      size_t old = bcap;
      if (mlprof__grow(&below, &bcap, (size_t)c->depth + 2, sizeof *below))
        goto out;
      memset(below + old, 0, (bcap - old) * sizeof *below);
      uint64_t ov = mlprof__ival_cover(gaps + i, j - i, c->b, c->e);
      uint64_t own = ov > below[c->depth + 1] ? ov - below[c->depth + 1] : 0;
      below[c->depth + 1] = 0;
      below[c->depth] += ov;
      if (c->zone < nzones) zone_ns[c->zone] += own;
      if (!c->depth) zoned += ov;
    }
    memset(below, 0, bcap * sizeof *below);
    i = j;
  }
  r.nozone_ns = r.gap_ns > zoned ? r.gap_ns - zoned : 0;
  for (int k = 0; k < 3; k++) {
    r.top[k] = MLPROF__NONE;
    for (size_t z = 0; z < nzones; z++)
      if (zone_ns[z] &&
          (r.top[k] == MLPROF__NONE || zone_ns[z] > r.top_ns[k])) {
        r.top[k] = (uint32_t)z;
        r.top_ns[k] = zone_ns[z];
      }
    if (r.top[k] != MLPROF__NONE) zone_ns[r.top[k]] = 0;
  }
  if (mlprof__grow(&a->idle, &a->icap, a->nidle + 1, sizeof *a->idle)) goto out;
  a->idle[a->nidle++] = r;
  rc = 0;
out:
  free(busy);
  free(gaps);
  free(below);
  return rc;
}

static int ival_by_time(const void *x, const void *y) {
  const mlprof__ival *a = x, *b = y;
  return (a->b > b->b) - (a->b < b->b);
}

/* Sorts and merges n intervals; returns how many remain. */
static size_t merge(mlprof__ival *v, size_t n) {
  mlprof__sort(v, n, sizeof *v, ival_by_time);
  return mlprof__ival_merge(v, n, 1);
}

/* Communication in the steps (NCCL kernels and communication zones, their
 * union) and the part of it no compute kernel of any device ran beside. */
static int comm_overlap(mlprof__gpu_acc *a, xfer_res *x) {
  size_t nk = 0, ncomm = 0;
  for (size_t i = 0; i < a->ng; i++) {
    nk += a->g[i].kind == WORK_KERNEL;
    ncomm += a->g[i].kind == WORK_NCCL;
  }
  for (size_t i = 0; i < a->nc; i++) ncomm += a->c[i].comm;
  if (!ncomm) return 0;
  mlprof__ival *k = malloc((nk ? nk : 1) * sizeof *k),
               *c = malloc(ncomm * sizeof *c);
  if (!k || !c) {
    free(k);
    free(c);
    return MLPROF_ENOMEM;
  }
  size_t n1 = 0, n2 = 0;
  for (size_t i = 0; i < a->ng; i++) {
    const gspan *g = &a->g[i];
    if (g->kind == WORK_KERNEL) k[n1++] = (mlprof__ival){g->b, g->e, 0};
    if (g->kind == WORK_NCCL) {
      c[n2++] = (mlprof__ival){g->b, g->e, 0};
      x->nccl += step_at(a, g->b) != NULL;
    }
  }
  for (size_t i = 0; i < a->nc; i++)
    if (a->c[i].comm) c[n2++] = (mlprof__ival){a->c[i].b, a->c[i].e, 0};
  n1 = merge(k, n1);
  n2 = merge(c, n2);
  for (size_t s = 0; s < a->nsteps; s++) {
    const mlprof__ival *st = &a->steps[s];
    for (size_t i = 0; i < n2; i++) {
      uint64_t b = c[i].b > st->b ? c[i].b : st->b;
      uint64_t e = c[i].e < st->e ? c[i].e : st->e;
      if (e <= b) continue;
      x->comm_ns += e - b;
      x->exposed_ns += e - b - mlprof__ival_cover(k, n1, b, e);
    }
  }
  free(k);
  free(c);
  return 0;
}

static void reset(mlprof__gpu_acc *a) {
  a->ntracks = a->ng = a->nsyncs = a->nc = a->nsteps = a->nmarks = 0;
  a->napi = 0;
  a->active = 0;
  a->last_gpu = a->last_api = -1;
}

static int api_by_corr(const void *x, const void *y) {
  const apicall *a = x, *b = y;
  return (a->corr > b->corr) - (a->corr < b->corr);
}

typedef struct {
  const apicall *a;
  uint32_t corr;
} corr_key;

static int corr_below(const void *ctx, size_t i) {
  const corr_key *k = ctx;
  return k->a[i].corr < k->corr;
}

static int launch_cmp(const void *x, const void *y) {
  const launch *a = x, *b = y;
  if (a->tid != b->tid) return a->tid < b->tid ? -1 : 1;
  return (a->t > b->t) - (a->t < b->t);
}

static int cspan_by_begin(const void *x, const void *y) {
  const cspan *a = x, *b = y;
  if (a->tid != b->tid) return a->tid < b->tid ? -1 : 1;
  if (a->b != b->b) return a->b < b->b ? -1 : 1;
  return (a->depth > b->depth) - (a->depth < b->depth); /* parent first */
}

/* Each kernel with a correlation id goes to the innermost zone open on the
 * thread that made the API call of the same id, when it was made. Reorders
 * the thread spans (after the idle measure, which needs them by end). */
static int launches(mlprof__gpu_acc *a, size_t nzones) {
  size_t nk = 0;
  for (size_t i = 0; i < a->ng; i++) nk += a->g[i].corr != 0;
  if (!nk) return 0;
  launch *l = malloc(nk * sizeof *l);
  size_t *stack = NULL, scap = 0, nl = 0;
  if (!l) return MLPROF_ENOMEM;
  size_t old = a->bzcap;
  if (mlprof__grow(&a->by_zone, &a->bzcap, nzones, sizeof *a->by_zone)) {
    free(l);
    return MLPROF_ENOMEM;
  }
  memset(a->by_zone + old, 0, (a->bzcap - old) * sizeof *a->by_zone);
  mlprof__sort(a->api, a->napi, sizeof *a->api, api_by_corr);
  for (size_t i = 0; i < a->ng; i++) {
    const gspan *g = &a->g[i];
    if (!g->corr) continue;
    size_t lo = mlprof__lower_bound(0, a->napi, &(corr_key){a->api, g->corr},
                                    corr_below);
    if (lo < a->napi && a->api[lo].corr == g->corr)
      l[nl++] = (launch){a->api[lo].b, g->e - g->b, a->api[lo].tid};
    else
      a->unmatched++, a->unmatched_ns += g->e - g->b;
  }
  mlprof__sort(l, nl, sizeof *l, launch_cmp);
  mlprof__sort(a->c, a->nc, sizeof *a->c, cspan_by_begin);
  /* A sweep per thread: spans begun by the launch pushed, those ended
   * popped; the top is the innermost zone open then. */
  size_t at = 0, top = 0;
  uint32_t tid = 0;
  for (size_t i = 0; i < nl; i++) {
    if (!i || l[i].tid != tid) {
      tid = l[i].tid;
      top = 0;
      while (at < a->nc && a->c[at].tid < tid) at++;
    }
    for (; at < a->nc && a->c[at].tid == tid && a->c[at].b <= l[i].t; at++) {
      if (mlprof__grow(&stack, &scap, top + 1, sizeof *stack)) {
        free(l);
        free(stack);
        return MLPROF_ENOMEM;
      }
      stack[top++] = at;
    }
    while (top && a->c[stack[top - 1]].e <= l[i].t) top--;
    uint32_t z = top ? a->c[stack[top - 1]].zone : MLPROF__NONE;
    if (z < nzones) {
      a->by_zone[z].kernels++;
      a->by_zone[z].ns += l[i].ns;
    } else {
      a->unmatched++, a->unmatched_ns += l[i].ns;
    }
  }
  free(l);
  free(stack);
  return 0;
}

int mlprof__gpu_profile_end(mlprof__gpu_acc *a, size_t profile, size_t nzones) {
  int rc = 0;
  if (!a->ng) goto done;
  if (!a->nsteps && (rc = steps_from_zone(a, nzones))) goto done;
  if (!a->nsteps) {
    rc = launches(a, nzones);
    goto done;
  }
  mlprof__sort(a->steps, a->nsteps, sizeof *a->steps, ival_by_begin);
  mlprof__sort(a->g, a->ng, sizeof *a->g, gspan_cmp);
  uint64_t *zone_ns = malloc((nzones ? nzones : 1) * sizeof *zone_ns);
  if (!zone_ns) {
    rc = MLPROF_ENOMEM;
    goto done;
  }
  for (size_t i = 0; i < a->ng && !rc;) {
    size_t j = i;
    while (j < a->ng && a->g[j].dev == a->g[i].dev) j++;
    rc = device_idle(a, profile, a->g + i, j - i, zone_ns, nzones);
    i = j;
  }
  free(zone_ns);
  xfer_res x = {.profile = profile};
  for (size_t s = 0; s < a->nsteps; s++) {
    x.steps++;
    x.step_ns += a->steps[s].e - a->steps[s].b;
  }
  for (size_t i = 0; i < a->ng; i++) {
    const gspan *g = &a->g[i];
    if ((g->kind != WORK_H2D && g->kind != WORK_D2H) || !step_at(a, g->b))
      continue;
    x.h2d += g->kind == WORK_H2D;
    x.d2h += g->kind == WORK_D2H;
    x.copy_bytes += g->bytes;
    x.copy_ns += g->e - g->b;
  }
  for (size_t i = 0; i < a->nsyncs; i++)
    if (step_at(a, a->syncs[i].b)) {
      x.syncs++;
      x.sync_ns += a->syncs[i].e - a->syncs[i].b;
    }
  if (!rc) rc = comm_overlap(a, &x);
  if (!rc && !mlprof__grow(&a->xfer, &a->xcap, a->nxfer + 1, sizeof *a->xfer))
    a->xfer[a->nxfer++] = x;
  else if (!rc)
    rc = MLPROF_ENOMEM;
  if (!rc) rc = launches(a, nzones);
done:
  reset(a);
  return rc;
}

/* The least steps and shares that make a finding (docs/findings.md). */
#define MIN_STEPS 3
#define IDLE_MIN_SHARE 0.2
#define COPY_MIN_SHARE 0.05
#define SYNC_MIN_SHARE 0.05
#define EXPOSED_MIN_SHARE 0.1

static const char *const advice_idle_data =
    "the GPU waits for the next batch: load it while this one computes "
    "(more DataLoader workers, num_workers; prefetch_factor, "
    "persistent_workers=True), pin_memory=True with .to(device, "
    "non_blocking=True); cache or pre-process the data";
static const char *const advice_idle_comm =
    "the GPU waits while the CPU communicates: overlap communication with "
    "computation (DDP bucket sizes, bucket_cap_mb; fewer, larger "
    "collectives); see the distributed findings";
static const char *const advice_idle =
    "the GPU waits for the CPU: give it more work per launch (a larger "
    "batch, fused kernels, torch.compile, CUDA graphs), move the CPU work "
    "named here off the step's critical path (another thread or process, "
    "or the GPU), and remove host synchronisations (.item(), .cpu(), "
    "torch.cuda.synchronize()) between launches";
static const char *const advice_copies =
    "copy less and overlap it: keep tensors on the device across steps, "
    "pinned host memory (pin_memory=True in the DataLoader, "
    ".pin_memory()) and .to(device, non_blocking=True) so copies overlap "
    "computation, fewer and larger copies";
static const char *const advice_exposed =
    "overlap communication with computation: let DDP start each bucket's "
    "all-reduce during backward (bucket_cap_mb, gradient_as_bucket_view; no "
    "synchronisation or .item() before it), FSDP's forward_prefetch and "
    "backward_prefetch, asynchronous collectives (async_op=True) waited on "
    "only when needed; fewer, larger collectives; see the distributed "
    "findings for a straggler";
static const char *const advice_sync =
    "remove per-step host synchronisations: .item(), .cpu(), .numpy(), "
    "printing or logging tensors, torch.cuda.synchronize(); accumulate "
    "metrics on the device and read them every N steps";

static int by_ns(const void *x, const void *y) {
  const mlprof__gpu_launched *a = x, *b = y;
  if (a->gpu_ns != b->gpu_ns) return a->gpu_ns > b->gpu_ns ? -1 : 1;
  if (a->zone_len != b->zone_len) return a->zone_len < b->zone_len ? -1 : 1;
  return memcmp(a->zone, b->zone, a->zone_len);
}

/* GPU time launched by zone, largest first. */
static int launched(mlprof__gpu_acc *a, const mlprof__fpass *p,
                    mlprof__findings *f) {
  f->launch_unattributed = a->unmatched;
  f->launch_unattributed_ns = a->unmatched_ns;
  size_t n = 0, nz = a->bzcap < p->nzones ? a->bzcap : p->nzones;
  for (size_t z = 0; z < nz; z++) n += a->by_zone[z].kernels > 0;
  if (!n) return 0;
  if (!(f->launched = calloc(n, sizeof *f->launched))) return MLPROF_ENOMEM;
  for (size_t z = 0; z < nz; z++) {
    if (!a->by_zone[z].kernels) continue;
    mlprof__gpu_launched *x = &f->launched[f->nlaunched];
    if (!(x->zone = mlprof__dup(p->zones[z].name, p->zones[z].len)))
      return MLPROF_ENOMEM;
    x->zone_len = p->zones[z].len;
    x->kernels = a->by_zone[z].kernels;
    x->gpu_ns = a->by_zone[z].ns;
    f->nlaunched++;
  }
  mlprof__sort(f->launched, f->nlaunched, sizeof *f->launched, by_ns);
  return 0;
}

int mlprof__gpu_finish(mlprof__gpu_acc *a, const mlprof__fpass *p,
                       mlprof__findings *f) {
  if (launched(a, p, f)) return MLPROF_ENOMEM;
  for (size_t i = 0; i < a->nidle; i++) {
    const idle_res *r = &a->idle[i];
    double share = r->step_ns ? (double)r->idle_ns / (double)r->step_ns : 0;
    if (r->steps < MIN_STEPS || share < IDLE_MIN_SHARE) continue;
    char cpu[320];
    size_t at = 0;
    cpu[0] = '\0';
    /* Zones that took 1% of the gaps or more (the first one always). */
    for (int k = 0; k < 3 && r->top[k] != MLPROF__NONE &&
                    (!k || r->top_ns[k] * 100 >= r->gap_ns);
         k++) {
      const mlprof__fzone *z = &p->zones[r->top[k]];
      int n = snprintf(cpu + at, sizeof cpu - at, "%s%.*s %.0f%%",
                       k ? ", " : "", (int)(z->len < 60 ? z->len : 60), z->name,
                       100.0 * (double)r->top_ns[k] / (double)r->gap_ns);
      if (n < 0 || (size_t)n >= sizeof cpu - at) break;
      at += (size_t)n;
    }
    if (r->nozone_ns && at < sizeof cpu)
      snprintf(cpu + at, sizeof cpu - at, "%sno zone %.0f%%", at ? ", " : "",
               100.0 * (double)r->nozone_ns / (double)r->gap_ns);
    double per = (double)r->idle_ns / (double)r->steps,
           mean = (double)r->step_ns / (double)r->steps;
    const mlprof__fzone *top =
        r->top[0] != MLPROF__NONE ? &p->zones[r->top[0]] : NULL;
    mlprof__finding *x = mlprof__finding_add(
        f, "gpu_idle", top ? top->name : NULL, top ? top->len : 0,
        "GPU %u idle %.0f%% of step time (%.3f ms of %.3f ms per step, %llu "
        "steps); the step's thread meanwhile: %s",
        r->dev, 100 * share, per / 1e6, mean / 1e6,
        (unsigned long long)r->steps, cpu);
    if (!x) return MLPROF_ENOMEM;
    x->flagged = "steps";
    x->severity = fmin(100, 100 * share * 0.8);
    int part = top ? mlprof__zone_part(MLPROF_CAT_NONE, top->name, top->len, 1)
                   : MLPROF__PART_OTHER;
    x->recommendation = part == MLPROF__PART_DATA   ? advice_idle_data
                        : part == MLPROF__PART_COMM ? advice_idle_comm
                                                    : advice_idle;
    mlprof__finding_ev(x, "idle_share", share);
    mlprof__finding_ev(x, "idle_per_step_ns", per);
    mlprof__finding_ev(x, "step_mean_ns", mean);
    mlprof__finding_ev(x, "steps", (double)r->steps);
    mlprof__finding_ev(x, "gpu", r->dev);
    if (top)
      mlprof__finding_ev(x, "top_zone_gap_share",
                         (double)r->top_ns[0] / (double)r->gap_ns);
    mlprof__finding_ev(x, "no_zone_gap_share",
                       (double)r->nozone_ns / (double)r->gap_ns);
  }
  for (size_t i = 0; i < a->nxfer; i++) {
    const xfer_res *r = &a->xfer[i];
    if (r->steps < MIN_STEPS || !r->step_ns) continue;
    double steps = (double)r->steps, step_ns = (double)r->step_ns;
    double copies = (double)(r->h2d + r->d2h);
    double cshare = (double)r->copy_ns / step_ns;
    if (copies >= steps && cshare >= COPY_MIN_SHARE) {
      mlprof__finding *x = mlprof__finding_add(
          f, "host_device_copies", NULL, 0,
          "host-device copies take %.0f%% of step time: %.1f copies, %.0f "
          "bytes and %.3f ms per step (%llu to the device, %llu from it)",
          100 * cshare, copies / steps, (double)r->copy_bytes / steps,
          (double)r->copy_ns / steps / 1e6, (unsigned long long)r->h2d,
          (unsigned long long)r->d2h);
      if (!x) return MLPROF_ENOMEM;
      x->flagged = "steps";
      x->severity = fmin(100, 100 * cshare * 0.6);
      x->recommendation = advice_copies;
      mlprof__finding_ev(x, "copy_share", cshare);
      mlprof__finding_ev(x, "copies_per_step", copies / steps);
      mlprof__finding_ev(x, "copy_bytes_per_step",
                         (double)r->copy_bytes / steps);
      mlprof__finding_ev(x, "copy_per_step_ns", (double)r->copy_ns / steps);
      mlprof__finding_ev(x, "htod_count", (double)r->h2d);
      mlprof__finding_ev(x, "dtoh_count", (double)r->d2h);
      mlprof__finding_ev(x, "steps", steps);
    }
    double eshare = (double)r->exposed_ns / step_ns;
    if (r->comm_ns && eshare >= EXPOSED_MIN_SHARE) {
      double overlap = 1 - (double)r->exposed_ns / (double)r->comm_ns;
      mlprof__finding *x = mlprof__finding_add(
          f, "communication_exposed", NULL, 0,
          "communication ran with no compute kernel beside it %.0f%% of step "
          "time (%.3f ms per step); %.0f%% of it overlapped computation",
          100 * eshare, (double)r->exposed_ns / steps / 1e6, 100 * overlap);
      if (!x) return MLPROF_ENOMEM;
      x->flagged = "steps";
      x->severity = fmin(100, 100 * eshare * 0.6);
      x->recommendation = advice_exposed;
      mlprof__finding_ev(x, "exposed_share", eshare);
      mlprof__finding_ev(x, "exposed_per_step_ns",
                         (double)r->exposed_ns / steps);
      mlprof__finding_ev(x, "comm_share", (double)r->comm_ns / step_ns);
      mlprof__finding_ev(x, "overlap_share", overlap);
      mlprof__finding_ev(x, "nccl_kernels", (double)r->nccl);
      mlprof__finding_ev(x, "steps", steps);
    }
    double sshare = (double)r->sync_ns / step_ns;
    if ((double)r->syncs >= steps && sshare >= SYNC_MIN_SHARE) {
      mlprof__finding *x = mlprof__finding_add(
          f, "host_sync", NULL, 0,
          "the host waits for the GPU %.0f%% of step time: %.1f "
          "synchronisations and %.3f ms per step",
          100 * sshare, (double)r->syncs / steps,
          (double)r->sync_ns / steps / 1e6);
      if (!x) return MLPROF_ENOMEM;
      x->flagged = "steps";
      x->severity = fmin(100, 100 * sshare * 0.7);
      x->recommendation = advice_sync;
      mlprof__finding_ev(x, "sync_share", sshare);
      mlprof__finding_ev(x, "syncs_per_step", (double)r->syncs / steps);
      mlprof__finding_ev(x, "sync_per_step_ns", (double)r->sync_ns / steps);
      mlprof__finding_ev(x, "steps", steps);
    }
  }
  return 0;
}

void mlprof__gpu_free(mlprof__gpu_acc *a) {
  if (!a) return;
  free(a->tracks);
  free(a->g);
  free(a->syncs);
  free(a->c);
  free(a->steps);
  free(a->marks);
  free(a->idle);
  free(a->xfer);
  free(a->api);
  free(a->by_zone);
  free(a);
}
