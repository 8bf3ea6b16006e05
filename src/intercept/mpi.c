/* MPI, interposed through its profiling interface: the library defines the
 * MPI_* functions a program calls, records each as a zone of category
 * communication, and calls the MPI library's PMPI_* function, looked up at
 * the first call. No MPI is needed to build mlprof or to run a program that
 * does not use MPI: the few types and constants used here are declared below.
 *
 * They are Open MPI's (handles are pointers to its predefined objects). With
 * another MPI (MPICH's handles are ints) every call is passed on unrecorded.
 *
 * Each call is a zone named after the function ("MPI_Allreduce") with units
 * "bytes" (the payload this rank contributes or receives, docs/distributed.md)
 * and, for collectives, "seq" (the collective's number on its communicator,
 * the same on every rank); metadata "comm" (world, self, or the world ranks
 * of its members), "peer" and "root" (world ranks), "tag" (MPI_Sendrecv also
 * "source" and "recvtag", what it received). A nonblocking call
 * is a zone for its start, and a span "MPI_Isend done" from its start to its
 * completion (in MPI_Wait*, MPI_Test*) on the track "MPI requests". MPI_Init
 * and MPI_Finalize record the rank and each rank's clock offset to rank 0. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../record/internal.h"

#define EXPORT __attribute__((visibility("default")))

typedef void *MPI_Comm, *MPI_Datatype, *MPI_Op, *MPI_Request, *MPI_Group;
typedef struct { /* Open MPI's layout */
  int MPI_SOURCE, MPI_TAG, MPI_ERROR, cancelled_;
  size_t ucount_;
} MPI_Status;

#define IN_PLACE ((const void *)1)
#define ANY_SOURCE (-1)
#define ERR_INTERN 17 /* returned when the MPI library cannot be found */
#define CLOCK_ROUNDS 16

/* The PMPI functions used, looked up once. */
/* clang-format off */
#define PMPI_LIST(X)                                                          \
  X(Init) X(Init_thread) X(Finalize) X(Comm_rank) X(Comm_size) X(Comm_dup)    \
  X(Comm_free) X(Comm_group) X(Group_translate_ranks) X(Group_free)           \
  X(Type_size) X(Get_count) X(Send) X(Ssend) X(Recv) X(Isend) X(Irecv)        \
  X(Sendrecv) X(Wait) X(Waitall) X(Waitany) X(Waitsome) X(Test) X(Testall)    \
  X(Testany) X(Testsome) X(Barrier) X(Bcast) X(Reduce) X(Allreduce) X(Scan)   \
  X(Allgather) X(Allgatherv) X(Gather) X(Gatherv) X(Scatter) X(Scatterv)      \
  X(Alltoall) X(Alltoallv) X(Reduce_scatter) X(Reduce_scatter_block)         \
  X(Ibarrier) X(Ibcast) X(Ireduce) X(Iallreduce) X(Iallgather) X(Igather)     \
  X(Iscatter) X(Ialltoall) X(Ireduce_scatter_block)
/* clang-format on */

enum {
#define PMPI_ENUM(name) F_##name,
  PMPI_LIST(PMPI_ENUM)
#undef PMPI_ENUM
      F_COUNT
};

static const char *const pmpi_names[F_COUNT] = {
#define PMPI_NAME(name) "PMPI_" #name,
    PMPI_LIST(PMPI_NAME)
#undef PMPI_NAME
};

static void *pmpi[F_COUNT];
/* Open MPI's predefined objects; recording only when all were found. */
static MPI_Comm comm_world, comm_self;
static MPI_Datatype type_byte;
static MPI_Request request_null;
static int recording;
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

static void resolve(void) {
  for (int i = 0; i < F_COUNT; i++)
    if (!(pmpi[i] = dlsym(RTLD_NEXT, pmpi_names[i])))
      pmpi[i] = dlsym(RTLD_DEFAULT, pmpi_names[i]);
  comm_world = dlsym(RTLD_DEFAULT, "ompi_mpi_comm_world");
  comm_self = dlsym(RTLD_DEFAULT, "ompi_mpi_comm_self");
  type_byte = dlsym(RTLD_DEFAULT, "ompi_mpi_byte");
  request_null = dlsym(RTLD_DEFAULT, "ompi_request_null");
  recording = comm_world && comm_self && type_byte && request_null;
  if (!recording && pmpi[F_Init])
    mlprof__warn_once(NULL, "MPI calls not recorded: not Open MPI");
}

/* The PMPI function `name` cast to type T, or a return of ERR_INTERN from
 * the calling wrapper when the program has no MPI library. */
