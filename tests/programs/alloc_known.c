/* Allocations of known sizes in known zones and threads, for the memory
 * tests (tests/e2e/test_memory.py):
 *   alloc_known zones      the zones below, then "done"
 *   alloc_known signal     allocates in a signal handler meanwhile
 *   alloc_known fork       a child allocates 3 MiB in zone "child" too
 *   alloc_known kill MS    steps of 1 MiB leaked, then SIGKILL after MS ms
 *   alloc_known work F [N [MS]]  N steps (40) of a steady loop, zone
 *                          "grow" allocating F times 1 MiB a step (for
 *                          diff); a nap of MS ms after each step (0)
 *   alloc_known leak B N   N steps, each keeping B bytes in 64-byte blocks
 *                          in zone "drip" (the least leak the report sees)
 *   alloc_known clone N    N children made by a raw clone system call (no
 *                          fork handlers) while a thread allocates; each
 *                          allocates and exits. Status 6 when one hangs.
 * Zones (exact bytes asked for; nothing else allocates inside them):
 *   alpha    main thread   1000 x malloc(4096), kept
 *   beta     main thread   50 x malloc(1 MiB) then freed
 *   gamma    second thread 2000 x calloc(10, 100), kept
 *   chain    main thread   realloc of one block from 1 to 65536 bytes,
 *                          doubling (17 calls), then freed
 *   aligned  main thread   posix_memalign, aligned_alloc, memalign,
 *                          valloc of 65536 bytes each, freed
 *   mapped   main thread   mmap of 16 MiB, unmapped
 *   leak     main thread   one step per iteration (20): 1 MiB kept and
 *                          1 MiB freed
 * A constructor allocates before main; its block is freed in main. */
#include <malloc.h>
#include <mlprof.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MIB (1u << 20)

static void *early;
/* Every block goes through here, so the compiler keeps each allocation
 * (it may otherwise drop a malloc whose block is never read). */
static void *volatile sink;

static void *kept(void *p) {
  sink = p;
  return p;
}

__attribute__((constructor)) static void before_main(void) {
  early = malloc(12345);
  memset(early, 1, 12345);
}

static void *gamma_thread(void *arg) {
  void **keep = arg;
  mlprof_zone_begin("gamma");
  for (int i = 0; i < 2000; i++) keep[i] = kept(calloc(10, 100));
  mlprof_zone_end();
  return NULL;
}

static volatile sig_atomic_t handled;

static void on_alarm(int sig) {
  (void)sig;
  /* Not async-signal-safe, as programs do anyway: must not hang or crash. */
  free(kept(malloc(1000)));
  handled++;
}

static void zones(void) {
  static void *gamma[2000];
  mlprof_zone_begin("alpha");
  for (int i = 0; i < 1000; i++) kept(malloc(4096));
  mlprof_zone_end();

  mlprof_zone_begin("beta");
  for (int i = 0; i < 50; i++) {
    free(kept(malloc(MIB)));
  }
  mlprof_zone_end();

  pthread_t th;
  pthread_create(&th, NULL, gamma_thread, gamma);
  pthread_join(th, NULL);

  mlprof_zone_begin("chain");
  char *c = NULL;
  for (size_t n = 1; n <= 65536; n *= 2) c = kept(realloc(c, n));
  free(c);
  mlprof_zone_end();

  mlprof_zone_begin("aligned");
  void *a[4] = {0};
  if (posix_memalign(&a[0], 4096, 65536)) a[0] = NULL;
  a[1] = aligned_alloc(4096, 65536);
  a[2] = memalign(4096, 65536);
  a[3] = valloc(65536);
  for (int i = 0; i < 4; i++) free(kept(a[i]));
  mlprof_zone_end();

  mlprof_zone_begin("mapped");
  void *m = mmap(NULL, 16 * MIB, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m != MAP_FAILED) munmap(m, 16 * MIB);
  mlprof_zone_end();

  for (int i = 0; i < 20; i++) {
    mlprof_step();
    mlprof_zone_begin("leak");
    kept(malloc(MIB));
    free(kept(malloc(MIB)));
    mlprof_zone_end();
  }
  mlprof_step();
  free(early);
}

/* A steady loop, the same every step but for zone "grow": "fwd" 64 x
 * 16 KiB and "grow" f x 8 x 128 KiB held to the step's end; "small" 2000
 * x 100 bytes freed at once; "cache" 4 MiB kept from the first step. */
