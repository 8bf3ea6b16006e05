/* Reading side at scale: records a profile of 10 million spans with the
 * library, then measures `mlprof report` (time and peak memory) and
 * `mlprof trace` (events/s) on it, each beside a baseline from the same run:
 * a bare decoding pass of the reader over the same file, and for the trace
 * written to disk, the disk's own speed at writing as many bytes.
 *   report on 10 M spans   <= 10 s, peak memory <= 3x the file size,
 *                          <= 5x the reader's decoding pass (wall; CPU too)
 *   Chrome trace export    >= 5 M events/s
 *   Perfetto trace export  <= 40 bytes per span, beside the JSON's bytes
 *                          and events/s on the same file; whether 10 M
 *                          spans fit the Perfetto UI (2 GB of wasm memory)
 *   HTML dashboard         <= 5 MB (aggregates and downsampled series)
 *   report on step marks   peak memory <= 3x the file, beside the spans'
 *                          report's ratio measured again in the same run
 * usage: bench_report PATH/TO/mlprof [spans] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "format/reader.h"
#include "bench.h"
#include "mlprof.h"

/* Runs of the decoding pass and of the report, the least taken. */
#define ROUNDS 3

static const char *const layer[] = {"data",      "forward",   "attention",
                                    "mlp",       "norm",      "backward",
                                    "allreduce", "optimizer", "zero_grad"};

static void *record(void *arg) {
  long steps = *(long *)arg;
  for (long i = 0; i < steps; i++) {
    MLPROF_ZONE("step");
    for (int k = 0; k < 9; k++) {
      mlprof_zone_begin(layer[k]);
      mlprof_zone_end();
    }
  }
  return NULL;
}

/* Records a profile of step marks alone into path, about `bytes` long (two
 * bytes a mark: its tag and a short time delta). */
static void record_steps(const char *path, long bytes) {
  mlprof_config cfg;
  mlprof_config_init(&cfg);
  cfg.output = path;
  cfg.memory_cap = 1024u << 20;
  cfg.sample_interval_ms = -1;
  mlprof_init(&cfg);
  for (long i = 0; i < bytes / 2; i++) mlprof_step();
  mlprof_shutdown();
}

static int count_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                      uint64_t b, uint64_t e) {
  (*(uint64_t *)ud)++;
  return 0;
}

