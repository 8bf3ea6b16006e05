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
} mlprof__stack_thread;

enum {
  MLPROF__STACK_ON_CPU = 1,    /* running (or runnable) when sampled */
  MLPROF__STACK_HAS_GIL = 2,   /* held the GIL when sampled */
  MLPROF__STACK_GIL_KNOWN = 4, /* the HAS_GIL bit means something */
  /* The thread has not run since its previous sample (thread_still said
   * so): frames is empty and the sampler reuses that sample's stack. */
  MLPROF__STACK_SAME = 16
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
/* The stack id of frame on top of stack parent (0: frame alone), as
 * mlprof__stack_intern makes it one frame at a time; 0 when a table is
 * full. For callers that keep the ids of a stack they interned before. */
uint32_t mlprof__stack_push(uint32_t parent, uint32_t frame);

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

/* ---- the sampler (stacks.c) ------------------------------------------- */

/* Samples hz times per second (hz <= 0: not at all) for the session now
 * starting; the thread starts once a walker is registered (at once when one
 * is). Returns 0, or MLPROF_ENOMEM or MLPROF_ETHREAD. */
int mlprof__stacks_start(int hz);
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
