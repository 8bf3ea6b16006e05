/* Samples of a job summarised: see resources.h for the definitions. */
#include "resources.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../format/wire.h"
#include "mlprof.h"
#include "stats.h"

/* g CO2e per kWh: the world's average electricity mix, as CodeCarbon and
 * the IEA use it; set MLPROF_CARBON_G_PER_KWH for a local grid. */
#define WORLD_INTENSITY 475.0

#define NTREE 8
static const char *const tree_measures[NTREE] = {
    "rss_bytes",  "cpu_pct",     "threads",    "gpu_mem_bytes",
    "read_bytes", "write_bytes", "open_files", "runq_wait_pct"};

/* A subject's samples on the job's timeline, for the zone averages and for
 * the analyses that read mlprof__resources.series: columns whose
 * meaning depends on the subject (MLPROF__COL_* in resources.h). */
typedef struct {
  uint64_t key; /* host index << 32 | pid, GPU index, or 0 (system) */
  uint64_t *t;
  double *v[MLPROF__NCOLS]; /* NAN where absent */
  size_t n, cap;
} series;

/* A cumulative energy counter within one profile: first and last value. */
typedef struct {
  uint64_t key; /* subject key */
  int gpu;
  uint64_t t0, t1;
  double v0, v1;
} energy_span;

/* A source status read in the current profile. */
typedef struct {
  const char *name, *reason;
  int available;
} status;

struct mlprof__resources_builder {
  mlprof__resources *r;
  mlprof__map strings; /* FNV-1a hash -> index in r->strings */
  const char **hosts;
  size_t nhosts, hosts_cap;
  mlprof__map subjects; /* host << 40 | subject << 32 | id -> index */
  size_t subjects_cap, sources_cap;
  series *procs; /* process series */
  size_t nprocs, procs_cap;
  mlprof__map proc_index;
  series *gpus; /* GPU series: utilisation, memory used */
  size_t ngpus, gpus_cap;
  mlprof__map gpu_index;
  series *sys; /* system series per host: iowait, memory, swap */
  size_t nsys, sys_cap;
  mlprof__map sys_index;
  mlprof__map tree_pids; /* host << 32 | pid */
  energy_span *best;     /* per energy subject: the profile that saw most */
  size_t nbest, best_cap;
  /* the profile being read */
  const mlprof__job_profile *p;
  size_t profile, host;
  mlprof__map names; /* name id -> string index */
  energy_span *cur;  /* energy counters of this profile */
  size_t ncur, cur_cap;
  status *st; /* source statuses of this profile */
  size_t nst, st_cap;
  uint64_t tick_t;
  int tick_rows;
  double tick_sum[NTREE];
  int tick_has[NTREE];
  int err;
};

typedef struct mlprof__resources_builder builder;

/* The index in r->strings of a copy of s (n bytes), or MLPROF__NONE when out
 * of memory. Strings are compared up to their first NUL, as every consumer
 * of these strings reads them. */
static uint32_t intern_at(builder *b, const char *s, size_t n) {
  const char *nul = memchr(s, '\0', n);
  if (nul) n = (size_t)(nul - s);
  uint64_t h = mlprof__hash(s, n, MLPROF__HASH_START);
  uint32_t at = mlprof__map_get(&b->strings, h);
  mlprof__resources *r = b->r;
  if (at != MLPROF__NONE && strlen(r->strings[at]) == n &&
      memcmp(r->strings[at], s, n) == 0)
    return at;
  char *d = mlprof__dup(s, n);
  if (!d || r->nstrings >= MLPROF__NONE - 1 ||
      mlprof__grow(&r->strings, &r->strings_cap, r->nstrings + 1,
                   sizeof *r->strings) != 0) {
    free(d);
    b->err = MLPROF_ENOMEM;
    return MLPROF__NONE;
  }
  r->strings[r->nstrings] = d;
  /* A hash collision keeps the first string in the map; the second is
   * simply not shared. */
  if (at == MLPROF__NONE &&
      mlprof__map_put(&b->strings, h, (uint32_t)r->nstrings) != 0)
    b->err = MLPROF_ENOMEM;
  return (uint32_t)r->nstrings++;
}

static const char *intern(builder *b, const char *s, size_t n) {
  uint32_t at = intern_at(b, s, n);
  return at == MLPROF__NONE ? "" : b->r->strings[at];
}

/* The string of a name id of the current profile, "" if unknown. */
static const char *name_of(builder *b, uint32_t id) {
  uint32_t at = mlprof__map_get(&b->names, id);
  return at == MLPROF__NONE ? "" : b->r->strings[at];
}

static int on_name(void *ud, const mlprof__name *n) {
  builder *b = ud;
  /* Only measure names and strings (labels, reasons) appear in samples. */
  if (n->kind != MLPROF__NAME_MEASURE && n->kind != MLPROF__NAME_STRING)
    return 0;
  uint32_t at = intern_at(b, n->name, n->name_len);
  if (at == MLPROF__NONE || mlprof__map_put(&b->names, n->id, at) != 0)
    return MLPROF_ENOMEM;
  return b->err;
}

static int on_source(void *ud, const char *name, size_t nlen, int available,
                     const char *reason, size_t rlen) {
  builder *b = ud;
  b->r->sampled = 1;
  const char *n = intern(b, name, nlen);
  const char *why = available ? "" : intern(b, reason, rlen);
  /* A later status of the same source (it failed mid-run) replaces it. */
  size_t i = 0;
  while (i < b->nst && b->st[i].name != n) i++;
  if (i == b->nst) {
    if (mlprof__grow(&b->st, &b->st_cap, b->nst + 1, sizeof *b->st) != 0)
      return MLPROF_ENOMEM;
    b->nst++;
  }
  b->st[i] = (status){n, why, available};
  return b->err;
}

