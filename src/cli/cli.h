/* Subcommands of the mlprof command-line tool. Each takes the arguments after
 * "mlprof" (argv[0] is the subcommand's name) and returns the exit status:
 * 0 success, 1 failure of the work itself, 2 bad usage or unreadable input. */
#ifndef MLPROF_CLI_H
#define MLPROF_CLI_H

int mlprof__cmd_run(int argc, char **argv);
int mlprof__cmd_report(int argc, char **argv);
int mlprof__cmd_trace(int argc, char **argv);
int mlprof__cmd_html(int argc, char **argv);
/* serve runs until SIGINT or SIGTERM, then exits 0. */
int mlprof__cmd_serve(int argc, char **argv);
/* diff exits 1 for a regression, 3 when the work itself failed. */
int mlprof__cmd_diff(int argc, char **argv);
int mlprof__cmd_compare(int argc, char **argv);

#endif
