/* The malloc family and mmap/munmap, interposed by the preloaded library
 * (docs/memory.md): each call goes to the next definition (the C library's,
 * or another preloaded allocator's); what it allocated is recorded on the
 * calling thread's event buffer (mlprof__put_mem), where the writer gives
 * it the zone open on the thread.
 *
 * Sampled mode (the default) records an allocation when a Poisson process
 * over the bytes allocated, with a mean gap of mlprof__mem_mean bytes, puts
 * a point inside it: a thread-local countdown, so an allocation that is not
 * sampled costs a subtraction and a compare. A free is recorded only when
 * its address was sampled and is still live: those addresses are kept in an
 * open-addressing table in mmap'd memory behind a spinlock, with counters
 * and a bitmap of their non-empty buckets in front of it, so the free of an
 * unsampled address mostly costs one bit read. In mode all, every allocation
 * and every free is recorded and the reading side pairs them.
 *
 * The spinlock never spins forever: a child made without fork handlers
 * (clone, syscall(SYS_clone), _Fork, vfork) while another thread held it
 * has a copy of the lock (or shares it) but not the thread that would free
 * it. A waiter that has spun for long checks whether it is still the
 * table's process; when not, it leaves the table alone: the sample is
 * dropped, the free is taken as unsampled.
 *
 * The hooks never allocate, never re-enter (mlprof__quiet is set while one
 * records; an allocation made meanwhile, by the library or by a signal
 * handler, passes through unrecorded), and work before main and before the
 * next definitions are known: dlsym may itself call calloc, which is then
 * served from a small static arena whose blocks are never freed. */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../record/internal.h"
#include "../record/stack.h"

#define EXPORT __attribute__((visibility("default")))

typedef void *(*malloc_fn)(size_t);
typedef void *(*calloc_fn)(size_t, size_t);
typedef void *(*realloc_fn)(void *, size_t);
typedef void (*free_fn)(void *);
typedef int (*posix_memalign_fn)(void **, size_t, size_t);
typedef void *(*memalign_fn)(size_t, size_t);
typedef void *(*valloc_fn)(size_t);
typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);
typedef int (*munmap_fn)(void *, size_t);

static struct {
  malloc_fn malloc;
  calloc_fn calloc;
  realloc_fn realloc;
  free_fn free;
  posix_memalign_fn posix_memalign;
  memalign_fn aligned_alloc, memalign;
  valloc_fn valloc, pvalloc;
  mmap_fn mmap;
  munmap_fn munmap;
} next;

/* ---- bootstrap: the next definitions ------------------------------------ */

static _Atomic int resolving;
static _Alignas(16) unsigned char arena[64 << 10];
static _Atomic size_t arena_used;

static void *arena_alloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  size_t at = atomic_fetch_add(&arena_used, n);
  if (at + n > sizeof arena) return NULL;
  return arena + at;
}

static int in_arena(const void *p) {
  return (const unsigned char *)p >= arena &&
         (const unsigned char *)p < arena + sizeof arena;
}

static void *sym(const char *name) { return dlsym(RTLD_NEXT, name); }

#define RESOLVE(field, name)                     \
  do {                                           \
    void *f_ = sym(name);                        \
    memcpy(&next.field, &f_, sizeof next.field); \
  } while (0)

/* Finds the next definitions; an allocation made meanwhile (by dlsym) comes
 * from the arena. */
static void resolve(void) {
  if (atomic_exchange(&resolving, 1)) return;
  RESOLVE(calloc, "calloc");
  RESOLVE(malloc, "malloc");
  RESOLVE(realloc, "realloc");
  RESOLVE(free, "free");
  RESOLVE(posix_memalign, "posix_memalign");
  RESOLVE(aligned_alloc, "aligned_alloc");
  RESOLVE(memalign, "memalign");
  RESOLVE(valloc, "valloc");
  RESOLVE(pvalloc, "pvalloc");
  RESOLVE(mmap, "mmap");
  RESOLVE(munmap, "munmap");
  atomic_store(&resolving, 0);
}

