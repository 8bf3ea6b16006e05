/* Where memory goes (memory.h). Each profile's allocation records are kept
 * as read, sorted by time when the profile ends (threads' chunks arrive in
 * the writer's order, not the clock's), and replayed twice: once for the
 * totals, the zones' and steps' high-water marks, the process's peak and
 * each site's live bytes at every step mark; once more up to the peak, for
 * what was live then. A free pairs with the latest allocation of its
 * address before it; a free of an address never recorded (allocated before
 * recording began, or not sampled) counts for nothing. A site's folded
 * allocations (made and freed within one flush, counted together) add to
 * the totals and never to what is live. */
#include "memory.h"

#include <math.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "../format/wire.h"
#include "findings.h"
#include "hot.h"
#include "marks.h"

#define DEAD (UINT32_MAX - 1) /* a freed address in the live map */
#define MAX_STEPS 256         /* step marks a site's series keeps */
#define MAX_POINTS 300

typedef struct {
  uint64_t t, addr, weight;
  uint32_t site; /* index in the profile's sites; UINT32_MAX: a free */
  uint32_t seq;
  uint32_t excess; /* weight - size, at most UINT32_MAX: its variance */
  int32_t device;  /* its address space (memory.h): -1 the process's own */
} rec;

/* The sampling variance a record stands for (memory.h): w (w - s). */
static inline double rec_var(const rec *r) {
  return (double)r->weight * (double)r->excess;
}

typedef struct {
  uint32_t zone;
  uint64_t stack;
  int32_t device; /* the address space of its allocations */
} site_key;

/* A site's folded allocations (made and freed within one flush): they add
 * to the totals, never to what is live. */
typedef struct {
  uint64_t count, weight;
  double var;
  int inexact; /* a weight is not its size */
} site_sum;

/* A stack's definitions as read (ids may be used before they are defined:
 * resolved when the profile ends). */
typedef struct {
  char *file, *function;
} sfunc;

typedef struct {
  uint32_t func, line;
  int native;
  uint64_t offset;
  char *module, *symbol;
} sframe;

typedef struct {
  uint32_t parent, frame;
} snode;

struct mlprof__memory_builder {
  mlprof__memory *m;
  /* zone names over the job */
  mlprof__strindex zix;
  mlprof__strindex fix; /* frame texts -> mlprof__memory.frames */
  char **znames;
  size_t *zlens, zcount, zcap;
  /* the profile being read */
  size_t proc;
  uint64_t pid;
  mlprof__map zone_of; /* name id -> zone index */
  mlprof__map tid_dev; /* a track's tid -> 1 + its CUDA device */
  rec *recs;
  size_t nrecs, recs_cap;
  double mean, mean_p;  /* the mean read back, from the record of least p */
  mlprof__map site_of;  /* zone << 40 | stack -> profile site */
  mlprof__map dsite_of; /* the same, for a CUDA device's (its zone tells) */
  site_key *keys;
  size_t nkeys, keys_cap;
  site_sum *sums; /* per site, the first nsums of them */
  size_t nsums, sums_cap;
  /* Each thread's step marks, compact (marks.h): a profile of marks alone
   * keeps about the file's bytes, not 16 a mark. */
  struct {
    uint32_t tid;
    mlprof__marks m;
  } * marks;
  size_t nmarks, marks_cap;
  mlprof__map mark_ix;                    /* tid -> index in marks */
  mlprof__map func_of, frame_of, node_of; /* id -> index */
  sfunc *funcs;
  size_t nfuncs, funcs_cap;
  sframe *frames;
  size_t nframes, frames_cap;
  snode *nodes;
  size_t nnodes, nodes_cap;
  int oom;
};

/* ---- reading ------------------------------------------------------------ */

static uint32_t zone_index(mlprof__memory_builder *b, const char *s, size_t n) {
  size_t before = b->zcount;
  uint32_t z = mlprof__strindex_intern(&b->zix, &b->znames, &b->zlens,
                                       &b->zcount, &b->zcap, s, n);
  if (z == MLPROF__NONE) return z;
  if (b->zcount > before) {
    mlprof__memory *m = b->m;
    size_t cap = m->nzones;
    mlprof__mem_zone *zs = realloc(m->zones, b->zcount * sizeof *zs);
    if (!zs) return MLPROF__NONE;
    m->zones = zs;
    memset(&zs[cap], 0, (b->zcount - cap) * sizeof *zs);
    m->nzones = b->zcount;
  }
  return z;
}

static int on_name(void *ud, const mlprof__name *n) {
  mlprof__memory_builder *b = ud;
  if (n->kind != MLPROF__NAME_ZONE) return 0;
  uint32_t z = zone_index(b, n->name, n->name_len);
  if (z == MLPROF__NONE || mlprof__map_put(&b->zone_of, n->id, z)) b->oom = 1;
  return 0;
}

/* The CUDA device of a zone named "cuda:N" (N at most 4095), else -1. */
static int32_t cuda_device(const char *name, size_t len) {
  if (len < 6 || len > 9 || memcmp(name, "cuda:", 5) != 0) return -1;
  int32_t d = 0;
  for (size_t i = 5; i < len; i++) {
    if (name[i] < '0' || name[i] > '9') return -1;
    d = d * 10 + (name[i] - '0');
  }
  return d < 4096 ? d : -1;
}

/* The address space of tid's allocations in zone (a zone index): a CUDA
 * device's for a track's allocations in a zone "cuda:N" (a program's own
 * zone of that name stays the process's), else -1. */
static int32_t space_of(mlprof__memory_builder *b, uint32_t tid,
                        uint32_t zone) {
  if (tid < MLPROF__TRACK_TID_BASE || !zone) return -1;
  int32_t d = cuda_device(b->znames[zone], b->zlens[zone]);
  if (d >= 0 && mlprof__map_get(&b->tid_dev, tid) == MLPROF__NONE &&
      mlprof__map_put(&b->tid_dev, tid, (uint32_t)d + 1))
    b->oom = 1;
  return d;
}