static void work(int f, int steps, long ms) {
  static void *fwd[64], *grow[8 * 16];
  if (f < 1 || f > 16) f = 1;
  for (int s = 0; s < steps; s++) {
    mlprof_step();
    if (s == 0) {
      mlprof_zone_begin("cache");
      for (int i = 0; i < 4; i++) kept(malloc(MIB));
      mlprof_zone_end();
    }
    mlprof_zone_begin("fwd");
    for (int i = 0; i < 64; i++) fwd[i] = kept(malloc(16384));
    mlprof_zone_end();
    mlprof_zone_begin("grow");
    for (int i = 0; i < 8 * f; i++) grow[i] = kept(malloc(131072));
    mlprof_zone_end();
    mlprof_zone_begin("small");
    for (int i = 0; i < 2000; i++) free(kept(malloc(100)));
    mlprof_zone_end();
    for (int i = 0; i < 64; i++) free(fwd[i]);
    for (int i = 0; i < 8 * f; i++) free(grow[i]);
    struct timespec nap = {ms / 1000, ms % 1000 * 1000000};
    if (ms > 0) nanosleep(&nap, NULL);
  }
  mlprof_step();
}

static _Atomic int churning = 1;

/* Allocates and frees in a loop: under a small sampling mean, nearly every
 * call takes the table of sampled addresses' lock. */
static void *churn(void *arg) {
  (void)arg;
  while (churning)
    for (int i = 0; i < 64; i++) free(kept(malloc(4096 + (size_t)i * 64)));
  return NULL;
}

/* Children made while churn runs, without fork handlers; 0 when all of
 * them ended within 5 s each. */
static int clones(int n) {
  pthread_t th;
  pthread_create(&th, NULL, churn, NULL);
  int hung = 0;
  for (int k = 0; k < n; k++) {
    long pid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) {
      for (int i = 0; i < 16; i++) free(kept(malloc(8192 + (size_t)i)));
      syscall(SYS_exit_group, 0);
    }
    if (pid < 0) break;
    int st = 0, waited = 0;
    while (waitpid((pid_t)pid, &st, WNOHANG) == 0 && waited < 5000) {
      struct timespec ms = {0, 1000000};
      nanosleep(&ms, NULL);
      waited++;
    }
    if (waited >= 5000) {
      kill((pid_t)pid, SIGKILL);
      waitpid((pid_t)pid, &st, 0);
      hung++;
    }
  }
  churning = 0;
  pthread_join(th, NULL);
  if (hung) fprintf(stderr, "%d of %d children hung\n", hung, n);
  return hung ? 6 : 0;
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "zones";
  if (!early) return 3;
  if (!strcmp(what, "zones")) {
    zones();
  } else if (!strcmp(what, "signal")) {
    /* The handler's block comes from the thread's cache of freed blocks
     * (glibc's tcache), which takes no lock: filled here before the first
     * signal. Empty, glibc would take the arena's lock that the interrupted
     * malloc may hold, and wait forever: the library's writer thread makes
     * the process multi-threaded, where glibc locks. Not mlprof's hooks. */
    free(kept(malloc(1000)));
    signal(SIGALRM, on_alarm);
    struct itimerval it = {{0, 200}, {0, 200}};
    setitimer(ITIMER_REAL, &it, NULL);
    time_t end = time(NULL) + 1;
    while (time(NULL) <= end)
      for (int i = 0; i < 1000; i++)
        free(kept(malloc((size_t)(i * 37 % 5000) + 1)));
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    if (!handled) return 4;
  } else if (!strcmp(what, "fork")) {
    pid_t pid = fork();
    if (pid == 0) {
      mlprof_zone_begin("child");
      void *p = kept(malloc(3 * MIB));
      mlprof_zone_end();
      free(p);
      _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    zones();
    if (!WIFEXITED(st) || WEXITSTATUS(st)) return 5;
  } else if (!strcmp(what, "clone")) {
    int rc = clones(argc > 2 ? atoi(argv[2]) : 200);
    if (rc) return rc;
  } else if (!strcmp(what, "work")) {
    work(argc > 2 ? atoi(argv[2]) : 1, argc > 3 ? atoi(argv[3]) : 40,
         argc > 4 ? atol(argv[4]) : 0);
  } else if (!strcmp(what, "leak")) {
    long bytes = argc > 2 ? atol(argv[2]) : 65536;
    int steps = argc > 3 ? atoi(argv[3]) : 100;
    for (int s = 0; s < steps; s++) {
      mlprof_step();
      mlprof_zone_begin("drip");
      for (long b = 0; b < bytes; b += 64) kept(malloc(64));
      mlprof_zone_end();
    }
    mlprof_step();
  } else if (!strcmp(what, "kill")) {
    long ms = argc > 2 ? atol(argv[2]) : 500;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
      mlprof_step();
      mlprof_zone_begin("doomed");
      kept(malloc(MIB));
      mlprof_zone_end();
      struct timespec nap = {0, 10000000};
      nanosleep(&nap, NULL);
      clock_gettime(CLOCK_MONOTONIC, &t);
      if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >=
          ms)
        kill(getpid(), SIGKILL);
    }
  } else {
    fprintf(stderr, "usage: alloc_known zones|signal|fork|kill [MS]\n");
    return 2;
  }
  printf("done\n");
  return 0;
}
