/* mlprof serve's command line; the server is src/serve/. In a build without
 * libmicrohttpd (MLPROF_WITH_SERVE undefined) it says what is missing. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../serve/serve.h"
#include "cli.h"

static const char usage[] =
    "usage: mlprof serve [DIR] [--port N] [--bind ADDR] [--allow-host NAME]\n"
    "                    [--no-token] [--window-mb N] [filters]\n"
    "\n"
    "Serves the dashboard of every run directory under DIR (default: the\n"
    "current directory; a run directory holds *.mlprof files), live: a page\n"
    "polls its data every second, and profiles still being written by\n"
    "mlprof run show new zones and samples within two seconds.\n"
    "\n"
    "  /                 index of the runs\n"
    "  /run/RUN/         dashboard of RUN (its path under DIR)\n"
    "  /data/RUN         the dashboard's data: the JSON report and series\n"
    "  /timeline/RUN?t0=NS&t1=NS&res=NS\n"
    "                    the span timeline of RUN from t0 to t1 (job ns),\n"
    "                    spans shorter than res merged\n"
    "  /api/runs         the runs as JSON\n"
    "  /metrics          every run in the Prometheus text format\n"
    "\n"
    "options:\n"
    "  -p, --port N      TCP port (default 8050; 0 picks a free one)\n"
    "  -b, --bind ADDR   address to listen on (default 127.0.0.1, loopback\n"
    "                    only; 0.0.0.0 or :: exposes the profiles to the\n"
    "                    network: then a request needs the token in the\n"
    "                    printed URL, kept in a cookie afterwards)\n"
    "  --allow-host NAME also answer requests for NAME (Host header), besides\n"
    "                    localhost and IP literals (repeatable)\n"
    "  --no-token        on a non-loopback address, ask no token: anyone who\n"
    "                    reaches the port sees the profiles\n"
    "  --window-mb N     MiB of profile one timeline request may read again\n"
    "                    for spans finer than those kept in memory (default\n"
    "                    8; 0: never, the kept levels answer)\n"
    "  -h, --help        show this help\n"
    "\n"
    "The filters below apply to every run served, as mlprof html applies\n"
    "them: its page, data, timeline and /metrics.\n"
    "\n"
    "Stops cleanly on SIGINT (Ctrl-C) or SIGTERM.\n"
    "exit status: 0 stopped by a signal, 1 the server could not start, 2 bad\n"
    "usage.\n";

static int fail_usage(const char *fmt, const char *arg) {
  return mlprof__usage_error("serve", fmt, arg);
}

/* Reads the arguments into *o (its filter into *filter, which the caller
 * frees) and the port into *port. Returns -1 to go on, else the exit status
 * (0 after --help). */
static int parse(int argc, char **argv, mlprof__serve_opts *o,
                 mlprof__filter *filter, long *port) {
  static const struct option options[] = {
      {"port", required_argument, NULL, 'p'},
      {"bind", required_argument, NULL, 'b'},
      {"allow-host", required_argument, NULL, 'a'},
      {"no-token", no_argument, NULL, 'T'},
      {"window-mb", required_argument, NULL, 'W'},
      {"help", no_argument, NULL, 'h'},
      MLPROF__FILTER_OPTIONS,
      {NULL, 0, NULL, 0}};
  opterr = 0;
  optind = 0; /* 0, not 1: GNU getopt then also resets its ordering mode */
  int ch;
  while ((ch = getopt_long(argc, argv, ":p:b:h", options, NULL)) != -1) {
    switch (ch) {
      case 'p': {
        char *end;
        errno = 0;
        *port = strtol(optarg, &end, 10);
        if (errno || *end || !optarg[0] || *port < 0 || *port > 65535)
          return fail_usage("--port wants a number from 0 to 65535, not '%s'",
                            optarg);
        break;
      }
      case 'b':
        o->bind = optarg;
        break;
      case 'a':
        if (!optarg[0] || strlen(optarg) > 253 ||
            strspn(optarg,
                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                   "0123456789.-_:") != strlen(optarg))
          return fail_usage(
              "--allow-host wants a host name (letters, digits, "
              "'.', '-', '_', ':'), not '%s'",
              optarg);
        if (o->nallow == MLPROF__SERVE_MAX_ALLOW)
          return fail_usage("%s", "at most 32 --allow-host names");
        o->allow[o->nallow++] = optarg;
        break;
      case 'T':
        o->no_token = 1;
        break;
      case 'W': {
        char *end;
        errno = 0;
        long mb = strtol(optarg, &end, 10);
        if (errno || *end || !optarg[0] || mb < 0 || mb > 4096)
          return fail_usage(
              "--window-mb wants a number from 0 to 4096, not '%s'", optarg);
        o->window_bytes = (size_t)mb << 20;
        break;
      }
      case 'h':
        fputs(usage, stdout);
        fputs(mlprof__filter_help, stdout);
        return 0;
      default: {
        int rc = mlprof__cli_other_option("serve", ch, argv, filter);
        if (rc >= 0) return rc;
      }
    }
  }
  if (argc - optind > 1) return fail_usage("%s", "one DIR at most");
  o->dir = optind < argc ? argv[optind] : ".";
  return -1;
}

int mlprof__cmd_serve(int argc, char **argv) {
  mlprof__filter filter = {0};
  mlprof__serve_opts o = {.bind = "127.0.0.1",
                          .filter = &filter,
                          .window_bytes = MLPROF__SERVE_WINDOW_BYTES};
  long port = 8050;
  int rc = parse(argc, argv, &o, &filter, &port);
#ifdef MLPROF_WITH_SERVE
  if (rc < 0 && mlprof__serve_address(o.bind, (unsigned)port, &o.addr))
    rc = fail_usage("--bind wants an IPv4 or IPv6 address, not '%s'", o.bind);
  if (rc < 0) rc = mlprof__serve_run(&o);
#else
  if (rc < 0) {
    fprintf(stderr,
            "mlprof serve: this mlprof was built without libmicrohttpd; "
            "install libmicrohttpd-dev and rebuild (mlprof html writes a "
            "dashboard file)\n");
    rc = 2;
  }
#endif
  mlprof__filter_free(&filter);
  return rc;
}
