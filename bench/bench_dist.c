/* The distributed analysis at scale: generates the profiles of a job of R
 * ranks of S spans each (default 64 x 1 M), then measures `mlprof report`
 * (text and JSON) on the job: time and peak memory, beside baselines from
 * the same run: the report of one rank's profile alone, a bare decoding
 * pass of the reader over every file, and the files' size.
 *   distributed merge: 64 ranks x 1 M spans reported in seconds, memory
 *   bounded by one rank's needs plus the per-collective table
 *
 * Each rank trains in steps: a step mark, then zones train_step > data,
 * forward > 8 blocks, backward > 8 blocks, two all_reduce (group "world",
 * seq, bytes), optimizer: 23 spans a step. Rank R/2 + 1 is a straggler (its
 * blocks 15% slower); the others wait for it in each all-reduce. Ranks sit
 * 8 to a host, each host's clock off by its own offset, measured in
 * dist.clock.init and .final as the MPI and torch hooks record them.
 * usage: bench_dist PATH/TO/mlprof [ranks] [spans per rank] */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "format/reader.h"
#include "bench.h"
#include "mlprof.h"
#include "model/job.h"

#define SYNTH_PAYLOAD_BYTES (1u << 20) /* the writer's EVENTS chunks' size */
#include "synth.h"

#define BLOCKS 8
#define SPANS_PER_STEP (7 + 2 * BLOCKS)
#define RANKS_PER_HOST 8
#define G0 10000000000000ll /* rank 0's clock at the job's start, ns */

/* -1..1, fixed by (rank, step, zone). */
static double noise(uint64_t r, uint64_t k, uint64_t z) {
  uint64_t x = r * 0x9E3779B97F4A7C15ull ^ k * 0xC2B2AE3D27D4EB4Full ^ z;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return (double)(x % 2001) / 1000.0 - 1.0;
}

typedef struct {
  int ranks;
  long steps;
  int straggler;
} job_shape;

/* Rank r's compute in step k before its first all-reduce, ns: data, then
 * the blocks forward (1.5 ms each) and backward (3 ms each); dur[] gets
 * each zone's duration when not NULL (data, fwd blocks, bwd blocks). */
static int64_t compute_ns(const job_shape *j, int r, long k, int64_t *dur) {
  double slow = r == j->straggler ? 1.15 : 1.0, total = 0;
  for (int z = 0; z < 1 + 2 * BLOCKS; z++) {
    double base = z == 0 ? 2e6 : z <= BLOCKS ? 1.5e6 : 3e6;
    double d = base * (1 + 0.02 * noise((uint64_t)r, (uint64_t)k, (uint64_t)z));
    if (z) d *= slow;
    if (dur) dur[z] = (int64_t)d;
    total += (double)(int64_t)d;
  }
  return (int64_t)total;
}

/* The job's clock, rank 0's: each step starts at begin[k] on every rank,
 * and its two all-reduces end at ex1[k] and ex2[k] on every rank (1 ms
 * and 0.5 ms after the last rank entered). */
typedef struct {
  int64_t *begin, *ex1, *ex2;
} schedule;

static int plan(const job_shape *j, schedule *s) {
  size_t n = (size_t)j->steps;
  s->begin = malloc(n * sizeof *s->begin);
  s->ex1 = malloc(n * sizeof *s->ex1);
  s->ex2 = malloc(n * sizeof *s->ex2);
  if (!s->begin || !s->ex1 || !s->ex2) return -1;
  int64_t t = G0 + (int64_t)j->ranks * 10000 + 1000000;
  for (long k = 0; k < j->steps; k++) {
    int64_t last = 0;
    for (int r = 0; r < j->ranks; r++) {
      int64_t c = compute_ns(j, r, k, NULL);
      if (c > last) last = c;
    }
    s->begin[k] = t;
    s->ex1[k] = t + last + 1000000;
    s->ex2[k] = s->ex1[k] + 20000 + 500000;
    t = s->ex2[k] + 1200000; /* the optimizer, at most 1.1 ms */
  }
  return 0;
}

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

static synth_events ev;

