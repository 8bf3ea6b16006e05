/* Native stacks for the stack sampler (stack.h, "native"): the sampler
 * thread sends a real-time signal to one thread of the program at a time,
 * whose handler unwinds its own stack with libunwind into a slot the sampler
 * then reads; the return addresses are classified (the interpreter's
 * evaluation loop, the rest of the interpreter, anything else) and merged
 * with the thread's Python frames off the signal path, as py-spy does.
 *
 * The signal is one the program left at SIG_DFL when the sampler started,
 * highest first (programs take SIGRTMIN upwards); a program that later sets
 * a disposition of its own for it (through the interposed sigaction,
 * src/intercept/signal.c) gets it, and native stacks stop. The handler is
 * async-signal-safe (libunwind's local unwinding, whose locks block signals
 * while held, a futex wake and atomics), keeps errno, runs with SA_RESTART,
 * acts only on a request of the sampler meant for its own thread, and stays
 * installed but inert once the sampler stops: a signal of ours still in
 * flight then does nothing, where SIG_DFL would end the process. A signal
 * anyone else sends gets SIG_DFL's action (as_default). A request the
 * thread does not take in time is withdrawn and its signal dropped
 * (mlprof__signals_discard): the thread may have blocked it meanwhile. */
#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "stack.h"

#ifdef MLPROF_HAVE_LIBUNWIND
#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <link.h>
#include <libunwind.h>

enum { IDLE, ASKED, BUSY, DONE };

/* The one request in flight: the sampler asks one thread at a time. */
static struct {
  _Atomic int state;
  _Atomic pid_t tid;
  size_t n;
  uintptr_t pc[MLPROF__NATIVE_MAX];
} req;

static _Atomic int sig;      /* the signal in use, 0: none */
static _Atomic int given_up; /* the program took the signal */
static _Atomic int active;   /* the sampler wants captures */
static const char *_Atomic why = "no real-time signal is free";

/* The handler the kernel holds for our signal once it is installed: ours,
 * or a sanitizer's that calls ours (TSan's). */
static void *_Atomic kernel_handler;

/* The kernel's handler of signal s, NULL when unknown. */
static void *kernel_handler_of(int s) {
  mlprof__ksigaction k;
  if (syscall(SYS_rt_sigaction, s, NULL, &k, sizeof k.mask) != 0) return NULL;
  return k.handler;
}

/* A signal someone else sent (kill, sigqueue, another process): what
 * SIG_DFL would have done, which for a real-time signal ends the process.
 * The disposition goes back to SIG_DFL (native stacks stop) and the signal
 * is sent again to this thread, where it waits, blocked, until the handler
 * returns. */
static void as_default(int s) {
  mlprof__ksigaction k = {SIG_DFL, 0, NULL, 0};
  atomic_store(&given_up, 1);
  atomic_store_explicit(&active, 0, memory_order_release);
  if (syscall(SYS_rt_sigaction, s, &k, NULL, sizeof k.mask) == 0)
    syscall(SYS_tgkill, getpid(), (pid_t)syscall(SYS_gettid), s);
}

/* Whether the kernel still has our handler for s: a program that loaded
 * libmlprof with dlopen (the Python package's copy) sets its dispositions
 * past the interposed sigaction. */
static int still_ours(int s) {
  void *h = kernel_handler_of(s);
  return h && h == atomic_load(&kernel_handler);
}

static void on_signal(int s, siginfo_t *info, void *uc) {
  int saved = errno;
  int expect = ASKED;
  int ours = info && info->si_code == SI_TKILL && info->si_pid == getpid();
  if (!ours) as_default(s);
  /* Only the sampler's own request for this very thread: a late one (a
   * request that timed out) does nothing. */
  if (ours && atomic_load_explicit(&active, memory_order_acquire) &&
      atomic_load_explicit(&req.tid, memory_order_acquire) ==
          (pid_t)syscall(SYS_gettid) &&
      atomic_compare_exchange_strong(&req.state, &expect, BUSY)) {
    unw_cursor_t c;
    size_t n = 0;
#if defined(__SANITIZE_THREAD__)
    /* TSan runs handlers late, with a context the thread has left: the
     * handler's own stack instead. */
    unw_context_t here;
    (void)uc;
    int init = unw_getcontext(&here) == 0 ? unw_init_local(&c, &here) : -1;
#else
    /* From the interrupted context, not from the handler: the first frame
     * is where the thread was. */
    int init = unw_init_local2(&c, (unw_context_t *)uc, UNW_INIT_SIGNAL_FRAME);
#endif
    if (init == 0) {
      do {
        unw_word_t ip;
        if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0 || !ip) break;
        req.pc[n++] = (uintptr_t)ip;
      } while (n < MLPROF__NATIVE_MAX && unw_step(&c) > 0);
    }
    req.n = n;
    atomic_store_explicit(&req.state, DONE, memory_order_release);
    syscall(SYS_futex, &req.state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  }
  (void)s;
  errno = saved;
}

