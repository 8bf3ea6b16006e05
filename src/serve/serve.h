/* The live server: the dashboards of the run directories under a directory,
 * over HTTP (libmicrohttpd). The command line is the CLI's (cli/serve.c). */
#ifndef MLPROF_SERVE_H
#define MLPROF_SERVE_H

#include <stddef.h>
#include <sys/socket.h>

#include "../analyze/filter.h"

#define MLPROF__SERVE_MAX_ALLOW 32
/* Bytes of a run's profile chunks one timeline request reads again by
 * default (mlprof__lod_window): about a million spans, a few tens of ms. */
#define MLPROF__SERVE_WINDOW_BYTES (8u << 20)

typedef struct {
  const char *dir;              /* served; must be a directory */
  const char *bind;             /* the address as given, for the printed URL */
  struct sockaddr_storage addr; /* from mlprof__serve_address */
  const char *allow[MLPROF__SERVE_MAX_ALLOW]; /* Host names also answered */
  size_t nallow;
  int no_token; /* off loopback, ask no token */
  /* Applied to every run served (pages, data, timeline, /metrics) as the
   * analysis applies it (borrowed; must outlive the server), or NULL. */
  const mlprof__filter *filter;
  /* Bytes of profile chunks one timeline or span request may read again;
   * past it (0: always) the levels kept in memory answer. */
  size_t window_bytes;
} mlprof__serve_opts;

/* The IPv4 or IPv6 literal addr with port into *ss. Returns 0, or -1 when
 * addr is neither. */
int mlprof__serve_address(const char *addr, unsigned port,
                          struct sockaddr_storage *ss);

/* Serves o->dir until SIGINT or SIGTERM (blocked meanwhile in the server's
 * threads). Returns 0 when stopped by one of them, 1 when the server could
 * not start, 2 when o->dir is no directory; the error, and the URL when it
 * starts, on stderr ("mlprof serve: ..."). */
int mlprof__serve_run(const mlprof__serve_opts *o);

#endif
