/* Chrome trace event export, streamed: events are written as the reader
 * produces them. The only state is per profile: the names, already escaped,
 * and per thread one span held back until we know whether metadata or units
 * follow it (they come after their span in the file). */
#include <math.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../format/subject.h"
#include "../format/wire.h"
#include "export.h"
#include "tracejob.h"

typedef struct {
  size_t off, len; /* the name as a JSON string, quotes included, in arena */
  uint8_t category;
  uint64_t units; /* running total of this unit outside zones */
} name_entry;

typedef struct {
  int is_units; /* 0: metadata a = key, b = value (names); 1: a = unit, b = n */
  uint32_t a;
  uint64_t b;
} span_arg;

typedef struct {
  char ids[48]; /* "pid":P,"tid":T */
  size_t ids_len;
  int pending;
  uint32_t name;
  uint64_t begin, end;
  span_arg *args;
  size_t nargs, acap;
  uint64_t steps;
} thread_state;

typedef struct {
  uint32_t thread, name, depth;
  uint64_t begin;
} open_zone;

/* A collective's slice that flow arrows start from. */
typedef struct {
  char ids[48];
  size_t ids_len;
  uint64_t ts; /* job time */
} anchor;

/* The current profile's stack definitions, by their ids (STACKS chunks):
 * a sample's frames are named as it is read. */
typedef struct {
  char **funcs; /* "function (file" */
  size_t nfuncs, fcap;
  mlprof__map func_ix, frame_ix, node_ix; /* id -> index */
  uint64_t *frames;                       /* func id << 32 | line */
  size_t nframes, frcap;
  uint64_t *nodes; /* parent << 32 | frame */
  size_t nnodes, ncap;
} stack_defs;
typedef struct {
  mlprof__out *o;
  uint64_t events;
  stack_defs stk;
  mlprof__trace_live live; /* the profile's allocation records */
  mlprof__out arena;       /* escaped names of the current profile */
  name_entry *names;
  size_t nnames, ncap;
  mlprof__map ids; /* name id -> index in names */
  thread_state *threads;
  size_t nthreads, tcap;
  mlprof__map tids; /* tid -> index in threads */
  uint32_t last_tid, last_thread;
  open_zone *open;
  size_t nopen, ocap;
  mlprof__kv *meta; /* session metadata of the whole job */
  size_t nmeta, mcap;
  /* The profile being read. */
  mlprof__trace_at at; /* the profile being read */
  /* Samples: where each subject's counters go. */
  const mlprof__job *job;
  mlprof__trace_plan plan;
  mlprof__map named;    /* pseudo-processes already named */
  uint64_t *span_bytes; /* mlprof__chrome_result.span_bytes */
  /* Collectives: group and seq -> the first participant's slice met. */
  mlprof__map colls;
  anchor *anchors;
  size_t nanchors, anchcap;
  uint64_t flows; /* flow ids given */
} chrome;

/* ,"cat":"NAME" for each category; none is written without the field. */
#define CAT_FIELD(name, code, text) \
  [code] = {",\"cat\":\"" text "\"", sizeof(",\"cat\":\"" text "\"") - 1},
static const struct {
  const char *s;
  size_t len;
} category_field[MLPROF_CAT_COUNT] = {MLPROF_CATEGORY_MAP(CAT_FIELD)};
#undef CAT_FIELD

static char *put(char *p, const char *s, size_t n) {
  memcpy(p, s, n);
  return p + n;
}
#define PUT_LIT(p, s) put((p), (s), sizeof(s) - 1)

/* Starts an event: the separator from the previous one and the opening. */
static char *event_start(chrome *c, char *p) {
  if (c->events++)
    p = PUT_LIT(p, ",\n{");
  else
    p = PUT_LIT(p, "{");
  return p;
}

static void put_name(chrome *c, uint32_t name) {
  mlprof__out_write(c->o, c->arena.buf + c->names[name].off,
                    c->names[name].len);
}

static thread_state *thread_of(chrome *c, uint32_t tid) {
  if (c->last_thread != MLPROF__NONE && c->last_tid == tid)
    return &c->threads[c->last_thread];
  uint32_t t = mlprof__map_get(&c->tids, tid);
  if (t == MLPROF__NONE) {
    if (c->nthreads >= MLPROF__NONE - 1 ||
        mlprof__grow(&c->threads, &c->tcap, c->nthreads + 1,
                     sizeof *c->threads) ||
        mlprof__map_put(&c->tids, tid, (uint32_t)c->nthreads))
      return NULL;
    t = (uint32_t)c->nthreads++;
    thread_state *ts = &c->threads[t];
    memset(ts, 0, sizeof *ts);
    char *p = PUT_LIT(ts->ids, "\"pid\":");
    p = mlprof__fmt_u64(p, c->at.pid);
    p = PUT_LIT(p, ",\"tid\":");
    p = mlprof__fmt_u64(p, tid);
    ts->ids_len = (size_t)(p - ts->ids);
  }
  c->last_tid = tid;
  c->last_thread = t;
  return &c->threads[t];
}

