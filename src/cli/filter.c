/* The filter options of report, html, trace, diff and compare
 * (src/analyze/filter.h, which parses them): one help text for all. */
#include <mlprof.h>
#include <stdio.h>
#include <string.h>

#include <getopt.h>

#include "cli.h"

const char mlprof__filter_help[] =
    "filters (docs/guide.md, \"Filters\"; each repeatable option adds an\n"
    "alternative, different options must all hold):\n"
    "      --zone GLOB      show only zones whose name matches (fnmatch)\n"
    "      --exclude GLOB   do not show zones whose name matches\n"
    "      --category CAT   show only zones of this category: data, forward,\n"
    "                       backward, optimizer, communication, io, user, "
    "none\n"
    "      --process P      only the processes of pid P or named P (a glob)\n"
    "      --thread T       only the threads of tid T or named T (a glob)\n"
    "      --track P/T      only thread T of process P\n"
    "      --rank N         only the processes of rank N\n"
    "      --steps A:B      only steps A to B-1 of each process (from 0; A or\n"
    "                       B may be left out: 5: is step 5 to the end)\n"
    "      --skip-warmup N  the same as --steps N:\n"
    "      --window T0:T1   only what begins between T0 and T1 after the\n"
    "                       job's start (durations with a unit: 10s:20s, :5s)\n"
    "Zone filters leave the numbers as they are (a parent's self time keeps\n"
    "its hidden children); the others act as if nothing else was recorded.\n";

int mlprof__filter_option(const char *cmd, int ch, const char *arg,
                          mlprof__filter *f) {
  if (ch < MLPROF__OPT_FILTER ||
      ch >= MLPROF__OPT_FILTER + MLPROF__FILTER_NKINDS)
    return -1;
  char err[512];
  int rc = mlprof__filter_add(f, ch - MLPROF__OPT_FILTER, arg, err, sizeof err);
  if (rc == MLPROF_ENOMEM) {
    fprintf(stderr, "mlprof %s: out of memory\n", cmd);
    return 3;
  }
  return rc ? mlprof__usage_error(cmd, "%s", err) : 0;
}

int mlprof__cli_other_option(const char *cmd, int ch, char **argv,
                             mlprof__filter *f) {
  int rc = mlprof__filter_option(cmd, ch, optarg, f);
  if (rc < 0) return mlprof__option_error(cmd, ch, argv, optind, optopt);
  return rc ? rc : -1;
}
