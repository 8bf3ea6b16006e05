/* mlprof top: a live view of a running job, redrawn every interval from the
 * run directory's profiles through the analysis driver with a time window
 * (the last interval), in plain ANSI: no curses, so it works wherever a
 * terminal does (ssh, tmux), and as plain lines when it is not on one. */
#include <errno.h>
#include <getopt.h>
#include <mlprof.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "../analyze/analysis.h"
#include "../export/export.h"
#include "cli.h"

static const char usage[] =
    "usage: mlprof top [options] DIR\n"
    "\n"
    "A live view of a running job's run directory (mlprof run -o DIR),\n"
    "redrawn every interval from what the profiles hold so far: processes\n"
    "and threads, the step rate and step time with its breakdown, the\n"
    "busiest zones of the last interval, CPU, RSS and GPU memory per\n"
    "process, GPU use, warnings and findings. Each update reads the profiles\n"
    "through the same analysis as mlprof report --window (the last interval,\n"
    "less the profiles' flush interval: what is not on disk yet).\n"
    "On a terminal the screen is redrawn in place; otherwise (or with\n"
    "--plain) each update is printed as plain lines.\n"
    "\n"
    "options:\n"
    "  -i, --interval S   seconds between updates (default 1)\n"
    "  -c, --count N      stop after N updates (default: until q or Ctrl-C)\n"
    "  -s, --sort KEY     order zones by total (default), self, mean, p99\n"
    "                     or count\n"
    "  -n, --top N        zones shown (default: as many as fit; 15 in plain\n"
    "                     lines)\n"
    "      --plain        plain lines even on a terminal\n"
    "  -h, --help         show this help\n"
    "\n"
    "keys: q quits; t, s, m, p, c sort the zones by total, self, mean, p99,\n"
    "count.\n"
    "\n"
    "exit status: 0 done, 2 bad usage or DIR is not a directory.\n";

#define PLAIN_TOP 15
/* Data reach the files every flush interval (MLPROF_FLUSH_MS, 200 ms by
 * default): the window ends that long (and a little) before now. */
#define LAG_NS 250000000ull

static volatile sig_atomic_t stop;
static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

static int fail_usage(const char *fmt, const char *arg) {
  return mlprof__usage_error("top", fmt, arg);
}

typedef struct {
  const char *dir;
  uint64_t interval_ns;
  mlprof__sort_key sort;
  size_t top; /* 0: as many as fit */
  int tty;    /* redraw in place */
  unsigned rows, cols;
  /* Plain lines: hashes of the warnings printed, each printed once (on a
   * terminal the warnings stay on the screen, redrawn in place). */
  mlprof__map warned;
} view;

/* Now on the job's timeline: its time 0 is the earliest profile's start. */
static uint64_t job_now(const mlprof__job *job) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  const mlprof__job_profile *p = &job->profiles[0];
  uint64_t zero = p->start_wall_ns - p->offset_ns;
  return now > zero ? now - zero : 0;
}

/* Whether to show warning w (n bytes): on a terminal all of them (in
 * place, they do not scroll by), in plain lines those not shown before. */
static int show_warning(void *ctx, const char *w, size_t n) {
  view *v = ctx;
  if (v->tty) return 1;
  uint64_t h = mlprof__hash(w, n, MLPROF__HASH_START);
  if (mlprof__map_get(&v->warned, h) != MLPROF__NONE) return 0;
  return mlprof__map_put(&v->warned, h, 1) == 0; /* no memory: skip */
}

