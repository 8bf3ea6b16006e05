/* Hot functions from the profiles' stack samples (hot.h).
 *
 * A profile's definitions (functions, frames, stacks) are kept by their ids
 * until the profile ends, since a sample may name a stack defined after it;
 * then each sample's stack is merged into the job's tree (a node per
 * distinct (parent, frame)) and counted under its zone. Zones come from the
 * spans: a span of thread T from b to e labels T's samples in [b, e) whose
 * label is shallower, so each sample ends under its innermost zone. The
 * samples are read before the spans that cover them (the writer writes
 * STACKS before EVENTS in each flush, and a span is written when it ends),
 * so the samples held so far are all the span needs. */
#include "hot.h"

#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "../format/wire.h"
#include "findings.h"

_Static_assert(MLPROF__HOT_PARTS == MLPROF__NPARTS, "one part per part");

typedef struct {
  uint64_t t;
  uint32_t tid, stack, flags, zone_name, zone_depth;
  uint32_t top_name, part_depth; /* MLPROF__NONE: none */
  uint8_t part;
} sample;

/* A step mark (end 0) or a step end of a thread; seq keeps file order. */
typedef struct {
  uint64_t t;
  uint32_t tid, seq;
  int end;
} mark;

typedef struct {
  uint32_t a, b; /* frames: func id, line; nodes: parent, frame */
  int native;
} pdef;

typedef struct {
  uint32_t frame; /* a job frame */
  uint64_t ns;
} held_frame;

struct mlprof__hot_builder {
  mlprof__hot *out;
  size_t funcs_cap, frames_cap, nodes_cap, stacks_cap;
  mlprof__strindex func_ix;
  char **func_keys;
  size_t *func_key_lens, func_keys_n, func_keys_cap;
  mlprof__map frame_ix, node_ix, stack_ix; /* the job's, by content */
  mlprof__strindex zone_ix;
  char **zone_names;
  size_t *zone_lens, nzones, zones_cap;
  uint64_t *zone_samples, *zone_cpu, *zone_wall_ns, *zone_cpu_ns;
  /* this profile's */
  mlprof__map pfunc;    /* func id -> job func */
  mlprof__map pframe;   /* frame id -> index in pframes */
  mlprof__map pnode;    /* stack id -> index in pnodes */
  mlprof__map pzone;    /* zone name id -> job zone */
  mlprof__map memo;     /* stack id -> job node + 1 (0 unused) */
  mlprof__map pparts;   /* zone name id -> its part at top | nested << 8 */
  mlprof__map label_ix; /* a sample's label (pack_label) -> index */
  pdef *pframes, *pnodes;
  size_t npframes, pframes_cap, npnodes, pnodes_cap;
  sample *samples;
  size_t nsamples, samples_cap;
  mark *marks;
  size_t nmarks, marks_cap;
  uint32_t *mark_step; /* per sorted mark: its step's number, or NONE */
  size_t mark_step_cap, step_self_cap;
  mlprof__map step_self_ix; /* step << 32 | func -> index in step_self */
  double hz;
  mlprof__hot_sink sink;
  void *sink_ctx;
  /* this profile's process and thread names (tid -> index in tnames) */
  uint64_t pid;
  mlprof__map tname_ix;
  char **tnames;
  size_t ntnames, tnames_cap;
  size_t gil_cap;
  held_frame *held; /* frames the GIL's holders ran, this profile's */
  size_t nheld, held_cap;
  mlprof__map held_ix; /* job frame -> index in held */
  int err;
};

static int fail(mlprof__hot_builder *b) {
  b->err = MLPROF_ENOMEM;
  return MLPROF_ENOMEM;
}

/* ---- the job's tables --------------------------------------------------- */

static uint32_t job_func(mlprof__hot_builder *b, const char *file,
                         const char *function, uint32_t first) {
  char key[8192];
  int n = snprintf(key, sizeof key, "%s%c%s%c%u", file, 0, function, 0,
                   (unsigned)first);
  if (n < 0 || (size_t)n >= sizeof key) n = (int)sizeof key - 1;
  size_t before = b->func_keys_n;
  uint32_t i = mlprof__strindex_intern(&b->func_ix, &b->func_keys,
                                       &b->func_key_lens, &b->func_keys_n,
                                       &b->func_keys_cap, key, (size_t)n);
  if (i == MLPROF__NONE) return MLPROF__NONE;
  if (b->func_keys_n > before) {
    mlprof__hot *h = b->out;
    if (mlprof__grow(&h->funcs, &b->funcs_cap, h->nfuncs + 1, sizeof *h->funcs))
      return MLPROF__NONE;
    mlprof__hot_func *f = &h->funcs[h->nfuncs];
    f->file = mlprof__dup(file, strlen(file));
    f->function = mlprof__dup(function, strlen(function));
    f->first_line = first;
    if (!f->file || !f->function) {
      free(f->file);
      free(f->function);
      return MLPROF__NONE;
    }
    h->nfuncs++;
  }
  return i;
}

static uint32_t job_frame(mlprof__hot_builder *b, uint32_t func,
                          uint32_t line) {
  uint64_t key = ((uint64_t)func << 32) | line;
  uint32_t i = mlprof__map_get(&b->frame_ix, key);
  if (i != MLPROF__NONE) return i;
  mlprof__hot *h = b->out;
  if (mlprof__grow(&h->frames, &b->frames_cap, h->nframes + 1,
                   sizeof *h->frames) ||
      mlprof__map_put(&b->frame_ix, key, (uint32_t)h->nframes))
    return MLPROF__NONE;
  h->frames[h->nframes] = (mlprof__hot_frame){func, line};
  return (uint32_t)h->nframes++;
}

