/* Perfetto's native trace (a protobuf Trace: a stream of TracePackets),
 * streamed like the Chrome exporter (chrome.c), written by our own encoder
 * (pb.h) from the field numbers Perfetto documents (protos/perfetto/trace/:
 * trace_packet.proto, the track_event and interned_data
 * directories).
 *
 * Each profile is one packet sequence of its own (trusted_packet_sequence_id
 * = its place in the job + 1, SEQ_INCREMENTAL_STATE_CLEARED on its first
 * packet), so the profiles' packets can be concatenated; names and categories
 * are interned on it the first time an event uses them. Tracks: a process
 * track per profile and per pseudo-process (tracejob.h), a thread track per
 * thread, a named track per track of spans measured elsewhere
 * (mlprof_track_spans), a counter track per counter, unit and sampled
 * measure. Zones are
 * SLICE_BEGIN / SLICE_END pairs on their thread's track.
 *
 * The reader gives a thread's spans as they end, children before their
 * parent. Perfetto sorts events by time, and events of the same time in file
 * order: a child written before a parent that began at the same nanosecond
 * would swallow it. So each thread holds its spans back until a top-level
 * one ends (or HOLD_MAX are held) and writes them in begin order, parents
 * first, ends nested. Memory: the names of the profile being read, the
 * tracks, and at most HOLD_MAX spans per thread. */
#include <math.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../format/subject.h"
#include "../format/wire.h"
#include "export.h"
#include "pb.h"
#include "tracejob.h"

/* Field numbers (Perfetto's protos). */
enum {
  TRACE_PACKET = 1,
  /* TracePacket */
  PK_TIMESTAMP = 8,
  PK_SEQUENCE_ID = 10,
  PK_TRACK_EVENT = 11,
  PK_INTERNED_DATA = 12,
  PK_SEQUENCE_FLAGS = 13,
  PK_TRACK_DESCRIPTOR = 60,
  SEQ_INCREMENTAL_STATE_CLEARED = 1,
  /* TrackDescriptor */
  TD_UUID = 1,
  TD_NAME = 2,
  TD_PROCESS = 3,
  TD_THREAD = 4,
  TD_PARENT_UUID = 5,
  TD_COUNTER = 8,
  /* ProcessDescriptor */
  PD_PID = 1,
  PD_CMDLINE = 2,
  PD_PROCESS_NAME = 6,
  /* ThreadDescriptor */
  THD_PID = 1,
  THD_TID = 2,
  THD_THREAD_NAME = 5,
  /* TrackEvent */
  TE_CATEGORY_IIDS = 3,
  TE_DEBUG_ANNOTATIONS = 4,
  TE_TYPE = 9,
  TE_NAME_IID = 10,
  TE_TRACK_UUID = 11,
  TE_COUNTER_VALUE = 30,
  TE_DOUBLE_COUNTER_VALUE = 44,
  TE_FLOW_IDS = 47,
  TYPE_SLICE_BEGIN = 1,
  TYPE_SLICE_END = 2,
  TYPE_INSTANT = 3,
  TYPE_COUNTER = 4,
  /* DebugAnnotation */
  DA_NAME_IID = 1,
  DA_BOOL_VALUE = 2,
  DA_UINT_VALUE = 3,
  DA_STRING_VALUE = 6,
  /* InternedData, and its EventCategory, EventName, DebugAnnotationName */
  ID_EVENT_CATEGORIES = 1,
  ID_EVENT_NAMES = 2,
  ID_DEBUG_ANNOTATION_NAMES = 3,
  IN_IID = 1,
  IN_NAME = 2,
};

/* Interned ids of a sequence: the literals below, then the profile's names
 * (NAME_IID0 + their index), in each of the event names and the annotation
 * names; categories by their code. */
enum { STEP_IID = 1, OPEN_IID = 2, NAME_IID0 = 8 };
#define INTERNED_EVENT 1u
#define INTERNED_ANNOTATION 2u

/* Spans held back per thread before they are written anyway. */
#define HOLD_MAX 4096

typedef struct {
  size_t off, len; /* the name, valid UTF-8, in arena */
  uint8_t category;
  uint8_t interned; /* INTERNED_* on this profile's sequence */
  uint64_t units;   /* running total of this unit outside zones */
} name_entry;

typedef struct {
  int is_units; /* 0: metadata a = key, b = value (names); 1: a = unit, b = n */
  uint32_t a;
  uint64_t b;
} span_arg;

typedef struct {
  uint32_t name, depth;
  uint64_t begin, end; /* profile times */
  uint32_t arg0, nargs;
  uint32_t order; /* arrival, so that equal spans keep it */
  int open;       /* still open at the profile's end */
} held_span;

typedef struct {
  uint32_t tid;
  uint64_t uuid;
  int named;
  held_span *held;
  size_t nheld, hcap;
  span_arg *args;
  size_t nargs, acap;
  int attach; /* the last span held may still get args */
  uint64_t steps;
} thread_state;

typedef struct {
  uint32_t thread, name, depth;
  uint64_t begin;
} open_zone;

