/* Interned stacks (stack.h): lock-free tables in memory mapped once, so
 * that a malloc hook can intern a stack, and their definitions encoded into
 * STACKS payloads by the writer (docs/format.md).
 *
 * Each table maps a 64-bit key to an id by open addressing: a slot's key is
 * claimed by compare-and-swap, the id (a counter) taken, the entry filled
 * and marked ready, and only then the id stored in the slot. A lookup that
 * meets a claimed slot whose id is not stored yet waits a little, then
 * answers 0 rather than block. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../format/wire.h"
#include "internal.h"
#include "stack.h"

#define FUNC_CAP (1u << 16)
#define FRAME_CAP (1u << 18)
#define NODE_CAP (1u << 20)
#define PC_SLOTS (1u << 20)
#define STR_BYTES (8u << 20)
#define STR_MAX 4095
#define PROBES 64

typedef struct {
  _Atomic uint64_t key;
  _Atomic uint32_t id;
  _Atomic uint32_t pad; /* written to touch its page (touch) */
} slot;

/* Bits of the largest slot table's pages (4 KiB each). */
#define PAGE_BYTES 4096u
#define PAGE_WORDS (2 * NODE_CAP * sizeof(slot) / PAGE_BYTES / 64)

typedef struct {
  _Atomic uint64_t key; /* what the id stands for (frames and nodes) */
  uint32_t a, b, c;     /* funcs: file, function (string offsets), line */
  _Atomic uint32_t ready;
} entry;

typedef struct {
  slot *slots;
  entry *e; /* by id; e[0] unused */
  uint32_t mask, cap;
  _Atomic uint32_t n; /* ids given */
  uint32_t written;   /* ids written to the current file (writer only) */
  _Atomic uint64_t full;
  _Atomic uint64_t touched[PAGE_WORDS]; /* pages of slots touched */
} table;

static table funcs, frames, nodes, pcs;
static char *strs;
static _Atomic uint32_t strs_len = 1; /* offset 0 is the empty string */
static _Atomic int state;             /* 0 new, 1 mapping, 2 ready, 3 failed */
static const mlprof__stack_walker *_Atomic walker;

/* Frames with these keys are made on first use. */
#define KEY_NATIVE (1ull << 63)
#define KEY_TRUNCATED (~0ull)

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