static uint32_t job_node(mlprof__hot_builder *b, uint32_t parent,
                         uint32_t frame) {
  uint64_t key = ((uint64_t)parent << 32) | frame;
  uint32_t i = mlprof__map_get(&b->node_ix, key);
  if (i != MLPROF__NONE) return i;
  mlprof__hot *h = b->out;
  if (mlprof__grow(&h->nodes, &b->nodes_cap, h->nnodes + 1, sizeof *h->nodes) ||
      mlprof__map_put(&b->node_ix, key, (uint32_t)h->nnodes))
    return MLPROF__NONE;
  h->nodes[h->nnodes] = (mlprof__hot_node){parent, frame};
  return (uint32_t)h->nnodes++;
}

static uint32_t job_zone(mlprof__hot_builder *b, const char *name, size_t n) {
  size_t before = b->nzones;
  uint32_t i =
      mlprof__strindex_intern(&b->zone_ix, &b->zone_names, &b->zone_lens,
                              &b->nzones, &b->zones_cap, name, n);
  if (i == MLPROF__NONE || b->nzones == before) return i;
  uint64_t **arrays[] = {&b->zone_samples, &b->zone_cpu, &b->zone_wall_ns,
                         &b->zone_cpu_ns};
  for (size_t k = 0; k < 4; k++) {
    uint64_t *a = realloc(*arrays[k], b->nzones * sizeof *a);
    if (!a) return MLPROF__NONE;
    *arrays[k] = a;
    a[i] = 0;
  }
  return i;
}

/* ---- reading a profile -------------------------------------------------- */

static int on_rate(void *ud, uint32_t hz) {
  ((mlprof__hot_builder *)ud)->hz = hz;
  return 0;
}

static int on_name(void *ud, const mlprof__name *n) {
  mlprof__hot_builder *b = ud;
  if (n->kind != MLPROF__NAME_ZONE) return 0;
  uint32_t z = job_zone(b, n->name, n->name_len);
  uint32_t parts =
      (uint32_t)mlprof__zone_part(n->category, n->name, n->name_len, 0) |
      (uint32_t)mlprof__zone_part(n->category, n->name, n->name_len, 1) << 8;
  if (z == MLPROF__NONE || mlprof__map_put(&b->pzone, n->id, z) ||
      mlprof__map_put(&b->pparts, n->id, parts))
    return fail(b);
  return 0;
}

static int on_func(void *ud, const mlprof__stack_func *f) {
  mlprof__hot_builder *b = ud;
  uint32_t i = job_func(b, f->file, f->function, f->first_line);
  if (i == MLPROF__NONE || mlprof__map_put(&b->pfunc, f->id, i)) return fail(b);
  return 0;
}

static int put_pdef(mlprof__hot_builder *b, mlprof__map *ix, pdef **arr,
                    size_t *n, size_t *cap, uint32_t id, pdef d) {
  if (mlprof__map_get(ix, id) != MLPROF__NONE) return 0; /* first wins */
  if (mlprof__grow(arr, cap, *n + 1, sizeof **arr) ||
      mlprof__map_put(ix, id, (uint32_t)*n))
    return fail(b);
  (*arr)[(*n)++] = d;
  return 0;
}

static int on_frame(void *ud, const mlprof__stack_frame *f) {
  mlprof__hot_builder *b = ud;
  pdef d = {f->func, f->line, f->native};
  if (f->native) {
    /* A native frame is a function of its own: symbol in module. */
    char sym[512];
    const char *slash = strrchr(f->module, '/');
    uint32_t i = job_func(b, slash ? slash + 1 : f->module,
                          mlprof__native_name(f, sym, sizeof sym), 0);
    if (i == MLPROF__NONE) return fail(b);
    d.a = i;
  }
  return put_pdef(b, &b->pframe, &b->pframes, &b->npframes, &b->pframes_cap,
                  f->id, d);
}

static int on_node(void *ud, uint32_t id, uint32_t parent, uint32_t frame) {
  mlprof__hot_builder *b = ud;
  return put_pdef(b, &b->pnode, &b->pnodes, &b->npnodes, &b->pnodes_cap, id,
                  (pdef){parent, frame, 0});
}

static int on_sample(void *ud, const mlprof__stack_sample *s) {
  mlprof__hot_builder *b = ud;
  if (mlprof__grow(&b->samples, &b->samples_cap, b->nsamples + 1,
                   sizeof *b->samples))
    return fail(b);
  b->samples[b->nsamples++] = (sample){.t = s->t,
                                       .tid = s->tid,
                                       .stack = s->stack,
                                       .flags = s->flags,
                                       .zone_name = MLPROF__NONE,
                                       .top_name = MLPROF__NONE,
                                       .part_depth = MLPROF__NONE,
                                       .part = MLPROF__PART_OTHER};
  b->out->cpu_ns += s->cpu_ns;
  return 0;
}

/* The first sample at or after t. */
typedef struct {
  const mlprof__hot_builder *b;
  uint64_t t;
} sample_key;

static int sample_before(const void *ctx, size_t i) {
  const sample_key *k = ctx;
  return k->b->samples[i].t < k->t;
}

static size_t lower(const mlprof__hot_builder *b, uint64_t t) {
  return mlprof__lower_bound(0, b->nsamples, &(sample_key){b, t},
                             sample_before);
}

/* The span's labels on its thread's samples: its zone where it is the
 * innermost so far, its part where it is the innermost span with a part
 * (the innermost part wins, as in the step breakdown), and itself as the
 * outermost zone at depth 0. */