typedef struct {
  mlprof__out *o;
  mlprof__out pk; /* the packet being built */
  uint64_t events;
  mlprof__out arena; /* names of the current profile */
  name_entry *names;
  size_t nnames, ncap;
  mlprof__map ids; /* name id -> index in names */
  thread_state *threads;
  size_t nthreads, tcap;
  mlprof__map tids; /* tid -> index in threads */
  uint32_t last_tid, last_thread;
  uint32_t *stack;       /* flush_thread's open spans */
  uint64_t *begin_bytes; /* and the bytes of each one's begin */
  size_t scap, bcap;
  open_zone *open; /* zones open at the profile's end */
  size_t nopen, ocap;
  /* The profile being read. */
  const mlprof__job *job;
  mlprof__trace_at at; /* the profile being read */
  uint64_t proc_uuid;
  mlprof__trace_live live; /* the profile's allocation records */
  uint64_t live_track;     /* its live bytes' counter track */
  uint32_t seq;            /* trusted_packet_sequence_id */
  int seq_started;         /* the sequence's first packet is written */
  uint8_t cats_interned[MLPROF_CAT_COUNT];
  int literals_interned; /* INTERNED_* of the literals */
  /* Tracks of the whole job. */
  mlprof__trace_plan plan;
  uint64_t next_uuid, next_thread_uuid;
  mlprof__map procs;    /* trace pid -> process track uuid */
  mlprof__map named;    /* pseudo-processes already described */
  mlprof__map counters; /* hash of (process uuid, kind, name) -> uuid */
  uint64_t *span_bytes; /* mlprof__chrome_result.span_bytes */
  mlprof__map colls;    /* collectives met: group and seq */
  uint64_t flows;       /* participants linked to a collective met before */
} perfetto;

static int status(const perfetto *c) { return c->o->err; }

static const char *const category_name[MLPROF_CAT_COUNT] = {
#define CAT_NAME(name, code, text) [code] = text,
    MLPROF_CATEGORY_MAP(CAT_NAME)
#undef CAT_NAME
};

