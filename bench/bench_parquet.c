/* mlprof export --format parquet at scale: generates a job of R ranks of S
 * spans each (default 4 x 500 k, so that it runs in under a minute on two
 * cores), then measures, beside baselines from the same run:
 *   rows/s of the export, beside a bare decoding pass of the reader over
 *   the same files and beside mlprof report's time on them;
 *   bytes per span of the Parquet spans against the raw profile;
 *   peak memory of the export against mlprof report's on the same job
 *   (budget: at most 2x);
 *   DuckDB's time for two aggregates over the exported spans (per zone
 *   count, total and p99; the slowest rank per step) when a Python with
 *   duckdb is given.
 * What 64 ranks x 1 M spans would take is printed as an extrapolation
 * (linear in the spans) and said to be one, unless the job is that large
 * (bench_parquet MLPROF PYTHON 64 1000000 measures it: about 1.3 GB of
 * disk in /tmp and minutes).
 *
 * Each rank trains in steps: a step mark, then train_step > data,
 * forward > 8 blocks, backward > 8 blocks, all_reduce (group "world", seq,
 * bytes), optimizer: 22 spans a step, durations with 30% noise.
 * usage: bench_parquet PATH/TO/mlprof [PYTHON] [ranks] [spans per rank] */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "format/reader.h"
#include "mlprof.h"

#define SYNTH_PAYLOAD_BYTES (1u << 20) /* the writer's EVENTS chunks' size */
#include "synth.h"

#define BLOCKS 8
#define SPANS_PER_STEP (6 + 2 * BLOCKS)

enum {
  Z_STEP = 1,
  Z_DATA,
  Z_FWD,
  Z_BWD,
  Z_AR,
  Z_OPT,
  S_GROUP,
  S_WORLD,
  U_BYTES,
  U_SEQ,
  Z_BLOCK /* BLOCKS forward, then BLOCKS backward */
};

/* 0.7..1.3, fixed by (rank, step, zone). */
static double noise(uint64_t r, uint64_t k, uint64_t z) {
  uint64_t x = r * 0x9E3779B97F4A7C15ull ^ k * 0xC2B2AE3D27D4EB4Full ^ z;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return 0.7 + (double)(x % 6001) / 10000.0;
}

static synth_events ev;

static int write_rank(const char *dir, int r, int ranks, long steps) {
  char path[600], name[32];
  snprintf(path, sizeof path, "%s/python3-%d.mlprof", dir, 1000 + r);
  FILE *f = synth_open(path, 1);
  if (!f) return -1;
  synth_rank_header(f, 1000 + (uint64_t)r, 1, 1700000000000000000ull,
                    1000000000000ull, r, ranks, "node00", "/usr/bin/python3");
  payload p = {.n = 0};
  p_uv(&p, Z_BLOCK + 2 * BLOCKS - 1);
  p_name(&p, Z_STEP, MLPROF__NAME_ZONE, 0, "train_step");
  p_name(&p, Z_DATA, MLPROF__NAME_ZONE, MLPROF_CAT_DATA, "data");
  p_name(&p, Z_FWD, MLPROF__NAME_ZONE, MLPROF_CAT_FORWARD, "forward");
  p_name(&p, Z_BWD, MLPROF__NAME_ZONE, MLPROF_CAT_BACKWARD, "backward");
  p_name(&p, Z_AR, MLPROF__NAME_ZONE, MLPROF_CAT_COMM, "all_reduce");
  p_name(&p, Z_OPT, MLPROF__NAME_ZONE, MLPROF_CAT_OPTIMIZER, "optimizer");
  p_name(&p, S_GROUP, MLPROF__NAME_STRING, 0, "group");
  p_name(&p, S_WORLD, MLPROF__NAME_STRING, 0, "world");
  p_name(&p, U_BYTES, MLPROF__NAME_UNITS, 0, "bytes");
  p_name(&p, U_SEQ, MLPROF__NAME_UNITS, 0, "seq");
  for (int b = 0; b < 2 * BLOCKS; b++) {
    snprintf(name, sizeof name, "%s.block%d", b < BLOCKS ? "fwd" : "bwd",
             b % BLOCKS);
    p_name(&p, (uint32_t)(Z_BLOCK + b), MLPROF__NAME_ZONE,
           b < BLOCKS ? MLPROF_CAT_FORWARD : MLPROF_CAT_BACKWARD, name);
  }
  chunk(f, MLPROF__CHUNK_NAMES, &p);
  ev = (synth_events){.f = f, .tid = 1};
  uint64_t t = 1000000;
#define D(base, z) ((uint64_t)((base)*noise((uint64_t)r, (uint64_t)k, (z))))
  for (long k = 0; k < steps; k++) {
    uint64_t begin = t;
    synth_ev_step(&ev, t);
    uint64_t d = D(200000, 0);
    synth_ev_span(&ev, Z_DATA, 1, t, t + d);
    t += d;
    for (int pass = 0; pass < 2; pass++) {
      uint64_t b0 = t;
      for (int b = 0; b < BLOCKS; b++) {
        uint64_t bd = D(pass ? 300000 : 150000, (uint64_t)(1 + pass * 8 + b));
        synth_ev_span(&ev, (uint32_t)(Z_BLOCK + pass * BLOCKS + b), 2, t,
                      t + bd);
        t += bd;
      }
      synth_ev_span(&ev, pass ? Z_BWD : Z_FWD, 1, b0, t);
    }
    d = D(400000, 20);
    synth_ev_span(&ev, Z_AR, 1, t, t + d);
    synth_ev_span_meta(&ev, S_GROUP, S_WORLD);
    synth_ev_span_units(&ev, U_BYTES, 1 << 24);
    synth_ev_span_units(&ev, U_SEQ, (uint64_t)k);
    t += d;
    d = D(100000, 21);
    synth_ev_span(&ev, Z_OPT, 1, t, t + d);
    t += d;
    synth_ev_span(&ev, Z_STEP, 0, begin, t);
    t += 5000;
  }
#undef D
  synth_ev_flush(&ev);
  synth_end(f, t + 1000);
  return fclose(f) ? -1 : 0;
}