#define REAL(name, T)                                            \
  __typeof__(T) real =                                           \
      (pthread_once(&resolve_once, resolve), (T)pmpi[F_##name]); \
  if (!real) return ERR_INTERN

#define SITE(fn) \
  static const mlprof_site site = {"MPI_" #fn, NULL, "mpi", 0, MLPROF_CAT_COMM}

/* ---- communicators ------------------------------------------------------ */

/* What is known of a communicator: its name in the profile, its members'
 * world ranks (NULL for the world) and its collectives so far. */
typedef struct {
  MPI_Comm comm;
  int size;
  int *world;
  char name[64];
  uint64_t seq;
} comm_info;

#define MAX_COMMS 64
static comm_info comms[MAX_COMMS];
static int ncomms;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void describe(comm_info *c) {
  typedef int (*size_fn)(MPI_Comm, int *);
  typedef int (*group_fn)(MPI_Comm, MPI_Group *);
  typedef int (*translate_fn)(MPI_Group, int, const int *, MPI_Group, int *);
  typedef int (*free_fn)(MPI_Group *);
  ((size_fn)pmpi[F_Comm_size])(c->comm, &c->size);
  if (c->comm == comm_world || c->comm == comm_self || c->size <= 0) {
    snprintf(c->name, sizeof c->name, "%s",
             c->comm == comm_world ? "world" : "self");
    return;
  }
  MPI_Group mine, world;
  int *ranks = malloc(2 * (size_t)c->size * sizeof *ranks);
  if (!ranks || ((group_fn)pmpi[F_Comm_group])(c->comm, &mine) ||
      ((group_fn)pmpi[F_Comm_group])(comm_world, &world)) {
    free(ranks);
    snprintf(c->name, sizeof c->name, "size %d", c->size);
    return;
  }
  for (int i = 0; i < c->size; i++) ranks[i] = i;
  c->world = ranks + c->size;
  ((translate_fn)pmpi[F_Group_translate_ranks])(mine, c->size, ranks, world,
                                                c->world);
  ((free_fn)pmpi[F_Group_free])(&mine);
  ((free_fn)pmpi[F_Group_free])(&world);
  memmove(ranks, c->world, (size_t)c->size * sizeof *ranks);
  c->world = ranks;
  size_t n = (size_t)snprintf(c->name, sizeof c->name, "ranks ");
  for (int i = 0; i < c->size && n < sizeof c->name; i++)
    n += (size_t)snprintf(c->name + n, sizeof c->name - n, "%s%d", i ? "," : "",
                          c->world[i]);
  if (n >= sizeof c->name) memcpy(c->name + sizeof c->name - 4, "...", 4);
}

/* The entry of comm (made on first use), or NULL past MAX_COMMS. Called
 * with lock held. */
static comm_info *comm_of(MPI_Comm comm) {
  for (int i = 0; i < ncomms; i++)
    if (comms[i].comm == comm) return &comms[i];
  if (ncomms == MAX_COMMS) return NULL;
  comm_info *c = &comms[ncomms++];
  memset(c, 0, sizeof *c);
  c->comm = comm;
  describe(c);
  return c;
}

/* A communicator's member `rank` as a world rank. Called with lock held. */
static int world_rank(const comm_info *c, int rank) {
  return c && c->world && rank >= 0 && rank < c->size ? c->world[rank] : rank;
}

static int type_size(MPI_Datatype t) {
  typedef int (*fn)(MPI_Datatype, int *);
  int n = 0;
  if (((fn)pmpi[F_Type_size])(t, &n)) return 0;
  return n;
}

static uint64_t payload(int count, MPI_Datatype t) {
  return count > 0 ? (uint64_t)count * (uint64_t)type_size(t) : 0;
}

static int comm_rank(MPI_Comm comm) {
  typedef int (*fn)(MPI_Comm, int *);
  int r = -1;
  ((fn)pmpi[F_Comm_rank])(comm, &r);
  return r;
}

static int comm_size(MPI_Comm comm) {
  typedef int (*fn)(MPI_Comm, int *);
  int n = 0;
  ((fn)pmpi[F_Comm_size])(comm, &n);
  return n;
}

/* ---- zones -------------------------------------------------------------- */

/* Whether a zone was begun for this call (and must be ended by note). */
static int begin(const mlprof_site *site) {
  pthread_once(&resolve_once, resolve);
  return recording && mlprof_zone_begin_site(site);
}

enum { NO_RANK = -1000000 };

static void meta_int(const char *key, int v) {
  char s[16];
  snprintf(s, sizeof s, "%d", v);
  mlprof_zone_meta(key, s);
}

/* Describes and ends the zone of a call on comm: bytes, and the world ranks
 * of peer or root (NO_RANK: none), tag (NO_RANK: none); a collective gets
 * its sequence number. */
static void note(MPI_Comm comm, uint64_t bytes, int peer, int root, int tag,
                 int collective) {
  pthread_mutex_lock(&lock);
  comm_info *c = comm_of(comm);
  char name[64];
  snprintf(name, sizeof name, "%s", c ? c->name : "?");
  uint64_t seq = c && collective ? ++c->seq : 0;
  if (peer >= 0) peer = world_rank(c, peer);
  if (root >= 0) root = world_rank(c, root);
  pthread_mutex_unlock(&lock);
  mlprof_units_add("bytes", bytes);
  if (seq) mlprof_units_add("seq", seq);
  mlprof_zone_meta("comm", name);
  if (peer != NO_RANK) meta_int("peer", peer);
  if (root != NO_RANK) meta_int("root", root);
  if (tag != NO_RANK) meta_int("tag", tag);
  mlprof_zone_end();
}

/* ---- nonblocking requests ----------------------------------------------- */

typedef struct {
  MPI_Request req;
  const mlprof_site *site;
  uint64_t begin_ns;
} pending;

#define MAX_PENDING 1024 /* a power of two */
static pending table[MAX_PENDING];

static size_t slot_of(MPI_Request r) {
  return (size_t)(((uintptr_t)r >> 4) * 0x9E3779B97F4A7C15ull) &
         (MAX_PENDING - 1);
}

/* Remembers a request started by the call whose zone is open (on). */
static void track(int on, MPI_Request *req, const mlprof_site *site,
                  uint64_t begin_ns) {
  if (!on || !req || *req == request_null) return;
  pthread_mutex_lock(&lock);
  for (size_t i = slot_of(*req), n = 0; n < MAX_PENDING;
       i = (i + 1) & (MAX_PENDING - 1), n++)
    if (!table[i].req) {
      table[i] = (pending){*req, site, begin_ns};
      break;
    }
  pthread_mutex_unlock(&lock);
}

/* Requests saved[i] that the call completed (now[i] became null): each is
 * recorded as a span from its start to now. */
static void settle(const MPI_Request *saved, const MPI_Request *now, int n) {
  if (!recording) return;
  uint64_t end = mlprof__mono_ns();
  for (int k = 0; k < n; k++) {
    if (!saved[k] || saved[k] == request_null || now[k] != request_null)
      continue;
    pending p = {0};
    pthread_mutex_lock(&lock);
    for (size_t i = slot_of(saved[k]), m = 0; m < MAX_PENDING && table[i].req;
         i = (i + 1) & (MAX_PENDING - 1), m++)
      if (table[i].req == saved[k]) {
        p = table[i];
        /* Backward-shift deletion keeps every probe sequence whole. */
        size_t hole = i, j = i;
        for (;;) {
          j = (j + 1) & (MAX_PENDING - 1);
          if (!table[j].req) break;
          size_t home = slot_of(table[j].req);
          if (((j - home) & (MAX_PENDING - 1)) >=
              ((j - hole) & (MAX_PENDING - 1))) {
            table[hole] = table[j];
            hole = j;
          }
        }
        table[hole].req = NULL;
        break;
      }
    pthread_mutex_unlock(&lock);
    if (!p.req) continue;
    char name[64];
    snprintf(name, sizeof name, "%s done", p.site->name);
    mlprof_span s = {.site = mlprof_site_intern(name, MLPROF_CAT_COMM),
                     .begin_ns = p.begin_ns,
                     .end_ns = end};
    if (s.site) mlprof_track_spans("MPI requests", &s, 1);
  }
}

/* Copies of the request handles a Wait/Test call may complete. */
typedef struct {
  MPI_Request *saved, small[16];
} saved_requests;

static void save(saved_requests *s, const MPI_Request *reqs, int n) {
  s->saved = s->small;
  if (n > 16 && !(s->saved = malloc((size_t)n * sizeof *reqs))) n = 0;
  if (n > 0) memcpy(s->saved, reqs, (size_t)n * sizeof *reqs);
}

static void settle_saved(saved_requests *s, const MPI_Request *now, int n) {
  if (s->saved && n > 0) settle(s->saved, now, n);
  if (s->saved != s->small) free(s->saved);
}

/* ---- clocks ------------------------------------------------------------- */

static MPI_Comm clock_comm; /* a private duplicate of the world */

/* Measures this rank's CLOCK_MONOTONIC offset to rank 0's by round trips
 * (rank 0 answers each rank in turn with its clock; the round trip with the
 * least time bounds the error) and records it as META key, "OFFSET_NS
 * UNCERTAINTY_NS AT_NS": add OFFSET_NS to this rank's monotonic time to get
 * rank 0's, within +-UNCERTAINTY_NS, as measured at this rank's AT_NS. */
static void clock_sync(const char *key) {
  typedef int (*send_fn)(const void *, int, MPI_Datatype, int, int, MPI_Comm);
  typedef int (*recv_fn)(void *, int, MPI_Datatype, int, int, MPI_Comm,
                         MPI_Status *);
  send_fn snd = (send_fn)pmpi[F_Send];
  recv_fn rcv = (recv_fn)pmpi[F_Recv];
  int rank = comm_rank(clock_comm), size = comm_size(clock_comm);
  uint64_t t = 0, best_rtt = UINT64_MAX, at = mlprof__mono_ns();
  int64_t offset = 0;
  for (int r = 1; rank == 0 && r < size; r++)
    for (int k = 0; k < CLOCK_ROUNDS; k++) {
      if (rcv(&t, 8, type_byte, r, 0, clock_comm, NULL)) return;
      t = mlprof__mono_ns();
      if (snd(&t, 8, type_byte, r, 0, clock_comm)) return;
    }
  for (int k = 0; rank > 0 && k < CLOCK_ROUNDS; k++) {
    uint64_t t0 = mlprof__mono_ns();
    if (snd(&t0, 8, type_byte, 0, 0, clock_comm) ||
        rcv(&t, 8, type_byte, 0, 0, clock_comm, NULL))
      return;
    uint64_t t1 = mlprof__mono_ns();
    if (t1 - t0 < best_rtt) {
      best_rtt = t1 - t0;
      at = t0 + (t1 - t0) / 2;
      offset = (int64_t)(t - at);
    }
  }
  char v[80];
  snprintf(v, sizeof v, "%lld %llu %llu", (long long)offset,
           (unsigned long long)(rank ? (best_rtt + 1) / 2 : 0),
           (unsigned long long)at);
  mlprof_meta(key, v);
}

static void started(void) {
  typedef int (*dup_fn)(MPI_Comm, MPI_Comm *);
  char v[16];
  snprintf(v, sizeof v, "%d", comm_rank(comm_world));
  mlprof_meta("dist.rank", v);
  snprintf(v, sizeof v, "%d", comm_size(comm_world));
  mlprof_meta("dist.world_size", v);
  mlprof_meta("dist.backend", "mpi");
  if (((dup_fn)pmpi[F_Comm_dup])(comm_world, &clock_comm) == 0)
    clock_sync("dist.clock.init");
  else
    clock_comm = NULL;
}

/* ---- setup -------------------------------------------------------------- */

EXPORT int MPI_Init(int *argc, char ***argv) {
  REAL(Init, int (*)(int *, char ***));
  int rc = real(argc, argv);
  if (rc == 0 && recording) started();
  return rc;
}

EXPORT int MPI_Init_thread(int *argc, char ***argv, int required,
                           int *provided) {
  REAL(Init_thread, int (*)(int *, char ***, int, int *));
  int rc = real(argc, argv, required, provided);
  if (rc == 0 && recording) started();
  return rc;
}

EXPORT int MPI_Finalize(void) {
  REAL(Finalize, int (*)(void));
  if (recording && clock_comm) {
    clock_sync("dist.clock.final");
    ((int (*)(MPI_Comm *))pmpi[F_Comm_free])(&clock_comm);
  }
  return real();
}

EXPORT int MPI_Comm_free(MPI_Comm *comm) {
  REAL(Comm_free, int (*)(MPI_Comm *));
  pthread_mutex_lock(&lock);
  for (int i = 0; comm && i < ncomms; i++)
    if (comms[i].comm == *comm) {
      free(comms[i].world);
      comms[i] = comms[--ncomms];
      break;
    }
  pthread_mutex_unlock(&lock);
  return real(comm);
}

/* ---- point to point ----------------------------------------------------- */

typedef int (*send_fn)(const void *, int, MPI_Datatype, int, int, MPI_Comm);

EXPORT int MPI_Send(const void *buf, int count, MPI_Datatype type, int dest,
                    int tag, MPI_Comm comm) {
  REAL(Send, send_fn);
  SITE(Send);
  int on = begin(&site);
  int rc = real(buf, count, type, dest, tag, comm);
  if (on) note(comm, payload(count, type), dest, NO_RANK, tag, 0);
  return rc;
}

EXPORT int MPI_Ssend(const void *buf, int count, MPI_Datatype type, int dest,
                     int tag, MPI_Comm comm) {
  REAL(Ssend, send_fn);
  SITE(Ssend);
  int on = begin(&site);
  int rc = real(buf, count, type, dest, tag, comm);
  if (on) note(comm, payload(count, type), dest, NO_RANK, tag, 0);
  return rc;
}

/* What a receive got: bytes, and the source and tag matched. */
static uint64_t received(const MPI_Status *st, int *source, int *tag) {
  typedef int (*count_fn)(const MPI_Status *, MPI_Datatype, int *);
  int n = 0;
  ((count_fn)pmpi[F_Get_count])(st, type_byte, &n);
  *source = st->MPI_SOURCE;
  *tag = st->MPI_TAG;
  return n > 0 ? (uint64_t)n : 0;
}

EXPORT int MPI_Recv(void *buf, int count, MPI_Datatype type, int source,
                    int tag, MPI_Comm comm, MPI_Status *status) {
  REAL(Recv,
       int (*)(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Status *));
  SITE(Recv);
  MPI_Status mine;
  int on = begin(&site);
  int rc = real(buf, count, type, source, tag, comm, status ? status : &mine);
  if (status) mine = *status;
  if (on) {
    uint64_t bytes = rc == 0 ? received(&mine, &source, &tag) : 0;
    note(comm, bytes, source, NO_RANK, tag, 0);
  }
  return rc;
}

EXPORT int MPI_Sendrecv(const void *sendbuf, int sendcount,
                        MPI_Datatype sendtype, int dest, int sendtag,
                        void *recvbuf, int recvcount, MPI_Datatype recvtype,
                        int source, int recvtag, MPI_Comm comm,
                        MPI_Status *status) {
  REAL(Sendrecv, int (*)(const void *, int, MPI_Datatype, int, int, void *, int,
                         MPI_Datatype, int, int, MPI_Comm, MPI_Status *));
  SITE(Sendrecv);
  MPI_Status mine;
  int on = begin(&site);
  int rc = real(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount,
                recvtype, source, recvtag, comm, status ? status : &mine);
  if (status) mine = *status;
  if (on) {
    uint64_t got = rc == 0 ? received(&mine, &source, &recvtag) : 0;
    pthread_mutex_lock(&lock);
    int from = world_rank(comm_of(comm), source);
    pthread_mutex_unlock(&lock);
    meta_int("source", from);
    meta_int("recvtag", recvtag);
    note(comm, payload(sendcount, sendtype) + got, dest, NO_RANK, sendtag, 0);
  }
  return rc;
}

typedef int (*isend_fn)(const void *, int, MPI_Datatype, int, int, MPI_Comm,
                        MPI_Request *);

EXPORT int MPI_Isend(const void *buf, int count, MPI_Datatype type, int dest,
                     int tag, MPI_Comm comm, MPI_Request *req) {
  REAL(Isend, isend_fn);
  SITE(Isend);
  uint64_t t0 = mlprof__mono_ns();
  int on = begin(&site);
  int rc = real(buf, count, type, dest, tag, comm, req);
  if (on) note(comm, payload(count, type), dest, NO_RANK, tag, 0);
  track(on && rc == 0, req, &site, t0);
  return rc;
}

EXPORT int MPI_Irecv(void *buf, int count, MPI_Datatype type, int source,
                     int tag, MPI_Comm comm, MPI_Request *req) {
  REAL(Irecv,
       int (*)(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *));
  SITE(Irecv);
  uint64_t t0 = mlprof__mono_ns();
  int on = begin(&site);
  int rc = real(buf, count, type, source, tag, comm, req);
  if (on) note(comm, payload(count, type), source, NO_RANK, tag, 0);
  track(on && rc == 0, req, &site, t0);
  return rc;
}

/* ---- completion --------------------------------------------------------- */

EXPORT int MPI_Wait(MPI_Request *req, MPI_Status *status) {
  REAL(Wait, int (*)(MPI_Request *, MPI_Status *));
  SITE(Wait);
  MPI_Request saved = req ? *req : NULL;
  int on = begin(&site);
  int rc = real(req, status);
  if (on) mlprof_zone_end();
  if (req) settle(&saved, req, 1);
  return rc;
}

EXPORT int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status statuses[]) {
  REAL(Waitall, int (*)(int, MPI_Request *, MPI_Status *));
  SITE(Waitall);
  saved_requests s;
  save(&s, reqs, n);
  int on = begin(&site);
  int rc = real(n, reqs, statuses);
  if (on) mlprof_zone_end();
  settle_saved(&s, reqs, n);
  return rc;
}

EXPORT int MPI_Waitany(int n, MPI_Request reqs[], int *index,
                       MPI_Status *status) {
  REAL(Waitany, int (*)(int, MPI_Request *, int *, MPI_Status *));
  SITE(Waitany);
  saved_requests s;
  save(&s, reqs, n);
  int on = begin(&site);
  int rc = real(n, reqs, index, status);
  if (on) mlprof_zone_end();
  settle_saved(&s, reqs, n);
  return rc;
}

EXPORT int MPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int indices[],
                        MPI_Status statuses[]) {
  REAL(Waitsome, int (*)(int, MPI_Request *, int *, int *, MPI_Status *));
  SITE(Waitsome);
  saved_requests s;
  save(&s, reqs, n);
  int on = begin(&site);
  int rc = real(n, reqs, outcount, indices, statuses);
  if (on) mlprof_zone_end();
  settle_saved(&s, reqs, n);
  return rc;
}

/* Test calls are often made in a loop: no zone, only the completions. */
EXPORT int MPI_Test(MPI_Request *req, int *flag, MPI_Status *status) {
  REAL(Test, int (*)(MPI_Request *, int *, MPI_Status *));
  MPI_Request saved = req ? *req : NULL;
  int rc = real(req, flag, status);
  if (req) settle(&saved, req, 1);
  return rc;
}

EXPORT int MPI_Testall(int n, MPI_Request reqs[], int *flag,
                       MPI_Status statuses[]) {
  REAL(Testall, int (*)(int, MPI_Request *, int *, MPI_Status *));
  saved_requests s;
  save(&s, reqs, n);
  int rc = real(n, reqs, flag, statuses);
  settle_saved(&s, reqs, n);
  return rc;
}

EXPORT int MPI_Testany(int n, MPI_Request reqs[], int *index, int *flag,
                       MPI_Status *status) {
  REAL(Testany, int (*)(int, MPI_Request *, int *, int *, MPI_Status *));
  saved_requests s;
  save(&s, reqs, n);
  int rc = real(n, reqs, index, flag, status);
  settle_saved(&s, reqs, n);
  return rc;
}

EXPORT int MPI_Testsome(int n, MPI_Request reqs[], int *outcount, int indices[],
                        MPI_Status statuses[]) {
  REAL(Testsome, int (*)(int, MPI_Request *, int *, int *, MPI_Status *));
  saved_requests s;
  save(&s, reqs, n);
  int rc = real(n, reqs, outcount, indices, statuses);
  settle_saved(&s, reqs, n);
  return rc;
}

/* ---- collectives -------------------------------------------------------- */

/* The bytes of a part given by counts[] of every member (a v-form). */
static uint64_t sum_counts(const int *counts, MPI_Comm comm,
                           MPI_Datatype type) {
  uint64_t n = 0;
  for (int i = 0, size = comm_size(comm); counts && i < size; i++)
    n += payload(counts[i], type);
  return n;
}

static uint64_t own_count(const int *counts, MPI_Comm comm, MPI_Datatype type) {
  int r = comm_rank(comm);
  return counts && r >= 0 ? payload(counts[r], type) : 0;
}

EXPORT int MPI_Barrier(MPI_Comm comm) {
  REAL(Barrier, int (*)(MPI_Comm));
  SITE(Barrier);
  int on = begin(&site);
  int rc = real(comm);
  if (on) note(comm, 0, NO_RANK, NO_RANK, NO_RANK, 1);
  return rc;
}

EXPORT int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root,
                     MPI_Comm comm) {
  REAL(Bcast, int (*)(void *, int, MPI_Datatype, int, MPI_Comm));
  SITE(Bcast);
  int on = begin(&site);
  int rc = real(buf, count, type, root, comm);
  if (on) note(comm, payload(count, type), NO_RANK, root, NO_RANK, 1);
  return rc;
}