/* Packets: each is built in c->pk, then written as a Trace's packet field. */
static void packet_start(perfetto *c, uint64_t ts, int timed) {
  mlprof__out *m = &c->pk;
  m->len = 0;
  if (timed) mlprof__pb_out_uint(m, PK_TIMESTAMP, ts);
  mlprof__pb_out_uint(m, PK_SEQUENCE_ID, c->seq);
  if (!c->seq_started) {
    mlprof__pb_out_uint(m, PK_SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
    c->seq_started = 1;
  }
}

/* Writes the packet built; returns its size in the trace. */
static uint64_t packet_end(perfetto *c) {
  if (c->pk.err) {
    /* The packet could not be built: out of memory. */
    if (!c->o->err) c->o->err = c->pk.err;
    return 0;
  }
  uint64_t at = mlprof__out_pos(c->o);
  char *p = mlprof__out_space(c->o, MLPROF__PB_MAX_FIELD);
  p = mlprof__pb_tag(p, TRACE_PACKET, MLPROF__PB_LEN);
  mlprof__out_end(c->o, mlprof__pb_varint(p, c->pk.len));
  mlprof__out_write(c->o, c->pk.buf, c->pk.len);
  return mlprof__out_pos(c->o) - at;
}

static const char *name_text(const perfetto *c, uint32_t name) {
  return c->arena.buf + c->names[name].off;
}

/* One interned entry {iid, name} as field of InternedData. */
static void interned_entry(mlprof__out *m, uint32_t field, uint64_t iid,
                           const char *s, size_t n) {
  size_t at = mlprof__pb_open(m, field);
  mlprof__pb_out_uint(m, IN_IID, iid);
  mlprof__pb_string(m, IN_NAME, s, n);
  mlprof__pb_close(m, at);
}

/* Interning, written into the packet being built before its event: what
 * the event uses and the sequence has not seen yet. */
typedef struct {
  mlprof__out *m;
  size_t at; /* the InternedData field, or SIZE_MAX while none is open */
} interning;

static void intern_open(perfetto *c, interning *in) {
  in->m = &c->pk;
  in->at = SIZE_MAX;
}

static void intern_add(interning *in, uint32_t field, uint64_t iid,
                       const char *s, size_t n) {
  if (in->at == SIZE_MAX) in->at = mlprof__pb_open(in->m, PK_INTERNED_DATA);
  interned_entry(in->m, field, iid, s, n);
}

static void intern_close(interning *in) {
  if (in->at != SIZE_MAX) mlprof__pb_close(in->m, in->at);
}

/* Name index n as an event name; returns its iid. */
static uint64_t intern_event_name(perfetto *c, interning *in, uint32_t n) {
  name_entry *e = &c->names[n];
  if (!(e->interned & INTERNED_EVENT)) {
    intern_add(in, ID_EVENT_NAMES, NAME_IID0 + n, name_text(c, n), e->len);
    e->interned |= INTERNED_EVENT;
  }
  return NAME_IID0 + n;
}

static uint64_t intern_annotation_name(perfetto *c, interning *in, uint32_t n) {
  name_entry *e = &c->names[n];
  if (!(e->interned & INTERNED_ANNOTATION)) {
    intern_add(in, ID_DEBUG_ANNOTATION_NAMES, NAME_IID0 + n, name_text(c, n),
               e->len);
    e->interned |= INTERNED_ANNOTATION;
  }
  return NAME_IID0 + n;
}

static void intern_category(perfetto *c, interning *in, uint8_t cat) {
  if (c->cats_interned[cat]) return;
  intern_add(in, ID_EVENT_CATEGORIES, cat, category_name[cat],
             strlen(category_name[cat]));
  c->cats_interned[cat] = 1;
}

/* The literal names ("step", "open") of the sequence, the first time one is
 * used: as event name (step marks) and as annotation names. */
static void intern_literals(perfetto *c, interning *in, unsigned what) {
  if ((what & INTERNED_EVENT) && !(c->literals_interned & INTERNED_EVENT))
    intern_add(in, ID_EVENT_NAMES, STEP_IID, "step", 4);
  if ((what & INTERNED_ANNOTATION) &&
      !(c->literals_interned & INTERNED_ANNOTATION)) {
    intern_add(in, ID_DEBUG_ANNOTATION_NAMES, STEP_IID, "step", 4);
    intern_add(in, ID_DEBUG_ANNOTATION_NAMES, OPEN_IID, "open", 4);
  }
  c->literals_interned |= (int)what;
}

/* Track descriptors. Thread tracks, which every slice names, take the
 * small uuids (one or two bytes as a varint); other tracks are numbered from
 * OTHER_UUID0 on, and threads past OTHER_UUID0 - 1 with them. */
#define OTHER_UUID0 16384u
static uint64_t new_uuid(perfetto *c, int thread) {
  if (thread && c->next_thread_uuid < OTHER_UUID0 - 1)
    return ++c->next_thread_uuid;
  return OTHER_UUID0 + c->next_uuid++;
}

/* The process track of trace pid; *fresh is 1 when it is new. 0 when out of
 * memory. */
static uint64_t process_uuid(perfetto *c, uint64_t pid, int *fresh) {
  uint32_t have = mlprof__map_get(&c->procs, pid);
  *fresh = have == MLPROF__NONE;
  if (!*fresh) return have;
  uint64_t u = new_uuid(c, 0);
  if (u >= MLPROF__NONE || mlprof__map_put(&c->procs, pid, (uint32_t)u))
    return 0;
  return u;
}

/* A process's descriptor: name (valid UTF-8 made of its parts), command. */
static void describe_process(perfetto *c, uint64_t uuid, uint64_t pid,
                             const char *name, size_t nlen, const char *cmd) {
  mlprof__out *m = &c->pk;
  packet_start(c, 0, 0);
  size_t td = mlprof__pb_open(m, PK_TRACK_DESCRIPTOR);
  mlprof__pb_out_uint(m, TD_UUID, uuid);
  size_t pd = mlprof__pb_open(m, TD_PROCESS);
  mlprof__pb_out_uint(m, PD_PID, pid);
  mlprof__pb_string(m, PD_PROCESS_NAME, name, nlen);
  if (cmd && cmd[0]) mlprof__pb_string(m, PD_CMDLINE, cmd, strlen(cmd));
  mlprof__pb_close(m, pd);
  mlprof__pb_close(m, td);
  packet_end(c);
  c->events++;
}

/* A thread's track (ThreadDescriptor: pid, tid, name), or for a track of
 * spans measured elsewhere (tid at MLPROF__TRACK_TID_BASE and above: no
 * kernel thread) a track of its own under the process, with its name. name
 * is NULL until the profile names it: the track is described again then. */
static void describe_thread(perfetto *c, const thread_state *t,
                            const char *name, size_t len) {
  mlprof__out *m = &c->pk;
  packet_start(c, 0, 0);
  size_t td = mlprof__pb_open(m, PK_TRACK_DESCRIPTOR);
  mlprof__pb_out_uint(m, TD_UUID, t->uuid);
  mlprof__pb_out_uint(m, TD_PARENT_UUID, c->proc_uuid);
  if (t->tid >= MLPROF__TRACK_TID_BASE) {
    if (name) mlprof__pb_string(m, TD_NAME, name, len);
  } else {
    size_t th = mlprof__pb_open(m, TD_THREAD);
    mlprof__pb_out_uint(m, THD_PID, c->at.pid);
    mlprof__pb_out_uint(m, THD_TID, t->tid);
    if (name) mlprof__pb_string(m, THD_THREAD_NAME, name, len);
    mlprof__pb_close(m, th);
  }
  mlprof__pb_close(m, td);
  packet_end(c);
  c->events++;
}

/* The counter track named text (len bytes) under the process track parent,
 * kind telling counters, units, measures and the live bytes of one name
 * apart; described the first time. 0 when out of memory. */
static uint64_t counter_track(perfetto *c, uint64_t parent, char kind,
                              const char *text, size_t len) {
  uint64_t key = mlprof__hash(&parent, sizeof parent, MLPROF__HASH_START);
  key = mlprof__hash(&kind, 1, key);
  key = mlprof__hash(text, len, key);
  uint32_t have = mlprof__map_get(&c->counters, key);
  if (have != MLPROF__NONE) return have;
  uint64_t u = new_uuid(c, 0);
  if (u >= MLPROF__NONE || mlprof__map_put(&c->counters, key, (uint32_t)u))
    return 0;
  mlprof__out *m = &c->pk;
  packet_start(c, 0, 0);
  size_t td = mlprof__pb_open(m, PK_TRACK_DESCRIPTOR);
  mlprof__pb_out_uint(m, TD_UUID, u);
  mlprof__pb_out_uint(m, TD_PARENT_UUID, parent);
  mlprof__pb_string(m, TD_NAME, text, len);
  size_t cd = mlprof__pb_open(m, TD_COUNTER);
  mlprof__pb_close(m, cd);
  mlprof__pb_close(m, td);
  packet_end(c);
  c->events++;
  return u;
}

static uint64_t counter_uuid(perfetto *c, uint64_t parent, char kind,
                             uint32_t name) {
  return counter_track(c, parent, kind, name_text(c, name), c->names[name].len);
}

static void counter_value(perfetto *c, uint64_t track, uint64_t ts, double v,
                          int is_int, uint64_t n) {
  mlprof__out *m = &c->pk;
  packet_start(c, ts, 1);
  size_t te = mlprof__pb_open(m, PK_TRACK_EVENT);
  mlprof__pb_out_uint(m, TE_TYPE, TYPE_COUNTER);
  mlprof__pb_out_uint(m, TE_TRACK_UUID, track);
  if (is_int)
    mlprof__pb_out_uint(m, TE_COUNTER_VALUE, n);
  else
    mlprof__pb_out_double(m, TE_DOUBLE_COUNTER_VALUE, v);
  mlprof__pb_close(m, te);
  packet_end(c);
  c->events++;
}

static thread_state *thread_of(perfetto *c, uint32_t tid) {
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
    ts->tid = tid;
    ts->uuid = new_uuid(c, 1);
  }
  c->last_tid = tid;
  c->last_thread = t;
  return &c->threads[t];
}

