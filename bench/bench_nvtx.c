/* Cost of an NVTX push/pop pair recorded by libmlprof (src/intercept/nvtx.c)
 * beside, in the same run: the same pair with no NVTX tool attached, and
 * mlprof's own zones (DESIGN.md: NVTX push/pop at the cost of an mlprof
 * zone). Usage: bench_nvtx LIBMLPROF. It runs itself as children, in turn
 * with and without NVTX_INJECTION64_PATH=LIBMLPROF (the tool is chosen at a
 * process's first NVTX call), each recording into a session of its own
 * and taking the best of 5 turns of each measure; every figure is the best
 * of 5 children, with the median beside it. */
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mlprof.h"

#define N 100000L
#define INNER 5
#define ROUNDS 5
#define MEASURES 4

static const char *const names[MEASURES] = {
    "nvtxRangePushA + nvtxRangePop",
    "nvtxDomainRangePushEx (registered) + Pop",
    "mlprof_zone_begin(name) + end",
    "MLPROF_ZONE (static site)",
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static volatile long sink;

/* One child: ns per pair of each measure, on one line. */
static int child(void) {
  nvtxDomainHandle_t dom = nvtxDomainCreateA("bench");
  nvtxEventAttributes_t a = {0};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = nvtxDomainRegisterStringA(dom, "bench_registered");
  nvtxRangePushA("warm");
  nvtxRangePop();
  double ns[MEASURES];
  for (int m = 0; m < MEASURES; m++) ns[m] = 1e30;
  /* The measures in turn, INNER times each: the best of each is kept, so
   * that a slice of time lost to another program hits no measure alone. */
  for (int k = 0; k < INNER * MEASURES; k++) {
    int m = k % MEASURES;
    mlprof_flush();
    double t0 = now_s();
    for (long i = 0; i < N; i++) {
      switch (m) {
        case 0:
          nvtxRangePushA("bench_nvtx");
          sink++;
          nvtxRangePop();
          break;
        case 1:
          nvtxDomainRangePushEx(dom, &a);
          sink++;
          nvtxDomainRangePop(dom);
          break;
        case 2:
          mlprof_zone_begin("bench_dynamic");
          sink++;
          mlprof_zone_end();
          break;
        default: {
          MLPROF_ZONE("bench_static");
          sink++;
        }
      }
    }
    double v = (now_s() - t0) / (double)N * 1e9;
    if (v < ns[m]) ns[m] = v;
  }
  for (int m = 0; m < MEASURES; m++) printf("%s%.2f", m ? " " : "", ns[m]);
  printf(" %llu\n", (unsigned long long)mlprof_dropped());
  return 0;
}

static int run_child(const char *self, const char *lib, int tool, double *out,
                     unsigned long long *dropped) {
  char dir[] = "/tmp/bench_nvtx.XXXXXX", outdir[64];
  if (!mkdtemp(dir)) return -1;
  snprintf(outdir, sizeof outdir, "%s/", dir);
  int pfd[2];
  if (pipe(pfd) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pfd[1], 1);
    close(pfd[0]);
    setenv("MLPROF_OUTPUT", outdir, 1);
    setenv("MLPROF_SAMPLE_MS", "-1", 1);
    if (tool)
      setenv("NVTX_INJECTION64_PATH", lib, 1);
    else
      unsetenv("NVTX_INJECTION64_PATH");
    execl(self, self, "--child", (char *)NULL);
    _exit(127);
  }
  close(pfd[1]);
  char line[512] = "";
  FILE *f = fdopen(pfd[0], "r");
  if (!f || !fgets(line, sizeof line, f)) line[0] = 0;
  if (f) fclose(f);
  int status;
  waitpid(pid, &status, 0);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_nvtx: cannot remove %s\n", dir);
  return sscanf(line, "%lf %lf %lf %lf %llu", &out[0], &out[1], &out[2],
                &out[3], dropped) == 5 &&
                 WIFEXITED(status) && WEXITSTATUS(status) == 0
             ? 0
             : -1;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--child") == 0) return child();
  if (argc != 2) {
    fprintf(stderr, "usage: bench_nvtx LIBMLPROF\n");
    return 2;
  }
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 1;
  self[n] = 0;
  double v[2][MEASURES][ROUNDS];
  unsigned long long dropped = 0;
  for (int r = 0; r < ROUNDS; r++)
    for (int tool = 0; tool < 2; tool++) {
      double row[MEASURES];
      unsigned long long d = 0;
      if (run_child(self, argv[1], tool, row, &d) != 0) {
        fprintf(stderr, "bench_nvtx: a child failed\n");
        return 1;
      }
      dropped += d;
      for (int m = 0; m < MEASURES; m++) v[tool][m][r] = row[m];
    }
  printf("%-44s %14s %14s\n", "ns per pair (best / median of 5)",
         "no NVTX tool", "libmlprof tool");
  for (int m = 0; m < MEASURES; m++) {
    for (int t = 0; t < 2; t++)
      qsort(v[t][m], ROUNDS, sizeof(double), cmp_double);
    printf("%-44s %7.1f / %5.1f %7.1f / %5.1f\n", names[m], v[0][m][0],
           v[0][m][ROUNDS / 2], v[1][m][0], v[1][m][ROUNDS / 2]);
  }
  printf(
      "NVTX push/pop with libmlprof: %.2fx an mlprof_zone_begin(name) "
      "pair, %.1f ns over NVTX with no tool; events dropped: %llu\n",
      v[1][0][0] / v[1][2][0], v[1][0][0] - v[0][0][0], dropped);
  return 0;
}
