/* Cost of the allocation hooks (src/intercept/malloc.c) per malloc+free
 * pair, in a tight loop of sizes 16 bytes to 4 KiB, the worst case for any
 * allocation profiler (heaptrack's "tight malloc loop"). Run by
 * bench/bench_malloc.sh: untraced, then under `mlprof run` with
 * --memory=off, sampled (the default) and all, interleaved.
 *   bench_malloc [PAIRS]
 * Prints `ns_per_pair N`: the best of 5 blocks, thread CPU time. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void *volatile sink;

static double block(long n) {
  struct timespec a, b;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  for (long i = 0; i < n; i++) {
    void *p = malloc(16 + (size_t)(i * 61) % 4080);
    sink = p;
    free(p);
  }
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  return ((double)(b.tv_sec - a.tv_sec) * 1e9 +
          (double)(b.tv_nsec - a.tv_nsec)) /
         (double)n;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 2000000;
  if (n <= 0) {
    fprintf(stderr, "usage: bench_malloc [PAIRS > 0]\n");
    return 2;
  }
  block(n / 10); /* warm-up */
  double best = 0;
  for (int k = 0; k < 5; k++) {
    double t = block(n);
    if (!k || t < best) best = t;
  }
  printf("ns_per_pair %.1f\n", best);
  return 0;
}