/* A thread's track, described (without a name) before its first event. */
static thread_state *event_thread(perfetto *c, uint32_t tid) {
  thread_state *t = thread_of(c, tid);
  if (t && !t->named) {
    describe_thread(c, t, NULL, 0);
    t->named = 1;
  }
  if (t) t->attach = 0;
  return t;
}

static uint32_t name_of(const perfetto *c, uint32_t id) {
  return mlprof__map_get(&c->ids, id);
}

/* Whether name (an index) is the string lit. */
static int name_is(const perfetto *c, uint32_t name, const char *lit) {
  const name_entry *n = &c->names[name];
  return n->len == strlen(lit) && !memcmp(name_text(c, name), lit, n->len);
}

/* The flow id of a collective's slice (units "seq" and metadata "comm" or
 * "group", as dist.c and chrome.c match them): the same for every
 * participant, in every profile; 0 when the slice is not one. Perfetto links
 * the slices of one flow id in time order. */
static uint64_t collective_flow(perfetto *c, const thread_state *t,
                                const held_span *s) {
  uint64_t seq = 0, key = MLPROF__HASH_START;
  int has_group = 0;
  for (uint32_t i = 0; i < s->nargs; i++) {
    const span_arg *a = &t->args[s->arg0 + i];
    if (a->is_units && name_is(c, a->a, "seq")) seq = a->b;
    if (!a->is_units &&
        (name_is(c, a->a, "comm") || name_is(c, a->a, "group"))) {
      uint32_t g = (uint32_t)a->b;
      key = mlprof__hash(name_text(c, g), c->names[g].len, key);
      has_group = 1;
    }
  }
  if (!seq || !has_group) return 0;
  key = mlprof__hash(&seq, sizeof seq, key);
  return key ? key : 1;
}

static uint64_t write_small_event(perfetto *c, uint64_t ts, const char *ev,
                                  size_t ev_len);

