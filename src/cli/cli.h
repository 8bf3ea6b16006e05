/* Subcommands of the mlprof command-line tool. Each takes the arguments after
 * "mlprof" (argv[0] is the subcommand's name) and returns the exit status:
 * 0 success, 1 failure of the work itself, 2 bad usage or unreadable input. */
#ifndef MLPROF_CLI_H
#define MLPROF_CLI_H

#include <stdint.h>

#include "../analyze/filter.h"
#include "../base/base.h"
#include "../export/escape.h"
#include "../model/job.h"

int mlprof__cmd_run(int argc, char **argv);
int mlprof__cmd_report(int argc, char **argv);
int mlprof__cmd_trace(int argc, char **argv);
int mlprof__cmd_html(int argc, char **argv);
int mlprof__cmd_export(int argc, char **argv);
/* serve runs until SIGINT or SIGTERM, then exits 0. */
int mlprof__cmd_serve(int argc, char **argv);
/* diff exits 1 for a regression, 3 when the work itself failed. */
int mlprof__cmd_diff(int argc, char **argv);
int mlprof__cmd_compare(int argc, char **argv);
/* top runs until q, SIGINT or SIGTERM, or --count updates; then exits 0. */
int mlprof__cmd_top(int argc, char **argv);

/* "mlprof CMD: " + fmt (one %s: arg) + " (see mlprof CMD --help)" on
 * stderr; returns 2, the exit status of bad usage. */
int mlprof__usage_error(const char *cmd, const char *fmt, const char *arg);

/* The usage error for what getopt_long returned (':' a missing value, else
 * an unknown option), given getopt's optind and optopt. */
int mlprof__option_error(const char *cmd, int ch, char **argv, int optind_,
                         int optopt_);

/* mlprof__job_open for subcommand cmd: prints the error, or the warning on
 * skipped files, on stderr. Returns 0, or 2 (the exit status) on error. */
int mlprof__cli_job_open(const char *cmd, mlprof__job *job,
                         const char *const *paths, size_t npaths);

/* The filter options (filter.c), shared by report, html, trace, diff,
 * compare and serve: their getopt_long codes, the entries of a long option
 * table, the help text. */
#define MLPROF__OPT_FILTER 3000 /* + the filter option's kind (filter.h) */
#define MLPROF__FILTER_OPTION(name, kind) \
  { name, required_argument, NULL, MLPROF__OPT_FILTER + (kind) }
#define MLPROF__FILTER_OPTIONS                                          \
  MLPROF__FILTER_OPTION("zone", MLPROF__SEL_ZONE),                      \
      MLPROF__FILTER_OPTION("exclude", MLPROF__SEL_EXCLUDE),            \
      MLPROF__FILTER_OPTION("category", MLPROF__FILTER_CATEGORY),       \
      MLPROF__FILTER_OPTION("process", MLPROF__SEL_PROCESS),            \
      MLPROF__FILTER_OPTION("thread", MLPROF__SEL_THREAD),              \
      MLPROF__FILTER_OPTION("track", MLPROF__SEL_TRACK),                \
      MLPROF__FILTER_OPTION("rank", MLPROF__SEL_RANK),                  \
      MLPROF__FILTER_OPTION("steps", MLPROF__FILTER_STEPS),             \
      MLPROF__FILTER_OPTION("skip-warmup", MLPROF__FILTER_SKIP_WARMUP), \
      MLPROF__FILTER_OPTION("window", MLPROF__FILTER_WINDOW)
extern const char mlprof__filter_help[];

/* Applies filter option ch (a getopt_long code) with its argument to *f.
 * Returns 0; -1 when ch is no filter option; else the exit status after a
 * message on stderr (2 bad usage, 3 out of memory). */
int mlprof__filter_option(const char *cmd, int ch, const char *arg,
                          mlprof__filter *f);

typedef int (*mlprof__write_fn)(void *ctx, mlprof__out *o, char *err,
                                size_t errlen);
/* mlprof__write_atomically for a subcommand's output file: SIGINT or SIGTERM
 * while it is written remove the unfinished temporary and end the process
 * by that signal (a shell's 130 or 143), as the signal would have. */
int mlprof__cli_write_file(const char *path, mlprof__write_fn fn, void *ctx,
                           char *err, size_t errlen);

#endif
