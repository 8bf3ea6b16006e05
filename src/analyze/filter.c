/* Filters (filter.h): selectors matched against each profile once, then a
 * visitor that sits between the reader and an analysis or export and drops
 * what the filter leaves out. */
#include "filter.h"

#include <fnmatch.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/base.h"
#include "findings.h"
#include "../format/wire.h"

/* The longest PROCESS part of a track. */
#define TRACK_PROC_MAX 255

/* One end of a range: "" is open (def), else a count or a duration. */
static int range_end(const char *s, size_t n, int duration, uint64_t def,
                     uint64_t *out) {
  char b[64];
  if (n >= sizeof b) return -1;
  memcpy(b, s, n);
  b[n] = '\0';
  if (!n) {
    *out = def;
    return 0;
  }
  if (strspn(b, "0") == n || (duration && strcmp(b, "0s") == 0)) {
    *out = 0;
    return 0;
  }
  return duration ? mlprof__duration_parse(b, out)
                  : mlprof__parse_count(b, out);
}

/* "A:B" into [*lo, *hi): A empty is 0, B empty is UINT64_MAX. */
static int parse_range(const char *s, int duration, uint64_t *lo,
                       uint64_t *hi) {
  const char *colon = strchr(s, ':');
  if (!colon || strchr(colon + 1, ':')) return -1;
  if (range_end(s, (size_t)(colon - s), duration, 0, lo) ||
      range_end(colon + 1, strlen(colon + 1), duration, UINT64_MAX, hi))
    return -1;
  return *lo < *hi ? 0 : -1;
}

/* The fields other than selectors; EINVAL with err set on bad input. */
static int add_field(mlprof__filter *f, int kind, const char *s, char *err,
                     size_t errlen) {
  uint64_t a, b;
  switch (kind) {
    case MLPROF__FILTER_CATEGORY:
      for (int c = 0; c < MLPROF_CAT_COUNT; c++)
        if (strcmp(s, mlprof_category_name((mlprof_category)c)) == 0) {
          f->categories |= 1u << c;
          return 0;
        }
      snprintf(err, errlen,
               "unknown category '%s': use data, forward, backward, "
               "optimizer, communication, io, user or none",
               s);
      return MLPROF_EINVAL;
    case MLPROF__FILTER_STEPS:
    case MLPROF__FILTER_SKIP_WARMUP:
      if (kind == MLPROF__FILTER_STEPS ? parse_range(s, 0, &a, &b)
                                       : mlprof__parse_count(s, &a)) {
        snprintf(err, errlen,
                 kind == MLPROF__FILTER_STEPS
                     ? "--steps wants A:B, steps from 0 with A < B (e.g. "
                       "10:20), not '%s'"
                     : "--skip-warmup wants a number of steps, not '%s'",
                 s);
        return MLPROF_EINVAL;
      }
      f->step_from = a;
      f->step_to = kind == MLPROF__FILTER_STEPS ? b : UINT64_MAX;
      f->steps = 1;
      return 0;
    case MLPROF__FILTER_WINDOW:
      if (parse_range(s, 1, &a, &b)) {
        snprintf(err, errlen,
                 "--window wants T0:T1, durations with a unit and T0 < T1 "
                 "(e.g. 10s:20s), not '%s'",
                 s);
        return MLPROF_EINVAL;
      }
      f->t0 = a;
      f->t1 = b;
      f->window = 1;
      return 0;
  }
  snprintf(err, errlen, "no such filter option");
  return MLPROF_EINVAL;
}

int mlprof__filter_add(mlprof__filter *f, int kind, const char *s, char *err,
                       size_t errlen) {
  if (kind < 0 || kind >= MLPROF__NSEL)
    return add_field(f, kind, s, err, errlen);
  if (kind == MLPROF__SEL_TRACK) {
    const char *slash = strchr(s, '/');
    if (!slash || slash == s || !slash[1] || slash - s > TRACK_PROC_MAX) {
      snprintf(err, errlen,
               "--track wants PROCESS/THREAD (a pid or name each), not '%s'",
               s);
      return MLPROF_EINVAL;
    }
  }
  if (kind == MLPROF__SEL_RANK) {
    char *end = NULL;
    long long r = strtoll(s, &end, 10);
    if (end == s || *end || r < 0) {
      snprintf(err, errlen, "--rank wants a rank (0 or more), not '%s'", s);
      return MLPROF_EINVAL;
    }
  }
  if (mlprof__grow(&f->sel, &f->cap, f->nsel + 1, sizeof *f->sel)) {
    snprintf(err, errlen, "out of memory");
    return MLPROF_ENOMEM;
  }
  f->sel[f->nsel++] = (mlprof__selector){.kind = kind, .s = s};
  return 0;
}