static uint64_t write_begin(perfetto *c, const thread_state *t,
                            const held_span *s) {
  mlprof__out *m = &c->pk;
  uint8_t cat = c->names[s->name].category;
  if (cat >= MLPROF_CAT_COUNT) cat = 0;
  /* Most slices: a name and category already interned, nothing else. */
  if (!s->nargs && !s->open && (c->names[s->name].interned & INTERNED_EVENT) &&
      (!cat || c->cats_interned[cat]) && c->seq_started) {
    char ev[64], *e = ev;
    e = mlprof__pb_uint(e, TE_TYPE, TYPE_SLICE_BEGIN);
    e = mlprof__pb_uint(e, TE_TRACK_UUID, t->uuid);
    e = mlprof__pb_uint(e, TE_NAME_IID, NAME_IID0 + s->name);
    if (cat) e = mlprof__pb_uint(e, TE_CATEGORY_IIDS, cat);
    c->events++;
    return write_small_event(c, mlprof__job_time(c->at.prof, s->begin), ev,
                             (size_t)(e - ev));
  }
  uint64_t flow = collective_flow(c, t, s);
  if (flow) {
    uint32_t seen = mlprof__map_get(&c->colls, flow);
    if (seen != MLPROF__NONE)
      c->flows++;
    else if (mlprof__map_put(&c->colls, flow, 0))
      c->pk.err = MLPROF_ENOMEM;
  }
  packet_start(c, mlprof__job_time(c->at.prof, s->begin), 1);
  interning in;
  size_t before = c->pk.len;
  intern_open(c, &in);
  uint64_t iid = intern_event_name(c, &in, s->name);
  if (cat) intern_category(c, &in, cat);
  for (uint32_t i = 0; i < s->nargs; i++)
    intern_annotation_name(c, &in, t->args[s->arg0 + i].a);
  if (s->open) intern_literals(c, &in, INTERNED_ANNOTATION);
  intern_close(&in);
  /* Names are written with the first slice that uses them: counted apart
   * from the span (as what is not a span for --max-mb), since which slice
   * carries them depends on which are kept. */
  size_t interned = c->pk.len - before;
  size_t te = mlprof__pb_open(m, PK_TRACK_EVENT);
  mlprof__pb_out_uint(m, TE_TYPE, TYPE_SLICE_BEGIN);
  mlprof__pb_out_uint(m, TE_TRACK_UUID, t->uuid);
  mlprof__pb_out_uint(m, TE_NAME_IID, iid);
  if (cat) mlprof__pb_out_uint(m, TE_CATEGORY_IIDS, cat);
  if (flow) mlprof__pb_out_fixed64(m, TE_FLOW_IDS, flow);
  for (uint32_t i = 0; i < s->nargs; i++) {
    const span_arg *a = &t->args[s->arg0 + i];
    size_t da = mlprof__pb_open(m, TE_DEBUG_ANNOTATIONS);
    mlprof__pb_out_uint(m, DA_NAME_IID, NAME_IID0 + a->a);
    if (a->is_units)
      mlprof__pb_out_uint(m, DA_UINT_VALUE, a->b);
    else
      mlprof__pb_string(m, DA_STRING_VALUE, name_text(c, (uint32_t)a->b),
                        c->names[a->b].len);
    mlprof__pb_close(m, da);
  }
  if (s->open) {
    size_t da = mlprof__pb_open(m, TE_DEBUG_ANNOTATIONS);
    mlprof__pb_out_uint(m, DA_NAME_IID, OPEN_IID);
    mlprof__pb_out_uint(m, DA_BOOL_VALUE, 1);
    mlprof__pb_close(m, da);
  }
  mlprof__pb_close(m, te);
  c->events++;
  uint64_t bytes = packet_end(c);
  return bytes > interned ? bytes - interned : 0;
}

/* A packet of fixed shape, its track event's ev_len bytes at ev (under
 * 128), written straight to the output: the hot path, no nested message of
 * unknown length. Returns its size. */
static uint64_t write_small_event(perfetto *c, uint64_t ts, const char *ev,
                                  size_t ev_len) {
  size_t plen = 1 + mlprof__pb_varint_len(ts) + 1 +
                mlprof__pb_varint_len(c->seq) + 2 + ev_len;
  char *p0 = mlprof__out_space(c->o, 2 * MLPROF__PB_MAX_FIELD + 4 + ev_len);
  char *p = mlprof__pb_tag(p0, TRACE_PACKET, MLPROF__PB_LEN);
  p = mlprof__pb_varint(p, plen);
  p = mlprof__pb_uint(p, PK_TIMESTAMP, ts);
  p = mlprof__pb_uint(p, PK_SEQUENCE_ID, c->seq);
  p = mlprof__pb_tag(p, PK_TRACK_EVENT, MLPROF__PB_LEN);
  *p++ = (char)ev_len;
  memcpy(p, ev, ev_len);
  p += ev_len;
  mlprof__out_end(c->o, p);
  return (uint64_t)(p - p0);
}

static uint64_t write_end(perfetto *c, const thread_state *t,
                          const held_span *s) {
  char ev[32], *e = ev;
  e = mlprof__pb_uint(e, TE_TYPE, TYPE_SLICE_END);
  e = mlprof__pb_uint(e, TE_TRACK_UUID, t->uuid);
  return write_small_event(c, mlprof__job_time(c->at.prof, s->end), ev,
                           (size_t)(e - ev));
}

static int by_begin(const void *a, const void *b) {
  const held_span *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->depth != y->depth) return x->depth < y->depth ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

/* Whether s lies within the span p, one level or more below it. */
static int nests_in(const held_span *s, const held_span *p) {
  return s->depth > p->depth && s->end <= p->end;
}

static void end_span(perfetto *c, thread_state *t, const held_span *s,
                     uint64_t begin_bytes) {
  uint64_t bytes = begin_bytes + write_end(c, t, s);
  if (c->span_bytes)
    c->span_bytes[mlprof__chrome_bucket(s->end - s->begin)] += bytes;
}

/* Writes the spans t holds in begin order, parents first, each ended once
 * the spans within it are written. Returns 0 or MLPROF_ENOMEM. */
static int flush_thread(perfetto *c, thread_state *t) {
  if (!t->nheld) return 0;
  if (mlprof__grow(&c->stack, &c->scap, t->nheld, sizeof *c->stack) ||
      mlprof__grow(&c->begin_bytes, &c->bcap, t->nheld, sizeof *c->begin_bytes))
    return MLPROF_ENOMEM;
  mlprof__sort(t->held, t->nheld, sizeof *t->held, by_begin);
  uint64_t *begin_bytes = c->begin_bytes;
  size_t sp = 0;
  for (size_t i = 0; i < t->nheld; i++) {
    const held_span *s = &t->held[i];
    while (sp && !nests_in(s, &t->held[c->stack[sp - 1]])) {
      sp--;
      end_span(c, t, &t->held[c->stack[sp]], begin_bytes[c->stack[sp]]);
    }
    begin_bytes[i] = write_begin(c, t, s);
    c->stack[sp++] = (uint32_t)i;
  }
  while (sp) {
    sp--;
    end_span(c, t, &t->held[c->stack[sp]], begin_bytes[c->stack[sp]]);
  }
  t->nheld = t->nargs = 0;
  t->attach = 0;
  return 0;
}

