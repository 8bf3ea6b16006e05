/* A small, deterministic workload for the compare and diff tests: each step
 * runs the zones "load", "forward", "backward" and "optimizer", each a fixed
 * amount of integer arithmetic (a xorshift chain: no memory traffic, no
 * sleeping, nothing the compiler can drop), then marks a step.
 *
 *   workload STEPS [ZONE=PERCENT]... [all=PERCENT]
 *
 * ZONE=PERCENT makes that zone do PERCENT more work (15: 15% slower);
 * all=PERCENT does it for every zone. MLPROF_WORK (iterations of the chain
 * in a zone, default 20000, about 20 µs) scales everything. */
#include <mlprof.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile uint64_t sink;

static void spin(uint64_t iterations) {
  uint64_t x = sink | 1;
  for (uint64_t i = 0; i < iterations; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  sink = x;
}

static const char *const zones[] = {"load", "forward", "backward", "optimizer"};
#define NZONES (sizeof zones / sizeof zones[0])

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: workload STEPS [ZONE=PERCENT]... [all=PERCENT]\n");
    return 2;
  }
  long steps = atol(argv[1]);
  const char *w = getenv("MLPROF_WORK");
  uint64_t base = w ? strtoull(w, NULL, 10) : 20000;
  double percent[NZONES] = {0};
  for (int a = 2; a < argc; a++) {
    const char *eq = strchr(argv[a], '=');
    if (!eq) {
      fprintf(stderr, "workload: bad argument '%s'\n", argv[a]);
      return 2;
    }
    size_t n = (size_t)(eq - argv[a]);
    int found = 0;
    for (size_t z = 0; z < NZONES; z++)
      if ((n == 3 && strncmp(argv[a], "all", 3) == 0) ||
          (strlen(zones[z]) == n && strncmp(argv[a], zones[z], n) == 0)) {
        percent[z] += atof(eq + 1);
        found = 1;
      }
    if (!found) {
      fprintf(stderr, "workload: no zone '%.*s'\n", (int)n, argv[a]);
      return 2;
    }
  }
  uint64_t work[NZONES];
  for (size_t z = 0; z < NZONES; z++)
    work[z] = (uint64_t)((double)base * (1 + percent[z] / 100) + 0.5);
  for (long s = 0; s < steps; s++) {
    {
      MLPROF_ZONE_CAT("load", MLPROF_CAT_DATA);
      spin(work[0]);
    }
    {
      MLPROF_ZONE_CAT("forward", MLPROF_CAT_FORWARD);
      spin(work[1]);
    }
    {
      MLPROF_ZONE_CAT("backward", MLPROF_CAT_BACKWARD);
      spin(work[2]);
    }
    {
      MLPROF_ZONE_CAT("optimizer", MLPROF_CAT_OPTIMIZER);
      spin(work[3]);
    }
    mlprof_step();
  }
  printf("%ld steps\n", steps);
  return 0;
}