/* Whether the next definitions are known; when not, resolves them unless
 * that is under way (the caller is dlsym: it must use the arena). */
static int ready(void) {
  if (MLPROF__LIKELY(next.free != NULL)) return 1;
  if (atomic_load(&resolving)) return 0;
  resolve();
  return next.free != NULL;
}

/* ---- sampling ----------------------------------------------------------- */

/* Bytes left before the thread's next sample, once drawn. */
static __thread int64_t countdown __attribute__((tls_model("initial-exec")));
static __thread int drawn __attribute__((tls_model("initial-exec")));
static __thread uint64_t rng __attribute__((tls_model("initial-exec")));

/* An exponential gap with the configured mean, at least 1 byte. */
static int64_t draw(void) {
  if (!rng) rng = (uint64_t)gettid() * 0x9e3779b97f4a7c15ull ^ mlprof__now();
  rng ^= rng << 13; /* xorshift64 */
  rng ^= rng >> 7;
  rng ^= rng << 17;
  double u = ((double)(rng >> 11) + 0.5) * 0x1.0p-53; /* (0, 1) */
  double g = -log(u) * (double)atomic_load_explicit(&mlprof__mem_mean,
                                                    memory_order_relaxed);
  return g < 1 ? 1 : g > 0x1.0p62 ? (int64_t)1 << 62 : (int64_t)g;
}

/* The countdown ran out within an allocation of n bytes. */
static __attribute__((noinline)) int sample_slow(size_t n) {
  if (!drawn) { /* first use on this thread */
    drawn = 1;
    countdown = draw() - (int64_t)n;
    if (countdown > 0) return 0;
  }
  /* A point fell inside the allocation; by memorylessness the next one is
   * an exponential gap past its end. */
  countdown = draw();
  return 1;
}

/* Whether an allocation of n bytes is recorded. */
static inline int want(size_t n) {
  int mode = atomic_load_explicit(&mlprof__mem_mode, memory_order_relaxed);
  if (MLPROF__LIKELY(mode == MLPROF__MEM_SAMPLED)) {
    if ((countdown -= (int64_t)n) > 0) return 0;
    return sample_slow(n);
  }
  return mode == MLPROF__MEM_ALL;
}

/* ---- live sampled addresses --------------------------------------------- */

/* Addresses; the table takes at most a quarter of that, deleted slots
 * included (rebuilt when they are half of it), so that probes stay short:
 * 65536 sampled blocks live at once are 32 GiB at the default mean. */
#define LIVE_CAP (1u << 18)
#define FILTER_CAP (1u << 16)

static uint64_t *live;  /* mmap'd; 0 empty, 1 deleted */
static uint8_t *filter; /* per hash bucket: live addresses there */
/* Per hash bucket: whether filter counts any, read by every free. 8 KiB in
 * the library's own data, where it stays in cache: the counts (64 KiB,
 * mapped) made the free of an unsampled address a cache and TLB miss, half
 * of sampled mode's cost on a CNN step. Written under the lock. */
static _Atomic uint8_t filter_bits[FILTER_CAP / 8];

static inline int bucket(uint64_t h) {
  return (int)((h >> 40) & (FILTER_CAP - 1));
}
static _Atomic uint32_t live_n, live_used; /* live; live + deleted */
static _Atomic int live_lock;
static _Atomic int live_failed;
/* The process whose table this is (0 before malloc_setup): set again in a
 * child forked with its handlers. */
static _Atomic pid_t live_pid;
/* Tries between two checks of the process. The lock is held for a few
 * hundred ns; a holder preempted keeps it for a time slice, spent yielding. */
#define LOCK_SPINS 4096

static inline uint64_t hash64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

/* Takes the lock; 0 when it is held in a process other than the table's
 * (above): then nobody here will free it. */
