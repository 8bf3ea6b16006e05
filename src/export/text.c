/* The report as aligned tables for a person at a terminal. */
#include <inttypes.h>
#include <math.h>
#include <mlprof.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export.h"

/* Widest a name column gets; longer names are cut with an ellipsis. */
#define NAME_WIDTH 48

typedef struct {
  size_t ncols;
  const char *const *heads;
  const char *align; /* one 'l' or 'r' per column */
  mlprof__out text;  /* the cells, each NUL-terminated */
  size_t *cells;     /* offset of each cell in text, row after row */
  size_t ncells, cap;
  int err;
} table;

static int table_open(table *t, const char *const *heads, const char *align) {
  memset(t, 0, sizeof *t);
  t->heads = heads;
  t->align = align;
  t->ncols = strlen(align);
  return mlprof__out_open(&t->text, -1);
}

static void table_close(table *t) {
  mlprof__out_close(&t->text);
  free(t->cells);
}

/* Starts a cell; the caller writes its text into t->text. */
static void cell_begin(table *t) {
  if (mlprof__grow(&t->cells, &t->cap, t->ncells + 1, sizeof *t->cells))
    t->err = MLPROF_ENOMEM;
  else
    t->cells[t->ncells++] = t->text.len;
}

static void cell_end(table *t) { mlprof__out_write(&t->text, "", 1); }