/* The index of an announced name id; the reader guarantees announcement, a
 * miss (damage it let through) makes the record be skipped. */
static uint32_t name_of(const chrome *c, uint32_t id) {
  return mlprof__map_get(&c->ids, id);
}

int mlprof__chrome_bucket(uint64_t ns) {
  if (ns < 4) return (int)ns;
  int e = 63 - __builtin_clzll(ns);
  return 4 * (e - 1) + (int)((ns >> (e - 2)) & 3);
}

uint64_t mlprof__chrome_bucket_min(int b) {
  if (b < 4) return (uint64_t)b;
  return (uint64_t)(4 + b % 4) << (b / 4 - 1);
}

/* Writes the span held back on thread t, with its args. */
static void write_span(chrome *c, thread_state *t) {
  const name_entry *n = &c->names[t->name];
  uint8_t cat = n->category < MLPROF_CAT_COUNT ? n->category : 0;
  /* The common event, name included, in one reservation. */
  int small = n->len <= MLPROF__OUT_SLACK - 192;
  char *p = mlprof__out_space(c->o, small ? 192 + n->len : 128);
  p = event_start(c, p);
  p = PUT_LIT(p, "\"ph\":\"X\",");
  p = put(p, t->ids, t->ids_len);
  p = PUT_LIT(p, ",\"ts\":");
  p = mlprof__fmt_us(p, mlprof__job_time(c->at.prof, t->begin));
  p = PUT_LIT(p, ",\"dur\":");
  p = mlprof__fmt_us(p, t->end - t->begin);
  p = PUT_LIT(p, ",\"name\":");
  if (small) {
    p = put(p, c->arena.buf + n->off, n->len);
    if (cat) p = put(p, category_field[cat].s, category_field[cat].len);
    if (!t->nargs) {
      *p++ = '}';
      mlprof__out_end(c->o, p);
      return;
    }
    mlprof__out_end(c->o, p);
  } else {
    mlprof__out_end(c->o, p);
    put_name(c, t->name);
    if (cat)
      mlprof__out_write(c->o, category_field[cat].s, category_field[cat].len);
  }
  if (t->nargs) {
    mlprof__out_lit(c->o, ",\"args\":{");
    for (size_t i = 0; i < t->nargs; i++) {
      if (i) mlprof__out_lit(c->o, ",");
      put_name(c, t->args[i].a);
      mlprof__out_lit(c->o, ":");
      if (t->args[i].is_units)
        mlprof__out_u64(c->o, t->args[i].b);
      else
        put_name(c, (uint32_t)t->args[i].b);
    }
    mlprof__out_lit(c->o, "}");
  }
  mlprof__out_lit(c->o, "}");
}

/* Whether name (an index) is the JSON string lit. */
static int name_is(const chrome *c, uint32_t name, const char *lit) {
  const name_entry *n = &c->names[name];
  return n->len == strlen(lit) && !memcmp(c->arena.buf + n->off, lit, n->len);
}

static void flow_event(chrome *c, const char *ph, const char *ids,
                       size_t ids_len, uint64_t ts) {
  char *p = mlprof__out_space(c->o, 192);
  p = event_start(c, p);
  p = put(p, ph, strlen(ph));
  p = PUT_LIT(p, ",\"cat\":\"collective\",\"name\":\"collective\",\"id\":");
  p = mlprof__fmt_u64(p, c->flows);
  p = PUT_LIT(p, ",");
  p = put(p, ids, ids_len);
  p = PUT_LIT(p, ",\"ts\":");
  p = mlprof__fmt_us(p, ts);
  p = PUT_LIT(p, "}");
  mlprof__out_end(c->o, p);
}

/* A collective's slice (units "seq" and metadata "comm" or "group", as
 * dist.c matches them): the first participant met is the anchor, each other
 * one gets a flow arrow from it. Returns 0 or MLPROF_ENOMEM. */
