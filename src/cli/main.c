/* mlprof: run a program under the profiler, report on profiles, export them. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "mlprof.h"

#ifdef MLPROF_WITH_SERVE
#define SERVE_HELP "a live dashboard of run directories over HTTP"
#else
#define SERVE_HELP "(not in this build: it needs libmicrohttpd)"
#endif

/* The snapshot is a pickle, read by the Python package (safely, without
 * running it: mlprof/cuda_memory.py), whose `mlprof` console script runs
 * this command itself; this binary only says where it is. */
static int memory_snapshot(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr,
          "mlprof memory-snapshot: a command of the Python package: run "
          "python -m mlprof memory-snapshot FILE (or its mlprof console "
          "script; docs/memory.md)\n");
  return 2;
}

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *help;
} commands[] = {
    {"run", mlprof__cmd_run,
     "run a command with profiling, one profile per process"},
    {"report", mlprof__cmd_report, "statistics per zone, process and thread"},
    {"trace", mlprof__cmd_trace, "export a Chrome/Perfetto trace (JSON)"},
    {"export", mlprof__cmd_export,
     "the run as Parquet tables (DuckDB, Spark, pandas)"},
    {"html", mlprof__cmd_html, "a self-contained HTML dashboard of profiles"},
    {"serve", mlprof__cmd_serve, SERVE_HELP},
    {"compare", mlprof__cmd_compare,
     "runs of several configurations side by side"},
    {"diff", mlprof__cmd_diff,
     "per-zone regression test of NEW against BASE (CI gate)"},
    {"top", mlprof__cmd_top, "a live terminal view of a running job"},
    {"memory-snapshot", memory_snapshot,
     "torch's CUDA memory snapshot (the Python package's command)"},
};

static void usage(FILE *out) {
  fprintf(out,
          "usage: mlprof <command> [options] [args]\n"
          "\n"
          "commands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].help);
  fprintf(out,
          "\n"
          "  mlprof <command> --help   options of a command\n"
          "  mlprof --version          version of this mlprof\n"
          "\n"
          "example:\n"
          "  mlprof run -o out -- python train.py\n"
          "  mlprof report out --top 20\n"
          "  mlprof trace out -o trace.json\n"
          "  mlprof diff base-run new-run --threshold 5%%\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ||
      strcmp(cmd, "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
    printf("mlprof %s (profile format 1)\n", mlprof_version());
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(cmd, commands[i].name) == 0)
      return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "mlprof: unknown command '%s' (see mlprof --help)\n", cmd);
  return 2;
}