static uint64_t subject_key(size_t host, uint8_t kind, uint64_t id) {
  return (uint64_t)host << 40 | (uint64_t)kind << 32 | (id & 0xffffffffu);
}

static mlprof__subject_stats *subject(builder *b, uint8_t kind, uint64_t id,
                                      const char *label) {
  mlprof__resources *r = b->r;
  uint64_t key = subject_key(b->host, kind, id);
  uint32_t at = mlprof__map_get(&b->subjects, key);
  if (at == MLPROF__NONE) {
    if (mlprof__grow(&r->subjects, &b->subjects_cap, r->nsubjects + 1,
                     sizeof *r->subjects) != 0 ||
        mlprof__map_put(&b->subjects, key, (uint32_t)r->nsubjects) != 0) {
      b->err = MLPROF_ENOMEM;
      return NULL;
    }
    at = (uint32_t)r->nsubjects++;
    r->subjects[at] = (mlprof__subject_stats){.subject = kind,
                                              .id = id,
                                              .label = "",
                                              .hostname = b->hosts[b->host],
                                              .profile = b->profile,
                                              .process = -1};
  }
  if (label && *label) r->subjects[at].label = label;
  return &r->subjects[at];
}

static mlprof__measure_stats *measure(builder *b, mlprof__subject_stats *s,
                                      const char *name) {
  for (size_t i = 0; i < s->nm; i++)
    if (s->m[i].name == name) return &s->m[i];
  mlprof__measure_stats *m = realloc(s->m, (s->nm + 1) * sizeof *m);
  if (!m) {
    b->err = MLPROF_ENOMEM;
    return NULL;
  }
  s->m = m;
  m = &s->m[s->nm++];
  *m = (mlprof__measure_stats){.name = name, .min = INFINITY, .max = -INFINITY};
  return m;
}

/* first and last go by time: profiles of one host are read one after the
 * other, not in time order. */
static void add_value(mlprof__measure_stats *m, double v, uint64_t t) {
  if (!isfinite(v)) return;
  if (!m->count || t < m->first_ns) {
    m->first = v;
    m->first_ns = t;
  }
  if (!m->count || t >= m->last_ns) {
    m->last = v;
    m->last_ns = t;
  }
  m->count++;
  m->mean += v; /* the sum until finish_measures() */
  if (v < m->min) m->min = v;
  if (v > m->max) m->max = v;
}

static series *series_for(builder *b, series **arr, size_t *n, size_t *cap,
                          mlprof__map *index, uint64_t key) {
  uint32_t at = mlprof__map_get(index, key);
  if (at == MLPROF__NONE) {
    if (mlprof__grow(arr, cap, *n + 1, sizeof **arr) != 0 ||
        mlprof__map_put(index, key, (uint32_t)*n) != 0) {
      b->err = MLPROF_ENOMEM;
      return NULL;
    }
    at = (uint32_t)(*n)++;
    (*arr)[at] = (series){.key = key};
  }
  return &(*arr)[at];
}

static void series_add(builder *b, series *s, uint64_t t, double v0, double v1,
                       double v2, double v3) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    uint64_t *nt = realloc(s->t, cap * sizeof *nt);
    if (!nt) {
      b->err = MLPROF_ENOMEM;
      return;
    }
    s->t = nt;
    for (int c = 0; c < MLPROF__NCOLS; c++) {
      double *nv = realloc(s->v[c], cap * sizeof *nv);
      if (!nv) {
        b->err = MLPROF_ENOMEM;
        return;
      }
      s->v[c] = nv;
    }
    s->cap = cap;
  }
  s->t[s->n] = t;
  s->v[0][s->n] = v0;
  s->v[1][s->n] = v1;
  s->v[2][s->n] = v2;
  s->v[3][s->n++] = v3;
}

/* Moves the part of the run-queue wait in the row just added to s that was
 * waited before its interval (runq_wait_before_pct, pct of that interval)
 * back over the intervals before it, one core's worth each, latest first:
 * a thread's wait is counted when it gets a CPU, all of it, and lies just
 * before. What no earlier interval takes stays where it was. */
static void runq_back(series *s, double pct) {
  size_t n = s->n;
  if (n < 2 || !(pct > 0) || s->t[n - 1] <= s->t[n - 2]) return;
  double *v = s->v[MLPROF__COL_RUNQ];
  double dt = (double)(s->t[n - 1] - s->t[n - 2]);
  double left = pct / 100 * dt;
  v[n - 1] -= pct;
  for (size_t j = n - 2; j > 0 && left > 0 && !isnan(v[j]); j--) {
    if (s->t[j] <= s->t[j - 1]) break;
    double room = (double)(s->t[j] - s->t[j - 1]);
    double take = left < room ? left : room;
    v[j] += take / room * 100;
    left -= take;
  }
  v[n - 1] += left / dt * 100;
  if (v[n - 1] < 0) v[n - 1] = 0;
}