static void cell_printf(table *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void cell_printf(table *t, const char *fmt, ...) {
  char b[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b, sizeof b, fmt, ap);
  va_end(ap);
  cell_begin(t);
  mlprof__out_str(&t->text, b);
  cell_end(t);
}

/* Display width of valid UTF-8: one column per code point. */
static size_t width_of(const char *s) {
  size_t w = 0;
  for (; *s; s++) w += ((unsigned char)*s & 0xc0) != 0x80;
  return w;
}

/* An untrusted string, made safe for the terminal and cut to max columns. */
static void cell_name(table *t, const char *s, size_t n, size_t max) {
  cell_begin(t);
  size_t start = t->text.len;
  mlprof__out_text_str(&t->text, s, n);
  mlprof__out_write(&t->text, "", 1);
  if (t->text.err) return;
  t->text.len--;
  if (width_of(t->text.buf + start) > max) {
    size_t w = 0, i = start;
    for (; i < t->text.len; i++) {
      if (((unsigned char)t->text.buf[i] & 0xc0) != 0x80 && ++w == max) break;
    }
    t->text.len = i;
    mlprof__out_str(&t->text, "\xe2\x80\xa6"); /* ellipsis */
  }
  cell_end(t);
}

/* A duration with a unit that keeps 3 significant digits: 812 ns, 1.25 µs,
 * 12.5 ms, 3.41 s. */
static void fmt_dur(char *b, size_t len, uint64_t ns) {
  static const struct {
    double div;
    const char *unit;
  } units[] = {{1e9, "s"}, {1e6, "ms"}, {1e3, "\xc2\xb5s"}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if ((double)ns < units[i].div) continue;
    double v = (double)ns / units[i].div;
    snprintf(b, len,
             v < 10    ? "%.2f %s"
             : v < 100 ? "%.1f %s"
                       : "%.0f %s",
             v, units[i].unit);
    return;
  }
  snprintf(b, len, "%" PRIu64 " ns", ns);
}

static void cell_dur(table *t, uint64_t ns) {
  char b[32];
  fmt_dur(b, sizeof b, ns);
  cell_printf(t, "%s", b);
}

/* A rate or a measured value, short: 950, 12.3k, 4.56M. */
static void cell_num(table *t, double v) {
  if (!isfinite(v)) {
    cell_printf(t, "-");
    return;
  }
  double a = fabs(v);
  if (a >= 1e12)
    cell_printf(t, "%.3gT", v / 1e12);
  else if (a >= 1e9)
    cell_printf(t, "%.3gG", v / 1e9);
  else if (a >= 1e6)
    cell_printf(t, "%.3gM", v / 1e6);
  else if (a >= 1e4)
    cell_printf(t, "%.3gk", v / 1e3);
  else
    cell_printf(t, "%.4g", v);
}

static void pad(mlprof__out *o, size_t n) {
  static const char spaces[] = "                                ";
  while (n > 0) {
    size_t k = n < sizeof spaces - 1 ? n : sizeof spaces - 1;
    mlprof__out_write(o, spaces, k);
    n -= k;
  }
}

static int table_print(table *t, mlprof__out *o) {
  if (t->err || t->text.err) return t->err ? t->err : t->text.err;
  size_t *w = calloc(t->ncols, sizeof *w);
  if (!w) return MLPROF_ENOMEM;
  for (size_t c = 0; c < t->ncols; c++) w[c] = width_of(t->heads[c]);
  for (size_t i = 0; i < t->ncells; i++) {
    size_t cw = width_of(t->text.buf + t->cells[i]);
    if (cw > w[i % t->ncols]) w[i % t->ncols] = cw;
  }
  size_t rows = t->ncells / t->ncols;
  for (size_t r = 0; r <= rows; r++) {
    mlprof__out_lit(o, "  ");
    for (size_t c = 0; c < t->ncols; c++) {
      const char *s =
          r == 0 ? t->heads[c] : t->text.buf + t->cells[(r - 1) * t->ncols + c];
      size_t sw = width_of(s), gap = w[c] - sw;
      int last = c + 1 == t->ncols;
      if (t->align[c] == 'r') pad(o, gap);
      mlprof__out_str(o, s);
      if (t->align[c] == 'l' && !last) pad(o, gap);
      if (!last) mlprof__out_lit(o, "  ");
    }
    mlprof__out_lit(o, "\n");
  }
  free(w);
  return 0;
}

static int finish_table(table *t, mlprof__out *o) {
  int rc = table_print(t, o);
  table_close(t);
  return rc;
}

static int zones_section(const mlprof__report *r, mlprof__out *o) {
  if (!r->nzones) {
    mlprof__out_lit(o, "\nNo zones recorded.\n");
    return 0;
  }
  mlprof__out_printf(o, "\nZones by %s", mlprof__sort_key_name(r->sort));
  if (r->norder < r->nzones)
    mlprof__out_printf(o, " (top %zu of %zu; --top 0 shows all)", r->norder,
                       r->nzones);
  mlprof__out_lit(o, "\n");
  static const char *const heads[] = {
      "zone", "category", "count", "total", "self", "mean", "std",
      "min",  "p50",      "p90",   "p95",   "p99",  "max",  "wall%"};
  table t;
  if (table_open(&t, heads, "llrrrrrrrrrrrr")) return MLPROF_ENOMEM;
  int any_units = 0;
  for (size_t i = 0; i < r->norder; i++) {
    const mlprof__zone_stats *z = &r->zones[r->order[i]];
    any_units |= z->nunits > 0;
    cell_name(&t, z->name, z->name_len, NAME_WIDTH);
    cell_printf(&t, "%s",
                z->category ? mlprof__category_name(z->category) : "");
    cell_printf(&t, "%" PRIu64, z->count);
    cell_dur(&t, z->total_ns);
    cell_dur(&t, z->self_ns);
    cell_dur(&t, mlprof__round_ns(z->mean_ns));
    cell_dur(&t, mlprof__round_ns(z->std_ns));
    cell_dur(&t, z->min_ns);
    cell_dur(&t, z->p50_ns);
    cell_dur(&t, z->p90_ns);
    cell_dur(&t, z->p95_ns);
    cell_dur(&t, z->p99_ns);
    cell_dur(&t, z->max_ns);
    cell_printf(&t, "%.1f", z->share * 100);
  }
  int rc = finish_table(&t, o);
  if (rc || !any_units) return rc;

  mlprof__out_lit(o, "\nThroughput by zone (per second of the zone's time)\n");
  static const char *const uheads[] = {"zone", "unit", "units", "per s"};
  if (table_open(&t, uheads, "llrr")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < r->norder; i++) {
    const mlprof__zone_stats *z = &r->zones[r->order[i]];
    for (size_t k = 0; k < z->nunits; k++) {
      const mlprof__unit_stats *u = &r->units[z->units[k].unit];
      cell_name(&t, z->name, z->name_len, NAME_WIDTH);
      cell_name(&t, u->name, u->name_len, NAME_WIDTH);
      cell_printf(&t, "%" PRIu64, z->units[k].n);
      cell_num(&t, z->units[k].per_s);
    }
  }
  return finish_table(&t, o);
}

static int procs_section(const mlprof__report *r, mlprof__out *o) {
  mlprof__out_lit(o, "\nProcesses\n");
  static const char *const heads[] = {"pid",  "ppid",   "rank",    "host",
                                      "wall", "spans",  "threads", "dropped",
                                      "end",  "command"};
  table t;
  if (table_open(&t, heads, "rrrlrrrrll")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < r->nprocs; i++) {
    const mlprof__proc_stats *p = &r->procs[i];
    cell_printf(&t, "%" PRIu64, p->pid);
    cell_printf(&t, "%" PRIu64, p->ppid);
    if (p->rank >= 0)
      cell_printf(&t, "%" PRId64, p->rank);
    else
      cell_printf(&t, "-");
    cell_name(&t, p->hostname, strlen(p->hostname), 24);
    cell_dur(&t, p->wall_ns);
    cell_printf(&t, "%" PRIu64, p->spans);
    cell_printf(&t, "%zu", p->threads);
    cell_printf(&t, "%" PRIu64, p->dropped);
    cell_printf(&t, "%s",
                p->read_error[0] ? "read error"
                : p->clean_end   ? "clean"
                                 : "killed");
    cell_name(&t, p->cmdline, strlen(p->cmdline), 60);
  }
  return finish_table(&t, o);
}

static int threads_section(const mlprof__report *r, mlprof__out *o) {
  if (!r->nthreads) return 0;
  mlprof__out_lit(o, "\nThreads (busy: time in top-level zones)\n");
  static const char *const heads[] = {"pid",  "tid",   "name",   "spans",
                                      "busy", "busy%", "dropped"};
  table t;
  if (table_open(&t, heads, "rrlrrrr")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < r->nthreads; i++) {
    const mlprof__thread_stats *th = &r->threads[i];
    uint64_t wall = r->procs[th->proc].wall_ns;
    cell_printf(&t, "%" PRIu64, th->pid);
    cell_printf(&t, "%" PRIu64, th->tid);
    cell_name(&t, th->name, th->name_len, 32);
    cell_printf(&t, "%" PRIu64, th->spans);
    cell_dur(&t, th->busy_ns);
    cell_printf(&t, "%.1f",
                wall ? 100.0 * (double)th->busy_ns / (double)wall : 0.0);
    cell_printf(&t, "%" PRIu64, th->dropped);
  }
  return finish_table(&t, o);
}

static int steps_section(const mlprof__report *r, mlprof__out *o) {
  size_t any = 0;
  for (size_t i = 0; i < r->nthreads; i++) any += r->threads[i].steps > 0;
  if (!any) return 0;
  mlprof__out_lit(o, "\nSteps (interval between consecutive step marks)\n");
  static const char *const heads[] = {"pid", "tid", "steps", "mean", "p50"};
  table t;
  if (table_open(&t, heads, "rrrrr")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < r->nthreads; i++) {
    const mlprof__thread_stats *th = &r->threads[i];
    if (!th->steps) continue;
    cell_printf(&t, "%" PRIu64, th->pid);
    cell_printf(&t, "%" PRIu64, th->tid);
    cell_printf(&t, "%" PRIu64, th->steps);
    cell_dur(&t, th->step_mean_ns);
    cell_dur(&t, th->step_p50_ns);
  }
  return finish_table(&t, o);
}

static int counters_section(const mlprof__report *r, mlprof__out *o) {
  if (!r->ncounters) return 0;
  mlprof__out_lit(o, "\nCounters\n");
  static const char *const heads[] = {"counter", "count", "min",
                                      "max",     "mean",  "last"};
  table t;
  if (table_open(&t, heads, "lrrrrr")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < r->ncounters; i++) {
    const mlprof__counter_stats *c = &r->counters[i];
    cell_name(&t, c->name, c->name_len, NAME_WIDTH);
    cell_printf(&t, "%" PRIu64, c->count);
    cell_num(&t, c->min);
    cell_num(&t, c->max);
    cell_num(&t, c->mean);
    cell_num(&t, c->last);
  }
  return finish_table(&t, o);
}

static int units_section(const mlprof__report *r, mlprof__out *o) {
  if (!r->nunits) return 0;
  mlprof__out_lit(o, "\nUnits (throughput over the job's wall time)\n");
  static const char *const heads[] = {"unit", "total", "per s",
                                      "outside zones"};
  table t;
  if (table_open(&t, heads, "lrrr")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < r->nunits; i++) {
    const mlprof__unit_stats *u = &r->units[i];
    cell_name(&t, u->name, u->name_len, NAME_WIDTH);
    cell_printf(&t, "%" PRIu64, u->total);
    cell_num(&t, u->per_s);
    cell_printf(&t, "%" PRIu64, u->outside);
  }
  return finish_table(&t, o);
}

static int open_section(const mlprof__report *r, mlprof__out *o) {
  if (!r->nopen) return 0;
  mlprof__out_lit(o, "\nZones still open at the end\n");
  static const char *const heads[] = {"zone",  "pid",   "tid",
                                      "depth", "began", "open for"};
  table t;
  if (table_open(&t, heads, "lrrrrr")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < r->nopen; i++) {
    const mlprof__open_zone *z = &r->open[i];
    cell_name(&t, z->name, z->name_len, NAME_WIDTH);
    cell_printf(&t, "%" PRIu64, r->procs[z->proc].pid);
    cell_printf(&t, "%" PRIu64, r->threads[z->thread].tid);
    cell_printf(&t, "%" PRIu32, z->depth);
    cell_dur(&t, z->begin_ns);
    cell_dur(&t, z->open_ns);
  }
  return finish_table(&t, o);
}

static int meta_section(const mlprof__report *r, mlprof__out *o) {
  size_t any = 0;
  for (size_t i = 0; i < r->nprocs; i++) any += r->procs[i].nmeta;
  if (!any) return 0;
  mlprof__out_lit(o, "\nSession metadata\n");
  static const char *const heads[] = {"pid", "key", "value"};
  table t;
  if (table_open(&t, heads, "rll")) return MLPROF_ENOMEM;
  for (size_t i = 0; i < r->nprocs; i++) {
    const mlprof__proc_stats *p = &r->procs[i];
    for (size_t k = 0; k < p->nmeta; k++) {
      cell_printf(&t, "%" PRIu64, p->pid);
      cell_name(&t, p->meta[k].key, p->meta[k].key_len, 32);
      cell_name(&t, p->meta[k].value, p->meta[k].value_len, 72);
    }
  }
  return finish_table(&t, o);
}

int mlprof__export_text(const mlprof__report *r, mlprof__out *o) {
  char wall[32];
  fmt_dur(wall, sizeof wall, r->wall_ns);
  mlprof__out_printf(o,
                     "mlprof report: %zu process%s, %zu thread%s, %" PRIu64
                     " spans, wall %s, %" PRIu64 " events dropped\n",
                     r->nprocs, r->nprocs == 1 ? "" : "es", r->nthreads,
                     r->nthreads == 1 ? "" : "s", r->spans, wall, r->dropped);
  for (size_t i = 0; i < r->nwarnings; i++) {
    mlprof__out_lit(o, "warning: ");
    mlprof__out_text_str(o, r->warnings[i], strlen(r->warnings[i]));
    mlprof__out_lit(o, "\n");
  }
  int (*const sections[])(const mlprof__report *, mlprof__out *) = {
      zones_section,    procs_section, threads_section, steps_section,
      counters_section, units_section, open_section,    meta_section};
  for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
    int rc = sections[i](r, o);
    if (rc) return rc;
  }
  return o->err;
}
