/* The distributed analysis (dist.h). One read of each profile gathers its
 * communication operations, its steps, its host syncs and its zones' time;
 * finish puts the ranks on rank 0's clock, matches the collectives across
 * ranks by group and seq and the point-to-point receives with their sends
 * by group, ranks, tag and order, and derives waiting, load balance,
 * bandwidths and findings. */
#include "dist.h"

#include <math.h>
#include <mlprof.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "../format/wire.h"
#include "findings.h"

/* Doubles made from hostile clocks (offsets, drift) may be anything: held
 * at the ends of the integer they become; NaN becomes 0. */
static int64_t to_i64(double v) {
  return v >= 0x1p63   ? INT64_MAX
         : v > -0x1p63 ? (int64_t)v
         : v < 0       ? INT64_MIN
                       : 0;
}

static uint64_t to_u64(double v) {
  return v >= 0x1p64 ? UINT64_MAX : v > 0 ? (uint64_t)v : 0;
}

static int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  return !__builtin_add_overflow(a, b, &r) ? r : b < 0 ? INT64_MIN : INT64_MAX;
}

static const char *const op_names[MLPROF__NOPS] = {
    "other",     "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
    "broadcast", "reduce",     "gather",     "scatter",        "scan",
    "barrier",   "send",       "recv",       "sendrecv"};

const char *mlprof__op_name(int op) {
  return op >= 0 && op < MLPROF__NOPS ? op_names[op] : "other";
}

