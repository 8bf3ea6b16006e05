/* What the C benchmarks share: a clock, and running a command as a child
 * with its wall time, CPU time and peak memory. */
#ifndef MLPROF_BENCH_H
#define MLPROF_BENCH_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* CPU seconds (user and system) in ru. */
static inline double ru_cpu_s(const struct rusage *ru) {
  return (double)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) +
         (double)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) * 1e-6;
}

/* Runs argv with stdout to out (NULL: /dev/null); returns its wall seconds
 * and sets its peak RSS and, when cpu_s is not NULL, its CPU seconds. A
 * command that fails ends the benchmark. */
static inline double run_child_cpu(char *const argv[], const char *out,
                                   long *maxrss_kb, double *cpu_s) {
  fflush(stdout);
  double t0 = now_s();
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(out ? out : "/dev/null", "w", stdout)) _exit(127);
    execv(argv[0], argv);
    _exit(127);
  }
  int status;
  struct rusage ru;
  wait4(pid, &status, 0, &ru);
  *maxrss_kb = ru.ru_maxrss;
  if (cpu_s) *cpu_s = ru_cpu_s(&ru);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "benchmark: %s %s failed\n", argv[0], argv[1]);
    exit(1);
  }
  return now_s() - t0;
}

/* run_child_cpu without the CPU time. */
static inline double run_child(char *const argv[], const char *out,
                               long *maxrss_kb) {
  return run_child_cpu(argv, out, maxrss_kb, NULL);
}

#endif
