/* MPI, interposed through its profiling interface: the library defines the
 * MPI_* functions a program calls, records each as a zone of category
 * communication, and calls the MPI library's PMPI_* function, looked up at
 * the first call. No MPI is needed to build mlprof or to run a program that
 * does not use MPI: the few types and constants used here are declared below.
 *
 * Two ABIs are known, told apart at the first call by a symbol only that
 * ABI's library defines (abis[] below): Open MPI's (handles are pointers to
 * its predefined objects) and MPICH's, shared by MPICH, Intel MPI, Cray MPICH
 * and MVAPICH (handles are ints). With another MPI every call is passed on
 * unrecorded.
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

/* A handle parameter is pointer-wide, which carries either ABI's handle: an
 * int handle arrives in the low half of a register or 8-byte stack slot
 * (x86-64, aarch64), the upper half undefined. Handles are passed on to PMPI
 * untouched; to compare one, hkey() takes the bits the ABI defines. Handles
 * in memory (requests, communicators returned) are read with handle_at(). */
typedef void *MPI_Comm, *MPI_Datatype, *MPI_Op, *MPI_Request, *MPI_Group;
typedef struct MPI_Status MPI_Status; /* laid out as the ABI says */
typedef uintptr_t handle;             /* a handle's key; 0 is none */

/* Room for either ABI's MPI_Status (Open MPI's 24 bytes, MPICH's 20). */
typedef union {
  char bytes[32];
  uint64_t align;
} status_space;

#define ERR_INTERN 17 /* returned when the MPI library cannot be found */
#define CLOCK_ROUNDS 16

enum { H_COMM_WORLD, H_COMM_SELF, H_BYTE, H_REQUEST_NULL, H_COUNT };

/* What differs between the ABIs, read from each one's mpi.h. Ranks with a
 * special meaning are recorded as Open MPI numbers them, whatever the ABI:
 * -1 any source, -2 MPI_PROC_NULL, -4 MPI_ROOT. */
typedef struct {
  const char *symbol;           /* defined by this ABI's libraries only */
  size_t handle_size;           /* of a handle in memory */
  const char *objects[H_COUNT]; /* predefined handles: objects' symbols, */
  handle values[H_COUNT];       /* or constants */
  const void *in_place, *status_ignore;
  int any_source, proc_null, root;
  size_t source_at, tag_at; /* in MPI_Status */
} mpi_abi;

static const mpi_abi abis[] = {
    {.symbol = "ompi_mpi_comm_world",
     .handle_size = sizeof(void *),
     .objects = {"ompi_mpi_comm_world", "ompi_mpi_comm_self", "ompi_mpi_byte",
                 "ompi_request_null"},
     .in_place = (const void *)1,
     .status_ignore = NULL,
     .any_source = -1,
     .proc_null = -2,
     .root = -4,
     .source_at = 0,
     .tag_at = 4},
    /* MPICH's mpi.h defines MPI_DUP_FN as MPIR_Dup_fn, so every library of
     * its ABI has that symbol. */
    {.symbol = "MPIR_Dup_fn",
     .handle_size = sizeof(int),
     .values = {0x44000000, 0x44000001, 0x4c00010d, 0x2c000000},
     .in_place = (const void *)-1,
     .status_ignore = (const void *)1,
     .any_source = -2,
     .proc_null = -1,
     .root = -3,
     .source_at = 8,
     .tag_at = 12},
};

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
static const mpi_abi *abi; /* the library's; NULL: calls are not recorded */
static handle predefined[H_COUNT];
static int recording;
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

static void resolve(void) {
  for (int i = 0; i < F_COUNT; i++)
    if (!(pmpi[i] = dlsym(RTLD_NEXT, pmpi_names[i])))
      pmpi[i] = dlsym(RTLD_DEFAULT, pmpi_names[i]);
  for (size_t a = 0; a < sizeof abis / sizeof *abis && !abi; a++)
    if (dlsym(RTLD_DEFAULT, abis[a].symbol)) abi = &abis[a];
  for (int i = 0; abi && i < H_COUNT; i++)
    if (!(predefined[i] = abi->objects[i]
                              ? (handle)dlsym(RTLD_DEFAULT, abi->objects[i])
                              : abi->values[i]))
      abi = NULL;
  recording = abi != NULL;
  if (!recording && pmpi[F_Init])
    mlprof__warn_once(NULL,
                      "MPI calls not recorded: the MPI library has "
                      "neither Open MPI's nor MPICH's ABI");
}

/* A handle parameter's key. */
static handle hkey(const void *h) {
  return abi->handle_size == sizeof(int) ? (uint32_t)(uintptr_t)h
                                         : (uintptr_t)h;
}

/* The key of the i-th handle of the array at p. */
static handle handle_at(const void *p, int i) {
  if (abi->handle_size == sizeof(int)) {
    uint32_t h;
    memcpy(&h, (const int *)p + i, sizeof h);
    return h;
  }
  return (handle)((void *const *)p)[i];
}

/* A handle, to pass to PMPI. */
#define H(k) ((void *)(k))

/* A rank argument as recorded: a special one numbered as in Open MPI
 * (mpi_abi), else r. */
