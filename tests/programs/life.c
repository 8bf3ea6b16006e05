/* Ends its life in the way asked, after recording N "work" zones, so a test
 * can check what the profile kept (tests/e2e/test_life.py):
 *   life exec N PROG ARGS...   execvp PROG (execl when the first ARG is -l)
 *   life execfail N            an exec that fails, then N more zones, exit 0
 *   life _exit N STATUS        _exit(STATUS)
 *   life raise N SIG           raise(SIG)
 *   life wait N                prints "ready" and waits to be signalled
 *   life handler N OUT         installs a SIGTERM handler, then starts
 *                              profiling to OUT itself, prints "ready" and
 *                              waits; the handler's flag ends the wait with
 *                              an "after_signal" zone and exit 0
 *   life overflow N            recurses until the stack overflows */
#include <mlprof.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void work(long n) {
  for (long i = 0; i < n; i++) {
    MLPROF_ZONE("work");
  }
}

static volatile sig_atomic_t signalled;
static void on_term(int sig) { signalled = sig; }

static void ready(void) {
  printf("ready\n");
  fflush(stdout);
}

/* Each frame holds a page the compiler cannot drop; limit is never reached
 * (it is there for the compiler, which refuses a recursion with no end). */
static int recurse(long depth, long limit) {
  volatile char page[4096];
  page[depth % (long)sizeof page] = (char)depth;
  if (depth == limit) return 0;
  return recurse(depth + 1, limit) + page[0];
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: life MODE N [ARGS...]\n");
    return 2;
  }
  const char *mode = argv[1];
  long n = atol(argv[2]);
  if (strcmp(mode, "handler") == 0 && argc == 4) {
    struct sigaction sa = {.sa_handler = on_term};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    mlprof_config cfg;
    mlprof_config_init(&cfg);
    cfg.output = argv[3];
    if (mlprof_init(&cfg) != 0) return 3;
    work(n);
    ready();
    while (!signalled) pause();
    MLPROF_ZONE("after_signal");
    printf("handled %d\n", (int)signalled);
    return 0;
  }
  work(n);
  if (strcmp(mode, "exec") == 0 && argc >= 4) {
    if (argc >= 6 && strcmp(argv[4], "-l") == 0)
      execl(argv[3], argv[3], argv[5], (char *)NULL);
    else
      execvp(argv[3], argv + 3);
    perror("exec");
    return 127;
  }
  if (strcmp(mode, "execfail") == 0) {
    execl("/nonexistent/program", "program", (char *)NULL);
    work(n);
    return 0;
  }
  if (strcmp(mode, "_exit") == 0 && argc == 4) _exit(atoi(argv[3]));
  if (strcmp(mode, "raise") == 0 && argc == 4) {
    raise(atoi(argv[3]));
    printf("STILL ALIVE\n");
    work(n);
    return 0;
  }
  if (strcmp(mode, "wait") == 0) {
    ready();
    for (;;) pause();
  }
  if (strcmp(mode, "overflow") == 0) return recurse(0, -1 - n);
  fprintf(stderr, "life: unknown mode %s\n", mode);
  return 2;
}