static int link_collective(chrome *c, const thread_state *t) {
  uint64_t seq = 0, key = MLPROF__HASH_START;
  int has_group = 0;
  for (size_t i = 0; i < t->nargs; i++) {
    const span_arg *a = &t->args[i];
    if (a->is_units && name_is(c, a->a, "\"seq\"")) seq = a->b;
    if (!a->is_units &&
        (name_is(c, a->a, "\"comm\"") || name_is(c, a->a, "\"group\""))) {
      const name_entry *g = &c->names[a->b];
      key = mlprof__hash(c->arena.buf + g->off, g->len, key);
      has_group = 1;
    }
  }
  if (!seq || !has_group) return 0;
  key = mlprof__hash(&seq, sizeof seq, key);
  uint64_t ts = mlprof__job_time(c->at.prof, t->begin);
  uint32_t at = mlprof__map_get(&c->colls, key);
  if (at == MLPROF__NONE) {
    if (c->nanchors >= MLPROF__NONE - 1 ||
        mlprof__grow(&c->anchors, &c->anchcap, c->nanchors + 1,
                     sizeof *c->anchors) ||
        mlprof__map_put(&c->colls, key, (uint32_t)c->nanchors))
      return MLPROF_ENOMEM;
    anchor *a = &c->anchors[c->nanchors++];
    memcpy(a->ids, t->ids, t->ids_len);
    a->ids_len = t->ids_len;
    a->ts = ts;
    return 0;
  }
  const anchor *a = &c->anchors[at];
  c->flows++;
  flow_event(c, "\"ph\":\"s\"", a->ids, a->ids_len, a->ts);
  flow_event(c, "\"ph\":\"f\",\"bp\":\"e\"", t->ids, t->ids_len, ts);
  return 0;
}

/* Writes the span held back on t. Returns 0 or MLPROF_ENOMEM. */
static int flush_span(chrome *c, thread_state *t) {
  if (!t->pending) return 0;
  t->pending = 0;
  uint64_t at = mlprof__out_pos(c->o);
  write_span(c, t);
  if (c->span_bytes)
    c->span_bytes[mlprof__chrome_bucket(t->end - t->begin)] +=
        mlprof__out_pos(c->o) - at;
  int rc = link_collective(c, t);
  t->nargs = 0;
  return rc;
}

/* The thread of a record that is not a span's metadata or units: the span it
 * held back is now complete. NULL when out of memory. */
static thread_state *record_thread(chrome *c, uint32_t tid) {
  thread_state *t = thread_of(c, tid);
  return t && !flush_span(c, t) ? t : NULL;
}

/* Callbacks return the writer's error as soon as there is one, so a full
 * disk stops the read instead of reading on for nothing. */
static int status(const chrome *c) { return c->o->err; }

static int on_name(void *ud, const mlprof__name *n) {
  chrome *c = ud;
  if (c->nnames >= MLPROF__NONE - 1 ||
      mlprof__grow(&c->names, &c->ncap, c->nnames + 1, sizeof *c->names) ||
      mlprof__map_put(&c->ids, n->id, (uint32_t)c->nnames))
    return MLPROF_ENOMEM;
  size_t off = c->arena.len;
  mlprof__out_json_str(&c->arena, n->name, n->name_len);
  if (c->arena.err) return c->arena.err;
  c->names[c->nnames++] = (name_entry){
      .off = off, .len = c->arena.len - off, .category = n->category};
  return 0;
}

static int on_thread(void *ud, uint32_t tid, const char *name, size_t len) {
  chrome *c = ud;
  thread_state *t = thread_of(c, tid);
  if (!t) return MLPROF_ENOMEM;
  char *p = mlprof__out_space(c->o, 96);
  p = event_start(c, p);
  p = PUT_LIT(p, "\"ph\":\"M\",");
  p = put(p, t->ids, t->ids_len);
  p = PUT_LIT(p, ",\"name\":\"thread_name\",\"args\":{\"name\":");
  mlprof__out_end(c->o, p);
  mlprof__out_json_str(c->o, name, len);
  mlprof__out_lit(c->o, "}}");
  return status(c);
}

static int on_events(void *ud, uint32_t tid, uint64_t dropped) {
  (void)dropped;
  return record_thread(ud, tid) ? status(ud) : MLPROF_ENOMEM;
}

static int on_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin, uint64_t end) {
  chrome *c = ud;
  (void)depth;
  thread_state *t = record_thread(c, tid);
  if (!t) return MLPROF_ENOMEM;
  uint32_t n = name_of(c, name);
  if (n == MLPROF__NONE) return 0;
  t->pending = 1;
  t->name = n;
  t->begin = begin;
  t->end = end > begin ? end : begin;
  return status(c);
}

static int add_arg(chrome *c, uint32_t tid, int is_units, uint32_t a,
                   uint64_t b) {
  thread_state *t = thread_of(c, tid);
  if (!t) return MLPROF_ENOMEM;
  if (!t->pending) return 0; /* no span to attach to */
  if (mlprof__grow(&t->args, &t->acap, t->nargs + 1, sizeof *t->args))
    return MLPROF_ENOMEM;
  t->args[t->nargs++] = (span_arg){is_units, a, b};
  return 0;
}

