/* Call stacks: interning of Python (and native) stacks into stable ids, shared
 * by the stack sampler (stacks.c) and by anything else of the recording
 * library that wants the stack of the calling thread (allocation sites).
 *
 * Every function here may be called from any thread, inside a malloc hook
 * or from a thread that does not hold the GIL: none allocates with malloc,
 * takes a lock that can block, or calls back into the program. Tables live
 * in memory mapped once (on first use) and never freed; when one is full,
 * new entries get id 0 ("unknown") and are counted, and the existing ones
 * keep working. Ids are stable for the life of the process (a forked child
 * keeps its parent's) and each profile file gets every definition it uses
 * (docs/format.md, chunk STACKS).
 *
 * Id 0 always means "none or unknown". A stack id names a node: a frame
 * on top of a parent stack (0: the outermost frame), so a stack of depth d
 * shares its first d - 1 frames with every other stack that has them. */
#ifndef MLPROF_RECORD_STACK_H
#define MLPROF_RECORD_STACK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "mlprof.h"

/* Frames kept per stack: deeper stacks keep their innermost frames and get
 * a frame "<truncated>" at their root. */
#define MLPROF__STACK_MAX_DEPTH 1024

/* ---- what a Python walker (the extension, python/mlprof/_stacks.c)
 * registers ---------------------------------------------------------------
 *
 * The walker knows its interpreter's frame layout; the library knows
 * nothing of Python. One walker per process: the first to register wins. */

/* One thread as the walker saw it. */
typedef struct {
  uint32_t tid;           /* kernel thread id */
  uint32_t flags;         /* MLPROF__STACK_* below */
  const uint32_t *frames; /* frame ids, innermost first */
  size_t n;
  /* Beside frames (NULL: unknown): non-zero where the frame is the first
   * one its call of the interpreter's evaluation loop ran (a frame called
   * from C), so that native frames can be merged in. */
  const uint8_t *entry;
  /* With MLPROF__STACK_TOP (walkers that know it): the word that names the
   * thread's innermost frame (to read again with mlprof__stack_read) and
   * what it held when frames were read, so that the sampler tells whether
   * the thread called or returned since: native frames taken after that do
   * not go with these Python frames. */
  const void *const *top_at;
  const void *top;
} mlprof__stack_thread;

enum {
  MLPROF__STACK_ON_CPU = 1,    /* running (or runnable) when sampled */
  MLPROF__STACK_HAS_GIL = 2,   /* held the GIL when sampled */
  MLPROF__STACK_GIL_KNOWN = 4, /* the GIL bits mean something */
  /* Waiting to take the GIL (the sampler sets it: the thread sleeps on the
   * GIL's own futex, see the api's interp_set). */
  MLPROF__STACK_GIL_WAIT = 16,
  /* The thread has not run since its previous sample (thread_still said
   * so): frames is empty and the sampler reuses that sample's stack. */
  MLPROF__STACK_SAME = 256,
  MLPROF__STACK_TOP = 512 /* top_at and top are there */
};

typedef struct mlprof__stack_walker {
  /* The calling thread's Python frames as frame ids, innermost first, into
   * frames (room for max); returns how many. Same rules as this file: no
   * malloc, no GIL, no lock, no call into Python. 0 when the thread runs no
   * Python code. */
  size_t (*self)(uint32_t *frames, size_t max);
  /* Every thread of the interpreter that runs Python code: calls fn once
   * per thread, in any order. Called from the stack sampler's thread only,
   * without the GIL; reads frames through mlprof__stack_read, so a frame
   * freed meanwhile gives a shorter or stale stack, never a crash. */
  void (*each)(void (*fn)(void *ctx, const mlprof__stack_thread *t), void *ctx);
} mlprof__stack_walker;

/* The functions a walker in another shared object (the extension) calls,
 * as one table: it finds them with a single dlsym of
 * "mlprof__stack_api_get", absent from libraries older than 1.5. */
typedef struct {
  uint32_t size; /* sizeof this struct, so that it can grow */
  /* Registers w (which must live until exit) for this process: the sampler
   * starts when a session asks for stacks. 0, or MLPROF_EALREADY when a
   * walker is already registered. */
  int (*walker_set)(const mlprof__stack_walker *w);
  uint32_t (*func_find)(uint64_t key);
  uint32_t (*func_add)(uint64_t key, const char *file, const char *function,
                       uint32_t first_line);
  uint32_t (*frame_py)(uint32_t func, uint32_t line);
  int (*read)(void *dst, const void *src, size_t n);
  uint32_t (*pc_find)(uint64_t key);
  void (*pc_add)(uint64_t key, uint32_t line);
  /* For the interpreter's after-fork hook in the child (os.fork, a
   * multiprocessing or DataLoader worker): when its parent sampled stacks,
   * the child's sampler starts now, and with its first sample, one interval
   * later, the child's own profile (a worker running plain Python code
   * records no other event; a child that execs at once records none). */
  void (*fork_child)(void);
  /* For the walker's each, before it reads thread tid's frames: 1 when the
   * thread has used no CPU time since the sampler's previous sample of it
   * (so its stack cannot have changed and need not be read: the walker
   * passes it with MLPROF__STACK_SAME and no frames), else 0. Sampler
   * thread only. */
  int (*thread_still)(uint32_t tid);
  /* mlprof__stack_readv (see there). */
  size_t (*readv)(const struct iovec *dst, const struct iovec *src, size_t n);
  /* What the walker knows of its interpreter, once, before it registers:
   * the address of the evaluation loop's function (native frames of it are
   * replaced by Python frames) and the bytes of the GIL's state (mutex and
   * condition variables: a thread asleep on a futex in them waits for the
   * GIL). NULL / 0 for unknown. */
  void (*interp_set)(const void *eval_fn, const void *gil, size_t gil_len);
} mlprof__stack_api;