EXPORT int MPI_Reduce(const void *sendbuf, void *recvbuf, int count,
                      MPI_Datatype type, MPI_Op op, int root, MPI_Comm comm) {
  REAL(Reduce,
       int (*)(const void *, void *, int, MPI_Datatype, MPI_Op, int, MPI_Comm));
  SITE(Reduce);
  int on = begin(&site);
  int rc = real(sendbuf, recvbuf, count, type, op, root, comm);
  if (on) note(comm, payload(count, type), NO_RANK, root, NO_RANK, 1);
  return rc;
}

typedef int (*allreduce_fn)(const void *, void *, int, MPI_Datatype, MPI_Op,
                            MPI_Comm);

EXPORT int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count,
                         MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  REAL(Allreduce, allreduce_fn);
  SITE(Allreduce);
  int on = begin(&site);
  int rc = real(sendbuf, recvbuf, count, type, op, comm);
  if (on) note(comm, payload(count, type), NO_RANK, NO_RANK, NO_RANK, 1);
  return rc;
}

EXPORT int MPI_Scan(const void *sendbuf, void *recvbuf, int count,
                    MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  REAL(Scan, allreduce_fn);
  SITE(Scan);
  int on = begin(&site);
  int rc = real(sendbuf, recvbuf, count, type, op, comm);
  if (on) note(comm, payload(count, type), NO_RANK, NO_RANK, NO_RANK, 1);
  return rc;
}

