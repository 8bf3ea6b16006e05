/* Subcommands of the mlprof command-line tool. Each takes the arguments after
 * "mlprof" (argv[0] is the subcommand's name) and returns the exit status:
 * 0 success, 1 failure of the work itself, 2 bad usage or unreadable input. */
#ifndef MLPROF_CLI_H
#define MLPROF_CLI_H

#include <stdint.h>

#include "../export/escape.h"
#include "../model/job.h"

int mlprof__cmd_run(int argc, char **argv);
int mlprof__cmd_report(int argc, char **argv);
int mlprof__cmd_trace(int argc, char **argv);
int mlprof__cmd_html(int argc, char **argv);
/* serve runs until SIGINT or SIGTERM, then exits 0. */
int mlprof__cmd_serve(int argc, char **argv);
/* diff exits 1 for a regression, 3 when the work itself failed. */
int mlprof__cmd_diff(int argc, char **argv);
int mlprof__cmd_compare(int argc, char **argv);

/* "mlprof CMD: " + fmt (one %s: arg) + " (see mlprof CMD --help)" on
 * stderr; returns 2, the exit status of bad usage. */
int mlprof__usage_error(const char *cmd, const char *fmt, const char *arg);

/* The usage error for what getopt_long returned (':' a missing value, else
 * an unknown option), given getopt's optind and optopt. */
int mlprof__option_error(const char *cmd, int ch, char **argv, int optind_,
                         int optopt_);

/* A count: digits only, no sign, no overflow. Returns 0, or -1. */
int mlprof__parse_count(const char *s, uint64_t *out);

/* mlprof__job_open for subcommand cmd: prints the error, or the warning on
 * skipped files, on stderr. Returns 0, or 2 (the exit status) on error. */
int mlprof__cli_job_open(const char *cmd, mlprof__job *job,
                         const char *const *paths, size_t npaths);

typedef int (*mlprof__write_fn)(void *ctx, mlprof__out *o, char *err,
                                size_t errlen);
/* mlprof__write_atomically for a subcommand's output file: SIGINT or SIGTERM
 * while it is written remove the unfinished temporary and end the process
 * by that signal (a shell's 130 or 143), as the signal would have. */
int mlprof__cli_write_file(const char *path, mlprof__write_fn fn, void *ctx,
                           char *err, size_t errlen);

#endif
