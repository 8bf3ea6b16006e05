/* mlprof serve: the dashboard of the run directories under DIR over HTTP
 * (libmicrohttpd), updated while the runs are still being written.
 *
 * Safety: binds 127.0.0.1 unless told otherwise; answers only requests
 * whose one Host is localhost, an IP literal (loopback ones on loopback)
 * or an --allow-host name (no DNS rebinding); bound elsewhere, asks for a
 * random token unless --no-token; refuses requests made by pages of other
 * sites (Origin, Sec-Fetch-Site) but for the runs list; it
 * serves its own pages and the runs it found under DIR, nothing else: a
 * path with an empty, "." or ".." component is refused, the directory it
 * names must resolve (symlinks followed) inside DIR, and only regular
 * *.mlprof files that are not symlinks are read. Only GET and HEAD.
 *
 * Availability: a request's head must arrive whole within REQUEST_S, so
 * slow clients are dropped whatever address they come from; one answer per
 * connection; connections past what the daemon holds wait their turn. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <microhttpd.h>
#include <mlprof.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../analyze/dashboard.h"
#include "../base/base.h"
#include "../export/html.h"
#include "../export/prom.h"
#include "serve.h"

#define MAX_RUNS 1000
#define MAX_DEPTH 4
#define MAX_FILES 4096
#define MAX_REL 1024
/* Connections in libmicrohttpd at once (fewer when the open-files limit is
 * lower); past it, requests wait in front_door's queue, never refused. Each
 * answer closes its connection, so a connection lives while its request is
 * answered; one that sends or takes nothing for IDLE_S is closed. */
#define MAX_CONNECTIONS 2048u
#define IDLE_S 10
/* Accepted connections whose request is not whole yet, or that wait for a
 * place: past it, the oldest of those not whole is dropped. */
#define MAX_PENDING 1024u
/* A request's head (request line and headers) must arrive whole within
 * REQUEST_S of its connection (else 408), in at most HEAD_MAX bytes (else
 * 431): slow clients are bounded by time, whatever address they come
 * from. */
#define REQUEST_S 5
#define HEAD_MAX (32 * 1024)
/* Connections the kernel queues before front_door accepts them. */
#define BACKLOG 1024
/* libmicrohttpd's threads, each serving the connections given to it. */
#define POOL 4
/* A run's dashboard is rebuilt at most this often while it changes. */
#define MIN_REBUILD_NS 500000000ull
/* Threads that read runs, each one run at a time; more runs to read wait in
 * a queue. Requests never read a run in libmicrohttpd's threads: each of
 * those serves every connection given to it, so one reading there would
 * stall them all, whatever run they ask for. */
#define BUILDERS 2

/* ---- runs and their cached dashboards ------------------------------------ */

/* One reading of a run, never changed once made: the requests that use it
 * hold a reference, and the last one frees it. */
typedef struct {
  atomic_int refs;
  int ok;
  mlprof__analysis d;
  char *data; /* the page data JSON */
  size_t data_len;
  char error[256];
} run_build;

/* A connection suspended until a run's reading ends. */
typedef struct waiter {
  struct MHD_Connection *conn;
  struct waiter *next;
} waiter;

/* A run's latest build. A run is read by one builder thread at a time:
 * meanwhile the requests for it get its previous build, or are suspended
 * until the first one (and the request that asked for a new reading until
 * that one); requests for other runs go on. */
typedef struct run_cache {
  char *rel;            /* path under the root, "." for the root itself */
  pthread_mutex_t lock; /* guards what follows, held briefly */
  run_build *cur;       /* holds a reference; NULL before the first */
  uint64_t sig;         /* of the profiles' names, sizes and mtimes read */
  uint64_t built;       /* CLOCK_MONOTONIC ns of the last build's start */
  int building;         /* queued or being read */
  int failed;           /* the last reading ran out of memory */
  waiter *waiters;      /* resumed when the reading ends */
  struct run_cache *next_queued; /* the queue's link (under server.lock) */
} run_cache;

typedef struct {
  char root[PATH_MAX];
  int loopback;
  const char *allow[MLPROF__SERVE_MAX_ALLOW]; /* --allow-host names */
  size_t nallow;
  const mlprof__filter *filter; /* --zone, --steps...: NULL for none */
  size_t window_bytes;          /* --window-mb */
  char token[33];               /* hex; empty: no token asked for */
  char set_cookie[128];
  /* Guards the list of entries and the queue of runs to read, held
   * briefly; taken after a run's lock, never before. */
  pthread_mutex_t lock;
  run_cache **cache; /* entries never move: pointers stay valid */
  size_t ncache, cap;
  pthread_cond_t work; /* a run was queued, or stopping */
  run_cache *queue, *queue_tail;
  int reading;          /* runs being read by builders */
  atomic_int stopping;  /* no more suspending, no more reading */
  atomic_uint live;     /* connections handed to the daemon, not closed */
  atomic_int want_room; /* front_door waits for one of them to close */
  int room;             /* an eventfd that wakes it then */
} server;

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int has_suffix(const char *s, const char *suf) {
  size_t n = strlen(s), k = strlen(suf);
  return n > k && strcmp(s + n - k, suf) == 0;
}

/* The regular, non-symlink *.mlprof files of dir (sorted), and a signature
 * of their names, sizes and mtimes. Returns how many (at most max). */
static size_t profiles_of(const char *dir, char ***out, uint64_t *sig) {
  DIR *d = opendir(dir);
  *out = NULL;
  *sig = MLPROF__HASH_START;
  if (!d) return 0;
  char **files = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < MAX_FILES) {
    if (e->d_name[0] == '.' || !has_suffix(e->d_name, ".mlprof")) continue;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >=
        (int)sizeof path)
      continue;
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (mlprof__grow(&files, &cap, n + 1, sizeof *files)) break;
    if (!(files[n] = strdup(path))) break;
    n++;
    uint64_t parts[3] = {(uint64_t)st.st_size, (uint64_t)st.st_mtim.tv_sec,
                         (uint64_t)st.st_mtim.tv_nsec};
    *sig = mlprof__hash(e->d_name, strlen(e->d_name), *sig);
    *sig = mlprof__hash(parts, sizeof parts, *sig);
  }
  closedir(d);
  *out = files;
  return n;
}

static void free_list(char **l, size_t n) {
  for (size_t i = 0; i < n; i++) free(l[i]);
  free(l);
}