int mlprof__op_of(const char *name, size_t len) {
  /* Lower case, no "MPI_" prefix, no namespace ("funcol." of torch's
   * functional collectives), no " done" suffix, no underscores. */
  char s[64];
  size_t n = 0;
  if (len >= 4 && !strncmp(name, "MPI_", 4)) name += 4, len -= 4;
  if (len >= 5 && !memcmp(name + len - 5, " done", 5)) len -= 5;
  for (size_t i = len; i > 0; i--)
    if (name[i - 1] == '.') {
      name += i, len -= i;
      break;
    }
  for (size_t i = 0; i < len && n < sizeof s - 1; i++)
    if (name[i] != '_')
      s[n++] =
          (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
  s[n] = '\0';
  static const struct {
    const char *prefix;
    int op;
  } kinds[] = {{"reducescatter", MLPROF__OP_REDUCE_SCATTER},
               {"allreduce", MLPROF__OP_ALL_REDUCE},
               {"allgather", MLPROF__OP_ALL_GATHER},
               {"alltoall", MLPROF__OP_ALL_TO_ALL},
               {"broadcast", MLPROF__OP_BROADCAST},
               {"bcast", MLPROF__OP_BROADCAST},
               {"reduce", MLPROF__OP_REDUCE},
               {"gather", MLPROF__OP_GATHER},
               {"scatter", MLPROF__OP_SCATTER},
               {"scan", MLPROF__OP_SCAN},
               {"barrier", MLPROF__OP_BARRIER},
               {"sendrecv", MLPROF__OP_SENDRECV},
               {"send", MLPROF__OP_SEND},
               {"ssend", MLPROF__OP_SEND},
               {"recv", MLPROF__OP_RECV}};
  /* A nonblocking MPI operation: Iallreduce, Isend. */
  for (int pass = 0; pass < 2; pass++) {
    const char *t = s + pass;
    if (pass && s[0] != 'i') break;
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
      if (mlprof__has_prefix(t, kinds[k].prefix)) return kinds[k].op;
  }
  return MLPROF__OP_OTHER;
}

double mlprof__op_bus_factor(int op, size_t n) {
  if (n == 0) return 0;
  switch (op) {
    case MLPROF__OP_ALL_REDUCE:
      return 2.0 * (double)(n - 1) / (double)n;
    case MLPROF__OP_ALL_GATHER:
    case MLPROF__OP_REDUCE_SCATTER:
    case MLPROF__OP_ALL_TO_ALL:
      return (double)(n - 1) / (double)n;
    case MLPROF__OP_BROADCAST:
    case MLPROF__OP_REDUCE:
    case MLPROF__OP_GATHER:
    case MLPROF__OP_SCATTER:
      return 1;
    default:
      return 0;
  }
}

static int is_collective(int op) {
  return op >= MLPROF__OP_ALL_REDUCE && op <= MLPROF__OP_BARRIER;
}

/* Whether no participant can leave before the last one entered. */
static int synchronises(int op) {
  return op == MLPROF__OP_ALL_REDUCE || op == MLPROF__OP_ALL_GATHER ||
         op == MLPROF__OP_REDUCE_SCATTER || op == MLPROF__OP_ALL_TO_ALL ||
         op == MLPROF__OP_BARRIER;
}

/* A string of the job (zone or group name), interned across profiles. */
typedef struct {
  char *s;
  int comm;
} jstr;

/* One profile's name id. */
typedef struct {
  uint32_t str;  /* index of its jstr */
  int op;        /* communication zones: MLPROF__OP_*, else -1 */
  uint32_t call; /* communication zones: the jstr of the call's name (for
                    "NAME done", NAME's) */
  int done;      /* "NAME done": a nonblocking operation's completion */
  int nb;        /* a nonblocking operation's start (MPI_Irecv, irecv) */
  int sync;      /* "host sync ...": the host waited for the device */
  uint8_t kind;
  uint8_t known; /* announced (an empty slot of the table is not) */
  uint8_t used;  /* a rank's zone that a span named: ns is its time */
  uint64_t ns;
} pname;

/* A rank's time in a zone that is not communication (the zones' used
 * names at the end of its profile), for zone_diffs. */
typedef struct {
  uint32_t str, rank;
  uint64_t ns;
} ztime;

/* A communication span waiting for the metadata and units that follow it
 * on its thread. */
typedef struct {
  uint32_t tid;
  int live;
  int op, done;
  uint32_t call;
  uint64_t b, e, bytes, seq;
  int has_seq;
  uint32_t group;
  int nb;
  int64_t peer, root, source, tag, rtag; /* -1: none */
  /* The last blocking communication interval pushed from this thread. */
  uint64_t last_b, last_e;
  int has_last;
} pending;

typedef struct {
  uint64_t b, e;
} ival;

/* A collective's call zone or a "done" span, in the profile being read:
 * the name of the call, and for a call zone its instance's key. */
typedef struct {
  uint32_t call, group;
  uint64_t seq, b, e;
} acall;

typedef struct {
  uint64_t b, e, comm, wait;
  uint64_t zoned; /* covered by a zone of depth 0 on the step thread */
} rstep;

/* A zone of depth 0 in the profile being read, for the time outside zones
 * on the step thread (kept until that thread is known). */
typedef struct {
  uint32_t tid;
  ival at;
} topspan;

/* A collective: one instance of (group, seq). Its participants are parts,
 * one per rank that took part, so that it costs what the files hold
 * whatever number of ranks they claim. */
typedef struct {
  int op;
  uint32_t group;
  int64_t root;
  uint64_t bytes; /* summed over the participants */
  uint32_t nparts;
  int matched;  /* set by collectives */
  size_t last;  /* while reading: its latest part */
  size_t first; /* once indexed (index_parts): its parts are
                   parts[order[first ... first + nparts - 1]], by rank */
} inst;

/* A rank's part in an instance: monotonic ns; once matched, exit is where
 * the rank's waiting ends. */
typedef struct {
  uint32_t inst, rank;
  int64_t enter, exit;
} part;

/* A point-to-point send or receive (the receive half of a sendrecv is one
 * of its own), kept until every rank is read to match the two sides. */
typedef struct {
  uint32_t group;
  uint8_t recv;
  uint8_t blocked;       /* receives: [b, e] is where it blocked */
  uint8_t nb;            /* an irecv, until its completion is found */
  int64_t src, dst, tag; /* world ranks, tag -1 none */
  int64_t post;          /* monotonic ns: its call (the order of posting) */
  int64_t b, e;          /* monotonic ns: the send's call; the receive's
                            blocking call (an irecv's: the wait that
                            completed it) */
  uint64_t bytes;        /* sends' */
  int64_t wait;          /* receives, once matched: waiting for the sender */
} p2p;

typedef struct {
  int profile;
  int64_t start_mono, start_wall;
  const char *host;
  rstep *steps;
  size_t nsteps;
  uint64_t async_ns, waitzone_ns, exposed_ns;
  uint64_t end_ns;
  int zoned; /* steps[].zoned is known (the profile marked steps) */
  uint64_t syncs, sync_ns;
  size_t part0, part1; /* its parts, as made: parts[part0, part1) */
} rankst;

struct mlprof__dist_builder {
  const mlprof__job *job;
  mlprof__dist *d;
  size_t nranks;
  rankst *ranks;
  jstr *strs;
  size_t nstrs, strcap;
  mlprof__map str_index;
  inst *insts;
  size_t ninsts, instcap;
  mlprof__map inst_index;
  part *parts;
  size_t nparts, partcap;
  uint32_t *order; /* the parts by instance, then rank (index_parts) */
  ztime *zt;
  size_t nzt, ztcap;
  uint64_t unmatched;
  p2p *p2ps;
  size_t np2p, p2pcap;
  /* The profile being read. */
  int64_t rank; /* -1: not a rank's */
  /* Its names: by id while the ids are about as dense as the names
   * announced (a writer's are 1, 2, ...), in far past that (a damaged or
   * hostile id), so that the table costs what the file holds. */
  pname *names;
  size_t nnames, namecap, announced;
  pname *far;
  size_t nfar, farcap;
  mlprof__map far_index;
  pending *pend;
  size_t npend, pendcap;
  ival *comm;
  size_t ncomm, commcap;
  topspan *top;
  size_t ntop, topcap;
  ival *dones, *waits;   /* irecvs' completions, MPI_Wait* zones */
  acall *calls, *cdones; /* collectives' call zones and "done" spans */
  size_t ncalls, callcap, ncdones, cdonecap;
  size_t ndones, donecap, nwaits, waitcap;
  size_t first_p2p; /* the profile's first p2ps */
  uint64_t *marks;
  size_t nmarks, markcap;
  uint64_t step_end;
  int has_step_end;
  uint32_t step_tid;
  int has_step_tid;
  uint64_t async_ns, waitzone_ns, end_ns;
  uint64_t ops; /* communication operations seen */
  size_t profile;
};

/* The index of the string s (n bytes), added when new; MLPROF__NONE when
 * out of memory. */
static uint32_t intern(mlprof__dist_builder *b, const char *s, size_t n) {
  uint64_t key = mlprof__hash(s, n, MLPROF__HASH_START);
  for (;; key++) {
    uint32_t i = mlprof__map_get(&b->str_index, key);
    if (i == MLPROF__NONE) break;
    if (strlen(b->strs[i].s) == n && !memcmp(b->strs[i].s, s, n)) return i;
  }
  if (b->nstrs >= MLPROF__NONE - 1 ||
      mlprof__grow(&b->strs, &b->strcap, b->nstrs + 1, sizeof *b->strs))
    return MLPROF__NONE;
  char *c = mlprof__dup(s, n);
  if (!c || mlprof__map_put(&b->str_index, key, (uint32_t)b->nstrs)) {
    free(c);
    return MLPROF__NONE;
  }
  b->strs[b->nstrs] = (jstr){.s = c};
  return (uint32_t)b->nstrs++;
}

static pname no_name = {.str = MLPROF__NONE, .op = -1};

/* The entry of name id in the profile being read; no_name (not to be
 * written) when it was not announced. */
static inline pname *pname_of(mlprof__dist_builder *b, uint32_t id) {
  if (id < b->nnames && b->names[id].known) return &b->names[id];
  if (!b->nfar) return &no_name;
  uint32_t i = mlprof__map_get(&b->far_index, id);
  return i == MLPROF__NONE ? &no_name : &b->far[i];
}

/* Room for a new name id: a slot of the table by id while it grows by no
 * more than about two slots a name, else a place in far. NULL when memory
 * is short. */
static pname *pname_new(mlprof__dist_builder *b, uint32_t id) {
  if (id < b->nnames || (size_t)id < 2 * b->announced + 256) {
    if (mlprof__grow(&b->names, &b->namecap, (size_t)id + 1, sizeof *b->names))
      return NULL;
    while (b->nnames <= id) b->names[b->nnames++] = no_name;
    return &b->names[id];
  }
  if (b->nfar >= MLPROF__NONE - 1 ||
      mlprof__grow(&b->far, &b->farcap, b->nfar + 1, sizeof *b->far) ||
      mlprof__map_put(&b->far_index, id, (uint32_t)b->nfar))
    return NULL;
  return &b->far[b->nfar++];
}

static int on_name(void *ud, const mlprof__name *n) {
  mlprof__dist_builder *b = ud;
  pname *p = pname_new(b, n->id);
  if (!p) return MLPROF_ENOMEM;
  b->announced++;
  *p = (pname){.str = MLPROF__NONE, .op = -1, .kind = n->kind, .known = 1};
  if (n->kind != MLPROF__NAME_ZONE && n->kind != MLPROF__NAME_STRING &&
      n->kind != MLPROF__NAME_UNITS)
    return 0;
  if ((p->str = intern(b, n->name, n->name_len)) == MLPROF__NONE)
    return MLPROF_ENOMEM;
  if (n->kind == MLPROF__NAME_ZONE && n->category == MLPROF_CAT_COMM) {
    p->op = mlprof__op_of(n->name, n->name_len);
    p->done = n->name_len > 5 && !memcmp(n->name + n->name_len - 5, " done", 5);
    const char *s =
        n->name_len > 4 && !memcmp(n->name, "MPI_", 4) ? n->name + 4 : n->name;
    p->nb = (*s == 'I' || *s == 'i') && p->op == MLPROF__OP_RECV;
    b->strs[p->str].comm = 1;
    p->call = p->done ? intern(b, n->name, n->name_len - 5) : p->str;
    if (p->call == MLPROF__NONE) return MLPROF_ENOMEM;
  }
  p->sync = n->kind == MLPROF__NAME_ZONE && n->name_len > 10 &&
            !memcmp(n->name, "host sync ", 10);
  return 0;
}

static const char *str_of(mlprof__dist_builder *b, uint32_t id) {
  const pname *n = pname_of(b, id);
  return n->str == MLPROF__NONE ? "" : b->strs[n->str].s;
}

static pending *pending_of(mlprof__dist_builder *b, uint32_t tid) {
  for (size_t i = 0; i < b->npend; i++)
    if (b->pend[i].tid == tid) return &b->pend[i];
  if (mlprof__grow(&b->pend, &b->pendcap, b->npend + 1, sizeof *b->pend))
    return NULL;
  b->pend[b->npend] = (pending){.tid = tid};
  return &b->pend[b->npend++];
}

/* Keeps the send (recv 0) or receive of p from src to dst. */
static int add_p2p(mlprof__dist_builder *b, const pending *p, int recv,
                   int64_t src, int64_t dst, int64_t tag) {
  if (mlprof__grow(&b->p2ps, &b->p2pcap, b->np2p + 1, sizeof *b->p2ps))
    return MLPROF_ENOMEM;
  int64_t mono = b->ranks[b->rank].start_mono;
  b->p2ps[b->np2p++] = (p2p){.group = p->group,
                             .recv = (uint8_t)recv,
                             .blocked = (uint8_t)(recv && !p->nb),
                             .nb = (uint8_t)(recv && p->nb),
                             .src = src,
                             .dst = dst,
                             .tag = tag,
                             .post = mono + (int64_t)p->b,
                             .b = mono + (int64_t)p->b,
                             .e = mono + (int64_t)p->e,
                             .bytes = recv ? 0 : p->bytes};
  return 0;
}

static int add_ival(ival **v, size_t *n, size_t *cap, uint64_t lo,
                    uint64_t hi) {
  if (mlprof__grow(v, cap, *n + 1, sizeof **v)) return MLPROF_ENOMEM;
  (*v)[(*n)++] = (ival){lo, hi};
  return 0;
}

static int add_inst(mlprof__dist_builder *b, const pending *p) {
  if (p->group == MLPROF__NONE || b->rank < 0 ||
      (uint64_t)b->rank >= b->nranks || p->seq >= (1ull << 40))
    return 0;
  uint64_t key = (uint64_t)p->group << 40 | p->seq;
  uint32_t i = mlprof__map_get(&b->inst_index, key);
  if (i == MLPROF__NONE) {
    if (b->ninsts >= MLPROF__NONE - 1 ||
        mlprof__grow(&b->insts, &b->instcap, b->ninsts + 1, sizeof *b->insts))
      return MLPROF_ENOMEM;
    inst *x = &b->insts[b->ninsts];
    *x = (inst){.op = p->op, .group = p->group, .root = p->root};
    if (mlprof__map_put(&b->inst_index, key, (uint32_t)b->ninsts))
      return MLPROF_ENOMEM;
    i = (uint32_t)b->ninsts++;
  }
  inst *x = &b->insts[i];
  int64_t mono = b->ranks[b->rank].start_mono;
  int64_t en = mono + (int64_t)p->b, ex = mono + (int64_t)p->e;
  uint32_t r = (uint32_t)b->rank;
  /* The same collective twice on a rank (a damaged profile): keep the
   * longer. A rank's parts are made while its profile is read, so its part
   * in x, when it has one, is x's latest. A nonblocking one's completion
   * comes from pair_done. */
  if (x->nparts && b->parts[x->last].rank == r) {
    part *q = &b->parts[x->last];
    if (ex - en > q->exit - q->enter) {
      q->enter = en;
      q->exit = ex;
    }
    return 0;
  }
  if (b->nparts >= MLPROF__NONE ||
      mlprof__grow(&b->parts, &b->partcap, b->nparts + 1, sizeof *b->parts))
    return MLPROF_ENOMEM;
  b->parts[b->nparts] = (part){.inst = i, .rank = r, .enter = en, .exit = ex};
  x->last = b->nparts++;
  b->ranks[r].part1 = b->nparts;
  x->nparts++;
  x->bytes += p->bytes;
  return 0;
}

/* Keeps a collective's call zone or "done" span of a rank's profile, for
 * pair_done. */
static int keep_call(mlprof__dist_builder *b, const pending *p) {
  if (b->rank < 0 || (uint64_t)b->rank >= b->nranks) return 0;
  acall c = {
      .call = p->call, .group = p->group, .seq = p->seq, .b = p->b, .e = p->e};
  if (p->done) {
    if (mlprof__grow(&b->cdones, &b->cdonecap, b->ncdones + 1,
                     sizeof *b->cdones))
      return MLPROF_ENOMEM;
    b->cdones[b->ncdones++] = c;
  } else {
    if (mlprof__grow(&b->calls, &b->callcap, b->ncalls + 1, sizeof *b->calls))
      return MLPROF_ENOMEM;
    b->calls[b->ncalls++] = c;
  }
  return 0;
}

/* What the span in p says, once its metadata and units are known. */
static int flush(mlprof__dist_builder *b, pending *p) {
  if (!p->live) return 0;
  p->live = 0;
  uint64_t dur = p->e - p->b;
  b->ops++;
  if (p->done) {
    b->async_ns += dur;
  } else {
    if (p->op == MLPROF__OP_OTHER) b->waitzone_ns += dur;
    /* A communication zone around the previous one replaces it. */
    if (p->has_last && b->ncomm && p->b <= p->last_b && p->e >= p->last_e &&
        b->comm[b->ncomm - 1].b == p->last_b &&
        b->comm[b->ncomm - 1].e == p->last_e)
      b->ncomm--;
    if (mlprof__grow(&b->comm, &b->commcap, b->ncomm + 1, sizeof *b->comm))
      return MLPROF_ENOMEM;
    b->comm[b->ncomm++] = (ival){p->b, p->e};
    p->last_b = p->b;
    p->last_e = p->e;
    p->has_last = 1;
  }
  int rc = 0, me = b->rank >= 0;
  if (p->done) {
    if (p->op == MLPROF__OP_RECV)
      rc = add_ival(&b->dones, &b->ndones, &b->donecap, p->b, p->e);
  } else if (p->op == MLPROF__OP_OTHER)
    rc = add_ival(&b->waits, &b->nwaits, &b->waitcap, p->b, p->e);
  else if (p->op == MLPROF__OP_SEND && p->peer >= 0 && me)
    rc = add_p2p(b, p, 0, b->rank, p->peer, p->tag);
  else if (p->op == MLPROF__OP_RECV && p->peer >= 0 && me)
    rc = add_p2p(b, p, 1, p->peer, b->rank, p->tag);
  else if (p->op == MLPROF__OP_SENDRECV && me) {
    if (p->peer >= 0) rc = add_p2p(b, p, 0, b->rank, p->peer, p->tag);
    if (!rc && p->source >= 0)
      rc = add_p2p(b, p, 1, p->source, b->rank, p->rtag);
  }
  if (rc) return rc;
  if (is_collective(p->op) && (p->done || p->has_seq) && keep_call(b, p))
    return MLPROF_ENOMEM;
  if (is_collective(p->op) && p->has_seq) return add_inst(b, p);
  return 0;
}

static int on_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin, uint64_t end) {
  mlprof__dist_builder *b = ud;
  pending *p = pending_of(b, tid);
  if (!p) return MLPROF_ENOMEM;
  int rc = flush(b, p);
  /* A time past MLPROF__CLOCK_MAX is no clock's (job.h): left out, so
   * that the sums below stay within int64_t. */
  if (rc || end < begin || end > MLPROF__CLOCK_MAX) return rc;
  if (!depth && b->rank >= 0 && tid < MLPROF__TRACK_TID_BASE &&
      (!b->has_step_tid || tid == b->step_tid)) {
    if (mlprof__grow(&b->top, &b->topcap, b->ntop + 1, sizeof *b->top))
      return MLPROF_ENOMEM;
    b->top[b->ntop++] = (topspan){tid, {begin, end}};
  }
  pname *n = pname_of(b, name);
  if (n->op >= 0) {
    p->live = 1;
    p->op = n->op;
    p->done = n->done;
    p->nb = n->nb;
    p->call = n->call;
    p->b = begin;
    p->e = end;
    p->bytes = p->seq = 0;
    p->has_seq = 0;
    p->group = MLPROF__NONE;
    p->peer = p->root = p->source = p->tag = p->rtag = -1;
    return 0;
  }
  if (n->str == MLPROF__NONE || b->rank < 0 || (uint64_t)b->rank >= b->nranks)
    return 0;
  if (n->sync) {
    b->ranks[b->rank].syncs++;
    b->ranks[b->rank].sync_ns += end - begin;
  }
  n->used = 1;
  n->ns += end - begin;
  return 0;
}