typedef int (*gather_fn)(const void *, int, MPI_Datatype, void *, int,
                         MPI_Datatype, MPI_Comm);
typedef int (*rgather_fn)(const void *, int, MPI_Datatype, void *, int,
                          MPI_Datatype, int, MPI_Comm);

EXPORT int MPI_Allgather(const void *sendbuf, int sendcount,
                         MPI_Datatype sendtype, void *recvbuf, int recvcount,
                         MPI_Datatype recvtype, MPI_Comm comm) {
  REAL(Allgather, gather_fn);
  SITE(Allgather);
  int on = begin(&site);
  int rc =
      real(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  if (on)
    note(comm,
         sendbuf == IN_PLACE ? payload(recvcount, recvtype)
                             : payload(sendcount, sendtype),
         NO_RANK, NO_RANK, NO_RANK, 1);
  return rc;
}

EXPORT int MPI_Allgatherv(const void *sendbuf, int sendcount,
                          MPI_Datatype sendtype, void *recvbuf,
                          const int recvcounts[], const int displs[],
                          MPI_Datatype recvtype, MPI_Comm comm) {
  REAL(Allgatherv, int (*)(const void *, int, MPI_Datatype, void *, const int *,
                           const int *, MPI_Datatype, MPI_Comm));
  SITE(Allgatherv);
  int on = begin(&site);
  int rc = real(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                recvtype, comm);
  if (on)
    note(comm,
         sendbuf == IN_PLACE ? own_count(recvcounts, comm, recvtype)
                             : payload(sendcount, sendtype),
         NO_RANK, NO_RANK, NO_RANK, 1);
  return rc;
}

EXPORT int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                      void *recvbuf, int recvcount, MPI_Datatype recvtype,
                      int root, MPI_Comm comm) {
  REAL(Gather, rgather_fn);
  SITE(Gather);
  int on = begin(&site);
  int rc = real(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                root, comm);
  if (on)
    note(comm,
         sendbuf == IN_PLACE ? payload(recvcount, recvtype)
                             : payload(sendcount, sendtype),
         NO_RANK, root, NO_RANK, 1);
  return rc;
}