/* The run directories under root, depth first, as paths relative to it. */
static void find_runs(const char *root, const char *rel, int depth,
                      char ***runs, size_t *n, size_t *cap) {
  char dir[PATH_MAX];
  if (snprintf(dir, sizeof dir, "%s/%s", root, rel) >= (int)sizeof dir) return;
  char **files;
  uint64_t sig;
  size_t nf = profiles_of(dir, &files, &sig);
  free_list(files, nf);
  if (nf && *n < MAX_RUNS) {
    if (mlprof__grow(runs, cap, *n + 1, sizeof **runs)) return;
    if (((*runs)[*n] = strdup(rel))) (*n)++;
  }
  if (depth >= MAX_DEPTH) return;
  DIR *d = opendir(dir);
  if (!d) return;
  char **subs = NULL;
  size_t ns = 0, cs = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[PATH_MAX];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >=
            (int)sizeof path ||
        lstat(path, &st) != 0 || !S_ISDIR(st.st_mode))
      continue; /* symlinked directories are not followed */
    if (mlprof__grow(&subs, &cs, ns + 1, sizeof *subs)) break;
    if (!(subs[ns] = strdup(e->d_name))) break;
    ns++;
  }
  closedir(d);
  for (size_t i = 0; i < ns; i++) {
    char r[MAX_REL];
    if (snprintf(r, sizeof r, "%s%s%s", strcmp(rel, ".") ? rel : "",
                 strcmp(rel, ".") ? "/" : "", subs[i]) < (int)sizeof r)
      find_runs(root, r, depth + 1, runs, n, cap);
  }
  free_list(subs, ns);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* 0 when rel (already percent-decoded) is a path under the root that may
 * be served; -1 otherwise. "." alone is the root. */
static int rel_ok(const char *rel) {
  size_t n = strlen(rel);
  if (n == 0 || n >= MAX_REL) return -1;
  if (strcmp(rel, ".") == 0) return 0;
  if (rel[0] == '/') return -1;
  const char *p = rel;
  while (*p) {
    const char *e = strchr(p, '/');
    size_t k = e ? (size_t)(e - p) : strlen(p);
    if (k == 0 || (k == 1 && p[0] == '.') ||
        (k == 2 && p[0] == '.' && p[1] == '.'))
      return -1;
    for (size_t i = 0; i < k; i++)
      if ((unsigned char)p[i] < 0x20 || p[i] == '\\') return -1;
    if (!e) break;
    p = e + 1;
    if (!*p) return -1; /* trailing slash is stripped by the caller */
  }
  return 0;
}

/* Resolves rel under the root: 0 with the real path in out when it is the
 * root or inside it. */
static int resolve(const server *s, const char *rel, char *out) {
  char path[PATH_MAX * 2];
  snprintf(path, sizeof path, "%s/%s", s->root, rel);
  if (!realpath(path, out)) return -1;
  size_t n = strlen(s->root);
  if (strcmp(out, s->root) == 0) return 0;
  if (strncmp(out, s->root, n) == 0 &&
      (out[n] == '/' || (n == 1 && s->root[0] == '/')))
    return 0;
  return -1;
}

static void build_put(run_build *b) {
  if (!b || atomic_fetch_sub(&b->refs, 1) != 1) return;
  if (b->ok) mlprof__analysis_free(&b->d);
  free(b->data);
  free(b);
}

/* The URLs a run's page asks for its data, timeline windows and spans. */
typedef struct {
  char data[MAX_REL + 16], timeline[MAX_REL + 16], span[MAX_REL + 16];
} page_urls;

/* The page options of run rel, built in b, with its URLs in u. */
static mlprof__html_opts page_opts(const char *rel, run_build *b,
                                   page_urls *u) {
  snprintf(u->data, sizeof u->data, "/data/%s", rel);
  snprintf(u->timeline, sizeof u->timeline, "/timeline/%s", rel);
  snprintf(u->span, sizeof u->span, "/span/%s", rel);
  return (mlprof__html_opts){.title = rel,
                             .data_url = u->data,
                             .lod = &b->d.lod,
                             .timeline_url = u->timeline,
                             .span_url = u->span,
                             .flame = &b->d.flame};
}

/* Opens the profiles of a run, leaving out files that cannot be opened yet
 * (a profile whose header is still being written). */
static int open_job(char **files, size_t n, mlprof__job *job, char *err,
                    size_t errlen) {
  if (mlprof__job_open(job, (const char *const *)files, n, err, errlen) == 0)
    return 0;
  char **ok = malloc(n * sizeof *ok);
  size_t k = 0;
  if (!ok) return MLPROF_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    mlprof__job one;
    if (mlprof__job_open(&one, (const char *const *)&files[i], 1, NULL, 0) ==
        0) {
      mlprof__job_close(&one);
      ok[k++] = files[i];
    }
  }
  int rc = k ? mlprof__job_open(job, (const char *const *)ok, k, err, errlen)
             : MLPROF_EFORMAT;
  if (!k) snprintf(err, errlen, "no readable profile yet");
  free(ok);
  return rc;
}

/* Reads the run rel (its profiles files) through filter (NULL: none) into a
 * new build with one reference; a run that cannot be read gives a build with
 * the reason in error. NULL when out of memory. */
static run_build *build_run(char **files, size_t nf, const char *rel,
                            const mlprof__filter *filter) {
  run_build *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  atomic_init(&b->refs, 1);
  mlprof__job job;
  char err[256];
  int rc = open_job(files, nf, &job, err, sizeof err);
  if (!rc) {
    mlprof__analysis_opts ao;
    mlprof__dash_opts(&ao, MLPROF__DASH_TOP);
    ao.lod_items = MLPROF__DASH_LOD_LIVE_ITEMS;
    ao.filter = filter;
    ao.filter_must_match = 0; /* live: it may not have run yet */
    rc = mlprof__analysis_run(&job, &ao, &b->d, err, sizeof err);
    mlprof__job_close(&job);
  }
  if (rc) {
    snprintf(b->error, sizeof b->error, "%s", err);
    return b;
  }
  b->ok = 1;
  mlprof__out o;
  if (mlprof__out_open(&o, -1)) {
    snprintf(b->error, sizeof b->error, "out of memory");
    return b;
  }
  page_urls u;
  mlprof__html_opts opts = page_opts(rel, b, &u);
  if (mlprof__export_html_data(&b->d.r, &b->d.res, &b->d.f, &b->d.tree, &opts,
                               &o)) {
    snprintf(b->error, sizeof b->error, "out of memory");
    mlprof__out_close(&o);
    return b;
  }
  b->data = o.buf; /* kept: freed by build_put */
  b->data_len = o.len;
  return b;
}

/* The entry of rel, made on first use. NULL when out of memory. */
static run_cache *cache_entry(server *s, const char *rel) {
  run_cache *c = NULL;
  pthread_mutex_lock(&s->lock);
  for (size_t i = 0; i < s->ncache && !c; i++)
    if (strcmp(s->cache[i]->rel, rel) == 0) c = s->cache[i];
  if (!c &&
      !mlprof__grow(&s->cache, &s->cap, s->ncache + 1, sizeof *s->cache) &&
      (c = calloc(1, sizeof *c))) {
    if ((c->rel = strdup(rel))) {
      pthread_mutex_init(&c->lock, NULL);
      s->cache[s->ncache++] = c;
    } else {
      free(c);
      c = NULL;
    }
  }
  pthread_mutex_unlock(&s->lock);
  return c;
}