static int64_t parse_i64(const char *s, int64_t dflt) {
  char *end;
  long long v = strtoll(s, &end, 10);
  return end == s ? dflt : (int64_t)v;
}

static int on_span_meta(void *ud, uint32_t tid, uint32_t key, uint32_t value) {
  mlprof__dist_builder *b = ud;
  pending *p = pending_of(b, tid);
  if (!p) return MLPROF_ENOMEM;
  if (!p->live) return 0;
  const char *k = str_of(b, key), *v = str_of(b, value);
  if (!strcmp(k, "group") || !strcmp(k, "comm"))
    p->group = pname_of(b, value)->str;
  else if (!strcmp(k, "peer"))
    p->peer = parse_i64(v, -1);
  else if (!strcmp(k, "root"))
    p->root = parse_i64(v, -1);
  else if (!strcmp(k, "source"))
    p->source = parse_i64(v, -1);
  else if (!strcmp(k, "tag"))
    p->tag = parse_i64(v, -1);
  else if (!strcmp(k, "recvtag"))
    p->rtag = parse_i64(v, -1);
  return 0;
}

static int on_span_units(void *ud, uint32_t tid, uint32_t name, uint64_t n) {
  mlprof__dist_builder *b = ud;
  pending *p = pending_of(b, tid);
  if (!p) return MLPROF_ENOMEM;
  if (!p->live) return 0;
  const char *u = str_of(b, name);
  if (!strcmp(u, "bytes")) p->bytes = n;
  if (!strcmp(u, "seq")) {
    p->seq = n;
    p->has_seq = 1;
  }
  return 0;
}

static int on_step(void *ud, uint32_t tid, uint64_t t) {
  mlprof__dist_builder *b = ud;
  if (!b->has_step_tid) {
    b->step_tid = tid;
    b->has_step_tid = 1;
  }
  if (tid != b->step_tid) return 0;
  if (mlprof__grow(&b->marks, &b->markcap, b->nmarks + 1, sizeof *b->marks))
    return MLPROF_ENOMEM;
  b->marks[b->nmarks++] = t;
  b->has_step_end = 0;
  return 0;
}

static int on_step_end(void *ud, uint32_t tid, uint64_t t) {
  mlprof__dist_builder *b = ud;
  if (b->has_step_tid && tid == b->step_tid) {
    b->step_end = t;
    b->has_step_end = 1;
  }
  return 0;
}

static int on_end(void *ud, uint64_t end_ns, uint64_t dropped,
                  uint64_t unmatched) {
  (void)dropped;
  (void)unmatched;
  mlprof__dist_builder *b = ud;
  b->end_ns = end_ns;
  return 0;
}

void mlprof__dist_abort(mlprof__dist_builder *b) {
  if (!b) return;
  for (size_t i = 0; i < b->nstrs; i++) free(b->strs[i].s);
  free(b->strs);
  mlprof__map_clear(&b->str_index);
  free(b->insts);
  mlprof__map_clear(&b->inst_index);
  free(b->parts);
  free(b->order);
  free(b->zt);
  free(b->p2ps);
  free(b->dones);
  free(b->waits);
  for (size_t r = 0; r < b->nranks; r++) free(b->ranks[r].steps);
  free(b->ranks);
  free(b->names);
  free(b->far);
  mlprof__map_clear(&b->far_index);
  free(b->pend);
  free(b->comm);
  free(b->top);
  free(b->calls);
  free(b->cdones);
  free(b->marks);
  free(b);
}

mlprof__dist_builder *mlprof__dist_begin(const mlprof__job *job,
                                         mlprof__dist *d) {
  memset(d, 0, sizeof *d);
  d->slowest_link = -1;
  d->straggler = -1;
  mlprof__dist_builder *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->job = job;
  b->d = d;
  /* Ranks 0 to the largest rank or world size claimed: the analysis needs a
   * profile of each, so a job claiming more ranks than it has profiles has
   * none to analyse (and no table is sized by the claim). */
  int64_t max = -1;
  for (size_t i = 0; i < job->count; i++) {
    const mlprof__job_profile *p = &job->profiles[i];
    if (p->rank > max) max = p->rank;
    if (p->world_size > max + 1) max = p->world_size - 1;
  }
  b->nranks = max >= 0 && (uint64_t)max < job->count && max < (1 << 20)
                  ? (size_t)(max + 1)
                  : 0;
  if (b->nranks && !(b->ranks = calloc(b->nranks, sizeof *b->ranks))) {
    mlprof__dist_abort(b);
    return NULL;
  }
  for (size_t r = 0; r < b->nranks; r++) b->ranks[r].profile = -1;
  return b;
}

void mlprof__dist_profile_begin(mlprof__dist_builder *b, size_t index,
                                mlprof__visitor *v) {
  const mlprof__job_profile *p = &b->job->profiles[index];
  b->profile = index;
  b->rank = p->rank < (int64_t)b->nranks ? p->rank : -1;
  /* A rank's children (data loader workers) share its rank: the first
   * profile of a rank holds its operations. */
  if (b->rank >= 0 && b->ranks[b->rank].profile >= 0) b->rank = -1;
  b->nnames = b->npend = b->ncomm = b->nmarks = b->ndones = b->nwaits = 0;
  b->ntop = 0;
  b->announced = b->nfar = 0;
  mlprof__map_clear(&b->far_index);
  b->ncalls = b->ncdones = 0;
  b->first_p2p = b->np2p;
  /* Only the ranks of a job of several hold anything to analyse: the other
   * profiles are not read for it (their step marks alone would cost 8 bytes
   * each). */
  if (b->rank < 0 || b->nranks < 2) {
    *v = (mlprof__visitor){.ud = b};
    return;
  }
  b->has_step_end = b->has_step_tid = 0;
  b->async_ns = b->waitzone_ns = b->end_ns = b->ops = 0;
  if (b->rank >= 0) {
    /* Held within MLPROF__CLOCK_MAX, as the times added to them. */
    rankst *r = &b->ranks[b->rank];
    r->start_mono =
        (int64_t)(p->start_mono_ns < MLPROF__CLOCK_MAX ? p->start_mono_ns
                                                       : MLPROF__CLOCK_MAX);
    r->start_wall =
        (int64_t)(p->start_wall_ns < MLPROF__CLOCK_MAX ? p->start_wall_ns
                                                       : MLPROF__CLOCK_MAX);
    r->part0 = r->part1 = b->nparts;
  }
  *v = (mlprof__visitor){.ud = b,
                         .name = on_name,
                         .span = on_span,
                         .span_meta = on_span_meta,
                         .span_units = on_span_units,
                         .step = on_step,
                         .step_end = on_step_end,
                         .end = on_end};
}