void mlprof__filter_free(mlprof__filter *f) {
  free(f->sel);
  memset(f, 0, sizeof *f);
}

static int has_kind(const mlprof__filter *f, int kind) {
  for (size_t i = 0; i < f->nsel; i++)
    if (f->sel[i].kind == kind) return 1;
  return 0;
}

int mlprof__filter_records(const mlprof__filter *f) {
  return f->steps || f->window || f->min_ns ||
         has_kind(f, MLPROF__SEL_PROCESS) || has_kind(f, MLPROF__SEL_THREAD) ||
         has_kind(f, MLPROF__SEL_TRACK) || has_kind(f, MLPROF__SEL_RANK);
}

int mlprof__filter_zones(const mlprof__filter *f) {
  return f->categories || has_kind(f, MLPROF__SEL_ZONE) ||
         has_kind(f, MLPROF__SEL_EXCLUDE);
}

/* Whether the zone patterns and categories select the zone (exclusions
 * aside). */
static int selected(const mlprof__filter *f, const char *name,
                    uint8_t category) {
  if (f->categories &&
      !(category < MLPROF_CAT_COUNT && (f->categories >> category) & 1))
    return 0;
  int any = 0, match = 0;
  for (size_t i = 0; i < f->nsel; i++)
    if (f->sel[i].kind == MLPROF__SEL_ZONE) {
      any = 1;
      match |= fnmatch(f->sel[i].s, name, 0) == 0;
    }
  return !any || match;
}

int mlprof__filter_excluded(const mlprof__filter *f, const char *name) {
  for (size_t i = 0; i < f->nsel; i++)
    if (f->sel[i].kind == MLPROF__SEL_EXCLUDE &&
        fnmatch(f->sel[i].s, name, 0) == 0)
      return 1;
  return 0;
}

int mlprof__filter_zone(const mlprof__filter *f, const char *name,
                        uint8_t category) {
  return selected(f, name, category) && !mlprof__filter_excluded(f, name);
}

/* Whether pattern names the thing numbered id or named name: all digits and
 * equal to id, or a glob matching name. */
static int matches(const char *pattern, uint64_t id, const char *name) {
  uint64_t n;
  char *end = NULL;
  if (pattern[0] >= '0' && pattern[0] <= '9') {
    n = strtoull(pattern, &end, 10);
    if (!*end && n == id) return 1;
  }
  return name && fnmatch(pattern, name, 0) == 0;
}

/* The PROCESS part of a track matches profile p. */
static int track_process(const char *track, const mlprof__job_profile *p) {
  char proc[TRACK_PROC_MAX + 1];
  size_t n = (size_t)(strchr(track, '/') - track);
  memcpy(proc, track, n);
  proc[n] = '\0';
  return matches(proc, p->pid, p->name);
}

/* What one profile keeps. */
typedef struct mlprof__filter_prof {
  int keep;                  /* 0: nothing of it (process, rank, no steps) */
  uint64_t lo, hi;           /* records that begin in [lo, hi), profile time */
  int threads;               /* 1: only the threads in tids */
  mlprof__map tids;          /* tid -> 1 */
  int has_steps;             /* it had step marks (pre-pass) */
  uint64_t nsteps;           /* how many (its thread with the most) */
  int has_spans;             /* it had spans (pre-pass for steps) */
  uint64_t step_lo, step_hi; /* job time, when has_steps */
} prof;

/* Never changed once prepared: reads through it may run at once, each with
 * its own mlprof__filter_read. */