static void label(mlprof__hot_builder *b, uint32_t tid, uint32_t name,
                  uint32_t depth, uint64_t begin, uint64_t end) {
  uint32_t parts = mlprof__map_get(&b->pparts, name);
  int part = parts == MLPROF__NONE ? MLPROF__PART_OTHER
             : depth               ? (int)(parts >> 8)
                                   : (int)(parts & 0xff);
  for (size_t i = lower(b, begin); i < b->nsamples && b->samples[i].t < end;
       i++) {
    sample *s = &b->samples[i];
    if (s->tid != tid) continue;
    if (s->zone_name == MLPROF__NONE || s->zone_depth <= depth) {
      s->zone_name = name;
      s->zone_depth = depth;
    }
    if (part != MLPROF__PART_OTHER &&
        (s->part_depth == MLPROF__NONE || s->part_depth <= depth)) {
      s->part = (uint8_t)part;
      s->part_depth = depth;
    }
    if (depth == 0) s->top_name = name;
  }
}

static int on_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin, uint64_t end) {
  label(ud, tid, name, depth, begin, end);
  return 0;
}

static int on_open(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin) {
  label(ud, tid, name, depth, begin, UINT64_MAX);
  return 0;
}

/* Marks are kept only once the profile has said it samples stacks (its
 * rate comes first in every flush that has samples, before the flush's
 * events): a profile of marks alone keeps none, as they place no sample. A
 * step begun before the sampler's first flush places none of its samples. */
static int on_mark(mlprof__hot_builder *b, uint32_t tid, uint64_t t, int end) {
  if (!b->hz) return 0;
  if (mlprof__grow(&b->marks, &b->marks_cap, b->nmarks + 1, sizeof *b->marks))
    return fail(b);
  b->marks[b->nmarks] = (mark){t, tid, (uint32_t)b->nmarks, end};
  b->nmarks++;
  return 0;
}

static int on_step(void *ud, uint32_t tid, uint64_t t) {
  return on_mark(ud, tid, t, 0);
}

static int on_step_end(void *ud, uint32_t tid, uint64_t t) {
  return on_mark(ud, tid, t, 1);
}