static int count_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                      uint64_t b, uint64_t e) {
  (*(uint64_t *)ud)++;
  return 0;
}

/* Bytes of the regular files in dir (not below it). */
static uint64_t dir_bytes(const char *dir) {
  uint64_t n = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char path[1200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) n += (uint64_t)st.st_size;
  }
  if (d) closedir(d);
  return n;
}

static void rm_rf(const char *dir) {
  char cmd[1200];
  if (getenv("MLPROF_BENCH_KEEP")) return; /* to look at what it made */
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) fprintf(stderr, "bench_parquet: could not remove %s\n", dir);
}

/* The CPU seconds (user and system) of the children waited for so far: the
 * machine may be shared, so wall time alone can mislead. */
static double children_cpu(void) {
  struct rusage ru;
  getrusage(RUSAGE_CHILDREN, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
         (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

/* DuckDB's aggregates over the spans, in seconds each, printed by PYTHON. */
static const char duck[] =
    "import duckdb,sys,time\n"
    "c=duckdb.connect(); c.execute('set threads=2')\n"
    /* A query past 2 s draws a progress bar on stdout, into our lines. */
    "c.execute('set enable_progress_bar=false')\n"
    "src=\"read_parquet('\"+sys.argv[1]+\"/spans/*.parquet')\"\n"
    "q={'per zone count, total, p99':'select zone,count(*),sum(dur_ns),"
    "quantile_disc(dur_ns,0.99) from '+src+' group by zone',\n"
    "'slowest rank per step':'select step,arg_max(rank,d) from (select "
    "rank,step,sum(dur_ns) d from '+src+' where depth=0 group by rank,step) "
    "group by step'}\n"
    "for k,s in q.items():\n"
    "  t=time.perf_counter(); n=len(c.execute(s).fetchall())\n"
    "  print('%.3f %d %s'%(time.perf_counter()-t,n,k))\n";

int main(int argc, char **argv) {
  if (argc < 2 || argc > 5) {
    fprintf(stderr,
            "usage: bench_parquet PATH/TO/mlprof [PYTHON] [ranks] [spans per "
            "rank]\n");
    return 2;
  }
  const char *python = argc > 2 && argv[2][0] ? argv[2] : NULL;
  int ranks = argc > 3 ? atoi(argv[3]) : 4;
  long per_rank = argc > 4 ? atol(argv[4]) : 500000;
  long steps = per_rank / SPANS_PER_STEP;
  if (ranks < 1 || ranks > 4096 || steps < 1) return 2;
  char dir[] = "/tmp/mlprof-bench-parquet-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char job[600], out[600], spans_dir[700];
  snprintf(job, sizeof job, "%s/job", dir);
  snprintf(out, sizeof out, "%s/tables", dir);
  snprintf(spans_dir, sizeof spans_dir, "%s/spans", out);
  if (mkdir(job, 0700)) return 1;
  double t0 = now_s();
  for (int r = 0; r < ranks; r++)
    if (write_rank(job, r, ranks, steps)) {
      fprintf(stderr, "bench_parquet: cannot write the job\n");
      return 1;
    }
  double gen = now_s() - t0;

  /* Baseline: the reader's decoding pass over every file. */
  uint64_t n = 0;
  mlprof__visitor v = {.ud = &n, .span = count_span};
  t0 = now_s();
  for (int r = 0; r < ranks; r++) {
    char path[700];
    snprintf(path, sizeof path, "%s/python3-%d.mlprof", job, 1000 + r);
    if (mlprof__read_file(path, &v, NULL, NULL, 0)) return 1;
  }
  double decode = now_s() - t0;
  uint64_t raw = dir_bytes(job);
  printf(
      "job: %d ranks x %llu spans (%ld steps a rank), %.1f MB of "
      "profiles, generated in %.1f s\n",
      ranks, (unsigned long long)(n / (uint64_t)ranks), steps, raw / 1e6, gen);
  printf("baseline: decoding pass of the reader    %6.2f s (%.2f M spans/s)\n",
         decode, n / decode / 1e6);

  long rss_report, rss_export;
  char *rargv[] = {argv[1], "report", job, "--format",
                   "json",  "--top",  "0", NULL};
  double c0 = children_cpu();
  double rep = run_child(rargv, NULL, &rss_report);
  double rep_cpu = children_cpu() - c0;
  printf(
      "baseline: mlprof report (JSON)           %6.2f s (CPU %.2f s), "
      "peak memory %.0f MB\n",
      rep, rep_cpu, rss_report / 1024.0);
  char *eargv[] = {argv[1], "export", job, "-o", out, NULL};
  c0 = children_cpu();
  double ex = run_child(eargv, NULL, &rss_export);
  double ex_cpu = children_cpu() - c0;
  uint64_t pq_spans = dir_bytes(spans_dir), pq_all = dir_bytes(out) + pq_spans;
  printf(
      "mlprof export --format parquet           %6.2f s = %.2f M spans/s "
      "(%.1fx the decoding pass, %.1fx the report); CPU %.2f s = %.2f M "
      "spans/s, %.1fx the report's\n",
      ex, n / ex / 1e6, ex / decode, ex / rep, ex_cpu, n / ex_cpu / 1e6,
      ex_cpu / rep_cpu);
  printf("  peak memory %.0f MB = %.2fx the report's (budget <= 2x): %s\n",
         rss_export / 1024.0, (double)rss_export / (double)rss_report,
         rss_export <= 2 * rss_report ? "ok" : "OVER");
  printf(
      "  bytes per span: parquet spans %.2f (all tables %.2f), raw "
      "profile %.2f\n",
      (double)pq_spans / (double)n, (double)pq_all / (double)n,
      (double)raw / (double)n);
  double duck_s[2] = {0, 0};
  if (python) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' -c \"$MLPROF_DUCK\" '%s'", python, out);
    setenv("MLPROF_DUCK", duck, 1);
    FILE *p = popen(cmd, "r");
    char line[256];
    int i = 0;
    while (p && fgets(line, sizeof line, p)) {
      double s;
      int rows;
      char what[128];
      if (sscanf(line, "%lf %d %127[^\n]", &s, &rows, what) == 3) {
        printf("DuckDB over %llu spans: %-28s %6.3f s (%d rows)\n",
               (unsigned long long)n, what, s, rows);
        if (i < 2) duck_s[i++] = s;
      }
    }
    if (!p || pclose(p) || i < 2) {
      fprintf(stderr, "bench_parquet: the DuckDB queries failed\n");
      rm_rf(dir);
      return 1;
    }
  }
  double scale = 64e6 / (double)n;
  if (scale < 1.01) { /* bench_parquet MLPROF PYTHON 64 1000000: measured */
    rm_rf(dir);
    return 0;
  }
  printf(
      "extrapolated (linear in spans, not measured) to 64 ranks x 1 M "
      "spans: export %.0f s",
      ex * scale);
  if (python)
    printf(", DuckDB %.1f s and %.1f s", duck_s[0] * scale, duck_s[1] * scale);
  printf("\n");
  rm_rf(dir);
  return 0; /* figures are printed, not asserted: machines are noisy */
}