EXPORT int MPI_Gatherv(const void *sendbuf, int sendcount,
                       MPI_Datatype sendtype, void *recvbuf,
                       const int recvcounts[], const int displs[],
                       MPI_Datatype recvtype, int root, MPI_Comm comm) {
  REAL(Gatherv, int (*)(const void *, int, MPI_Datatype, void *, const int *,
                        const int *, MPI_Datatype, int, MPI_Comm));
  SITE(Gatherv);
  int on = begin(&site);
  int rc = real(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                recvtype, root, comm);
  if (on)
    note(comm,
         sendbuf == IN_PLACE ? own_count(recvcounts, comm, recvtype)
                             : payload(sendcount, sendtype),
         NO_RANK, root, NO_RANK, 1);
  return rc;
}

EXPORT int MPI_Scatter(const void *sendbuf, int sendcount,
                       MPI_Datatype sendtype, void *recvbuf, int recvcount,
                       MPI_Datatype recvtype, int root, MPI_Comm comm) {
  REAL(Scatter, rgather_fn);
  SITE(Scatter);
  int on = begin(&site);
  int rc = real(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                root, comm);
  if (on)
    note(comm,
         recvbuf == IN_PLACE ? payload(sendcount, sendtype)
                             : payload(recvcount, recvtype),
         NO_RANK, root, NO_RANK, 1);
  return rc;
}