/* Holds a span back on t; open: a zone open at the profile's end, held
 * beside the others however many there are, all flushed next. */
static int hold_span(perfetto *c, thread_state *t, uint32_t name,
                     uint32_t depth, uint64_t begin, uint64_t end, int open) {
  /* A top-level span held last has all its args: it and what it holds are
   * complete. */
  if (!open && t->nheld &&
      (t->held[t->nheld - 1].depth == 0 || t->nheld >= HOLD_MAX)) {
    int rc = flush_thread(c, t);
    if (rc) return rc;
  }
  if (mlprof__grow(&t->held, &t->hcap, t->nheld + 1, sizeof *t->held))
    return MLPROF_ENOMEM;
  t->held[t->nheld] = (held_span){.name = name,
                                  .depth = depth,
                                  .begin = begin,
                                  .end = end > begin ? end : begin,
                                  .arg0 = (uint32_t)t->nargs,
                                  .order = (uint32_t)t->nheld,
                                  .open = open};
  t->nheld++;
  t->attach = 1;
  return 0;
}

/* Visitor callbacks, as chrome.c's. */
static int on_name(void *ud, const mlprof__name *n) {
  perfetto *c = ud;
  if (c->nnames >= MLPROF__NONE - NAME_IID0 - 1 ||
      mlprof__grow(&c->names, &c->ncap, c->nnames + 1, sizeof *c->names) ||
      mlprof__map_put(&c->ids, n->id, (uint32_t)c->nnames))
    return MLPROF_ENOMEM;
  size_t off = c->arena.len;
  mlprof__out_utf8(&c->arena, n->name, n->name_len);
  if (c->arena.err) return c->arena.err;
  c->names[c->nnames++] = (name_entry){
      .off = off, .len = c->arena.len - off, .category = n->category};
  return 0;
}

static int on_thread(void *ud, uint32_t tid, const char *name, size_t len) {
  perfetto *c = ud;
  thread_state *t = thread_of(c, tid);
  if (!t) return MLPROF_ENOMEM;
  describe_thread(c, t, name, len);
  t->named = 1;
  return status(c);
}

static int on_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin, uint64_t end) {
  perfetto *c = ud;
  thread_state *t = event_thread(c, tid);
  if (!t) return MLPROF_ENOMEM;
  uint32_t n = name_of(c, name);
  if (n == MLPROF__NONE) return 0;
  int rc = hold_span(c, t, n, depth, begin, end, 0);
  return rc ? rc : status(c);
}

static int add_arg(perfetto *c, uint32_t tid, int is_units, uint32_t a,
                   uint64_t b) {
  thread_state *t = thread_of(c, tid);
  if (!t) return MLPROF_ENOMEM;
  if (!t->attach) return 0; /* no span to attach to */
  if (mlprof__grow(&t->args, &t->acap, t->nargs + 1, sizeof *t->args))
    return MLPROF_ENOMEM;
  t->args[t->nargs++] = (span_arg){is_units, a, b};
  t->held[t->nheld - 1].nargs++;
  return 0;
}

static int on_span_meta(void *ud, uint32_t tid, uint32_t key, uint32_t value) {
  perfetto *c = ud;
  uint32_t k = name_of(c, key), v = name_of(c, value);
  if (k == MLPROF__NONE || v == MLPROF__NONE) return 0;
  return add_arg(c, tid, 0, k, v);
}

static int on_span_units(void *ud, uint32_t tid, uint32_t name, uint64_t n) {
  perfetto *c = ud;
  uint32_t u = name_of(c, name);
  if (u == MLPROF__NONE) return 0;
  return add_arg(c, tid, 1, u, n);
}

static int on_events(void *ud, uint32_t tid, uint64_t dropped) {
  (void)dropped;
  perfetto *c = ud;
  return event_thread(c, tid) ? status(c) : MLPROF_ENOMEM;
}

static int on_counter(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                      double v) {
  perfetto *c = ud;
  if (!event_thread(c, tid)) return MLPROF_ENOMEM;
  uint32_t n = name_of(c, name);
  /* As in the Chrome trace: no NaN or infinity on a counter track. */
  if (n == MLPROF__NONE || !isfinite(v)) return status(c);
  uint64_t track = counter_uuid(c, c->proc_uuid, 'c', n);
  if (!track) return MLPROF_ENOMEM;
  counter_value(c, track, mlprof__job_time(c->at.prof, t), v, 0, 0);
  return status(c);
}

static int on_units(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                    uint64_t n) {
  perfetto *c = ud;
  if (!event_thread(c, tid)) return MLPROF_ENOMEM;
  uint32_t u = name_of(c, name);
  if (u == MLPROF__NONE) return status(c);
  /* Units outside zones become a counter track of their running total. */
  c->names[u].units += n;
  uint64_t track = counter_uuid(c, c->proc_uuid, 'u', u);
  if (!track) return MLPROF_ENOMEM;
  counter_value(c, track, mlprof__job_time(c->at.prof, t), 0, 1,
                c->names[u].units);
  return status(c);
}