/* Closes the tick being summed into the tree totals. */
static void tick_close(builder *b) {
  if (!b->tick_rows) return;
  mlprof__subject_stats *t = &b->r->tree;
  for (int i = 0; i < NTREE; i++) {
    if (!b->tick_has[i]) continue;
    mlprof__measure_stats *m =
        measure(b, t, intern(b, tree_measures[i], strlen(tree_measures[i])));
    if (m) add_value(m, b->tick_sum[i], b->tick_t + b->p->offset_ns);
  }
  t->rows++;
  b->tick_rows = 0;
  memset(b->tick_sum, 0, sizeof b->tick_sum);
  memset(b->tick_has, 0, sizeof b->tick_has);
}

/* Notes a value of a cumulative energy counter of the current profile. */
static void energy_add(builder *b, uint64_t key, int gpu, uint64_t t,
                       double v) {
  if (!isfinite(v)) return;
  size_t i = 0;
  while (i < b->ncur && b->cur[i].key != key) i++;
  if (i == b->ncur) {
    if (mlprof__grow(&b->cur, &b->cur_cap, b->ncur + 1, sizeof *b->cur)) {
      b->err = MLPROF_ENOMEM;
      return;
    }
    b->cur[b->ncur++] = (energy_span){key, gpu, t, t, v, v};
    return;
  }
  energy_span *e = &b->cur[i];
  if (t < e->t0) e->t0 = t, e->v0 = v;
  if (t >= e->t1) e->t1 = t, e->v1 = v;
}

static int on_sample(void *ud, const mlprof__sample_row *row) {
  builder *b = ud;
  b->r->sampled = 1;
  mlprof__subject_stats *s = subject(
      b, row->subject, row->id, row->label ? name_of(b, row->label) : NULL);
  if (!s) return b->err;
  uint64_t t = row->t + b->p->offset_ns;
  if (!s->rows || t < s->first_ns) s->first_ns = t;
  if (!s->rows || t > s->last_ns) s->last_ns = t;
  s->rows++;
  double cpu = NAN, rss = NAN, util = NAN, gmem = NAN, gused = NAN, runq = NAN;
  double runq_before = NAN;
  double iowait = NAN, avail = NAN, swap = NAN, idle = NAN;
  /* Rows of other processes than the profile's own: a tree sampled from
   * outside, summed tick by tick. */
  int tree = row->subject == MLPROF__SUBJECT_PROCESS && row->id != b->p->pid;
  if (tree && (row->t != b->tick_t || !b->tick_rows)) {
    tick_close(b);
    b->tick_t = row->t;
  }
  if (tree) {
    b->tick_rows++;
    uint64_t pk = (uint64_t)b->host << 32 | (row->id & 0xffffffffu);
    if (mlprof__map_get(&b->tree_pids, pk) == MLPROF__NONE) {
      if (mlprof__map_put(&b->tree_pids, pk, 1) != 0) return MLPROF_ENOMEM;
      b->r->tree_processes++;
    }
  }
  for (uint32_t i = 0; i < row->n; i++) {
    const char *name = name_of(b, row->m[i].name);
    mlprof__measure_stats *m = measure(b, s, name);
    if (!m) return b->err;
    if (!row->m[i].valid) {
      m->absent = name_of(b, row->m[i].reason);
      m->absent_count++;
      continue;
    }
    double v = row->m[i].value;
    add_value(m, v, t);
    if (strcmp(name, "cpu_pct") == 0)
      cpu = v;
    else if (strcmp(name, "runq_wait_pct") == 0)
      runq = v;
    else if (strcmp(name, "runq_wait_before_pct") == 0)
      runq_before = v;
    else if (strcmp(name, "rss_bytes") == 0)
      rss = v;
    else if (strcmp(name, "gpu_util_pct") == 0)
      util = v;
    else if (strcmp(name, "gpu_mem_bytes") == 0)
      gmem = v;
    else if (strcmp(name, "gpu_mem_used_bytes") == 0)
      gused = v;
    else if (strcmp(name, "cpu_iowait_pct") == 0)
      iowait = v;
    else if (strcmp(name, "mem_available_bytes") == 0)
      avail = v;
    else if (strcmp(name, "swap_used_bytes") == 0)
      swap = v;
    else if (strcmp(name, "cpu_idle_pct") == 0)
      idle = v;
    else if (strcmp(name, "cpu_energy_j") == 0 &&
             row->subject == MLPROF__SUBJECT_SYSTEM)
      energy_add(b, subject_key(b->host, row->subject, row->id), 0, t, v);
    else if (strcmp(name, "gpu_energy_j") == 0 &&
             row->subject == MLPROF__SUBJECT_GPU)
      energy_add(b, subject_key(b->host, row->subject, row->id), 1, t, v);
    if (tree && isfinite(v))
      for (int k = 0; k < NTREE; k++)
        if (strcmp(name, tree_measures[k]) == 0) {
          b->tick_sum[k] += v;
          b->tick_has[k] = 1;
        }
  }
  /* Rows with none of the series' measures add nothing. */
  if (row->subject == MLPROF__SUBJECT_PROCESS &&
      !(isnan(cpu) && isnan(rss) && isnan(gmem) && isnan(runq))) {
    series *ps =
        series_for(b, &b->procs, &b->nprocs, &b->procs_cap, &b->proc_index,
                   (uint64_t)b->host << 32 | (row->id & 0xffffffffu));
    if (ps) series_add(b, ps, t, cpu, rss, gmem, runq);
    if (ps && !b->err && !isnan(runq) && !isnan(runq_before))
      runq_back(ps, runq_before);
  } else if (row->subject == MLPROF__SUBJECT_GPU &&
             !(isnan(util) && isnan(gused))) {
    series *gs = series_for(b, &b->gpus, &b->ngpus, &b->gpus_cap, &b->gpu_index,
                            (uint64_t)b->host << 32 | (row->id & 0xffffffffu));
    if (gs) series_add(b, gs, t, util, gused, NAN, NAN);
  } else if (row->subject == MLPROF__SUBJECT_SYSTEM &&
             !(isnan(iowait) && isnan(avail) && isnan(swap) && isnan(idle))) {
    series *ss = series_for(b, &b->sys, &b->nsys, &b->sys_cap, &b->sys_index,
                            (uint64_t)b->host << 32);
    if (ss) series_add(b, ss, t, iowait, avail, swap, idle);
  }
  return b->err;
}