static int on_span_meta(void *ud, uint32_t tid, uint32_t key, uint32_t value) {
  chrome *c = ud;
  uint32_t k = name_of(c, key), v = name_of(c, value);
  if (k == MLPROF__NONE || v == MLPROF__NONE) return 0;
  return add_arg(c, tid, 0, k, v);
}

static int on_span_units(void *ud, uint32_t tid, uint32_t name, uint64_t n) {
  chrome *c = ud;
  uint32_t u = name_of(c, name);
  if (u == MLPROF__NONE) return 0;
  return add_arg(c, tid, 1, u, n);
}

/* A counter event: value written by the caller, then closed here; name
 * MLPROF__NONE: arg starts with the name. */
static void counter_start(chrome *c, uint64_t t, uint32_t name,
                          const char *arg) {
  char *p = mlprof__out_space(c->o, 64);
  p = event_start(c, p);
  p = PUT_LIT(p, "\"ph\":\"C\",\"pid\":");
  p = mlprof__fmt_u64(p, c->at.pid);
  p = PUT_LIT(p, ",\"ts\":");
  p = mlprof__fmt_us(p, mlprof__job_time(c->at.prof, t));
  p = PUT_LIT(p, ",\"name\":");
  mlprof__out_end(c->o, p);
  if (name != MLPROF__NONE) put_name(c, name);
  mlprof__out_str(c->o, arg);
}

static int on_counter(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                      double v) {
  chrome *c = ud;
  if (!record_thread(c, tid)) return MLPROF_ENOMEM;
  uint32_t n = name_of(c, name);
  /* A counter track cannot show NaN or infinity (JSON has no such number). */
  if (n == MLPROF__NONE || !isfinite(v)) return status(c);
  counter_start(c, t, n, ",\"args\":{\"value\":");
  mlprof__out_f64(c->o, v);
  mlprof__out_lit(c->o, "}}");
  return status(c);
}

static int on_units(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                    uint64_t n) {
  chrome *c = ud;
  if (!record_thread(c, tid)) return MLPROF_ENOMEM;
  uint32_t u = name_of(c, name);
  if (u == MLPROF__NONE) return status(c);
  /* Units outside zones become a counter track of their running total. */
  c->names[u].units += n;
  counter_start(c, t, u, ",\"args\":{\"total\":");
  mlprof__out_u64(c->o, c->names[u].units);
  mlprof__out_lit(c->o, "}}");
  return status(c);
}

static int on_alloc(void *ud, const mlprof__alloc *a) {
  return mlprof__trace_live_alloc(&((chrome *)ud)->live, a);
}

static int on_alloc_free(void *ud, uint32_t tid, uint64_t t, uint64_t addr) {
  return mlprof__trace_live_free_at(&((chrome *)ud)->live, tid, t, addr);
}

static void live_point(void *ud, uint64_t t, uint64_t bytes) {
  chrome *c = ud;
  counter_start(c, t, MLPROF__NONE,
                "\"" MLPROF__TRACE_LIVE_NAME "\",\"args\":{\"bytes\":");
  mlprof__out_u64(c->o, bytes);
  mlprof__out_lit(c->o, "}}");
}

static int on_step(void *ud, uint32_t tid, uint64_t t) {
  chrome *c = ud;
  thread_state *ts = record_thread(c, tid);
  if (!ts) return MLPROF_ENOMEM;
  char *p = mlprof__out_space(c->o, 160);
  p = event_start(c, p);
  p = PUT_LIT(p, "\"ph\":\"i\",\"s\":\"t\",");
  p = put(p, ts->ids, ts->ids_len);
  p = PUT_LIT(p, ",\"ts\":");
  p = mlprof__fmt_us(p, mlprof__job_time(c->at.prof, t));
  p = PUT_LIT(p, ",\"name\":\"step\",\"args\":{\"step\":");
  p = mlprof__fmt_u64(p, ts->steps++);
  p = PUT_LIT(p, "}}");
  mlprof__out_end(c->o, p);
  return status(c);
}

static int on_open(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin) {
  chrome *c = ud;
  if (!record_thread(c, tid)) return MLPROF_ENOMEM;
  uint32_t n = name_of(c, name);
  if (n == MLPROF__NONE) return status(c);
  /* The profile's end is not known yet: written by profile_end. */
  if (mlprof__grow(&c->open, &c->ocap, c->nopen + 1, sizeof *c->open))
    return MLPROF_ENOMEM;
  c->open[c->nopen++] = (open_zone){c->last_thread, n, depth, begin};
  return status(c);
}

/* Names a pseudo-process the first time it is used: the text before and
 * after the label (the name id label, escaped, without its quotes). */