static int on_step(void *ud, uint32_t tid, uint64_t t) {
  perfetto *c = ud;
  thread_state *ts = event_thread(c, tid);
  if (!ts) return MLPROF_ENOMEM;
  mlprof__out *m = &c->pk;
  packet_start(c, mlprof__job_time(c->at.prof, t), 1);
  interning in;
  intern_open(c, &in);
  intern_literals(c, &in, INTERNED_EVENT | INTERNED_ANNOTATION);
  intern_close(&in);
  size_t te = mlprof__pb_open(m, PK_TRACK_EVENT);
  mlprof__pb_out_uint(m, TE_TYPE, TYPE_INSTANT);
  mlprof__pb_out_uint(m, TE_TRACK_UUID, ts->uuid);
  mlprof__pb_out_uint(m, TE_NAME_IID, STEP_IID);
  size_t da = mlprof__pb_open(m, TE_DEBUG_ANNOTATIONS);
  mlprof__pb_out_uint(m, DA_NAME_IID, STEP_IID);
  mlprof__pb_out_uint(m, DA_UINT_VALUE, ts->steps++);
  mlprof__pb_close(m, da);
  mlprof__pb_close(m, te);
  packet_end(c);
  c->events++;
  return status(c);
}

static int on_open(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin) {
  perfetto *c = ud;
  thread_state *t = event_thread(c, tid);
  if (!t) return MLPROF_ENOMEM;
  uint32_t n = name_of(c, name);
  if (n == MLPROF__NONE) return status(c);
  /* The profile's end is not known yet: written by profile_finish. */
  if (mlprof__grow(&c->open, &c->ocap, c->nopen + 1, sizeof *c->open))
    return MLPROF_ENOMEM;
  c->open[c->nopen++] = (open_zone){c->last_thread, n, depth, begin};
  return status(c);
}

/* Describes a pseudo-process the first time it is used: pre, " (label)"
 * when the name id label is known, post. Returns its track, 0 when out of
 * memory. */
static uint64_t pseudo_process(perfetto *c, uint64_t pid, const char *pre,
                               uint32_t label, const char *post) {
  int fresh;
  uint64_t u = process_uuid(c, pid, &fresh);
  if (!u || mlprof__map_get(&c->named, pid) != MLPROF__NONE) return u;
  if (mlprof__map_put(&c->named, pid, 0)) return 0;
  mlprof__out name;
  if (mlprof__out_open(&name, -1)) return 0;
  mlprof__out_str(&name, pre);
  uint32_t n = label ? name_of(c, label) : MLPROF__NONE;
  if (n != MLPROF__NONE) {
    mlprof__out_lit(&name, " (");
    mlprof__out_write(&name, name_text(c, n), c->names[n].len);
    mlprof__out_lit(&name, ")");
  }
  mlprof__out_str(&name, post);
  if (!name.err) describe_process(c, u, pid, name.buf, name.len, NULL);
  int err = name.err;
  mlprof__out_close(&name);
  return err ? 0 : u;
}

static int on_sample(void *ud, const mlprof__sample_row *row) {
  perfetto *c = ud;
  uint64_t t = mlprof__job_time(c->at.prof, row->t), pid, proc = 0;
  int rc = 0, fresh = 0;
  char pre[48];
  switch (row->subject) {
    case MLPROF__SUBJECT_PROCESS:
      pid = mlprof__trace_process_pid(&c->plan, c->at.host, row->id, t, &fresh,
                                      &rc);
      if (rc) return rc;
      if (fresh) {
        snprintf(pre, sizeof pre, "pid %llu", (unsigned long long)row->id);
        proc = pseudo_process(c, pid, pre, row->label, ", no profile");
      } else {
        proc = process_uuid(c, pid, &fresh);
      }
      break;
    case MLPROF__SUBJECT_GPU:
      pid = MLPROF__TRACE_GPU_PID(c->at.host, row->id);
      snprintf(pre, sizeof pre, "GPU %llu", (unsigned long long)row->id);
      proc = pseudo_process(c, pid, pre, row->label, "");
      break;
    case MLPROF__SUBJECT_SYSTEM:
      pid = MLPROF__TRACE_SYSTEM_PID(c->at.host);
      proc = pseudo_process(c, pid, "system", 0, "");
      break;
    default:
      return status(c); /* a subject from a newer version */
  }
  if (!proc) return MLPROF_ENOMEM;
  for (uint32_t i = 0; i < row->n; i++) {
    const mlprof__sample_measure *m = &row->m[i];
    if (!m->valid || !isfinite(m->value)) continue;
    uint32_t n = name_of(c, m->name);
    if (n == MLPROF__NONE) continue;
    uint64_t track = counter_uuid(c, proc, 'm', n);
    if (!track) return MLPROF_ENOMEM;
    counter_value(c, track, t, m->value, 0, 0);
  }
  return status(c);
}

static int on_alloc(void *ud, const mlprof__alloc *a) {
  return mlprof__trace_live_alloc(&((perfetto *)ud)->live, a);
}