MLPROF_EXPORT const mlprof__stack_api *mlprof__stack_api_get(void);

/* ---- interning -------------------------------------------------------- */

/* The function id for key (the walker's own: a code object's address mixed
 * with what identifies it, never 0), or 0 when not interned yet. */
uint32_t mlprof__stack_func_find(uint64_t key);
/* Interns a function (strings copied, cut at 4095 bytes) under key and
 * returns its id; the same key gives the id of the first add. 0 when the
 * table is full. */
uint32_t mlprof__stack_func_add(uint64_t key, const char *file,
                                const char *function, uint32_t first_line);
/* A cache from a walker's (function, instruction offset) key to a line, so
 * that the walker decodes each line table entry once: pc_find returns line
 * + 1 (0: not cached); pc_add caches it (silently not when full). */
uint32_t mlprof__stack_pc_find(uint64_t key);
void mlprof__stack_pc_add(uint64_t key, uint32_t line);
/* The frame id of line `line` of function func (0 when func is 0 or the
 * table is full). */
uint32_t mlprof__stack_frame_py(uint32_t func, uint32_t line);
/* The frame id of a native return address (symbolized when the profile is
 * written, with dladdr). */
uint32_t mlprof__stack_frame_native(uintptr_t pc);
/* The stack id of frames[0..n), innermost first (0 when n is 0). Past
 * MLPROF__STACK_MAX_DEPTH the outermost frames are left out. 0 when a table
 * is full. */
uint32_t mlprof__stack_intern(const uint32_t *frames, size_t n);
/* The stack id of frame on top of stack parent (0: frame is the outermost);
 * 0 when a table is full. What mlprof__stack_intern does one frame at a
 * time, for a caller that keeps the ids of a stack's prefixes. */
uint32_t mlprof__stack_push(uint32_t parent, uint32_t frame);

/* ---- capture ----------------------------------------------------------- */

/* The interned Python stack of the calling thread (its innermost frames
 * first, as the registered walker reads them), or 0 when no walker is
 * registered or the thread runs no Python code. For malloc hooks: no
 * malloc, no GIL, no lock; the caller prevents its own re-entry as it does
 * for everything else it calls. */
uint32_t mlprof__stack_here(void);

/* Copies n bytes at src (an address of this process that may have been
 * unmapped or reused) into dst without faulting: 0, or -1 when any of it
 * cannot be read (dst then holds garbage). */
int mlprof__stack_read(void *dst, const void *src, size_t n);

/* Copies n pieces (src[i] into dst[i], the same lengths; n <= 1024) with
 * one system call where it can, without faulting. Returns how many of the
 * first pieces were copied whole: a piece that cannot be read ends the copy
 * (the caller reads what is left one by one, mlprof__stack_read). 0 where
 * only the slower way works. */
size_t mlprof__stack_readv(const struct iovec *dst, const struct iovec *src,
                           size_t n);

/* ---- the writer's side (the writer thread only) ------------------------- */

/* A new profile file starts: every definition is written again. */
void mlprof__stacks_rewind(void);
/* Appends to *out (a growable buffer, mlprof__grow) one STACKS payload
 * holding the definitions made since the last call, then the samples taken
 * since then (times converted by to_ns(ctx, raw)). Returns 0, or
 * MLPROF_ENOMEM (what was not written is written next time). */
int mlprof__stacks_take(uint8_t **out, size_t *len, size_t *cap,
                        uint64_t (*to_ns)(void *ctx, uint64_t raw), void *ctx);

/* ---- between the files of src/record ---------------------------------- */

/* Appends the definitions made since the last call (funcs, frames, stack
 * nodes, ready ones in id order) to *out, stopping past limit bytes; 0 or
 * MLPROF_ENOMEM. */
int mlprof__stacks_defs_take(uint8_t **out, size_t *len, size_t *cap,
                             size_t limit);
/* The registered walker, or NULL. */
const mlprof__stack_walker *mlprof__stack_walker_get(void);
/* In a forked child, before anything reads memory (stack.c's part). */
void mlprof__stack_after_fork(void);
/* Interning refused for want of room, all tables together. */
void mlprof__stacks_table_counts(uint64_t *full);