EXPORT int MPI_Scatterv(const void *sendbuf, const int sendcounts[],
                        const int displs[], MPI_Datatype sendtype,
                        void *recvbuf, int recvcount, MPI_Datatype recvtype,
                        int root, MPI_Comm comm) {
  REAL(Scatterv, int (*)(const void *, const int *, const int *, MPI_Datatype,
                         void *, int, MPI_Datatype, int, MPI_Comm));
  SITE(Scatterv);
  int on = begin(&site);
  int rc = real(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount,
                recvtype, root, comm);
  if (on)
    note(comm,
         recvbuf == IN_PLACE ? own_count(sendcounts, comm, sendtype)
                             : payload(recvcount, recvtype),
         NO_RANK, root, NO_RANK, 1);
  return rc;
}

EXPORT int MPI_Alltoall(const void *sendbuf, int sendcount,
                        MPI_Datatype sendtype, void *recvbuf, int recvcount,
                        MPI_Datatype recvtype, MPI_Comm comm) {
  REAL(Alltoall, gather_fn);
  SITE(Alltoall);
  int on = begin(&site);
  int rc =
      real(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  if (on)
    note(comm,
         (uint64_t)comm_size(comm) * (sendbuf == IN_PLACE
                                          ? payload(recvcount, recvtype)
                                          : payload(sendcount, sendtype)),
         NO_RANK, NO_RANK, NO_RANK, 1);
  return rc;
}

EXPORT int MPI_Alltoallv(const void *sendbuf, const int sendcounts[],
                         const int sdispls[], MPI_Datatype sendtype,
                         void *recvbuf, const int recvcounts[],
                         const int rdispls[], MPI_Datatype recvtype,
                         MPI_Comm comm) {
  REAL(Alltoallv,
       int (*)(const void *, const int *, const int *, MPI_Datatype, void *,
               const int *, const int *, MPI_Datatype, MPI_Comm));
  SITE(Alltoallv);
  int on = begin(&site);
  int rc = real(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts,
                rdispls, recvtype, comm);
  if (on)
    note(comm,
         sendbuf == IN_PLACE ? sum_counts(recvcounts, comm, recvtype)
                             : sum_counts(sendcounts, comm, sendtype),
         NO_RANK, NO_RANK, NO_RANK, 1);
  return rc;
}

EXPORT int MPI_Reduce_scatter(const void *sendbuf, void *recvbuf,
                              const int recvcounts[], MPI_Datatype type,
                              MPI_Op op, MPI_Comm comm) {
  REAL(Reduce_scatter, int (*)(const void *, void *, const int *, MPI_Datatype,
                               MPI_Op, MPI_Comm));
  SITE(Reduce_scatter);
  int on = begin(&site);
  int rc = real(sendbuf, recvbuf, recvcounts, type, op, comm);
  if (on)
    note(comm, sum_counts(recvcounts, comm, type), NO_RANK, NO_RANK, NO_RANK,
         1);
  return rc;
}

EXPORT int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf,
                                    int recvcount, MPI_Datatype type, MPI_Op op,
                                    MPI_Comm comm) {
  REAL(Reduce_scatter_block, allreduce_fn);
  SITE(Reduce_scatter_block);
  int on = begin(&site);
  int rc = real(sendbuf, recvbuf, recvcount, type, op, comm);
  if (on)
    note(comm, (uint64_t)comm_size(comm) * payload(recvcount, type), NO_RANK,
         NO_RANK, NO_RANK, 1);
  return rc;
}