static int cmp_ival(const void *a, const void *b) {
  const ival *x = a, *y = b;
  return (x->b > y->b) - (x->b < y->b);
}

/* The step of rs holding local time t, or -1. */
typedef struct {
  const ival *v;
  uint64_t t;
} ival_key;

typedef struct {
  const rstep *v;
  uint64_t t;
} step_key;

/* The steps that end by t come first. */
static int step_ends_by(const void *ctx, size_t i) {
  const step_key *k = ctx;
  return k->v[i].e <= k->t;
}

/* The intervals that begin by t come first (sorted by begin). */
static int begins_by(const void *ctx, size_t i) {
  const ival_key *k = ctx;
  return k->v[i].b <= k->t;
}

static long step_at(const rankst *rs, uint64_t t) {
  step_key key = {rs->steps, t};
  size_t lo = mlprof__lower_bound(0, rs->nsteps, &key, step_ends_by);
  return lo < rs->nsteps && rs->steps[lo].b <= t ? (long)lo : -1;
}

/* The last of v (n, sorted by begin) that begins at or before t, or -1. */
static long last_at(const ival *v, size_t n, uint64_t t) {
  ival_key key = {v, t};
  return (long)mlprof__lower_bound(0, n, &key, begins_by) - 1;
}

/* Where the profile's irecvs blocked: each completion ("MPI_Irecv done",
 * from the call to the completion) belongs to the irecv called at its
 * begin, and the receiver blocked in the MPI_Wait* zone that began after
 * the call and ended with the completion. An irecv completed by a test, or
 * by a wait of no zone (torch's), did not block. */
static void irecvs(mlprof__dist_builder *b) {
  if (b->ndones > 1)
    mlprof__sort(b->dones, b->ndones, sizeof *b->dones, cmp_ival);
  if (b->nwaits > 1)
    mlprof__sort(b->waits, b->nwaits, sizeof *b->waits, cmp_ival);
  uint64_t mono = (uint64_t)b->ranks[b->rank].start_mono, prev = 0;
  for (size_t i = b->first_p2p; i < b->np2p; i++) {
    p2p *x = &b->p2ps[i];
    if (!x->nb) continue;
    x->nb = 0;
    uint64_t post = (uint64_t)x->post - mono;
    /* The call's zone begins just after its completion span, after the
     * previous call's. */
    long d = last_at(b->dones, b->ndones, post);
    int mine = d >= 0 && b->dones[d].b >= prev;
    prev = post + 1;
    if (!mine) continue;
    uint64_t done = b->dones[d].e;
    long w = last_at(b->waits, b->nwaits, done);
    if (w < 0 || b->waits[w].b < post || b->waits[w].e > done) continue;
    x->b = (int64_t)(mono + b->waits[w].b);
    x->e = (int64_t)(mono + b->waits[w].e);
    x->blocked = 1;
  }
}

static int cmp_acall(const void *a, const void *b) {
  const acall *x = a, *y = b;
  if (x->call != y->call) return (x->call > y->call) - (x->call < y->call);
  return (x->b > y->b) - (x->b < y->b);
}

/* A nonblocking collective's call zone is its start only: its "done" span,
 * on a track, ends at its completion. The done span carries no group and
 * no seq, so it is paired with its call zone here, by time. Both recorders
 * (python/mlprof/distributed.py's wrapper, src/intercept/mpi.c's ISTART)
 * read the done span's begin just before the call zone begins, after the
 * thread's previous call returned: a done span belongs to the first
 * unpaired call zone of the same name (begin order) that ends at or after
 * its begin. Ending, not beginning, there: the zones' clock (the TSC) and
 * the done spans' (CLOCK_MONOTONIC) may differ by a few ns, less than a
 * call lasts. The completion becomes the rank's exit from the
 * collective's instance (collectives then counts the wait up to it). */
static void pair_done(mlprof__dist_builder *b) {
  if (!b->ncdones) return;
  if (b->ncalls > 1)
    mlprof__sort(b->calls, b->ncalls, sizeof *b->calls, cmp_acall);
  if (b->ncdones > 1)
    mlprof__sort(b->cdones, b->ncdones, sizeof *b->cdones, cmp_acall);
  uint32_t r = (uint32_t)b->rank;
  size_t i = 0;
  int64_t mono = b->ranks[r].start_mono;
  for (size_t k = 0; k < b->ncdones; k++) {
    const acall *d = &b->cdones[k];
    while (i < b->ncalls &&
           (b->calls[i].call < d->call ||
            (b->calls[i].call == d->call && b->calls[i].e < d->b)))
      i++;
    if (i == b->ncalls || b->calls[i].call != d->call) continue;
    const acall *c = &b->calls[i++];
    if (c->group == MLPROF__NONE || c->seq >= (1ull << 40)) continue;
    uint32_t at =
        mlprof__map_get(&b->inst_index, (uint64_t)c->group << 40 | c->seq);
    if (at == MLPROF__NONE || !b->insts[at].nparts) continue;
    part *q = &b->parts[b->insts[at].last];
    if (q->rank != r) continue;
    int64_t ex = mono + (int64_t)d->e;
    if (ex > q->exit) q->exit = ex;
  }
}

/* Keeps the rank's time in each zone it named (the names of its profile
 * that a span used). */
static int keep_zone_times(mlprof__dist_builder *b, const pname *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!v[i].used) continue;
    if (mlprof__grow(&b->zt, &b->ztcap, b->nzt + 1, sizeof *b->zt))
      return MLPROF_ENOMEM;
    b->zt[b->nzt++] = (ztime){v[i].str, (uint32_t)b->rank, v[i].ns};
  }
  return 0;
}

/* Adds the union of v (n, sorted by begin) to the field at offset of each
 * step of rs it overlaps, cut at the steps' edges; returns the union's
 * length. */
static uint64_t cut_by_steps(rankst *rs, const ival *v, size_t n,
                             size_t offset) {
  uint64_t cb = 0, ce = 0, total = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i < n && v[i].b <= ce && i) {
      if (v[i].e > ce) ce = v[i].e;
      continue;
    }
    if (i) {
      total += ce - cb;
      long k0 = step_at(rs, cb);
      for (long k = k0 >= 0 ? k0 : 0;
           k < (long)rs->nsteps && rs->steps[k].b < ce; k++) {
        uint64_t lo = cb > rs->steps[k].b ? cb : rs->steps[k].b;
        uint64_t hi = ce < rs->steps[k].e ? ce : rs->steps[k].e;
        if (hi > lo) *(uint64_t *)((char *)&rs->steps[k] + offset) += hi - lo;
      }
    }
    if (i < n) {
      cb = v[i].b;
      ce = v[i].e;
    }
  }
  return total;
}

int mlprof__dist_profile_end(mlprof__dist_builder *b) {
  for (size_t i = 0; i < b->npend; i++)
    if (flush(b, &b->pend[i])) return MLPROF_ENOMEM;
  if (b->rank < 0) return 0;
  if (keep_zone_times(b, b->names, b->nnames) ||
      keep_zone_times(b, b->far, b->nfar))
    return MLPROF_ENOMEM;
  if (!b->ops) return 0;
  pair_done(b);
  rankst *rs = &b->ranks[b->rank];
  const mlprof__job_profile *p = &b->job->profiles[b->profile];
  rs->profile = (int)b->profile;
  rs->host = p->hostname;
  rs->async_ns = b->async_ns;
  rs->waitzone_ns = b->waitzone_ns;
  rs->end_ns = b->end_ns;
  /* Steps between consecutive marks, the last to its end when marked;
   * without marks, the whole run is one step. */
  size_t n = b->nmarks ? b->nmarks - !b->has_step_end : 1;
  if (!(rs->steps = calloc(n ? n : 1, sizeof *rs->steps))) return MLPROF_ENOMEM;
  if (!b->nmarks) {
    rs->steps[0] = (rstep){.b = 0, .e = b->end_ns};
  } else {
    for (size_t k = 0; k < n; k++)
      rs->steps[k] =
          (rstep){.b = b->marks[k],
                  .e = k + 1 < b->nmarks ? b->marks[k + 1] : b->step_end};
  }
  rs->nsteps = n;
  irecvs(b);
  if (b->ncomm > 1) mlprof__sort(b->comm, b->ncomm, sizeof *b->comm, cmp_ival);
  rs->exposed_ns = cut_by_steps(rs, b->comm, b->ncomm, offsetof(rstep, comm));
  /* The zones of depth 0 on the step thread: what the steps spent in none
   * of them is the time outside zones. */
  if (b->nmarks) {
    ival *v = malloc((b->ntop ? b->ntop : 1) * sizeof *v);
    if (!v) return MLPROF_ENOMEM;
    size_t nt = 0;
    int sorted = 1;
    for (size_t i = 0; i < b->ntop; i++)
      if (b->top[i].tid == b->step_tid) {
        v[nt] = b->top[i].at;
        sorted &= !nt || v[nt - 1].b <= v[nt].b;
        nt++;
      }
    /* A thread's zones of depth 0 come in order already (one ends before
     * the next begins): sorted only when not. */
    if (nt > 1 && !sorted) mlprof__sort(v, nt, sizeof *v, cmp_ival);
    cut_by_steps(rs, v, nt, offsetof(rstep, zoned));
    free(v);
    rs->zoned = 1;
  }
  return 0;
}