/* Resumes the connections waiting for c (its lock held: once the server's
 * resume_all has passed c, none is left suspended). */
static void resume_waiters(run_cache *c) {
  while (c->waiters) {
    waiter *w = c->waiters;
    c->waiters = w->next;
    MHD_resume_connection(w->conn);
    free(w);
  }
}

/* Reads the run c in a builder thread, then resumes the connections that
 * waited for it. */
static void read_run(server *s, run_cache *c) {
  char real[PATH_MAX];
  char **files = NULL;
  uint64_t sig = 0;
  size_t nf = resolve(s, c->rel, real) ? 0 : profiles_of(real, &files, &sig);
  run_build *b = build_run(files, nf, c->rel, s->filter), *old = NULL;
  free_list(files, nf);
  pthread_mutex_lock(&c->lock);
  c->building = 0;
  c->sig = sig;
  c->failed = !b;
  if (b) {
    old = c->cur;
    c->cur = b;
  }
  resume_waiters(c);
  pthread_mutex_unlock(&c->lock);
  build_put(old);
}

/* A builder thread: reads the queued runs one after another until the
 * server stops. */
static void *builder(void *arg) {
  server *s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->queue && !atomic_load(&s->stopping))
      pthread_cond_wait(&s->work, &s->lock);
    if (atomic_load(&s->stopping)) break;
    run_cache *c = s->queue;
    if (!(s->queue = c->next_queued)) s->queue_tail = NULL;
    s->reading++;
    pthread_mutex_unlock(&s->lock);
    read_run(s, c);
    pthread_mutex_lock(&s->lock);
    s->reading--;
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

/* Resumes every suspended connection (the server stops): none waits for a
 * reading any more, and none will be suspended again. */
static void resume_all(server *s) {
  atomic_store(&s->stopping, 1);
  pthread_mutex_lock(&s->lock);
  pthread_cond_broadcast(&s->work);
  size_t n = s->ncache;
  pthread_mutex_unlock(&s->lock);
  for (size_t i = 0; i < n; i++) {
    pthread_mutex_lock(&s->lock);
    run_cache *c = s->cache[i]; /* the array may move, its entries not */
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_lock(&c->lock);
    resume_waiters(c);
    pthread_mutex_unlock(&c->lock);
  }
}

typedef enum { GOT, NO_RUN, WAITING, PENDING, NO_MEMORY, STOPPING } run_got;

/* The latest build of rel into *out with a reference for the caller
 * (build_put): GOT. A run whose profiles changed is queued to be read again
 * (at most every MIN_REBUILD_NS). With conn, a request that has no reading
 * to get yet, or that asked for a new one (unless it waited already), is
 * suspended until the reading ends: WAITING, to be answered when the
 * handler is called again. Without conn: PENDING. NO_RUN when rel is not a
 * run (404); NO_MEMORY, STOPPING when there is no reading to give. */
static run_got run_get(server *s, const char *rel, struct MHD_Connection *conn,
                       int waited, run_build **out) {
  char real[PATH_MAX];
  *out = NULL;
  if (resolve(s, rel, real)) return NO_RUN;
  char **files;
  uint64_t sig;
  size_t nf = profiles_of(real, &files, &sig);
  free_list(files, nf);
  if (!nf) return NO_RUN;
  run_cache *c = cache_entry(s, rel);
  if (!c) return NO_MEMORY;
  run_got r;
  waiter *w;
  int queued = 0;
  pthread_mutex_lock(&c->lock);
  uint64_t t = now_ns();
  if (!atomic_load(&s->stopping) && !c->building &&
      ((!c->cur && !c->failed) ||
       (c->cur && c->sig != sig && t - c->built >= MIN_REBUILD_NS))) {
    c->building = queued = 1;
    c->built = t;
    c->next_queued = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->queue_tail)
      s->queue_tail->next_queued = c;
    else
      s->queue = c;
    s->queue_tail = c;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
  }
  if (c->cur && !(queued && conn && !waited)) {
    *out = c->cur;
    atomic_fetch_add(&(*out)->refs, 1);
    r = GOT;
  } else if (!c->building) {
    r = atomic_load(&s->stopping) ? STOPPING : NO_MEMORY;
    c->failed = 0; /* the next request tries again */
  } else if (atomic_load(&s->stopping)) {
    r = STOPPING;
  } else if (!conn) {
    r = PENDING;
  } else if (!(w = malloc(sizeof *w))) {
    r = NO_MEMORY;
  } else {
    /* Suspended before it is listed: the builder resumes it after. */
    MHD_suspend_connection(conn);
    *w = (waiter){.conn = conn, .next = c->waiters};
    c->waiters = w;
    r = WAITING;
  }
  pthread_mutex_unlock(&c->lock);
  return r;
}

/* ---- HTTP ---------------------------------------------------------------- */

/* Whether t is the token, compared in a time that does not tell how much
 * of a guessed token was right. */
static int token_eq(const server *s, const char *t) {
  if (!t) return 0;
  size_t n = strlen(s->token);
  unsigned char diff = strlen(t) != n;
  for (size_t i = 0; i < n && t[i]; i++)
    diff |= (unsigned char)(t[i] ^ s->token[i]);
  return diff == 0;
}

