/* What a program reads and relies on of its signal dispositions, to be the
 * same with mlprof as without it (tests/e2e/test_signals.py):
 *   signals show            prints every disposition it reads back, through
 *                           sigaction and the signal() family, while it sets
 *                           handlers, SIG_IGN and SIG_DFL in turn
 *   signals ignore N        N "work" zones, SIGTERM ignored through signal(),
 *                           raised and sent, N more zones, exit 0
 *   signals redefault N SIG a handler for SIG, then SIG_DFL again, N zones,
 *                           raise(SIG): dies of it
 *   signals handled N       a SIGTERM handler set with sigaction, N zones,
 *                           raise(SIGTERM): the handler runs, exit 3 */
#include <mlprof.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* sigset and sigignore are obsolete, but programs still call them. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGSEGV,
                           SIGBUS, SIGFPE,  SIGILL, SIGABRT, SIGUSR1};
#define NSIGS (sizeof sigs / sizeof sigs[0])

static volatile sig_atomic_t got;
static void on_sig(int sig) { got = sig; }

static void work(long n) {
  for (long i = 0; i < n; i++) {
    MLPROF_ZONE("work");
  }
}

static const char *name(void (*h)(int)) {
  return h == SIG_DFL   ? "DFL"
         : h == SIG_IGN ? "IGN"
         : h == on_sig  ? "on_sig"
         : h == SIG_ERR ? "ERR"
                        : "other";
}

static void print(const char *what, int sig) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  if (sigaction(sig, NULL, &sa) != 0) {
    printf("%s %d: sigaction failed\n", what, sig);
    return;
  }
  unsigned long long mask = 0;
  for (int s = 1; s <= 64; s++)
    if (sigismember(&sa.sa_mask, s) == 1) mask |= 1ull << (s - 1);
  printf("%s %d: %s flags %#x mask %#llx\n", what, sig, name(sa.sa_handler),
         (unsigned)sa.sa_flags, mask);
}

static int show(void) {
  for (size_t i = 0; i < NSIGS; i++) print("start", sigs[i]);
  for (size_t i = 0; i < NSIGS; i++) {
    int sig = sigs[i];
    printf("signal %d: was %s\n", sig, name(signal(sig, on_sig)));
    print("handler", sig);
    printf("signal %d: was %s\n", sig, name(signal(sig, SIG_IGN)));
    print("ignored", sig);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sa.sa_flags = SA_RESTART | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR2);
    sigaddset(&sa.sa_mask, SIGKILL);
    memset(&old, 0, sizeof old);
    sigaction(sig, &sa, &old);
    printf("sigaction %d: was %s\n", sig, name(old.sa_handler));
    print("default", sig);
    siginterrupt(sig, 1);
    print("interrupting", sig);
    printf("signal %d: was %s\n", sig, name(signal(sig, SIG_DFL)));
    print("signal-default", sig);
    printf("sysv_signal %d: was %s\n", sig, name(sysv_signal(sig, on_sig)));
    print("sysv", sig);
    siginterrupt(sig, 0);
    sigignore(sig);
    print("sigignore", sig);
    printf("sigset %d: was %s\n", sig, name(sigset(sig, SIG_DFL)));
    print("sigset", sig);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "show") == 0) return show();
  if (argc < 3) {
    fprintf(stderr, "usage: signals MODE N [SIG]\n");
    return 2;
  }
  const char *mode = argv[1];
  long n = atol(argv[2]);
  if (strcmp(mode, "ignore") == 0) {
    work(n);
    signal(SIGTERM, SIG_IGN);
    raise(SIGTERM);
    kill(getpid(), SIGTERM);
    printf("survived\n");
    work(n);
    return 0;
  }
  if (strcmp(mode, "redefault") == 0 && argc == 4) {
    int sig = atoi(argv[3]);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sig;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
    signal(sig, SIG_DFL);
    work(n);
    raise(sig);
    printf("STILL ALIVE\n");
    return 0;
  }
  if (strcmp(mode, "handled") == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sig;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    work(n);
    raise(SIGTERM);
    printf("handled %d\n", (int)got);
    return 3;
  }
  fprintf(stderr, "signals: unknown mode %s\n", mode);
  return 2;
}