struct mlprof__filtered {
  const mlprof__filter *f;
  size_t n; /* profiles */
  int zones;
  prof *p;
  char unmatched[320]; /* why the record filters keep nothing, or "" */
};

/* ---- the pre-pass: thread names and step marks ------------------------- */

typedef struct {
  uint64_t count;          /* marks: steps begun */
  uint64_t at_from, at_to; /* the begin of step from, the end of step to-1 */
  int in_step, have_to;    /* a step is under way; at_to is known */
} mark_thread;

typedef struct {
  const mlprof__filter *f;
  const mlprof__job_profile *jp;
  prof *p;
  mark_thread *marks;
  size_t nmarks, mcap;
  mlprof__map mtids; /* tid -> index in marks */
} prepass;

/* Whether thread tid (name, or NULL) of this profile is selected. */
static int thread_selected(const prepass *pp, uint64_t tid, const char *name) {
  for (size_t i = 0; i < pp->f->nsel; i++) {
    const mlprof__selector *s = &pp->f->sel[i];
    if (s->kind == MLPROF__SEL_THREAD && matches(s->s, tid, name)) return 1;
    if (s->kind == MLPROF__SEL_TRACK && track_process(s->s, pp->jp) &&
        matches(strchr(s->s, '/') + 1, tid, name))
      return 1;
  }
  return 0;
}

static int pre_tid(prepass *pp, uint64_t tid, const char *name) {
  if (!pp->p->threads || !thread_selected(pp, tid, name)) return 0;
  return mlprof__map_put(&pp->p->tids, tid, 1);
}

static int pre_thread(void *ud, uint32_t tid, const char *name, size_t len) {
  (void)len;
  return pre_tid(ud, tid, name);
}

static int pre_events(void *ud, uint32_t tid, uint64_t dropped) {
  (void)dropped;
  return pre_tid(ud, tid, NULL);
}

static int pre_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                    uint64_t begin, uint64_t end) {
  (void)tid, (void)name, (void)depth, (void)begin, (void)end;
  ((prepass *)ud)->p->has_spans = 1;
  return 0;
}

/* A step mark (end 0) or step end at t: a step runs from a mark to the
 * next entry, mark or end, as the analyses count them (marks.h). */
static int pre_entry(prepass *pp, uint32_t tid, uint64_t t, int end) {
  if (!pp->f->steps) return 0;
  uint32_t k = mlprof__map_get(&pp->mtids, tid);
  if (k == MLPROF__NONE) {
    if (mlprof__grow(&pp->marks, &pp->mcap, pp->nmarks + 1,
                     sizeof *pp->marks) ||
        mlprof__map_put(&pp->mtids, tid, (uint32_t)pp->nmarks))
      return MLPROF_ENOMEM;
    k = (uint32_t)pp->nmarks++;
    memset(&pp->marks[k], 0, sizeof pp->marks[k]);
  }
  mark_thread *m = &pp->marks[k];
  if (m->in_step && m->count == pp->f->step_to && !m->have_to) {
    m->at_to = t;
    m->have_to = 1;
  }
  m->in_step = !end;
  if (end) return 0;
  if (m->count == pp->f->step_from) m->at_from = t;
  m->count++;
  return 0;
}

static int pre_step(void *ud, uint32_t tid, uint64_t t) {
  return pre_entry(ud, tid, t, 0);
}

static int pre_step_end(void *ud, uint32_t tid, uint64_t t) {
  return pre_entry(ud, tid, t, 1);
}

/* Reads profile jp for its thread names, step marks and whether it has
 * spans into *p. A read that
 * fails keeps what it gave: the analysis says why. */