/* ---- nonblocking collectives -------------------------------------------- */

/* A nonblocking collective's start: its zone, then its request tracked. */
#define ISTART(call, bytes, root)                           \
  uint64_t t0 = mlprof__mono_ns();                          \
  int on = begin(&site);                                    \
  int rc = (call);                                          \
  if (on) note(comm, (bytes), NO_RANK, (root), NO_RANK, 1); \
  track(on &&rc == 0, req, &site, t0);                      \
  return rc

EXPORT int MPI_Ibarrier(MPI_Comm comm, MPI_Request *req) {
  REAL(Ibarrier, int (*)(MPI_Comm, MPI_Request *));
  SITE(Ibarrier);
  ISTART(real(comm, req), 0, NO_RANK);
}

EXPORT int MPI_Ibcast(void *buf, int count, MPI_Datatype type, int root,
                      MPI_Comm comm, MPI_Request *req) {
  REAL(Ibcast,
       int (*)(void *, int, MPI_Datatype, int, MPI_Comm, MPI_Request *));
  SITE(Ibcast);
  ISTART(real(buf, count, type, root, comm, req), payload(count, type), root);
}

EXPORT int MPI_Ireduce(const void *sendbuf, void *recvbuf, int count,
                       MPI_Datatype type, MPI_Op op, int root, MPI_Comm comm,
                       MPI_Request *req) {
  REAL(Ireduce, int (*)(const void *, void *, int, MPI_Datatype, MPI_Op, int,
                        MPI_Comm, MPI_Request *));
  SITE(Ireduce);
  ISTART(real(sendbuf, recvbuf, count, type, op, root, comm, req),
         payload(count, type), root);
}