static enum MHD_Result send_buf(const server *s, struct MHD_Connection *conn,
                                unsigned status, const char *type, char *buf,
                                size_t len, int must_free) {
  struct MHD_Response *r = MHD_create_response_from_buffer(
      len, buf, must_free ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_MUST_COPY);
  if (!r) {
    if (must_free) free(buf);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type", type);
  MHD_add_response_header(r, "Cache-Control", "no-store");
  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(r, "X-Frame-Options", "DENY");
  MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
  /* One request per connection: the next one comes through front_door,
   * which bounds how long its head may take to arrive. */
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  /* The token came in the URL: from now on the cookie carries it, so the
   * page's own requests need no token in their URLs. */
  if (s->token[0] && token_eq(s, MHD_lookup_connection_value(
                                     conn, MHD_GET_ARGUMENT_KIND, "token")))
    MHD_add_response_header(r, MHD_HTTP_HEADER_SET_COOKIE, s->set_cookie);
  if (strncmp(type, "text/html", 9) == 0)
    MHD_add_response_header(
        r, "Content-Security-Policy",
        "default-src 'none'; style-src 'unsafe-inline'; script-src "
        "'unsafe-inline'; img-src data:; connect-src 'self'");
  enum MHD_Result ret = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result send_text(const server *s, struct MHD_Connection *conn,
                                 unsigned status, const char *msg) {
  return send_buf(s, conn, status, "text/plain; charset=utf-8", (char *)msg,
                  strlen(msg), 0);
}

/* Sends the memory writer's buffer (taken) or 500 when it failed. */
static enum MHD_Result send_out(const server *s, struct MHD_Connection *conn,
                                mlprof__out *o, const char *type) {
  if (o->err) {
    mlprof__out_close(o);
    return send_text(s, conn, 500, "out of memory\n");
  }
  char *buf = o->buf;
  o->buf = NULL;
  return send_buf(s, conn, 200, type, buf, o->len, 1);
}

/* Percent-encodes a path for an href: unreserved bytes and '/' as they
 * are. */
static void out_url_path(mlprof__out *o, const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
        (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
        c == '~' || c == '/') {
      mlprof__out_write(o, s, 1);
    } else {
      char b[3] = {'%', hex[c >> 4], hex[c & 15]};
      mlprof__out_write(o, b, 3);
    }
  }
}

static size_t list_runs(server *s, char ***runs) {
  size_t n = 0, cap = 0;
  *runs = NULL;
  find_runs(s->root, ".", 0, runs, &n, &cap);
  if (n) mlprof__sort(*runs, n, sizeof **runs, cmp_str);
  return n;
}

static enum MHD_Result page_index(server *s, struct MHD_Connection *conn) {
  char **runs;
  size_t n = list_runs(s, &runs);
  mlprof__out o;
  if (mlprof__out_open(&o, -1)) {
    free_list(runs, n);
    return send_text(s, conn, 500, "out of memory\n");
  }
  mlprof__out_lit(
      &o,
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta "
      "charset=\"utf-8\"><title>mlprof runs</title><style>"
      "body{font:14px system-ui,sans-serif;margin:24px;color:#1d2330}"
      "table{border-collapse:collapse}td,th{padding:4px 12px;"
      "border-bottom:1px solid #dde1e8;text-align:left}"
      "a{color:#2f6fde}</style></head><body><h1>mlprof runs</h1>"
      "<p>Runs under <code>");
  mlprof__out_html_text(&o, s->root, strlen(s->root));
  mlprof__out_lit(&o,
                  "</code> (<a href=\"/metrics\">metrics</a>, <a "
                  "href=\"/api/runs\">JSON</a>)</p>\n<table><tr><th>run</th>"
                  "<th>profiles</th><th>size</th><th>last written</th></tr>\n");
  if (!n)
    mlprof__out_lit(&o,
                    "<tr><td colspan=\"4\">No run directories (directories "
                    "holding *.mlprof files) yet.</td></tr>\n");
  for (size_t i = 0; i < n; i++) {
    char dir[PATH_MAX * 2];
    snprintf(dir, sizeof dir, "%s/%s", s->root, runs[i]);
    char **files;
    uint64_t sig;
    size_t nf = profiles_of(dir, &files, &sig);
    uint64_t bytes = 0;
    time_t last = 0;
    for (size_t k = 0; k < nf; k++) {
      struct stat st;
      if (lstat(files[k], &st) == 0) {
        bytes += (uint64_t)st.st_size;
        if (st.st_mtime > last) last = st.st_mtime;
      }
    }
    free_list(files, nf);
    char when[64] = "";
    struct tm tm;
    if (last && localtime_r(&last, &tm))
      strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    mlprof__out_lit(&o, "<tr><td><a href=\"/run/");
    out_url_path(&o, runs[i]);
    mlprof__out_lit(&o, "/\">");
    mlprof__out_html_text(&o, runs[i], strlen(runs[i]));
    mlprof__out_printf(
        &o, "</a></td><td>%zu</td><td>%.1f MB</td><td>%s</td></tr>\n", nf,
        (double)bytes / 1e6, when);
  }
  mlprof__out_lit(&o, "</table></body></html>\n");
  free_list(runs, n);
  return send_out(s, conn, &o, "text/html; charset=utf-8");
}

static enum MHD_Result api_runs(server *s, struct MHD_Connection *conn) {
  char **runs;
  size_t n = list_runs(s, &runs);
  mlprof__out o;
  if (mlprof__out_open(&o, -1)) {
    free_list(runs, n);
    return send_text(s, conn, 500, "out of memory\n");
  }
  mlprof__out_lit(&o, "{\"runs\":[");
  for (size_t i = 0; i < n; i++) {
    mlprof__out_str(&o, i ? ",\n{\"run\":" : "\n{\"run\":");
    mlprof__out_json_str(&o, runs[i], strlen(runs[i]));
    mlprof__out_lit(&o, ",\"page\":");
    mlprof__out out2;
    /* The URLs, percent-encoded, as JSON strings. */
    if (mlprof__out_open(&out2, -1) == 0) {
      mlprof__out_lit(&out2, "/run/");
      out_url_path(&out2, runs[i]);
      mlprof__out_lit(&out2, "/");
      mlprof__out_json_str(&o, out2.buf, out2.len);
      mlprof__out_lit(&o, ",\"data\":");
      out2.len = 0;
      mlprof__out_lit(&out2, "/data/");
      out_url_path(&out2, runs[i]);
      mlprof__out_json_str(&o, out2.buf, out2.len);
      mlprof__out_close(&out2);
    } else {
      mlprof__out_lit(&o, "null,\"data\":null");
    }
    mlprof__out_lit(&o, "}");
  }
  mlprof__out_lit(&o, "]}\n");
  free_list(runs, n);
  return send_out(s, conn, &o, "application/json");
}

/* What a connection's handler has done so far (its *con_cls). */
enum { FRESH, HEADERS_READ, WAITED };

static enum MHD_Result metrics(server *s, struct MHD_Connection *conn,
                               void **state) {
  char **runs;
  size_t n = list_runs(s, &runs);
  mlprof__prom_run *pr = calloc(n ? n : 1, sizeof *pr);
  mlprof__out o;
  if (!pr || mlprof__out_open(&o, -1)) {
    free(pr);
    free_list(runs, n);
    return send_text(s, conn, 500, "out of memory\n");
  }
  run_build **b = calloc(n ? n : 1, sizeof *b);
  if (!b) {
    free(pr);
    free_list(runs, n);
    mlprof__out_close(&o);
    return send_text(s, conn, 500, "out of memory\n");
  }
  /* Every run to read is queued; the request waits for the first of them,
   * then comes here again. Runs that cannot be read are left out. */
  size_t k = 0;
  int waiting = 0;
  for (size_t i = 0; i < n; i++) {
    waiting |= run_get(s, runs[i], waiting ? NULL : conn,
                       *state == (void *)WAITED, &b[i]) == WAITING;
    if (b[i] && b[i]->ok)
      pr[k++] = (mlprof__prom_run){.run = runs[i],
                                   .r = &b[i]->d.r,
                                   .res = &b[i]->d.res,
                                   .dist = &b[i]->d.f.dist};
  }
  if (!waiting) mlprof__export_prom(pr, k, &o);
  for (size_t i = 0; i < n; i++) build_put(b[i]);
  free(b);
  free(pr);
  free_list(runs, n);
  if (waiting) {
    mlprof__out_close(&o);
    *state = (void *)WAITED;
    return MHD_YES;
  }
  return send_out(s, conn, &o, "text/plain; version=0.0.4; charset=utf-8");
}

/* The GET argument name as job ns into *v: 0, or -1 when absent or not a
 * number. */
static int ns_arg(struct MHD_Connection *conn, const char *name, uint64_t *v) {
  const char *a =
      MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
  if (!a || *a < '0' || *a > '9') return -1;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(a, &end, 10);
  if (*end || errno) return -1;
  *v = x;
  return 0;
}

enum { ROUTE_PAGE, ROUTE_DATA, ROUTE_TIMELINE, ROUTE_SPAN };

/* /run/REL/, /data/REL, /timeline/REL?t0=&t1=&res= and
 * /span/REL?track=&t0=&t1=. */
static enum MHD_Result run_route(server *s, struct MHD_Connection *conn,
                                 void **state, const char *rest, int route) {
  uint64_t t0 = 0, t1 = 0, res = 0, track = 0;
  if (route == ROUTE_TIMELINE &&
      (ns_arg(conn, "t0", &t0) || ns_arg(conn, "t1", &t1) ||
       ns_arg(conn, "res", &res) || t1 <= t0))
    return send_text(s, conn, 400,
                     "bad window: want t0, t1 and res in ns, t0 < t1\n");
  if (route == ROUTE_SPAN &&
      (ns_arg(conn, "track", &track) || ns_arg(conn, "t0", &t0) ||
       ns_arg(conn, "t1", &t1) || t1 < t0))
    return send_text(s, conn, 400,
                     "bad span: want track, t0 and t1 in ns, t0 <= t1\n");
  char rel[MAX_REL];
  size_t n = strlen(rest);
  if (n == 0 || n >= sizeof rel)
    return send_text(s, conn, 404, "no such run\n");
  memcpy(rel, rest, n + 1);
  if (n > 1 && rel[n - 1] == '/') rel[--n] = '\0';
  if (memchr(rest, '\0', n) != NULL || rel_ok(rel))
    return send_text(s, conn, 403, "forbidden path\n");
  run_build *b;
  switch (run_get(s, rel, conn, *state == (void *)WAITED, &b)) {
    case GOT:
      break;
    case WAITING: /* answered when the handler is called again */
      *state = (void *)WAITED;
      return MHD_YES;
    case NO_RUN:
      return send_text(s, conn, 404, "no such run\n");
    case STOPPING:
      return send_text(s, conn, 503, "mlprof serve is stopping\n");
    default:
      return send_text(s, conn, 500, "out of memory\n");
  }
  if (!b->data) {
    char msg[400];
    snprintf(msg, sizeof msg, "cannot read this run: %s\n", b->error);
    build_put(b);
    return send_buf(s, conn, 503, "text/plain; charset=utf-8", msg, strlen(msg),
                    0);
  }
  mlprof__out o;
  if (mlprof__out_open(&o, -1)) {
    build_put(b);
    return send_text(s, conn, 500, "out of memory\n");
  }
  if (route == ROUTE_DATA) {
    mlprof__out_write(&o, b->data, b->data_len);
  } else if (route == ROUTE_TIMELINE || route == ROUTE_SPAN) {
    /* Levels finer than those kept come from the profiles' chunks in the
     * window, when they are few enough; else the kept levels answer. */
    mlprof__lod w;
    char err[300];
    int span = route == ROUTE_SPAN;
    if (span && track >= b->d.lod.ntracks) {
      build_put(b);
      mlprof__out_close(&o);
      return send_text(s, conn, 404, "no such track\n");
    }
    int wrc = mlprof__lod_window(
        &b->d.lod, t0, t1, span ? 0 : mlprof__lod_level(res),
        span ? (size_t)track : SIZE_MAX, s->window_bytes, &w, err, sizeof err);
    const mlprof__lod *l = wrc ? &b->d.lod : &w;
    if (wrc >= 0 && !span)
      mlprof__export_timeline_json(l, t0, t1, res,
                                   MLPROF__DASH_LOD_WINDOW_ITEMS, 0, &o);
    else if (wrc >= 0)
      mlprof__export_span_json(l, track, t0, t1, &o);
    if (!wrc) mlprof__lod_window_free(&w);
    if (wrc == MLPROF_ENOMEM) {
      build_put(b);
      mlprof__out_close(&o);
      return send_text(s, conn, 500, "out of memory\n");
    }
    if (wrc < 0) {
      char msg[400];
      snprintf(msg, sizeof msg,
               "this run changed since it was read (%s): reload\n", err);
      build_put(b);
      mlprof__out_close(&o);
      return send_buf(s, conn, 409, "text/plain; charset=utf-8", msg,
                      strlen(msg), 0);
    }
  } else {
    page_urls u;
    mlprof__html_opts opts = page_opts(rel, b, &u);
    mlprof__export_html_page(&b->d.r, &b->d.res, &b->d.f, &b->d.tree, &opts,
                             &o);
  }
  build_put(b);
  return send_out(
      s, conn, &o,
      route == ROUTE_PAGE ? "text/html; charset=utf-8" : "application/json");
}

/* Whether a request may see the profiles: no token is asked for, or it
 * brings the token in its URL (?token=) or in the cookie set then. */
static int token_ok(const server *s, struct MHD_Connection *conn) {
  if (!s->token[0]) return 1;
  char name[32];
  snprintf(name, sizeof name, "%.*s", (int)strcspn(s->set_cookie, "="),
           s->set_cookie);
  return token_eq(s, MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND,
                                                 "token")) ||
         token_eq(s, MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, name));
}