static int name_pseudo(chrome *c, uint64_t pid, const char *pre, uint32_t label,
                       const char *post) {
  if (mlprof__map_get(&c->named, pid) != MLPROF__NONE) return 0;
  if (mlprof__map_put(&c->named, pid, 0)) return MLPROF_ENOMEM;
  char *w = mlprof__out_space(c->o, 96);
  w = event_start(c, w);
  w = PUT_LIT(w, "\"ph\":\"M\",\"pid\":");
  w = mlprof__fmt_u64(w, pid);
  w = PUT_LIT(w, ",\"name\":\"process_name\",\"args\":{\"name\":\"");
  mlprof__out_end(c->o, w);
  mlprof__out_str(c->o, pre);
  uint32_t n = label ? name_of(c, label) : MLPROF__NONE;
  if (n != MLPROF__NONE) {
    mlprof__out_lit(c->o, " (");
    mlprof__out_write(c->o, c->arena.buf + c->names[n].off + 1,
                      c->names[n].len - 2);
    mlprof__out_lit(c->o, ")");
  }
  mlprof__out_str(c->o, post);
  mlprof__out_lit(c->o, "\"}}");
  w = mlprof__out_space(c->o, 128);
  w = event_start(c, w);
  w = PUT_LIT(w, "\"ph\":\"M\",\"pid\":");
  w = mlprof__fmt_u64(w, pid);
  w = PUT_LIT(w, ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":");
  w = mlprof__fmt_u64(w, c->job->count + (pid >> 20));
  w = PUT_LIT(w, "}}");
  mlprof__out_end(c->o, w);
  return 0;
}

/* The trace pid of process pid at job time t (mlprof__trace_process_pid),
 * naming a pseudo-process the first time it is used. */
static uint64_t process_pid(chrome *c, uint64_t pid, uint32_t label, uint64_t t,
                            int *rc) {
  int fresh;
  uint64_t tp =
      mlprof__trace_process_pid(&c->plan, c->at.host, pid, t, &fresh, rc);
  if (fresh && !*rc) {
    char pre[48];
    snprintf(pre, sizeof pre, "pid %llu", (unsigned long long)pid);
    *rc = name_pseudo(c, tp, pre, label, ", no profile");
  }
  return tp;
}

static int on_sample(void *ud, const mlprof__sample_row *row) {
  chrome *c = ud;
  uint64_t t = mlprof__job_time(c->at.prof, row->t), pid;
  int rc = 0;
  char pre[48];
  switch (row->subject) {
    case MLPROF__SUBJECT_PROCESS:
      pid = process_pid(c, row->id, row->label, t, &rc);
      break;
    case MLPROF__SUBJECT_GPU:
      pid = MLPROF__TRACE_GPU_PID(c->at.host, row->id);
      snprintf(pre, sizeof pre, "GPU %llu", (unsigned long long)row->id);
      rc = name_pseudo(c, pid, pre, row->label, "");
      break;
    case MLPROF__SUBJECT_SYSTEM:
      pid = MLPROF__TRACE_SYSTEM_PID(c->at.host);
      rc = name_pseudo(c, pid, "system", 0, "");
      break;
    default:
      return status(c); /* a subject from a newer version */
  }
  if (rc) return rc;
  char head[96];
  char *h = PUT_LIT(head, "\"ph\":\"C\",\"pid\":");
  h = mlprof__fmt_u64(h, pid);
  h = PUT_LIT(h, ",\"ts\":");
  h = mlprof__fmt_us(h, t);
  h = PUT_LIT(h, ",\"name\":");
  size_t hlen = (size_t)(h - head);
  for (uint32_t i = 0; i < row->n; i++) {
    const mlprof__sample_measure *m = &row->m[i];
    if (!m->valid || !isfinite(m->value)) continue;
    uint32_t n = name_of(c, m->name);
    if (n == MLPROF__NONE) continue;
    const name_entry *e = &c->names[n];
    if (e->len > MLPROF__OUT_SLACK - 192) continue; /* no such measure name */
    char *p = mlprof__out_space(c->o, 192 + e->len);
    p = event_start(c, p);
    p = put(p, head, hlen);
    p = put(p, c->arena.buf + e->off, e->len);
    p = PUT_LIT(p, ",\"args\":{\"value\":");
    mlprof__out_end(c->o, p);
    mlprof__out_f64(c->o, m->value);
    mlprof__out_lit(c->o, "}}");
  }
  return status(c);
}

/* ---- stack samples: an instant event each, named by the innermost frame,
 * the whole stack in its args (outermost first, ';' between frames). */