static int on_alloc_free(void *ud, uint32_t tid, uint64_t t, uint64_t addr) {
  return mlprof__trace_live_free_at(&((perfetto *)ud)->live, tid, t, addr);
}

static void live_point(void *ud, uint64_t t, uint64_t bytes) {
  perfetto *c = ud;
  counter_value(c, c->live_track, mlprof__job_time(c->at.prof, t), 0, 1, bytes);
}

static int on_end(void *ud, uint64_t end_ns, uint64_t dropped,
                  uint64_t unmatched) {
  perfetto *c = ud;
  (void)dropped;
  (void)unmatched;
  c->at.end_seen = 1;
  c->at.end_ns = end_ns;
  return 0;
}

/* The profile's sequence and process track, before any event of it. */
static int profile_start(perfetto *c, size_t index) {
  const mlprof__job_profile *p = &c->job->profiles[index];
  c->seq = (uint32_t)index + 1;
  c->seq_started = 0;
  c->literals_interned = 0;
  memset(c->cats_interned, 0, sizeof c->cats_interned);
  int fresh;
  c->proc_uuid = process_uuid(c, c->at.pid, &fresh);
  if (!c->proc_uuid) return MLPROF_ENOMEM;
  char label[512];
  size_t order;
  mlprof__trace_process_label(c->job, index, label, sizeof label, &order);
  describe_process(c, c->proc_uuid, c->at.pid, label, strlen(label),
                   p->cmdline);
  return 0;
}

/* Completes the profile: the zones still open last until its end; every
 * span held is written. Leaves the per-profile state empty. Returns 0 or
 * MLPROF_ENOMEM. */
static int profile_finish(perfetto *c, const mlprof__read_report *rep) {
  int rc = 0;
  if (c->live.n) {
    static const char live[] = MLPROF__TRACE_LIVE_NAME;
    c->live_track = counter_track(c, c->proc_uuid, 'l', live, sizeof live - 1);
    rc = c->live_track ? mlprof__trace_live_replay(&c->live, live_point, c)
                       : MLPROF_ENOMEM;
  }
  uint64_t end = rep->last_ns;
  if (c->at.end_seen && c->at.end_ns > end) end = c->at.end_ns;
  for (size_t i = 0; i < c->nopen && !rc; i++) {
    const open_zone *z = &c->open[i];
    rc = hold_span(c, &c->threads[z->thread], z->name, z->depth, z->begin, end,
                   1);
    c->threads[z->thread].attach = 0;
  }
  for (size_t i = 0; i < c->nthreads; i++) {
    if (flush_thread(c, &c->threads[i])) rc = MLPROF_ENOMEM;
    free(c->threads[i].held);
    free(c->threads[i].args);
  }
  c->nthreads = c->nnames = c->nopen = 0;
  c->arena.len = 0;
  mlprof__map_clear(&c->ids);
  mlprof__map_clear(&c->tids);
  c->last_thread = MLPROF__NONE;
  return rc;
}

/* mlprof__trace_walk's emitter: a profile begins, and ends. */
static int walk_begin(void *ud, size_t i) { return profile_start(ud, i); }

static int walk_finish(void *ud, const mlprof__read_report *rep) {
  return profile_finish(ud, rep);
}

int mlprof__export_perfetto(const mlprof__job *job,
                            const mlprof__filter *filter, mlprof__out *o,
                            mlprof__chrome_result *res, char *err,
                            size_t errlen) {
  perfetto c;
  memset(&c, 0, sizeof c);
  c.o = o;
  c.job = job;
  c.span_bytes = res ? res->span_bytes : NULL;
  c.last_thread = MLPROF__NONE;
  uint64_t start = mlprof__out_pos(o);
  int rc = mlprof__out_open(&c.arena, -1);
  if (!rc && (rc = mlprof__out_open(&c.pk, -1))) mlprof__out_close(&c.arena);
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
      .end = on_end,
      .sample = on_sample,
      .alloc = on_alloc,
      .alloc_free = on_alloc_free,
  };
  const mlprof__trace_emitter e = {
      .ud = &c, .at = &c.at, .begin = walk_begin, .finish = walk_finish};
  rc = mlprof__trace_plan_init(&c.plan, job);
  if (rc)
    snprintf(err, errlen, "out of memory");
  else
    rc = mlprof__trace_walk(job, &c.plan, filter, &v, &e, o, res, err, errlen);
  if (res) {
    res->events = c.events;
    res->bytes = mlprof__out_pos(o) - start;
  }
  for (size_t i = 0; i < c.nthreads; i++) {
    free(c.threads[i].held);
    free(c.threads[i].args);
  }
  free(c.live.rec);
  mlprof__trace_plan_free(&c.plan);
  mlprof__map_clear(&c.procs);
  mlprof__map_clear(&c.named);
  mlprof__map_clear(&c.counters);
  mlprof__map_clear(&c.colls);
  mlprof__map_clear(&c.ids);
  mlprof__map_clear(&c.tids);
  free(c.threads);
  free(c.names);
  free(c.stack);
  free(c.begin_bytes);
  free(c.open);
  mlprof__out_close(&c.pk);
  mlprof__out_close(&c.arena);
  return rc;
}