/* Writes rank r's profile into dir. */
static int write_rank(const char *dir, const job_shape *j, const schedule *s,
                      int r) {
  char path[512], host[32], v[96];
  int h = r / RANKS_PER_HOST;
  snprintf(path, sizeof path, "%s/python3-%d.mlprof", dir, 1000 + r);
  snprintf(host, sizeof host, "node%02d", h);
  /* Rank 0's clock at local time t is t + off (each host's boot time). */
  int64_t off = (int64_t)h * 700000000000ll + h * 12345;
  int64_t start = G0 + (int64_t)r * 10000; /* rank 0's clock */
  int64_t mono = start - off;
  /* Wall clocks set by NTP, each host's a little off. */
  uint64_t wall =
      1700000000000000000ull + (uint64_t)(start - G0) + (uint64_t)h * 40000;
  FILE *f = synth_open(path, 1);
  if (!f) return -1;
  synth_rank_header(f, 1000 + (uint64_t)r, 1, wall, (uint64_t)mono, r, j->ranks,
                    host, "/usr/bin/python3");
  payload p = {.n = 0};
  static const char *const zones[] = {"train_step", "data",       "forward",
                                      "backward",   "all_reduce", "optimizer"};
  static const uint8_t cats[] = {MLPROF_CAT_USER,    MLPROF_CAT_DATA,
                                 MLPROF_CAT_FORWARD, MLPROF_CAT_BACKWARD,
                                 MLPROF_CAT_COMM,    MLPROF_CAT_OPTIMIZER};
  p_uv(&p, 6 + 4 + 2 * BLOCKS);
  for (int i = 0; i < 6; i++)
    p_name(&p, (uint32_t)(Z_STEP + i), MLPROF__NAME_ZONE, cats[i], zones[i]);
  p_name(&p, S_GROUP, MLPROF__NAME_STRING, 0, "group");
  p_name(&p, S_WORLD, MLPROF__NAME_STRING, 0, "world");
  p_name(&p, U_BYTES, MLPROF__NAME_UNITS, 0, "bytes");
  p_name(&p, U_SEQ, MLPROF__NAME_UNITS, 0, "seq");
  for (int b = 0; b < 2 * BLOCKS; b++) {
    char name[32];
    snprintf(name, sizeof name, b < BLOCKS ? "block%d" : "block%d.backward",
             b % BLOCKS);
    p_name(&p, (uint32_t)(Z_BLOCK + b), MLPROF__NAME_ZONE,
           b < BLOCKS ? MLPROF_CAT_FORWARD : MLPROF_CAT_BACKWARD, name);
  }
  chunk(f, MLPROF__CHUNK_NAMES, &p);
  int64_t unc = h ? 2000 : r ? 500 : 0;
  snprintf(v, sizeof v, "%lld %lld %lld", (long long)(r ? off : 0),
           (long long)unc, (long long)(mono + 500000));
  synth_meta(f, "dist.clock.init", v);

  ev.f = f;
  ev.tid = 1;
  ev.p.n = 0;
  uint64_t seq = 0;
  int64_t end = 0;
#define L(t) ((uint64_t)((t)-start)) /* rank 0's clock to the profile's */
  for (long k = 0; k < j->steps; k++) {
    int64_t dur[1 + 2 * BLOCKS];
    int64_t t = s->begin[k];
    compute_ns(j, r, k, dur);
    synth_ev_step(&ev, L(t));
    /* As the writer orders them: a zone when it ends. */
    synth_ev_span(&ev, Z_DATA, 1, L(t), L(t + dur[0]));
    t += dur[0];
    for (int pass = 0; pass < 2; pass++) {
      int64_t b0 = t;
      for (int b = 0; b < BLOCKS; b++) {
        int64_t d = dur[1 + pass * BLOCKS + b];
        synth_ev_span(&ev, (uint32_t)(Z_BLOCK + pass * BLOCKS + b), 2, L(t),
                      L(t + d));
        t += d;
      }
      synth_ev_span(&ev, pass ? Z_BWD : Z_FWD, 1, L(b0), L(t));
    }
    int64_t en2 = s->ex1[k] + 10000 + (int64_t)(10000 * noise(r, k, 99));
    int64_t ar[2][3] = {{t, s->ex1[k], 25 << 20}, {en2, s->ex2[k], 4 << 20}};
    for (int a = 0; a < 2; a++) {
      synth_ev_span(&ev, Z_AR, 1, L(ar[a][0]), L(ar[a][1]));
      synth_ev_span_meta(&ev, S_GROUP, S_WORLD);
      synth_ev_span_units(&ev, U_BYTES, (uint64_t)ar[a][2]);
      synth_ev_span_units(&ev, U_SEQ, ++seq);
    }
    int64_t opt = 1000000 + (int64_t)(100000 * noise(r, k, 98));
    synth_ev_span(&ev, Z_OPT, 1, L(s->ex2[k]), L(s->ex2[k] + opt));
    end = s->ex2[k] + opt;
    synth_ev_span(&ev, Z_STEP, 0, L(s->begin[k]), L(end));
  }
  synth_ev_flush(&ev);
  /* 100 ns of drift between the host's clocks over the run. */
  snprintf(v, sizeof v, "%lld %lld %lld", (long long)(r ? off + h * 100 : 0),
           (long long)unc, (long long)(end - off));
  synth_meta(f, "dist.clock.final", v);
  synth_end(f, L(end) + 1000);
#undef L
  return fclose(f) ? -1 : 0;
}

static int count_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                      uint64_t b, uint64_t e) {
  (*(uint64_t *)ud)++;
  return 0;
}

/* Whether file holds s. */
static int file_has(const char *file, const char *s) {
  FILE *f = fopen(file, "r");
  char line[4096];
  int found = 0;
  while (f && !found && fgets(line, sizeof line, f)) found = !!strstr(line, s);
  if (f) fclose(f);
  return found;
}