/* One update into o (memory): the job now, through the window. */
static void update(view *v, mlprof__out *o) {
  const char *dir = v->dir;
  mlprof__job job;
  char err[512];
  time_t wall = time(NULL);
  char clock[16];
  strftime(clock, sizeof clock, "%H:%M:%S", localtime(&wall));
  mlprof__out_lit(o, "mlprof top ");
  mlprof__out_text_str(o, dir, strlen(dir));
  mlprof__out_printf(o, "  %s", clock);
  if (mlprof__job_open(&job, &dir, 1, err, sizeof err)) {
    mlprof__out_lit(o, "  waiting: ");
    mlprof__out_text_str(o, err, strlen(err));
    mlprof__out_lit(o, "\n");
    return;
  }
  uint64_t now = job_now(&job), t1 = now > LAG_NS ? now - LAG_NS : 0;
  mlprof__filter f = {.window = 1,
                      .t0 = t1 > v->interval_ns ? t1 - v->interval_ns : 0,
                      .t1 = t1};
  if (f.t1 <= f.t0) f.t1 = f.t0 + 1;
  mlprof__analysis_opts ao;
  mlprof__analysis_opts_init(&ao);
  ao.want = MLPROF__ANALYSIS_FINDINGS;
  ao.filter = &f;
  ao.filter_must_match = 0; /* live: it may not have run yet */
  ao.sort = v->sort;
  /* The rest of the screen is the zones'. */
  ao.top = v->top                               ? v->top
           : v->tty && v->rows > 24 + job.count ? v->rows - 20 - job.count
           : v->tty                             ? 4
                                                : PLAIN_TOP;
  mlprof__analysis a;
  int rc = mlprof__analysis_run(&job, &ao, &a, err, sizeof err);
  mlprof__job_close(&job);
  if (rc) {
    mlprof__out_printf(o, "  %s\n", err);
    return;
  }
  mlprof__top_frame fr = {.job_ns = t1,
                          .window_ns = f.t1 - f.t0,
                          .sort = v->sort,
                          .show_warning = show_warning,
                          .ctx = v};
  mlprof__export_top_text(&a, &fr, o);
  mlprof__analysis_free(&a);
}

/* Writes the update: in place on a terminal (each line cut to its width,
 * no more lines than it has), else as it is, then a blank line. */
static void draw(const view *v, const mlprof__out *m) {
  mlprof__out o;
  if (mlprof__out_open(&o, STDOUT_FILENO)) return;
  if (!v->tty) {
    mlprof__out_write(&o, m->buf, m->len);
    mlprof__out_lit(&o, "\n");
  } else {
    mlprof__out_lit(&o, "\033[H");
    size_t row = 0;
    for (size_t i = 0; i < m->len && row < v->rows;) {
      const char *nl = memchr(m->buf + i, '\n', m->len - i);
      size_t n = nl ? (size_t)(nl - (m->buf + i)) : m->len - i;
      mlprof__out_write(&o, m->buf + i, n < v->cols ? n : v->cols);
      mlprof__out_lit(&o, "\033[K");
      if (++row < v->rows) mlprof__out_lit(&o, "\r\n");
      i += n + 1;
    }
    mlprof__out_lit(&o, "\033[J");
  }
  mlprof__out_flush(&o);
  mlprof__out_close(&o);
}

static void term_size(view *v) {
  struct winsize ws;
  v->rows = 24;
  v->cols = 80;
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
    v->rows = ws.ws_row;
    v->cols = ws.ws_col;
  }
}

/* Waits up to ns for a key; applies it. Returns 1 when it means quit. */
static int wait_key(view *v, int keys, uint64_t ns) {
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    uint64_t spent = (uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000ull +
                     (uint64_t)t.tv_nsec - (uint64_t)t0.tv_nsec;
    if (stop) return 1;
    if (spent >= ns) return 0;
    int ms = (int)((ns - spent + 999999) / 1000000);
    struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
    int n = poll(&p, keys ? 1 : 0, ms);
    if (n <= 0 || !(p.revents & POLLIN)) continue;
    char c;
    if (read(STDIN_FILENO, &c, 1) != 1) return 0; /* end of input */
    static const struct {
      char key;
      mlprof__sort_key sort;
    } sorts[] = {{'t', MLPROF__SORT_TOTAL},
                 {'s', MLPROF__SORT_SELF},
                 {'m', MLPROF__SORT_MEAN},
                 {'p', MLPROF__SORT_P99},
                 {'c', MLPROF__SORT_COUNT}};
    if (c == 'q' || c == 'Q') return 1;
    for (size_t i = 0; i < sizeof sorts / sizeof sorts[0]; i++)
      if (c == sorts[i].key) {
        v->sort = sorts[i].sort;
        return 0; /* redraw now */
      }
  }
}

enum { OPT_PLAIN = 1000 };

void mlprof__top_cmd_init(mlprof__top_cmd *c) {
  memset(c, 0, sizeof *c);
  c->interval_ns = 1000000000ull;
  c->sort = MLPROF__SORT_TOTAL;
}