/* ---- finish ---------------------------------------------------------- */

/* Rank r's monotonic time t on rank 0's clock. */
static double aligned(const mlprof__dist_rank *r, int64_t t) {
  int64_t c = t < (int64_t)r->at_ns       ? (int64_t)r->at_ns
              : t > (int64_t)r->at_end_ns ? (int64_t)r->at_end_ns
                                          : t;
  return (double)t + r->offset_ns + r->drift * (double)(c - (int64_t)r->at_ns);
}

static int clocks(mlprof__dist_builder *b) {
  mlprof__dist *d = b->d;
  const rankst *r0 = &b->ranks[0];
  for (size_t r = 0; r < b->nranks; r++) {
    const rankst *rs = &b->ranks[r];
    mlprof__dist_rank *x = &d->ranks[r];
    if (r == 0) {
      x->clock = 1;
      continue;
    }
    /* Measured: the job read the offsets and the drift between them. */
    const mlprof__job_profile *p =
        rs->profile >= 0 ? &b->job->profiles[rs->profile] : NULL;
    if (p && (p->has_clock[0] || p->has_clock[1])) {
      int k = p->has_clock[0] ? 0 : 1;
      x->clock = 1;
      x->offset_ns = (double)p->clock_off_ns[k];
      x->at_ns = x->at_end_ns = (uint64_t)p->clock_at_ns[k];
      x->uncertainty_ns = (double)p->clock_unc_ns[k];
      if (p->drift_to_ns > p->drift_from_ns) {
        x->drift = p->drift;
        x->at_end_ns = (uint64_t)p->clock_at_ns[1];
        if (p->clock_unc_ns[1] > p->clock_unc_ns[0])
          x->uncertainty_ns = (double)p->clock_unc_ns[1];
      }
      continue;
    }
    /* Unmeasured: one host shares CLOCK_MONOTONIC; across hosts, the wall
     * clocks at the starts. */
    x->uncertainty_ns = INFINITY;
    if (rs->host && r0->host && strcmp(rs->host, r0->host))
      x->offset_ns = (double)((rs->start_wall - rs->start_mono) -
                              (r0->start_wall - r0->start_mono));
  }
  /* Narrow each rank's offset by the collectives that synchronise it with
   * rank 0: it cannot leave one before rank 0 entered, nor enter after
   * rank 0 left. */
  double *lo = malloc(2 * b->nranks * sizeof *lo), *hi = lo + b->nranks;
  if (!lo) return MLPROF_ENOMEM;
  for (size_t r = 0; r < b->nranks; r++) {
    lo[r] = -INFINITY;
    hi[r] = INFINITY;
  }
  for (size_t i = 0; i < b->ninsts; i++) {
    const inst *c = &b->insts[i];
    const uint32_t *o = &b->order[c->first]; /* by rank: rank 0's first */
    if (!synchronises(c->op) || !c->nparts || b->parts[o[0]].rank != 0)
      continue;
    double e0 = (double)b->parts[o[0]].enter, x0 = (double)b->parts[o[0]].exit;
    for (uint32_t k = 1; k < c->nparts; k++) {
      const part *q = &b->parts[o[k]];
      uint32_t r = q->rank;
      double er = aligned(&d->ranks[r], q->enter);
      double xr = aligned(&d->ranks[r], q->exit);
      if (e0 - xr > lo[r]) lo[r] = e0 - xr;
      if (x0 - er < hi[r]) hi[r] = x0 - er;
    }
  }
  for (size_t r = 1; r < b->nranks; r++) {
    mlprof__dist_rank *x = &d->ranks[r];
    double u = x->uncertainty_ns, l = lo[r], h = hi[r];
    if (l < -u) l = -u;
    if (h > u) h = u;
    if (!(l <= h) || !isfinite(l) || !isfinite(h)) continue;
    if (h - l >= 2 * u) continue;
    x->offset_ns += (l + h) / 2;
    x->uncertainty_ns = (h - l) / 2;
    x->clock = isfinite(u) ? 2 : 3;
  }
  free(lo);
  return 0;
}

static int bucket_cmp(const void *a, const void *b) {
  const mlprof__dist_coll *x = a, *y = b;
  if (x->op != y->op) return x->op - y->op;
  return (x->size_bytes > y->size_bytes) - (x->size_bytes < y->size_bytes);
}

static uint64_t pow2_floor(uint64_t v) {
  uint64_t p = 1;
  while (p <= v / 2) p *= 2;
  return v ? p : 0;
}

/* Waiting and transfer of every collective, per rank and step, and the
 * table by kind and size. */
static int collectives(mlprof__dist_builder *b) {
  mlprof__dist *d = b->d;
  size_t n = b->nranks, cap = 0, most = 1;
  for (size_t i = 0; i < b->ninsts; i++)
    if (b->insts[i].nparts > most) most = b->insts[i].nparts;
  double *en = malloc(2 * most * sizeof *en);
  if (!en) return MLPROF_ENOMEM;
  double *ex = en + most;
  for (size_t i = 0; i < b->ninsts; i++) {
    inst *c = &b->insts[i];
    const uint32_t *o = &b->order[c->first];
    const char *g = b->strs[c->group].s;
    size_t expect = !strcmp(g, "world") ? n : 0;
    if (!strncmp(g, "ranks ", 6) && !strstr(g, "...")) {
      expect = 1;
      for (const char *s = g; *s; s++) expect += *s == ',';
    }
    if (c->nparts < 2 || (expect && c->nparts != expect)) {
      b->unmatched += c->nparts;
      continue;
    }
    d->matched++;
    c->matched = 1;
    double last = -INFINITY, lastu = 0, rootin = NAN;
    for (uint32_t k = 0; k < c->nparts; k++) {
      const part *q = &b->parts[o[k]];
      uint32_t r = q->rank;
      en[k] = aligned(&d->ranks[r], q->enter);
      ex[k] = aligned(&d->ranks[r], q->exit);
      if (en[k] > last) {
        last = en[k];
        lastu = d->ranks[r].uncertainty_ns;
      }
      if ((int64_t)r == c->root) rootin = en[k];
    }
    double time = 0, wait = 0, transfer = 0;
    for (uint32_t k = 0; k < c->nparts; k++) {
      part *q = &b->parts[o[k]];
      uint32_t r = q->rank;
      double dur = ex[k] - en[k], w;
      /* Who waits for whom: everyone for the last to arrive; a broadcast's
       * or scatter's receivers for the root; a reduce's or gather's root
       * for the last. */
      if (c->op == MLPROF__OP_BROADCAST || c->op == MLPROF__OP_SCATTER)
        w = (int64_t)r == c->root || isnan(rootin) ? 0 : rootin - en[k];
      else if ((c->op == MLPROF__OP_REDUCE || c->op == MLPROF__OP_GATHER) &&
               (int64_t)r != c->root)
        w = 0;
      else
        w = last - en[k];
      if (w < 0) w = 0;
      if (w > dur) w = dur;
      double u = d->ranks[r].uncertainty_ns + lastu;
      if (w > 0 && w < u) d->ranks[r].waits_uncertain++;
      time += dur;
      wait += w;
      transfer += dur - w;
      q->exit = sat_add(q->enter, to_i64(w));
    }
    /* nccl-tests' size: the whole buffer gathered or scattered. */
    uint64_t size = c->bytes / c->nparts;
    if (c->op == MLPROF__OP_ALL_GATHER || c->op == MLPROF__OP_GATHER ||
        c->op == MLPROF__OP_SCATTER)
      size = c->bytes;
    mlprof__dist_coll key = {.op = c->op, .size_bytes = pow2_floor(size)};
    mlprof__dist_coll *t = NULL;
    for (size_t k = 0; k < d->ncolls && !t; k++)
      if (!bucket_cmp(&key, &d->colls[k]) && d->colls[k].ranks == c->nparts)
        t = &d->colls[k];
    if (!t) {
      if (mlprof__grow(&d->colls, &cap, d->ncolls + 1, sizeof *d->colls)) {
        free(en);
        return MLPROF_ENOMEM;
      }
      t = &d->colls[d->ncolls++];
      *t = key;
      t->ranks = c->nparts;
    }
    t->count++;
    t->bytes += size;
    t->time_ns += to_u64(time / c->nparts);
    t->wait_ns += to_u64(wait / c->nparts);
    t->transfer_ns += to_u64(transfer / c->nparts);
  }
  free(en);
  for (size_t k = 0; k < d->ncolls; k++) {
    mlprof__dist_coll *t = &d->colls[k];
    t->algbw = t->transfer_ns && t->bytes
                   ? (double)t->bytes * 1e9 / (double)t->transfer_ns
                   : NAN;
    double f = mlprof__op_bus_factor(t->op, t->ranks);
    t->busbw = f > 0 ? t->algbw * f : NAN;
  }
  if (d->ncolls > 1)
    mlprof__sort(d->colls, d->ncolls, sizeof *d->colls, bucket_cmp);
  d->unmatched = b->unmatched;
  return 0;
}

/* Sends before receives, each side in the order it was posted, for one
 * group, sender, receiver and tag after the other (MPI's non-overtaking
 * rule: the k-th send matches the k-th receive). */
static int p2p_cmp(const void *a, const void *b) {
  const p2p *x = a, *y = b;
  if (x->group != y->group) return x->group < y->group ? -1 : 1;
  if (x->src != y->src) return x->src < y->src ? -1 : 1;
  if (x->dst != y->dst) return x->dst < y->dst ? -1 : 1;
  if (x->tag != y->tag) return x->tag < y->tag ? -1 : 1;
  if (x->recv != y->recv) return x->recv - y->recv;
  return (x->post > y->post) - (x->post < y->post);
}