/* Whether h, a Host header, names this server, so that a page of another
 * site cannot reach it by DNS rebinding (its name resolved to us): an
 * --allow-host name, localhost, or an IP literal (IPv6 in brackets), each
 * with an optional port; on a loopback listener only loopback literals. An
 * IP literal is safe: no DNS answer can make it mean another site. */
static int host_ok(const server *s, const char *h) {
  char name[256];
  int bracket = h[0] == '[';
  const char *start = h + bracket;
  size_t len = bracket ? strcspn(start, "]") : strcspn(h, ":");
  if (bracket && start[len] != ']') return 0;
  const char *port = start + len + bracket;
  if (!len || len >= sizeof name) return 0;
  memcpy(name, start, len);
  name[len] = '\0';
  if (*port && (*port != ':' || strlen(port + 1) > 5 ||
                strspn(port + 1, "0123456789") != strlen(port + 1)))
    return 0;
  for (size_t i = 0; i < s->nallow; i++)
    if (strcasecmp(name, s->allow[i]) == 0) return 1;
  struct in_addr a4;
  struct in6_addr a6;
  if (bracket)
    return inet_pton(AF_INET6, name, &a6) == 1 &&
           (!s->loopback || IN6_IS_ADDR_LOOPBACK(&a6));
  if (inet_pton(AF_INET, name, &a4) == 1)
    return !s->loopback || (ntohl(a4.s_addr) >> 24) == 127;
  return strcasecmp(name, "localhost") == 0;
}