/* ---- zone averages (second pass) ------------------------------------------
 */

typedef struct {
  const char *zone;
  size_t len;
  double w[5], sum[5]; /* cpu, gpu, rss change, iowait, runq wait: weight
                          and weighted sum */
} zone_acc;

struct mlprof__zone_pass {
  mlprof__resources *r;
  const mlprof__series *proc; /* the current profile's process series, or
                                 NULL */
  const mlprof__series *sys;  /* its host's system series, or NULL */
  const char *host;           /* its host (a string of r) */
  uint64_t offset;
  zone_acc *zones;
  size_t nzones, cap;
  mlprof__map zone_of; /* name id of this profile -> zone index */
  mlprof__map by_hash; /* zone name hash -> zone index, across profiles */
  size_t hint[3];      /* mlprof__series_lower's: proc at begin, at end; sys */
};

typedef struct mlprof__zone_pass zpass;

typedef struct {
  const uint64_t *t;
  uint64_t x;
} time_key;

/* The times before x come first. */
static int time_below(const void *ctx, size_t i) {
  const time_key *k = ctx;
  return k->t[i] < k->x;
}

size_t mlprof__series_lower(const mlprof__series *s, uint64_t x, size_t *hint) {
  size_t n = s->n, h = hint && *hint <= n ? *hint : 0, lo, hi;
  /* The answer a lies in [lo, hi]: t[a - 1] < x (or a == 0) and t[a] >= x
   * (or a == n). */
  if (h < n && s->t[h] < x) {
    lo = hi = h + 1;
    for (size_t step = 1; hi < n && s->t[hi] < x; step *= 2) {
      lo = hi + 1;
      hi = lo + step < n ? lo + step : n;
    }
  } else {
    lo = hi = h;
    for (size_t step = 1; lo > 0 && s->t[lo - 1] >= x; step *= 2) {
      hi = lo - 1;
      lo = hi > step ? hi - step : 0;
    }
  }
  time_key key = {s->t, x};
  lo = mlprof__lower_bound(lo, hi, &key, time_below);
  if (hint) *hint = lo;
  return lo;
}

/* Mean of v over the samples covering [b, e], the first of them at index
 * i (mlprof__series_lower of b): those inside it, else the first one after
 * it. NAN when none. */
static double covering_mean(const mlprof__series *s, const double *v, size_t i,
                            uint64_t e) {
  double sum = 0;
  uint64_t n = 0;
  size_t k = i;
  for (; k < s->n && s->t[k] <= e; k++)
    if (!isnan(v[k])) {
      sum += v[k];
      n++;
    }
  if (n) return sum / (double)n;
  for (; k < s->n; k++)
    if (!isnan(v[k])) return v[k];
  return NAN;
}

static int z_name(void *ud, const mlprof__name *n) {
  zpass *z = ud;
  if (n->kind != MLPROF__NAME_ZONE) return 0;
  uint64_t h = mlprof__hash(n->name, n->name_len, MLPROF__HASH_START);
  uint32_t at = mlprof__map_get(&z->by_hash, h);
  if (at != MLPROF__NONE && (z->zones[at].len != n->name_len ||
                             memcmp(z->zones[at].zone, n->name, n->name_len)))
    at = MLPROF__NONE; /* a hash collision: a zone of its own */
  if (at == MLPROF__NONE) {
    if (mlprof__grow(&z->zones, &z->cap, z->nzones + 1, sizeof *z->zones) != 0)
      return MLPROF_ENOMEM;
    /* Kept whole (NULs included) to match the report's zone names. */
    char *copy = mlprof__dup(n->name, n->name_len);
    mlprof__resources *r = z->r;
    if (!copy || mlprof__grow(&r->strings, &r->strings_cap, r->nstrings + 1,
                              sizeof *r->strings) != 0) {
      free(copy);
      return MLPROF_ENOMEM;
    }
    r->strings[r->nstrings++] = copy;
    at = (uint32_t)z->nzones++;
    z->zones[at] = (zone_acc){copy, n->name_len, {0}, {0}};
    if (mlprof__map_get(&z->by_hash, h) == MLPROF__NONE &&
        mlprof__map_put(&z->by_hash, h, at) != 0)
      return MLPROF_ENOMEM;
  }
  return mlprof__map_put(&z->zone_of, n->id, at);
}

