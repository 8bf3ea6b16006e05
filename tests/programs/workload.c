/* A small, deterministic workload for the compare and diff tests: each step
 * runs the zones "load", "forward", "backward" and "optimizer", each a fixed
 * amount of integer arithmetic (a xorshift chain: no memory traffic, no
 * sleeping, nothing the compiler can drop), then marks a step.
 *
 *   workload STEPS [ZONE=PERCENT]... [all=PERCENT]
 *   workload --interleave ROUNDS STEPS DIR[:ZONE=PERCENT,...]...
 *   workload --after STEPS
 *
 * ZONE=PERCENT makes that zone do PERCENT more work (15: 15% slower);
 * all=PERCENT does it for every zone. MLPROF_WORK (iterations of the chain
 * in a zone, default 20000, about 20 µs) scales everything.
 *
 * --interleave records several runs in one process, round by round: each
 * round records STEPS steps into DIR/round-N.mlprof for every DIR in turn
 * (the order reversed every other round). Runs made apart, or side by side
 * on two vCPUs, differ by several percent on a shared machine (one vCPU gets
 * less of the host than the other); interleaved, every run meets the same
 * CPUs and the same drift, and only the work differs.
 *
 * --after records STEPS steps without running them: a span "step" holding
 * the four zones, MLPROF_WORK ns each, one after the other from now on, with
 * 32 units "samples" on each "load", given to the library after the fact
 * (mlprof_track_spans, track "after"). Millions of spans in a second or two,
 * each long enough to be drawn as itself in a millisecond of the timeline. */
#include <time.h>
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

/* Adds PERCENT of more work for each ZONE=PERCENT in args (separated by
 * sep) to percent[]. Returns 0, or -1 after a message. */
static int parse_factors(char *args, const char *sep, double *percent) {
  for (char *arg = strtok(args, sep); arg; arg = strtok(NULL, sep)) {
    const char *eq = strchr(arg, '=');
    if (!eq) {
      fprintf(stderr, "workload: bad argument '%s'\n", arg);
      return -1;
    }
    size_t n = (size_t)(eq - arg);
    int found = 0;
    for (size_t z = 0; z < NZONES; z++)
      if ((n == 3 && strncmp(arg, "all", 3) == 0) ||
          (strlen(zones[z]) == n && strncmp(arg, zones[z], n) == 0)) {
        percent[z] += atof(eq + 1);
        found = 1;
      }
    if (!found) {
      fprintf(stderr, "workload: no zone '%.*s'\n", (int)n, arg);
      return -1;
    }
  }
  return 0;
}

static void run_steps(long steps, uint64_t base, const double *percent) {
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
}

static int after(long steps, uint64_t base) {
  enum { BATCH = (NZONES + 1) * 8192 };
  static mlprof_span buf[BATCH];
  const mlprof_site *step = mlprof_site_intern("step", MLPROF_CAT_NONE);
  const mlprof_site *site[NZONES];
  for (size_t z = 0; z < NZONES; z++)
    site[z] = mlprof_site_intern(zones[z], MLPROF_CAT_NONE);
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t t = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  size_t n = 0;
  for (long s = 0; s < steps; s++) {
    buf[n++] =
        (mlprof_span){.site = step, .begin_ns = t, .end_ns = t + NZONES * base};
    for (size_t z = 0; z < NZONES; z++)
      buf[n++] = (mlprof_span){.site = site[z],
                               .begin_ns = t + z * base,
                               .end_ns = t + (z + 1) * base,
                               .unit = z ? NULL : "samples",
                               .units = z ? 0 : 32};
    t += NZONES * base + base / 4;
    if (n + NZONES + 1 > BATCH || s + 1 == steps) {
      int rc = mlprof_track_spans("after", buf, n);
      if (rc) {
        fprintf(stderr, "workload: %s\n", mlprof_strerror(rc));
        return 1;
      }
      n = 0;
    }
  }
  printf("%ld steps recorded after the fact\n", steps);
  return 0;
}

#define MAX_RUNS 8

static int interleave(int argc, char **argv, uint64_t base) {
  if (argc < 5 || argc - 4 > MAX_RUNS) {
    fprintf(stderr,
            "usage: workload --interleave ROUNDS STEPS DIR[:ZONE=PERCENT,...]"
            "... (at most %d)\n",
            MAX_RUNS);
    return 2;
  }
  long rounds = atol(argv[2]), steps = atol(argv[3]);
  int runs = argc - 4;
  char *dirs[MAX_RUNS];
  double percent[MAX_RUNS][NZONES] = {{0}};
  for (int r = 0; r < runs; r++) {
    dirs[r] = argv[4 + r];
    char *colon = strchr(dirs[r], ':');
    if (colon) {
      *colon = '\0';
      if (parse_factors(colon + 1, ",", percent[r])) return 2;
    }
  }
  for (long k = 0; k < rounds; k++)
    for (int i = 0; i < runs; i++) {
      int r = k % 2 ? runs - 1 - i : i;
      char path[4096];
      snprintf(path, sizeof path, "%s/round-%ld.mlprof", dirs[r], k);
      mlprof_config cfg;
      mlprof_config_init(&cfg);
      cfg.output = path;
      cfg.sample_interval_ms = -1;
      if (mlprof_init(&cfg) != 0) {
        fprintf(stderr, "workload: cannot write %s\n", path);
        return 1;
      }
      run_steps(steps, base, percent[r]);
      mlprof_shutdown();
    }
  printf("%ld rounds of %ld steps, %d runs\n", rounds, steps, runs);
  return 0;
}

int main(int argc, char **argv) {
  const char *w = getenv("MLPROF_WORK");
  uint64_t base = w ? strtoull(w, NULL, 10) : 20000;
  if (argc > 1 && strcmp(argv[1], "--interleave") == 0)
    return interleave(argc, argv, base);
  if (argc == 3 && strcmp(argv[1], "--after") == 0)
    return after(atol(argv[2]), base);
  if (argc < 2) {
    fprintf(stderr, "usage: workload STEPS [ZONE=PERCENT]... [all=PERCENT]\n");
    return 2;
  }
  long steps = atol(argv[1]);
  double percent[NZONES] = {0};
  for (int a = 2; a < argc; a++)
    if (parse_factors(argv[a], " ", percent)) return 2;
  run_steps(steps, base, percent);
  printf("%ld steps\n", steps);
  return 0;
}