/* Why a request comes from a page of another site, or NULL when it does
 * not: a browser says what site made a request (Sec-Fetch-Site) and names
 * the page's origin on requests across origins (Origin), which must then be
 * this server as the request's Host names it (scheme aside). Requests that
 * carry neither (curl, scrapers, old browsers) come from no page. Without
 * this, a page anywhere could make the server read runs, blindly. */
static const char *foreign(struct MHD_Connection *conn, const char *host) {
  const char *site =
      MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Sec-Fetch-Site");
  if (site && (strcasecmp(site, "cross-site") == 0 ||
               strcasecmp(site, "same-site") == 0))
    return "Sec-Fetch-Site";
  const char *origin =
      MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
  if (!origin) return NULL;
  const char *rest = strncasecmp(origin, "http://", 7) == 0    ? origin + 7
                     : strncasecmp(origin, "https://", 8) == 0 ? origin + 8
                                                               : NULL;
  return host && rest && strcasecmp(rest, host) == 0 ? NULL : "Origin";
}

static enum MHD_Result count_host(void *cls, enum MHD_ValueKind kind,
                                  const char *key, const char *value) {
  (void)kind;
  (void)value;
  if (strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0) (*(int *)cls)++;
  return MHD_YES;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn,
                              const char *url, const char *method,
                              const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
  server *s = cls;
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
    if (*upload_size) {
      *upload_size = 0; /* discard a body */
      return MHD_YES;
    }
    return send_text(s, conn, 405, "only GET and HEAD\n");
  }
  if (*con_cls == (void *)FRESH) {
    /* First call: headers only; answer on the second. */
    *con_cls = (void *)HEADERS_READ;
    return MHD_YES;
  }
  if (*upload_size) {
    *upload_size = 0;
    return MHD_YES;
  }
  int hosts = 0;
  MHD_get_connection_values(conn, MHD_HEADER_KIND, count_host, &hosts);
  if (hosts > 1) return send_text(s, conn, 400, "more than one Host header\n");
  const char *host =
      MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
  if (host && !host_ok(s, host)) {
    char msg[400];
    snprintf(msg, sizeof msg,
             "Host '%.200s' is not this server's name (DNS rebinding?); "
             "mlprof serve --allow-host NAME accepts it\n",
             host);
    return send_buf(s, conn, 403, "text/plain; charset=utf-8", msg, strlen(msg),
                    0);
  }
  /* The runs list reads no run: a link from elsewhere may land there. */
  const char *why =
      url && strcmp(url, "/") != 0 && strcmp(url, "/index.html") != 0
          ? foreign(conn, host)
          : NULL;
  if (why) {
    const char *value = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, why);
    char msg[600];
    snprintf(msg, sizeof msg,
             "request from a page of another site refused (%s: %.200s): "
             "mlprof serve answers its own pages and direct requests; open "
             "http://%.200s/ in the browser itself\n",
             why, value ? value : "", host ? host : "this server");
    return send_buf(s, conn, 403, "text/plain; charset=utf-8", msg, strlen(msg),
                    0);
  }
  if (!token_ok(s, conn))
    return send_text(s, conn, 403,
                     "token required: open the URL mlprof serve printed "
                     "(?token=...)\n");
  if (!url || url[0] != '/') return send_text(s, conn, 400, "bad request\n");
  if (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0)
    return page_index(s, conn);
  if (strcmp(url, "/metrics") == 0) return metrics(s, conn, con_cls);
  if (strcmp(url, "/api/runs") == 0) return api_runs(s, conn);
  if (strncmp(url, "/run/", 5) == 0)
    return run_route(s, conn, con_cls, url + 5, ROUTE_PAGE);
  if (strncmp(url, "/data/", 6) == 0)
    return run_route(s, conn, con_cls, url + 6, ROUTE_DATA);
  if (strncmp(url, "/timeline/", 10) == 0)
    return run_route(s, conn, con_cls, url + 10, ROUTE_TIMELINE);
  if (strncmp(url, "/span/", 6) == 0)
    return run_route(s, conn, con_cls, url + 6, ROUTE_SPAN);
  if (strstr(url, "..")) return send_text(s, conn, 403, "forbidden path\n");
  return send_text(s, conn, 404, "not found\n");
}

/* MHD unescapes the path into place; a %00 would cut it short, so keep the
 * length it reports and refuse a NUL inside. */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s) {
  size_t n = MHD_http_unescape(s);
  if (strlen(s) != n) {
    /* A NUL inside: make the path unservable. */
    strcpy(s, "/..");
    return 3;
  }
  return n;
}

static volatile sig_atomic_t stop_signal;
static void on_signal(int sig) { stop_signal = sig; }

/* What the first n bytes of a connection are: 1 a whole request head (a
 * method in capitals and a space, then lines up to an empty one), 0 the
 * start of one, 400 anything else, 431 a head longer than HEAD_MAX. */
static int head_state(const char *b, size_t n) {
  size_t i = 0;
  while (i < n && i < 16 && b[i] >= 'A' && b[i] <= 'Z') i++;
  if (i == n) return n < 16 ? 0 : 400;
  if (i == 0 || b[i] != ' ') return 400;
  for (const char *p = b; (p = memchr(p, '\n', n - (size_t)(p - b))); p++) {
    size_t rest = n - (size_t)(p + 1 - b);
    if ((rest >= 1 && p[1] == '\n') ||
        (rest >= 2 && p[1] == '\r' && p[2] == '\n'))
      return 1;
  }
  return n >= HEAD_MAX ? 431 : 0;
}

/* Answers status (400, 408, 431 or 503) and closes fd, having read what it sent
 * (closing with unread bytes would reset the connection and lose the
 * answer). */
static void refuse(int fd, int status) {
  const char *reason = "Bad Request";
  char body[128], msg[512], buf[4096];
  if (status == 408) {
    reason = "Request Timeout";
    snprintf(body, sizeof body,
             "the request did not arrive whole in time (%d s, less when "
             "many connections wait)\n",
             REQUEST_S);
  } else if (status == 503) {
    reason = "Service Unavailable";
    snprintf(body, sizeof body, "the server cannot watch more connections\n");
  } else if (status == 431) {
    reason = "Request Header Fields Too Large";
    snprintf(body, sizeof body, "the request's headers are over %d KiB\n",
             HEAD_MAX / 1024);
  } else {
    snprintf(body, sizeof body, "bad request\n");
  }
  int len = snprintf(msg, sizeof msg,
                     "HTTP/1.1 %d %s\r\nContent-Type: text/plain; "
                     "charset=utf-8\r\nContent-Length: %zu\r\nConnection: "
                     "close\r\n\r\n%s",
                     status, reason, strlen(body), body);
  for (int i = 0; i < 16 && recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0; i++) {
  }
  if (send(fd, msg, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT) > 0)
    shutdown(fd, SHUT_WR);
  close(fd);
}

