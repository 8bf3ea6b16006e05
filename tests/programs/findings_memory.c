/* Memory over steps, for the leak tests:
 *   findings_memory leak|noisy [STEPS] [MB]
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

int main(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "leak") && strcmp(argv[1], "noisy"))) {
    fprintf(stderr, "usage: findings_memory leak|noisy [STEPS]\n");
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