static int z_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                  uint64_t begin, uint64_t end) {
  zpass *z = ud;
  (void)tid;
  (void)depth;
  uint32_t at = mlprof__map_get(&z->zone_of, name);
  if (at == MLPROF__NONE) return 0;
  zone_acc *a = &z->zones[at];
  if (end < begin) end = begin;
  uint64_t b = begin + z->offset, e = end + z->offset;
  double w = (double)(end - begin) + 1; /* zero-length spans count a little */
  if (z->proc && z->proc->n) {
    const mlprof__series *ps = z->proc;
    size_t at_b = mlprof__series_lower(ps, b, &z->hint[0]);
    double cpu = covering_mean(ps, ps->v[MLPROF__COL_CPU_PCT], at_b, e);
    if (!isnan(cpu)) {
      a->w[0] += w;
      a->sum[0] += w * cpu;
    }
    double runq = covering_mean(ps, ps->v[MLPROF__COL_RUNQ], at_b, e);
    if (!isnan(runq)) {
      a->w[4] += w;
      a->sum[4] += w * runq;
    }
    /* Integer times: past b is at or after b + 1. */
    size_t before = at_b < ps->n && ps->t[at_b] == b
                        ? mlprof__series_lower(ps, b + 1, NULL)
                        : at_b;
    size_t after = mlprof__series_lower(ps, e, &z->hint[1]);
    double r0 = NAN, r1 = NAN;
    const double *rss = ps->v[MLPROF__COL_RSS];
    for (size_t k = before; k-- > 0;)
      if (!isnan(rss[k])) {
        r0 = rss[k];
        break;
      }
    for (size_t k = after; k < ps->n; k++)
      if (!isnan(rss[k])) {
        r1 = rss[k];
        break;
      }
    if (!isnan(r0) && !isnan(r1)) {
      a->w[2] += w;
      a->sum[2] += w * (r1 - r0);
    }
  }
  /* every GPU of the host */
  const mlprof__resources *r = z->r;
  double gsum = 0;
  int gn = 0;
  for (size_t g = 0; g < r->nseries; g++) {
    const mlprof__series *gs = &r->series[g];
    if (gs->subject != MLPROF__SUBJECT_GPU || gs->hostname != z->host) continue;
    double u = covering_mean(gs, gs->v[MLPROF__COL_GPU_UTIL],
                             mlprof__series_lower(gs, b, NULL), e);
    if (!isnan(u)) {
      gsum += u;
      gn++;
    }
  }
  if (gn) {
    a->w[1] += w;
    a->sum[1] += w * gsum / gn;
  }
  /* the host's iowait */
  if (z->sys && z->sys->n) {
    double io = covering_mean(z->sys, z->sys->v[MLPROF__COL_IOWAIT],
                              mlprof__series_lower(z->sys, b, &z->hint[2]), e);
    if (!isnan(io)) {
      a->w[3] += w;
      a->sum[3] += w * io;
    }
  }
  return 0;
}

static size_t host_index(builder *b, const char *host) {
  for (size_t i = 0; i < b->nhosts; i++)
    if (strcmp(b->hosts[i], host) == 0) return i;
  if (mlprof__grow(&b->hosts, &b->hosts_cap, b->nhosts + 1, sizeof *b->hosts)) {
    b->err = MLPROF_ENOMEM;
    return 0;
  }
  b->hosts[b->nhosts] = intern(b, host, strlen(host));
  return b->nhosts++;
}

static void finish_measures(mlprof__subject_stats *s) {
  for (size_t i = 0; i < s->nm; i++) {
    mlprof__measure_stats *m = &s->m[i];
    if (m->count) {
      m->mean /= (double)m->count;
      m->absent = NULL;
    } else {
      m->mean = m->min = m->max = m->first = m->last = 0;
      if (!m->absent) m->absent = "no finite value";
    }
  }
}

/* Samples of one series sorted by time (they are unless several profiles
 * sampled the same process). */
typedef struct {
  uint64_t t;
  double v[MLPROF__NCOLS];
} point;

static int point_cmp(const void *a, const void *b) {
  const point *x = a, *y = b;
  return x->t < y->t ? -1 : x->t > y->t;
}

static int series_sort(series *s) {
  size_t i = 1;
  while (i < s->n && s->t[i - 1] <= s->t[i]) i++;
  if (i >= s->n) return 0;
  point *p = malloc(s->n * sizeof *p);
  if (!p) return MLPROF_ENOMEM;
  for (i = 0; i < s->n; i++) {
    p[i].t = s->t[i];
    for (int c = 0; c < MLPROF__NCOLS; c++) p[i].v[c] = s->v[c][i];
  }
  mlprof__sort(p, s->n, sizeof *p, point_cmp);
  for (i = 0; i < s->n; i++) {
    s->t[i] = p[i].t;
    for (int c = 0; c < MLPROF__NCOLS; c++) s->v[c][i] = p[i].v[c];
  }
  free(p);
  return 0;
}

/* The status of the source named name on host, or NULL. */
static const mlprof__source_status *source_on(const mlprof__resources *r,
                                              const char *host,
                                              const char *name) {
  const mlprof__source_status *found = NULL;
  for (size_t i = 0; i < r->nsources; i++)
    if (strcmp(r->sources[i].name, name) == 0 &&
        (!host || strcmp(r->sources[i].hostname, host) == 0) &&
        (!found || found->available))
      found = &r->sources[i];
  return found;
}