static void stack_defs_clear(stack_defs *d) {
  for (size_t i = 0; i < d->nfuncs; i++) free(d->funcs[i]);
  free(d->funcs);
  free(d->frames);
  free(d->nodes);
  mlprof__map_clear(&d->func_ix);
  mlprof__map_clear(&d->frame_ix);
  mlprof__map_clear(&d->node_ix);
  memset(d, 0, sizeof *d);
}

static int def_put(mlprof__map *ix, uint64_t **arr, size_t *n, size_t *cap,
                   uint32_t id, uint64_t v) {
  if (mlprof__map_get(ix, id) != MLPROF__NONE) return 0;
  if (mlprof__grow(arr, cap, *n + 1, sizeof **arr) ||
      mlprof__map_put(ix, id, (uint32_t)*n))
    return MLPROF_ENOMEM;
  (*arr)[(*n)++] = v;
  return 0;
}

static int on_stack_func(void *ud, const mlprof__stack_func *f) {
  stack_defs *d = &((chrome *)ud)->stk;
  if (mlprof__map_get(&d->func_ix, f->id) != MLPROF__NONE) return 0;
  size_t n = strlen(f->function) + strlen(f->file) + 4;
  char *name = malloc(n);
  if (!name ||
      mlprof__grow(&d->funcs, &d->fcap, d->nfuncs + 1, sizeof *d->funcs) ||
      mlprof__map_put(&d->func_ix, f->id, (uint32_t)d->nfuncs)) {
    free(name);
    return MLPROF_ENOMEM;
  }
  snprintf(name, n, "%s (%s", f->function, f->file);
  d->funcs[d->nfuncs++] = name;
  return 0;
}

static int on_stack_frame(void *ud, const mlprof__stack_frame *f) {
  stack_defs *d = &((chrome *)ud)->stk;
  /* Native frames are named by their address here (no func id). */
  return def_put(&d->frame_ix, &d->frames, &d->nframes, &d->frcap, f->id,
                 f->native ? UINT64_MAX : (uint64_t)f->func << 32 | f->line);
}

static int on_stack_node(void *ud, uint32_t id, uint32_t parent,
                         uint32_t frame) {
  stack_defs *d = &((chrome *)ud)->stk;
  return def_put(&d->node_ix, &d->nodes, &d->nnodes, &d->ncap, id,
                 (uint64_t)parent << 32 | frame);
}

static void frame_name(chrome *c, uint32_t frame, mlprof__out *o) {
  const stack_defs *d = &c->stk;
  uint32_t i = mlprof__map_get(&d->frame_ix, frame);
  uint64_t v = i == MLPROF__NONE ? UINT64_MAX : d->frames[i];
  uint32_t f =
      v == UINT64_MAX ? MLPROF__NONE : mlprof__map_get(&d->func_ix, v >> 32);
  if (f == MLPROF__NONE) {
    mlprof__out_str(o, v == UINT64_MAX ? "(native)" : "<truncated>");
    return;
  }
  mlprof__out_str(o, d->funcs[f]);
  mlprof__out_printf(o, ":%u)", (unsigned)(v & 0xffffffffu));
}

#define SAMPLE_FRAMES 64 /* frames named in an event's args at most */

static int on_stack_sample(void *ud, const mlprof__stack_sample *s) {
  chrome *c = ud;
  thread_state *ts = record_thread(c, s->tid);
  if (!ts) return MLPROF_ENOMEM;
  uint32_t chain[SAMPLE_FRAMES];
  size_t n = 0;
  for (uint32_t id = s->stack; id && n < SAMPLE_FRAMES;) {
    uint32_t i = mlprof__map_get(&c->stk.node_ix, id);
    if (i == MLPROF__NONE) break;
    chain[n++] = (uint32_t)c->stk.nodes[i];
    id = (uint32_t)(c->stk.nodes[i] >> 32);
  }
  /* Names go through a scratch buffer so that they are escaped. */
  mlprof__out *a = &c->arena;
  size_t mark = a->len;
  if (n)
    frame_name(c, chain[0], a);
  else
    mlprof__out_lit(a, "(no Python frame)");
  size_t name_end = a->len;
  for (size_t k = n; k-- > 0;) {
    frame_name(c, chain[k], a);
    if (k) mlprof__out_lit(a, ";");
  }
  char *p = mlprof__out_space(c->o, 160);
  p = event_start(c, p);
  p = PUT_LIT(p, "\"ph\":\"i\",\"s\":\"t\",\"cat\":\"stack\",");
  p = put(p, ts->ids, ts->ids_len);
  p = PUT_LIT(p, ",\"ts\":");
  p = mlprof__fmt_us(p, mlprof__job_time(c->at.prof, s->t));
  p = PUT_LIT(p, ",\"name\":");
  mlprof__out_end(c->o, p);
  mlprof__out_json_str(c->o, a->buf + mark, name_end - mark);
  mlprof__out_lit(c->o, ",\"args\":{\"stack\":");
  mlprof__out_json_str(c->o, a->buf + name_end, a->len - name_end);
  /* The GIL's state where the sample says it. */
  const char *gil = !(s->flags & MLPROF__SAMPLE_GIL_KNOWN) ? NULL
                    : (s->flags & MLPROF__SAMPLE_HAS_GIL)  ? "held"
                    : (s->flags & MLPROF__SAMPLE_GIL_WAIT) ? "waiting"
                                                           : "released";
  mlprof__out_printf(c->o, ",\"on_cpu\":%s%s%s%s}}",
                     s->flags & MLPROF__SAMPLE_ON_CPU ? "true" : "false",
                     gil ? ",\"gil\":\"" : "", gil ? gil : "", gil ? "\"" : "");
  a->len = mark;
  return status(c);
}

