/* Latency objectives (`mlprof report --slo ZONE=200ms`, or on a gauge's
 * values `--slo latency_ms=200`): for each, the zone's (or the gauge's)
 * p50/p95/p99 and the calls (values) over the objective, overall and per
 * window of job time (a call belongs to the window where it ends, a value
 * to the window where it was set). The durations of the named zones and
 * the values of the named gauges are kept (16 bytes each). */
#include <errno.h>
#include <math.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "findings.h"
#include "marks.h"

int mlprof__duration_parse(const char *s, uint64_t *ns) {
  const char *p = s;
  double v = 0, scale = 1;
  int digits = 0;
  for (; *p >= '0' && *p <= '9'; p++, digits++) v = v * 10 + (*p - '0');
  if (*p == '.')
    for (p++; *p >= '0' && *p <= '9'; p++, digits++)
      v += (*p - '0') * (scale /= 10);
  if (!digits) return -1;
  static const struct {
    const char *unit;
    double ns;
  } units[] = {
      {"ns", 1}, {"us", 1e3}, {"\xc2\xb5s", 1e3}, {"ms", 1e6}, {"s", 1e9}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (strcmp(p, units[i].unit) == 0) {
      double t = v * units[i].ns;
      if (!(t >= 0.5) || t > 1.8e19) return -1;
      *ns = (uint64_t)(t + 0.5);
      return 0;
    }
  return -1;
}

int mlprof__slo_parse(const char *arg, mlprof__slo_spec *out, char *err,
                      size_t errlen) {
  const char *eq = strrchr(arg, '=');
  if (!eq || eq == arg) {
    snprintf(err, errlen,
             "--slo wants ZONE=DURATION (e.g. decode=200ms) or GAUGE=NUMBER "
             "(e.g. latency_ms=200), not '%s'",
             arg);
    return -1;
  }
  uint64_t ns = 0;
  double v = 0;
  int gauge = 0;
  if (mlprof__duration_parse(eq + 1, &ns)) {
    /* A number alone: an objective on the gauge of that name. */
    char *end;
    errno = 0;
    v = strtod(eq + 1, &end);
    gauge = end != eq + 1 && !*end && !errno && isfinite(v) &&
            (eq[1] == '-' || eq[1] == '.' || (eq[1] >= '0' && eq[1] <= '9'));
    if (!gauge) {
      snprintf(err, errlen,
               "--slo %s: '%s' is neither a duration (a positive number with "
               "a unit: ns, us, ms, s, e.g. 200ms) for a zone nor a number "
               "for a gauge",
               arg, eq + 1);
      return -1;
    }
  }
  char *zone = mlprof__dup(arg, (size_t)(eq - arg));
  if (!zone) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  *out = (mlprof__slo_spec){.zone = zone,
                            .zone_len = (size_t)(eq - arg),
                            .objective_ns = ns,
                            .gauge = gauge,
                            .objective = gauge ? v : (double)ns};
  return 0;
}

void mlprof__slo_spec_free(mlprof__slo_spec *s) {
  free(s->zone);
  s->zone = NULL;
}

/* A zone's call (its end, its duration in ns) or a gauge's value (its
 * time). Durations are exact as doubles up to 2^53 ns (104 days). */
typedef struct {
  uint64_t end;
  double v;
} call;

typedef struct {
  call *c;
  size_t n, cap;
} calls;

struct mlprof__slo_acc {
  const mlprof__slo_spec *spec;
  size_t n;
  uint64_t window_ns;
  calls *calls;
};

mlprof__slo_acc *mlprof__slo_begin(const mlprof__findings_opts *o) {
  mlprof__slo_acc *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->spec = o->slo;
  a->n = o->nslo;
  a->window_ns = o->slo_window_ns ? o->slo_window_ns : 1000000000ull;
  if (!(a->calls = calloc(a->n ? a->n : 1, sizeof *a->calls))) {
    free(a);
    return NULL;
  }
  return a;
}

int mlprof__slo_match(const mlprof__slo_acc *a, const char *name, size_t len,
                      int gauge) {
  for (size_t i = 0; i < a->n; i++)
    if (!a->spec[i].gauge == !gauge && a->spec[i].zone_len == len &&
        memcmp(a->spec[i].zone, name, len) == 0)
      return (int)i;
  return -1;
}

int mlprof__slo_add_value(mlprof__slo_acc *a, int index, uint64_t t_ns,
                          double v) {
  if (isnan(v)) return 0; /* no value: not over, not counted */
  calls *c = &a->calls[index];
  if (mlprof__grow(&c->c, &c->cap, c->n + 1, sizeof *c->c))
    return MLPROF_ENOMEM;
  c->c[c->n++] = (call){t_ns, v};
  return 0;
}

int mlprof__slo_add(mlprof__slo_acc *a, int index, uint64_t end_ns,
                    uint64_t dur_ns) {
  return mlprof__slo_add_value(a, index, end_ns, (double)dur_ns);
}

void mlprof__slo_abort(mlprof__slo_acc *a) {
  if (!a) return;
  for (size_t i = 0; i < a->n; i++) free(a->calls[i].c);
  free(a->calls);
  free(a);
}

static int call_cmp(const void *x, const void *y) {
  const call *a = x, *b = y;
  return a->end < b->end ? -1 : a->end > b->end;
}

static int dbl_cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

/* Percentile p of the n sorted values d, by the one nearest-rank rule
 * (mlprof__pct_rank, as mlprof__percentile_sorted's); 0 for none. */
static double pct(const double *d, size_t n, unsigned p) {
  return n ? d[mlprof__pct_rank(n, p) - 1] : 0;
}

/* A zone's duration as the _ns fields hold it; 0 for a gauge. */
static uint64_t ns_of(const mlprof__slo_spec *spec, double v) {
  return spec->gauge || !(v > 0) ? 0 : (uint64_t)(v + 0.5);
}

static int finish_one(const mlprof__slo_spec *spec, calls *c,
                      uint64_t window_ns, mlprof__slo_result *out) {
  /* A zone's objective is objective_ns (objective is its copy). */
  double objective = spec->gauge ? spec->objective : (double)spec->objective_ns;
  *out = (mlprof__slo_result){.objective_ns = spec->objective_ns,
                              .objective = objective,
                              .gauge = spec->gauge,
                              .window_ns = window_ns,
                              .zone_len = spec->zone_len};
  if (!(out->zone = mlprof__dup(spec->zone, spec->zone_len)))
    return MLPROF_ENOMEM;
  if (!c->n) return 0;
  double *d = malloc(c->n * sizeof *d);
  if (!d) return MLPROF_ENOMEM;
  mlprof__sort(c->c, c->n, sizeof *c->c, call_cmp);
  for (size_t i = 0; i < c->n; i++) {
    d[i] = c->c[i].v;
    out->over += d[i] > objective;
  }
  out->count = c->n;
  out->share_over = (double)out->over / (double)c->n;
  mlprof__sort(d, c->n, sizeof *d, dbl_cmp);
  out->p50 = pct(d, c->n, 50);
  out->p95 = pct(d, c->n, 95);
  out->p99 = pct(d, c->n, 99);
  out->max = d[c->n - 1];
  out->p50_ns = ns_of(spec, out->p50);
  out->p95_ns = ns_of(spec, out->p95);
  out->p99_ns = ns_of(spec, out->p99);
  out->max_ns = ns_of(spec, out->max);
  size_t cap = 0;
  int rc = 0;
  for (size_t i = 0; i < c->n && !rc;) {
    uint64_t w = c->c[i].end / window_ns;
    size_t k = i;
    while (k < c->n && c->c[k].end / window_ns == w) k++;
    if (mlprof__grow(&out->windows, &cap, out->nwindows + 1,
                     sizeof *out->windows)) {
      rc = MLPROF_ENOMEM;
      break;
    }
    mlprof__slo_window *win = &out->windows[out->nwindows++];
    *win = (mlprof__slo_window){.start_ns = w * window_ns, .count = k - i};
    for (size_t j = i; j < k; j++) {
      d[j - i] = c->c[j].v;
      win->over += d[j - i] > objective;
    }
    mlprof__sort(d, k - i, sizeof *d, dbl_cmp);
    win->p50 = pct(d, k - i, 50);
    win->p95 = pct(d, k - i, 95);
    win->p99 = pct(d, k - i, 99);
    win->p50_ns = ns_of(spec, win->p50);
    win->p95_ns = ns_of(spec, win->p95);
    win->p99_ns = ns_of(spec, win->p99);
    out->windows_missed += win->over > 0;
    i = k;
  }
  free(d);
  return rc;
}

int mlprof__slo_finish(mlprof__slo_acc *a, mlprof__findings *f) {
  int rc = 0;
  if (a->n && !(f->slo = calloc(a->n, sizeof *f->slo))) rc = MLPROF_ENOMEM;
  for (size_t i = 0; i < a->n && !rc; i++) {
    rc = finish_one(&a->spec[i], &a->calls[i], a->window_ns, &f->slo[i]);
    f->nslo = i + 1; /* freed with f, complete or not */
  }
  mlprof__slo_abort(a);
  return rc;
}