static int prepass_read(const mlprof__filter *f, const mlprof__job_profile *jp,
                        prof *p) {
  prepass pp = {.f = f, .jp = jp, .p = p};
  mlprof__visitor v = {.ud = &pp,
                       .thread = p->threads ? pre_thread : NULL,
                       .events = p->threads ? pre_events : NULL,
                       .span = f->steps ? pre_span : NULL,
                       .step = f->steps ? pre_step : NULL,
                       .step_end = f->steps ? pre_step_end : NULL};
  mlprof__read_report rep;
  int rc = mlprof__read_file(jp->path, &v, &rep, NULL, 0);
  rc = rc == MLPROF_ENOMEM ? rc : 0;
  /* The thread with the most marks gives the steps. */
  const mark_thread *best = NULL;
  for (size_t i = 0; i < pp.nmarks; i++)
    if (!best || pp.marks[i].count > best->count) best = &pp.marks[i];
  if (best && best->count) {
    p->has_steps = 1;
    p->nsteps = best->count;
    if (f->step_from >= best->count) {
      p->step_lo = p->step_hi = 0; /* past the last mark: nothing */
    } else {
      p->step_lo = best->at_from + jp->offset_ns;
      p->step_hi = best->have_to ? best->at_to + jp->offset_ns : UINT64_MAX;
    }
  }
  free(pp.marks);
  mlprof__map_clear(&pp.mtids);
  return rc;
}

/* ---- preparing ---------------------------------------------------------- */

static int process_selected(const mlprof__filter *f,
                            const mlprof__job_profile *jp) {
  int any_proc = 0, proc = 0, any_rank = 0, rank = 0;
  for (size_t i = 0; i < f->nsel; i++) {
    const mlprof__selector *s = &f->sel[i];
    if (s->kind == MLPROF__SEL_PROCESS) {
      any_proc = 1;
      proc |= matches(s->s, jp->pid, jp->name);
    } else if (s->kind == MLPROF__SEL_RANK) {
      any_rank = 1;
      rank |= jp->rank >= 0 && strtoll(s->s, NULL, 10) == jp->rank;
    }
  }
  return (!any_proc || proc) && (!any_rank || rank);
}

/* In profile time: a job time t for a profile starting at off. */
static uint64_t to_profile(uint64_t t, uint64_t off) {
  return t == UINT64_MAX ? t : t > off ? t - off : 0;
}

/* Lists up to 6 of the job's processes into o, as the process and rank
 * selectors match them ("1234 python (rank 0)"). */
static void list_processes(const mlprof__job *job, char *o, size_t len) {
  size_t at = strlen(o);
  for (size_t i = 0; i < job->count && i < 6 && at < len; i++) {
    const mlprof__job_profile *jp = &job->profiles[i];
    at += (size_t)snprintf(o + at, len - at, "%s%llu %s", i ? ", " : "",
                           (unsigned long long)jp->pid,
                           jp->name ? jp->name : "?");
    if (at < len && jp->rank >= 0)
      at += (size_t)snprintf(o + at, len - at, " (rank %lld)",
                             (long long)jp->rank);
  }
  if (at < len && job->count > 6)
    snprintf(o + at, len - at, " and %zu more", job->count - 6);
}

/* Says in fd->unmatched why the record filters keep nothing of job, when
 * they do not: a filter that matches nothing is the user's mistake, not an
 * empty run (issue #21). Zone filters are judged by the analysis, which
 * knows the zones. */
static void unmatched(mlprof__filtered *fd, const mlprof__job *job) {
  const mlprof__filter *f = fd->f;
  size_t kept = 0, ranks = 0, stepped = 0, threaded = 0;
  uint64_t most = 0;
  for (size_t i = 0; i < fd->n; i++) {
    const prof *p = &fd->p[i];
    ranks += job->profiles[i].rank >= 0;
    if (p->nsteps > most) most = p->nsteps;
    if (!p->keep) continue;
    kept++;
    stepped += p->lo < p->hi;
    threaded += !p->threads || p->tids.count > 0;
  }
  char *o = fd->unmatched;
  size_t len = sizeof fd->unmatched;
  if (has_kind(f, MLPROF__SEL_RANK) && !ranks) {
    snprintf(o, len, "--rank: this run has no ranks (not a distributed run)");
  } else if (!kept && (has_kind(f, MLPROF__SEL_PROCESS) ||
                       has_kind(f, MLPROF__SEL_RANK))) {
    snprintf(o, len, "--process/--rank match no process of this run: ");
    list_processes(job, o, len);
  } else if (kept && !threaded) {
    snprintf(o, len,
             "--thread/--track match no thread of the processes selected");
  } else if (f->steps && !most) {
    snprintf(o, len,
             "--steps/--skip-warmup: no process of this run marks steps "
             "(prof.step(), or PyTorch's steps under mlprof run)");
  } else if (f->steps && kept && !stepped) {
    snprintf(o, len,
             "--steps/--skip-warmup select no step: this run has %llu "
             "step%s (0:%llu)",
             (unsigned long long)most, most == 1 ? "" : "s",
             (unsigned long long)most);
  }
}

