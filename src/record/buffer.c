/* The hot path: per-thread event buffers, the pool they come from, and the
 * recording functions of the public API.
 *
 * A thread writes events into its current 64 KiB buffer with no lock, no
 * syscall and no allocation; each slot is published by a release store of
 * its `p` word. The writer thread reads published slots while the owner goes
 * on writing, and recycles a buffer once the owner has linked the next one.
 * One free slot is held back for every zone that is open on the thread, so a
 * zone's end is always recorded once its begin was: pairing never breaks,
 * whatever the memory cap does. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../format/wire.h"
#include "internal.h"

MLPROF__HIDDEN __thread mlprof__tls_state mlprof__tls
    __attribute__((tls_model("initial-exec")));
MLPROF__HIDDEN _Atomic int mlprof__on;
MLPROF__HIDDEN _Atomic unsigned mlprof__handoffs;

/* ---- pool --------------------------------------------------------------- */

/* Buffers are mapped, not taken from malloc: the program's heap stays as it
 * would be without mlprof (buffers between its blocks would change how it
 * fragments, and so its speed). */
static mlprof__buf *buf_map(void) {
  void *p = mmap(NULL, sizeof(mlprof__buf), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static void buf_unmap(mlprof__buf *b) { munmap(b, sizeof *b); }

MLPROF__HIDDEN pthread_mutex_t mlprof__pool_lock = PTHREAD_MUTEX_INITIALIZER;
static mlprof__buf *pool_free;
static size_t pool_total, pool_cap = (64u << 20) / sizeof(mlprof__buf);
/* Set when the cap was reached, cleared by a recycle: while it is set,
 * threads that are dropping events do not take the lock for each one. */
static _Atomic int pool_exhausted;

void mlprof__pool_configure(size_t cap_bytes) {
  pthread_mutex_lock(&mlprof__pool_lock);
  pool_cap = cap_bytes / sizeof(mlprof__buf);
  if (pool_cap < 2) pool_cap = 2;
  atomic_store_explicit(&pool_exhausted, 0, memory_order_relaxed);
  while (pool_total > pool_cap && pool_free) {
    mlprof__buf *b = pool_free;
    pool_free = atomic_load_explicit(&b->next, memory_order_relaxed);
    buf_unmap(b);
    pool_total--;
  }
  pthread_mutex_unlock(&mlprof__pool_lock);
}

size_t mlprof__pool_cap_bytes(void) {
  pthread_mutex_lock(&mlprof__pool_lock);
  size_t n = pool_cap;
  pthread_mutex_unlock(&mlprof__pool_lock);
  return n * sizeof(mlprof__buf);
}

size_t mlprof__pool_bytes(void) {
  pthread_mutex_lock(&mlprof__pool_lock);
  size_t n = pool_total;
  pthread_mutex_unlock(&mlprof__pool_lock);
  return n * sizeof(mlprof__buf);
}

static mlprof__buf *pool_get(void) {
  if (atomic_load_explicit(&pool_exhausted, memory_order_relaxed)) return NULL;
  pthread_mutex_lock(&mlprof__pool_lock);
  mlprof__buf *b = pool_free;
  if (b) {
    pool_free = atomic_load_explicit(&b->next, memory_order_relaxed);
  } else if (pool_total < pool_cap) {
    b = buf_map();
    if (b) pool_total++;
  }
  if (!b) atomic_store_explicit(&pool_exhausted, 1, memory_order_relaxed);
  pthread_mutex_unlock(&mlprof__pool_lock);
  if (b) memset(b, 0, sizeof *b);
  return b;
}

void mlprof__buf_recycle(mlprof__buf *b) {
  pthread_mutex_lock(&mlprof__pool_lock);
  /* Give memory back when the cap was lowered. */
  if (pool_total > pool_cap) {
    pool_total--;
    pthread_mutex_unlock(&mlprof__pool_lock);
    buf_unmap(b);
    return;
  }
  atomic_store_explicit(&b->next, pool_free, memory_order_relaxed);
  pool_free = b;
  atomic_store_explicit(&pool_exhausted, 0, memory_order_relaxed);
  pthread_mutex_unlock(&mlprof__pool_lock);
}

/* ---- threads ------------------------------------------------------------ */

static mlprof__thread *_Atomic threads;
static pthread_key_t thread_key;
static pthread_once_t thread_key_once = PTHREAD_ONCE_INIT;
/* Held to unlink a thread, and by anyone else walking the list. */
static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;
static void name_pending(mlprof__thread *t);
static _Atomic uint64_t dropped_by_exited, dropped_base;

mlprof__thread *mlprof__threads_head(void) {
  return atomic_load_explicit(&threads, memory_order_acquire);
}

/* At thread exit: the thread state stays until the writer has drained it. */
static void thread_exit(void *arg) {
  mlprof__thread *t = arg;
  memset(&mlprof__tls, 0, sizeof mlprof__tls);
  /* What the thread frees from here on (other keys' destructors) would
   * register it again: its teardown is not recorded. */
  mlprof__quiet = 1;
  mlprof__altstack_free(t->altstack);
  atomic_store_explicit(&t->exited, 1, memory_order_release);
}

static void thread_key_create(void) {
  pthread_key_create(&thread_key, thread_exit);
}

void mlprof__thread_free(mlprof__thread *t) {
  pthread_mutex_lock(&threads_lock);
  /* New threads are pushed at the head without the lock: unlink t from the
   * head with a CAS, or else from its predecessor, which stays valid since
   * only the writer unlinks. */
  mlprof__thread *head = t;
  if (!atomic_compare_exchange_strong(&threads, &head, t->next)) {
    mlprof__thread *prev = head;
    while (prev && prev->next != t) prev = prev->next;
    if (prev) prev->next = t->next;
  }
  atomic_fetch_add(&dropped_by_exited, atomic_load(&t->dropped));
  pthread_mutex_unlock(&threads_lock);
  mlprof__buf *b = atomic_load_explicit(&t->head, memory_order_acquire);
  while (b) {
    mlprof__buf *n = atomic_load_explicit(&b->next, memory_order_acquire);
    mlprof__buf_recycle(b);
    b = n;
  }
  free(t->frames);
  free(t);
}

static mlprof__thread *thread_register_quiet(void);

/* Quiet: an allocation recorded meanwhile would register the thread again,
 * from inside this registration. */
static mlprof__thread *thread_register(void) {
  int quiet = mlprof__quiet;
  mlprof__quiet = 1;
  mlprof__thread *t = thread_register_quiet();
  mlprof__quiet = quiet;
  return t;
}

static mlprof__thread *thread_register_quiet(void) {
  if (!atomic_load_explicit(&mlprof__on, memory_order_relaxed)) return NULL;
  if (atomic_load_explicit(&mlprof__child_pending, memory_order_acquire))
    mlprof__session_child_start();
  mlprof__thread *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->frames = calloc(MLPROF__MAX_DEPTH, sizeof *t->frames);
  if (!t->frames) {
    free(t);
    return NULL;
  }
  t->tid = (uint32_t)syscall(SYS_gettid);
  t->altstack = mlprof__altstack_setup();
  pthread_getname_np(pthread_self(), t->name, sizeof t->name);
  name_pending(t);
  atomic_store_explicit(&t->name_dirty, 1, memory_order_relaxed);
  pthread_once(&thread_key_once, thread_key_create);
  pthread_setspecific(thread_key, t);
  t->next = atomic_load_explicit(&threads, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit(
      &threads, &t->next, t, memory_order_release, memory_order_relaxed)) {
  }
  mlprof__tls.thread = t;
  return t;
}

void mlprof__buffers_after_fork(void) {
  /* The parent's buffers and threads belong to the parent's profile. Their
   * memory is left alone (copy-on-write pages nobody touches). */
  pool_free = NULL;
  pool_total = 0;
  atomic_store(&pool_exhausted, 0);
  atomic_store(&threads, NULL);
  memset(&mlprof__tls, 0, sizeof mlprof__tls);
  pthread_mutex_init(&mlprof__pool_lock, NULL);
  pthread_mutex_init(&threads_lock, NULL);
}

/* ---- recording --------------------------------------------------------- */

#define ROOM(s) \
  (((uintptr_t)(s)->lim - (uintptr_t)(s)->pos) / sizeof(mlprof__ev))

static void count_drop(mlprof__thread *t) {
  if (t)
    atomic_store_explicit(
        &t->dropped,
        atomic_load_explicit(&t->dropped, memory_order_relaxed) + 1,
        memory_order_relaxed);
}

/* Makes room for an event of `slots` slots beyond the held-back reserve,
 * registering the thread or moving to a new buffer as needed. */
static int room_slow_quiet(uintptr_t slots);
static int room_slow(uintptr_t slots) {
  /* Quiet: what it allocates (a thread's state, a buffer) is the library's,
   * and a signal handler's malloc must not come back here meanwhile. */
  int quiet = mlprof__quiet;
  mlprof__quiet = 1;
  int rc = room_slow_quiet(slots);
  mlprof__quiet = quiet;
  return rc;
}

static int room_slow_quiet(uintptr_t slots) {
  mlprof__tls_state *s = &mlprof__tls;
  mlprof__thread *t = s->thread;
  /* A child made without fork handlers: the locks below may be held by a
   * thread it does not have, and nothing would write what it records. */
  if (!mlprof__session_here()) return 0;
  if (!t && !(t = thread_register())) return 0;
  if (s->skip) return 0;
  if (ROOM(s) >= slots) return 1;
  if (s->depth + slots > MLPROF__BUF_SLOTS) return 0;
  mlprof__buf *nb = pool_get();
  if (!nb) {
    static _Atomic int warned;
    mlprof__warn_once(&warned,
                      "memory cap reached, dropping events (the "
                      "report counts them; raise MLPROF_MEMORY_MB)");
    return 0;
  }
  if (t->cur)
    atomic_store_explicit(&t->cur->next, nb, memory_order_release);
  else
    atomic_store_explicit(&t->head, nb, memory_order_release);
  t->cur = nb;
  s->pos = nb->ev;
  s->lim = nb->ev + MLPROF__BUF_SLOTS - s->depth;
  /* Wake the writer now and then, so a busy thread does not fill the cap
   * between two flush intervals. */
  if ((atomic_fetch_add_explicit(&mlprof__handoffs, 1, memory_order_relaxed) &
       7) == 7)
    mlprof__writer_poke();
  return 1;
}

static inline void put_begin(mlprof__tls_state *s, const mlprof_site *site) {
  mlprof__ev *e = s->pos;
  e->ts = mlprof__now();
  atomic_store_explicit(&e->p, (uint64_t)(uintptr_t)site, memory_order_release);
  s->pos = e + 1;
  s->lim--;
  s->depth++;
}

/* From here until the matching end, this thread records nothing, so that
 * ends keep pairing with the begins that were recorded. */
static void skip_enter(mlprof__tls_state *s, mlprof__thread *t) {
  s->skip = 1;
  t->saved_depth = s->depth;
  t->saved_lim = s->lim;
  s->depth = 0;
  s->lim = s->pos;
}

/* A begin while recording is switched off, inside a zone that was recorded
 * (or is being skipped): its end must not close that zone. */
static __attribute__((noinline)) int begin_off(void) {
  mlprof__tls_state *s = &mlprof__tls;
  if (s->skip)
    s->skip++;
  else
    skip_enter(s, s->thread);
  return 1;
}

/* A begin with no room, inside a dropped zone, or with no site (a name the
 * intern table had no room for): dropped and counted, and its end still
 * pairs with it rather than closing the zone around it. */
static __attribute__((noinline)) int begin_slow(const mlprof_site *site) {
  mlprof__tls_state *s = &mlprof__tls;
  mlprof__thread *t = s->thread;
  if (s->skip) {
    /* Inside a dropped zone: drop its children too, so ends still pair. */
    s->skip++;
    count_drop(t);
    return 1;
  }
  if (room_slow(2) && site) {
    put_begin(s, site);
    return 1;
  }
  t = s->thread;
  if (!t) return 0;
  count_drop(t);
  skip_enter(s, t);
  return 1;
}

int mlprof_zone_begin_site(const mlprof_site *site) {
  mlprof__tls_state *s = &mlprof__tls;
  if (MLPROF__UNLIKELY(
          !atomic_load_explicit(&mlprof__on, memory_order_relaxed)))
    return MLPROF__LIKELY(!s->depth && !s->skip) ? 0 : begin_off();
  if (MLPROF__UNLIKELY(ROOM(s) < 2 || !site)) return begin_slow(site);
  put_begin(s, site);
  return 1;
}

/* The end of a zone whose begin was dropped. */
static __attribute__((noinline)) void end_skipped(void) {
  mlprof__tls_state *s = &mlprof__tls;
  mlprof__thread *t = s->thread;
  if (--s->skip == 0) {
    s->depth = t->saved_depth;
    s->lim = t->saved_lim;
  }
}

/* Not gated by the run-time switch: a zone that began while recording was on
 * gets its end even if recording was switched off meanwhile. */
void mlprof_zone_end(void) {
  mlprof__tls_state *s = &mlprof__tls;
  if (MLPROF__UNLIKELY(!s->depth)) {
    if (s->skip) end_skipped(); /* else an end with no begin: nothing to pair */
    return;
  }
  uint64_t ts = mlprof__now(); /* before the loads: nothing live across it */
  mlprof__ev *e = s->pos;
  e->ts = ts;
  atomic_store_explicit(&e->p, MLPROF__EV_END, memory_order_release);
  s->pos = e + 1;
  s->lim++;
  s->depth--;
}

void mlprof_zone_begin_cat(const char *name, mlprof_category cat) {
  if (!atomic_load_explicit(&mlprof__on, memory_order_relaxed)) {
    static const mlprof_site off = {"", NULL, NULL, 0, 0};
    mlprof_zone_begin_site(&off); /* no interning: only the pairing matters */
    return;
  }
  mlprof_zone_begin_site(mlprof__intern(MLPROF__NAME_ZONE, cat, name));
}

void mlprof_zone_begin(const char *name) {
  mlprof_zone_begin_cat(name, MLPROF_CAT_NONE);
}

/* Events of one or two slots other than zone ends. */
static void put_event(unsigned kind, const mlprof_site *site, uint64_t payload,
                      uintptr_t slots) {
  mlprof__tls_state *s = &mlprof__tls;
  if (ROOM(s) < slots && !room_slow(slots)) {
    count_drop(s->thread);
    return;
  }
  mlprof__ev *e = s->pos;
  uint64_t ts = mlprof__now();
  if (slots == 2) e[1].ts = payload;
  e->ts = ts;
  atomic_store_explicit(&e->p, (uint64_t)(uintptr_t)site | kind,
                        memory_order_release);
  s->pos = e + slots;
}

MLPROF__HIDDEN _Atomic int mlprof__mem_mode = MLPROF__MEM_SAMPLED;
MLPROF__HIDDEN _Atomic uint64_t mlprof__mem_mean = 512u << 10;
MLPROF__HIDDEN _Atomic int mlprof__mem_hooked;

int mlprof_memory_set(const char *mode) {
  int m = MLPROF__MEM_SAMPLED;
  uint64_t mean = atomic_load(&mlprof__mem_mean);
  if (!mode || mlprof__mem_parse(mode, &m, &mean) != 0) return MLPROF_EINVAL;
  atomic_store(&mlprof__mem_mean, mean);
  atomic_store(&mlprof__mem_mode, m);
  return 0;
}

int mlprof_memory_active(void) {
  return atomic_load(&mlprof__mem_hooked) &&
         atomic_load(&mlprof__mem_mode) != MLPROF__MEM_OFF;
}

int mlprof__mem_parse(const char *s, int *mode, uint64_t *mean) {
  if (!strcmp(s, "off")) {
    *mode = MLPROF__MEM_OFF;
  } else if (!strcmp(s, "all")) {
    *mode = MLPROF__MEM_ALL;
  } else if (!strcmp(s, "sampled")) {
    *mode = MLPROF__MEM_SAMPLED;
  } else if (!strncmp(s, "sampled:", 8)) {
    uint64_t n;
    if (mlprof__parse_count(s + 8, &n) != 0 || n == 0) return MLPROF_EINVAL;
    *mode = MLPROF__MEM_SAMPLED;
    *mean = n;
  } else {
    return MLPROF_EINVAL;
  }
  return 0;
}

uint64_t mlprof__mem_weight(uint64_t size) {
  if (atomic_load_explicit(&mlprof__mem_mode, memory_order_relaxed) !=
      MLPROF__MEM_SAMPLED)
    return size;
  /* Sampled with probability 1 - exp(-size / mean): size over that
   * probability is an unbiased estimate of the bytes it stands for. */
  double mean = (double)atomic_load(&mlprof__mem_mean);
  double p = -expm1(-(double)size / mean);
  return p > 0 ? (uint64_t)llround((double)size / p) : size;
}

void mlprof__put_mem(uint64_t addr, uint64_t size, uint64_t stack) {
  if (!atomic_load_explicit(&mlprof__on, memory_order_relaxed)) return;
  mlprof__tls_state *s = &mlprof__tls;
  uintptr_t slots = size ? 2 : 1;
  if (ROOM(s) < slots && !room_slow(slots)) {
    count_drop(s->thread);
    return;
  }
  mlprof__ev *e = s->pos;
  uint64_t ts = mlprof__now();
  uint64_t p = size ? size << 4 | MLPROF__EV_MEM
                    : addr << 4 | MLPROF__EV_MEM_FREE | MLPROF__EV_MEM;
  if (size) {
    e[1].ts = addr;
    atomic_store_explicit(&e[1].p, stack, memory_order_relaxed);
  }
  e->ts = ts;
  atomic_store_explicit(&e->p, p, memory_order_release);
  s->pos = e + slots;
}

void mlprof_gauge_set(const char *name, double value) {
  if (!atomic_load_explicit(&mlprof__on, memory_order_relaxed)) return;
  const mlprof_site *site = mlprof__intern(MLPROF__NAME_GAUGE, 0, name);
  uint64_t bits;
  memcpy(&bits, &value, sizeof bits);
  if (site) put_event(MLPROF__EV_GAUGE, site, bits, 2);
}

void mlprof_units_add(const char *name, uint64_t n) {
  if (!atomic_load_explicit(&mlprof__on, memory_order_relaxed)) return;
  const mlprof_site *site = mlprof__intern(MLPROF__NAME_UNITS, 0, name);
  if (site) put_event(MLPROF__EV_UNITS, site, n, 2);
}

/* The deprecated names (include/mlprof.h), kept for programs built with
 * them. */
void mlprof_counter(const char *name, double value) {
  mlprof_gauge_set(name, value);
}

void mlprof_count(const char *name, uint64_t n) { mlprof_units_add(name, n); }

void mlprof_step(void) {
  if (!atomic_load_explicit(&mlprof__on, memory_order_relaxed)) return;
  put_event(MLPROF__EV_STEP, NULL, 0, 1);
}

void mlprof_step_end(void) {
  if (!atomic_load_explicit(&mlprof__on, memory_order_relaxed)) return;
  put_event(MLPROF__EV_STEP_END, NULL, 0, 1);
}

void mlprof_zone_meta(const char *key, const char *value) {
  if (!atomic_load_explicit(&mlprof__on, memory_order_relaxed)) return;
  if (!mlprof__tls.depth) return; /* no open zone to attach it to */
  const mlprof_site *k = mlprof__intern(MLPROF__NAME_STRING, 0, key);
  const mlprof_site *v = mlprof__intern(MLPROF__NAME_STRING, 0, value);
  if (k && v) put_event(MLPROF__EV_META, k, (uint64_t)(uintptr_t)v, 2);
}

void mlprof_thread_name(const char *name) {
  if (!name) return;
  mlprof__thread *t = mlprof__tls.thread;
  if (!t && !(t = thread_register())) return;
  pthread_mutex_lock(&mlprof__meta_lock);
  snprintf(t->name, sizeof t->name, "%s", name);
  pthread_mutex_unlock(&mlprof__meta_lock);
  atomic_store_explicit(&t->name_dirty, 1, memory_order_release);
}

/* Names set for threads that had not recorded yet (mlprof__thread_name_tid),
 * taken by the thread when it registers. Few: NVTX names a program's
 * threads once each. */
#define PENDING_NAMES 32
static struct {
  uint32_t tid;
  char name[64];
} pending_names[PENDING_NAMES];
static _Atomic unsigned npending;

static void name_rename(mlprof__thread *t, const char *name) {
  pthread_mutex_lock(&mlprof__meta_lock);
  snprintf(t->name, sizeof t->name, "%s", name);
  pthread_mutex_unlock(&mlprof__meta_lock);
  atomic_store_explicit(&t->name_dirty, 1, memory_order_release);
}

int mlprof__thread_name_tid(uint32_t tid, const char *name) {
  if (!name) return -1;
  int found = 0;
  pthread_mutex_lock(&threads_lock);
  for (mlprof__thread *t = mlprof__threads_head(); t; t = t->next)
    if (t->tid == tid && !atomic_load(&t->exited)) {
      name_rename(t, name);
      found = 1;
    }
  if (!found) {
    unsigned n = atomic_load(&npending), i = 0;
    while (i < n && pending_names[i].tid != tid) i++;
    if (i < PENDING_NAMES) {
      pending_names[i].tid = tid;
      snprintf(pending_names[i].name, sizeof pending_names[i].name, "%s", name);
      if (i == n) atomic_store(&npending, n + 1);
      found = 1;
    }
  }
  pthread_mutex_unlock(&threads_lock);
  return found ? 0 : -1;
}

/* A name given to t's tid before t registered. */
static void name_pending(mlprof__thread *t) {
  if (!atomic_load_explicit(&npending, memory_order_relaxed)) return;
  pthread_mutex_lock(&threads_lock);
  unsigned n = atomic_load(&npending);
  for (unsigned i = 0; i < n; i++)
    if (pending_names[i].tid == t->tid) {
      snprintf(t->name, sizeof t->name, "%s", pending_names[i].name);
      pending_names[i] = pending_names[n - 1];
      atomic_store(&npending, n - 1);
      break;
    }
  pthread_mutex_unlock(&threads_lock);
}

static uint64_t dropped_total(void) {
  pthread_mutex_lock(&threads_lock);
  uint64_t n = atomic_load(&dropped_by_exited);
  for (mlprof__thread *t = mlprof__threads_head(); t; t = t->next)
    n += atomic_load_explicit(&t->dropped, memory_order_relaxed);
  pthread_mutex_unlock(&threads_lock);
  return n;
}

void mlprof__dropped_reset(void) {
  atomic_store(&dropped_base, dropped_total());
}

uint64_t mlprof_dropped(void) {
  return dropped_total() - atomic_load(&dropped_base);
}