/* Reads the arguments into *c. Returns -1 to go on, else the exit status
 * (0 after --help). */
static int parse(int argc, char **argv, mlprof__top_cmd *c) {
  static const struct option options[] = {
      {"interval", required_argument, NULL, 'i'},
      {"count", required_argument, NULL, 'c'},
      {"sort", required_argument, NULL, 's'},
      {"top", required_argument, NULL, 'n'},
      {"plain", no_argument, NULL, OPT_PLAIN},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  opterr = 0;
  optind = 0; /* 0, not 1: GNU getopt then also resets its ordering mode */
  int ch;
  while ((ch = getopt_long(argc, argv, ":i:c:s:n:h", options, NULL)) != -1) {
    switch (ch) {
      case 'i': {
        char *end = NULL;
        double s = strtod(optarg, &end);
        if (end == optarg || *end || !(s >= 0.1) || s > 3600)
          return fail_usage(
              "--interval wants seconds between 0.1 and 3600, not '%s'",
              optarg);
        c->interval_ns = (uint64_t)(s * 1e9);
        break;
      }
      case 'c':
        if (mlprof__parse_count(optarg, &c->count) || !c->count)
          return fail_usage(
              "--count wants a number of updates (1 or more), "
              "not '%s'",
              optarg);
        break;
      case 's':
        if (mlprof__sort_key_parse(optarg, &c->sort))
          return fail_usage(
              "unknown sort key '%s': use total, self, mean, p99 or count",
              optarg);
        break;
      case 'n':
        if (mlprof__parse_count(optarg, &c->top))
          return fail_usage(
              "--top wants a whole number (0: as many as fit), "
              "not '%s'",
              optarg);
        break;
      case OPT_PLAIN:
        c->plain = 1;
        break;
      case 'h':
        fputs(usage, stdout);
        return 0;
      default:
        return mlprof__option_error("top", ch, argv, optind, optopt);
    }
  }
  if (argc - optind != 1)
    return fail_usage("%s", optind >= argc ? "no run directory given"
                                           : "wants one run directory");
  c->dir = argv[optind];
  return -1;
}

int mlprof__cmd_top(int argc, char **argv) {
  mlprof__top_cmd c;
  mlprof__top_cmd_init(&c);
  int rc = parse(argc, argv, &c);
  return rc < 0 ? mlprof__top_cmd_run(&c) : rc;
}

int mlprof__top_cmd_run(const mlprof__top_cmd *c) {
  view v = {.dir = c->dir,
            .interval_ns = c->interval_ns,
            .sort = c->sort,
            .top = c->top};
  uint64_t count = c->count;
  struct stat st;
  if (stat(v.dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    fprintf(
        stderr, "mlprof top: %s: %s\n", v.dir,
        errno && stat(v.dir, &st) != 0 ? strerror(errno) : "not a directory");
    return 2;
  }
  v.tty = !c->plain && isatty(STDOUT_FILENO);
  int keys = isatty(STDIN_FILENO);
  struct termios saved, raw;
  if (keys && tcgetattr(STDIN_FILENO, &saved) == 0) {
    raw = saved;
    raw.c_lflag &= (tcflag_t) ~(ICANON | ECHO);
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    tcsetattr(STDIN_FILENO, TCSANOW, &raw);
  } else {
    keys = 0;
  }
  struct sigaction sa, old_int, old_term;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  if (v.tty) fputs("\033[?1049h\033[?25l\033[H\033[2J", stdout);
  fflush(stdout);
  for (uint64_t n = 0; !stop && (!count || n < count); n++) {
    if (v.tty) term_size(&v);
    mlprof__out m;
    if (mlprof__out_open(&m, -1)) break;
    update(&v, &m);
    draw(&v, &m);
    mlprof__out_close(&m);
    if (count && n + 1 == count) break;
    if (wait_key(&v, keys, v.interval_ns)) break;
  }
  if (v.tty) fputs("\033[?25h\033[?1049l", stdout);
  fflush(stdout);
  if (keys) tcsetattr(STDIN_FILENO, TCSANOW, &saved);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  mlprof__map_clear(&v.warned);
  return 0;
}