int mlprof__filter_prepare(const mlprof__filter *f, const mlprof__job *job,
                           int zones, mlprof__filtered **out, char *warn,
                           size_t warnlen) {
  warn[0] = '\0';
  mlprof__filtered *fd = calloc(1, sizeof *fd);
  if (!fd) return MLPROF_ENOMEM;
  fd->f = f;
  fd->n = job->count;
  fd->zones = zones;
  fd->p = calloc(job->count ? job->count : 1, sizeof *fd->p);
  if (!fd->p) {
    free(fd);
    return MLPROF_ENOMEM;
  }
  int threads =
      has_kind(f, MLPROF__SEL_THREAD) || has_kind(f, MLPROF__SEL_TRACK);
  int rc = 0;
  for (size_t i = 0; i < job->count && !rc; i++) {
    prof *p = &fd->p[i];
    p->keep = process_selected(f, &job->profiles[i]);
    p->lo = 0;
    p->hi = UINT64_MAX;
    p->threads = threads;
    if (p->keep && (threads || f->steps))
      rc = prepass_read(f, &job->profiles[i], p);
  }
  size_t nosteps = 0;
  const char *first = NULL;
  for (size_t i = 0; i < job->count && !rc; i++) {
    prof *p = &fd->p[i];
    const mlprof__job_profile *jp = &job->profiles[i];
    uint64_t lo = 0, hi = UINT64_MAX; /* job time */
    if (f->window) {
      lo = f->t0;
      hi = f->t1;
    }
    if (f->steps && p->keep) {
      /* Its own steps, else its nearest ancestor's. */
      int a = (int)i;
      while (a >= 0 && !fd->p[a].has_steps) a = job->profiles[a].parent;
      if (a < 0) {
        p->keep = 0;
        /* A process without spans (mlprof run's own) goes unmentioned. */
        if (p->has_spans && !nosteps++) first = jp->name;
      } else {
        if (fd->p[a].step_lo > lo) lo = fd->p[a].step_lo;
        if (fd->p[a].step_hi < hi) hi = fd->p[a].step_hi;
      }
    }
    p->lo = to_profile(lo, jp->offset_ns);
    p->hi = to_profile(hi, jp->offset_ns);
  }
  if (nosteps)
    snprintf(warn, warnlen,
             "%zu process%s left out: no step marks in %s or its parents "
             "(%s, the first)",
             nosteps, nosteps == 1 ? "" : "es", nosteps == 1 ? "it" : "them",
             first ? first : "?");
  if (rc) {
    mlprof__filtered_free(fd);
    return rc;
  }
  unmatched(fd, job);
  *out = fd;
  return 0;
}

const char *mlprof__filtered_unmatched(const mlprof__filtered *fd) {
  return fd && fd->unmatched[0] ? fd->unmatched : NULL;
}

void mlprof__filtered_free(mlprof__filtered *fd) {
  if (!fd) return;
  for (size_t i = 0; i < fd->n; i++) mlprof__map_clear(&fd->p[i].tids);
  free(fd->p);
  free(fd);
}

/* ---- the filtering visitor ----------------------------------------------- */

/* Callbacks the filter passes on unchanged. Every callback of the visitor
 * needs an f_ function here or below: a new one does not build until the
 * filter says what it keeps. */
#define FWD(cb, params, ...)                                        \
  static int f_##cb params {                                        \
    const mlprof__filter_read *r = ud;                              \
    return r->inner.cb ? r->inner.cb(r->inner.ud, __VA_ARGS__) : 0; \
  }

FWD(header, (void *ud, const mlprof__header *h), h)
FWD(thread, (void *ud, uint32_t tid, const char *name, size_t len), tid, name,
    len)
FWD(chunk, (void *ud, uint16_t type, uint64_t off, uint32_t len), type, off,
    len)
