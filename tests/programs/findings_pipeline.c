/* A training loop with known bottlenecks, for the findings tests:
 *   findings_pipeline slow|fast|nested [STEPS]
 * Each step: "data" (category data) sleeps 30 ms when slow (a starved data
 * loader), else does almost nothing; "read_input" waits 25 ms on a pipe
 * nobody writes to (I/O wait: no CPU); "forward" (category forward) keeps a
 * core busy for 30 ms (compute); then a step mark.
 * nested: each step is "schedule", which sleeps 2 x 50 ms itself around two
 * busy children, "forward" and "loss", 20 ms each; then a step mark. The
 * sleeps are long beside the kernel's 10 ms CPU accounting ticks, so the
 * ticks of the children that fall into the parent's own time stay few. */
#include <mlprof.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static volatile unsigned sink;

static void busy_ms(double ms) {
  double end = now_ms() + ms;
  unsigned x = 1;
  while (now_ms() < end)
    for (int i = 0; i < 2000; i++) x = x * 1103515245u + 12345u;
  sink = x;
}

int main(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "slow") && strcmp(argv[1], "fast") &&
                   strcmp(argv[1], "nested"))) {
    fprintf(stderr, "usage: findings_pipeline slow|fast|nested [STEPS]\n");
    return 2;
  }
  int slow = strcmp(argv[1], "slow") == 0;
  int steps = argc > 2 ? atoi(argv[2]) : 20;
  if (!strcmp(argv[1], "nested")) {
    for (int i = 0; i < steps; i++) {
      {
        MLPROF_ZONE("schedule");
        struct timespec d = {0, 50 * 1000000L};
        nanosleep(&d, NULL);
        {
          MLPROF_ZONE_CAT("forward", MLPROF_CAT_FORWARD);
          busy_ms(20);
        }
        nanosleep(&d, NULL);
        {
          MLPROF_ZONE("loss");
          busy_ms(20);
        }
      }
      mlprof_step();
    }
    printf("%d steps\n", steps);
    return 0;
  }
  int fds[2];
  if (pipe(fds)) return 1;
  for (int i = 0; i < steps; i++) {
    {
      MLPROF_ZONE_CAT("data", MLPROF_CAT_DATA);
      if (slow) {
        struct timespec d = {0, 30 * 1000000L};
        nanosleep(&d, NULL);
      } else {
        busy_ms(0.2);
      }
    }
    {
      MLPROF_ZONE("read_input");
      struct pollfd p = {.fd = fds[0], .events = POLLIN};
      poll(&p, 1, 25);
    }
    {
      MLPROF_ZONE_CAT("forward", MLPROF_CAT_FORWARD);
      busy_ms(30);
    }
    mlprof_step();
  }
  printf("%d steps\n", steps);
  return 0;
}