static void energy(builder *b) {
  mlprof__resources *r = b->r;
  for (size_t i = 0; i < b->nbest; i++) {
    if (b->best[i].gpu) {
      r->has_gpu_energy = 1;
      r->gpu_energy_j += b->best[i].v1 - b->best[i].v0;
    } else {
      r->has_cpu_energy = 1;
      r->cpu_energy_j += b->best[i].v1 - b->best[i].v0;
    }
  }
  r->cpu_energy_method =
      "RAPL package energy counters (powercap): last minus first sample";
  r->gpu_energy_method =
      "NVML energy counter, or gpu_power_w integrated by the sampler where a "
      "GPU has none: last minus first sample";
  /* Why energy is missing: the measure's reason, else its source's. */
  for (size_t i = 0; i < r->nsubjects; i++) {
    const mlprof__subject_stats *s = &r->subjects[i];
    const mlprof__measure_stats *c = mlprof__subject_measure(s, "cpu_energy_j");
    if (!r->has_cpu_energy && !r->cpu_energy_absent && c && c->absent &&
        s->subject == MLPROF__SUBJECT_SYSTEM)
      r->cpu_energy_absent = c->absent;
    const mlprof__measure_stats *g = mlprof__subject_measure(s, "gpu_energy_j");
    if (!r->has_gpu_energy && !r->gpu_energy_absent && g && g->absent &&
        s->subject == MLPROF__SUBJECT_GPU)
      r->gpu_energy_absent = g->absent;
  }
  const mlprof__source_status *src = source_on(r, NULL, "energy");
  if (!r->has_cpu_energy && !r->cpu_energy_absent)
    r->cpu_energy_absent = src && !src->available ? src->reason : "not sampled";
  if (!r->has_gpu_energy && !r->gpu_energy_absent)
    r->gpu_energy_absent = r->gpu_absent ? r->gpu_absent : "not sampled";
  if (r->has_cpu_energy) r->cpu_energy_absent = NULL;
  if (r->has_gpu_energy) r->gpu_energy_absent = NULL;

  const char *env = getenv("MLPROF_CARBON_G_PER_KWH");
  char *end = NULL;
  double v = env ? strtod(env, &end) : 0;
  if (env && end != env && !*end && v >= 0 && isfinite(v)) {
    r->intensity_g_per_kwh = v;
    r->intensity_source = "MLPROF_CARBON_G_PER_KWH";
  } else {
    r->intensity_g_per_kwh = WORLD_INTENSITY;
    r->intensity_source =
        "world average (475 g/kWh); set MLPROF_CARBON_G_PER_KWH";
  }
  r->carbon_g =
      (r->cpu_energy_j + r->gpu_energy_j) / 3.6e6 * r->intensity_g_per_kwh;
}

const mlprof__measure_stats *mlprof__subject_measure(
    const mlprof__subject_stats *s, const char *name) {
  for (size_t i = 0; i < s->nm; i++)
    if (strcmp(s->m[i].name, name) == 0) return &s->m[i];
  return NULL;
}

const char *mlprof__subject_name(uint8_t subject) {
  switch (subject) {
    case MLPROF__SUBJECT_SYSTEM:
      return "system";
    case MLPROF__SUBJECT_PROCESS:
      return "process";
    case MLPROF__SUBJECT_GPU:
      return "gpu";
    case MLPROF__SUBJECT_TREE:
      return "tree";
    default:
      return "unknown";
  }
}

static int zone_cmp_raw(const char *a, size_t alen, const char *b,
                        size_t blen) {
  int c = memcmp(a, b, alen < blen ? alen : blen);
  if (c) return c;
  return alen < blen ? -1 : alen > blen;
}

typedef struct {
  const mlprof__zone_samples *zones;
  const char *name;
  size_t len;
} zone_key;

/* The zones named before name come first. */
static int zone_below(const void *ctx, size_t i) {
  const zone_key *k = ctx;
  return zone_cmp_raw(k->zones[i].zone, k->zones[i].zone_len, k->name, k->len) <
         0;
}

static int zone_cmp(const void *a, const void *b) {
  const mlprof__zone_samples *x = a, *y = b;
  return zone_cmp_raw(x->zone, x->zone_len, y->zone, y->zone_len);
}

const mlprof__zone_samples *mlprof__resources_zone(const mlprof__resources *r,
                                                   const char *name,
                                                   size_t len) {
  zone_key key = {r->zones, name, len};
  size_t i = mlprof__lower_bound(0, r->nzones, &key, zone_below);
  if (i < r->nzones &&
      zone_cmp_raw(r->zones[i].zone, r->zones[i].zone_len, name, len) == 0)
    return &r->zones[i];
  return NULL;
}

/* Display order: by host, then system, GPUs, processes; then id. */
static int subject_rank(uint8_t s) {
  return s == MLPROF__SUBJECT_SYSTEM    ? 0
         : s == MLPROF__SUBJECT_GPU     ? 1
         : s == MLPROF__SUBJECT_PROCESS ? 2
                                        : 3 + s;
}

static int subject_cmp(const void *a, const void *b) {
  const mlprof__subject_stats *x = a, *y = b;
  int c = strcmp(x->hostname, y->hostname);
  if (c) return c;
  if (x->subject != y->subject)
    return subject_rank(x->subject) - subject_rank(y->subject);
  return x->id < y->id ? -1 : x->id > y->id;
}

static void free_series(series *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(s[i].t);
    for (int c = 0; c < MLPROF__NCOLS; c++) free(s[i].v[c]);
  }
  free(s);
}

mlprof__resources_builder *mlprof__resources_begin(mlprof__resources *r) {
  memset(r, 0, sizeof *r);
  r->tree.subject = MLPROF__SUBJECT_TREE;
  r->tree.label = "";
  r->tree.hostname = "";
  r->tree.process = -1;
  builder *b = calloc(1, sizeof *b);
  if (b) b->r = r;
  return b;
}

int mlprof__resources_profile_begin(builder *b, const mlprof__job_profile *p,
                                    size_t index, mlprof__visitor *v) {
  b->p = p;
  b->profile = index;
  b->host = host_index(b, p->hostname ? p->hostname : "");
  b->tick_rows = 0;
  b->ncur = b->nst = 0;
  mlprof__map_clear(&b->names);
  *v = (mlprof__visitor){
      .ud = b, .name = on_name, .source = on_source, .sample = on_sample};
  return b->err;
}

