/* Internals of the recording library, shared by the files of src/record. */
#ifndef MLPROF_RECORD_INTERNAL_H
#define MLPROF_RECORD_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "../base/base.h"
#include "record.h"
#include "mlprof.h"

#define MLPROF__HIDDEN __attribute__((visibility("hidden")))
#define MLPROF__LIKELY(x) __builtin_expect(!!(x), 1)
#define MLPROF__UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- clock (clock.c) ---------------------------------------------------- */

/* Raw timestamps are TSC ticks when the TSC is invariant, else CLOCK_MONOTONIC
 * nanoseconds; the writer converts them to ns since the session's start. */
extern MLPROF__HIDDEN int mlprof__use_tsc;

static inline uint64_t mlprof__mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Out of line so that the TSC path of the hot functions needs no frame. */
MLPROF__HIDDEN uint64_t mlprof__mono_ns_cold(void)
    __attribute__((noinline, cold));

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static inline uint64_t mlprof__now(void) {
  return MLPROF__LIKELY(mlprof__use_tsc) ? __rdtsc() : mlprof__mono_ns_cold();
}
#else
static inline uint64_t mlprof__now(void) { return mlprof__mono_ns(); }
#endif

/* A (raw, monotonic ns) pair read close together, for calibration. */
typedef struct {
  uint64_t raw, mono;
} mlprof__anchor;

/* Decides between TSC and clock_gettime (MLPROF_CLOCK=tsc|monotonic forces). */
MLPROF__HIDDEN void mlprof__clock_setup(void);
MLPROF__HIDDEN mlprof__anchor mlprof__clock_anchor(void);
MLPROF__HIDDEN const char *mlprof__clock_name(void);

/* Converts raw timestamps to ns since anchor a0; refined by each calibrate. */
typedef struct {
  mlprof__anchor a0;
  uint64_t mult; /* ns per tick, 32.32 fixed point */
} mlprof__timebase;

MLPROF__HIDDEN void mlprof__timebase_init(mlprof__timebase *tb,
                                          mlprof__anchor a0);
MLPROF__HIDDEN void mlprof__timebase_calibrate(mlprof__timebase *tb,
                                               mlprof__anchor now);
static inline uint64_t mlprof__timebase_ns(const mlprof__timebase *tb,
                                           uint64_t raw) {
  if (raw <= tb->a0.raw) return 0;
  return (uint64_t)(((unsigned __int128)(raw - tb->a0.raw) * tb->mult) >> 32);
}

/* ---- events and thread buffers (buffer.c) ------------------------------- */

/* One 16-byte slot. `p` is written last, with release order: a non-zero `p`
 * tells the writer the slot is complete. Its low 3 bits give the kind; the
 * rest is a site pointer (sites are 8-aligned). Two-slot events keep their
 * payload in the following slot, written before the first slot's `p`. */
typedef struct {
  uint64_t ts;
  _Atomic uint64_t p;
} mlprof__ev;

enum {
  MLPROF__EV_BEGIN = 0,    /* p = site */
  MLPROF__EV_END = 1,      /* p = kind only */
  MLPROF__EV_GAUGE = 2,    /* p = site | kind; next slot: ts = double bits */
  MLPROF__EV_UNITS = 3,    /* p = site | kind; next slot: ts = n */
  MLPROF__EV_META = 4,     /* p = key site | kind; next slot: ts = value site */
  MLPROF__EV_STEP = 5,     /* p = kind only */
  MLPROF__EV_STEP_END = 6, /* p = kind only */
  /* An allocation, p = size << 4 | kind; next slot: ts = address, p = stack
   * id. A free, p = address << 4 | 8 | kind. */
  MLPROF__EV_MEM = 7,
};
#define MLPROF__EV_MEM_FREE 8u
#define MLPROF__EV_KIND(p) ((unsigned)((p)&7u))
#define MLPROF__EV_SITE(p) \
  ((const mlprof_site *)(uintptr_t)((p) & ~(uint64_t)7))

#define MLPROF__BUF_SLOTS 4096 /* 64 KiB per buffer */

typedef struct mlprof__buf {
  /* Set by the owner thread when it moves on to a new buffer; until then the
   * writer must not recycle this one. */
  struct mlprof__buf *_Atomic next;
  mlprof__ev ev[MLPROF__BUF_SLOTS];
} mlprof__buf;

#define MLPROF__META_PER_ZONE 6
#define MLPROF__MAX_DEPTH 256

/* The writer's view of a thread: where it is in the thread's buffers and the
 * zones it has seen begin but not end. */
typedef struct {
  uint64_t begin; /* ns */
  uint32_t site_id;
  uint8_t nmeta, nunits;
  uint32_t meta[MLPROF__META_PER_ZONE][2];
  uint64_t units[MLPROF__META_PER_ZONE][2];
} mlprof__frame;

