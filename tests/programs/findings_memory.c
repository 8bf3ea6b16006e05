/* Memory over steps, for the leak tests:
 *   findings_memory leak|noisy [STEPS] [MB]
 *   findings_memory ramp|grow SECONDS MB_PER_S
 * ramp and grow mark no step (a program that is no training loop): grow
 * maps and touches MB_PER_S every second, a tenth every 100 ms, for SECONDS
 * and keeps it (a leak); ramp does the same for the first three quarters
 * of SECONDS, then holds what it has until it exits (a working set reached:
 * no leak).
 * leak: each step maps and touches MB (default 1; 1 MB is 1000000 bytes)
 * more and keeps it.
 * noisy: each step unmaps the previous block and maps and touches a new one
 * of a random size between 0 and 40 MB: flat memory, plus or minus 20 MB.
 * mmap and munmap directly, so malloc's caching cannot blur either. Each
 * step sleeps 10 ms ("sleep") so the sampler sees every step. */
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define MB 1000000

static void *map_touched(size_t n) {
  if (!n) return NULL;
  char *p =
      mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  memset(p, 1, n);
  return p;
}

static void sleep_ms(long ms) {
  struct timespec d = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&d, NULL);
}

/* ramp or grow (above): no step marks. */
static int unmarked(int ramp, int seconds, double mb_per_s) {
  int ticks = seconds * 10, grow = ramp ? ticks * 3 / 4 : ticks;
  for (int i = 0; i < ticks; i++) {
    if (i < grow) {
      MLPROF_ZONE("alloc");
      map_touched((size_t)(mb_per_s / 10 * MB));
    }
    sleep_ms(100);
  }
  printf("%d s\n", seconds);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 4 && (!strcmp(argv[1], "ramp") || !strcmp(argv[1], "grow")))
    return unmarked(!strcmp(argv[1], "ramp"), atoi(argv[2]), atof(argv[3]));
  if (argc < 2 || (strcmp(argv[1], "leak") && strcmp(argv[1], "noisy"))) {
    fprintf(stderr,
            "usage: findings_memory leak|noisy [STEPS] [MB]\n"
            "       findings_memory ramp|grow SECONDS MB_PER_S\n");
    return 2;
  }
  int leak = strcmp(argv[1], "leak") == 0;
  int steps = argc > 2 ? atoi(argv[2]) : 200;
  size_t per_step = argc > 3 ? (size_t)atoi(argv[3]) * MB : MB;
  unsigned seed = 12345;
  void *block = NULL;
  size_t size = 0;
  for (int i = 0; i < steps; i++) {
    MLPROF_ZONE("train_step");
    {
      MLPROF_ZONE("alloc");
      if (leak) {
        map_touched(per_step); /* kept for ever */
      } else {
        if (block) munmap(block, size);
        seed = seed * 1103515245u + 12345u;
        size = (size_t)((seed >> 8) % (40 * MB));
        block = map_touched(size);
      }
    }
    {
      MLPROF_ZONE("sleep");
      struct timespec d = {0, 10 * 1000000L};
      nanosleep(&d, NULL);
    }
    mlprof_step();
  }
  printf("%d steps\n", steps);
  return 0;
}
