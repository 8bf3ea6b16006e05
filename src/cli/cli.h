/* Subcommands of the mlprof command-line tool. Each takes the arguments after
 * "mlprof" (argv[0] is the subcommand's name) and returns the exit status:
 * 0 success, 1 failure of the work itself, 2 bad usage or unreadable input.
 *
 * Every subcommand has one shape: mlprof__cmd_X parses its arguments into an
 * mlprof__X_cmd (its options; mlprof__X_cmd_init sets the defaults,
 * mlprof__X_cmd_free releases what parsing allocated) and calls
 * mlprof__X_cmd_run, which does the work: it calls the analysis driver and
 * one exporter, and renders nothing itself. Another subcommand that needs
 * the same work (mlprof run's summary, report --html) fills the struct and
 * calls the same function, never an argv of another subcommand. */
#ifndef MLPROF_CLI_H
#define MLPROF_CLI_H

#include <stdint.h>

#include "../analyze/diff.h"
#include "../analyze/filter.h"
#include "../analyze/findings.h"
#include "../analyze/stats.h"
#include "../base/base.h"
#include "../export/escape.h"
#include "../export/parquet.h"
#include "../model/job.h"

/* ---- the options of each subcommand, and the one call that does its work */

enum {
  MLPROF__REPORT_TEXT,
  MLPROF__REPORT_JSON,
  MLPROF__REPORT_CSV,
  MLPROF__REPORT_FOLDED
};
enum { MLPROF__TABLE_ZONES, MLPROF__TABLE_SAMPLES, MLPROF__TABLE_FINDINGS };

typedef struct {
  const char *const *paths; /* profiles or run directories, merged */
  size_t npaths;
  int format;        /* MLPROF__REPORT_*, default text */
  int table;         /* MLPROF__TABLE_*: the CSV table, default zones */
  int wall, by_zone; /* folded: every sample; the zone as a root frame */
  mlprof__sort_key sort;
  size_t top;                     /* zones shown, 0 all; default 30 (text's) */
  mlprof__findings_opts findings; /* thresholds; objectives are slo */
  mlprof__slo_spec *slo;          /* owned */
  size_t nslo, slo_cap;
  int slo_fail;          /* exit 1 when an objective was missed */
  mlprof__filter filter; /* owned */
  const char *html;      /* not NULL: the dashboard to this file instead */
  int fd;                /* where the report goes, default standard output */
} mlprof__report_cmd;
void mlprof__report_cmd_init(mlprof__report_cmd *c);
void mlprof__report_cmd_free(mlprof__report_cmd *c);
/* Analyses c->paths and writes the report; messages and warnings on
 * stderr. Returns mlprof report's exit status. */
int mlprof__report_cmd_run(const mlprof__report_cmd *c);

typedef struct {
  const char *const *paths; /* merged; with compare or diff, the runs */
  size_t npaths;
  const char *output;    /* default report.html */
  const char *title;     /* NULL: the first path (NEW's for a diff) */
  const char *labels;    /* NULL, or the runs' names, comma-separated */
  size_t top;            /* zones in the page, 0 all */
  int compare, diff;     /* the runs compared, or BASE NEW diffed */
  mlprof__filter filter; /* owned */
} mlprof__html_cmd;
void mlprof__html_cmd_init(mlprof__html_cmd *c);
void mlprof__html_cmd_free(mlprof__html_cmd *c);
/* Writes the dashboard of c->paths to c->output. Returns mlprof html's exit
 * status, after a message on stderr. */
int mlprof__html_cmd_run(const mlprof__html_cmd *c);

enum { MLPROF__DIFF_TEXT, MLPROF__DIFF_JSON, MLPROF__DIFF_JUNIT };

typedef struct {
  /* The runs: BASE's (one, or several before --) and NEW's */
  const char *const *base, *const *next;
  size_t nbase, nnext;
  mlprof__diff_options opt; /* opt.zones: the --zone patterns (owned) */
  int format;               /* MLPROF__DIFF_*, default text */
  mlprof__filter filter;    /* owned */
} mlprof__diff_cmd;
void mlprof__diff_cmd_init(mlprof__diff_cmd *c);
void mlprof__diff_cmd_free(mlprof__diff_cmd *c);
/* Compares NEW with BASE and writes the verdicts on standard output.
 * Returns mlprof diff's exit status (1: a regression). */
int mlprof__diff_cmd_run(const mlprof__diff_cmd *c);

typedef struct {
  const char *const *paths; /* the runs, at least two */
  size_t npaths;
  /* Repeated runs (A1 A2 -- B1 B2): ngroups configurations of sizes[g]
   * runs each, in paths' order (owned); NULL: each run its own. */
  size_t *sizes, ngroups;
  const char **grouped;  /* paths without the separators (owned) */
  const char *labels;    /* NULL, or the runs' names, comma-separated */
  int json;              /* JSON, else text */
  size_t top;            /* text: zones shown, 0 all; default 30 */
  mlprof__filter filter; /* owned */
} mlprof__compare_cmd;
void mlprof__compare_cmd_init(mlprof__compare_cmd *c);
void mlprof__compare_cmd_free(mlprof__compare_cmd *c);
/* Compares the runs and writes the comparison on standard output. Returns
 * mlprof compare's exit status. */