/* Receives by receiver and blocking interval. */
static int blocked_cmp(const void *a, const void *b) {
  const p2p *x = a, *y = b;
  if (x->recv != y->recv) return y->recv - x->recv;
  if (x->dst != y->dst) return x->dst < y->dst ? -1 : 1;
  if (x->b != y->b) return x->b < y->b ? -1 : 1;
  return (x->e > y->e) - (x->e < y->e);
}

static int link_cmp(const void *a, const void *b) {
  const mlprof__dist_link *x = a, *y = b;
  if (x->src != y->src) return (x->src > y->src) - (x->src < y->src);
  return (x->dst > y->dst) - (x->dst < y->dst);
}

/* Matches each receive with its send: a receiver that blocked before the
 * sender called its send waited until then (within the receive); the rest
 * is transfer. Fills the links, per rank and step the waiting. */
static int p2p_match(mlprof__dist_builder *b) {
  mlprof__dist *d = b->d;
  size_t n = b->nranks, cap = 0;
  if (!b->np2p) return 0;
  if (b->np2p > 1) mlprof__sort(b->p2ps, b->np2p, sizeof *b->p2ps, p2p_cmp);
  for (size_t i = 0, j; i < b->np2p; i = j) {
    const p2p *k = &b->p2ps[i];
    size_t ns = 0, nr = 0;
    for (j = i; j < b->np2p && b->p2ps[j].group == k->group &&
                b->p2ps[j].src == k->src && b->p2ps[j].dst == k->dst &&
                b->p2ps[j].tag == k->tag;
         j++)
      b->p2ps[j].recv ? nr++ : ns++;
    if (!ns || k->src < 0 || (uint64_t)k->src >= n || k->dst < 0 ||
        (uint64_t)k->dst >= n)
      continue;
    mlprof__dist_link *l = NULL;
    for (size_t q = 0; q < d->nlinks && !l; q++)
      if (d->links[q].src == k->src && d->links[q].dst == k->dst)
        l = &d->links[q];
    if (!l) {
      if (mlprof__grow(&d->links, &cap, d->nlinks + 1, sizeof *d->links))
        return MLPROF_ENOMEM;
      l = &d->links[d->nlinks++];
      *l = (mlprof__dist_link){.src = k->src, .dst = k->dst};
    }
    const mlprof__dist_rank *sr = &d->ranks[k->src], *rr = &d->ranks[k->dst];
    for (size_t q = 0; q < ns; q++) {
      const p2p *snd = &b->p2ps[i + q];
      p2p *rcv = q < nr ? &b->p2ps[i + ns + q] : NULL;
      l->count++;
      l->bytes += snd->bytes;
      if (!rcv || !rcv->blocked) {
        l->time_ns += (uint64_t)(snd->e - snd->b);
        continue;
      }
      double enter = aligned(sr, snd->b), rb = aligned(rr, rcv->b);
      double dur = (double)(rcv->e - rcv->b), w = enter - rb;
      if (w < 0) w = 0;
      if (w > dur) w = dur;
      rcv->wait = to_i64(w);
      l->matched++;
      l->wait_ns += to_u64(w);
      l->time_ns += to_u64(dur - w);
      if (w > 0 && w < sr->uncertainty_ns + rr->uncertainty_ns)
        d->ranks[k->dst].waits_uncertain++;
    }
  }
  /* A receiver blocked once for all the receives one wait completed: its
   * waiting is the longest of theirs. */
  if (b->np2p > 1) mlprof__sort(b->p2ps, b->np2p, sizeof *b->p2ps, blocked_cmp);
  for (size_t i = 0; i < b->np2p && b->p2ps[i].recv; i++) {
    const p2p *x = &b->p2ps[i];
    p2p *next = i + 1 < b->np2p ? &b->p2ps[i + 1] : NULL;
    if (next && next->recv && !blocked_cmp(x, next)) {
      if (next->wait < x->wait) next->wait = x->wait;
      continue;
    }
    if (x->dst < 0 || (uint64_t)x->dst >= n || !x->wait) continue;
    rankst *rs = &b->ranks[x->dst];
    long s = step_at(rs, (uint64_t)(x->b - rs->start_mono));
    if (s >= 0) rs->steps[s].wait += (uint64_t)x->wait;
    d->ranks[x->dst].wait_ns += (uint64_t)x->wait;
    d->ranks[x->dst].p2p_wait_ns += (uint64_t)x->wait;
  }
  for (size_t q = 0; q < d->nlinks; q++) {
    mlprof__dist_link *l = &d->links[q];
    l->bandwidth =
        l->time_ns ? (double)l->bytes * 1e9 / (double)l->time_ns : NAN;
  }
  if (d->nlinks > 1)
    mlprof__sort(d->links, d->nlinks, sizeof *d->links, link_cmp);
  for (size_t q = 0; q < d->nlinks; q++)
    if (d->links[q].bytes && isfinite(d->links[q].bandwidth) &&
        (d->slowest_link < 0 ||
         d->links[q].bandwidth < d->links[d->slowest_link].bandwidth))
      d->slowest_link = (int)q;
  return 0;
}

/* Each rank's waiting per step: the union of its waits in the matched
 * collectives (collectives left their ends in exit), so that nonblocking
 * ones waiting at once for the same late rank count once. Each stretch
 * counts in the step where it starts. */
static int rank_waits(mlprof__dist_builder *b) {
  size_t most = 1;
  for (size_t r = 0; r < b->nranks; r++)
    if (b->ranks[r].part1 - b->ranks[r].part0 > most)
      most = b->ranks[r].part1 - b->ranks[r].part0;
  ival *w = malloc(most * sizeof *w);
  if (!w) return MLPROF_ENOMEM;
  for (size_t r = 0; r < b->nranks; r++) {
    rankst *rs = &b->ranks[r];
    size_t nw = 0;
    for (size_t k = rs->part0; k < rs->part1; k++) {
      const part *q = &b->parts[k];
      if (b->insts[q->inst].matched && q->exit > q->enter)
        w[nw++] = (ival){(uint64_t)(q->enter - rs->start_mono),
                         (uint64_t)(q->exit - rs->start_mono)};
    }
    mlprof__sort(w, nw, sizeof *w, cmp_ival);
    for (size_t i = 0; i < nw;) {
      uint64_t lo = w[i].b, hi = w[i].e;
      for (i++; i < nw && w[i].b <= hi; i++)
        if (w[i].e > hi) hi = w[i].e;
      long k = step_at(rs, lo);
      if (k >= 0) rs->steps[k].wait += hi - lo;
      b->d->ranks[r].wait_ns += hi - lo;
    }
  }
  free(w);
  return 0;
}

static int steps(mlprof__dist_builder *b) {
  mlprof__dist *d = b->d;
  size_t n = b->nranks, ns = SIZE_MAX;
  for (size_t r = 0; r < n; r++)
    if (b->ranks[r].nsteps < ns) ns = b->ranks[r].nsteps;
  if (!ns || ns == SIZE_MAX) return 0;
  if (!(d->steps = calloc(ns, sizeof *d->steps))) return MLPROF_ENOMEM;
  d->nsteps = ns;
  for (size_t k = 0; k < ns; k++) {
    mlprof__dist_step *s = &d->steps[k];
    double sum = 0, max = -1;
    for (size_t r = 0; r < n; r++) {
      const rstep *st = &b->ranks[r].steps[k];
      uint64_t len = st->e - st->b, comp = len > st->comm ? len - st->comm : 0;
      sum += (double)comp;
      if ((double)comp > max) {
        max = (double)comp;
        s->straggler = (int64_t)r;
      }
      s->wait_ns += st->wait;
      mlprof__dist_rank *x = &d->ranks[r];
      x->steps++;
      x->run_ns += len;
      x->compute_ns += comp;
      if (b->ranks[r].zoned)
        x->unzoned_ns += len > st->zoned ? len - st->zoned : 0;
    }
    double mean = sum / (double)n;
    s->index = k;
    s->mean_compute_ns = to_u64(mean);
    s->max_compute_ns = to_u64(max);
    s->imbalance = mean > 0 ? (max - mean) / mean : 0;
    double others = n > 1 ? (sum - max) / (double)(n - 1) : max;
    s->delay_ns = to_u64(max - others);
    d->ranks[s->straggler].straggler_steps++;
  }
  return 0;
}

static int dbl_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Keeps the difference (straggler's time less the others' mean, over the
 * run) of zone name (NULL: the time outside zones) among the largest
 * MLPROF__DIST_ZONES of d, largest first. */
static int keep_zone_diff(mlprof__dist *d, const char *name, uint64_t mine,
                          double others) {
  double extra = (double)mine - others;
  if (extra <= 0) return 0;
  size_t k = d->nzones;
  while (k > 0 && extra > (double)d->zones[k - 1].straggler_ns -
                              d->zones[k - 1].others_ns)
    k--;
  if (k >= MLPROF__DIST_ZONES) return 0;
  if (d->nzones == MLPROF__DIST_ZONES) free(d->zones[--d->nzones].name);
  memmove(&d->zones[k + 1], &d->zones[k], (d->nzones - k) * sizeof *d->zones);
  d->nzones++;
  int outside = !name;
  if (outside) name = MLPROF__OUTSIDE_ZONES;
  d->zones[k] = (mlprof__dist_zone){.name = mlprof__dup(name, strlen(name)),
                                    .straggler_ns = mine,
                                    .others_ns = others,
                                    .outside = outside};
  return d->zones[k].name ? 0 : MLPROF_ENOMEM;
}