#define MLPROF__ICACHE 64
/* Frames kept in an allocation site's stack (malloc.c). */
#define MLPROF__SITE_DEPTH 128

typedef struct mlprof__thread {
  struct mlprof__thread *next; /* in the global list; see buffer.c */
  uint32_t tid;
  _Atomic int exited;
  _Atomic uint64_t dropped; /* written by the owner, read by the writer */
  char name[64];            /* guarded by mlprof__meta_lock */
  _Atomic int name_dirty;

  /* owner-only state (slow paths) */
  void *altstack;        /* the signal stack given to it, or NULL */
  mlprof__buf *cur;      /* buffer being filled */
  uintptr_t saved_depth; /* mlprof__tls.depth and .lim while skipping */
  mlprof__ev *saved_lim;
  struct {
    const mlprof_site *site;
    uint32_t hash;
  } icache[MLPROF__ICACHE]; /* recently interned names (intern.c) */
  /* The thread's last allocation site (malloc.c): its frames, innermost
   * first, and the stack id of each suffix (site_node[i]: frames i..
   * outwards). */
  uint32_t site_fr[MLPROF__SITE_DEPTH], site_node[MLPROF__SITE_DEPTH];
  uint32_t site_n;

  /* Oldest buffer not yet recycled: set once by the owner (its first buffer),
   * then owned by the writer. */
  mlprof__buf *_Atomic head;

  /* writer-only state */
  uint32_t wpos;       /* next slot of head to read */
  uint32_t depth;      /* open frames */
  uint32_t lost_depth; /* open zones deeper than MLPROF__MAX_DEPTH */
  uint64_t ref_ns;     /* delta-coding reference */
  uint64_t unmatched;  /* ends seen with no open frame */
  uint64_t mem_ref_ns; /* delta-coding reference of its ALLOCS records */
  uint64_t dropped_reported, dropped_base;
  uint64_t wdropped; /* events the writer dropped (too deep, too much meta) */
  mlprof__frame *frames;
} mlprof__thread;

/* The hot path's per-thread state, in one initial-exec TLS block so reaching
 * it costs one instruction. pos is the next free slot; lim is the buffer's
 * end less one slot per zone recorded and not yet ended, so that an end
 * always has room. pos == lim (both NULL at first) sends every event but an
 * end to the slow path; depth == 0 sends an end there, or nowhere when no
 * zone is being dropped (skip == 0), so a disabled end costs no call. */
typedef struct {
  mlprof__ev *pos, *lim;
  uintptr_t depth;
  uintptr_t skip; /* nesting depth of zones being dropped */
  mlprof__thread *thread;
} mlprof__tls_state;

extern MLPROF__HIDDEN __thread mlprof__tls_state mlprof__tls
    __attribute__((tls_model("initial-exec")));
extern MLPROF__HIDDEN _Atomic int mlprof__on;

/* Buffer pool with a hard cap. */
MLPROF__HIDDEN void mlprof__pool_configure(size_t cap_bytes);
MLPROF__HIDDEN void mlprof__buf_recycle(mlprof__buf *b);
/* The cap on event buffers, bytes (also bounds spans queued by
 * mlprof_track_spans). */
MLPROF__HIDDEN size_t mlprof__pool_cap_bytes(void);
/* Bytes the recording library holds in event buffers right now. */
MLPROF__HIDDEN size_t mlprof__pool_bytes(void);

/* The list of threads that ever recorded in this process (lock-free push;
 * only the writer unlinks). */
MLPROF__HIDDEN mlprof__thread *mlprof__threads_head(void);
/* Unlinks and frees an exited thread whose buffers the writer drained. */
MLPROF__HIDDEN void mlprof__thread_free(mlprof__thread *t);
/* Starts counting drops afresh (a new session); thread counts restart from
 * each thread's dropped_base. */
MLPROF__HIDDEN void mlprof__dropped_reset(void);
/* Number of full buffers handed off since the writer last looked. */
extern MLPROF__HIDDEN _Atomic unsigned mlprof__handoffs;

/* Names the thread whose kernel id is tid (NVTX's nvtxNameOsThread): now
 * when it has recorded, else when it first records (a few such names are
 * kept). -1 when the name cannot be kept. */
MLPROF__HIDDEN int mlprof__thread_name_tid(uint32_t tid, const char *name);

/* After fork(), in the child: forget the parent's threads and buffers. */
MLPROF__HIDDEN void mlprof__buffers_after_fork(void);

/* ---- allocations (buffer.c; captured by src/intercept/malloc.c) -------- */

/* What the allocation hooks record, and the mean gap between samples
 * (bytes) in sampled mode; set by the session from its config. */
