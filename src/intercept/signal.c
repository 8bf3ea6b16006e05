/* The program's signal dispositions stay the program's. mlprof catches the
 * signals whose default action ends the process (session.c flushes and
 * finishes the profile, then the process dies of the same signal), but only
 * while the program leaves them at SIG_DFL: a handler or SIG_IGN the program
 * sets goes to the kernel as it is, and mlprof's handler comes back when the
 * program sets SIG_DFL again. So a program's handler runs exactly as without
 * mlprof, and Python installs its own SIGINT handler (KeyboardInterrupt) at
 * start-up, as it does only where it finds SIG_DFL.
 *
 * sigaction and the signal() family are interposed so that the program reads
 * what it set (SIG_DFL, with its own flags and mask, where mlprof's handler
 * stands in), never mlprof's handler. That holds where this library comes
 * before the C library in the symbol search: preloaded by `mlprof run`, or
 * linked into the program. Loaded later with dlopen (the Python package's
 * bundled copy), the program's calls reach the C library directly: what it
 * sets replaces mlprof's handler, and a C-level query of a signal left at
 * SIG_DFL finds mlprof's (Python's signal.getsignal reads its own table and
 * still says SIG_DFL). A raw rt_sigaction system call is not seen either.
 *
 * The table belongs to the process that set it up (and to its fork()
 * children, through the fork handler): a vfork child shares this memory, and
 * a child made without fork handlers (_Fork, clone) has no session; in both,
 * the calls go straight to the C library. */
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../record/internal.h"
#include "../record/stack.h"

#define EXPORT __attribute__((visibility("default")))

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
typedef void (*handler_fn)(int);

/* The C library's own, exported under this name too; the fallback where
 * dlsym finds no next sigaction (a static program). */
extern int __sigaction(int, const struct sigaction *, struct sigaction *);

static const int caught[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGSEGV,
                             SIGBUS, SIGFPE,  SIGILL, SIGABRT};
#define NCAUGHT (sizeof caught / sizeof caught[0])

static sigaction_fn real_sigaction;
static struct sigaction ours;
/* Flag bits the C library adds to what it hands the kernel (SA_RESTORER),
 * which a query then returns: a disposition kept here reads as it would
 * read from the kernel. */
static int added_flags, probed;
static struct {
  int ours;                 /* mlprof's handler stands in for SIG_DFL */
  struct sigaction program; /* the program's SIG_DFL, while ours */
} slot[NCAUGHT];
static _Atomic pid_t armed; /* the process whose table this is, else 0 */
static atomic_flag busy = ATOMIC_FLAG_INIT;
static sigset_t fork_mask;
/* Signals for which the program asked siginterrupt(sig, 1): its signal()
 * then sets no SA_RESTART (the C library's own set is never consulted once
 * the family is interposed). */
static sigset_t interrupting;

__attribute__((constructor)) static void resolve(void) {
  void *fn = dlsym(RTLD_NEXT, "sigaction");
  memcpy(&real_sigaction, &fn, sizeof fn);
}

static int real(int sig, const struct sigaction *act, struct sigaction *old) {
  if (!real_sigaction) resolve();
  return real_sigaction ? real_sigaction(sig, act, old)
                        : __sigaction(sig, act, old);
}

static int slot_of(int sig) {
  for (size_t i = 0; i < NCAUGHT; i++)
    if (caught[i] == sig) return (int)i;
  return -1;
}

/* The table's lock, with every signal blocked in the caller so that a
 * handler calling sigaction cannot wait on its own thread. */
static void lock(sigset_t *old) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, old);
  while (atomic_flag_test_and_set_explicit(&busy, memory_order_acquire))
    sched_yield();
}