FWD(events, (void *ud, uint32_t tid, uint64_t dropped), tid, dropped)
FWD(meta,
    (void *ud, const char *key, size_t klen, const char *value, size_t vlen),
    key, klen, value, vlen)
FWD(end, (void *ud, uint64_t end_ns, uint64_t dropped, uint64_t unmatched),
    end_ns, dropped, unmatched)
FWD(source,
    (void *ud, const char *name, size_t nlen, int available, const char *reason,
     size_t rlen),
    name, nlen, available, reason, rlen)
#undef FWD

/* A process's line timings go with the process. */
static int f_lines(void *ud, const mlprof__line_table *lt) {
  const mlprof__filter_read *r = ud;
  if (!r->cur->keep || !r->inner.lines) return 0;
  return r->inner.lines(r->inner.ud, lt);
}

static int in_time(const prof *p, uint64_t t) {
  return t >= p->lo && t < p->hi;
}

static int thread_kept(const prof *p, uint32_t tid) {
  return !p->threads || mlprof__map_get(&p->tids, tid) != MLPROF__NONE;
}

/* Whether a record of thread tid at time t is kept. */
static int kept(const mlprof__filter_read *r, uint32_t tid, uint64_t t) {
  return r->cur->keep && thread_kept(r->cur, tid) && in_time(r->cur, t);
}

static int zone_kept(const mlprof__filter_read *r, uint32_t name) {
  return !r->fd->zones || mlprof__map_get(&r->names, name) != 2;
}

static int f_name(void *ud, const mlprof__name *n) {
  mlprof__filter_read *r = ud;
  if (r->fd->zones && n->kind == MLPROF__NAME_ZONE) {
    int shown = mlprof__filter_zone(r->fd->f, n->name, n->category);
    if (mlprof__map_put(&r->names, n->id, shown ? 1 : 2)) return MLPROF_ENOMEM;
    *(shown ? &r->zones_shown : &r->zones_hidden) += 1;
  }
  return r->inner.name ? r->inner.name(r->inner.ud, n) : 0;
}

static int f_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                  uint64_t begin, uint64_t end) {
  mlprof__filter_read *r = ud;
  r->drop_args = !kept(r, tid, begin) || !zone_kept(r, name) ||
                 end - begin < r->fd->f->min_ns;
  if (r->drop_args || !r->inner.span) return 0;
  return r->inner.span(r->inner.ud, tid, name, depth, begin, end);
}

static int f_span_meta(void *ud, uint32_t tid, uint32_t key, uint32_t value) {
  mlprof__filter_read *r = ud;
  if (r->drop_args || !r->inner.span_meta) return 0;
  return r->inner.span_meta(r->inner.ud, tid, key, value);
}

static int f_span_units(void *ud, uint32_t tid, uint32_t name, uint64_t n) {
  mlprof__filter_read *r = ud;
  if (r->drop_args || !r->inner.span_units) return 0;
  return r->inner.span_units(r->inner.ud, tid, name, n);
}

static int f_counter(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                     double v) {
  mlprof__filter_read *r = ud;
  if (!kept(r, tid, t) || !r->inner.counter) return 0;
  return r->inner.counter(r->inner.ud, tid, name, t, v);
}

static int f_units(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                   uint64_t n) {
  mlprof__filter_read *r = ud;
  if (!kept(r, tid, t) || !r->inner.units) return 0;
  return r->inner.units(r->inner.ud, tid, name, t, n);
}

/* Whether a step mark or step end at t is kept: one at the window's end is,
 * as it closes the last step. */
static int step_kept(const mlprof__filter_read *r, uint32_t tid, uint64_t t) {
  const prof *p = r->cur;
  return p->keep && thread_kept(p, tid) && t >= p->lo &&
         (t <= p->hi || p->hi == UINT64_MAX);
}

static int f_step(void *ud, uint32_t tid, uint64_t t) {
  mlprof__filter_read *r = ud;
  if (!step_kept(r, tid, t) || !r->inner.step) return 0;
  return r->inner.step(r->inner.ud, tid, t);
}

