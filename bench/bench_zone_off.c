/* The same zone loop as bench_zone.c, compiled with instrumentation out. */
#define MLPROF_DISABLE
#include <time.h>

#include "mlprof.h"

static volatile unsigned long sink;

double mlprof_bench_compiled_out(long n) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < n; i++) {
    MLPROF_ZONE("bench");
    sink++;
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  return ((double)(b.tv_sec - a.tv_sec) * 1e9 +
          (double)(b.tv_nsec - a.tv_nsec)) /
         (double)n;
}
