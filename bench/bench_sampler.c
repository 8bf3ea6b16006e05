/* The sampler at 10 Hz as users pay for it: CPU time of the whole process
 * tree (getrusage of the children: mlprof, its threads, the command), for
 *   mlprof run -q -o DIR -- sleep N                  sampling at 10 Hz
 *   mlprof run -q --sample-ms 0 -o DIR -- sleep N    no sampling (baseline)
 *   sleep N                                          no mlprof
 * run in turn, in a rotating order, ROUNDS times; medians of each, and of
 * each round's differences:
 *   sampling        sampled - unsampled <= 0.5% of one core
 *   schedule        samples within 5 ms of their tick (t0 + k x interval)
 * The whole run's cost over plain sleep (sampling and the recording
 * library's own writer in the command) is printed beside it.
 * usage: bench_sampler MLPROF [SECONDS] [ROUNDS] */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "format/reader.h"
#include "mlprof.h"

#define MAX_ROUNDS 50

enum { SAMPLED, UNSAMPLED, PLAIN, KINDS };
static const char *const kind_name[KINDS] = {"mlprof run (sampling at 10 Hz)",
                                             "mlprof run --sample-ms 0",
                                             "sleep alone"};

static double ru_s(const struct rusage *r) {
  return (double)r->ru_utime.tv_sec + (double)r->ru_utime.tv_usec * 1e-6 +
         (double)r->ru_stime.tv_sec + (double)r->ru_stime.tv_usec * 1e-6;
}

/* Runs argv (output to /dev/null); returns the CPU seconds of its whole tree
 * and sets its wall seconds. A command that fails ends the benchmark. */
static double tree_cpu(char *const argv[], double *wall) {
  struct rusage r0, r1;
  getrusage(RUSAGE_CHILDREN, &r0);
  double t0 = now_s();
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stdout) ||
        !freopen("/dev/null", "w", stderr))
      _exit(127);
    execvp(argv[0], argv);
    _exit(127);
  }
  int status;
  waitpid(pid, &status, 0);
  *wall = now_s() - t0;
  getrusage(RUSAGE_CHILDREN, &r1);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "bench_sampler: %s %s failed\n", argv[0], argv[1]);
    exit(1);
  }
  return ru_s(&r1) - ru_s(&r0);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const double *v, int n) {
  double s[MAX_ROUNDS];
  memcpy(s, v, (size_t)n * sizeof *v);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

typedef struct {
  double first;
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

/* Reads the sample rows of every profile in dir into s, then removes the
 * profiles and dir. */
static void read_and_remove(const char *dir, schedule *s) {
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (s) {
      mlprof__visitor v = {.ud = s, .sample = on_row};
      mlprof__read_report rep;
      mlprof__read_file(path, &v, &rep, NULL, 0);
    }
    unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

int main(int argc, char **argv) {
  double seconds = argc > 2 ? atof(argv[2]) : 10;
  int rounds = argc > 3 ? atoi(argv[3]) : 3;
  if (argc < 2 || argc > 4 || !(seconds > 0) || rounds < 1 ||
      rounds > MAX_ROUNDS) {
    fprintf(stderr,
            "usage: bench_sampler MLPROF [SECONDS] [ROUNDS] (default 10 s, "
            "3 rounds, at most %d)\n",
            MAX_ROUNDS);
    return 2;
  }
  char secs[32], base[] = "/tmp/mlprof-bench-sampler-XXXXXX", dir[600];
  snprintf(secs, sizeof secs, "%g", seconds);
  if (!mkdtemp(base)) return 1;
  snprintf(dir, sizeof dir, "%s/run", base);
  char *cmd[KINDS][12] = {
      {argv[1], "run", "-q", "-o", dir, "--", "sleep", secs, NULL},
      {argv[1], "run", "-q", "--sample-ms", "0", "-o", dir, "--", "sleep", secs,
       NULL},
      {"sleep", secs, NULL}};
  double pct[KINDS][MAX_ROUNDS], cost[MAX_ROUNDS], whole[MAX_ROUNDS];
  schedule s = {.interval_ns = 100e6};
  int worst_ticks = -1;
  for (int r = 0; r < rounds; r++) {
    for (int j = 0; j < KINDS; j++) {
      int k = (r + j) % KINDS; /* each kind first in turn */
      double wall, cpu = tree_cpu(cmd[k], &wall);
      pct[k][r] = cpu / wall * 100;
      if (k != PLAIN) {
        schedule one = {.interval_ns = 100e6};
        read_and_remove(dir, k == SAMPLED ? &one : NULL);
        if (k == SAMPLED) {
          if (one.max_err > s.max_err) s.max_err = one.max_err;
          s.sum_err += one.sum_err;
          s.n += one.n;
          if (worst_ticks < 0 || one.n < worst_ticks) worst_ticks = one.n;
        }
      }
    }
    cost[r] = pct[SAMPLED][r] - pct[UNSAMPLED][r];
    whole[r] = pct[SAMPLED][r] - pct[PLAIN][r];
  }
  rmdir(base);

  printf(
      "whole tree's CPU time over wall time, `... sleep %s`, median of %d:\n",
      secs, rounds);
  for (int k = 0; k < KINDS; k++) {
    printf("  %-32s %.3f%% of one core (", kind_name[k],
           median(pct[k], rounds));
    for (int r = 0; r < rounds; r++) printf("%s%.3f", r ? " " : "", pct[k][r]);
    printf(")\n");
  }
  printf(
      "sampling at 10 Hz: %.3f%% of one core over the same run unsampled, "
      "median of each round's difference (budget <= 0.5%%)\n",
      median(cost, rounds));
  printf(
      "mlprof run with sampling over sleep alone: %.3f%% (the recording "
      "library's own writer in the command included)\n",
      median(whole, rounds));
  printf(
      "schedule: %d ticks (fewest in a run %d of %.0f), error from t0 + k x "
      "100 ms: mean %.3f ms, max %.3f ms (budget 5 ms)\n",
      s.n, worst_ticks, seconds * 10, s.n ? s.sum_err / s.n / 1e6 : 0,
      s.max_err / 1e6);
  return 0;
}