EXPORT int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count,
                          MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                          MPI_Request *req) {
  REAL(Iallreduce, int (*)(const void *, void *, int, MPI_Datatype, MPI_Op,
                           MPI_Comm, MPI_Request *));
  SITE(Iallreduce);
  ISTART(real(sendbuf, recvbuf, count, type, op, comm, req),
         payload(count, type), NO_RANK);
}

EXPORT int MPI_Ireduce_scatter_block(const void *sendbuf, void *recvbuf,
                                     int recvcount, MPI_Datatype type,
                                     MPI_Op op, MPI_Comm comm,
                                     MPI_Request *req) {
  REAL(Ireduce_scatter_block, int (*)(const void *, void *, int, MPI_Datatype,
                                      MPI_Op, MPI_Comm, MPI_Request *));
  SITE(Ireduce_scatter_block);
  ISTART(real(sendbuf, recvbuf, recvcount, type, op, comm, req),
         (uint64_t)comm_size(comm) * payload(recvcount, type), NO_RANK);
}

typedef int (*igather_fn)(const void *, int, MPI_Datatype, void *, int,
                          MPI_Datatype, MPI_Comm, MPI_Request *);
typedef int (*irgather_fn)(const void *, int, MPI_Datatype, void *, int,
                           MPI_Datatype, int, MPI_Comm, MPI_Request *);

EXPORT int MPI_Iallgather(const void *sendbuf, int sendcount,
                          MPI_Datatype sendtype, void *recvbuf, int recvcount,
                          MPI_Datatype recvtype, MPI_Comm comm,
                          MPI_Request *req) {
  REAL(Iallgather, igather_fn);
  SITE(Iallgather);
  ISTART(real(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
              req),
         sendbuf == IN_PLACE ? payload(recvcount, recvtype)
                             : payload(sendcount, sendtype),
         NO_RANK);
}

EXPORT int MPI_Ialltoall(const void *sendbuf, int sendcount,
                         MPI_Datatype sendtype, void *recvbuf, int recvcount,
                         MPI_Datatype recvtype, MPI_Comm comm,
                         MPI_Request *req) {
  REAL(Ialltoall, igather_fn);
  SITE(Ialltoall);
  ISTART(real(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
              req),
         (uint64_t)comm_size(comm) * (sendbuf == IN_PLACE
                                          ? payload(recvcount, recvtype)
                                          : payload(sendcount, sendtype)),
         NO_RANK);
}

EXPORT int MPI_Igather(const void *sendbuf, int sendcount,
                       MPI_Datatype sendtype, void *recvbuf, int recvcount,
                       MPI_Datatype recvtype, int root, MPI_Comm comm,
                       MPI_Request *req) {
  REAL(Igather, irgather_fn);
  SITE(Igather);
  ISTART(real(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root,
              comm, req),
         sendbuf == IN_PLACE ? payload(recvcount, recvtype)
                             : payload(sendcount, sendtype),
         root);
}

EXPORT int MPI_Iscatter(const void *sendbuf, int sendcount,
                        MPI_Datatype sendtype, void *recvbuf, int recvcount,
                        MPI_Datatype recvtype, int root, MPI_Comm comm,
                        MPI_Request *req) {
  REAL(Iscatter, irgather_fn);
  SITE(Iscatter);
  ISTART(real(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root,
              comm, req),
         recvbuf == IN_PLACE ? payload(sendcount, sendtype)
                             : payload(recvcount, recvtype),
         root);
}