extern MLPROF__HIDDEN _Atomic int mlprof__mem_mode;
extern MLPROF__HIDDEN _Atomic uint64_t mlprof__mem_mean;
/* Set by src/intercept/malloc.c when its hooks are the process's malloc. */
extern MLPROF__HIDDEN _Atomic int mlprof__mem_hooked;
/* Records on the calling thread an allocation of size bytes at addr (stack:
 * a stack id, 0 for none) or, with size 0, the free of addr. The caller has
 * set mlprof__quiet. Dropped and counted like any event at the memory cap. */
MLPROF__HIDDEN void mlprof__put_mem(uint64_t addr, uint64_t size,
                                    uint64_t stack);
/* The weight of a recorded allocation of size bytes: the bytes it stands
 * for (size itself when every allocation is recorded). */
MLPROF__HIDDEN uint64_t mlprof__mem_weight(uint64_t size);

/* ---- interning (intern.c) ----------------------------------------------- */

/* Returns a site that lives until exit for (kind, category, name), creating it
 * on first use; NULL when the table is full or memory is short. */
MLPROF__HIDDEN const mlprof_site *mlprof__intern(int kind, unsigned category,
                                                 const char *name);

/* Locks held across fork() so the child inherits consistent state. */
extern MLPROF__HIDDEN pthread_mutex_t mlprof__intern_lock, mlprof__pool_lock;

/* ---- writer (writer.c) -------------------------------------------------- */

typedef struct mlprof__writer mlprof__writer;

/* Starts the writer thread, which takes a descriptor table of its own
 * (src/base/fd.c) and there creates the profile: path, whose first leaf bytes
 * (0: none) are a directory ending in '/' that is opened without following a
 * symbolic link, exclusively and never through a link; when the name is
 * taken, the next free one (STEM.1.mlprof...), written back into path (cap
 * bytes). The thread writes the file header and HEADER chunk; this returns
 * once it has. MLPROF_EIO with errno set when the file cannot be created or
 * written, MLPROF_ETHREAD when no thread starts. */
MLPROF__HIDDEN int mlprof__writer_open(mlprof__writer **w, char *path,
                                       size_t cap, size_t leaf,
                                       uint32_t flush_ms);
/* Flushes synchronously (from any thread but the writer's). */
MLPROF__HIDDEN int mlprof__writer_flush(mlprof__writer *w);
/* Asks for a flush and waits at most timeout_ms; async-signal-safe. With
 * how >= 0 (MLPROF__END_*, wire.h) the process is about to end: the flush
 * also finishes the file, its END chunk saying how, with status. */
MLPROF__HIDDEN void mlprof__writer_flush_from_signal(mlprof__writer *w, int how,
                                                     int status,
                                                     int timeout_ms);
/* After a failed exec: the file, finished by the exec's final flush, takes
 * records again (the reader ignores the END that a later chunk follows).
 * Waits until the final flush was served. */
MLPROF__HIDDEN int mlprof__writer_resume(mlprof__writer *w);
/* Wakes the writer early (buffers are filling up). */
MLPROF__HIDDEN void mlprof__writer_poke(void);
/* Final flush, open zones and END chunk (saying how the process ended,
 * MLPROF__END_*, with status), written and the file closed by the writer
 * thread, which then ends; frees w. */
MLPROF__HIDDEN int mlprof__writer_close(mlprof__writer *w, int how, int status);
struct mlprof__sample_sink; /* src/sample/sample.h */

/* Fills sink so that a sampler's rows and source statuses are queued for
 * w's next flush (names, labels and reasons interned). */
MLPROF__HIDDEN void mlprof__writer_sink(mlprof__writer *w,
                                        struct mlprof__sample_sink *sink);
/* Queues spans measured elsewhere on the named track (mlprof_track_spans,
 * arguments checked); waits for a flush rather than queue past the memory
 * cap. Returns 0, or MLPROF_ENOMEM when some were dropped. */
MLPROF__HIDDEN int mlprof__writer_spans(mlprof__writer *w, const char *track,
                                        const mlprof_span *spans, size_t n);
/* An allocation measured elsewhere (mlprof_track_allocs), its stack
 * interned: time CLOCK_MONOTONIC, size 0 for a free. */
typedef struct {
  uint64_t t, addr, size;
  uint32_t stack;
} mlprof__ext_alloc;
/* Queues n allocations of zone `zone` on the track named `track` for the
 * next flush, as mlprof__writer_spans queues spans (the same cap). Returns
 * 0, or MLPROF_ENOMEM when some were dropped. */
MLPROF__HIDDEN int mlprof__writer_allocs(mlprof__writer *w, const char *track,
                                         const mlprof_site *zone,
                                         const mlprof__ext_alloc *a, size_t n);
/* In a forked child: release the parent's writer without touching its file. */
MLPROF__HIDDEN void mlprof__writer_abandon(mlprof__writer *w);