static uint32_t site_of(mlprof__memory_builder *b, uint32_t tid,
                        uint32_t zone_id, uint64_t stack) {
  uint32_t zone = zone_id ? mlprof__map_get(&b->zone_of, zone_id) : 0;
  if (zone == MLPROF__NONE) zone = 0;
  int32_t device = space_of(b, tid, zone);
  uint64_t key = (uint64_t)zone << 40 ^ (stack & ((1ull << 40) - 1));
  mlprof__map *of = device >= 0 ? &b->dsite_of : &b->site_of;
  uint32_t s = mlprof__map_get(of, key);
  if (s != MLPROF__NONE) return s;
  if (mlprof__grow(&b->keys, &b->keys_cap, b->nkeys + 1, sizeof *b->keys))
    return MLPROF__NONE;
  s = (uint32_t)b->nkeys;
  if (mlprof__map_put(of, key, s)) return MLPROF__NONE;
  b->keys[b->nkeys++] = (site_key){zone, stack, device};
  return s;
}

static int add_rec(mlprof__memory_builder *b, rec r) {
  if (b->nrecs >= UINT32_MAX - 2 ||
      mlprof__grow(&b->recs, &b->recs_cap, b->nrecs + 1, sizeof *b->recs)) {
    b->oom = 1;
    return MLPROF_ENOMEM;
  }
  r.seq = (uint32_t)b->nrecs;
  b->recs[b->nrecs++] = r;
  return 0;
}