/* mmap without going through an interposed mmap (allocation sampling). */
static void *map(size_t n) {
  long p = syscall(SYS_mmap, NULL, n, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == -1 ? NULL : (void *)p;
}

static int table_map(table *t, uint32_t cap, int entries) {
  t->cap = cap;
  t->mask = 2 * cap - 1;
  t->slots = map((size_t)2 * cap * sizeof(slot));
  if (entries) t->e = map((size_t)(cap + 1) * sizeof(entry));
  return t->slots && (!entries || t->e) ? 0 : -1;
}

static int ready(void) {
  int s = atomic_load_explicit(&state, memory_order_acquire);
  if (MLPROF__LIKELY(s == 2)) return 1;
  if (s != 0) return 0;
  int expect = 0;
  if (!atomic_compare_exchange_strong(&state, &expect, 1)) return 0;
  int ok = table_map(&funcs, FUNC_CAP, 1) == 0 &&
           table_map(&frames, FRAME_CAP, 1) == 0 &&
           table_map(&nodes, NODE_CAP, 1) == 0 &&
           table_map(&pcs, PC_SLOTS / 2, 0) == 0 && (strs = map(STR_BYTES));
  atomic_store_explicit(&state, ok ? 2 : 3, memory_order_release);
  return ok;
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Slot s, its page first touched by a write. Read first, a page of the
 * mapping would be the kernel's shared zero page, and the first write to it
 * would then replace it and flush the TLB of every CPU the process runs on:
 * an interrupt of each of the program's running threads, once per page,
 * thousands in a run's first minutes. */
static slot *touch(table *t, slot *s) {
  size_t page = (size_t)(s - t->slots) * sizeof *s / PAGE_BYTES;
  _Atomic uint64_t *w = &t->touched[page / 64];
  uint64_t bit = 1ull << (page % 64);
  if (MLPROF__LIKELY(atomic_load_explicit(w, memory_order_relaxed) & bit))
    return s;
  atomic_fetch_or_explicit(&s->pad, 0, memory_order_relaxed);
  atomic_fetch_or_explicit(w, bit, memory_order_relaxed);
  return s;
}

/* The slot holding key, or NULL when absent; *claim gets the first free slot
 * of its probe sequence (NULL when none). */
static slot *probe(table *t, uint64_t key, slot **claim) {
  uint64_t h = mix(key);
  *claim = NULL;
  for (uint32_t i = 0; i < PROBES; i++) {
    slot *s = touch(t, &t->slots[(h + i) & t->mask]);
    uint64_t k = atomic_load_explicit(&s->key, memory_order_acquire);
    if (k == key) return s;
    if (k == 0) {
      *claim = s;
      return NULL;
    }
  }
  return NULL;
}

/* The id a found slot holds, waiting a little for one being made (its
 * maker may have been preempted: a few yields let it finish). */
static uint32_t slot_id(slot *s) {
  for (int i = 0; i < 1100; i++) {
    uint32_t id = atomic_load_explicit(&s->id, memory_order_acquire);
    if (id) return id;
    if (i < 1000)
      relax();
    else
      sched_yield();
  }
  return 0;
}

static uint32_t find(table *t, uint64_t key) {
  slot *claim, *s = probe(t, key, &claim);
  return s ? slot_id(s) : 0;
}

/* The id of key, made with fill(entry, arg) when new. 0: full or busy. */
static uint32_t intern(table *t, uint64_t key,
                       void (*fill)(entry *e, const void *arg),
                       const void *arg) {
  for (;;) {
    slot *claim, *s = probe(t, key, &claim);
    if (s) return slot_id(s);
    if (!claim) {
      atomic_fetch_add(&t->full, 1);
      return 0;
    }
    uint64_t expect = 0;
    if (!atomic_compare_exchange_strong(&claim->key, &expect, key)) continue;
    uint32_t id = atomic_fetch_add(&t->n, 1) + 1;
    if (id > t->cap) {
      atomic_store(&t->n, t->cap);
      atomic_fetch_add(&t->full, 1);
      return 0; /* the slot keeps id 0: this key stays unknown */
    }
    if (t->e) {
      entry *e = &t->e[id];
      atomic_store_explicit(&e->key, key, memory_order_relaxed);
      if (fill) fill(e, arg);
      atomic_store_explicit(&e->ready, 1, memory_order_release);
    }
    atomic_store_explicit(&claim->id, id, memory_order_release);
    return id;
  }
}

/* ---- interning -------------------------------------------------------- */

static uint32_t str_add(const char *s) {
  size_t n = s ? strnlen(s, STR_MAX) : 0;
  if (!n) return 0;
  uint32_t off = atomic_fetch_add(&strs_len, (uint32_t)n + 1);
  if ((uint64_t)off + n + 1 > STR_BYTES) return 0;
  memcpy(strs + off, s, n);
  strs[off + n] = 0;
  return off;
}

typedef struct {
  const char *file, *function;
  uint32_t first_line;
} func_arg;

static void fill_func(entry *e, const void *arg) {
  const func_arg *f = arg;
  e->a = str_add(f->file);
  e->b = str_add(f->function);
  e->c = f->first_line;
}

uint32_t mlprof__stack_func_find(uint64_t key) {
  return key && ready() ? find(&funcs, key) : 0;
}

uint32_t mlprof__stack_func_add(uint64_t key, const char *file,
                                const char *function, uint32_t first_line) {
  if (!key || !ready()) return 0;
  func_arg a = {file, function, first_line};
  return intern(&funcs, key, fill_func, &a);
}

uint32_t mlprof__stack_pc_find(uint64_t key) {
  return key && ready() ? find(&pcs, key) : 0;
}

/* The pc cache stores line + 1 where the other tables store ids. */
void mlprof__stack_pc_add(uint64_t key, uint32_t line) {
  if (!key || !ready() || line == UINT32_MAX) return;
  slot *claim, *s = probe(&pcs, key, &claim);
  if (s || !claim) return;
  uint64_t expect = 0;
  if (atomic_compare_exchange_strong(&claim->key, &expect, key))
    atomic_store_explicit(&claim->id, line + 1, memory_order_release);
}

uint32_t mlprof__stack_frame_py(uint32_t func, uint32_t line) {
  if (!func || !ready()) return 0;
  return intern(&frames, ((uint64_t)func << 32) | line, NULL, NULL);
}

uint32_t mlprof__stack_frame_native(uintptr_t pc) {
  if (!pc || !ready()) return 0;
  return intern(&frames, KEY_NATIVE | (uint64_t)pc, NULL, NULL);
}

uint32_t mlprof__stack_intern(const uint32_t *fr, size_t n) {
  if (!n || !ready()) return 0;
  uint32_t id = 0;
  size_t i = n;
  if (n > MLPROF__STACK_MAX_DEPTH) {
    i = MLPROF__STACK_MAX_DEPTH;
    uint32_t trunc = intern(&frames, KEY_TRUNCATED, NULL, NULL);
    id = intern(&nodes, trunc, NULL, NULL);
  }
  while (i-- > 0) {
    /* An unknown frame (a full table) still takes its place. */
    id = intern(&nodes, ((uint64_t)id << 32) | fr[i], NULL, NULL);
    if (!id) return 0;
  }
  return id;
}

uint32_t mlprof__stack_push(uint32_t parent, uint32_t frame) {
  if (!ready()) return 0;
  return intern(&nodes, ((uint64_t)parent << 32) | frame, NULL, NULL);
}

/* ---- capture ------------------------------------------------------------ */

uint32_t mlprof__stack_here(void) {
  const mlprof__stack_walker *w =
      atomic_load_explicit(&walker, memory_order_acquire);
  if (!w || !w->self) return 0;
  uint32_t fr[MLPROF__STACK_MAX_DEPTH];
  size_t n = w->self(fr, MLPROF__STACK_MAX_DEPTH);
  return mlprof__stack_intern(fr, n);
}

/* process_vm_readv on ourselves: the kernel copies, so an unmapped address
 * is an error, not a fault. Where it is refused (seccomp), a pipe does the
 * same: write() from a bad address fails with EFAULT. */
static _Atomic int vm_refused;
static _Atomic pid_t self_pid; /* 0 again in a forked child */
static int pipe_fds[2] = {-1, -1};
static pthread_mutex_t pipe_lock = PTHREAD_MUTEX_INITIALIZER;

static int read_by_pipe(void *dst, const void *src, size_t n) {
  if (pthread_mutex_trylock(&pipe_lock)) return -1;
  int rc = -1;
  if (pipe_fds[0] < 0 && pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    pipe_fds[0] = -1;
    goto out;
  }
  while (n) {
    size_t k = n > 4096 ? 4096 : n;
    if (write(pipe_fds[1], src, k) != (ssize_t)k) goto out;
    if (read(pipe_fds[0], dst, k) != (ssize_t)k) goto out;
    dst = (char *)dst + k;
    src = (const char *)src + k;
    n -= k;
  }
  rc = 0;
out:
  pthread_mutex_unlock(&pipe_lock);
  return rc;
}

int mlprof__stack_read(void *dst, const void *src, size_t n) {
  if (!n) return 0;
  if (!src) return -1;
  if (!atomic_load_explicit(&vm_refused, memory_order_relaxed)) {
    pid_t self = atomic_load_explicit(&self_pid, memory_order_relaxed);
    if (!self) atomic_store(&self_pid, self = getpid());
    struct iovec l = {dst, n}, r = {(void *)src, n};
    ssize_t got = syscall(SYS_process_vm_readv, self, &l, 1, &r, 1, 0);
    if (got == (ssize_t)n) return 0;
    if (got >= 0 || errno == EFAULT || errno == ESRCH) return -1;
    atomic_store(&vm_refused, 1);
  }
  return read_by_pipe(dst, src, n);
}

size_t mlprof__stack_readv(const struct iovec *dst, const struct iovec *src,
                           size_t n) {
  if (!n || n > 1024 || atomic_load_explicit(&vm_refused, memory_order_relaxed))
    return 0;
  pid_t self = atomic_load_explicit(&self_pid, memory_order_relaxed);
  if (!self) atomic_store(&self_pid, self = getpid());
  ssize_t got = syscall(SYS_process_vm_readv, self, dst, n, src, n, 0);
  if (got <= 0) return 0;
  size_t k = 0;
  for (size_t done = 0; k < n && done + src[k].iov_len <= (size_t)got; k++)
    done += src[k].iov_len;
  return k;
}

/* ---- the table for the extension ------------------------------------- */

static int walker_set(const mlprof__stack_walker *w) {
  const mlprof__stack_walker *none = NULL;
  if (!w || !atomic_compare_exchange_strong(&walker, &none, w))
    return MLPROF_EALREADY;
  mlprof__stacks_walker_ready();
  return 0;
}

static void interp_set(const void *eval_fn, const void *gil, size_t len) {
  mlprof__native_interp_set(eval_fn);
  mlprof__stacks_gil_set(gil, len);
}

void mlprof__stack_after_fork(void) { atomic_store(&self_pid, 0); }

const mlprof__stack_walker *mlprof__stack_walker_get(void) {
  return atomic_load_explicit(&walker, memory_order_acquire);
}

const mlprof__stack_api *mlprof__stack_api_get(void) {
  static const mlprof__stack_api api = {
      .size = sizeof api,
      .walker_set = walker_set,
      .func_find = mlprof__stack_func_find,
      .func_add = mlprof__stack_func_add,
      .frame_py = mlprof__stack_frame_py,
      .read = mlprof__stack_read,
      .pc_find = mlprof__stack_pc_find,
      .pc_add = mlprof__stack_pc_add,
      .fork_child = mlprof__stacks_fork_child,
      .thread_still = mlprof__stacks_thread_still,
      .readv = mlprof__stack_readv,
      .interp_set = interp_set,
  };
  return &api;
}

/* ---- the writer's side ------------------------------------------------ */

void mlprof__stacks_rewind(void) {
  funcs.written = frames.written = nodes.written = 0;
}

static int put_raw(uint8_t **out, size_t *len, size_t *cap, size_t room) {
  return mlprof__grow(out, cap, *len + room, 1) ? MLPROF_ENOMEM : 0;
}

#define PUT_UV(v) (p = mlprof__put_uv(p, (v)))

static uint8_t *put_s(uint8_t *p, const char *s, size_t n) {
  p = mlprof__put_uv(p, n);
  memcpy(p, s, n);
  return p + n;
}

/* Symbolizes a native frame: module, symbol and offset (symbols.c). */
static uint8_t *put_native(uint8_t *p, uint64_t pc) {
  mlprof__symbol sym;
  uint64_t off = 0;
  if (mlprof__symbolize((uintptr_t)pc, &sym) == 0)
    off = pc - (sym.start ? sym.start : sym.base);
  PUT_UV(pc);
  p = put_s(p, sym.module, strlen(sym.module));
  p = put_s(p, sym.name, strlen(sym.name));
  PUT_UV(off);
  return p;
}

/* Writes the ready entries of t after t->written, in id order, stopping at
 * the first not ready; at most limit bytes. */
static int take_table(table *t, int kind, uint8_t **out, size_t *len,
                      size_t *cap, size_t limit) {
  uint32_t n = atomic_load(&t->n);
  if (n > t->cap) n = t->cap;
  while (t->written < n && *len < limit) {
    entry *e = &t->e[t->written + 1];
    if (!atomic_load_explicit(&e->ready, memory_order_acquire)) break;
    if (put_raw(out, len, cap, 2 * STR_MAX + 64)) return MLPROF_ENOMEM;
    uint8_t *p = *out + *len;
    uint64_t key = atomic_load_explicit(&e->key, memory_order_relaxed);
    uint32_t id = t->written + 1;
    if (kind == MLPROF__STK_FUNC) {
      *p++ = MLPROF__STK_FUNC;
      PUT_UV(id);
      p = put_s(p, strs + e->a, strlen(strs + e->a));
      p = put_s(p, strs + e->b, strlen(strs + e->b));
      PUT_UV(e->c);
    } else if (kind == MLPROF__STK_FRAME && key == KEY_TRUNCATED) {
      *p++ = MLPROF__STK_FRAME;
      PUT_UV(id);
      PUT_UV(0);
      PUT_UV(0);
    } else if (kind == MLPROF__STK_FRAME && (key & KEY_NATIVE)) {
      *p++ = MLPROF__STK_NATIVE;
      PUT_UV(id);
      p = put_native(p, key & ~KEY_NATIVE);
    } else if (kind == MLPROF__STK_FRAME) {
      *p++ = MLPROF__STK_FRAME;
      PUT_UV(id);
      PUT_UV(key >> 32);
      PUT_UV(key & 0xffffffffu);
    } else {
      *p++ = MLPROF__STK_NODE;
      PUT_UV(id);
      PUT_UV(key >> 32);
      PUT_UV(key & 0xffffffffu);
    }
    *len = (size_t)(p - *out);
    t->written++;
  }
  return 0;
}

int mlprof__stacks_defs_take(uint8_t **out, size_t *len, size_t *cap,
                             size_t limit) {
  if (atomic_load(&state) != 2) return 0;
  int rc = take_table(&funcs, MLPROF__STK_FUNC, out, len, cap, limit);
  if (!rc) rc = take_table(&frames, MLPROF__STK_FRAME, out, len, cap, limit);
  if (!rc) rc = take_table(&nodes, MLPROF__STK_NODE, out, len, cap, limit);
  return rc;
}

void mlprof__stacks_table_counts(uint64_t *full) {
  *full = atomic_load(&funcs.full) + atomic_load(&frames.full) +
          atomic_load(&nodes.full);
}