/* A connection accepted and not yet handed to the daemon. */
typedef struct {
  int fd;
  int whole;       /* its request head arrived: it waits for a place */
  uint32_t events; /* epoll's news of it, this round */
  uint64_t since;
  struct sockaddr_storage addr;
  socklen_t len;
} pending;

/* Counts the daemon's connections as they close (front_door counts them as
 * it hands them over), and wakes front_door when it waits for a place. One
 * the daemon drops before starting it (out of memory) is not counted back:
 * a place fewer from then on. */
static void on_connection(void *cls, struct MHD_Connection *conn,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  server *s = cls;
  (void)conn;
  (void)socket_context;
  if (code != MHD_CONNECTION_NOTIFY_CLOSED) return;
  atomic_fetch_sub(&s->live, 1);
  if (atomic_load(&s->want_room)) {
    uint64_t one = 1;
    ssize_t ignored = write(s->room, &one, sizeof one);
    (void)ignored;
  }
}

/* Accepts connections until a signal (left unblocked by wait_mask while it
 * waits) stops the server, and holds each until its request head has come
 * whole: then hands it to the daemon, in turn, while the daemon holds fewer
 * than max_live. A connection whose first bytes are not an HTTP request
 * gets 400 at once (libmicrohttpd waits for a whole line, then closes
 * without a word), one whose head is not whole within REQUEST_S 408; with
 * max_pending held, a new connection drops the oldest not whole (408), and
 * when every one held is whole, the kernel's queue holds the next ones.
 * Heads are peeked at, left for the daemon to read: the connections are
 * watched edge-triggered, so a head that stays partial wakes nothing. */
static void front_door(server *s, struct MHD_Daemon *d, int lfd,
                       size_t max_pending, unsigned max_live,
                       const sigset_t *wait_mask) {
  static pending w[MAX_PENDING];
  static struct epoll_event ev[64];
  static char head[HEAD_MAX];
  const uint64_t limit_ns = REQUEST_S * 1000000000ull;
  size_t n = 0;
  uint64_t accept_after = 0;
  int ep = epoll_create1(EPOLL_CLOEXEC), listening = 0;
  struct epoll_event e = {.events = EPOLLIN, .data.fd = s->room};
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, s->room, &e) != 0) {
    fprintf(stderr, "mlprof serve: epoll: %s\n", strerror(errno));
    if (ep >= 0) close(ep);
    return;
  }
  e = (struct epoll_event){.events = 0, .data.fd = lfd};
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &e);
  while (!stop_signal) {
    /* The whole ones to the daemon, oldest first, while it has places. */
    size_t k = 0, open = 0;
    int waiting = 0;
    for (size_t i = 0; i < n; i++) {
      if (w[i].whole && atomic_load(&s->live) < max_live) {
        epoll_ctl(ep, EPOLL_CTL_DEL, w[i].fd, NULL);
        atomic_fetch_add(&s->live, 1);
        if (MHD_add_connection(d, w[i].fd, (struct sockaddr *)&w[i].addr,
                               w[i].len) != MHD_YES)
          atomic_fetch_sub(&s->live, 1); /* it closed the connection */
        continue;
      }
      waiting |= w[i].whole;
      open += !w[i].whole;
      w[k++] = w[i];
    }
    n = k;
    /* A place that freed before want_room was set woke no one. */
    atomic_store(&s->want_room, waiting);
    if (waiting && atomic_load(&s->live) < max_live) continue;

    uint64_t t = now_ns(), next = t + 1000000000ull;
    int take = t >= accept_after && (n < max_pending || open);
    if (take != listening) {
      e = (struct epoll_event){.events = take ? EPOLLIN : 0, .data.fd = lfd};
      epoll_ctl(ep, EPOLL_CTL_MOD, lfd, &e);
      listening = take;
    }
    if (!take && accept_after > t && accept_after < next) next = accept_after;
    for (size_t i = 0; i < n; i++)
      if (!w[i].whole && w[i].since + limit_ns < next)
        next = w[i].since + limit_ns;
    int ms = next > t ? (int)((next - t + 999999) / 1000000) : 0;
    int nev = epoll_pwait(ep, ev, (int)(sizeof ev / sizeof *ev), ms, wait_mask);
    if (nev < 0) continue; /* a signal */
    int incoming = 0;
    for (int j = 0; j < nev; j++) {
      int fd = ev[j].data.fd;
      if (fd == s->room) {
        uint64_t v;
        ssize_t ignored = read(s->room, &v, sizeof v);
        (void)ignored;
      } else if (fd == lfd) {
        incoming = 1;
      } else {
        for (size_t i = 0; i < n; i++)
          if (w[i].fd == fd) w[i].events |= ev[j].events;
      }
    }
    t = now_ns();
    k = 0;
    for (size_t i = 0; i < n; i++) {
      uint32_t re = w[i].events;
      int v = 0;
      w[i].events = 0;
      if (re && !w[i].whole) {
        ssize_t got = recv(w[i].fd, head, sizeof head, MSG_PEEK);
        v = got > 0 ? head_state(head, (size_t)got)
            : got < 0 && (errno == EAGAIN || errno == EINTR) ? 0
                                                             : -1;
      } else if (re & (EPOLLHUP | EPOLLERR)) {
        v = -1;
      }
      if (v < 0) {
        close(w[i].fd); /* gone */
      } else if (v > 1) {
        refuse(w[i].fd, v);
      } else if (!w[i].whole && !v && t - w[i].since >= limit_ns) {
        refuse(w[i].fd, 408);
      } else {
        w[i].whole |= v;
        w[k++] = w[i];
      }
    }
    n = k;
    while (incoming) {
      /* Full: the oldest not whole makes way; when every one is whole, the
       * next connections wait in the kernel's queue. */
      size_t drop = n;
      if (n == max_pending)
        for (drop = 0; drop < n && w[drop].whole;) drop++;
      if (n == max_pending && drop == n) break;
      pending c = {.since = t, .len = sizeof c.addr};
      c.fd = accept4(lfd, (struct sockaddr *)&c.addr, &c.len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c.fd < 0) {
        /* Out of descriptors: try again shortly rather than spin. */
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
            errno == ENOMEM)
          accept_after = t + 100000000ull;
        break;
      }
      /* Bytes already there are reported by the first wait. */
      e = (struct epoll_event){.events = EPOLLIN | EPOLLRDHUP | EPOLLET,
                               .data.fd = c.fd};
      if (epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &e) != 0) {
        refuse(c.fd, 503);
        continue;
      }
      if (drop < n) {
        refuse(w[drop].fd, 408);
        memmove(w + drop, w + drop + 1, (--n - drop) * sizeof *w);
      }
      w[n++] = c;
    }
  }
  for (size_t i = 0; i < n; i++) close(w[i].fd);
  close(ep);
}

int mlprof__serve_address(const char *addr, unsigned port,
                          struct sockaddr_storage *ss) {
  memset(ss, 0, sizeof *ss);
  struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
  if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons((unsigned short)port);
  } else if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons((unsigned short)port);
  } else {
    return -1;
  }
  return 0;
}