int mlprof__resources_profile_end(builder *b) {
  if (b->err) return b->err;
  tick_close(b);
  mlprof__resources *r = b->r;
  /* Energy: the profile that saw the most of each counter. */
  for (size_t i = 0; i < b->ncur; i++) {
    const energy_span *e = &b->cur[i];
    size_t k = 0;
    while (k < b->nbest && b->best[k].key != e->key) k++;
    if (k == b->nbest) {
      if (mlprof__grow(&b->best, &b->best_cap, b->nbest + 1, sizeof *b->best))
        return b->err = MLPROF_ENOMEM;
      b->best[b->nbest++] = *e;
    } else if (e->v1 - e->v0 > b->best[k].v1 - b->best[k].v0) {
      b->best[k] = *e;
    }
  }
  /* Sources: identical statuses of one host are merged. */
  const char *host = b->hosts[b->host];
  for (size_t i = 0; i < b->nst; i++) {
    const status *st = &b->st[i];
    size_t k = 0;
    while (k < r->nsources &&
           !(r->sources[k].hostname == host && r->sources[k].name == st->name &&
             r->sources[k].available == st->available &&
             r->sources[k].reason == st->reason))
      k++;
    if (k == r->nsources) {
      if (mlprof__grow(&r->sources, &b->sources_cap, r->nsources + 1,
                       sizeof *r->sources))
        return b->err = MLPROF_ENOMEM;
      r->sources[r->nsources++] = (mlprof__source_status){
          st->name, st->reason, host, st->available, b->profile, 0};
    }
    r->sources[k].profiles++;
  }
  return b->err;
}

static void builder_free(builder *b) {
  mlprof__map_clear(&b->strings);
  mlprof__map_clear(&b->subjects);
  mlprof__map_clear(&b->proc_index);
  mlprof__map_clear(&b->gpu_index);
  mlprof__map_clear(&b->sys_index);
  mlprof__map_clear(&b->tree_pids);
  mlprof__map_clear(&b->names);
  free(b->hosts);
  free(b->best);
  free(b->cur);
  free(b->st);
  free_series(b->procs, b->nprocs);
  free_series(b->gpus, b->ngpus);
  free_series(b->sys, b->nsys);
  free(b);
}

void mlprof__resources_abort(builder *b) {
  if (!b) return;
  mlprof__resources_free(b->r);
  builder_free(b);
}

/* Moves the builder's series into r->series (processes, GPUs, systems). */
static int keep_series(builder *b) {
  mlprof__resources *r = b->r;
  size_t n = b->nprocs + b->ngpus + b->nsys;
  if (!n) return 0;
  r->series = calloc(n, sizeof *r->series);
  if (!r->series) return MLPROF_ENOMEM;
  struct {
    series *s;
    size_t n;
    uint8_t subject;
  } from[] = {{b->procs, b->nprocs, MLPROF__SUBJECT_PROCESS},
              {b->gpus, b->ngpus, MLPROF__SUBJECT_GPU},
              {b->sys, b->nsys, MLPROF__SUBJECT_SYSTEM}};
  for (size_t k = 0; k < 3; k++)
    for (size_t i = 0; i < from[k].n; i++) {
      series *s = &from[k].s[i];
      mlprof__series *o = &r->series[r->nseries++];
      o->subject = from[k].subject;
      o->hostname = b->hosts[s->key >> 32];
      o->id = s->key & 0xffffffffu;
      o->n = s->n;
      o->t = s->t;
      for (int c = 0; c < MLPROF__NCOLS; c++) o->v[c] = s->v[c];
      *s = (series){0};
    }
  return 0;
}

int mlprof__resources_finish(builder *b, const mlprof__job *job) {
  mlprof__resources *r = b->r;
  int rc = b->err;
  for (size_t i = 0; i < b->nprocs && !rc; i++) rc = series_sort(&b->procs[i]);
  for (size_t i = 0; i < b->ngpus && !rc; i++) rc = series_sort(&b->gpus[i]);
  for (size_t i = 0; i < b->nsys && !rc; i++) rc = series_sort(&b->sys[i]);
  if (!rc) {
    /* Each process subject to its own profile, by host and pid: with
     * several (exec keeps the pid), the latest to start before the last
     * row, else the first. */
    mlprof__map own = {0}; /* key -> first profile; next[] chains the rest */
    int *next = job->count ? malloc(job->count * sizeof *next) : NULL;
    if (job->count && !next) rc = MLPROF_ENOMEM;
    for (size_t i = job->count; i-- > 0 && !rc;) {
      const mlprof__job_profile *p = &job->profiles[i];
      uint64_t k = subject_key(host_index(b, p->hostname ? p->hostname : ""),
                               MLPROF__SUBJECT_PROCESS, p->pid);
      uint32_t at = mlprof__map_get(&own, k);
      next[i] = at == MLPROF__NONE ? -1 : (int)at;
      if (mlprof__map_put(&own, k, (uint32_t)i)) rc = MLPROF_ENOMEM;
    }
    for (size_t i = 0; i < r->nsubjects && !rc; i++) {
      mlprof__subject_stats *s = &r->subjects[i];
      if (s->subject != MLPROF__SUBJECT_PROCESS) continue;
      uint64_t k = subject_key(host_index(b, s->hostname),
                               MLPROF__SUBJECT_PROCESS, s->id);
      uint32_t at = mlprof__map_get(&own, k);
      s->process = at == MLPROF__NONE ? -1 : (int)at;
      for (int j = s->process; j >= 0; j = next[j])
        if (job->profiles[j].offset_ns <= s->last_ns &&
            job->profiles[j].offset_ns >= job->profiles[s->process].offset_ns)
          s->process = j;
    }
    free(next);
    mlprof__map_clear(&own);
    if (!rc) rc = b->err;
  }
  if (!rc) {
    for (size_t i = 0; i < r->nsubjects; i++) {
      finish_measures(&r->subjects[i]);
      r->ngpus += r->subjects[i].subject == MLPROF__SUBJECT_GPU;
    }
    finish_measures(&r->tree);
    if (r->nsubjects)
      mlprof__sort(r->subjects, r->nsubjects, sizeof *r->subjects, subject_cmp);
    if (!r->ngpus && r->sampled) {
      const mlprof__source_status *nv = source_on(r, NULL, "nvml");
      r->gpu_absent = nv && !nv->available && nv->reason[0] ? nv->reason
                      : nv                                  ? "no GPU found"
                           : "GPUs not sampled";
    }
    energy(b);
    rc = keep_series(b);
  }
  if (rc) mlprof__resources_free(r);
  builder_free(b);
  return rc;
}