int mlprof__compare_cmd_run(const mlprof__compare_cmd *c);

typedef struct {
  const char *const *paths; /* merged */
  size_t npaths;
  int perfetto;          /* Perfetto's protobuf, not Chrome JSON */
  const char *output;    /* default trace.json or trace.pftrace; "-": stdout */
  uint64_t max_bytes;    /* 0, or keep the longest spans that fit */
  uint64_t warn_bytes;   /* warn above this size (default: the viewer's) */
  mlprof__filter filter; /* owned */
} mlprof__trace_cmd;
void mlprof__trace_cmd_init(mlprof__trace_cmd *c);
void mlprof__trace_cmd_free(mlprof__trace_cmd *c);
/* Writes the Chrome (or Perfetto) trace of c->paths to c->output. Returns
 * mlprof trace's exit status, after a message on stderr. */
int mlprof__trace_cmd_run(const mlprof__trace_cmd *c);

typedef struct {
  const char *const *paths; /* merged */
  size_t npaths;
  int pprof;                    /* --format pprof: output is a file */
  const char *output;           /* the directory (the file) to write */
  mlprof__parquet_opts parquet; /* row groups */
  mlprof__filter filter;        /* what the tables keep */
} mlprof__export_cmd;
void mlprof__export_cmd_init(mlprof__export_cmd *c);
void mlprof__export_cmd_free(mlprof__export_cmd *c);
/* Writes the Parquet tables of c->paths into c->output (with c->pprof,
 * their stack samples as a pprof profile, the file c->output). Returns
 * mlprof export's exit status, after a message on stderr. */
int mlprof__export_cmd_run(const mlprof__export_cmd *c);

typedef struct {
  const char *dir;      /* the run directory */
  uint64_t interval_ns; /* between updates, default 1 s */
  uint64_t count;       /* updates, 0: until q or a signal */
  mlprof__sort_key sort;
  size_t top; /* zones shown, 0: as many as fit */
  int plain;  /* plain lines even on a terminal */
} mlprof__top_cmd;
void mlprof__top_cmd_init(mlprof__top_cmd *c);
/* Shows the live view of c->dir until done. Returns mlprof top's exit
 * status. */
int mlprof__top_cmd_run(const mlprof__top_cmd *c);

typedef struct {
  char *const *cmd;      /* the command and its arguments */
  const char *out;       /* the run directory; NULL: a new one */
  long flush_ms;         /* 0: the library's default */
  long memory_mb;        /* 0: the library's default */
  long sample_ms;        /* the process tree's sampling; 0: none */
  long stacks_hz;        /* Python stack samples per second; 0: none */
  int stacks_native;     /* with native frames */
  const char *memory;    /* MLPROF_MEMORY's value; NULL: the default */
  char memory_mode[64];  /* what memory points to when given */
  int python_malloc;     /* PYTHONMALLOC=malloc for the command */
  int quiet;             /* no summary */
  char py_options[1024]; /* flags for Python processes, "a,b=c" */
} mlprof__run_cmd;
void mlprof__run_cmd_init(mlprof__run_cmd *c);
/* Runs c->cmd with profiling and prints the summary. Returns the command's
 * exit status (128 + N for a signal), or mlprof run's own (2, 126, 127). */
int mlprof__run_cmd_run(const mlprof__run_cmd *c);

/* ---- the subcommands, from their arguments ------------------------------ */

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

/* The last case of a subcommand's getopt_long loop (with optarg, optind
 * and optopt as getopt left them): filter option ch applied to *f, else
 * the usage error of an unknown option or a missing value. Returns -1 to go
 * on, else the exit status after a message on stderr. */
int mlprof__cli_other_option(const char *cmd, int ch, char **argv,
                             mlprof__filter *f);

typedef int (*mlprof__write_fn)(void *ctx, mlprof__out *o, char *err,
                                size_t errlen);
/* mlprof__write_atomically for a subcommand's output file: SIGINT or SIGTERM
 * while it is written remove the unfinished temporary and end the process
 * by that signal (a shell's 130 or 143), as the signal would have. */
int mlprof__cli_write_file(const char *path, mlprof__write_fn fn, void *ctx,
                           char *err, size_t errlen);
/* Returns fn(ctx), run with the same handling of SIGINT and SIGTERM for
 * files that fn writes itself under temporary names: cleanup (async-signal-
 * safe) removes them before the process dies of the signal. Where the
 * signals were ignored (a command in the background) they stay so. */
int mlprof__cli_guarded(int (*fn)(void *ctx), void *ctx, void (*cleanup)(void));

#endif