static int on_meta(void *ud, const char *key, size_t klen, const char *value,
                   size_t vlen) {
  chrome *c = ud;
  return mlprof__kv_add(&c->meta, &c->nmeta, &c->mcap, key, klen, value, vlen);
}

static int on_end(void *ud, uint64_t end_ns, uint64_t dropped,
                  uint64_t unmatched) {
  chrome *c = ud;
  (void)dropped;
  (void)unmatched;
  c->at.end_seen = 1;
  c->at.end_ns = end_ns;
  return 0;
}

/* Process name and sort order, before any event of the profile. */
static void profile_start(chrome *c, const mlprof__job_profile *p,
                          size_t index) {
  char label[512];
  mlprof__trace_process_label(c->job, index, label, sizeof label, &index);
  char *w = mlprof__out_space(c->o, 96);
  w = event_start(c, w);
  w = PUT_LIT(w, "\"ph\":\"M\",\"pid\":");
  w = mlprof__fmt_u64(w, c->at.pid);
  w = PUT_LIT(w, ",\"name\":\"process_name\",\"args\":{\"name\":");
  mlprof__out_end(c->o, w);
  mlprof__out_json_str(c->o, label, strlen(label));
  mlprof__out_lit(c->o, "}}");

  w = mlprof__out_space(c->o, 128);
  w = event_start(c, w);
  w = PUT_LIT(w, "\"ph\":\"M\",\"pid\":");
  w = mlprof__fmt_u64(w, c->at.pid);
  w = PUT_LIT(w, ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":");
  w = mlprof__fmt_u64(w, index);
  w = PUT_LIT(w, "}}");
  mlprof__out_end(c->o, w);

  if (p->cmdline && p->cmdline[0]) {
    w = mlprof__out_space(c->o, 96);
    w = event_start(c, w);
    w = PUT_LIT(w, "\"ph\":\"M\",\"pid\":");
    w = mlprof__fmt_u64(w, c->at.pid);
    w = PUT_LIT(w, ",\"name\":\"process_labels\",\"args\":{\"labels\":");
    mlprof__out_end(c->o, w);
    mlprof__out_json_str(c->o, p->cmdline, strlen(p->cmdline));
    mlprof__out_lit(c->o, "}}");
  }
}

/* Completes the profile: held-back spans, then the zones still open, which
 * last until the profile's end. Leaves the per-profile state empty. Returns
 * 0 or MLPROF_ENOMEM. */
static int profile_finish(chrome *c, const mlprof__read_report *rep) {
  int rc = mlprof__trace_live_replay(&c->live, live_point, c);
  if (!rc) rc = status(c);
  for (size_t i = 0; i < c->nthreads; i++)
    if (flush_span(c, &c->threads[i])) rc = MLPROF_ENOMEM;
  uint64_t end = rep->last_ns;
  if (c->at.end_seen && c->at.end_ns > end) end = c->at.end_ns;
  for (size_t i = 0; i < c->nopen; i++) {
    const open_zone *z = &c->open[i];
    const thread_state *t = &c->threads[z->thread];
    char *p = mlprof__out_space(c->o, 128);
    p = event_start(c, p);
    p = PUT_LIT(p, "\"ph\":\"X\",");
    p = put(p, t->ids, t->ids_len);
    p = PUT_LIT(p, ",\"ts\":");
    p = mlprof__fmt_us(p, mlprof__job_time(c->at.prof, z->begin));
    p = PUT_LIT(p, ",\"dur\":");
    p = mlprof__fmt_us(p, end > z->begin ? end - z->begin : 0);
    p = PUT_LIT(p, ",\"name\":");
    mlprof__out_end(c->o, p);
    put_name(c, z->name);
    uint8_t cat = c->names[z->name].category;
    if (cat >= MLPROF_CAT_COUNT) cat = 0;
    if (cat)
      mlprof__out_write(c->o, category_field[cat].s, category_field[cat].len);
    mlprof__out_lit(c->o, ",\"args\":{\"open\":true}}");
  }
  for (size_t i = 0; i < c->nthreads; i++) free(c->threads[i].args);
  c->nthreads = c->nnames = c->nopen = 0;
  c->arena.len = 0;
  mlprof__map_clear(&c->ids);
  mlprof__map_clear(&c->tids);
  c->last_thread = MLPROF__NONE;
  return rc;
}