int mlprof__native_start(void) {
  if (atomic_load(&given_up)) {
    atomic_store(&why, "the program took the signal");
    return MLPROF_EINVAL;
  }
  if (atomic_load(&sig)) {
    atomic_store_explicit(&active, 1, memory_order_release);
    return 0;
  }
  /* The highest real-time signal the program leaves at SIG_DFL. A program
   * that blocks it everywhere is seen per thread, when sampled. */
  for (int s = SIGRTMAX; s >= SIGRTMIN; s--) {
    struct sigaction old, act;
    if (sigaction(s, NULL, &old) != 0) continue;
    if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) continue;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_signal;
    act.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&act.sa_mask);
    if (sigaction(s, &act, NULL) != 0) continue;
    atomic_store(&kernel_handler, kernel_handler_of(s));
    atomic_store(&sig, s);
    atomic_store_explicit(&active, 1, memory_order_release);
    return 0;
  }
  return MLPROF_EINVAL;
}

void mlprof__native_stop(void) {
  /* Left installed: a signal still on its way must find a handler. */
  atomic_store_explicit(&active, 0, memory_order_release);
}

int mlprof__native_signal(void) {
  return atomic_load(&given_up) ? 0 : atomic_load(&sig);
}

void mlprof__native_give_up(int s) {
  if (s > 0 && s == atomic_load(&sig)) {
    atomic_store(&given_up, 1);
    atomic_store_explicit(&active, 0, memory_order_release);
  }
}

void mlprof__native_after_fork(void) {
  /* The request in flight was the parent's. */
  atomic_store(&req.state, IDLE);
}

long mlprof__native_capture(uint32_t tid, uintptr_t *pcs, size_t max,
                            uint64_t timeout_ns) {
  int s = mlprof__native_signal();
  if (!s || !atomic_load(&active)) return -1;
  if (!still_ours(s)) {
    mlprof__native_give_up(s);
    return -1;
  }
  int st = atomic_load_explicit(&req.state, memory_order_acquire);
  if (st == BUSY) return -1; /* a handler of a timed-out request still runs */
  atomic_store(&req.state, IDLE);
  atomic_store(&req.tid, (pid_t)tid);
  atomic_store_explicit(&req.state, ASKED, memory_order_release);
  if (syscall(SYS_tgkill, getpid(), (pid_t)tid, s) != 0) {
    atomic_store(&req.state, IDLE);
    return -1;
  }
  uint64_t until = mlprof__mono_ns() + timeout_ns;
  for (;;) {
    st = atomic_load_explicit(&req.state, memory_order_acquire);
    if (st == DONE) break;
    uint64_t now = mlprof__mono_ns();
    if (now >= until) {
      int expect = ASKED;
      /* Not taken yet: withdrawn, and the signal dropped, so that a thread
       * that blocked it after the sampler read its mask is not left with
       * it pending (sigpending, sigwait) when the handler would do nothing
       * anyway. Taken: it finishes shortly; the next capture waits. */
      if (atomic_compare_exchange_strong(&req.state, &expect, IDLE))
        mlprof__signals_discard(s, atomic_load(&kernel_handler));
      return expect == ASKED || expect == BUSY ? -2 : -1;
    }
    uint64_t left = until - now;
    struct timespec ts = {(time_t)(left / 1000000000u),
                          (long)(left % 1000000000u)};
    if (st == ASKED || st == BUSY)
      syscall(SYS_futex, &req.state, FUTEX_WAIT_PRIVATE, st, &ts, NULL, 0);
  }
  size_t n = req.n < max ? req.n : max;
  memcpy(pcs, req.pc, n * sizeof *pcs);
  atomic_store(&req.state, IDLE);
  return (long)n;
}

