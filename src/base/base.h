/* The base layer: helpers every layer may use (recording, format, model,
 * analysis, export, serve, CLI). It uses nothing of theirs. */
#ifndef MLPROF_BASE_H
#define MLPROF_BASE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MLPROF__NONE UINT32_MAX

/* The lower bound of a sorted range, the one binary search: the first index
 * i in [lo, hi) for which below(ctx, i) is 0, where below holds for a prefix
 * of the range and not after it (an array sorted by a key: "the key at i is
 * below the one sought"); hi when it holds throughout. Inline, so a static
 * predicate is inlined too and costs no call. */
static inline size_t mlprof__lower_bound(size_t lo, size_t hi, const void *ctx,
                                         int (*below)(const void *ctx,
                                                      size_t i)) {
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (below(ctx, mid))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* qsort, which may not be handed the NULL of an empty array (C leaves that
 * undefined and UBSan says so): the one way the code sorts. */
static inline void mlprof__sort(void *base, size_t n, size_t size,
                                int (*cmp)(const void *, const void *)) {
  if (n > 1) qsort(base, n, size, cmp);
}

/* Makes room for need elements of elem bytes in the array *arrayp of
 * capacity *cap, growing by half. Returns 0 or MLPROF_ENOMEM (the array is
 * unchanged). */
int mlprof__grow(void *arrayp, size_t *cap, size_t need, size_t elem);

/* A NUL-terminated heap copy of n bytes (which may hold NULs), or NULL. */
char *mlprof__dup(const char *s, size_t n);

/* A map from 64-bit keys (thread ids, name ids, pairs of indices) to 32-bit
 * values, open addressing; shared by the analyses and the exporters. Zero it
 * to start; MLPROF__NONE cannot be stored. */
typedef struct {
  uint64_t *keys;
  uint32_t *vals;
  size_t cap, count;
} mlprof__map;

/* The value for key, or MLPROF__NONE: mlprof__map_get, whose first probe
 * (where small dense keys mostly are) is inlined at the call. */
uint32_t mlprof__map_find(const mlprof__map *m, uint64_t key);
/* Where key's probe starts in a map of cap slots: Fibonacci hashing, as
 * thread ids and name ids are small and dense. */
static inline size_t mlprof__map_slot(uint64_t key, size_t cap) {
  return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & (cap - 1);
}
static inline uint32_t mlprof__map_get(const mlprof__map *m, uint64_t key) {
  if (m->cap) {
    size_t i = mlprof__map_slot(key, m->cap);
    if (m->keys[i] == key && m->vals[i] != MLPROF__NONE) return m->vals[i];
  }
  return mlprof__map_find(m, key);
}
/* Sets key to val. Returns 0 or MLPROF_ENOMEM (the map is unchanged). */
int mlprof__map_put(mlprof__map *m, uint64_t key, uint32_t val);
/* Frees the map's memory and leaves it empty and usable. */
void mlprof__map_clear(mlprof__map *m);

/* FNV-1a over n bytes, continuing from h (MLPROF__HASH_START to begin):
 * hash maps' keys for strings, and signatures. */
#define MLPROF__HASH_START 1469598103934665603ull
uint64_t mlprof__hash(const void *s, size_t n, uint64_t h);

/* The lookup of a table of distinct byte strings whose ids are dense (0,
 * 1, ...): the strings themselves live in the owner's arrays (a name and a
 * length per id), which the analyses hand to the exporters. Zero it to
 * start. */
typedef struct {
  mlprof__map first; /* hash of a string -> the latest id with that hash */
  uint32_t *next;    /* per id: the previous id with the same hash */
  size_t next_cap;
} mlprof__strindex;

/* The id of the string s (n bytes) among the owner's *count strings
 * (*names, *lens, capacity *cap), appended as a copy when new: its id is
 * then the old *count. Returns MLPROF__NONE when memory is short (nothing
 * added). */
uint32_t mlprof__strindex_intern(mlprof__strindex *ix, char ***names,
                                 size_t **lens, size_t *count, size_t *cap,
                                 const char *s, size_t n);
/* Frees the lookup; the owner's strings stay. */
void mlprof__strindex_free(mlprof__strindex *ix);

/* A count: digits only, no sign, no overflow. Returns 0, or -1. */
int mlprof__parse_count(const char *s, uint64_t *out);

/* A duration keeping 3 significant digits: 812 ns, 1.25 µs, 12.5 ms; "-"
 * for a negative or absurd value. */
void mlprof__fmt_duration(char *b, size_t len, double ns);

/* Set on a thread while what it allocates must not be recorded: the
 * library's own threads (writer, sampler), and any thread inside the
 * allocation hooks or the recording library's slow paths (so a hook never
 * re-enters itself, even from a signal handler). */
extern __thread int mlprof__quiet __attribute__((tls_model("initial-exec")));

/* Whether s begins with prefix. */
static inline int mlprof__has_prefix(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The launchers' variables the HEADER's rank fields come from, in order of
 * precedence (docs/format.md): torchrun, Open MPI, MPICH, Slurm. */
#define MLPROF__RANK_VARS \
  "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"
#define MLPROF__WORLD_VARS \
  "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"
#define MLPROF__LOCAL_RANK_VARS \
  "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"
#define MLPROF__JOB_VARS \
  "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid"

/* The value of the environment variable name (MLPROF_..., or a launcher's
 * rank variable) as of the last copy, or NULL when unset or when the
 * process runs with privileges its caller does not have (setuid, setgid,
 * file capabilities: AT_SECURE): such a caller must not choose where the
 * profile goes or which library is loaded. Every variable the recording
 * library and its sampler read goes through here: never the program's
 * environment itself, which may be changing (env.c). */
const char *mlprof__env(const char *name);

/* Copies those variables from the program's environment: only where the
 * program could call getenv itself (its thread, outside any hook). */
void mlprof__env_copy(void);

/* Writes "mlprof[PID]: " and the formatted line to the program's stderr
 * (mlprof__fd_stderr) without allocating; with flag, only the first time
 * flag is seen clear. */
void mlprof__warn_once(_Atomic int *flag, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Descriptors (fd.c). The library's threads keep their descriptors in a
 * table of their own: gives the calling thread a private, empty descriptor
 * table, so that what it opens afterwards is out of the program's reach (not
 * seen, closed, reused nor inherited by it). Call it first thing in a thread
 * of the library, never in a thread of the program. Returns 0, or -1 when
 * the kernel refuses (the thread then shares the program's table). */
int mlprof__fd_private(void);

/* Whether the calling thread has a private table. */
int mlprof__fd_is_private(void);

/* Runs fn(arg) in a short-lived thread with a private table (signals
 * blocked) and returns its result, errno as fn left it: for the library's
 * own reads made from a program's thread. Runs fn here when no thread can
 * be started. */
int mlprof__fd_run_private(int (*fn)(void *), void *arg);

/* Starts fn(arg) in a thread of the library (*t), created with every signal
 * blocked so the program's signals never run on it. pthread_create's
 * result: 0 or an error number. */
int mlprof__thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

/* Initialises *c for timed waits (pthread_cond_timedwait) on
 * CLOCK_MONOTONIC, which the wall clock's steps do not move. */
void mlprof__cond_init_mono(pthread_cond_t *c);

/* Writes len bytes to the program's stderr, from any thread: a thread with a
 * private table writes through a duplicate of the program's descriptor 2
 * (pidfd_getfd), or, where that is refused, leaves the line for the next
 * call from a program's thread (len 0 just writes what was left). Keeps
 * errno. */
void mlprof__fd_stderr(const char *buf, size_t len);

#endif