static void write_other_data(chrome *c, size_t profiles) {
  mlprof__out_printf(c->o,
                     "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{"
                     "\"generator\":\"mlprof %d.%d.%d\",\"profiles\":%zu,"
                     "\"meta\":{",
                     MLPROF_VERSION_MAJOR, MLPROF_VERSION_MINOR,
                     MLPROF_VERSION_PATCH, profiles);
  for (size_t i = 0; i < c->nmeta; i++) {
    if (i) mlprof__out_lit(c->o, ",");
    mlprof__out_json_str(c->o, c->meta[i].key, c->meta[i].key_len);
    mlprof__out_lit(c->o, ":");
    mlprof__out_json_str(c->o, c->meta[i].value, c->meta[i].value_len);
  }
  mlprof__out_lit(c->o, "}}}\n");
}

/* mlprof__trace_walk's emitter: a profile begins, and ends. */
static int walk_begin(void *ud, size_t i) {
  chrome *c = ud;
  profile_start(c, c->at.prof, i);
  return 0;
}

static int walk_finish(void *ud, const mlprof__read_report *rep) {
  chrome *c = ud;
  stack_defs_clear(&c->stk); /* ids are the profile's own */
  return profile_finish(c, rep);
}

int mlprof__export_chrome(const mlprof__job *job, const mlprof__filter *filter,
                          mlprof__out *o, mlprof__chrome_result *res, char *err,
                          size_t errlen) {
  chrome c;
  memset(&c, 0, sizeof c);
  c.o = o;
  c.span_bytes = res ? res->span_bytes : NULL;
  uint64_t start = mlprof__out_pos(o);
  c.last_thread = MLPROF__NONE;
  int rc = mlprof__out_open(&c.arena, -1);
  if (rc) {
    snprintf(err, errlen, "out of memory");
    return rc;
  }
  const mlprof__visitor v = {
      .ud = &c,
      .name = on_name,
      .thread = on_thread,
      .events = on_events,
      .span = on_span,
      .span_meta = on_span_meta,
      .span_units = on_span_units,
      .counter = on_counter,
      .units = on_units,
      .step = on_step,
      .open = on_open,
      .meta = on_meta,
      .end = on_end,
      .sample = on_sample,
      .stack_func = on_stack_func,
      .stack_frame = on_stack_frame,
      .stack_node = on_stack_node,
      .stack_sample = on_stack_sample,
      .alloc = on_alloc,
      .alloc_free = on_alloc_free,
  };
  c.job = job;
  const mlprof__trace_emitter e = {
      .ud = &c, .at = &c.at, .begin = walk_begin, .finish = walk_finish};
  rc = mlprof__trace_plan_init(&c.plan, job);
  mlprof__out_lit(o, "{\"traceEvents\":[\n");
  if (rc)
    snprintf(err, errlen, "out of memory");
  else
    rc = mlprof__trace_walk(job, &c.plan, filter, &v, &e, o, res, err, errlen);
  if (!rc && !(rc = mlprof__kv_dedupe(c.meta, &c.nmeta))) {
    write_other_data(&c, job->count);
    rc = o->err;
    if (rc) snprintf(err, errlen, "cannot write the trace");
  } else if (rc == MLPROF_ENOMEM) {
    snprintf(err, errlen, "out of memory");
  }
  if (res) {
    res->events = c.events;
    res->bytes = mlprof__out_pos(o) - start;
  }
  for (size_t i = 0; i < c.nthreads; i++) free(c.threads[i].args);
  for (size_t i = 0; i < c.nmeta; i++) {
    free(c.meta[i].key);
    free(c.meta[i].value);
  }
  free(c.meta);
  mlprof__trace_plan_free(&c.plan);
  mlprof__map_clear(&c.named);
  mlprof__map_clear(&c.colls);
  free(c.anchors);
  free(c.live.rec);
  free(c.threads);
  free(c.names);
  free(c.open);
  mlprof__map_clear(&c.ids);
  mlprof__map_clear(&c.tids);
  stack_defs_clear(&c.stk);
  mlprof__out_close(&c.arena);
  return rc;
}