static void usage(void) {
  fprintf(stderr,
          "usage: bench_dist PATH/TO/mlprof [ranks] [spans per rank]\n");
  exit(2);
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 4) usage();
  job_shape j = {.ranks = argc > 2 ? atoi(argv[2]) : 64};
  long spans = argc > 3 ? atol(argv[3]) : 1000000;
  j.steps = spans / SPANS_PER_STEP;
  if (j.ranks < 2 || j.ranks > 4096 || j.steps < 1) usage();
  j.straggler = j.ranks / 2 + 1;
  char dir[] = "/tmp/mlprof-bench-dist-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char jobdir[512], out[512];
  snprintf(jobdir, sizeof jobdir, "%s/job", dir);
  snprintf(out, sizeof out, "%s/report.txt", dir);
  if (mkdir(jobdir, 0700)) return 1;

  /* Generated in a child that exits: a process's peak RSS passes through
   * fork and exec to the programs it starts. */
  double t0 = now_s();
  fflush(stdout);
  pid_t gen = fork();
  if (gen == 0) {
    schedule s;
    if (plan(&j, &s)) _exit(1);
    for (int r = 0; r < j.ranks; r++)
      if (write_rank(jobdir, &j, &s, r)) _exit(1);
    _exit(0);
  }
  int status;
  waitpid(gen, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status)) {
    fprintf(stderr, "bench_dist: generating the job failed\n");
    return 1;
  }
  double gen_s = now_s() - t0;

  /* Baseline: a decoding pass of the reader over every file. */
  uint64_t n = 0, bytes = 0, one_bytes = 0;
  mlprof__visitor v = {.ud = &n, .span = count_span};
  char rank0[600];
  snprintf(rank0, sizeof rank0, "%s/python3-1000.mlprof", jobdir);
  t0 = now_s();
  for (int r = 0; r < j.ranks; r++) {
    char path[600];
    struct stat st;
    snprintf(path, sizeof path, "%s/python3-%d.mlprof", jobdir, 1000 + r);
    if (mlprof__read_file(path, &v, NULL, NULL, 0) || stat(path, &st)) {
      fprintf(stderr, "bench_dist: cannot read %s\n", path);
      return 1;
    }
    bytes += (uint64_t)st.st_size;
    if (!r) one_bytes = (uint64_t)st.st_size;
  }
  double decode = now_s() - t0;
  printf(
      "job: %d ranks x %llu spans (%ld steps, %ld all-reduces a rank), "
      "%.0f MB (%.1f MB a rank), generated in %.1f s\n",
      j.ranks, (unsigned long long)(n / (uint64_t)j.ranks), j.steps,
      2 * j.steps, bytes / 1e6, one_bytes / 1e6, gen_s);
  printf(
      "baseline: decoding pass of the reader over every file %.2f s "
      "(%.1f M spans/s)\n",
      decode, (double)n / decode / 1e6);

  mlprof__job job;
  char err[256];
  const char *paths[] = {jobdir};
  t0 = now_s();
  if (mlprof__job_open(&job, paths, 1, err, sizeof err)) {
    fprintf(stderr, "bench_dist: %s\n", err);
    return 1;
  }
  double open_s = now_s() - t0;
  mlprof__job_close(&job);
  printf("%-28s %6.3f s (headers and META only)\n", "opening the job", open_s);

  long rss1, rss;
  char *oargv[] = {argv[1], "report", rank0, "--format",
                   "json",  "--top",  "0",   NULL};
  double one = run_child(oargv, NULL, &rss1);
  printf("baseline: %-18s %6.2f s, peak memory %.0f MB = %.2fx its file\n",
         "one rank's report", one, rss1 / 1024.0,
         rss1 * 1024.0 / (double)one_bytes);
  char *targv[] = {argv[1], "report", jobdir, NULL};
  double t = run_child(targv, out, &rss);
  int straggler_named = 0;
  char want[64];
  snprintf(want, sizeof want, "Straggler: rank %d,", j.straggler);
  straggler_named = file_has(out, want);
  printf(
      "%-28s %6.2f s = %.1fx the decoding pass, peak memory %.0f MB = "
      "%.1fx one rank's report, %.3fx the job's files; straggler rank %d "
      "%s\n",
      "mlprof report, job (text)", t, t / decode, rss / 1024.0,
      (double)rss / (double)rss1, rss * 1024.0 / (double)bytes, j.straggler,
      straggler_named ? "named" : "NOT NAMED");
  char *jargv[] = {argv[1], "report", jobdir, "--format",
                   "json",  "--top",  "0",    NULL};
  t = run_child(jargv, NULL, &rss);
  printf(
      "%-28s %6.2f s = %.1fx the decoding pass, peak memory %.0f MB = "
      "%.1fx one rank's report\n",
      "mlprof report, job (JSON)", t, t / decode, rss / 1024.0,
      (double)rss / (double)rss1);

  DIR *d = opendir(jobdir);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", jobdir, e->d_name);
    if (e->d_name[0] != '.') unlink(path);
  }
  if (d) closedir(d);
  rmdir(jobdir);
  unlink(out);
  rmdir(dir);
  return straggler_named ? 0 : 1;
}
