/* The sampler at 10 Hz, beside the same workload unsampled in the same run:
 *   overhead        <= 0.5% of one core (the sampler thread's own CPU time,
 *                   from /proc/self/task/TID/schedstat, in ns)
 *   schedule        samples within 5 ms of their tick (t0 + k x interval)
 * usage: bench_sampler [seconds] */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "format/reader.h"
#include "bench.h"
#include "mlprof.h"

/* A fixed amount of arithmetic; returns its wall time. With probe set, at
 * about a tenth of the way it reads the sampler's CPU time into *probe_cpu
 * and the time into *probe_t, to split start-up from the steady state. */
static double thread_cpu_ns(const char *name);
static double workload(long iters, double *probe_cpu, double *probe_t) {
  volatile double x = 1.0;
  double t0 = now_s();
  for (long i = 0; i < iters; i++) {
    x = x * 1.0000001 + 1e-9;
    if (probe_cpu && i == iters / 10) {
      *probe_cpu = thread_cpu_ns("mlprof-sampler");
      *probe_t = now_s();
    }
  }
  return now_s() - t0;
}

/* CPU ns of this process's thread called name, from schedstat. */
static double thread_cpu_ns(const char *name) {
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  double ns = -1;
  while (d && (e = readdir(d))) {
    char path[300], comm[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
    fclose(f);
    if (strcmp(comm, name) != 0) continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", e->d_name);
    f = fopen(path, "r");
    if (f && fscanf(f, "%lf", &ns) != 1) ns = -1;
    if (f) fclose(f);
  }
  if (d) closedir(d);
  return ns;
}

typedef struct {
  double first, prev;
  int n;
  double max_err, sum_err;
  double interval_ns;
} schedule;

static int on_row(void *ud, const mlprof__sample_row *row) {
  schedule *s = ud;
  if (row->subject != 0) return 0; /* one row per tick: the system's */
  double t = (double)row->t;
  if (s->n == 0) s->first = t;
  double err = fabs(t - (s->first + s->n * s->interval_ns));
  if (err > s->max_err) s->max_err = err;
  s->sum_err += err;
  s->n++;
  return 0;
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 5;
  if (argc > 2 || !(seconds > 0)) {
    fprintf(stderr, "usage: bench_sampler [SECONDS] (default 5)\n");
    return 2;
  }
  /* calibrate the workload to about `seconds` */
  long iters = 10000000;
  double t = workload(iters, NULL, NULL);
  iters = (long)((double)iters * seconds / t);

  double base = workload(iters, NULL, NULL);

  /* A new directory: the library creates its file, never overwriting one. */
  char dir[] = "/tmp/mlprof-bench-sampler-XXXXXX", path[64];
  if (!mkdtemp(dir)) return 1;
  snprintf(path, sizeof path, "%s/sampler.mlprof", dir);
  mlprof_config cfg;
  mlprof_config_init(&cfg);
  cfg.output = path;
  cfg.sample_interval_ms = 100;
  if (mlprof_init(&cfg) != 0) return 1;
  double t0 = now_s(), cpu1 = 0, t1 = 0;
  double sampled = workload(iters, &cpu1, &t1);
  double cpu = thread_cpu_ns("mlprof-sampler");
  double t2 = now_s(), wall = t2 - t0;
  mlprof_shutdown();

  schedule s = {.interval_ns = 100e6};
  mlprof__visitor v = {.ud = &s, .sample = on_row};
  mlprof__read_report rep;
  mlprof__read_file(path, &v, &rep, NULL, 0);
  unlink(path);
  rmdir(dir);

  printf(
      "workload: %.3f s unsampled (baseline), %.3f s sampled at 10 Hz "
      "(%+.2f%%)\n",
      base, sampled, (sampled / base - 1) * 100);
  printf(
      "sampler thread, steady state: %.2f ms of CPU in %.2f s = %.3f%% of one "
      "core "
      "(budget <= 0.5%%)\n",
      (cpu - cpu1) / 1e6, t2 - t1, (cpu - cpu1) / ((t2 - t1) * 1e9) * 100);
  printf(
      "sampler thread, whole run with start-up (opening sources): %.2f ms in "
      "%.2f s = %.3f%%\n",
      cpu / 1e6, wall, cpu / (wall * 1e9) * 100);
  printf(
      "schedule: %d ticks, error from t0 + k x 100 ms: mean %.3f ms, max %.3f "
      "ms "
      "(budget 5 ms)\n",
      s.n, s.n ? s.sum_err / s.n / 1e6 : 0, s.max_err / 1e6);
  return 0;
}