static int f_step_end(void *ud, uint32_t tid, uint64_t t) {
  mlprof__filter_read *r = ud;
  if (!step_kept(r, tid, t) || !r->inner.step_end) return 0;
  return r->inner.step_end(r->inner.ud, tid, t);
}

static int f_open(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                  uint64_t begin) {
  mlprof__filter_read *r = ud;
  if (!kept(r, tid, begin) || !zone_kept(r, name) || !r->inner.open) return 0;
  return r->inner.open(r->inner.ud, tid, name, depth, begin);
}

static int f_alloc(void *ud, const mlprof__alloc *a) {
  mlprof__filter_read *r = ud;
  if (!kept(r, a->tid, a->t) || (a->zone && !zone_kept(r, a->zone)) ||
      !r->inner.alloc)
    return 0;
  return r->inner.alloc(r->inner.ud, a);
}

/* A free whatever its time: one of an allocation that was not kept finds
 * nothing to end. */
static int f_alloc_free(void *ud, uint32_t tid, uint64_t t, uint64_t addr) {
  mlprof__filter_read *r = ud;
  if (!r->cur->keep || !thread_kept(r->cur, tid) || !r->inner.alloc_free)
    return 0;
  return r->inner.alloc_free(r->inner.ud, tid, t, addr);
}

/* Folded allocations as an allocation, at the time of the latest free. */
static int f_alloc_sum(void *ud, const mlprof__alloc_sum *a) {
  mlprof__filter_read *r = ud;
  if (!kept(r, a->tid, a->t) || (a->zone && !zone_kept(r, a->zone)) ||
      !r->inner.alloc_sum)
    return 0;
  return r->inner.alloc_sum(r->inner.ud, a);
}

static int f_sample(void *ud, const mlprof__sample_row *row) {
  mlprof__filter_read *r = ud;
  if (!r->cur->keep || !in_time(r->cur, row->t) || !r->inner.sample) return 0;
  return r->inner.sample(r->inner.ud, row);
}

/* Stack definitions go with the process (a kept sample may name any of
 * them); a sample with its thread and time, as a span's records do. */
#define PROCESS_ONLY(cb, params, ...)             \
  static int f_##cb params {                      \
    const mlprof__filter_read *r = ud;            \
    if (!r->cur->keep || !r->inner.cb) return 0;  \
    return r->inner.cb(r->inner.ud, __VA_ARGS__); \
  }
PROCESS_ONLY(stack_func, (void *ud, const mlprof__stack_func *f), f)
PROCESS_ONLY(stack_frame, (void *ud, const mlprof__stack_frame *f), f)
PROCESS_ONLY(stack_rate, (void *ud, uint32_t hz), hz)
PROCESS_ONLY(stack_node,
             (void *ud, uint32_t id, uint32_t parent, uint32_t frame), id,
             parent, frame)
#undef PROCESS_ONLY

static int f_stack_sample(void *ud, const mlprof__stack_sample *s) {
  mlprof__filter_read *r = ud;
  if (!kept(r, s->tid, s->t) || !r->inner.stack_sample) return 0;
  return r->inner.stack_sample(r->inner.ud, s);
}

void mlprof__filter_visitor(const mlprof__filtered *fd, size_t i,
                            mlprof__filter_read *r,
                            const mlprof__visitor *inner,
                            mlprof__visitor *out) {
  const prof *p = &fd->p[i];
  int zones = fd->zones && mlprof__filter_zones(fd->f);
  if (!zones && p->keep && !p->threads && p->lo == 0 && p->hi == UINT64_MAX &&
      !fd->f->min_ns) {
    *out = *inner;
    return;
  }
  r->fd = fd;
  r->cur = p;
  r->inner = *inner;
  r->drop_args = 0;
  mlprof__map_clear(&r->names);
  /* Only what inner reads, so the reader still skips the rest (out may be
   * inner: read r->inner from here on). */
  *out = (mlprof__visitor){.ud = r};
#define FILTERED(cb, ...) \
  if (r->inner.cb) out->cb = f_##cb;
  MLPROF__VISITOR_CALLBACKS(FILTERED)
#undef FILTERED
  if (zones) out->name = f_name;
}

void mlprof__filter_read_free(mlprof__filter_read *r) {
  mlprof__map_clear(&r->names);
}