static int zone_diffs(mlprof__dist_builder *b) {
  mlprof__dist *d = b->d;
  if (d->straggler < 0) return 0;
  size_t s = (size_t)d->straggler, n = b->nranks;
  /* Per string: the straggler's time and the other ranks' summed. */
  struct zsum {
    uint64_t straggler;
    double others;
    int seen;
  } *sum = calloc(b->nstrs ? b->nstrs : 1, sizeof *sum);
  if (!sum) return MLPROF_ENOMEM;
  for (size_t i = 0; i < b->nzt; i++) {
    struct zsum *x = &sum[b->zt[i].str];
    x->seen = 1;
    if (b->zt[i].rank == s)
      x->straggler += b->zt[i].ns;
    else
      x->others += (double)b->zt[i].ns;
  }
  int rc = 0;
  for (size_t i = 0; i < b->nstrs && !rc; i++) {
    const jstr *z = &b->strs[i];
    if (!sum[i].seen || z->comm) continue;
    rc = keep_zone_diff(d, z->s, sum[i].straggler,
                        sum[i].others / (double)(n - 1));
  }
  free(sum);
  /* The steps' time on the step thread in no zone, when every rank marked
   * steps (so that it is known). */
  int known = 1;
  double others = 0;
  for (size_t r = 0; r < n; r++) {
    known &= b->ranks[r].zoned;
    if (r != s) others += (double)d->ranks[r].unzoned_ns;
  }
  if (!rc && known)
    rc = keep_zone_diff(d, NULL, d->ranks[s].unzoned_ns,
                        others / (double)(n - 1));
  return rc;
}

/* Thresholds of the findings (docs/distributed.md). */
#define STRAGGLER_SHARE 0.5   /* of the steps it straggled in */
#define STRAGGLER_DELAY 0.05  /* mean delay over the mean compute */
#define IMBALANCE_MIN 0.10    /* mean imbalance for load_imbalance */
#define COMM_BOUND 0.30       /* transfer over the run */
#define SYNC_BOUND 0.20       /* waiting + small collectives over the run */
#define SMALL_BYTES 4096      /* a collective this small is a sync */
#define SLOW_LINK 0.5         /* bandwidth under half the median's */
#define SLOW_LINK_BYTES 65536 /* mean message size of a link judged */
#define LATE_SENDER 0.05      /* waiting in receives over the run */
#define SYNCS_PER_STEP 1      /* host syncs a step that are a pattern */

/* The zones found waiting for communication (bottleneck.c) wait for the
 * straggler: say so, and point there. */
static int straggler_waits(mlprof__findings *f, int64_t rank) {
  for (size_t i = 0; i < f->nfindings; i++) {
    mlprof__finding *x = &f->findings[i];
    if (strcmp(x->type, "communication_wait")) continue;
    char more[64];
    int n = snprintf(more, sizeof more, "; the ranks wait for rank %lld",
                     (long long)rank);
    size_t len = strlen(x->summary);
    char *s = realloc(x->summary, len + (size_t)n + 1);
    if (!s) return MLPROF_ENOMEM;
    memcpy(s + len, more, (size_t)n + 1);
    x->summary = s;
    x->recommendation =
        "the wait is for the straggler (the straggler finding): balance its "
        "work or data with the other ranks'; then overlap communication with "
        "computation (DDP bucket sizes, bucket_cap_mb; gradient accumulation "
        "with no_sync())";
  }
  return 0;
}

static int findings(mlprof__dist_builder *b, mlprof__findings *f) {
  mlprof__dist *d = b->d;
  size_t n = d->nranks;
  double run = 0, wait = 0, p2p_wait = 0, exposed = 0, mean_comp = 0, imb = 0,
         syncs = 0, sync_ns = 0, steps = 0;
  for (size_t r = 0; r < n; r++) {
    run += (double)d->ranks[r].run_ns;
    wait += (double)d->ranks[r].wait_ns;
    p2p_wait += (double)d->ranks[r].p2p_wait_ns;
    exposed += (double)d->ranks[r].exposed_ns;
    syncs += (double)d->ranks[r].host_syncs;
    sync_ns += (double)d->ranks[r].host_sync_ns;
    steps += (double)d->ranks[r].steps;
  }
  for (size_t k = 0; k < d->nsteps; k++) {
    mean_comp += (double)d->steps[k].mean_compute_ns;
    imb += d->steps[k].imbalance;
  }
  if (d->nsteps) {
    mean_comp /= (double)d->nsteps;
    imb /= (double)d->nsteps;
  }
  mlprof__finding *x;
  if (d->straggler >= 0) {
    const mlprof__dist_rank *s = &d->ranks[d->straggler];
    /* Where it spends its time: "; per step ... in " then the zone. */
    char where[128] = "";
    const char *zname = "", *close = "";
    const mlprof__dist_zone *z = d->nzones ? &d->zones[0] : NULL;
    double extra =
        z ? ((double)z->straggler_ns - z->others_ns) / (double)d->nsteps : 0;
    if (z) {
      snprintf(where, sizeof where,
               "; per step it spends %.3g ms more than the others' mean in %s",
               extra / 1e6, z->outside ? "" : "zone \"");
      zname = z->outside ? "time outside zones (code no zone covers)" : z->name;
      close = z->outside ? "" : "\"";
    }
    if (!(x = mlprof__finding_add(
              f, "straggler", NULL, 0,
              "rank %lld is the slowest in %llu of %zu steps, %.3g ms behind "
              "the others a step; they wait for it%s%s%s",
              (long long)d->straggler, (unsigned long long)s->straggler_steps,
              d->nsteps, d->delay_ns / 1e6, where, zname, close)))
      return MLPROF_ENOMEM;
    x->severity = fmin(100, 100 * d->delay_ns / (mean_comp + d->delay_ns) * 2);
    mlprof__finding_ev(x, "rank", (double)d->straggler);
    mlprof__finding_ev(x, "straggler_steps", (double)s->straggler_steps);
    mlprof__finding_ev(x, "steps", (double)d->nsteps);
    mlprof__finding_ev(x, "delay_ns", d->delay_ns);
    mlprof__finding_ev(x, "imbalance_share", imb);
    mlprof__finding_ev(x, "load_balance_share", d->load_balance);
    if (z) mlprof__finding_ev(x, "extra_per_step_ns", extra);
    if (z && z->outside) {
      mlprof__finding_ev(x, "outside_zones_per_step_ns",
                         (double)z->straggler_ns / (double)d->nsteps);
      x->recommendation =
          "this rank's extra time is in code no zone covers: put zones "
          "around the rest of its step (prof.zone, MLPROF_ZONE) or record "
          "every Python call (mlprof run --calls) to see what it does, then "
          "balance the work or the data across ranks";
    } else {
      x->recommendation =
          "look at what this rank does differently (its zones above: data, "
          "host, GPU, input sizes); balance the work or the data across "
          "ranks";
    }
    if (straggler_waits(f, d->straggler)) return MLPROF_ENOMEM;
  } else if (imb >= IMBALANCE_MIN) {
    if (!(x = mlprof__finding_add(
              f, "load_imbalance", NULL, 0,
              "the ranks' compute differs by %.0f%% a step on average, "
              "without one rank always the slowest",
              imb * 100)))
      return MLPROF_ENOMEM;
    x->severity = fmin(100, imb * 100);
    mlprof__finding_ev(x, "imbalance_share", imb);
    mlprof__finding_ev(x, "load_balance_share", d->load_balance);
    x->recommendation =
        "balance the work per step across ranks (sequence lengths, batch "
        "composition); the slowest rank sets every step's time";
  }
  double transfer = exposed - wait;
  if (run > 0 && transfer / run >= COMM_BOUND) {
    if (!(x = mlprof__finding_add(
              f, "communication_bound", NULL, 0,
              "%.0f%% of the ranks' time is communication not overlapped "
              "with computation (waiting excluded)",
              100 * transfer / run)))
      return MLPROF_ENOMEM;
    x->severity = fmin(100, 100 * transfer / run);
    mlprof__finding_ev(x, "transfer_share", transfer / run);
    mlprof__finding_ev(x, "comm_efficiency_share", d->comm_efficiency);
    x->recommendation =
        "overlap communication with computation (DDP buckets, nonblocking "
        "operations), send less (gradient compression, larger batches per "
        "step) or use a faster interconnect or backend (NCCL)";
  }
  /* A late sender: the link whose receiver waited longest for it. */
  const mlprof__dist_link *late = NULL;
  for (size_t k = 0; k < d->nlinks; k++)
    if (d->links[k].wait_ns && (!late || d->links[k].wait_ns > late->wait_ns))
      late = &d->links[k];
  if (late && run > 0 && p2p_wait / run >= LATE_SENDER) {
    const mlprof__dist_rank *rr = &d->ranks[late->dst];
    double share = rr->run_ns ? (double)late->wait_ns / (double)rr->run_ns : 0;
    if (!(x = mlprof__finding_add(
              f, "late_sender", NULL, 0,
              "rank %lld sends late: rank %lld waited %.3g ms in %llu "
              "receives for it (%.0f%% of its time)",
              (long long)late->src, (long long)late->dst,
              (double)late->wait_ns / 1e6, (unsigned long long)late->matched,
              100 * share)))
      return MLPROF_ENOMEM;
    x->severity = fmin(100, 200 * p2p_wait / run);
    mlprof__finding_ev(x, "src_rank", (double)late->src);
    mlprof__finding_ev(x, "dst_rank", (double)late->dst);
    mlprof__finding_ev(x, "wait_ns", (double)late->wait_ns);
    mlprof__finding_ev(x, "messages", (double)late->matched);
    mlprof__finding_ev(x, "wait_share", share);
    mlprof__finding_ev(x, "p2p_wait_share", p2p_wait / run);
    x->recommendation =
        "look at what the sender does before it sends (its zones) and send "
        "earlier, or post the receive early (irecv) and wait for it only "
        "when its data is needed";
  }
  /* Synchronisation: collective waiting that no straggler explains, the
   * rest of the time in small collectives (barriers, metrics all-reduced
   * each step: their waiting is counted once, above), and host syncs made
   * every step (.item() on a device). */
  uint64_t small = 0, small_ns = 0;
  for (size_t k = 0; k < d->ncolls; k++)
    if (d->colls[k].size_bytes < SMALL_BYTES) {
      small += d->colls[k].count;
      small_ns += d->colls[k].transfer_ns;
    }
  double per_step = steps > 0 ? syncs / steps : 0;
  int frequent = per_step >= SYNCS_PER_STEP;
  double cwait = d->straggler >= 0 ? 0 : wait - p2p_wait;
  double sync = cwait + (double)small_ns * (double)n + (frequent ? sync_ns : 0);
  if (run > 0 && sync / run >= SYNC_BOUND) {
    char host[160] = "";
    if (frequent)
      snprintf(host, sizeof host,
               "%.3g host syncs a step (.item(), .cpu() of device tensors) "
               "taking %.3g ms a step, ",
               per_step, sync_ns / steps / 1e6);
    if (!(x = mlprof__finding_add(
              f, "synchronisation_bound", NULL, 0,
              "%.0f%% of the ranks' time goes to synchronisation: %s%llu "
              "small collectives (under %d bytes) and waiting",
              100 * sync / run, host, (unsigned long long)small, SMALL_BYTES)))
      return MLPROF_ENOMEM;
    x->severity = fmin(100, 100 * sync / run);
    mlprof__finding_ev(x, "sync_share", sync / run);
    mlprof__finding_ev(x, "small_collectives", (double)small);
    mlprof__finding_ev(x, "wait_ns", cwait);
    mlprof__finding_ev(x, "host_syncs_per_step", per_step);
    mlprof__finding_ev(x, "host_sync_per_step_ns",
                       steps > 0 ? sync_ns / steps : 0);
    x->recommendation =
        frequent ? "accumulate metrics on the device and read them (.item(), "
                   ".cpu()) or all-reduce them every N steps instead of every "
                   "step; remove barriers that order nothing"
                 : "remove barriers that order nothing, all-reduce metrics "
                   "every N steps instead of every step, avoid .item() and "
                   "other host syncs in the step";
  }
  /* A slow link among those whose messages are large enough for their
   * time to be bandwidth rather than latency. */
  double *bw = d->nlinks ? malloc(d->nlinks * sizeof *bw) : NULL;
  if (d->nlinks && !bw) return MLPROF_ENOMEM;
  size_t nbw = 0;
  const mlprof__dist_link *l = NULL;
  for (size_t k = 0; k < d->nlinks; k++) {
    const mlprof__dist_link *y = &d->links[k];
    if (!isfinite(y->bandwidth) || y->bytes < SLOW_LINK_BYTES * y->count)
      continue;
    bw[nbw++] = y->bandwidth;
    if (!l || y->bandwidth < l->bandwidth) l = y;
  }
  if (nbw >= 3) {
    mlprof__sort(bw, nbw, sizeof *bw, dbl_cmp);
    double med = nbw % 2 ? bw[nbw / 2] : (bw[nbw / 2 - 1] + bw[nbw / 2]) / 2;
    if (l->bandwidth < SLOW_LINK * med) {
      if (!(x = mlprof__finding_add(
                f, "slow_link", NULL, 0,
                "messages from rank %lld to rank %lld move at %.3g MB/s, "
                "%.0f%% of the median link's %.3g MB/s",
                (long long)l->src, (long long)l->dst, l->bandwidth / 1e6,
                100 * l->bandwidth / med, med / 1e6)))
        return MLPROF_ENOMEM;
      x->severity = fmin(100, 100 * (1 - l->bandwidth / med));
      mlprof__finding_ev(x, "src_rank", (double)l->src);
      mlprof__finding_ev(x, "dst_rank", (double)l->dst);
      mlprof__finding_ev(x, "bandwidth_bytes_per_s", l->bandwidth);
      mlprof__finding_ev(x, "median_bandwidth_bytes_per_s", med);
      x->recommendation =
          "check the path between these ranks (host placement, network "
          "interface, a receiver that posts its receive late)";
    }
  }
  free(bw);
  mlprof__findings_sort(f);
  return 0;
}