static uint64_t sat_add(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* What an allocation of size bytes weighing weight says of the sampling:
 * the mean gap. */
static void note_weight(mlprof__memory_builder *b, uint64_t size,
                        uint64_t weight) {
  if (weight <= size) return;
  /* w = s / (1 - exp(-s / mean)): mean = -s / log(1 - s / w), most
   * precise where s / w is least (rounding w moves it least). */
  double p = (double)size / (double)weight;
  if (p < b->mean_p) {
    b->mean_p = p;
    b->mean = -(double)size / log1p(-p);
  }
}

static int on_alloc(void *ud, const mlprof__alloc *a) {
  mlprof__memory_builder *b = ud;
  uint32_t s = site_of(b, a->tid, a->zone, a->stack);
  if (s == MLPROF__NONE) {
    b->oom = 1;
    return MLPROF_ENOMEM;
  }
  uint32_t excess = 0;
  if (a->weight > a->size) {
    uint64_t e = a->weight - a->size;
    excess = e > UINT32_MAX ? UINT32_MAX : (uint32_t)e;
  }
  note_weight(b, a->size, a->weight);
  return add_rec(
      b, (rec){a->t, a->addr, a->weight, s, 0, excess, b->keys[s].device});
}

static int on_alloc_sum(void *ud, const mlprof__alloc_sum *a) {
  mlprof__memory_builder *b = ud;
  uint32_t s = site_of(b, a->tid, a->zone, a->stack);
  if (s == MLPROF__NONE ||
      mlprof__grow(&b->sums, &b->sums_cap, (size_t)s + 1, sizeof *b->sums)) {
    b->oom = 1;
    return MLPROF_ENOMEM;
  }
  for (; b->nsums <= s; b->nsums++) b->sums[b->nsums] = (site_sum){0, 0, 0, 0};
  site_sum *u = &b->sums[s];
  u->count = sat_add(u->count, a->count);
  u->weight = sat_add(u->weight, a->weight);
  u->var += (double)a->var;
  /* One allocation alone tells the mean as a record does; a sum of sizes
   * only whether the weights are sizes. */
  if (a->count == 1) note_weight(b, a->size, a->weight);
  u->inexact |= a->weight != a->size;
  return 0;
}

static int on_free(void *ud, uint32_t tid, uint64_t t, uint64_t addr) {
  mlprof__memory_builder *b = ud;
  int32_t device = -1;
  if (tid >= MLPROF__TRACK_TID_BASE) {
    /* A track's free ends only its own space's allocations; before any
     * of them it has nothing to end. */
    uint32_t d = mlprof__map_get(&b->tid_dev, tid);
    if (d == MLPROF__NONE) return 0;
    device = (int32_t)d - 1;
  }
  return add_rec(b, (rec){t, addr, 0, UINT32_MAX, 0, 0, device});
}

static int on_step(void *ud, uint32_t tid, uint64_t t) {
  mlprof__memory_builder *b = ud;
  uint32_t i = mlprof__map_get(&b->mark_ix, tid);
  if (i == MLPROF__NONE) {
    if (mlprof__grow(&b->marks, &b->marks_cap, b->nmarks + 1,
                     sizeof *b->marks) ||
        mlprof__map_put(&b->mark_ix, tid, (uint32_t)b->nmarks))
      return b->oom = 1, MLPROF_ENOMEM;
    i = (uint32_t)b->nmarks++;
    b->marks[i].tid = tid;
    memset(&b->marks[i].m, 0, sizeof b->marks[i].m);
  }
  if (mlprof__marks_add(&b->marks[i].m, t, 0)) return b->oom = 1, MLPROF_ENOMEM;
  return 0;
}

static int on_stack_func(void *ud, const mlprof__stack_func *f) {
  mlprof__memory_builder *b = ud;
  if (mlprof__grow(&b->funcs, &b->funcs_cap, b->nfuncs + 1, sizeof *b->funcs))
    return b->oom = 1, MLPROF_ENOMEM;
  sfunc *s = &b->funcs[b->nfuncs];
  s->file = mlprof__dup(f->file, strlen(f->file));
  s->function = mlprof__dup(f->function, strlen(f->function));
  if (!s->file || !s->function ||
      mlprof__map_put(&b->func_of, f->id, (uint32_t)b->nfuncs)) {
    free(s->file);
    free(s->function);
    return b->oom = 1, MLPROF_ENOMEM;
  }
  b->nfuncs++;
  return 0;
}

static int on_stack_frame(void *ud, const mlprof__stack_frame *f) {
  mlprof__memory_builder *b = ud;
  if (mlprof__grow(&b->frames, &b->frames_cap, b->nframes + 1,
                   sizeof *b->frames))
    return b->oom = 1, MLPROF_ENOMEM;
  sframe *s = &b->frames[b->nframes];
  *s = (sframe){f->func, f->line, f->native, f->offset, NULL, NULL};
  s->module = mlprof__dup(f->module, strlen(f->module));
  s->symbol = mlprof__dup(f->symbol, strlen(f->symbol));
  if (!s->module || !s->symbol ||
      mlprof__map_put(&b->frame_of, f->id, (uint32_t)b->nframes)) {
    free(s->module);
    free(s->symbol);
    return b->oom = 1, MLPROF_ENOMEM;
  }
  b->nframes++;
  return 0;
}

static int on_stack_node(void *ud, uint32_t id, uint32_t parent,
                         uint32_t frame) {
  mlprof__memory_builder *b = ud;
  if (mlprof__grow(&b->nodes, &b->nodes_cap, b->nnodes + 1, sizeof *b->nodes) ||
      mlprof__map_put(&b->node_of, id, (uint32_t)b->nnodes))
    return b->oom = 1, MLPROF_ENOMEM;
  b->nodes[b->nnodes++] = (snode){parent, frame};
  return 0;
}

static void stacks_clear(mlprof__memory_builder *b) {
  for (size_t i = 0; i < b->nfuncs; i++) {
    free(b->funcs[i].file);
    free(b->funcs[i].function);
  }
  for (size_t i = 0; i < b->nframes; i++) {
    free(b->frames[i].module);
    free(b->frames[i].symbol);
  }
  b->nfuncs = b->nframes = b->nnodes = 0;
  mlprof__map_clear(&b->func_of);
  mlprof__map_clear(&b->frame_of);
  mlprof__map_clear(&b->node_of);
}

/* Whether a file is the Python installation's, an installed package's or
 * mlprof's own (its torch wrappers call the modules), not the program's. */
static int library_file(const char *f) {
  return strstr(f, "/site-packages/") || strstr(f, "/dist-packages/") ||
         strstr(f, "/lib/python") || mlprof__hot_own_file(f) || f[0] == '<';
}

#define USER_FRAMES 3

/* A frame as a line of a site's path (memory.h) into buf. */
static void frame_text(mlprof__memory_builder *b, const sframe *fr, char *buf,
                       size_t len) {
  uint32_t ui =
      fr->func ? mlprof__map_get(&b->func_of, fr->func) : MLPROF__NONE;
  if (fr->native) {
    const char *mod = strrchr(fr->module, '/');
    mod = mod ? mod + 1 : fr->module;
    snprintf(buf, len, "[%s+0x%llx]", fr->symbol[0] ? fr->symbol : mod,
             (unsigned long long)fr->offset);
  } else if (ui != MLPROF__NONE) {
    snprintf(buf, len, "%s:%u %s", b->funcs[ui].file, fr->line,
             b->funcs[ui].function);
  } else {
    snprintf(buf, len, "<truncated>"); /* the root of a deeper stack */
  }
}

/* Sets s->path to its stack's (memory.h). 0 or MLPROF_ENOMEM. */
static int site_path(mlprof__memory_builder *b, mlprof__mem_site *s) {
  uint32_t id = (uint32_t)s->stack;
  const sframe *fr[MLPROF__MEM_PATH_FRAMES];
  size_t n = 0;
  /* Innermost first; parents have smaller ids: the walk ends. */
  for (size_t hops = 0; id && hops < 4096 && n < MLPROF__MEM_PATH_FRAMES;
       hops++) {
    uint32_t ni = mlprof__map_get(&b->node_of, id);
    if (ni == MLPROF__NONE) break;
    const snode *nd = &b->nodes[ni];
    uint32_t fi = mlprof__map_get(&b->frame_of, nd->frame);
    if (fi != MLPROF__NONE) fr[n++] = &b->frames[fi];
    if (nd->parent >= id) break;
    id = nd->parent;
  }
  if (!n) return 0;
  if (!(s->path = malloc(n * sizeof *s->path))) return MLPROF_ENOMEM;
  mlprof__memory *m = b->m;
  char line[512];
  for (size_t k = n; k-- > 0;) {
    frame_text(b, fr[k], line, sizeof line);
    uint32_t f = mlprof__strindex_intern(&b->fix, &m->frames, &m->frame_lens,
                                         &m->nframes, &m->frames_cap, line,
                                         strlen(line));
    if (f == MLPROF__NONE) return MLPROF_ENOMEM;
    s->path[s->npath++] = f;
  }
  return 0;
}

/* Fills s->python and s->native from its stack's definitions. Returns 0 or
 * MLPROF_ENOMEM. */
static int describe(mlprof__memory_builder *b, mlprof__mem_site *s) {
  char py[1024] = "", nat[512] = "", lib[512] = "";
  size_t at = 0, users = 0;
  uint32_t id = (uint32_t)s->stack;
  /* Parents have smaller ids: the walk ends. */
  for (size_t hops = 0; id && hops < 4096; hops++) {
    uint32_t ni = mlprof__map_get(&b->node_of, id);
    if (ni == MLPROF__NONE) break;
    const snode *nd = &b->nodes[ni];
    uint32_t fi = mlprof__map_get(&b->frame_of, nd->frame);
    if (fi != MLPROF__NONE) {
      const sframe *fr = &b->frames[fi];
      uint32_t ui =
          fr->func ? mlprof__map_get(&b->func_of, fr->func) : MLPROF__NONE;
      if (fr->native && !nat[0]) {
        const char *mod = strrchr(fr->module, '/');
        mod = mod ? mod + 1 : fr->module;
        snprintf(nat, sizeof nat, "%s+0x%llx", fr->symbol[0] ? fr->symbol : mod,
                 (unsigned long long)fr->offset);
      } else if (ui != MLPROF__NONE) {
        const sfunc *fn = &b->funcs[ui];
        if (!library_file(fn->file) && users < USER_FRAMES && at < sizeof py) {
          at += (size_t)snprintf(py + at, sizeof py - at, "%s%s:%u %s",
                                 users ? " < " : "", fn->file, fr->line,
                                 fn->function);
          users++;
        } else if (!lib[0]) {
          snprintf(lib, sizeof lib, "%s:%u %s", fn->file, fr->line,
                   fn->function);
        }
      }
    }
    if (nd->parent >= id) break;
    id = nd->parent;
  }
  const char *p = py[0] ? py : lib;
  s->python = mlprof__dup(p, strlen(p));
  s->native = mlprof__dup(nat, strlen(nat));
  if (!s->python || !s->native) return MLPROF_ENOMEM;
  return site_path(b, s);
}

mlprof__memory_builder *mlprof__memory_begin(mlprof__memory *m) {
  memset(m, 0, sizeof *m);
  mlprof__memory_builder *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->m = m;
  /* Zone 0: memory allocated outside any zone. */
  if (zone_index(b, "", 0) != 0) {
    mlprof__memory_abort(b);
    return NULL;
  }
  return b;
}

void mlprof__memory_profile_begin(mlprof__memory_builder *b, size_t proc,
                                  uint64_t pid, mlprof__visitor *v) {
  b->proc = proc;
  b->pid = pid;
  b->mean = 0;
  b->mean_p = 1;
  *v = (mlprof__visitor){.ud = b,
                         .name = on_name,
                         .alloc = on_alloc,
                         .alloc_free = on_free,
                         .alloc_sum = on_alloc_sum,
                         .step = on_step,
                         .stack_func = on_stack_func,
                         .stack_frame = on_stack_frame,
                         .stack_node = on_stack_node};
}

/* ---- replay ------------------------------------------------------------- */

static int by_time(const void *x, const void *y) {
  const rec *a = x, *b = y;
  if (a->t != b->t) return a->t < b->t ? -1 : 1;
  return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* The step marks of the thread that marks the most steps, in time order
 * (marks.h keeps a thread's in order). */
static uint64_t *step_times(mlprof__memory_builder *b, size_t *n) {
  *n = 0;
  const mlprof__marks *best = NULL;
  for (size_t i = 0; i < b->nmarks; i++)
    if (!best || b->marks[i].m.marks > best->marks) best = &b->marks[i].m;
  if (!best || !best->marks) return NULL;
  uint64_t *t = malloc(best->marks * sizeof *t);
  if (!t) return NULL;
  mlprof__marks_cursor c;
  mlprof__marks_cursor_init(&c, best);
  int end;
  while (*n < best->marks && mlprof__marks_next(&c, &t[*n], &end)) (*n)++;
  return t;
}

static void marks_clear(mlprof__memory_builder *b) {
  for (size_t i = 0; i < b->nmarks; i++) mlprof__marks_free(&b->marks[i].m);
  b->nmarks = 0;
  mlprof__map_clear(&b->mark_ix);
}

/* One replay of the sorted records up to (not including) index stop.
 * live[site] and zlive[zone] end as what was live there; with peak_out,
 * the peak and its index. */
typedef struct {
  uint64_t *live, *zlive;
  double *var, *zvar; /* their sampling variances */
  uint64_t total, peak;
  double total_var, peak_var;
  size_t peak_i;
  size_t cols; /* columns of the series filled: step marks passed */
  /* The live-bytes series (memory.h) into p's, with p: the records' first
   * time and span, the bucket under way, its highest and when. */
  uint64_t t0, span, bucket, high, high_t;
} replay;

/* Live bytes went to total at time t: the series' bucket of t keeps its
 * highest (memory.h). */
static void series_point(replay *r, mlprof__mem_proc *p, uint64_t t,
                         uint64_t before) {
  uint64_t k = (uint64_t)((double)(t - r->t0) * MLPROF__MEM_SERIES /
                          (double)(r->span + 1));
  if (p->nlive == 0) {
    /* Nothing was live before the first record. */
    p->live_t[0] = t;
    p->live_v[0] = 0;
    p->nlive = 1;
    r->bucket = k;
    r->high = before;
    r->high_t = t;
  } else if (k != r->bucket) {
    if (p->nlive <= MLPROF__MEM_SERIES) {
      p->live_t[p->nlive] = r->high_t;
      p->live_v[p->nlive++] = r->high;
    }
    r->bucket = k;
    r->high = before;
    r->high_t = t;
  }
  if (r->total > r->high) {
    r->high = r->total;
    r->high_t = t;
  }
}

static int run(mlprof__memory_builder *b, replay *r, size_t stop,
               const uint64_t *steps, size_t nsteps, double *series,
               size_t every, mlprof__mem_proc *p) {
  mlprof__memory *m = b->m;
  mlprof__map at = {0}; /* address -> record index, or DEAD */
  size_t nsite = b->nkeys, step = 0, col = 0;
  int rc = 0;
  for (size_t i = 0; i < stop; i++) {
    const rec *e = &b->recs[i];
    uint64_t before = r->total;
    /* Step marks passed: the series' columns and the steps' peaks. */
    while (steps && step < nsteps && steps[step] <= e->t) {
      if (series && step % every == 0 && col < MAX_STEPS) {
        for (size_t s = 0; s < nsite; s++)
          series[s * MAX_STEPS + col] = (double)r->live[s];
        col++;
      }
      step++;
      if (p && step <= nsteps && step >= 1 && step - 1 < p->nsteps)
        p->step_peak[step - 1] = r->total;
    }
    if (e->site != UINT32_MAX) {
      const site_key *k = &b->keys[e->site];
      if ((rc = mlprof__map_put(&at, e->addr, (uint32_t)i))) break;
      double v = rec_var(e);
      r->live[e->site] += e->weight;
      r->zlive[k->zone] += e->weight;
      r->total += e->weight;
      r->var[e->site] += v;
      r->zvar[k->zone] += v;
      r->total_var += v;
      if (p) {
        mlprof__mem_zone *z = &m->zones[k->zone];
        z->alloc_bytes = sat_add(z->alloc_bytes, e->weight);
        z->alloc_count++;
        if (r->zlive[k->zone] > z->peak) {
          z->peak = r->zlive[k->zone];
          z->peak_var = r->zvar[k->zone];
        }
        p->alloc_bytes = sat_add(p->alloc_bytes, e->weight);
        p->allocs++;
      }
      if (r->total > r->peak) {
        r->peak = r->total;
        r->peak_var = r->total_var;
        r->peak_i = i + 1;
      }
    } else {
      if (p) p->frees++;
      uint32_t j = mlprof__map_get(&at, e->addr);
      if (j == MLPROF__NONE || j == DEAD) {
        if (p && p->live_t) series_point(r, p, e->t, before);
        continue;
      }
      if ((rc = mlprof__map_put(&at, e->addr, DEAD))) break;
      const rec *a = &b->recs[j];
      const site_key *k = &b->keys[a->site];
      double v = rec_var(a);
      r->live[a->site] -= a->weight;
      r->zlive[k->zone] -= a->weight;
      r->total -= a->weight;
      /* Sums of doubles: rounding may leave a trace below 0. */
      r->var[a->site] = fmax(0, r->var[a->site] - v);
      r->zvar[k->zone] = fmax(0, r->zvar[k->zone] - v);
      r->total_var = fmax(0, r->total_var - v);
      if (p) {
        m->zones[k->zone].freed_bytes =
            sat_add(m->zones[k->zone].freed_bytes, a->weight);
        m->zones[k->zone].freed_count++;
        p->freed_bytes = sat_add(p->freed_bytes, a->weight);
      }
    }
    if (p && p->live_t) series_point(r, p, e->t, before);
    /* The step under way: its own high-water mark. */
    if (p && step >= 1 && step - 1 < p->nsteps &&
        r->total > p->step_peak[step - 1])
      p->step_peak[step - 1] = r->total;
  }
  mlprof__map_clear(&at);
  r->cols = col;
  if (p && p->live_t && p->nlive && p->nlive <= MLPROF__MEM_SERIES) {
    p->live_t[p->nlive] = r->high_t;
    p->live_v[p->nlive++] = r->high;
  }
  return rc ? MLPROF_ENOMEM : 0;
}

/* Whether a site's live bytes at the step marks (n of them) grow step
 * after step and keep growing. */
static void judge(mlprof__mem_site *s, const double *y, size_t n) {
  if (n < MLPROF__MEM_LEAK_MIN_STEPS) return;
  double *x = malloc(n * sizeof *x);
  if (!x) return;
  s->growth = y[n - 1] > y[0] ? (uint64_t)(y[n - 1] - y[0]) : 0;
  for (size_t i = 0; i < n; i++) x[i] = (double)i;
  s->slope = mlprof__theil_sen(x, y, n, MAX_POINTS);
  s->slope_late =
      mlprof__theil_sen(x + n / 2, y + n / 2, n - n / 2, MAX_POINTS);
  s->mk_z = mlprof__mann_kendall_z(y, n, MAX_POINTS);
  free(x);
  /* A warm-up or a cache filled once grows, then stops: the second half
   * must grow too. What is live at the end does not decide: a Python
   * program's finalization frees what it leaked. */
  s->leak = s->mk_z >= MLPROF__MEM_LEAK_MIN_Z && s->slope > 0 &&
            s->slope_late >= 0.5 * s->slope &&
            s->growth >= MLPROF__MEM_LEAK_MIN_BYTES;
}

/* The site figures of group g (memory.h) for site s (a key of b): found or
 * added through idx (g << 32 | s -> index in p->step_sites). NULL when
 * memory is short. */
static mlprof__mem_step_site *step_site(mlprof__mem_proc *p, mlprof__map *idx,
                                        size_t *cap, uint32_t g, uint32_t s,
                                        size_t site) {
  uint64_t key = (uint64_t)g << 32 | s;
  uint32_t k = mlprof__map_get(idx, key);
  if (k != MLPROF__NONE) return &p->step_sites[k];
  if (p->nstep_sites >= UINT32_MAX - 2 ||
      mlprof__grow(&p->step_sites, cap, p->nstep_sites + 1,
                   sizeof *p->step_sites) ||
      mlprof__map_put(idx, key, (uint32_t)p->nstep_sites))
    return NULL;
  mlprof__mem_step_site *x = &p->step_sites[p->nstep_sites++];
  *x = (mlprof__mem_step_site){.group = g, .site = site};
  return x;
}

/* Live bytes of the record stream at record i (r: the running state of
 * one pass): applies record i, returns 0 or MLPROF_ENOMEM. */
static int apply(mlprof__memory_builder *b, mlprof__map *at, size_t i,
                 uint64_t *total, uint64_t *live) {
  const rec *e = &b->recs[i];
  if (e->site != UINT32_MAX) {
    if (mlprof__map_put(at, e->addr, (uint32_t)i)) return MLPROF_ENOMEM;
    *total += e->weight;
    if (live) live[e->site] += e->weight;
    return 0;
  }
  uint32_t j = mlprof__map_get(at, e->addr);
  if (j == MLPROF__NONE || j == DEAD) return 0;
  if (mlprof__map_put(at, e->addr, DEAD)) return MLPROF_ENOMEM;
  *total -= b->recs[j].weight;
  if (live) live[b->recs[j].site] -= b->recs[j].weight;
  return 0;
}

/* The process's steps in groups (memory.h), each group's peak, and per
 * site (sidx: key -> index in m->sites, UINT32_MAX for another space's)
 * what it allocated in each group and held at its peak. Two passes over
 * the records: the groups' peaks, then the sites live at them. 0 or
 * MLPROF_ENOMEM. */
static int step_groups(mlprof__memory_builder *b, mlprof__mem_proc *p,
                       const uint32_t *sidx) {
  size_t n = p->nsteps,
         ng = n < MLPROF__MEM_STEP_GROUPS ? n : MLPROF__MEM_STEP_GROUPS;
  if (!ng || !b->nrecs) return 0;
  int rc = MLPROF_ENOMEM;
  size_t *peak_i = calloc(ng, sizeof *peak_i), cap = 0;
  char *started = calloc(ng, 1);
  uint64_t *live = calloc(b->nkeys, sizeof *live), total = 0;
  mlprof__map at = {0}, idx = {0};
  if (!(p->groups = calloc(ng, sizeof *p->groups)) || !peak_i || !started ||
      !live)
    goto out;
  p->ngroups = ng;
  uint64_t end = b->recs[b->nrecs - 1].t;
  for (size_t g = 0; g < ng; g++) {
    mlprof__mem_group *x = &p->groups[g];
    x->first = (uint32_t)(g * n / ng);
    x->count = (uint32_t)((g + 1) * n / ng - x->first);
    x->t0 = p->step_t[x->first];
    x->t1 = x->first + x->count < n ? p->step_t[x->first + x->count] : end;
    if (x->t1 < x->t0) x->t1 = x->t0;
  }
  /* Pass 1: each group's peak (what was live when it began, at least),
   * and what each site allocated in it. */
  size_t g = 0;
  for (size_t i = 0; i <= b->nrecs; i++) {
    uint64_t t = i < b->nrecs ? b->recs[i].t : UINT64_MAX;
    /* The last group takes the records up to the end. */
    while (g < ng && (g + 1 < ng ? t >= p->groups[g].t1 : i == b->nrecs)) {
      if (!started[g]) {
        started[g] = 1;
        p->groups[g].peak = total;
        p->groups[g].peak_t = p->groups[g].t0;
        peak_i[g] = i;
      }
      g++;
    }
    if (i == b->nrecs) break;
    int in = g < ng && t >= p->groups[g].t0;
    if (in && !started[g]) {
      started[g] = 1;
      p->groups[g].peak = total;
      p->groups[g].peak_t = p->groups[g].t0;
      peak_i[g] = i;
    }
    if (apply(b, &at, i, &total, NULL)) goto out;
    const rec *e = &b->recs[i];
    if (!in) continue;
    if (total > p->groups[g].peak) {
      p->groups[g].peak = total;
      p->groups[g].peak_t = t;
      peak_i[g] = i + 1;
    }
    if (e->site != UINT32_MAX) {
      mlprof__mem_step_site *x =
          step_site(p, &idx, &cap, (uint32_t)g, e->site, sidx[e->site]);
      if (!x) goto out;
      x->alloc_bytes = sat_add(x->alloc_bytes, e->weight);
      x->alloc_count++;
    }
  }
  /* Pass 2: the sites live at each group's peak (peak_i grows with g). */
  mlprof__map_clear(&at);
  total = 0;
  g = 0;
  for (size_t i = 0; i <= b->nrecs; i++) {
    for (; g < ng && peak_i[g] == i; g++)
      for (size_t s = 0; s < b->nkeys; s++) {
        if (!live[s] || sidx[s] == UINT32_MAX) continue;
        mlprof__mem_step_site *x =
            step_site(p, &idx, &cap, (uint32_t)g, (uint32_t)s, sidx[s]);
        if (!x) goto out;
        x->at_peak = live[s];
      }
    if (i == b->nrecs || g == ng) break;
    if (apply(b, &at, i, &total, live)) goto out;
  }
  rc = 0;
out:
  mlprof__map_clear(&at);
  mlprof__map_clear(&idx);
  free(peak_i);
  free(started);
  free(live);
  return rc;
}

/* Replays the profile's records of one address space (b->recs holds only
 * them, sorted) into a new process entry and its sites. steps: the
 * profile's step marks, copied. 0 or MLPROF_ENOMEM. */
static int replay_space(mlprof__memory_builder *b, int32_t device,
                        const uint64_t *steps, size_t nsteps) {
  mlprof__memory *m = b->m;
  int rc = MLPROF_ENOMEM;
  double *series = NULL;
  uint32_t *sidx = NULL;
  replay r = {0};
  size_t every = nsteps / MAX_STEPS + 1,
         cols = nsteps ? (nsteps - 1) / every + 1 : 0;
  mlprof__mem_proc *ps = realloc(m->procs, (m->nprocs + 1) * sizeof *ps);
  if (!ps) goto out;
  m->procs = ps;
  size_t mproc = m->nprocs;
  mlprof__mem_proc *p = &ps[mproc];
  /* Exact when every record of this space weighs its size (a device's
   * history is whole beside a process's sampled allocations). */
  int exact = 1;
  for (size_t i = 0; i < b->nrecs && exact; i++)
    exact = b->recs[i].site == UINT32_MAX || !b->recs[i].excess;
  for (size_t s = 0; s < b->nsums; s++)
    if (b->keys[s].device == device && b->sums[s].inexact) exact = 0;
  *p = (mlprof__mem_proc){.proc = b->proc,
                          .pid = b->pid,
                          .device = device,
                          .exact = exact,
                          .mean = exact ? 0 : round(b->mean)};
  m->nprocs++;
  if (nsteps && (!(p->step_peak = calloc(nsteps, sizeof *p->step_peak)) ||
                 !(p->step_t = malloc(nsteps * sizeof *p->step_t))))
    goto out;
  if (nsteps) memcpy(p->step_t, steps, nsteps * sizeof *steps);
  p->nsteps = nsteps;
  p->live_t = malloc((MLPROF__MEM_SERIES + 1) * sizeof *p->live_t);
  p->live_v = malloc((MLPROF__MEM_SERIES + 1) * sizeof *p->live_v);
  if (!p->live_t || !p->live_v) goto out;
  r.t0 = b->nrecs ? b->recs[0].t : 0;
  r.span = b->nrecs ? b->recs[b->nrecs - 1].t - r.t0 : 0;
  r.live = calloc(b->nkeys, sizeof *r.live);
  r.zlive = calloc(m->nzones, sizeof *r.zlive);
  r.var = calloc(b->nkeys, sizeof *r.var);
  r.zvar = calloc(m->nzones, sizeof *r.zvar);
  sidx = malloc(b->nkeys * sizeof *sidx);
  if (cols) series = calloc(b->nkeys * MAX_STEPS, sizeof *series);
  if (!r.live || !r.zlive || !r.var || !r.zvar || !sidx || (cols && !series))
    goto out;
  if ((rc = run(b, &r, b->nrecs, p->step_t, nsteps, series, every, p)))
    goto out;
  /* Folded allocations: allocated and freed, never live at a peak. */
  for (size_t s = 0; s < b->nsums; s++) {
    const site_sum *u = &b->sums[s];
    if (b->keys[s].device != device) continue;
    mlprof__mem_zone *z = &m->zones[b->keys[s].zone];
    z->alloc_bytes = sat_add(z->alloc_bytes, u->weight);
    z->alloc_count = sat_add(z->alloc_count, u->count);
    z->freed_bytes = sat_add(z->freed_bytes, u->weight);
    z->freed_count = sat_add(z->freed_count, u->count);
    p->alloc_bytes = sat_add(p->alloc_bytes, u->weight);
    p->freed_bytes = sat_add(p->freed_bytes, u->weight);
    p->allocs = sat_add(p->allocs, u->count);
    p->frees = sat_add(p->frees, u->count);
  }
  p->peak = r.peak;
  p->peak_var = r.peak_var;
  p->live_end = r.total;
  p->leak_floor = p->exact || p->mean > 0
                      ? mlprof__memory_leak_floor(nsteps, cols, p->mean)
                      : NAN;
  size_t peak_i = r.peak_i;
  p->peak_t = peak_i ? b->recs[peak_i - 1].t : 0;
  /* Sites of this space: totals and what each still held at the end. */
  size_t base = m->nsites, nown = 0;
  for (size_t s = 0; s < b->nkeys; s++)
    sidx[s] =
        b->keys[s].device == device ? (uint32_t)(base + nown++) : UINT32_MAX;
  rc = MLPROF_ENOMEM;
  mlprof__mem_site *ss = realloc(m->sites, (base + nown + 1) * sizeof *ss);
  if (!ss) goto out;
  m->sites = ss;
  for (size_t s = 0; s < b->nkeys; s++)
    if (sidx[s] != UINT32_MAX)
      ss[sidx[s]] = (mlprof__mem_site){.proc = b->proc,
                                       .mproc = mproc,
                                       .id = sidx[s],
                                       .zone = b->keys[s].zone,
                                       .stack = b->keys[s].stack,
                                       .live_end = r.live[s]};
  m->nsites += nown;
  for (size_t s = 0; s < b->nkeys; s++)
    if (sidx[s] != UINT32_MAX && describe(b, &ss[sidx[s]])) goto out;
  for (size_t i = 0; i < b->nrecs; i++)
    if (b->recs[i].site != UINT32_MAX) {
      mlprof__mem_site *x = &ss[sidx[b->recs[i].site]];
      x->alloc_bytes = sat_add(x->alloc_bytes, b->recs[i].weight);
      x->alloc_count++;
      x->alloc_var += rec_var(&b->recs[i]);
    }
  for (size_t s = 0; s < b->nsums; s++) {
    if (sidx[s] == UINT32_MAX) continue;
    mlprof__mem_site *x = &ss[sidx[s]];
    x->alloc_bytes = sat_add(x->alloc_bytes, b->sums[s].weight);
    x->alloc_count = sat_add(x->alloc_count, b->sums[s].count);
    x->alloc_var += b->sums[s].var;
  }
  /* Step after step: the series over the marks this process made. */
  if (series && r.cols) {
    /* The marks after the last record left no column. */
    for (size_t s = 0; s < b->nkeys; s++) {
      if (sidx[s] == UINT32_MAX) continue;
      judge(&ss[sidx[s]], &series[s * MAX_STEPS], r.cols);
      m->nleaks += ss[sidx[s]].leak != 0;
    }
  }
  /* Again, up to the peak: what held memory then. */
  memset(r.live, 0, b->nkeys * sizeof *r.live);
  memset(r.zlive, 0, m->nzones * sizeof *r.zlive);
  memset(r.var, 0, b->nkeys * sizeof *r.var);
  memset(r.zvar, 0, m->nzones * sizeof *r.zvar);
  r.total = r.peak = 0;
  r.total_var = r.peak_var = 0;
  if ((rc = run(b, &r, peak_i, NULL, 0, NULL, 1, NULL))) goto out;
  for (size_t s = 0; s < b->nkeys; s++) {
    if (sidx[s] == UINT32_MAX) continue;
    ss[sidx[s]].at_peak = r.live[s];
    ss[sidx[s]].at_peak_var = r.var[s];
  }
  for (size_t z = 0; z < m->nzones; z++) m->zones[z].at_peak += r.zlive[z];
  rc = step_groups(b, p, sidx);
out:
  free(series);
  free(sidx);
  free(r.live);
  free(r.zlive);
  free(r.var);
  free(r.zvar);
  return rc;
}

static int by_int32(const void *x, const void *y) {
  int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
  return (a > b) - (a < b);
}

int mlprof__memory_profile_end(mlprof__memory_builder *b) {
  int rc = b->oom ? MLPROF_ENOMEM : 0;
  size_t nsteps = 0, ndev = 0;
  uint64_t *steps = NULL;
  int32_t *devs = NULL;
  rec *all = b->recs, *some = NULL;
  size_t nall = b->nrecs;
  if (rc || (!b->nrecs && !b->nsums)) goto out;
  mlprof__sort(b->recs, b->nrecs, sizeof *b->recs, by_time);
  steps = step_times(b, &nsteps);
  /* The address spaces the records hold: the process's own first, then
   * each CUDA device in order (memory.h). */
  rc = MLPROF_ENOMEM;
  if (!(devs = malloc((b->nkeys + 1) * sizeof *devs))) goto out;
  for (size_t s = 0; s < b->nkeys; s++) devs[ndev++] = b->keys[s].device;
  mlprof__sort(devs, ndev, sizeof *devs, by_int32);
  size_t u = 0;
  for (size_t i = 0; i < ndev; i++)
    if (!u || devs[u - 1] != devs[i]) devs[u++] = devs[i];
  ndev = u;
  if (!ndev) devs[ndev++] = -1; /* frees alone: the process's, empty */
  if (ndev == 1) {
    rc = replay_space(b, devs[0], steps, nsteps);
    goto out;
  }
  if (!(some = malloc(nall * sizeof *some))) goto out;
  rc = 0;
  for (size_t d = 0; d < ndev && !rc; d++) {
    size_t k = 0;
    for (size_t i = 0; i < nall; i++)
      if (all[i].device == devs[d]) some[k++] = all[i];
    int has_alloc = devs[d] < 0;
    for (size_t i = 0; i < k && !has_alloc; i++)
      has_alloc = some[i].site != UINT32_MAX;
    if (!has_alloc) continue;
    b->recs = some;
    b->nrecs = k;
    rc = replay_space(b, devs[d], steps, nsteps);
    b->recs = all;
  }
out:
  b->recs = all;
  free(some);
  free(devs);
  free(steps);
  b->nrecs = b->nkeys = b->nsums = 0;
  marks_clear(b);
  stacks_clear(b);
  mlprof__map_clear(&b->zone_of);
  mlprof__map_clear(&b->site_of);
  mlprof__map_clear(&b->dsite_of);
  mlprof__map_clear(&b->tid_dev);
  b->oom = 0;
  return rc;
}

/* ---- what the leak detector can see -------------------------------------- */

/* The least Poisson mean whose draw is k or more with probability power. */
static double poisson_at_least(unsigned k, double power) {
  double lo = 0, hi = 10.0 * k + 20;
  for (int it = 0; it < 100; it++) {
    double lam = (lo + hi) / 2, term = exp(-lam), below = 0;
    for (unsigned i = 0; i < k; i++) { /* P(X < k) */
      below += term;
      term *= lam / (i + 1);
    }
    if (1 - below >= power)
      hi = lam;
    else
      lo = lam;
  }
  return hi;
}

double mlprof__memory_leak_floor(size_t nsteps, size_t points, double mean) {
  if (nsteps < MLPROF__MEM_LEAK_MIN_STEPS || points < 2) return NAN;
  double span = (double)(nsteps - 1), bytes = MLPROF__MEM_LEAK_MIN_BYTES;
  if (mean <= 0) return bytes / span;
  /* k rises: a Theil-Sen slope above 0 in each half wants two there; the
   * z of k equal rises over n points, without the tie correction that
   * mlprof__mann_kendall_z leaves out, is 1.5 sqrt(n) k / (k + 1). */
  unsigned k = 4;
  double n = (double)(points < MAX_STEPS ? points : MAX_STEPS);
  if (1.5 * sqrt(n) < MLPROF__MEM_LEAK_MIN_Z) return NAN; /* no k will do */
  while (k < 1000000 &&
         (1.5 * sqrt(n) * k / (k + 1.0) < MLPROF__MEM_LEAK_MIN_Z ||
          k * mean < bytes))
    k++;
  double lam = poisson_at_least(k, MLPROF__MEM_LEAK_POWER);
  return fmax(bytes, lam * mean) / span;
}

/* ---- results ------------------------------------------------------------ */

static int by_peak(const void *x, const void *y) {
  const mlprof__mem_site *a = x, *b = y;
  if (a->leak != b->leak) return b->leak - a->leak;
  if (a->at_peak != b->at_peak) return a->at_peak > b->at_peak ? -1 : 1;
  if (a->alloc_bytes != b->alloc_bytes)
    return a->alloc_bytes > b->alloc_bytes ? -1 : 1;
  return (a->proc > b->proc) - (a->proc < b->proc);
}

static void frames_free(mlprof__memory *m) {
  for (size_t i = 0; i < m->nframes; i++) free(m->frames[i]);
  free(m->frames);
  free(m->frame_lens);
}

static void proc_free(mlprof__mem_proc *p) {
  free(p->groups);
  free(p->step_sites);
  free(p->step_peak);
  free(p->step_t);
  free(p->live_t);
  free(p->live_v);
}

static void free_builder(mlprof__memory_builder *b) {
  mlprof__strindex_free(&b->zix);
  mlprof__strindex_free(&b->fix);
  for (size_t i = 0; i < b->zcount; i++) free(b->znames[i]);
  free(b->znames);
  free(b->zlens);
  free(b->recs);
  free(b->keys);
  free(b->sums);
  marks_clear(b);
  free(b->marks);
  stacks_clear(b);
  free(b->funcs);
  free(b->frames);
  free(b->nodes);
  mlprof__map_clear(&b->zone_of);
  mlprof__map_clear(&b->site_of);
  mlprof__map_clear(&b->dsite_of);
  mlprof__map_clear(&b->tid_dev);
  free(b);
}

int mlprof__memory_finish(mlprof__memory_builder *b) {
  mlprof__memory *m = b->m;
  /* The zones take their names from the builder's table. */
  for (size_t z = 0; z < m->nzones; z++) {
    m->zones[z].name = b->znames[z];
    m->zones[z].name_len = b->zlens[z];
    b->znames[z] = NULL;
  }
  b->zcount = 0;
  int rc = 0;
  if (m->nsites) {
    mlprof__sort(m->sites, m->nsites, sizeof *m->sites, by_peak);
    /* The per-step figures name sites by their index before the sort. */
    size_t *now = malloc(m->nsites * sizeof *now);
    if (now) {
      for (size_t i = 0; i < m->nsites; i++) now[m->sites[i].id] = i;
      for (size_t i = 0; i < m->nsites; i++) m->sites[i].id = i;
      for (size_t i = 0; i < m->nprocs; i++)
        for (size_t k = 0; k < m->procs[i].nstep_sites; k++)
          m->procs[i].step_sites[k].site = now[m->procs[i].step_sites[k].site];
      free(now);
    } else {
      rc = MLPROF_ENOMEM;
    }
  }
  free_builder(b);
  if (rc) mlprof__memory_free(m);
  return rc;
}

void mlprof__memory_abort(mlprof__memory_builder *b) {
  if (!b) return;
  mlprof__memory *m = b->m;
  free_builder(b);
  for (size_t i = 0; i < m->nprocs; i++) proc_free(&m->procs[i]);
  free(m->procs);
  free(m->zones); /* their names are still the builder's: freed above */
  for (size_t i = 0; i < m->nsites; i++) {
    free(m->sites[i].python);
    free(m->sites[i].native);
    free(m->sites[i].path);
  }
  free(m->sites);
  frames_free(m);
  memset(m, 0, sizeof *m);
}

void mlprof__memory_free(mlprof__memory *m) {
  for (size_t i = 0; i < m->nprocs; i++) proc_free(&m->procs[i]);
  for (size_t i = 0; i < m->nzones; i++) free(m->zones[i].name);
  for (size_t i = 0; i < m->nsites; i++) {
    free(m->sites[i].python);
    free(m->sites[i].native);
    free(m->sites[i].path);
  }
  free(m->procs);
  free(m->zones);
  free(m->sites);
  frames_free(m);
  memset(m, 0, sizeof *m);
}
