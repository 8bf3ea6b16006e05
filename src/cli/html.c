/* mlprof html: the self-contained HTML dashboard of one or more profiles. */
#include "../export/html.h"

#include <errno.h>
#include <getopt.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "dash.h"

static const char usage[] =
    "usage: mlprof html [options] PATH... -o FILE\n"
    "\n"
    "Writes one self-contained HTML file (no network: inline styles, script\n"
    "and SVG charts) to open in any browser: run overview, step-time\n"
    "breakdown, zones (sortable table, mean and std, flame graph of the zone\n"
    "hierarchy), timeline of CPU, memory, GPU and power with step marks\n"
    "(drag to zoom), memory, GPUs (or why there are none), findings, and the\n"
    "process tree. PATH is a profile file or a run directory; several are\n"
    "merged. Series are downsampled (at most 2000 points each), so the file\n"
    "stays small whatever the profile's size; the full timeline is\n"
    "mlprof trace.\n"
    "\n"
    "options:\n"
    "  -o, --output FILE  the HTML file to write (default report.html)\n"
    "      --title TEXT   the page's title (default: the first path)\n"
    "  -n, --top N        zones in the page at most, largest total first\n"
    "                     (default 2000; 0 for all)\n"
    "  -h, --help         show this help\n"
    "\n"
    "The file is written under a temporary name and renamed when complete.\n"
    "exit status: 0 done, 1 the file could not be written, 2 bad usage or\n"
    "unreadable input.\n";

static int fail_usage(const char *fmt, const char *arg) {
  return mlprof__usage_error("html", fmt, arg);
}

int mlprof__dash_build(const mlprof__job *job, size_t top, mlprof__dash *d,
                       char *err, size_t errlen) {
  memset(d, 0, sizeof *d);
  int rc = mlprof__report_build(job, &d->r, &d->res, err, errlen);
  if (rc) return rc;
  mlprof__findings_opts fo;
  mlprof__findings_opts_init(&fo);
  /* Findings use every zone: sort only after them. */
  rc = mlprof__findings_build(job, &d->r, &d->res, &fo, &d->f, err, errlen);
  if (!rc) rc = mlprof__tree_build(job, &d->tree, err, errlen);
  if (rc) {
    mlprof__report_free(&d->r);
    mlprof__resources_free(&d->res);
    mlprof__findings_free(&d->f);
    return rc;
  }
  mlprof__report_sort(&d->r, MLPROF__SORT_TOTAL, top);
  return 0;
}

void mlprof__dash_free(mlprof__dash *d) {
  mlprof__report_free(&d->r);
  mlprof__resources_free(&d->res);
  mlprof__findings_free(&d->f);
  mlprof__tree_free(&d->tree);
}

/* Writes the page to a temporary file beside path, renamed over path when
 * complete. Returns 0 or an mlprof error with a reason in err. */
static int write_file(const mlprof__dash *d, const mlprof__html_opts *opts,
                      const char *path, char *err, size_t errlen) {
  size_t n = strlen(path) + 16;
  char *tmp = malloc(n);
  if (!tmp) {
    snprintf(err, errlen, "out of memory");
    return MLPROF_ENOMEM;
  }
  snprintf(tmp, n, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    free(tmp);
    return MLPROF_EIO;
  }
  mode_t mask = umask(0);
  umask(mask);
  int rc = 0;
  if (fchmod(fd, 0666 & ~mask) != 0) {
    snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
    rc = MLPROF_EIO;
  }
  mlprof__out o;
  if (!rc && mlprof__out_open(&o, fd)) {
    snprintf(err, errlen, "out of memory");
    rc = MLPROF_ENOMEM;
  } else if (!rc) {
    rc = mlprof__export_html_page(&d->r, &d->res, &d->f, &d->tree, opts, &o);
    int wrc = mlprof__out_flush(&o);
    if (!rc) rc = wrc;
    if (rc)
      snprintf(err, errlen, "cannot write %s: %s", path,
               rc == MLPROF_EIO ? strerror(o.sys_errno) : mlprof_strerror(rc));
    mlprof__out_close(&o);
  }
  if (close(fd) != 0 && !rc) {
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    rc = MLPROF_EIO;
  }
  if (!rc && rename(tmp, path) != 0) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    rc = MLPROF_EIO;
  }
  if (rc) unlink(tmp);
  free(tmp);
  return rc;
}

int mlprof__cmd_html(int argc, char **argv) {
  static const struct option options[] = {
      {"output", required_argument, NULL, 'o'},
      {"title", required_argument, NULL, 'T'},
      {"top", required_argument, NULL, 'n'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  const char *output = "report.html", *title = NULL;
  size_t top = MLPROF__DASH_TOP;
  opterr = 0;
  optind = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, ":o:n:h", options, NULL)) != -1) {
    switch (ch) {
      case 'o':
        if (!optarg[0]) return fail_usage("%s", "-o wants a file name");
        output = optarg;
        break;
      case 'T':
        title = optarg;
        break;
      case 'n':
        if (mlprof__parse_count(optarg, &top))
          return fail_usage("--top wants a whole number (0 for all), not '%s'",
                            optarg);
        break;
      case 'h':
        fputs(usage, stdout);
        return 0;
      default:
        return mlprof__option_error("html", ch, argv, optind, optopt);
    }
  }
  if (optind >= argc) return fail_usage("%s", "no profile given");
  struct stat st;
  if (stat(output, &st) == 0 && S_ISDIR(st.st_mode)) {
    fprintf(stderr, "mlprof html: %s is a directory; -o wants a file name\n",
            output);
    return 2;
  }
  char err[512];
  mlprof__job job;
  if (mlprof__job_open(&job, (const char *const *)argv + optind,
                       (size_t)(argc - optind), err, sizeof err)) {
    fprintf(stderr, "mlprof html: %s\n", err);
    return 2;
  }
  for (size_t i = 0; i < job.count; i++) {
    struct stat a;
    if (stat(job.profiles[i].path, &a) == 0 && stat(output, &st) == 0 &&
        a.st_dev == st.st_dev && a.st_ino == st.st_ino) {
      fprintf(stderr, "mlprof html: %s is the profile %s; choose another -o\n",
              output, job.profiles[i].path);
      mlprof__job_close(&job);
      return 2;
    }
  }
  mlprof__dash d;
  int rc = mlprof__dash_build(&job, top, &d, err, sizeof err);
  mlprof__job_close(&job);
  if (rc) {
    fprintf(stderr, "mlprof html: %s\n", err);
    return 1;
  }
  for (size_t i = 0; i < d.r.nwarnings; i++)
    fprintf(stderr, "mlprof html: warning: %s\n", d.r.warnings[i]);
  mlprof__html_opts opts = {.title = title ? title : argv[optind]};
  rc = write_file(&d, &opts, output, err, sizeof err);
  mlprof__dash_free(&d);
  if (rc) {
    fprintf(stderr, "mlprof html: %s\n", err);
    return 1;
  }
  if (stat(output, &st) == 0)
    fprintf(stderr, "mlprof html: wrote %s (%.1f kB)\n", output,
            (double)st.st_size / 1e3);
  return 0;
}