static int mark_order(const void *a, const void *b) {
  const mark *x = a, *y = b;
  if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The number of the step of tid under way at t (mlprof__hot.marked_steps),
 * or MLPROF__NONE: the thread's last mark or step end at or before t was a
 * mark and something followed it (a step is from a mark to the next mark
 * or step end: the time after the last one is none). marks sorted by
 * mark_order, mark_step filled. */
typedef struct {
  const mark *marks;
  uint32_t tid;
  uint64_t t;
} mark_key;

static int mark_at_or_before(const void *ctx, size_t i) {
  const mark_key *k = ctx;
  const mark *m = &k->marks[i];
  return m->tid < k->tid || (m->tid == k->tid && m->t <= k->t);
}

static uint32_t marked_step(const mlprof__hot_builder *b, uint32_t tid,
                            uint64_t t) {
  mark_key k = {b->marks, tid, t};
  size_t lo = mlprof__lower_bound(0, b->nmarks, &k, mark_at_or_before);
  return lo > 0 && b->marks[lo - 1].tid == tid ? b->mark_step[lo - 1]
                                               : MLPROF__NONE;
}

static int on_header(void *ud, const mlprof__header *h) {
  ((mlprof__hot_builder *)ud)->pid = h->pid;
  return 0;
}

static int on_thread(void *ud, uint32_t tid, const char *name, size_t len) {
  mlprof__hot_builder *b = ud;
  uint32_t i = mlprof__map_get(&b->tname_ix, tid);
  char *copy = mlprof__dup(name, len);
  if (!copy) return fail(b);
  if (i != MLPROF__NONE) {
    free(b->tnames[i]);
    b->tnames[i] = copy;
    return 0;
  }
  if (mlprof__grow(&b->tnames, &b->tnames_cap, b->ntnames + 1,
                   sizeof *b->tnames) ||
      mlprof__map_put(&b->tname_ix, tid, (uint32_t)b->ntnames)) {
    free(copy);
    return fail(b);
  }
  b->tnames[b->ntnames++] = copy;
  return 0;
}

void mlprof__hot_profile_begin(mlprof__hot_builder *b, mlprof__visitor *v) {
  *v = (mlprof__visitor){.ud = b,
                         .header = on_header,
                         .thread = on_thread,
                         .stack_rate = on_rate,
                         .name = on_name,
                         .span = on_span,
                         .open = on_open,
                         .stack_func = on_func,
                         .stack_frame = on_frame,
                         .stack_node = on_node,
                         .stack_sample = on_sample,
                         .step = on_step,
                         .step_end = on_step_end};
  b->hz = 0;
  b->pid = 0;
}

const size_t *mlprof__hot_samples(const mlprof__hot_builder *b) {
  return &b->nsamples;
}

/* The job's node of this profile's stack id (MLPROF__NONE when it cannot be
 * resolved). Walks the parents first, then makes the nodes root down. */
static uint32_t resolve(mlprof__hot_builder *b, uint32_t id) {
  uint32_t chain[1100];
  size_t n = 0;
  uint32_t node = MLPROF__NONE;
  while (id) {
    uint32_t m = mlprof__map_get(&b->memo, id);
    if (m != MLPROF__NONE) {
      node = m;
      break;
    }
    uint32_t i = mlprof__map_get(&b->pnode, id);
    if (i == MLPROF__NONE || n == sizeof chain / sizeof chain[0])
      return MLPROF__NONE;
    chain[n++] = id;
    id = b->pnodes[i].a; /* parents are smaller: this ends */
  }
  while (n-- > 0) {
    const pdef *d = &b->pnodes[mlprof__map_get(&b->pnode, chain[n])];
    uint32_t fi = mlprof__map_get(&b->pframe, d->b), frame;
    if (fi == MLPROF__NONE) {
      frame = job_frame(b, job_func(b, "?", "<unknown>", 0), 0);
    } else {
      const pdef *f = &b->pframes[fi];
      uint32_t func = f->native   ? f->a
                      : f->a == 0 ? job_func(b, "", "<truncated>", 0)
                                  : mlprof__map_get(&b->pfunc, f->a);
      if (func == MLPROF__NONE) func = job_func(b, "?", "<unknown>", 0);
      frame = job_frame(b, func, f->native ? 0 : f->b);
    }
    if (frame == MLPROF__NONE) return MLPROF__NONE;
    node = job_node(b, node, frame);
    if (node == MLPROF__NONE || mlprof__map_put(&b->memo, chain[n], node))
      return MLPROF__NONE;
  }
  return node;
}

/* A sample's label in 64 bits: zone and top (27 bits each; a job with
 * more zones than that has them labelled "no zone"), part, marked. */
static uint64_t pack_label(uint32_t zone, uint32_t top, int part, int marked) {
  if (zone >= 1u << 27) zone = 0;
  if (top >= 1u << 27) top = 0;
  return (uint64_t)zone << 37 | (uint64_t)top << 10 | (uint64_t)part << 1 |
         (uint64_t)(marked != 0);
}

static int count(mlprof__hot_builder *b, uint32_t node, uint32_t zone,
                 uint32_t top, int part, int marked, int on_cpu, uint64_t ns) {
  mlprof__hot *h = b->out;
  uint64_t lkey = pack_label(zone, top, part, marked);
  uint32_t label = mlprof__map_get(&b->label_ix, lkey);
  if (label == MLPROF__NONE) {
    label = (uint32_t)b->label_ix.count;
    if (mlprof__map_put(&b->label_ix, lkey, label)) return fail(b);
  }
  uint64_t key = ((uint64_t)node << 32) | label;
  uint32_t i = mlprof__map_get(&b->stack_ix, key);
  if (i == MLPROF__NONE) {
    if (mlprof__grow(&h->stacks, &b->stacks_cap, h->nstacks + 1,
                     sizeof *h->stacks) ||
        mlprof__map_put(&b->stack_ix, key, (uint32_t)h->nstacks))
      return fail(b);
    i = (uint32_t)h->nstacks++;
    h->stacks[i] = (mlprof__hot_stack){.node = node,
                                       .zone = zone,
                                       .top = top,
                                       .part = (uint8_t)part,
                                       .marked = (uint8_t)(marked != 0)};
  }
  uint64_t cns = on_cpu ? ns : 0;
  h->stacks[i].samples++;
  h->stacks[i].on_cpu += on_cpu;
  h->stacks[i].wall_ns += ns;
  h->stacks[i].cpu_ns += cns;
  b->zone_samples[zone]++;
  b->zone_cpu[zone] += on_cpu;
  b->zone_wall_ns[zone] += ns;
  b->zone_cpu_ns[zone] += cns;
  h->samples++;
  h->on_cpu += on_cpu;
  h->wall_ns += ns;
  h->on_cpu_ns += cns;
  return 0;
}

/* Adds ns of func's self time to marked step step. */
static int step_self(mlprof__hot_builder *b, uint32_t step, uint32_t func,
                     uint64_t ns) {
  mlprof__hot *h = b->out;
  uint64_t key = (uint64_t)step << 32 | func;
  uint32_t i = mlprof__map_get(&b->step_self_ix, key);
  if (i == MLPROF__NONE) {
    if (mlprof__grow(&h->step_self, &b->step_self_cap, h->nstep_self + 1,
                     sizeof *h->step_self) ||
        mlprof__map_put(&b->step_self_ix, key, (uint32_t)h->nstep_self))
      return fail(b);
    i = (uint32_t)h->nstep_self++;
    h->step_self[i] = (mlprof__hot_step_self){step, func, 0};
  }
  h->step_self[i].self_ns += ns;
  return 0;
}

/* Longest time a sample stands for: a longer gap is the recording switched
 * off or the thread out of Python, not what its next sample shows. */
#define MAX_WEIGHT_NS 1000000000u

static int by_wait(const void *a, const void *b) {
  const mlprof__hot_gil_thread *x = a, *y = b;
  return x->wait_ns < y->wait_ns   ? 1
         : x->wait_ns > y->wait_ns ? -1
         : x->tid > y->tid         ? 1
                                   : -1;
}

/* Adds a sample of thread tid standing for ns to this profile's GIL
 * figures in g (made on the first), node its stack (MLPROF__NONE: none). */
static int gil_count(mlprof__hot_builder *b, mlprof__hot_gil *g,
                     mlprof__map *ix, size_t *cap, const sample *s,
                     uint32_t node, uint64_t ns) {
  uint32_t i = mlprof__map_get(ix, s->tid);
  if (i == MLPROF__NONE) {
    if (mlprof__grow(&g->threads, cap, g->nthreads + 1, sizeof *g->threads) ||
        mlprof__map_put(ix, s->tid, (uint32_t)g->nthreads))
      return fail(b);
    i = (uint32_t)g->nthreads++;
    uint32_t n = mlprof__map_get(&b->tname_ix, s->tid);
    const char *name = n == MLPROF__NONE ? "" : b->tnames[n];
    g->threads[i] = (mlprof__hot_gil_thread){
        s->tid, mlprof__dup(name, strlen(name)), 0, 0, 0};
    if (!g->threads[i].name) return fail(b);
  }
  mlprof__hot_gil_thread *t = &g->threads[i];
  t->wall_ns += ns;
  if (s->flags & MLPROF__SAMPLE_GIL_WAIT) t->wait_ns += ns;
  if (!(s->flags & MLPROF__SAMPLE_HAS_GIL)) return 0;
  t->held_ns += ns;
  g->held_ns += ns;
  if (node == MLPROF__NONE) return 0;
  uint32_t frame = b->out->nodes[node].frame;
  uint32_t k = mlprof__map_get(&b->held_ix, frame);
  if (k == MLPROF__NONE) {
    if (mlprof__grow(&b->held, &b->held_cap, b->nheld + 1, sizeof *b->held) ||
        mlprof__map_put(&b->held_ix, frame, (uint32_t)b->nheld))
      return fail(b);
    k = (uint32_t)b->nheld++;
    b->held[k] = (held_frame){frame, 0};
  }
  b->held[k].ns += ns;
  return 0;
}

/* g's top: the frames that held the GIL longest (b->held), then forgets
 * them. */
static void gil_top(mlprof__hot_builder *b, mlprof__hot_gil *g) {
  const mlprof__hot *h = b->out;
  for (size_t i = 0; i < b->nheld; i++) {
    size_t k = g->ntop;
    while (k > 0 && g->top[k - 1].ns < b->held[i].ns) k--;
    if (k >= MLPROF__HOT_GIL_TOP) continue;
    size_t end = g->ntop < MLPROF__HOT_GIL_TOP ? g->ntop : g->ntop - 1;
    memmove(&g->top[k + 1], &g->top[k], (end - k) * sizeof g->top[0]);
    const mlprof__hot_frame *fr = &h->frames[b->held[i].frame];
    g->top[k].func = fr->func;
    g->top[k].line = fr->line;
    g->top[k].ns = b->held[i].ns;
    if (g->ntop < MLPROF__HOT_GIL_TOP) g->ntop++;
  }
  b->nheld = 0;
  mlprof__map_clear(&b->held_ix);
}

int mlprof__hot_profile_end(mlprof__hot_builder *b) {
  int rc = b->err;
  double interval = b->hz > 0 ? 1e9 / b->hz : 1e7;
  mlprof__map last; /* tid -> index of its previous sample + 1 */
  memset(&last, 0, sizeof last);
  if (b->nmarks) {
    mlprof__sort(b->marks, b->nmarks, sizeof *b->marks, mark_order);
    if (mlprof__grow(&b->mark_step, &b->mark_step_cap, b->nmarks,
                     sizeof *b->mark_step))
      rc = fail(b);
    for (size_t i = 0; i < b->nmarks && !rc; i++) {
      const mark *m = &b->marks[i];
      int closed = !m->end && i + 1 < b->nmarks && m[1].tid == m->tid &&
                   b->out->marked_steps < MLPROF__NONE - 1;
      b->mark_step[i] =
          closed ? (uint32_t)b->out->marked_steps++ : MLPROF__NONE;
    }
  }
  mlprof__hot_gil g = {.pid = b->pid};
  mlprof__map gil_ix;
  memset(&gil_ix, 0, sizeof gil_ix);
  size_t gil_threads_cap = 0;
  for (size_t i = 0; i < b->nsamples && !rc; i++) {
    const sample *s = &b->samples[i];
    uint32_t prev = mlprof__map_get(&last, s->tid);
    uint64_t ns = (uint64_t)interval;
    if (prev != MLPROF__NONE && s->t > b->samples[prev].t)
      ns = s->t - b->samples[prev].t;
    if (ns > MAX_WEIGHT_NS) ns = (uint64_t)interval;
    if (mlprof__map_put(&last, s->tid, (uint32_t)i)) {
      rc = fail(b);
      break;
    }
    uint32_t node = MLPROF__NONE;
    if (s->stack && (node = resolve(b, s->stack)) == MLPROF__NONE) {
      b->out->unresolved++;
      continue;
    }
    uint32_t zone = s->zone_name == MLPROF__NONE
                        ? 0
                        : mlprof__map_get(&b->pzone, s->zone_name);
    if (zone == MLPROF__NONE) zone = 0;
    uint32_t top = s->top_name == MLPROF__NONE
                       ? 0
                       : mlprof__map_get(&b->pzone, s->top_name);
    if (top == MLPROF__NONE) top = 0;
    uint32_t step = b->nmarks ? marked_step(b, s->tid, s->t) : MLPROF__NONE;
    rc = count(b, node, zone, top, s->part, step != MLPROF__NONE,
               (s->flags & MLPROF__SAMPLE_ON_CPU) != 0, ns);
    if (!rc && step != MLPROF__NONE && node != MLPROF__NONE)
      rc = step_self(b, step, b->out->frames[b->out->nodes[node].frame].func,
                     ns);
    if (!rc && b->sink)
      rc = b->sink(b->sink_ctx, s->tid, s->t, node, zone, s->flags, ns);
    if (!rc && (s->flags & MLPROF__SAMPLE_GIL_KNOWN) && s->stack)
      rc = gil_count(b, &g, &gil_ix, &gil_threads_cap, s, node, ns);
  }
  mlprof__map_clear(&last);
  mlprof__map_clear(&gil_ix);
  if (!rc && g.nthreads) gil_top(b, &g);
  b->nheld = 0;
  mlprof__map_clear(&b->held_ix);
  if (!rc && g.nthreads) {
    qsort(g.threads, g.nthreads, sizeof *g.threads, by_wait);
    mlprof__hot *h = b->out;
    if (mlprof__grow(&h->gil, &b->gil_cap, h->ngil + 1, sizeof *h->gil))
      rc = fail(b);
    else
      h->gil[h->ngil++] = g, g.nthreads = 0;
  }
  for (size_t i = 0; i < g.nthreads; i++) free(g.threads[i].name);
  if (g.nthreads) free(g.threads);
  for (size_t i = 0; i < b->ntnames; i++) free(b->tnames[i]);
  b->ntnames = 0;
  mlprof__map_clear(&b->tname_ix);
  if (b->hz > 0 && !b->out->interval_ns) b->out->interval_ns = 1e9 / b->hz;
  mlprof__map_clear(&b->pfunc);
  mlprof__map_clear(&b->pframe);
  mlprof__map_clear(&b->pnode);
  mlprof__map_clear(&b->pzone);
  mlprof__map_clear(&b->memo);
  mlprof__map_clear(&b->pparts);
  b->npframes = b->npnodes = b->nsamples = b->nmarks = 0;
  return rc ? rc : b->err;
}

void mlprof__hot_set_sink(mlprof__hot_builder *b, mlprof__hot_sink sink,
                          void *ctx) {
  b->sink = sink;
  b->sink_ctx = ctx;
}

mlprof__hot_builder *mlprof__hot_begin(mlprof__hot *out) {
  memset(out, 0, sizeof *out);
  mlprof__hot_builder *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->out = out;
  /* Zone 0 is "no zone". */
  if (job_zone(b, "", 0) != 0) {
    free(b);
    return NULL;
  }
  return b;
}

/* ---- rows ---------------------------------------------------------------- */

typedef struct {
  mlprof__map ix; /* func -> row */
  mlprof__hot_row *rows;
  size_t n, cap;
  mlprof__map lines; /* (func, line) -> self samples on a CPU */
} rowset;

static mlprof__hot_row *row_of(rowset *r, uint32_t func) {
  uint32_t i = mlprof__map_get(&r->ix, func);
  if (i != MLPROF__NONE) return &r->rows[i];
  if (mlprof__grow(&r->rows, &r->cap, r->n + 1, sizeof *r->rows) ||
      mlprof__map_put(&r->ix, func, (uint32_t)r->n))
    return NULL;
  r->rows[r->n] = (mlprof__hot_row){.func = func, .line = MLPROF__NONE};
  return &r->rows[r->n++];
}

/* Adds a stack's samples to r: self to its innermost function, total once
 * to each function in it. seen/epoch mark the functions met in this stack. */
static int add_stack(const mlprof__hot *h, rowset *r,
                     const mlprof__hot_stack *s, uint32_t *seen,
                     uint32_t epoch) {
  int inner = 1;
  for (uint32_t n = s->node; n != MLPROF__NONE; n = h->nodes[n].parent) {
    const mlprof__hot_frame *f = &h->frames[h->nodes[n].frame];
    mlprof__hot_row *row = row_of(r, f->func);
    if (!row) return MLPROF_ENOMEM;
    if (inner) {
      row->self += s->wall_ns;
      row->self_cpu += s->cpu_ns;
      uint64_t key = ((uint64_t)f->func << 32) | f->line;
      uint32_t c = mlprof__map_get(&r->lines, key);
      uint64_t v = (c == MLPROF__NONE ? 0 : c) + s->on_cpu + s->samples;
      if (v >= MLPROF__NONE) v = MLPROF__NONE - 1;
      if (mlprof__map_put(&r->lines, key, (uint32_t)v)) return MLPROF_ENOMEM;
      /* The line most of its self samples were at (on a CPU counting
       * twice). */
      if (v > row->line_weight) {
        row->line_weight = v;
        row->line = f->line;
      }
      inner = 0;
    }
    if (seen[f->func] != epoch) {
      seen[f->func] = epoch;
      row->total += s->wall_ns;
      row->total_cpu += s->cpu_ns;
    }
  }
  return 0;
}

static int by_self(const void *a, const void *b) {
  const mlprof__hot_row *x = a, *y = b;
  if (x->self_cpu != y->self_cpu) return x->self_cpu > y->self_cpu ? -1 : 1;
  if (x->total_cpu != y->total_cpu) return x->total_cpu > y->total_cpu ? -1 : 1;
  if (x->self != y->self) return x->self > y->self ? -1 : 1;
  if (x->total != y->total) return x->total > y->total ? -1 : 1;
  return x->func < y->func ? -1 : x->func > y->func;
}

/* Sorts r's rows and hands them over. */
static void rows_done(rowset *r, mlprof__hot_row **out, size_t *n) {
  mlprof__sort(r->rows, r->n, sizeof *r->rows, by_self);
  *out = r->rows;
  *n = r->n;
  mlprof__map_clear(&r->ix);
  mlprof__map_clear(&r->lines);
}

static int zone_order(const void *a, const void *b) {
  const mlprof__hot_zone *x = a, *y = b;
  if (x->wall_ns != y->wall_ns) return x->wall_ns > y->wall_ns ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int build_rows(mlprof__hot_builder *b) {
  mlprof__hot *h = b->out;
  uint32_t *seen = calloc(h->nfuncs ? h->nfuncs : 1, sizeof *seen);
  rowset all = {0};
  rowset *zr = calloc(b->nzones, sizeof *zr);
  int rc = !seen || !zr ? MLPROF_ENOMEM : 0;
  for (size_t i = 0; i < h->nstacks && !rc; i++) {
    const mlprof__hot_stack *s = &h->stacks[i];
    rc = add_stack(h, &all, s, seen, (uint32_t)(2 * i + 1));
    if (!rc) rc = add_stack(h, &zr[s->zone], s, seen, (uint32_t)(2 * i + 2));
  }
  if (!rc) {
    rows_done(&all, &h->rows, &h->nrows);
    h->zones = calloc(b->nzones, sizeof *h->zones);
    if (!h->zones) rc = MLPROF_ENOMEM;
  }
  for (size_t z = 0; z < b->nzones && !rc; z++) {
    if (!b->zone_samples[z]) continue;
    mlprof__hot_zone *hz = &h->zones[h->nzones];
    hz->name = mlprof__dup(b->zone_names[z], b->zone_lens[z]);
    if (!hz->name) {
      rc = MLPROF_ENOMEM;
      break;
    }
    hz->samples = b->zone_samples[z];
    hz->on_cpu = b->zone_cpu[z];
    hz->wall_ns = b->zone_wall_ns[z];
    hz->on_cpu_ns = b->zone_cpu_ns[z];
    rows_done(&zr[z], &hz->rows, &hz->nrows);
    h->nzones++;
  }
  if (!rc) mlprof__sort(h->zones, h->nzones, sizeof *h->zones, zone_order);
  if (rc) {
    free(all.rows);
    mlprof__map_clear(&all.ix);
    mlprof__map_clear(&all.lines);
  }
  for (size_t z = 0; zr && z < b->nzones; z++) {
    if (rc || !b->zone_samples[z]) free(zr[z].rows);
    mlprof__map_clear(&zr[z].ix);
    mlprof__map_clear(&zr[z].lines);
  }
  free(zr);
  free(seen);
  return rc;
}

int mlprof__hot_finish(mlprof__hot_builder *b) {
  if (!b) return 0;
  int rc = b->err;
  if (!rc) rc = build_rows(b);
  for (size_t i = 0; i < b->func_keys_n; i++) free(b->func_keys[i]);
  free(b->func_keys);
  free(b->func_key_lens);
  mlprof__strindex_free(&b->func_ix);
  if (rc) {
    for (size_t i = 0; i < b->nzones; i++) free(b->zone_names[i]);
    free(b->zone_names);
  } else {
    b->out->zone_names = b->zone_names;
    b->out->nzone_names = b->nzones;
  }
  free(b->zone_lens);
  mlprof__strindex_free(&b->zone_ix);
  free(b->zone_samples);
  free(b->zone_cpu);
  free(b->zone_wall_ns);
  free(b->zone_cpu_ns);
  mlprof__map_clear(&b->frame_ix);
  mlprof__map_clear(&b->node_ix);
  mlprof__map_clear(&b->stack_ix);
  mlprof__map_clear(&b->pfunc);
  mlprof__map_clear(&b->pframe);
  mlprof__map_clear(&b->pnode);
  mlprof__map_clear(&b->pzone);
  mlprof__map_clear(&b->memo);
  mlprof__map_clear(&b->pparts);
  mlprof__map_clear(&b->label_ix);
  mlprof__map_clear(&b->step_self_ix);
  free(b->marks);
  free(b->mark_step);
  free(b->pframes);
  free(b->pnodes);
  free(b->samples);
  for (size_t i = 0; i < b->ntnames; i++) free(b->tnames[i]);
  free(b->tnames);
  mlprof__map_clear(&b->tname_ix);
  free(b->held);
  mlprof__map_clear(&b->held_ix);
  if (rc) mlprof__hot_free(b->out);
  free(b);
  return rc;
}

void mlprof__hot_free(mlprof__hot *h) {
  for (size_t i = 0; i < h->ngil; i++) {
    for (size_t j = 0; j < h->gil[i].nthreads; j++)
      free(h->gil[i].threads[j].name);
    free(h->gil[i].threads);
  }
  free(h->gil);
  for (size_t i = 0; i < h->nfuncs; i++) {
    free(h->funcs[i].file);
    free(h->funcs[i].function);
  }
  free(h->funcs);
  free(h->frames);
  free(h->nodes);
  free(h->stacks);
  free(h->step_self);
  free(h->rows);
  for (size_t i = 0; i < h->nzones; i++) {
    free(h->zones[i].name);
    free(h->zones[i].rows);
  }
  free(h->zones);
  for (size_t k = 0; k < MLPROF__HOT_PARTS; k++) free(h->parts[k].rows);
  for (size_t i = 0; i < h->nzone_names; i++) free(h->zone_names[i]);
  free(h->zone_names);
  memset(h, 0, sizeof *h);
}

int mlprof__hot_steps(mlprof__hot *h, int marks, const char *zone, size_t len) {
  uint32_t step = MLPROF__NONE;
  for (size_t z = 1; !marks && zone && z < h->nzone_names; z++)
    if (strlen(h->zone_names[z]) == len &&
        memcmp(h->zone_names[z], zone, len) == 0)
      step = (uint32_t)z;
  uint32_t *seen = calloc(h->nfuncs ? h->nfuncs : 1, sizeof *seen);
  rowset r[MLPROF__HOT_PARTS];
  memset(r, 0, sizeof r);
  int rc = seen ? 0 : MLPROF_ENOMEM;
  for (size_t i = 0; i < h->nstacks && !rc; i++) {
    const mlprof__hot_stack *s = &h->stacks[i];
    if (marks ? !s->marked : s->top != step) {
      h->outside_samples += s->samples;
      h->outside_wall_ns += s->wall_ns;
      h->outside_on_cpu_ns += s->cpu_ns;
      continue;
    }
    mlprof__hot_zone *p = &h->parts[s->part];
    p->samples += s->samples;
    p->on_cpu += s->on_cpu;
    p->wall_ns += s->wall_ns;
    p->on_cpu_ns += s->cpu_ns;
    rc = add_stack(h, &r[s->part], s, seen, (uint32_t)i + 1);
  }
  for (size_t k = 0; k < MLPROF__HOT_PARTS; k++) {
    if (!rc) {
      rows_done(&r[k], &h->parts[k].rows, &h->parts[k].nrows);
      continue;
    }
    free(r[k].rows);
    mlprof__map_clear(&r[k].ix);
    mlprof__map_clear(&r[k].lines);
  }
  free(seen);
  if (rc) {
    memset(h->parts, 0, sizeof h->parts);
    h->outside_samples = h->outside_wall_ns = h->outside_on_cpu_ns = 0;
  } else {
    h->steps = 1;
  }
  return rc;
}

int mlprof__hot_own_file(const char *file) {
  return strstr(file, "/mlprof/") != NULL;
}

/* The nearest of path k and its parents that is not mlprof's own frame. */
static uint32_t user_path(const mlprof__hot *h, const uint32_t *fp_parent,
                          const uint32_t *fp_func, uint32_t k) {
  while (k != MLPROF__NONE && mlprof__hot_own_file(h->funcs[fp_func[k]].file))
    k = fp_parent[k];
  return k;
}

uint32_t mlprof__hot_callee(const mlprof__hot *h, const char *name, size_t len,
                            double *share) {
  uint32_t zone = MLPROF__NONE;
  for (size_t z = 1; z < h->nzone_names; z++)
    if (strlen(h->zone_names[z]) == len &&
        memcmp(h->zone_names[z], name, len) == 0)
      zone = (uint32_t)z;
  uint64_t all = 0, samples = 0;
  for (size_t i = 0; zone != MLPROF__NONE && i < h->nstacks; i++)
    if (h->stacks[i].zone == zone) {
      all += h->stacks[i].wall_ns;
      samples += h->stacks[i].samples;
    }
  if (samples < MLPROF__HOT_CALLEE_MIN_SAMPLES || !all) return MLPROF__NONE;
  /* Function paths: a node's path is its parent's path and its function
   * (parents are made before their children, so come first). */
  size_t n = h->nnodes;
  uint32_t *fp = malloc((n ? n : 1) * sizeof *fp);
  uint32_t *fp_parent = malloc((n ? n : 1) * sizeof *fp_parent);
  uint32_t *fp_func = malloc((n ? n : 1) * sizeof *fp_func);
  uint64_t *in = calloc(n ? n : 1, sizeof *in);
  uint8_t *out = calloc(n ? n : 1, 1);
  mlprof__map ix = {0};
  uint32_t nfp = 0, best = MLPROF__NONE;
  int ok = fp && fp_parent && fp_func && in && out;
  for (size_t i = 0; i < n && ok; i++) {
    uint32_t parent = h->nodes[i].parent == MLPROF__NONE
                          ? MLPROF__NONE
                          : fp[h->nodes[i].parent];
    uint32_t func = h->frames[h->nodes[i].frame].func;
    uint64_t key = (uint64_t)(uint32_t)(parent + 1) << 32 | func;
    uint32_t k = mlprof__map_get(&ix, key);
    if (k == MLPROF__NONE) {
      k = nfp++;
      fp_parent[k] = parent;
      fp_func[k] = func;
      ok = !mlprof__map_put(&ix, key, k);
    }
    fp[i] = k;
  }
  /* The zone's time under each path; which paths ran outside it. */
  for (size_t i = 0; i < h->nstacks && ok; i++) {
    const mlprof__hot_stack *s = &h->stacks[i];
    for (uint32_t k = s->node == MLPROF__NONE ? MLPROF__NONE : fp[s->node];
         k != MLPROF__NONE; k = fp_parent[k])
      if (s->zone == zone)
        in[k] += s->wall_ns;
      else
        out[k] = 1;
  }
  /* The paths over the share are nested (two over half share samples):
   * from the root down, the first below every enclosing one. */
  uint64_t min = (uint64_t)((double)all * MLPROF__HOT_CALLEE_SHARE);
  uint64_t enclosing = (uint64_t)((double)all * 0.98);
  size_t depth_best = 0;
  for (uint32_t k = 0; k < nfp && ok; k++) {
    if (in[k] < min || in[k] >= enclosing || out[k] ||
        user_path(h, fp_parent, fp_func, k) != k)
      continue;
    /* Called by an enclosing frame (an outermost one is none). */
    uint32_t up = user_path(h, fp_parent, fp_func, fp_parent[k]);
    if (up == MLPROF__NONE || (in[up] < enclosing && !out[up])) continue;
    size_t depth = 0;
    for (; up != MLPROF__NONE; up = fp_parent[up]) depth++;
    if (best == MLPROF__NONE || depth < depth_best) {
      best = k;
      depth_best = depth;
    }
  }
  uint32_t func = best == MLPROF__NONE || !ok ? MLPROF__NONE : fp_func[best];
  if (func != MLPROF__NONE) *share = (double)in[best] / (double)all;
  free(fp);
  free(fp_parent);
  free(fp_func);
  free(in);
  free(out);
  mlprof__map_clear(&ix);
  return func;
}

void mlprof__hot_frame_name(const mlprof__hot *h, uint32_t frame, char *buf,
                            size_t len) {
  const mlprof__hot_frame *f = &h->frames[frame];
  const mlprof__hot_func *fn = &h->funcs[f->func];
  if (fn->first_line == 0 && f->line == 0)
    snprintf(buf, len, "%s (%s)", fn->function, fn->file);
  else
    snprintf(buf, len, "%s (%s:%u)", fn->function, fn->file, (unsigned)f->line);
}