static int lock(void) {
  for (unsigned i = 0;; i++) {
    if (!atomic_load_explicit(&live_lock, memory_order_relaxed) &&
        !atomic_exchange_explicit(&live_lock, 1, memory_order_acquire))
      return 1;
    if (i == LOCK_SPINS) {
      pid_t own = atomic_load_explicit(&live_pid, memory_order_relaxed);
      if (own && getpid() != own) return 0;
      sched_yield();
      i = 0;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

static void unlock(void) {
  atomic_store_explicit(&live_lock, 0, memory_order_release);
}

/* Under the lock: makes the table once; 0 when it cannot be. */
static int live_setup(void) {
  if (live) return 1;
  if (atomic_load(&live_failed)) return 0;
  size_t bytes = LIVE_CAP * sizeof *live + FILTER_CAP;
  void *m = next.mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    atomic_store(&live_failed, 1);
    return 0;
  }
  filter = (uint8_t *)m + LIVE_CAP * sizeof *live;
  live = m;
  return 1;
}

/* Under the lock: empties the deleted slots by rebuilding in place. */
static void live_rehash(void) {
  for (uint32_t i = 0; i < LIVE_CAP; i++)
    if (live[i] == 1) live[i] = 0;
  /* Entries after a cleared slot may now be unreachable: reinsert all. */
  for (uint32_t i = 0; i < LIVE_CAP; i++) {
    uint64_t a = live[i];
    if (a < 2) continue;
    live[i] = 0;
    uint32_t j = (uint32_t)hash64(a) & (LIVE_CAP - 1);
    while (live[j]) j = (j + 1) & (LIVE_CAP - 1);
    live[j] = a;
  }
  uint32_t n = 0;
  for (uint32_t i = 0; i < LIVE_CAP; i++) n += live[i] >= 2;
  atomic_store(&live_used, n);
}

/* Remembers sampled address a; 0 when the table is full (its free will
 * then not be recorded: the reader sees it live at the end). */
static int live_add(uint64_t a) {
  int ok = 0;
  if (!lock()) return 0;
  if (live_setup()) {
    if (atomic_load(&live_used) >= LIVE_CAP / 4 &&
        atomic_load(&live_n) < LIVE_CAP / 8)
      live_rehash();
    if (atomic_load(&live_used) < LIVE_CAP / 4) {
      uint64_t h = hash64(a);
      uint32_t j = (uint32_t)h & (LIVE_CAP - 1);
      while (live[j] >= 2) j = (j + 1) & (LIVE_CAP - 1);
      if (!live[j]) atomic_fetch_add(&live_used, 1);
      live[j] = a;
      int b = bucket(h);
      if (filter[b] < 255) ++filter[b];
      atomic_fetch_or_explicit(&filter_bits[b / 8], (uint8_t)(1u << (b % 8)),
                               memory_order_relaxed);
      atomic_fetch_add(&live_n, 1);
      ok = 1;
    }
  }
  unlock();
  return ok;
}

/* Forgets a when it was sampled; returns whether it was. Called with
 * mlprof__quiet clear: set while the lock is held, so that a signal
 * handler's free on this thread does not wait for it forever. */
static int live_take(uint64_t a) {
  if (!atomic_load_explicit(&live_n, memory_order_relaxed)) return 0;
  uint64_t h = hash64(a);
  int b = bucket(h);
  if (!(atomic_load_explicit(&filter_bits[b / 8], memory_order_relaxed) &
        (1u << (b % 8))))
    return 0;
  int found = 0;
  mlprof__quiet = 1;
  if (!lock()) {
    mlprof__quiet = 0;
    return 0;
  }
  for (uint32_t j = (uint32_t)h & (LIVE_CAP - 1); live[j];
       j = (j + 1) & (LIVE_CAP - 1))
    if (live[j] == a) {
      live[j] = 1;
      /* A saturated bucket stays: only costs a probe. */
      if (filter[b] < 255 && !--filter[b])
        atomic_fetch_and_explicit(&filter_bits[b / 8],
                                  (uint8_t) ~(1u << (b % 8)),
                                  memory_order_relaxed);
      atomic_fetch_sub(&live_n, 1);
      found = 1;
      break;
    }
  unlock();
  mlprof__quiet = 0;
  return found;
}

/* Around fork: the lock is taken first, so that no thread the child will
 * not have holds it. Not taken (this process is itself a child made without
 * fork handlers, the lock held by a thread it does not have): the child
 * starts a table of its own. */
static int prepared;
static void live_prepare(void) { prepared = lock(); }
static void live_parent(void) {
  if (prepared) unlock();
}
static void live_child(void) {
  atomic_store(&live_pid, getpid());
  if (!prepared) {
    /* Whatever the holder was doing is half done: a new table. */
    if (live) next.munmap(live, LIVE_CAP * sizeof *live + FILTER_CAP);
    live = NULL;
    filter = NULL;
    atomic_store(&live_n, 0);
    atomic_store(&live_used, 0);
    for (size_t i = 0; i < sizeof filter_bits; i++)
      atomic_store(&filter_bits[i], 0);
  }
  unlock();
}

/* Set while malloc_setup calls the process's malloc: this file's malloc
 * says it was the one called. */
static int probing, probed;

__attribute__((constructor)) static void malloc_setup(void) {
  if (!next.free) resolve();
  /* The process's malloc is this file's when this library was preloaded (or
   * linked before the C library); loaded later, the C library's wins. Asked
   * by calling it: the address dlsym gives may be the executable's PLT
   * entry (a non-PIE program that takes malloc's address, as Debian's
   * python3 does), which says nothing of where it leads. */
  void *(*fn)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "malloc");
  if (fn) {
    probing = 1;
    free(fn(1));
    probing = 0;
  }
  if (probed) atomic_store(&mlprof__mem_hooked, 1);
  atomic_store(&live_pid, getpid());
  pthread_atfork(live_prepare, live_parent, live_child);
}

/* ---- recording ---------------------------------------------------------- */

/* The allocation's site: the native frame that called the hook (pc, its
 * return address), then the thread's Python frames when a walker is
 * registered (src/record/stack.h), interned; 0 when the tables are full. */
static uint32_t site_here(uintptr_t pc) {
  uint32_t fr[MLPROF__SITE_DEPTH];
  size_t n = 0;
  if ((fr[0] = mlprof__stack_frame_native(pc))) n = 1;
  const mlprof__stack_walker *w = mlprof__stack_walker_get();
  if (w && w->self) n += w->self(fr + n, MLPROF__SITE_DEPTH - n);
  mlprof__thread *t = mlprof__tls.thread;
  if (!n || !t) return mlprof__stack_intern(fr, n);
  /* A site sharing its outer frames with the thread's last one interns
   * only the frames that differ (ids never change): a CNN's step samples
   * the same few stacks again and again. */
  size_t k = 0, last = t->site_n;
  while (k < n && k < last && fr[n - 1 - k] == t->site_fr[last - 1 - k]) k++;
  uint32_t id = k ? t->site_node[last - k] : 0;
  if (k && last != n)
    memmove(t->site_node + n - k, t->site_node + last - k,
            k * sizeof *t->site_node);
  memcpy(t->site_fr, fr, n * sizeof *fr);
  t->site_n = (uint32_t)n;
  for (size_t i = n - k; i-- > 0;) {
    /* An unknown frame (a full table) still takes its place. */
    if (!(id = mlprof__stack_push(id, fr[i]))) {
      t->site_n = 0;
      return 0;
    }
    t->site_node[i] = id;
  }
  return id;
}

static __attribute__((noinline)) void note_alloc(void *p, size_t n,
                                                 uintptr_t pc) {
  if (mlprof__quiet || !n) return;
  mlprof__quiet = 1;
  int mode = atomic_load_explicit(&mlprof__mem_mode, memory_order_relaxed);
  if (atomic_load_explicit(&mlprof__on, memory_order_relaxed) &&
      (mode == MLPROF__MEM_ALL || live_add((uint64_t)(uintptr_t)p)))
    mlprof__put_mem((uint64_t)(uintptr_t)p, n, site_here(pc));
  mlprof__quiet = 0;
}

/* Before the memory at p is given back. */
static inline void note_free(void *p) {
  int mode = atomic_load_explicit(&mlprof__mem_mode, memory_order_relaxed);
  if (!p || mode == MLPROF__MEM_OFF || mlprof__quiet) return;
  if (mode == MLPROF__MEM_SAMPLED && !live_take((uint64_t)(uintptr_t)p)) return;
  mlprof__quiet = 1;
  mlprof__put_mem((uint64_t)(uintptr_t)p, 0, 0);
  mlprof__quiet = 0;
}

/* In a hook: its caller's return address is the site's native frame. */
#define NOTE(p, n)                                                  \
  do {                                                              \
    if ((p) && want(n))                                             \
      note_alloc((p), (n), (uintptr_t)__builtin_return_address(0)); \
  } while (0)

EXPORT void *malloc(size_t n) {
  if (MLPROF__UNLIKELY(!ready())) return arena_alloc(n);
  if (MLPROF__UNLIKELY(probing)) probed = 1;
  void *p = next.malloc(n);
  NOTE(p, n);
  return p;
}

EXPORT void *calloc(size_t k, size_t n) {
  if (MLPROF__UNLIKELY(!ready())) {
    if (n && k > SIZE_MAX / n) return NULL;
    return arena_alloc(k * n); /* static: already zero */
  }
  void *p = next.calloc(k, n);
  NOTE(p, k * n);
  return p;
}

EXPORT void free(void *p) {
  if (MLPROF__UNLIKELY(!p || in_arena(p))) return;
  note_free(p);
  if (MLPROF__LIKELY(ready())) next.free(p);
}

EXPORT void *realloc(void *p, size_t n) {
  if (MLPROF__UNLIKELY(!ready() || in_arena(p))) {
    void *q = ready() ? next.malloc(n) : arena_alloc(n);
    if (q && p) {
      size_t left = (size_t)(arena + sizeof arena - (unsigned char *)p);
      memcpy(q, p, n < left ? n : left);
    }
    return q;
  }
  /* Freed before the call: once it returns, another thread may be given
   * the old address. */
  note_free(p);
  void *q = next.realloc(p, n);
  NOTE(q, n);
  return q;
}

EXPORT int posix_memalign(void **out, size_t align, size_t n) {
  if (MLPROF__UNLIKELY(!ready())) return ENOMEM;
  int rc = next.posix_memalign(out, align, n);
  if (rc == 0) NOTE(*out, n);
  return rc;
}

EXPORT void *aligned_alloc(size_t align, size_t n) {
  if (MLPROF__UNLIKELY(!ready())) return NULL;
  void *p = next.aligned_alloc(align, n);
  NOTE(p, n);
  return p;
}

EXPORT void *memalign(size_t align, size_t n) {
  if (MLPROF__UNLIKELY(!ready())) return NULL;
  void *p = next.memalign(align, n);
  NOTE(p, n);
  return p;
}

EXPORT void *valloc(size_t n) {
  if (MLPROF__UNLIKELY(!ready())) return NULL;
  void *p = next.valloc(n);
  NOTE(p, n);
  return p;
}

EXPORT void *pvalloc(size_t n) {
  if (MLPROF__UNLIKELY(!ready())) return NULL;
  void *p = next.pvalloc(n);
  NOTE(p, n);
  return p;
}

/* Anonymous mappings only: a file's mapping is not the program's heap. */
EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd,
                  off_t off) {
  if (MLPROF__UNLIKELY(!ready())) {
    errno = ENOMEM;
    return MAP_FAILED;
  }
  void *p = next.mmap(addr, len, prot, flags, fd, off);
  if (p != MAP_FAILED && (flags & MAP_ANONYMOUS)) NOTE(p, len);
  return p;
}

EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd,
                    off_t off) __attribute__((alias("mmap")));

EXPORT int munmap(void *addr, size_t len) {
  if (MLPROF__UNLIKELY(!ready())) {
    errno = EINVAL;
    return -1;
  }
  note_free(addr);
  return next.munmap(addr, len);
}