/* Orders the parts by instance, each instance's by rank, in order (an
 * index, not a copy: the parts are the largest table the analysis keeps),
 * and sets each instance's first. A rank's parts were made while its
 * profile was read, at parts[part0, part1): going through the ranks in
 * order, each part goes after those of its instance placed before. Returns
 * 0, MLPROF_ENOMEM, or 1 when the parts are not one block a rank (every
 * profile_end ran, so it cannot be: no analysis then). */
static int index_parts(mlprof__dist_builder *b) {
  size_t placed = 0, first = 0;
  for (size_t r = 0; r < b->nranks; r++)
    placed += b->ranks[r].part1 - b->ranks[r].part0;
  if (placed != b->nparts) return 1;
  if (!(b->order = malloc((b->nparts ? b->nparts : 1) * sizeof *b->order)))
    return MLPROF_ENOMEM;
  for (size_t i = 0; i < b->ninsts; i++) {
    b->insts[i].first = b->insts[i].last = first; /* last: the next slot */
    first += b->insts[i].nparts;
  }
  for (size_t r = 0; r < b->nranks; r++)
    for (size_t k = b->ranks[r].part0; k < b->ranks[r].part1; k++)
      b->order[b->insts[b->parts[k].inst].last++] = (uint32_t)k;
  return 0;
}

static int finish(mlprof__dist_builder *b, mlprof__findings *f) {
  mlprof__dist *d = b->d;
  size_t n = b->nranks, have = 0;
  for (size_t r = 0; r < n; r++) have += b->ranks[r].profile >= 0;
  if (n < 2 || have != n) return 0;
  int rc = index_parts(b);
  if (rc) return rc > 0 ? 0 : rc;
  if (!(d->ranks = calloc(n, sizeof *d->ranks))) return MLPROF_ENOMEM;
  d->nranks = n;
  for (size_t r = 0; r < n; r++) {
    const rankst *rs = &b->ranks[r];
    mlprof__dist_rank *x = &d->ranks[r];
    x->rank = (int64_t)r;
    x->profile = rs->profile;
    if (rs->host && !(x->hostname = mlprof__dup(rs->host, strlen(rs->host))))
      return MLPROF_ENOMEM;
    x->exposed_ns = rs->exposed_ns;
    x->async_ns = rs->async_ns;
    x->host_syncs = rs->syncs;
    x->host_sync_ns = rs->sync_ns;
    x->overlap_ns =
        rs->async_ns > rs->waitzone_ns ? rs->async_ns - rs->waitzone_ns : 0;
    x->overlap_share =
        x->exposed_ns + x->overlap_ns
            ? (double)x->overlap_ns / (double)(x->exposed_ns + x->overlap_ns)
            : 0;
  }
  rc = clocks(b);
  if (!rc) rc = collectives(b);
  if (!rc) rc = rank_waits(b);
  if (!rc) rc = p2p_match(b);
  if (!rc) rc = steps(b);
  if (rc) return rc;
  double sum = 0, max = 0, maxrun = 0;
  for (size_t r = 0; r < n; r++) {
    double u = (double)d->ranks[r].compute_ns;
    sum += u;
    if (u > max) max = u;
    if ((double)d->ranks[r].run_ns > maxrun)
      maxrun = (double)d->ranks[r].run_ns;
  }
  d->load_balance = max > 0 ? sum / (double)n / max : 1;
  d->comm_efficiency = maxrun > 0 ? max / maxrun : 1;
  d->parallel_efficiency = d->load_balance * d->comm_efficiency;
  /* The straggler overall: the slowest in most steps, when that is at least
   * half of them and its delay matters. */
  double mean_comp = 0;
  for (size_t k = 0; k < d->nsteps; k++)
    mean_comp += (double)d->steps[k].mean_compute_ns / (double)d->nsteps;
  for (size_t r = 0; r < n && d->nsteps; r++) {
    const mlprof__dist_rank *x = &d->ranks[r];
    if ((double)x->straggler_steps < STRAGGLER_SHARE * (double)d->nsteps)
      continue;
    double delay = 0;
    for (size_t k = 0; k < d->nsteps; k++)
      if (d->steps[k].straggler == (int64_t)r)
        delay += (double)d->steps[k].delay_ns;
    delay /= (double)x->straggler_steps;
    if (delay >= STRAGGLER_DELAY * mean_comp && delay > 0 &&
        (d->straggler < 0 || delay > d->delay_ns)) {
      d->straggler = (int64_t)r;
      d->delay_ns = delay;
    }
  }
  if ((rc = zone_diffs(b))) return rc;
  return findings(b, f);
}

int mlprof__dist_finish(mlprof__dist_builder *b, mlprof__findings *f) {
  mlprof__dist *d = b->d;
  int rc = finish(b, f);
  mlprof__dist_abort(b);
  if (rc) mlprof__dist_free(d);
  return rc;
}

void mlprof__dist_free(mlprof__dist *d) {
  if (!d) return;
  for (size_t r = 0; r < d->nranks; r++) free(d->ranks[r].hostname);
  free(d->ranks);
  free(d->steps);
  free(d->colls);
  free(d->links);
  for (size_t k = 0; k < d->nzones; k++) free(d->zones[k].name);
  memset(d, 0, sizeof *d);
  d->slowest_link = -1;
  d->straggler = -1;
}