int mlprof__serve_run(const mlprof__serve_opts *o) {
  static server s;
  memset(&s, 0, sizeof s);
  memcpy(s.allow, o->allow, sizeof s.allow);
  s.nallow = o->nallow;
  s.filter = o->filter;
  s.window_bytes = o->window_bytes;
  const char *dir = o->dir, *bind_addr = o->bind;
  if (!realpath(dir, s.root)) {
    fprintf(stderr, "mlprof serve: %s: %s\n", dir, strerror(errno));
    return 2;
  }
  struct stat st;
  if (stat(s.root, &st) != 0 || !S_ISDIR(st.st_mode)) {
    fprintf(stderr, "mlprof serve: %s is not a directory\n", dir);
    return 2;
  }
  struct sockaddr_storage ss = o->addr;
  /* epoll: connections are not bounded by select()'s FD_SETSIZE. The
   * listening socket is front_door's. */
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                   MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC |
                   MHD_ALLOW_SUSPEND_RESUME;
  struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
  if (ss.ss_family == AF_INET6) {
    s.loopback = IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
    flags |= MHD_USE_IPv6;
  } else {
    s.loopback = (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  }
  if (!s.loopback && !o->no_token) {
    unsigned char r[16];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
      fprintf(stderr, "mlprof serve: no random bytes for a token: %s\n",
              strerror(errno));
      return 1;
    }
    for (size_t i = 0; i < sizeof r; i++)
      snprintf(s.token + 2 * i, 3, "%02x", r[i]);
  }
  pthread_mutex_init(&s.lock, NULL);
  pthread_cond_init(&s.work, NULL);

  /* The signals stop the main thread only: block them in the server's
   * threads, which inherit this mask. */
  sigset_t mask, old;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &mask, &old);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  /* Slow clients cost a descriptor each, not a thread, and are bounded by
   * time (front_door): the open-files limit is raised as far as the places
   * need, and the places are sized by what it allows. */
  struct rlimit nofile;
  rlim_t want = MAX_PENDING + MAX_CONNECTIONS + 64u;
  size_t budget = 1024;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    if (nofile.rlim_cur < want) {
      nofile.rlim_cur = nofile.rlim_max < want ? nofile.rlim_max : want;
      setrlimit(RLIMIT_NOFILE, &nofile);
      getrlimit(RLIMIT_NOFILE, &nofile);
    }
    budget = nofile.rlim_cur > 128 ? (size_t)nofile.rlim_cur - 64u : 64u;
  }
  size_t max_pending = budget / 3 < MAX_PENDING ? budget / 3 : MAX_PENDING;
  unsigned max_live = budget - max_pending < MAX_CONNECTIONS
                          ? (unsigned)(budget - max_pending)
                          : MAX_CONNECTIONS;
  int lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  s.room = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  int one = 1;
  if (lfd >= 0) {
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ss.ss_family == AF_INET6)
      setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  }
  socklen_t sslen = ss.ss_family == AF_INET6 ? sizeof *v6 : sizeof *v4;
  struct MHD_Daemon *d = NULL;
  if (lfd >= 0 && s.room >= 0 &&
      bind(lfd, (struct sockaddr *)&ss, sslen) == 0 &&
      listen(lfd, BACKLOG) == 0 &&
      getsockname(lfd, (struct sockaddr *)&ss, &sslen) == 0) {
    errno = 0;
    /* Each of the pool's threads may hold every place: connections go to
     * them by descriptor number, and front_door keeps the count, so the
     * daemon never refuses one (a refusal resets the connection). */
    d = MHD_start_daemon(
        flags, 0, NULL, NULL, handle, &s, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned)POOL, MHD_OPTION_CONNECTION_LIMIT, max_live * POOL,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, &s,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL, MHD_OPTION_END);
  }
  if (!d) {
    fprintf(stderr, "mlprof serve: cannot listen on %s port %u: %s\n",
            bind_addr,
            ntohs(ss.ss_family == AF_INET6 ? v6->sin6_port : v4->sin_port),
            errno ? strerror(errno) : "libmicrohttpd failed");
    if (lfd >= 0) close(lfd);
    if (s.room >= 0) close(s.room);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return 1;
  }
  pthread_t builders[BUILDERS];
  size_t nbuilders = 0;
  int thread_err = 0;
  while (
      nbuilders < BUILDERS &&
      !(thread_err = pthread_create(&builders[nbuilders], NULL, builder, &s)))
    nbuilders++;
  if (!nbuilders) {
    fprintf(stderr, "mlprof serve: cannot start a thread: %s\n",
            strerror(thread_err));
    MHD_stop_daemon(d);
    close(lfd);
    close(s.room);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return 1;
  }
  unsigned real_port =
      ntohs(ss.ss_family == AF_INET6 ? v6->sin6_port : v4->sin_port);
  int v6addr = strchr(bind_addr, ':') != NULL;
  /* Cookies are shared by every port of a host: one name per port. */
  snprintf(s.set_cookie, sizeof s.set_cookie,
           "mlprof-token-%u=%s; Path=/; HttpOnly; SameSite=Strict", real_port,
           s.token);
  fprintf(stderr, "mlprof serve: %s on http://%s%s%s:%u/%s%s%s\n", s.root,
          v6addr ? "[" : "", bind_addr, v6addr ? "]" : "", real_port,
          s.token[0] ? "?token=" : "", s.token,
          s.loopback ? ""
          : s.token[0]
              ? " (not loopback: reachable from the network, with the token)"
              : " (not loopback: reachable from the network, --no-token: by "
                "anyone)");
  fflush(stderr);

  sigset_t wait_mask = old;
  sigdelset(&wait_mask, SIGINT);
  sigdelset(&wait_mask, SIGTERM);
  front_door(&s, d, lfd, max_pending, max_live, &wait_mask);
  fprintf(stderr, "mlprof serve: stopping (%s)\n",
          stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
  /* libmicrohttpd aborts when stopped with a connection suspended. */
  resume_all(&s);
  MHD_stop_daemon(d);
  close(lfd);
  close(s.room);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  /* A reading cannot be cut short: one still going is left to end with the
   * process, and what it uses is not freed. */
  pthread_mutex_lock(&s.lock);
  int reading = s.reading;
  pthread_mutex_unlock(&s.lock);
  for (size_t i = 0; i < nbuilders; i++)
    reading ? pthread_detach(builders[i]) : pthread_join(builders[i], NULL);
  if (reading) return 0;
  for (size_t i = 0; i < s.ncache; i++) {
    build_put(s.cache[i]->cur);
    pthread_mutex_destroy(&s.cache[i]->lock);
    free(s.cache[i]->rel);
    free(s.cache[i]);
  }
  free(s.cache);
  pthread_cond_destroy(&s.work);
  pthread_mutex_destroy(&s.lock);
  return 0;
}