static void unlock(const sigset_t *old) {
  atomic_flag_clear_explicit(&busy, memory_order_release);
  pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* Puts mlprof's handler in the kernel for sig; the first time, learns
 * added_flags from what the kernel then holds. Table lock held. */
static int install(int sig) {
  struct sigaction back;
  if (real(sig, &ours, NULL) != 0) return -1;
  if (!probed && real(sig, NULL, &back) == 0) {
    added_flags = back.sa_flags & ~ours.sa_flags;
    probed = 1;
  }
  return 0;
}

/* sigaction for a signal of the table: the program's SIG_DFL stays ours in
 * the kernel, anything else goes there as it is. */
static int table_sigaction(int i, const struct sigaction *act,
                           struct sigaction *old) {
  int sig = caught[i], rc = 0, err = errno;
  struct sigaction want, was;
  if (act) want = *act; /* act and old may be one struct */
  if (old)
    was = *old;
  else
    memset(&was, 0, sizeof was);
  sigset_t mask;
  lock(&mask);
  if (slot[i].ours)
    was = slot[i].program;
  else if ((rc = real(sig, NULL, &was)) != 0)
    err = errno;
  if (rc == 0 && act && want.sa_handler == SIG_DFL) {
    if (!slot[i].ours && (rc = install(sig)) != 0) err = errno;
    if (rc == 0) {
      want.sa_flags |= added_flags;
      sigdelset(&want.sa_mask, SIGKILL); /* as the kernel keeps it */
      sigdelset(&want.sa_mask, SIGSTOP);
      slot[i].program = want;
      slot[i].ours = 1;
    }
  } else if (rc == 0 && act) {
    if ((rc = real(sig, &want, NULL)) == 0)
      slot[i].ours = 0;
    else
      err = errno;
  }
  unlock(&mask);
  if (rc == 0 && old) *old = was;
  errno = err;
  return rc;
}

/* The table's lock where this process owns the table: a child made without
 * fork handlers may have a copy of it held by a thread it does not have. */
static int lock_here(sigset_t *old) {
  if (atomic_load(&armed) != getpid()) return 0;
  lock(old);
  return 1;
}

void mlprof__signals_discard(int sig, void *handler) {
  sigset_t mask;
  int locked = lock_here(&mask);
  mlprof__ksigaction k, ign = {SIG_IGN, 0, NULL, 0};
  /* SIG_IGN drops the signal wherever it is pending, blocked or not
   * (POSIX); then the very disposition read comes back. Only while the
   * handler is still the one named: the program may have taken it. */
  if (syscall(SYS_rt_sigaction, sig, NULL, &k, sizeof k.mask) == 0 &&
      k.handler == handler &&
      syscall(SYS_rt_sigaction, sig, &ign, NULL, sizeof k.mask) == 0)
    syscall(SYS_rt_sigaction, sig, &k, NULL, sizeof k.mask);
  if (locked) unlock(&mask);
}

static int any_sigaction(int sig, const struct sigaction *act,
                         struct sigaction *old) {
  int native = mlprof__native_signal();
  if (native && sig == native) {
    /* The stack sampler's signal (src/record/native.c): the program's now.
     * It reads SIG_DFL where mlprof's handler stood. Under the table's lock,
     * so that a discard (above) never puts mlprof's handler back over it. */
    sigset_t mask;
    int locked = lock_here(&mask);
    if (act) mlprof__native_give_up(sig);
    int rc = real(sig, act, old), err = errno;
    if (locked) unlock(&mask);
    if (rc == 0 && old) {
      memset(old, 0, sizeof *old);
      old->sa_handler = SIG_DFL;
    }
    errno = err;
    return rc;
  }
  int i = slot_of(sig);
  if (i < 0 || atomic_load(&armed) != getpid()) return real(sig, act, old);
  return table_sigaction(i, act, old);
}

void mlprof__signals_take(void (*fn)(int, siginfo_t *, void *)) {
  sigset_t mask;
  lock(&mask);
  memset(&ours, 0, sizeof ours);
  ours.sa_sigaction = fn;
  /* On the alternate stack: a stack overflow is flushed too. */
  ours.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigemptyset(&ours.sa_mask);
  for (size_t i = 0; i < NCAUGHT; i++) {
    struct sigaction cur;
    /* A handler or SIG_IGN is the program's: leave it. */
    if (real(caught[i], NULL, &cur) != 0 || cur.sa_handler != SIG_DFL ||
        install(caught[i]) != 0)
      continue;
    slot[i].program = cur;
    slot[i].ours = 1;
  }
  atomic_store(&armed, getpid());
  unlock(&mask);
}

void mlprof__signals_die(int sig) {
  struct sigaction dfl;
  sigset_t set;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  real(sig, &dfl, NULL);
  /* Unblocked, the raised signal is delivered at once. */
  sigemptyset(&set);
  sigaddset(&set, sig);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
  raise(sig);
}

void mlprof__signals_fork_prepare(void) { lock(&fork_mask); }

void mlprof__signals_fork_parent(void) { unlock(&fork_mask); }

void mlprof__signals_fork_child(void) {
  if (atomic_load(&armed)) atomic_store(&armed, getpid());
  unlock(&fork_mask);
}

/* ---- the interposed functions, each as the C library defines it --------- */

EXPORT int sigaction(int sig, const struct sigaction *act,
                     struct sigaction *old) {
  return any_sigaction(sig, act, old);
}

static int bad_signal(int sig) {
  if (sig >= 1 && sig < NSIG) return 0;
  errno = EINVAL;
  return 1;
}

/* What the signal() family does: fn for sig with flags, sig itself masked
 * in its handler when mask_self; the previous handler, or SIG_ERR. */
static handler_fn set_handler(int sig, handler_fn fn, int mask_self,
                              int flags) {
  struct sigaction act, old;
  if (fn == SIG_ERR || bad_signal(sig)) {
    errno = EINVAL;
    return SIG_ERR;
  }
  memset(&act, 0, sizeof act);
  act.sa_handler = fn;
  sigemptyset(&act.sa_mask);
  if (mask_self) sigaddset(&act.sa_mask, sig);
  act.sa_flags = flags;
  return any_sigaction(sig, &act, &old) < 0 ? SIG_ERR : old.sa_handler;
}

/* BSD semantics: the signal masked in its handler, calls restarted unless
 * siginterrupt said otherwise. */
EXPORT handler_fn signal(int sig, handler_fn fn) {
  int restart = sig >= 1 && sig < NSIG && !sigismember(&interrupting, sig);
  return set_handler(sig, fn, 1, restart ? SA_RESTART : 0);
}

EXPORT handler_fn bsd_signal(int sig, handler_fn fn) { return signal(sig, fn); }

EXPORT handler_fn ssignal(int sig, handler_fn fn) { return signal(sig, fn); }

/* System V semantics: reset to SIG_DFL on delivery, not masked, calls not
 * restarted (what signal() is under strict standards modes). */
EXPORT handler_fn __sysv_signal(int sig, handler_fn fn) {
  return set_handler(sig, fn, 0, SA_RESETHAND | SA_NODEFER);
}

EXPORT handler_fn sysv_signal(int sig, handler_fn fn) {
  return __sysv_signal(sig, fn);
}

EXPORT int sigignore(int sig) {
  struct sigaction act;
  memset(&act, 0, sizeof act);
  act.sa_handler = SIG_IGN;
  sigemptyset(&act.sa_mask);
  return any_sigaction(sig, &act, NULL);
}

EXPORT int siginterrupt(int sig, int interrupt) {
  struct sigaction act;
  if (any_sigaction(sig, NULL, &act) < 0) return -1;
  if (interrupt) {
    sigaddset(&interrupting, sig);
    act.sa_flags &= ~SA_RESTART;
  } else {
    sigdelset(&interrupting, sig);
    act.sa_flags |= SA_RESTART;
  }
  return any_sigaction(sig, &act, NULL) < 0 ? -1 : 0;
}

/* X/Open: SIG_HOLD blocks the signal; any other disposition unblocks it. */
EXPORT handler_fn sigset(int sig, handler_fn fn) {
  struct sigaction act, old;
  sigset_t set, was;
  if (bad_signal(sig)) return SIG_ERR;
  sigemptyset(&set);
  sigaddset(&set, sig);
  if (fn == SIG_HOLD) {
    if (sigprocmask(SIG_BLOCK, &set, &was) < 0) return SIG_ERR;
    if (sigismember(&was, sig)) return SIG_HOLD;
    return any_sigaction(sig, NULL, &old) < 0 ? SIG_ERR : old.sa_handler;
  }
  memset(&act, 0, sizeof act);
  act.sa_handler = fn;
  sigemptyset(&act.sa_mask);
  if (any_sigaction(sig, &act, &old) < 0 ||
      sigprocmask(SIG_UNBLOCK, &set, &was) < 0)
    return SIG_ERR;
  return sigismember(&was, sig) ? SIG_HOLD : old.sa_handler;
}