/* ---- session (session.c) ------------------------------------------------ */

/* Session metadata and thread names share one lock (rarely taken). */
extern MLPROF__HIDDEN pthread_mutex_t mlprof__meta_lock;
/* Copies pending session metadata into out as a META payload; returns its
 * length (0: nothing new). Caller frees *out. */
MLPROF__HIDDEN size_t mlprof__meta_take(uint8_t **out);
/* Calls put with each LINES payload set since the previous call
 * (mlprof_lines_set, lines.c), under the metadata lock. */
MLPROF__HIDDEN void mlprof__lines_take(
    void (*put)(void *ctx, const uint8_t *payload, size_t len), void *ctx);
/* In a forked child: forgets the parent's line timings. */
MLPROF__HIDDEN void mlprof__lines_after_fork(void);
/* Called by a forked child's first event to start its own profile. */
MLPROF__HIDDEN void mlprof__session_child_start(void);
extern MLPROF__HIDDEN _Atomic int mlprof__child_pending;

/* This image's place in its process's chain of execs: 0 for the first, n
 * for the program the n-th exec started (HEADER's exec_seq). */
extern MLPROF__HIDDEN unsigned mlprof__exec_seq;

/* The session's part in process endings (src/intercept/exec.c): before an
 * exec, flush and finish the file and return the number of the next image
 * of the chain, or -1 when this process records nothing; after an exec that
 * failed, take records again (this one waits on a lock). Before _exit,
 * flush and finish the file. The others are async-signal-safe. */
MLPROF__HIDDEN int mlprof__session_before_exec(void);
MLPROF__HIDDEN void mlprof__session_exec_failed(void);
/* The session's output made absolute when value is the relative output it
 * was given (an exec passes that on, whatever the directory now), else
 * NULL. Async-signal-safe. */
MLPROF__HIDDEN const char *mlprof__session_output_for(const char *value);
MLPROF__HIDDEN void mlprof__session_before_exit(int status);
/* At exit() or main()'s return (src/intercept/exit.c): finish the file
 * when the exit handlers will not run (spent by a vfork child). */
MLPROF__HIDDEN void mlprof__session_exit_spent(int status);
/* Whether this process is the session's: not a vfork child, nor a child
 * made without fork handlers (clone, syscall(SYS_clone), _Fork), which
 * copy or share the session's memory, its locks held by threads they do not
 * have, but not its writer: what they would record goes nowhere. One
 * system call; async-signal-safe. */
MLPROF__HIDDEN int mlprof__session_here(void);

/* The flush interval of the session (ms), for those who flush beside the
 * writer (CUPTI's buffers). */
MLPROF__HIDDEN uint32_t mlprof__session_flush_ms(void);
/* fn runs at the session's end, before its file is closed and outside the
 * session's lock (it may record spans); one such function. */
MLPROF__HIDDEN void mlprof__session_before_end(void (*fn)(void));
/* CUPTI activity capture in this process (src/intercept/cupti.c), once:
 * 0 when capturing, -1 when not (the reason is in the source table). */
MLPROF__HIDDEN int mlprof__cupti_capture(void);

/* The signals whose default action ends a process (src/intercept/signal.c):
 * take those the program leaves at SIG_DFL for fn, and keep them while the
 * program sets SIG_DFL, reading SIG_DFL back; _die, from fn, restores the
 * default action and raises sig. The fork handlers keep the table whole
 * across fork() and hand it to the child. */
MLPROF__HIDDEN void mlprof__signals_take(void (*fn)(int, siginfo_t *, void *));
MLPROF__HIDDEN void mlprof__signals_die(int sig);
/* The kernel's struct sigaction, for the rt_sigaction system call itself
 * (past the interposed sigaction, which answers SIG_DFL for the stack
 * sampler's signal). */
typedef struct {
  void *handler;
  unsigned long flags;
  void *restorer;
  uint64_t mask;
} mlprof__ksigaction;
/* Drops sig wherever it is pending in the process (the stack sampler's
 * request that a thread blocking it never took), leaving the disposition as
 * it was; nothing when the kernel's handler is no longer `handler`. */
MLPROF__HIDDEN void mlprof__signals_discard(int sig, void *handler);
MLPROF__HIDDEN void mlprof__signals_fork_prepare(void);
MLPROF__HIDDEN void mlprof__signals_fork_parent(void);
MLPROF__HIDDEN void mlprof__signals_fork_child(void);

/* Gives the calling thread an alternate signal stack, unless it has one, so
 * a stack overflow can still be flushed; returns what to pass to
 * mlprof__altstack_free at thread exit (NULL: nothing of ours). */
MLPROF__HIDDEN void *mlprof__altstack_setup(void);
MLPROF__HIDDEN void mlprof__altstack_free(void *stack);

#endif