/* Seconds to write and close `bytes` zero bytes in dir, 1 MiB at a time. */
static double disk_write(const char *dir, off_t bytes) {
  char path[256];
  snprintf(path, sizeof path, "%s/disk.bin", dir);
  static char block[1 << 20];
  double t0 = now_s();
  FILE *f = fopen(path, "wb");
  for (off_t done = 0; f && done < bytes; done += (off_t)sizeof block)
    fwrite(block, 1, sizeof block, f);
  if (f) fclose(f);
  double t = now_s() - t0;
  unlink(path);
  return t;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_report PATH/TO/mlprof [spans]\n");
    return 2;
  }
  long spans = argc > 2 ? atol(argv[2]) : 10000000;
  if (argc > 3 || spans <= 0) {
    fprintf(stderr, "usage: bench_report PATH/TO/mlprof [spans]\n");
    return 2;
  }
  char dir[] = "/tmp/mlprof-bench-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char path[256], trace[256];
  snprintf(path, sizeof path, "%s/big.mlprof", dir);
  snprintf(trace, sizeof trace, "%s/trace.json", dir);

  /* Record in a child that exits: a process's peak RSS passes through fork
   * and exec to the programs it starts, so the bench itself stays small to
   * measure theirs. */
  double t0 = now_s();
  fflush(stdout);
  pid_t rec_pid = fork();
  if (rec_pid == 0) {
    mlprof_config cfg;
    mlprof_config_init(&cfg);
    cfg.output = path;
    cfg.memory_cap = 1024u << 20;
    cfg.sample_interval_ms = -1;
    mlprof_init(&cfg);
    long steps = spans / 10 / 2;
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, record, &steps);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    printf("profile recorded: %llu events dropped\n",
           (unsigned long long)mlprof_dropped());
    mlprof_shutdown();
    _exit(0);
  }
  int rec_status;
  waitpid(rec_pid, &rec_status, 0);
  double rec = now_s() - t0;
  struct stat st;
  stat(path, &st);

  /* The decoding pass and the report, each the least of ROUNDS runs, in
   * wall and CPU time (a loaded machine disturbs the CPU time less). */
  uint64_t n = 0;
  double decode = 1e30, decode_cpu = 1e30;
  for (int r = 0; r < ROUNDS; r++) {
    n = 0;
    mlprof__visitor v = {.ud = &n, .span = count_span};
    mlprof__read_report rep;
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    t0 = now_s();
    mlprof__read_file(path, &v, &rep, NULL, 0);
    double w = now_s() - t0;
    getrusage(RUSAGE_SELF, &r1);
    if (w < decode) decode = w;
    if (ru_cpu_s(&r1) - ru_cpu_s(&r0) < decode_cpu)
      decode_cpu = ru_cpu_s(&r1) - ru_cpu_s(&r0);
  }
  printf("profile: %llu spans, %.1f MB, %.2f bytes/span, recorded in %.2f s\n",
         (unsigned long long)n, st.st_size / 1e6,
         (double)st.st_size / (double)n, rec);
  printf(
      "baseline: decoding pass of the reader %.2f s (%.1f M spans/s), CPU "
      "%.2f s (least of %d)\n",
      decode, (double)n / decode / 1e6, decode_cpu, ROUNDS);

  long rss;
  char *rargv[] = {argv[1], "report", path, "--format",
                   "json",  "--top",  "0",  NULL};
  double t = 1e30, cpu = 1e30;
  for (int r = 0; r < ROUNDS; r++) {
    double c, w = run_child_cpu(rargv, NULL, &rss, &c);
    if (w < t) t = w;
    if (c < cpu) cpu = c;
  }
  printf(
      "%-26s %6.2f s (budget <= 10 s), peak memory %.0f MB = %.2fx the file "
      "(budget <= 3x); %.1fx the decoding pass (budget <= 5x), CPU %.1fx\n",
      "mlprof report", t, rss / 1024.0, rss * 1024.0 / (double)st.st_size,
      t / decode, cpu / decode_cpu);
  char *sargv[] = {argv[1], "trace", path, "-o", "-", NULL};
  t = run_child(sargv, NULL, &rss);
  double json_null_t = t;
  printf(
      "%-26s %6.2f s = %.1f M events/s (budget >= 5), peak memory %.0f MB; "
      "decoding pass %.1f M spans/s\n",
      "mlprof trace, to /dev/null", t, (double)n / t / 1e6, rss / 1024.0,
      (double)n / decode / 1e6);
  char *targv[] = {argv[1], "trace", path, "-o", trace, NULL};
  t = run_child(targv, NULL, &rss);
  stat(trace, &st);
  double disk = disk_write(dir, st.st_size);
  printf(
      "%-26s %6.2f s = %.1f M events/s, %.0f MB of JSON; baseline: writing as "
      "many bytes to that disk %.2f s (%.0f MB/s)\n",
      "mlprof trace, to a file", t, (double)n / t / 1e6, st.st_size / 1e6, disk,
      st.st_size / 1e6 / disk);
  double json_t = t, json_bytes = (double)st.st_size;
  unlink(trace);
  /* The same file as Perfetto's protobuf trace. */
  char *pargv0[] = {argv[1], "trace", path, "-f", "perfetto", "-o", "-", NULL};
  t = run_child(pargv0, NULL, &rss);
  printf(
      "%-26s %6.2f s = %.1f M events/s, peak memory %.0f MB; JSON to "
      "/dev/null above %.1f M events/s\n",
      "perfetto trace, /dev/null", t, (double)n / t / 1e6, rss / 1024.0,
      (double)n / json_null_t / 1e6);
  snprintf(trace, sizeof trace, "%s/trace.pftrace", dir);
  char *pargv1[] = {argv[1],    "trace", path,  "-f",
                    "perfetto", "-o",    trace, NULL};
  t = run_child(pargv1, NULL, &rss);
  stat(trace, &st);
  double per_span = (double)st.st_size / (double)n;
  printf(
      "%-26s %6.2f s = %.1f M events/s, %.0f MB = %.1f bytes/span (budget <= "
      "40); JSON above %.1f M events/s, %.1f bytes/span (%.2fx)\n",
      "perfetto trace, to a file", t, (double)n / t / 1e6, st.st_size / 1e6,
      per_span, (double)n / json_t / 1e6, json_bytes / (double)n,
      json_bytes / (double)st.st_size);
  printf(
      "%-26s 10 M spans -> %.0f MB of protobuf (%s the Perfetto UI's 2 GB), "
      "%.0f MB of JSON\n",
      "perfetto trace, at 10 M", per_span * 1e7 / 1e6,
      per_span * 1e7 < 2e9 ? "under" : "OVER",
      json_bytes / (double)n * 1e7 / 1e6);
  unlink(trace);
  char html[256];
  snprintf(html, sizeof html, "%s/report.html", dir);
  char *hargv[] = {argv[1], "html", path, "-o", html, NULL};
  t = run_child(hargv, NULL, &rss);
  stat(html, &st);
  printf(
      "%-26s %6.2f s, %.2f MB of HTML (budget <= 5 MB), peak memory %.0f MB\n",
      "mlprof html", t, st.st_size / 1e6, rss / 1024.0);
  unlink(html);

  /* Step marks alone, in a file as large as the spans': peak memory per
   * byte of file beside the span case's above. */
  char steps[256];
  snprintf(steps, sizeof steps, "%s/steps.mlprof", dir);
  struct stat sp;
  stat(path, &sp);
  fflush(stdout);
  pid_t steps_pid = fork();
  if (steps_pid == 0) {
    record_steps(steps, (long)sp.st_size);
    _exit(0);
  }
  waitpid(steps_pid, &rec_status, 0);
  stat(steps, &st);
  char *pargv[] = {argv[1], "report", steps, "--format",
                   "json",  "--top",  "0",   NULL};
  long span_rss;
  run_child(rargv, NULL, &span_rss);
  t = run_child(pargv, NULL, &rss);
  printf(
      "%-26s %6.2f s, %.1f MB of marks, peak memory %.0f MB = %.2fx the file "
      "(budget <= 3x); baseline: the spans' report %.2fx its file\n",
      "mlprof report, step marks", t, st.st_size / 1e6, rss / 1024.0,
      rss * 1024.0 / (double)st.st_size,
      span_rss * 1024.0 / (double)sp.st_size);
  unlink(steps);
  unlink(path);
  rmdir(dir);
  return 0;
}