/* ---- native symbols (symbols.c) --------------------------------------- */

#define MLPROF__SYM_MAX 4095
typedef struct {
  uintptr_t lo, hi;      /* the loaded object's range (its segments) */
  uintptr_t base;        /* its first page (dladdr's dli_fbase) */
  uintptr_t start, size; /* the symbol holding the address; 0, 0: none */
  char module[MLPROF__SYM_MAX + 1], name[MLPROF__SYM_MAX + 1];
} mlprof__symbol;

/* The loaded object that holds pc and the function whose range holds it:
 * what dladdr says of its dynamic symbols, and a function of its file's
 * .symtab where dladdr has none, without going through all of its symbols
 * (a sorted table of them is made on the object's first address). A C++
 * name comes demangled, cut to the function's own. The writer's thread
 * only. 0, MLPROF_EINVAL when no loaded object holds pc, MLPROF_ENOMEM. */
int mlprof__symbolize(uintptr_t pc, mlprof__symbol *out);
/* The same of the object alone (no symbol, no table): any thread. */
int mlprof__object_of(uintptr_t pc, mlprof__symbol *out);
/* Cuts a demangled C++ name to the function's own, in place: its
 * parameters and return type left out ("void ns::f<int>(int) const" becomes
 * "ns::f<int>"); "(anonymous namespace)", "operator()" and
 * "{lambda(int)#1}" are parts of names. */
void mlprof__cxx_name_short(char *name);

/* ---- native stacks (native.c) ----------------------------------------- */

/* Return addresses one capture keeps. */
#define MLPROF__NATIVE_MAX 512

/* Picks the signal (the highest real-time one at SIG_DFL) and installs the
 * handler, or re-arms it: 0, or MLPROF_EINVAL when native stacks cannot be
 * had (built without libunwind, no free signal, the program took it). */
int mlprof__native_start(void);
/* Why mlprof__native_start failed, for a warning. */
const char *mlprof__native_why(void);
/* Captures stop; the handler stays, inert. */
void mlprof__native_stop(void);
/* The signal in use, 0 for none. */
int mlprof__native_signal(void);
/* The program sets a disposition for signal s (src/intercept/signal.c):
 * when it is ours, native stacks stop for good in this process. */
void mlprof__native_give_up(int s);
/* In a forked child. */
void mlprof__native_after_fork(void);
/* Sampler thread only: signals thread tid and waits at most timeout_ns for
 * its handler's return addresses (innermost first, the interrupted one
 * first) into pcs (room for max). Returns how many; -1 when nothing was
 * asked (no signal, the thread ended, a late handler still running), -2 when
 * the thread did not answer in time (it may have the signal blocked). */
long mlprof__native_capture(uint32_t tid, uintptr_t *pcs, size_t max,
                            uint64_t timeout_ns);
/* The api's interp_set, its native half. */
void mlprof__native_interp_set(const void *eval_fn);
/* Merges native return addresses pcs[0..npc) with Python frames
 * py[0..npy) (both innermost first; entry as in mlprof__stack_thread) into
 * out (room for max) as py-spy does: each native frame of the evaluation
 * loop becomes its Python frames, native frames inner than the innermost
 * one stay on top of it, the interpreter's other frames and those outer
 * than the outermost loop are left out. Returns the frames written; 0 when
 * the two cannot be merged (read at moments between which the thread
 * entered or left a loop): the caller keeps the Python frames. Sampler
 * thread only. */
size_t mlprof__native_merge(const uintptr_t *pcs, size_t npc,
                            const uint32_t *py, const uint8_t *entry,
                            size_t npy, uint32_t *out, size_t max);

/* ---- the sampler (stacks.c) ------------------------------------------- */

/* Samples hz times per second (hz <= 0: not at all) for the session now
 * starting, with native frames too when native is non-zero; the thread
 * starts once a walker is registered (at once when one is). Returns 0, or
 * MLPROF_ENOMEM or MLPROF_ETHREAD. */
int mlprof__stacks_start(int hz, int native);
/* The api's interp_set, the GIL's half. */
void mlprof__stacks_gil_set(const void *gil, size_t len);
/* A walker was registered: starts the sampler if a session wants one. */
void mlprof__stacks_walker_ready(void);
/* Stops the sampler and waits for its thread (no-op when none runs). */
void mlprof__stacks_stop(void);
/* In a forked child: the parent's sampler thread does not exist here. */
void mlprof__stacks_after_fork(void);
/* The api's fork_child (see there). */
void mlprof__stacks_fork_child(void);
/* The api's thread_still (see there). */
int mlprof__stacks_thread_still(uint32_t tid);
/* Samples taken and dropped (the pending queue full) by this process. */
void mlprof__stacks_counts(uint64_t *taken, uint64_t *dropped);

#endif