/* ---- classification and merging (the sampler thread) ------------------ */

/* Where _PyEval_EvalFrameDefault is, and the object that holds it: ranges,
 * so that classifying an address costs no look-up (dladdr goes through
 * every symbol of an object: a millisecond for libtorch's). Set once, before
 * the sampler starts. */
static _Atomic uintptr_t eval_fn;
static uintptr_t eval_end, interp_lo, interp_hi;

void mlprof__native_interp_set(const void *eval) {
  Dl_info info;
  const ElfW(Sym) *s = NULL;
  mlprof__symbol obj;
  if (!eval || !dladdr1(eval, &info, (void **)&s, RTLD_DL_SYMENT) || !s ||
      mlprof__object_of((uintptr_t)eval, &obj) != 0)
    return;
  eval_end = (uintptr_t)eval + (s->st_size ? s->st_size : 1);
  interp_lo = obj.lo;
  interp_hi = obj.hi;
  atomic_store(&eval_fn, (uintptr_t)eval);
}

enum { OTHER = 1, INTERP = 2, EVAL = 3 };

static int classify(uintptr_t pc, int innermost) {
  /* A return address may be one past a call that ends its function. */
  uintptr_t at = innermost ? pc : pc - 1;
  if (at >= atomic_load(&eval_fn) && at < eval_end) return EVAL;
  return at >= interp_lo && at < interp_hi ? INTERP : OTHER;
}

size_t mlprof__native_merge(const uintptr_t *pcs, size_t npc,
                            const uint32_t *py, const uint8_t *entry,
                            size_t npy, uint32_t *out, size_t max) {
  if (!atomic_load(&eval_fn) || !entry || !npy) return 0;
  size_t groups = 0, evals = 0;
  for (size_t i = 0; i < npy; i++) groups += entry[i] != 0;
  /* The outermost frame always ends a group. */
  if (!entry[npy - 1]) groups++;
  for (size_t i = 0; i < npc; i++) evals += classify(pcs[i], i == 0) == EVAL;
  /* Read at two moments: a thread that entered or left an evaluation loop
   * in between cannot be merged. */
  if (evals != groups) return 0;
  size_t n = 0, at = 0, left = groups;
  for (size_t i = 0; i < npc && left; i++) {
    int cls = classify(pcs[i], i == 0);
    if (cls == EVAL) {
      while (at < npy && n < max) {
        out[n++] = py[at];
        if (entry[at++]) break;
      }
      left--;
    } else if (cls == OTHER && n < max) {
      uint32_t f = mlprof__stack_frame_native(pcs[i]);
      if (f) out[n++] = f;
    }
  }
  /* Frames outer than the outermost evaluation loop (the thread's or the
   * process's start) are left out, as are the interpreter's own. */
  while (at < npy && n < max) out[n++] = py[at++];
  return n;
}

const char *mlprof__native_why(void) { return atomic_load(&why); }

#else /* no libunwind: no native stacks */

const char *mlprof__native_why(void) {
  return "built without libunwind (libunwind-dev)";
}
int mlprof__native_start(void) { return MLPROF_EINVAL; }
void mlprof__native_stop(void) {}
int mlprof__native_signal(void) { return 0; }
void mlprof__native_give_up(int s) { (void)s; }
void mlprof__native_after_fork(void) {}
long mlprof__native_capture(uint32_t tid, uintptr_t *pcs, size_t max,
                            uint64_t timeout_ns) {
  (void)tid, (void)pcs, (void)max, (void)timeout_ns;
  return -1;
}
void mlprof__native_interp_set(const void *eval) { (void)eval; }
size_t mlprof__native_merge(const uintptr_t *pcs, size_t npc,
                            const uint32_t *py, const uint8_t *entry,
                            size_t npy, uint32_t *out, size_t max) {
  (void)pcs, (void)npc, (void)py, (void)entry, (void)npy, (void)out, (void)max;
  return 0;
}

#endif