/* ---- zone averages: the pass after the samples' -------------------------
 */

int mlprof__resources_zones_begin(mlprof__resources *r, zpass **z) {
  *z = NULL;
  for (size_t i = 0; i < r->nseries; i++)
    if (r->series[i].subject == MLPROF__SUBJECT_PROCESS) {
      if (!(*z = calloc(1, sizeof **z))) return MLPROF_ENOMEM;
      (*z)->r = r;
      return 0;
    }
  return 0;
}

int mlprof__resources_zones_profile(zpass *z, const mlprof__job_profile *p,
                                    mlprof__visitor *v) {
  const mlprof__resources *r = z->r;
  const char *host = p->hostname ? p->hostname : "";
  int gpus = 0;
  z->proc = z->sys = NULL;
  z->host = NULL;
  for (size_t i = 0; i < r->nseries; i++) {
    const mlprof__series *s = &r->series[i];
    if (strcmp(s->hostname, host) != 0) continue;
    z->host = s->hostname;
    if (s->subject == MLPROF__SUBJECT_PROCESS &&
        s->id == (p->pid & 0xffffffffu))
      z->proc = s;
    else if (s->subject == MLPROF__SUBJECT_SYSTEM)
      z->sys = s;
    else if (s->subject == MLPROF__SUBJECT_GPU)
      gpus = 1;
  }
  if (!z->proc && !gpus) return 0;
  z->offset = p->offset_ns;
  mlprof__map_clear(&z->zone_of);
  *v = (mlprof__visitor){.ud = z, .name = z_name, .span = z_span};
  return 1;
}

static void zones_free(zpass *z) {
  free(z->zones);
  mlprof__map_clear(&z->zone_of);
  mlprof__map_clear(&z->by_hash);
  free(z);
}

void mlprof__resources_zones_abort(zpass *z) {
  if (z) zones_free(z);
}

int mlprof__resources_zones_finish(zpass *z) {
  mlprof__resources *r = z->r;
  size_t cap = 0;
  int rc = 0;
  for (size_t i = 0; i < z->nzones && !rc; i++) {
    zone_acc *a = &z->zones[i];
    if (!a->w[0] && !a->w[1] && !a->w[2] && !a->w[3] && !a->w[4]) continue;
    if (mlprof__grow(&r->zones, &cap, r->nzones + 1, sizeof *r->zones) != 0) {
      rc = MLPROF_ENOMEM;
      break;
    }
    mlprof__zone_samples *zs = &r->zones[r->nzones++];
    *zs = (mlprof__zone_samples){.zone = a->zone, .zone_len = a->len};
    if (a->w[0]) zs->has_cpu = 1, zs->cpu_pct = a->sum[0] / a->w[0];
    if (a->w[1]) zs->has_gpu = 1, zs->gpu_util_pct = a->sum[1] / a->w[1];
    if (a->w[2]) zs->has_rss = 1, zs->rss_change_bytes = a->sum[2] / a->w[2];
    if (a->w[3]) zs->has_iowait = 1, zs->iowait_pct = a->sum[3] / a->w[3];
    if (a->w[4]) zs->has_runq = 1, zs->runq_wait_pct = a->sum[4] / a->w[4];
  }
  if (!rc && r->nzones)
    mlprof__sort(r->zones, r->nzones, sizeof *r->zones, zone_cmp);
  zones_free(z);
  return rc;
}

void mlprof__resources_free(mlprof__resources *r) {
  for (size_t i = 0; i < r->nsubjects; i++) free(r->subjects[i].m);
  free(r->subjects);
  free(r->tree.m);
  free(r->sources);
  free(r->zones);
  for (size_t i = 0; i < r->nseries; i++) {
    free(r->series[i].t);
    for (int c = 0; c < MLPROF__NCOLS; c++) free(r->series[i].v[c]);
  }
  free(r->series);
  for (size_t i = 0; i < r->nstrings; i++) free(r->strings[i]);
  free(r->strings);
  memset(r, 0, sizeof *r);
  r->tree.subject = MLPROF__SUBJECT_TREE;
  r->tree.label = r->tree.hostname = "";
  r->tree.process = -1;
}