static int special_rank(int r) {
  return r == abi->any_source  ? -1
         : r == abi->proc_null ? -2
         : r == abi->root      ? -4
                               : r;
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
  handle comm;
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
  handle world_comm = predefined[H_COMM_WORLD];
  ((size_fn)pmpi[F_Comm_size])(H(c->comm), &c->size);
  if (c->comm == world_comm || c->comm == predefined[H_COMM_SELF] ||
      c->size <= 0) {
    snprintf(c->name, sizeof c->name, "%s",
             c->comm == world_comm ? "world" : "self");
    return;
  }
  MPI_Group mine = NULL, world = NULL; /* wide enough for either ABI */
  int *ranks = malloc(2 * (size_t)c->size * sizeof *ranks);
  if (!ranks || ((group_fn)pmpi[F_Comm_group])(H(c->comm), &mine) ||
      ((group_fn)pmpi[F_Comm_group])(H(world_comm), &world)) {
    free(ranks);
    snprintf(c->name, sizeof c->name, "size %d", c->size);
    return;
  }
  for (int i = 0; i < c->size; i++) ranks[i] = i;
  c->world = ranks + c->size;
  ((translate_fn)pmpi[F_Group_translate_ranks])(H(handle_at(&mine, 0)), c->size,
                                                ranks, H(handle_at(&world, 0)),
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
static comm_info *comm_of(handle comm) {
  for (int i = 0; i < ncomms; i++)
    if (comms[i].comm == comm) return &comms[i];
  if (ncomms == MAX_COMMS) return NULL;
  comm_info *c = &comms[ncomms++];
  memset(c, 0, sizeof *c);
  c->comm = comm;
  describe(c);
  return c;
}

/* A communicator's member `rank` as a world rank, a special rank as
 * special_rank() says. Called with lock held. */
static int world_rank(const comm_info *c, int rank) {
  if (rank < 0) return special_rank(rank);
  return c && c->world && rank < c->size ? c->world[rank] : rank;
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
  comm_info *c = comm_of(hkey(comm));
  char name[64];
  snprintf(name, sizeof name, "%s", c ? c->name : "?");
  uint64_t seq = c && collective ? ++c->seq : 0;
  if (peer != NO_RANK) peer = world_rank(c, peer);
  if (root != NO_RANK) root = world_rank(c, root);
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
  handle req;
  const mlprof_site *site;
  uint64_t begin_ns;
} pending;

#define PENDING_BITS 10
#define MAX_PENDING (1 << PENDING_BITS)
static pending table[MAX_PENDING];

/* A multiplicative hash's top bits: every bit of either ABI's handle
 * counts (pointers' low bits are zero, ints' high bits alike). */
static size_t slot_of(handle r) {
  return (size_t)(((uint64_t)r * 0x9E3779B97F4A7C15ull) >> (64 - PENDING_BITS));
}

/* Remembers a request started by the call whose zone is open (on). */
static void track(int on, MPI_Request *req, const mlprof_site *site,
                  uint64_t begin_ns) {
  if (!on || !req) return;
  handle r = handle_at(req, 0);
  if (r == predefined[H_REQUEST_NULL]) return;
  pthread_mutex_lock(&lock);
  for (size_t i = slot_of(r), n = 0; n < MAX_PENDING;
       i = (i + 1) & (MAX_PENDING - 1), n++)
    if (!table[i].req) {
      table[i] = (pending){r, site, begin_ns};
      break;
    }
  pthread_mutex_unlock(&lock);
}

/* Requests saved[k] that the call completed (now[k] became null), both
 * arrays of n handles: each is recorded as a span from its start to now. */
static void settle(const void *saved, const void *now, int n) {
  uint64_t end = mlprof__mono_ns();
  handle null = predefined[H_REQUEST_NULL];
  for (int k = 0; k < n; k++) {
    handle r = handle_at(saved, k);
    if (!r || r == null || handle_at(now, k) != null) continue;
    pending p = {0};
    pthread_mutex_lock(&lock);
    for (size_t i = slot_of(r), m = 0; m < MAX_PENDING && table[i].req;
         i = (i + 1) & (MAX_PENDING - 1), m++)
      if (table[i].req == r) {
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
        table[hole].req = 0;
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

/* Copies of the request handles a Wait/Test call may complete (none when
 * calls are not recorded). */
typedef struct {
  void *saved;
  handle small[16];
} saved_requests;

static void save(saved_requests *s, const MPI_Request *reqs, int n) {
  s->saved = NULL;
  if (!recording || !reqs || n <= 0) return;
  size_t size = (size_t)n * abi->handle_size;
  s->saved = size <= sizeof s->small ? s->small : malloc(size);
  if (s->saved) memcpy(s->saved, reqs, size);
}

static void settle_saved(saved_requests *s, const MPI_Request *now, int n) {
  if (s->saved) settle(s->saved, now, n);
  if (s->saved != s->small) free(s->saved);
}

/* ---- clocks ------------------------------------------------------------- */

/* A private duplicate of the world, as PMPI_Comm_dup wrote it (NULL: none);
 * its handle is handle_at(&clock_comm, 0). */
static MPI_Comm clock_comm;

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
  MPI_Comm comm = H(handle_at(&clock_comm, 0));
  MPI_Datatype byte = H(predefined[H_BYTE]);
  status_space st;
  MPI_Status *status = (MPI_Status *)&st;
  int rank = comm_rank(comm), size = comm_size(comm);
  uint64_t t = 0, best_rtt = UINT64_MAX, at = mlprof__mono_ns();
  int64_t offset = 0;
  for (int r = 1; rank == 0 && r < size; r++)
    for (int k = 0; k < CLOCK_ROUNDS; k++) {
      if (rcv(&t, 8, byte, r, 0, comm, status)) return;
      t = mlprof__mono_ns();
      if (snd(&t, 8, byte, r, 0, comm)) return;
    }
  for (int k = 0; rank > 0 && k < CLOCK_ROUNDS; k++) {
    uint64_t t0 = mlprof__mono_ns();
    if (snd(&t0, 8, byte, 0, 0, comm) || rcv(&t, 8, byte, 0, 0, comm, status))
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
  MPI_Comm world = H(predefined[H_COMM_WORLD]);
  char v[16];
  snprintf(v, sizeof v, "%d", comm_rank(world));
  mlprof_meta("dist.rank", v);
  snprintf(v, sizeof v, "%d", comm_size(world));
  mlprof_meta("dist.world_size", v);
  mlprof_meta("dist.backend", "mpi");
  if (((dup_fn)pmpi[F_Comm_dup])(world, &clock_comm) == 0)
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
  for (int i = 0; recording && comm && i < ncomms; i++)
    if (comms[i].comm == handle_at(comm, 0)) {
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

/* The status to give a receive: the caller's, or mine when the caller's
 * is MPI_STATUS_IGNORE and the call's zone (on) needs what it received. */
static MPI_Status *status_for(int on, MPI_Status *status, status_space *mine) {
  return on && (const void *)status == abi->status_ignore ? (MPI_Status *)mine
                                                          : status;
}

/* What a receive got: bytes, and the source and tag matched. */
static uint64_t received(const MPI_Status *st, int *source, int *tag) {
  typedef int (*count_fn)(const MPI_Status *, MPI_Datatype, int *);
  int n = 0;
  ((count_fn)pmpi[F_Get_count])(st, H(predefined[H_BYTE]), &n);
  memcpy(source, (const char *)st + abi->source_at, sizeof *source);
  memcpy(tag, (const char *)st + abi->tag_at, sizeof *tag);
  return n > 0 ? (uint64_t)n : 0;
}

EXPORT int MPI_Recv(void *buf, int count, MPI_Datatype type, int source,
                    int tag, MPI_Comm comm, MPI_Status *status) {
  REAL(Recv,
       int (*)(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Status *));
  SITE(Recv);
  status_space mine;
  int on = begin(&site);
  MPI_Status *st = status_for(on, status, &mine);
  int rc = real(buf, count, type, source, tag, comm, st);
  if (on) {
    uint64_t bytes = rc == 0 ? received(st, &source, &tag) : 0;
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
  status_space mine;
  int on = begin(&site);
  MPI_Status *st = status_for(on, status, &mine);
  int rc = real(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount,
                recvtype, source, recvtag, comm, st);
  if (on) {
    uint64_t got = rc == 0 ? received(st, &source, &recvtag) : 0;
    pthread_mutex_lock(&lock);
    int from = world_rank(comm_of(hkey(comm)), source);
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
  saved_requests s;
  save(&s, req, 1);
  int on = begin(&site);
  int rc = real(req, status);
  if (on) mlprof_zone_end();
  settle_saved(&s, req, 1);
  return rc;
}

EXPORT int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status *statuses) {
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
                        MPI_Status *statuses) {
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
  saved_requests s;
  save(&s, req, 1);
  int rc = real(req, flag, status);
  settle_saved(&s, req, 1);
  return rc;
}

EXPORT int MPI_Testall(int n, MPI_Request reqs[], int *flag,
                       MPI_Status *statuses) {
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
                        MPI_Status *statuses) {
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
         sendbuf == abi->in_place ? payload(recvcount, recvtype)
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
         sendbuf == abi->in_place ? own_count(recvcounts, comm, recvtype)
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
         sendbuf == abi->in_place ? payload(recvcount, recvtype)
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
         sendbuf == abi->in_place ? own_count(recvcounts, comm, recvtype)
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
         recvbuf == abi->in_place ? payload(sendcount, sendtype)
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
         recvbuf == abi->in_place ? own_count(sendcounts, comm, sendtype)
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
         (uint64_t)comm_size(comm) * (sendbuf == abi->in_place
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
         sendbuf == abi->in_place ? sum_counts(recvcounts, comm, recvtype)
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
         sendbuf == abi->in_place ? payload(recvcount, recvtype)
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
         (uint64_t)comm_size(comm) * (sendbuf == abi->in_place
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
         sendbuf == abi->in_place ? payload(recvcount, recvtype)
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
         recvbuf == abi->in_place ? payload(sendcount, sendtype)
                                  : payload(recvcount, recvtype),
         root);
}
