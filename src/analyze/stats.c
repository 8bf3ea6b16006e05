#include "stats.h"

#include <inttypes.h>
#include <math.h>
#include <mlprof.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../format/wire.h"
#include "resources.h"

/* Deeper spans than this are counted, but their self time is their whole
 * duration: a damaged or hostile depth must not size an array. */
#define MAX_DEPTH 4096

/* ---- names of things ----------------------------------------------------- */

static const char *const sort_names[] = {"total", "self", "mean", "p99",
                                         "count"};

int mlprof__sort_key_parse(const char *s, mlprof__sort_key *key) {
  for (size_t i = 0; i < sizeof sort_names / sizeof sort_names[0]; i++)
    if (strcmp(s, sort_names[i]) == 0) {
      *key = (mlprof__sort_key)i;
      return 0;
    }
  return -1;
}

const char *mlprof__sort_key_name(mlprof__sort_key key) {
  return sort_names[key];
}

/* ---- small helpers ------------------------------------------------------- */

static char *dup_str(const char *s) {
  return mlprof__dup(s ? s : "", s ? strlen(s) : 0);
}

typedef struct {
  uint64_t *v;
  size_t n, cap;
} u64vec;

/* A zone's raw durations: 32 bits each while every one fits (spans under
 * 4.29 s: nearly all), half the memory to fill as the spans stream by; 64
 * from the first that does not. cap counts values, whatever their width. */
typedef struct {
  void *v;
  size_t n, cap;
  int wide;
} durvec;

static int durvec_push(durvec *a, uint64_t x) {
  if (!a->wide && x <= UINT32_MAX) {
    if (a->n == a->cap && mlprof__grow(&a->v, &a->cap, a->n + 1, 4))
      return MLPROF_ENOMEM;
    ((uint32_t *)a->v)[a->n++] = (uint32_t)x;
    return 0;
  }
  if (!a->wide && a->cap) {
    uint64_t *w = malloc(a->cap * sizeof *w);
    if (!w) return MLPROF_ENOMEM;
    for (size_t i = 0; i < a->n; i++) w[i] = ((uint32_t *)a->v)[i];
    free(a->v);
    a->v = w;
  }
  a->wide = 1;
  if (a->n == a->cap && mlprof__grow(&a->v, &a->cap, a->n + 1, 8))
    return MLPROF_ENOMEM;
  ((uint64_t *)a->v)[a->n++] = x;
  return 0;
}

static uint64_t durvec_at(const durvec *a, size_t i) {
  return a->wide ? ((const uint64_t *)a->v)[i] : ((const uint32_t *)a->v)[i];
}

static void u64_swap(uint64_t *a, uint64_t *b) {
  uint64_t t = *a;
  *a = *b;
  *b = t;
}

static void sift_down(uint64_t *a, size_t i, size_t n) {
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && a[c + 1] > a[c]) c++;
    if (a[i] >= a[c]) return;
    u64_swap(a + i, a + c);
    i = c;
  }
}

/* Introsort on plain integers: several times faster than qsort with a
 * comparison callback, which matters for zones with millions of spans. */
static void sort_u64_depth(uint64_t *a, size_t n, int depth) {
  while (n > 16) {
    if (depth-- == 0) {
      for (size_t i = n / 2; i-- > 0;) sift_down(a, i, n);
      for (size_t i = n - 1; i > 0; i--) {
        u64_swap(a, a + i);
        sift_down(a, 0, i);
      }
      return;
    }
    uint64_t x = a[0], y = a[n / 2], z = a[n - 1];
    uint64_t pivot =
        x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
    /* Hoare partition: stops on equal keys, so runs of equal durations split
     * evenly. Ends with a[0..j] <= pivot <= a[j+1..n-1], both non-empty. */
    size_t i = 0, j = n - 1;
    for (;;) {
      while (a[i] < pivot) i++;
      while (a[j] > pivot) j--;
      if (i >= j) break;
      u64_swap(a + i, a + j);
      i++;
      j--;
    }
    size_t left = j + 1;
    if (left < n - left) {
      sort_u64_depth(a, left, depth);
      a += left;
      n -= left;
    } else {
      sort_u64_depth(a + left, n - left, depth);
      n = left;
    }
  }
  for (size_t i = 1; i < n; i++) {
    uint64_t v = a[i];
    size_t k = i;
    while (k > 0 && a[k - 1] > v) {
      a[k] = a[k - 1];
      k--;
    }
    a[k] = v;
  }
}

/* Above this many values a sort goes without the radix sort's copy, whose
 * memory would add to the durations' own. */
#define RADIX_MAX ((size_t)1 << 22)
#define RADIX_BITS 11

/* LSD radix sort of a through tmp (n values), RADIX_BITS a pass, on each
 * value less the least: the passes above the top bit of the values' range
 * are skipped (one zone's durations seldom span more than 2^33 ns, and the
 * short ones often less than 2^11). */
static void radix_u64(uint64_t *a, uint64_t *tmp, size_t n) {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (size_t i = 0; i < n; i++) {
    if (a[i] < lo) lo = a[i];
    if (a[i] > hi) hi = a[i];
  }
  int bits = hi > lo ? 64 - __builtin_clzll(hi - lo) : 0;
  uint64_t *src = a, *dst = tmp;
  for (int shift = 0; shift < bits; shift += RADIX_BITS) {
    size_t at[1u << RADIX_BITS] = {0};
    const uint64_t mask = (1u << RADIX_BITS) - 1;
    for (size_t i = 0; i < n; i++) at[(src[i] - lo) >> shift & mask]++;
    for (size_t k = 0, sum = 0; k <= mask; k++) {
      size_t c = at[k];
      at[k] = sum;
      sum += c;
    }
    for (size_t i = 0; i < n; i++)
      dst[at[(src[i] - lo) >> shift & mask]++] = src[i];
    uint64_t *t = src;
    src = dst;
    dst = t;
  }
  if (src != a) memcpy(a, src, n * sizeof *a);
}

/* Values within 2^SMALL_BITS of the least are counted, not moved: one
 * zone's durations are mostly close to its shortest. */
#define SMALL_BITS 12

/* Sorts a (n values, at most RADIX_MAX) through tmp: the values close to
 * the least counted into two tables (alternate values, so that runs of
 * equal ones do not wait on one counter), the others radix-sorted after
 * them. */
static void sort_counted(uint64_t *a, uint64_t *tmp, size_t n) {
  uint64_t lo = UINT64_MAX;
  for (size_t i = 0; i < n; i++)
    if (a[i] < lo) lo = a[i];
  uint32_t c0[1u << SMALL_BITS] = {0}, c1[1u << SMALL_BITS] = {0};
  size_t nrest = 0, i = 0;
  for (; i + 1 < n; i += 2) {
    uint64_t x = a[i] - lo, y = a[i + 1] - lo;
    if (x >> SMALL_BITS)
      tmp[nrest++] = a[i];
    else
      c0[x]++;
    if (y >> SMALL_BITS)
      tmp[nrest++] = a[i + 1];
    else
      c1[y]++;
  }
  if (i < n) {
    if ((a[i] - lo) >> SMALL_BITS)
      tmp[nrest++] = a[i];
    else
      c0[a[i] - lo]++;
  }
  /* a is free now: the scratch of the others' sort. */
  radix_u64(tmp, a, nrest);
  size_t at = 0;
  for (uint64_t v = 0; v < (1u << SMALL_BITS); v++)
    for (uint32_t k = c0[v] + c1[v]; k; k--) a[at++] = lo + v;
  memcpy(a + at, tmp, nrest * sizeof *a);
}

/* Sorts a (n values) through scratch (its v and cap; kept for the next
 * sort, as a fresh block would be faulted in again each time). */
static void sort_u64(uint64_t *a, size_t n, u64vec *scratch) {
  if (n > 64 && n <= RADIX_MAX && scratch->cap < n) {
    uint64_t *v = realloc(scratch->v, n * sizeof *v);
    if (v) scratch->v = v, scratch->cap = n;
  }
  if (n > 64 && n <= RADIX_MAX && scratch->cap >= n) {
    sort_counted(a, scratch->v, n);
    return;
  }
  int depth = 0;
  for (size_t m = n; m > 1; m >>= 1) depth += 2;
  sort_u64_depth(a, n, depth);
}

uint64_t mlprof__percentile_sorted(const uint64_t *a, size_t n, unsigned p) {
  return n ? a[mlprof__pct_rank(n, p) - 1] : 0;
}

/* ---- the builder ----------------------------------------------------------
 */

typedef struct {
  char *s;
  size_t len;
  uint64_t hash;
  uint8_t category;
  uint32_t zone, counter, unit; /* what the string names, MLPROF__NONE */
} str_entry;

/* Past the budget of raw durations (mlprof__stats_budget), a zone counts
 * its durations in log-linear buckets instead: one a value below 256, then
 * 256 a power of two (each 1/512 to 1/256 of its values wide, so that the
 * buckets of the percentiles of a narrow distribution, a training step's,
 * fit the budget of one selection pass), HIST_BUCKETS in all (114 KB). */
#define SUB_BITS 8
#define HIST_BUCKETS ((size_t)(64 - SUB_BITS + 1) << SUB_BITS)
/* A selection pass that cannot collect the values of an interval counts
 * them in this many buckets of equal width, to narrow it for the next. */
#define REFINE_BUCKETS 4096

static const unsigned pcts[4] = {50, 90, 95, 99};

typedef struct {
  durvec durations;
  uint64_t *hist; /* HIST_BUCKETS counts once the zone spilled, else NULL */
  double sq;      /* a spilled zone's squared deviations from its mean */
  uint32_t probe0, nprobes; /* its probes in the selection pass */
  int done;                 /* its statistics are computed */
  uint32_t str;             /* its name in the string table, for the category */
} zone_build;

/* What a selection pass looks for: the values of a spilled zone within
 * [lo, hi], n of them by the pass before, where the percentiles pcts[k]
 * of bit k of want lie, at rank[k] (1-based) among them. */
typedef struct {
  uint32_t zone;
  unsigned want;
  uint64_t rank[4];
  uint64_t lo, hi, n;
  /* Collecting: room for the n values, got of them so far. Refining (w,
   * the buckets' width, not 0): REFINE_BUCKETS counts. */
  uint64_t *v, got, w;
} probe;

/* Spans of one zone on one thread not yet known to be inside another span
 * of that zone (recursion): where each ended (seq, the thread's count of
 * ended spans) and the time it covers; entries whose future ancestors are
 * all the same are merged, so a stack holds about one entry a depth. */
typedef struct {
  uint64_t seq, ns;
} outer_entry;

typedef struct {
  outer_entry *v;
  size_t head, n, cap; /* entries v[head..n) */
} outer_stack;

typedef struct {
  uint64_t *child; /* child[d]: summed durations of ended spans at depth d
                      whose parent has not ended yet */
  size_t child_cap, child_top; /* child[child_top..] count as 0 */
  uint32_t last_zone;          /* zone of the span just read, for its units */
  /* start[d] (d < child_top): seq of the last span ended at depth <= d,
   * where the subtree of the span open at depth d began; seq: spans ended
   * on the thread; the zones' outer_stacks (stack_of[zone]: index, or
   * MLPROF__NONE; zones past stack_cap have none). */
  uint64_t *start, seq;
  size_t start_cap;
  uint32_t *stack_of;
  size_t stack_cap;
  outer_stack *stacks;
  size_t nstacks, stacks_cap;
} thread_build;

typedef struct {
  uint64_t nfinite;
  double sum;
  uint64_t last_t; /* job time of last */
  double *values;  /* the finite ones, for the percentiles */
  size_t vcap;
} counter_build;

typedef struct {
  uint32_t zone, unit;
  uint64_t n;
} zone_unit;

struct mlprof__stats {
  mlprof__report r;
  u64vec scratch; /* the sorts' (sort_u64) */
  u64vec widened; /* a zone's 32-bit durations as 64, for its sort */
  size_t zcap, zbcap, pcap, tcap, tbcap, ccap, cbcap, ucap, ocap;
  zone_build *zb;    /* parallel to r.zones */
  thread_build *tb;  /* parallel to r.threads */
  counter_build *cb; /* parallel to r.counters */
  str_entry *strs;   /* every name of every profile, once by content */
  size_t nstrs, scap;
  uint32_t *str_slots; /* hash index over strs */
  size_t str_slot_cap;
  zone_unit *zu; /* units attached to zones */
  size_t nzu, zucap;
  mlprof__map zu_index; /* zone << 32 | unit -> index in zu */
  size_t mcap;          /* capacity of the current process's meta */
  /* The profile being read. */
  mlprof__map names; /* name id -> index in strs */
  mlprof__map tids;  /* tid -> index in r.threads */
  uint32_t last_tid, last_thread;
  int end_seen;
  uint64_t end_ns, end_dropped, last_ns;
  /* A selection (mlprof__stats_selection): the first and last record kept,
   * in job time; the wall is between them. */
  int selection;
  uint64_t sel_first, sel_last;
  size_t first_open;   /* r.open entries of this profile start here */
  int keep_durations;  /* hand the sorted durations to the report */
  size_t budget, held; /* room for raw durations: at most, and taken */
  probe *probes;       /* the selection pass's, by zone */
  size_t nprobes, prcap;
  unsigned passes; /* selection passes begun */
};

/* The index of the string s in the table, added if new; MLPROF__NONE when out
 * of memory. */
static uint32_t str_intern(mlprof__stats *s, const char *str, size_t len) {
  uint64_t h = mlprof__hash(str, len, MLPROF__HASH_START);
  if (s->str_slot_cap) {
    for (size_t i = h & (s->str_slot_cap - 1);;
         i = (i + 1) & (s->str_slot_cap - 1)) {
      uint32_t k = s->str_slots[i];
      if (k == MLPROF__NONE) break;
      if (s->strs[k].hash == h && s->strs[k].len == len &&
          memcmp(s->strs[k].s, str, len) == 0)
        return k;
    }
  }
  if ((s->nstrs + 1) * 2 > s->str_slot_cap) {
    size_t cap = s->str_slot_cap ? s->str_slot_cap * 2 : 64;
    uint32_t *slots = malloc(cap * sizeof *slots);
    if (!slots) return MLPROF__NONE;
    memset(slots, 0xff, cap * sizeof *slots);
    for (size_t k = 0; k < s->nstrs; k++) {
      size_t i = s->strs[k].hash & (cap - 1);
      while (slots[i] != MLPROF__NONE) i = (i + 1) & (cap - 1);
      slots[i] = (uint32_t)k;
    }
    free(s->str_slots);
    s->str_slots = slots;
    s->str_slot_cap = cap;
  }
  if (s->nstrs >= MLPROF__NONE - 1 ||
      mlprof__grow(&s->strs, &s->scap, s->nstrs + 1, sizeof *s->strs))
    return MLPROF__NONE;
  char *copy = mlprof__dup(str, len);
  if (!copy) return MLPROF__NONE;
  uint32_t k = (uint32_t)s->nstrs++;
  s->strs[k] = (str_entry){.s = copy,
                           .len = len,
                           .hash = h,
                           .zone = MLPROF__NONE,
                           .counter = MLPROF__NONE,
                           .unit = MLPROF__NONE};
  size_t i = h & (s->str_slot_cap - 1);
  while (s->str_slots[i] != MLPROF__NONE) i = (i + 1) & (s->str_slot_cap - 1);
  s->str_slots[i] = k;
  return k;
}

/* The string behind a name id of the current profile. The reader promises
 * the id was announced; NULL otherwise, and the record is ignored. */
static inline str_entry *name_str(mlprof__stats *s, uint32_t id) {
  uint32_t k = mlprof__map_get(&s->names, id);
  return k == MLPROF__NONE ? NULL : &s->strs[k];
}

static uint32_t zone_of(mlprof__stats *s, str_entry *e) {
  if (e->zone != MLPROF__NONE) return e->zone;
  mlprof__report *r = &s->r;
  if (mlprof__grow(&r->zones, &s->zcap, r->nzones + 1, sizeof *r->zones) ||
      mlprof__grow(&s->zb, &s->zbcap, r->nzones + 1, sizeof *s->zb))
    return MLPROF__NONE;
  char *name = mlprof__dup(e->s, e->len);
  if (!name) return MLPROF__NONE;
  mlprof__zone_stats *z = &r->zones[r->nzones];
  memset(z, 0, sizeof *z);
  z->name = name;
  z->name_len = e->len;
  z->min_ns = UINT64_MAX;
  s->zb[r->nzones] = (zone_build){.str = (uint32_t)(e - s->strs)};
  return e->zone = (uint32_t)r->nzones++;
}

static uint32_t counter_of(mlprof__stats *s, str_entry *e) {
  if (e->counter != MLPROF__NONE) return e->counter;
  mlprof__report *r = &s->r;
  if (mlprof__grow(&r->counters, &s->ccap, r->ncounters + 1,
                   sizeof *r->counters) ||
      mlprof__grow(&s->cb, &s->cbcap, r->ncounters + 1, sizeof *s->cb))
    return MLPROF__NONE;
  char *name = mlprof__dup(e->s, e->len);
  if (!name) return MLPROF__NONE;
  r->counters[r->ncounters] = (mlprof__counter_stats){
      .name = name, .name_len = e->len, .min = INFINITY, .max = -INFINITY};
  s->cb[r->ncounters] = (counter_build){0};
  return e->counter = (uint32_t)r->ncounters++;
}

static uint32_t unit_of(mlprof__stats *s, str_entry *e) {
  if (e->unit != MLPROF__NONE) return e->unit;
  mlprof__report *r = &s->r;
  if (mlprof__grow(&r->units, &s->ucap, r->nunits + 1, sizeof *r->units))
    return MLPROF__NONE;
  char *name = mlprof__dup(e->s, e->len);
  if (!name) return MLPROF__NONE;
  r->units[r->nunits] = (mlprof__unit_stats){.name = name, .name_len = e->len};
  return e->unit = (uint32_t)r->nunits++;
}

/* zone_of, counter_of, unit_of: the report's zone, counter or unit named e,
 * added if new; MLPROF__NONE when out of memory. */

/* thread_of past its one-entry cache. */
static uint32_t thread_find(mlprof__stats *s, uint32_t tid) {
  uint32_t t = mlprof__map_get(&s->tids, tid);
  if (t == MLPROF__NONE) {
    mlprof__report *r = &s->r;
    size_t proc = r->nprocs - 1;
    if (r->nthreads >= MLPROF__NONE - 1 ||
        mlprof__grow(&r->threads, &s->tcap, r->nthreads + 1,
                     sizeof *r->threads) ||
        mlprof__grow(&s->tb, &s->tbcap, r->nthreads + 1, sizeof *s->tb))
      return MLPROF__NONE;
    char *name = mlprof__dup("", 0);
    if (!name || mlprof__map_put(&s->tids, tid, (uint32_t)r->nthreads)) {
      free(name);
      return MLPROF__NONE;
    }
    t = (uint32_t)r->nthreads++;
    r->threads[t] = (mlprof__thread_stats){
        .proc = proc, .pid = r->procs[proc].pid, .tid = tid, .name = name};
    s->tb[t] = (thread_build){.last_zone = MLPROF__NONE};
    r->procs[proc].threads++;
  }
  s->last_tid = tid;
  s->last_thread = t;
  return t;
}

/* The report's thread for tid in the current profile, added if new. */
static inline uint32_t thread_of(mlprof__stats *s, uint32_t tid) {
  if (s->last_thread != MLPROF__NONE && s->last_tid == tid)
    return s->last_thread;
  return thread_find(s, tid);
}

static void see_time(mlprof__stats *s, uint64_t t) {
  if (t > s->last_ns) s->last_ns = t;
  if (!s->selection) return;
  uint64_t jt = s->r.procs[s->r.nprocs - 1].offset_ns + t;
  if (jt < s->sel_first) s->sel_first = jt;
  if (jt > s->sel_last) s->sel_last = jt;
}

/* A record other than a span on thread tid at time t: units after it are
 * no span's, and t is one of the profile's times. The thread's index, or
 * MLPROF__NONE when out of memory. */
static uint32_t non_span(mlprof__stats *s, uint32_t tid, uint64_t t) {
  uint32_t th = thread_of(s, tid);
  if (th == MLPROF__NONE) return th;
  s->tb[th].last_zone = MLPROF__NONE;
  see_time(s, t);
  return th;
}

/* ---- durations ------------------------------------------------------------
 */

static size_t hist_bucket(uint64_t v) {
  if (v < (1u << SUB_BITS)) return (size_t)v;
  int e = 63 - __builtin_clzll(v);
  return (size_t)(e - SUB_BITS + 1) << SUB_BITS |
         (size_t)(v >> (e - SUB_BITS) & ((1u << SUB_BITS) - 1));
}

/* The smallest value of bucket b and the buckets' width there. */
static uint64_t hist_lo(size_t b, uint64_t *width) {
  size_t k = b >> SUB_BITS;
  if (k == 0) {
    *width = 1;
    return b;
  }
  *width = 1ull << (k - 1);
  return (uint64_t)((1u << SUB_BITS) | (b & ((1u << SUB_BITS) - 1))) << (k - 1);
}

/* Turns the zone whose raw durations take the most room into a histogram,
 * when they take more than one. Returns 0, 1 when no zone does, or
 * MLPROF_ENOMEM. */
static int spill(mlprof__stats *s) {
  zone_build *big = NULL;
  for (size_t i = 0; i < s->r.nzones; i++)
    if (!big || s->zb[i].durations.cap > big->durations.cap) big = &s->zb[i];
  if (!big || big->durations.cap <= HIST_BUCKETS) return 1;
  if (!(big->hist = calloc(HIST_BUCKETS, sizeof *big->hist)))
    return MLPROF_ENOMEM;
  for (size_t k = 0; k < big->durations.n; k++)
    big->hist[hist_bucket(durvec_at(&big->durations, k))]++;
  s->held -= big->durations.cap;
  free(big->durations.v);
  big->durations = (durvec){0};
  return 0;
}

/* Keeps duration d of zone zi: raw while the budget has room, spilling the
 * largest zones when it has not (checked as the room grows: a job of many
 * zones too small to spill may stay past it). Returns 0 or MLPROF_ENOMEM. */
static int add_duration(mlprof__stats *s, uint32_t zi, uint64_t d) {
  zone_build *zb = &s->zb[zi];
  if (zb->hist) {
    zb->hist[hist_bucket(d)]++;
    return 0;
  }
  size_t cap = zb->durations.cap;
  if (durvec_push(&zb->durations, d)) return MLPROF_ENOMEM;
  if (zb->durations.cap == cap || s->keep_durations) return 0;
  s->held += zb->durations.cap - cap;
  int rc = 0;
  while (!rc && s->held > s->budget) rc = spill(s);
  return rc < 0 ? rc : 0;
}

/* ---- visitor callbacks ----------------------------------------------------
 */

static int on_header(void *ud, const mlprof__header *h) {
  mlprof__stats *s = ud;
  mlprof__proc_stats *p = &s->r.procs[s->r.nprocs - 1];
  char *clock = dup_str(h->clock);
  if (!clock) return MLPROF_ENOMEM;
  free(p->clock);
  p->clock = clock;
  p->flush_interval_ms = h->flush_interval_ms;
  return 0;
}

static int on_name(void *ud, const mlprof__name *n) {
  mlprof__stats *s = ud;
  uint32_t k = str_intern(s, n->name, n->name_len);
  if (k == MLPROF__NONE) return MLPROF_ENOMEM;
  if (!s->strs[k].category) s->strs[k].category = n->category;
  return mlprof__map_put(&s->names, n->id, k);
}

static int on_thread(void *ud, uint32_t tid, const char *name, size_t len) {
  mlprof__stats *s = ud;
  uint32_t t = thread_of(s, tid);
  char *copy = t == MLPROF__NONE ? NULL : mlprof__dup(name, len);
  if (!copy) return MLPROF_ENOMEM;
  free(s->r.threads[t].name);
  s->r.threads[t].name = copy;
  s->r.threads[t].name_len = len;
  return 0;
}

static int on_events(void *ud, uint32_t tid, uint64_t dropped) {
  mlprof__stats *s = ud;
  uint32_t t = thread_of(s, tid);
  if (t == MLPROF__NONE) return MLPROF_ENOMEM;
  if (dropped > s->r.threads[t].dropped) s->r.threads[t].dropped = dropped;
  s->tb[t].last_zone = MLPROF__NONE;
  return 0;
}

/* The part of a span of zone zi at depth d (ended as the thread's seq-th,
 * dur long, its subtree begun after span q, its parent's after span pq)
 * not inside another span of the same zone: its duration less that of the
 * outermost spans of zi inside it, which counted already. Returns it, or
 * UINT64_MAX when out of memory. */
static uint64_t outer_time(thread_build *tb, uint32_t zi, uint32_t d,
                           uint64_t q, uint64_t pq, uint64_t seq,
                           uint64_t dur) {
  uint32_t at = zi < tb->stack_cap ? tb->stack_of[zi] : MLPROF__NONE;
  if (at == MLPROF__NONE) {
    if (d == 0) return dur; /* nothing of zi inside it, no ancestor */
    size_t old = tb->stack_cap;
    if (tb->nstacks >= MLPROF__NONE - 1 ||
        mlprof__grow(&tb->stacks, &tb->stacks_cap, tb->nstacks + 1,
                     sizeof *tb->stacks) ||
        mlprof__grow(&tb->stack_of, &tb->stack_cap, (size_t)zi + 1,
                     sizeof *tb->stack_of))
      return UINT64_MAX;
    for (size_t k = old; k < tb->stack_cap; k++) tb->stack_of[k] = MLPROF__NONE;
    at = (uint32_t)tb->nstacks++;
    tb->stack_of[zi] = at;
    tb->stacks[at] = (outer_stack){0};
  }
  outer_stack *st = &tb->stacks[at];
  /* The common case: no span of zi ended since the last depth-0 span (its
   * entries, if any, are dead), so none is inside this one and it is the
   * stack's one live entry. */
  if (d && st->cap &&
      (st->n == st->head || st->v[st->n - 1].seq <= tb->start[0])) {
    st->head = 0;
    st->n = 1;
    st->v[0] = (outer_entry){seq, dur};
    return dur;
  }
  uint64_t inner = 0;
  while (st->n > st->head && st->v[st->n - 1].seq > q)
    inner += st->v[--st->n].ns;
  uint64_t outer = dur > inner ? dur - inner : 0;
  if (d == 0) { /* no ancestor: what is left is dead */
    st->head = st->n = 0;
    return outer;
  }
  /* Spans of zi ended since its parent's subtree began are inside every
   * ancestor it has: one entry with it. Those ended before the last
   * depth-0 span ended have no ancestor left. */
  uint64_t merged = dur;
  while (st->n > st->head && st->v[st->n - 1].seq > pq)
    merged += st->v[--st->n].ns;
  while (st->head < st->n && st->v[st->head].seq <= tb->start[0]) st->head++;
  if (st->head && st->head * 2 >= st->n) {
    for (size_t k = st->head; k < st->n; k++) st->v[k - st->head] = st->v[k];
    st->n -= st->head;
    st->head = 0;
  }
  if (st->n + 1 > st->cap &&
      mlprof__grow(&st->v, &st->cap, st->n + 1, sizeof *st->v))
    return UINT64_MAX;
  st->v[st->n++] = (outer_entry){seq, merged};
  return outer;
}

static void thread_build_free(thread_build *tb) {
  free(tb->child);
  free(tb->start);
  for (size_t i = 0; i < tb->nstacks; i++) free(tb->stacks[i].v);
  free(tb->stacks);
  free(tb->stack_of);
  tb->stack_of = NULL;
  tb->stack_cap = 0;
  tb->child = tb->start = NULL;
  tb->stacks = NULL;
  tb->child_cap = tb->child_top = tb->start_cap = tb->nstacks = tb->stacks_cap =
      0;
  tb->seq = 0;
}

static int on_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin, uint64_t end) {
  mlprof__stats *s = ud;
  uint32_t t = thread_of(s, tid);
  if (t == MLPROF__NONE) return MLPROF_ENOMEM;
  thread_build *tb = &s->tb[t];
  tb->last_zone = MLPROF__NONE;
  str_entry *e = name_str(s, name);
  if (!e) return 0;
  uint32_t zi = zone_of(s, e);
  if (zi == MLPROF__NONE) return MLPROF_ENOMEM;
  uint64_t dur = end > begin ? end - begin : 0;
  if (s->selection) see_time(s, begin);
  see_time(s, end);

  /* Self time in the stream: the children of this span ended just before it
   * and left their summed durations at child[depth + 1]. Lowering child_top
   * to depth + 1 consumes that sum and discards deeper ones, which belong to
   * spans whose parents were lost (dropped events), so they are never
   * charged to a later span; slots at or past child_top are zeroed on reuse. */
  uint64_t self = dur, outer = dur;
  if (depth < MAX_DEPTH) {
    if (((size_t)depth + 2 > tb->child_cap ||
         (size_t)depth + 2 > tb->start_cap) &&
        (mlprof__grow(&tb->child, &tb->child_cap, (size_t)depth + 2,
                      sizeof *tb->child) ||
         mlprof__grow(&tb->start, &tb->start_cap, (size_t)depth + 2,
                      sizeof *tb->start)))
      return MLPROF_ENOMEM;
    /* Stale slots: the span ended last had a depth below them. */
    for (size_t k = tb->child_top; k < (size_t)depth + 2; k++) {
      tb->child[k] = 0;
      tb->start[k] = tb->seq;
    }
    uint64_t children = tb->child[depth + 1];
    self = dur > children ? dur - children : 0;
    tb->child[depth] += dur;
    uint64_t seq = ++tb->seq;
    outer = outer_time(tb, zi, depth, tb->start[depth],
                       depth ? tb->start[depth - 1] : 0, seq, dur);
    if (outer == UINT64_MAX) return MLPROF_ENOMEM;
    tb->start[depth] = seq;
    tb->child_top = (size_t)depth + 1;
  }

  if (add_duration(s, zi, dur)) return MLPROF_ENOMEM;
  mlprof__zone_stats *z = &s->r.zones[zi];
  z->count++;
  if (dur < z->min_ns) z->min_ns = dur;
  if (dur > z->max_ns) z->max_ns = dur;
  z->total_ns += dur;
  z->self_ns += self;
  z->outer_ns += outer;
  mlprof__thread_stats *th = &s->r.threads[t];
  th->spans++;
  if (depth == 0) th->busy_ns += dur;
  s->r.procs[s->r.nprocs - 1].spans++;
  tb->last_zone = zi;
  return 0;
}

static int add_units(mlprof__stats *s, uint32_t zone, uint32_t name,
                     uint64_t n) {
  str_entry *e = name_str(s, name);
  /* "seq" numbers a collective on its group (docs/distributed.md) and
   * "cuda.correlation" pairs a kernel with its launch (docs/gpu.md):
   * ordinals, not amounts of work, so no throughput. */
  if (!e || (e->len == 3 && !memcmp(e->s, "seq", 3)) ||
      (e->len == 16 && !memcmp(e->s, "cuda.correlation", 16)))
    return 0;
  uint32_t u = unit_of(s, e);
  if (u == MLPROF__NONE) return MLPROF_ENOMEM;
  s->r.units[u].total += n;
  if (zone == MLPROF__NONE) {
    s->r.units[u].outside += n;
    return 0;
  }
  uint64_t key = (uint64_t)zone << 32 | u;
  uint32_t i = mlprof__map_get(&s->zu_index, key);
  if (i == MLPROF__NONE) {
    if (s->nzu >= MLPROF__NONE - 1 ||
        mlprof__grow(&s->zu, &s->zucap, s->nzu + 1, sizeof *s->zu) ||
        mlprof__map_put(&s->zu_index, key, (uint32_t)s->nzu))
      return MLPROF_ENOMEM;
    i = (uint32_t)s->nzu++;
    s->zu[i] = (zone_unit){.zone = zone, .unit = u};
  }
  s->zu[i].n += n;
  return 0;
}

static int on_span_units(void *ud, uint32_t tid, uint32_t name, uint64_t n) {
  mlprof__stats *s = ud;
  uint32_t t = thread_of(s, tid);
  if (t == MLPROF__NONE) return MLPROF_ENOMEM;
  /* Units after anything but a span have no zone: count them outside. */
  return add_units(s, s->tb[t].last_zone, name, n);
}

static int double_cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static int on_counter(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                      double v) {
  mlprof__stats *s = ud;
  uint32_t th = non_span(s, tid, t);
  if (th == MLPROF__NONE) return MLPROF_ENOMEM;
  str_entry *e = name_str(s, name);
  if (!e) return 0;
  uint32_t c = counter_of(s, e);
  if (c == MLPROF__NONE) return MLPROF_ENOMEM;
  mlprof__counter_stats *cs = &s->r.counters[c];
  counter_build *cb = &s->cb[c];
  uint64_t jt = s->r.procs[s->r.nprocs - 1].offset_ns + t;
  if (cs->count == 0 || jt >= cb->last_t) {
    cs->last = v;
    cb->last_t = jt;
  }
  cs->count++;
  if (isfinite(v)) {
    if (mlprof__grow(&cb->values, &cb->vcap, cb->nfinite + 1,
                     sizeof *cb->values))
      return MLPROF_ENOMEM;
    cb->values[cb->nfinite++] = v;
    cb->sum += v;
    if (v < cs->min) cs->min = v;
    if (v > cs->max) cs->max = v;
  }
  return 0;
}

static int on_units(void *ud, uint32_t tid, uint32_t name, uint64_t t,
                    uint64_t n) {
  mlprof__stats *s = ud;
  uint32_t th = non_span(s, tid, t);
  if (th == MLPROF__NONE) return MLPROF_ENOMEM;
  return add_units(s, MLPROF__NONE, name, n);
}

static int step_entry(mlprof__stats *s, uint32_t tid, uint64_t t, int end) {
  uint32_t th = non_span(s, tid, t);
  if (th == MLPROF__NONE) return MLPROF_ENOMEM;
  mlprof__thread_stats *ts = &s->r.threads[th];
  uint64_t jt = s->r.procs[s->r.nprocs - 1].offset_ns + t;
  if (mlprof__marks_add(&ts->marks, jt, end)) return MLPROF_ENOMEM;
  ts->steps = ts->marks.marks;
  return 0;
}

static int on_step(void *ud, uint32_t tid, uint64_t t) {
  return step_entry(ud, tid, t, 0);
}

static int on_step_end(void *ud, uint32_t tid, uint64_t t) {
  return step_entry(ud, tid, t, 1);
}

static int on_open(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                   uint64_t begin) {
  mlprof__stats *s = ud;
  uint32_t th = non_span(s, tid, begin);
  if (th == MLPROF__NONE) return MLPROF_ENOMEM;
  str_entry *e = name_str(s, name);
  if (!e) return 0;
  mlprof__report *r = &s->r;
  char *copy = NULL;
  if (mlprof__grow(&r->open, &s->ocap, r->nopen + 1, sizeof *r->open) ||
      !(copy = mlprof__dup(e->s, e->len)))
    return MLPROF_ENOMEM;
  r->open[r->nopen++] = (mlprof__open_zone){.name = copy,
                                            .name_len = e->len,
                                            .category = e->category,
                                            .proc = r->nprocs - 1,
                                            .thread = th,
                                            .depth = depth,
                                            .begin_ns = begin};
  return 0;
}

static int on_meta(void *ud, const char *key, size_t klen, const char *value,
                   size_t vlen) {
  mlprof__stats *s = ud;
  mlprof__proc_stats *p = &s->r.procs[s->r.nprocs - 1];
  return mlprof__kv_add(&p->meta, &p->nmeta, &s->mcap, key, klen, value, vlen);
}

static int on_end(void *ud, uint64_t end_ns, uint64_t dropped,
                  uint64_t unmatched) {
  mlprof__stats *s = ud;
  s->end_seen = 1;
  s->end_ns = end_ns;
  s->end_dropped = dropped;
  s->r.procs[s->r.nprocs - 1].unmatched = unmatched;
  return 0;
}

/* ---- profiles -------------------------------------------------------------
 */

mlprof__stats *mlprof__stats_new(void) {
  mlprof__stats *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->last_thread = MLPROF__NONE;
  s->budget = MLPROF__STATS_BUDGET;
  return s;
}

int mlprof__stats_profile_begin(mlprof__stats *s, const mlprof__job_profile *jp,
                                mlprof__visitor *v) {
  mlprof__report *r = &s->r;
  if (mlprof__grow(&r->procs, &s->pcap, r->nprocs + 1, sizeof *r->procs))
    return MLPROF_ENOMEM;
  mlprof__proc_stats *p = &r->procs[r->nprocs];
  memset(p, 0, sizeof *p);
  p->path = dup_str(jp->path);
  p->hostname = dup_str(jp->hostname);
  p->exe = dup_str(jp->exe);
  p->cmdline = dup_str(jp->cmdline);
  p->name = dup_str(jp->name);
  p->clock = dup_str("");
  if (!p->path || !p->hostname || !p->exe || !p->cmdline || !p->name ||
      !p->clock) {
    free(p->path);
    free(p->hostname);
    free(p->exe);
    free(p->cmdline);
    free(p->name);
    free(p->clock);
    return MLPROF_ENOMEM;
  }
  p->pid = jp->pid;
  p->ppid = jp->ppid;
  p->parent = jp->parent;
  /* The next program of a chain starts later, so comes later: anything else
   * (a profile built by hand, zeroed) is no chain. */
  p->exec_into = jp->exec_next > (int)r->nprocs ? jp->exec_next : -1;
  p->alive = jp->alive;
  p->rank = jp->rank;
  p->world_size = jp->world_size;
  p->clock_rejected = jp->clock_rejected;
  p->offset_ns = jp->offset_ns;
  r->nprocs++;
  s->mcap = 0;
  s->end_seen = 0;
  s->end_ns = s->end_dropped = s->last_ns = 0;
  s->last_thread = MLPROF__NONE;
  s->first_open = r->nopen;
  *v = (mlprof__visitor){
      .ud = s,
      .header = on_header,
      .name = on_name,
      .thread = on_thread,
      .events = on_events,
      .span = on_span,
      .span_units = on_span_units,
      .counter = on_counter,
      .units = on_units,
      .step = on_step,
      .step_end = on_step_end,
      .open = on_open,
      .meta = on_meta,
      .end = on_end,
  };
  return 0;
}

typedef struct {
  mlprof__kv kv;
  size_t order;
} kv_sorting;

static int kv_cmp(const void *a, const void *b) {
  const kv_sorting *x = a, *y = b;
  size_t n = x->kv.key_len < y->kv.key_len ? x->kv.key_len : y->kv.key_len;
  int c = memcmp(x->kv.key, y->kv.key, n);
  if (c) return c;
  if (x->kv.key_len != y->kv.key_len)
    return x->kv.key_len < y->kv.key_len ? -1 : 1;
  return x->order < y->order ? -1 : 1;
}

int mlprof__kv_add(mlprof__kv **kv, size_t *n, size_t *cap, const char *key,
                   size_t klen, const char *value, size_t vlen) {
  if (mlprof__grow(kv, cap, *n + 1, sizeof **kv)) return MLPROF_ENOMEM;
  char *k = mlprof__dup(key, klen), *v = mlprof__dup(value, vlen);
  if (!k || !v) {
    free(k);
    free(v);
    return MLPROF_ENOMEM;
  }
  (*kv)[(*n)++] =
      (mlprof__kv){.key = k, .value = v, .key_len = klen, .value_len = vlen};
  return 0;
}

int mlprof__kv_dedupe(mlprof__kv *kv, size_t *n) {
  if (*n < 2) return 0;
  kv_sorting *t = malloc(*n * sizeof *t);
  if (!t) return MLPROF_ENOMEM;
  for (size_t i = 0; i < *n; i++) t[i] = (kv_sorting){kv[i], i};
  mlprof__sort(t, *n, sizeof *t, kv_cmp);
  size_t keep = 0;
  for (size_t i = 0; i < *n; i++) {
    int later = i + 1 < *n && t[i + 1].kv.key_len == t[i].kv.key_len &&
                memcmp(t[i + 1].kv.key, t[i].kv.key, t[i].kv.key_len) == 0;
    if (later) {
      free(t[i].kv.key);
      free(t[i].kv.value);
    } else {
      kv[keep++] = t[i].kv;
    }
  }
  *n = keep;
  free(t);
  return 0;
}

int mlprof__stats_profile_end(mlprof__stats *s, const mlprof__read_report *rep,
                              const char *read_error) {
  mlprof__report *r = &s->r;
  mlprof__proc_stats *p = &r->procs[r->nprocs - 1];
  if (rep) {
    p->read = *rep;
    /* The profile's end is not a record a selection kept. */
    if (s->selection) {
      if (rep->last_ns > s->last_ns) s->last_ns = rep->last_ns;
    } else {
      see_time(s, rep->last_ns);
    }
  }
  if (read_error)
    snprintf(p->read_error, sizeof p->read_error, "%s", read_error);
  p->clean_end = rep ? rep->clean_end : s->end_seen;
  p->wall_ns = s->end_seen && s->end_ns > s->last_ns ? s->end_ns : s->last_ns;
  uint64_t dropped = 0;
  for (size_t t = 0; t < r->nthreads; t++) {
    if (r->threads[t].proc != r->nprocs - 1) continue;
    dropped += r->threads[t].dropped;
    thread_build_free(&s->tb[t]);
  }
  p->dropped = s->end_dropped > dropped ? s->end_dropped : dropped;
  for (size_t i = s->first_open; i < r->nopen; i++)
    r->open[i].open_ns =
        p->wall_ns > r->open[i].begin_ns ? p->wall_ns - r->open[i].begin_ns : 0;
  mlprof__map_clear(&s->names);
  mlprof__map_clear(&s->tids);
  s->last_thread = MLPROF__NONE;
  return mlprof__kv_dedupe(p->meta, &p->nmeta);
}

/* ---- results --------------------------------------------------------------
 */

static int add_warning(mlprof__report *r, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int add_warning(mlprof__report *r, size_t *cap, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  char *copy = dup_str(line);
  if (!copy ||
      mlprof__grow(&r->warnings, cap, r->nwarnings + 1, sizeof *r->warnings)) {
    free(copy);
    return MLPROF_ENOMEM;
  }
  r->warnings[r->nwarnings++] = copy;
  return 0;
}

const char *mlprof__proc_end(const mlprof__proc_stats *p) {
  static const char *const how[] = {[MLPROF__END_SHUTDOWN] = "shutdown",
                                    [MLPROF__END_EXIT] = "exit",
                                    [MLPROF__END_EXEC] = "exec",
                                    [MLPROF__END_SIGNAL] = "signal"};
  if (p->clean_end) return how[p->read.end_how];
  return p->alive == 1 ? "running" : p->alive == 0 ? "killed" : "unknown";
}

const char *mlprof__proc_meta(const mlprof__proc_stats *p, const char *key) {
  for (size_t k = 0; k < p->nmeta; k++)
    if (strcmp(p->meta[k].key, key) == 0) return p->meta[k].value;
  return NULL;
}

/* Whether open zone z was left open by the program's own shutdown, which is
 * no warning: a child process (a DataLoader worker) stopped inside a data
 * zone (prefetching when its parent shut it down), or ended by a signal
 * while its parent shut down (its parent ended within 2 s or 5% of its own
 * life after it). */
static int open_at_shutdown(const mlprof__report *r,
                            const mlprof__open_zone *z) {
  const mlprof__proc_stats *p = &r->procs[z->proc];
  if (p->parent < 0) return 0;
  if (z->category == MLPROF_CAT_DATA) return 1;
  if (!p->clean_end || p->read.end_how != MLPROF__END_SIGNAL) return 0;
  const mlprof__proc_stats *pp = &r->procs[p->parent];
  uint64_t end = p->offset_ns + p->wall_ns, pend = pp->offset_ns + pp->wall_ns;
  uint64_t near =
      pp->wall_ns / 20 > 2000000000ull ? pp->wall_ns / 20 : 2000000000ull;
  return pend >= end && pend - end <= near;
}

/* Process i's "mlprof.python" when it says "not loaded: ...", unless its
 * parent said the same (a forked child inherits it); else NULL. */
static const char *py_not_loaded(const mlprof__report *r, size_t i) {
  const mlprof__proc_stats *p = &r->procs[i];
  const char *py = mlprof__proc_meta(p, "mlprof.python");
  if (!py || strncmp(py, "not loaded", 10) != 0) return NULL;
  const char *parent_py =
      p->parent >= 0 ? mlprof__proc_meta(&r->procs[p->parent], "mlprof.python")
                     : NULL;
  return parent_py && strcmp(parent_py, py) == 0 ? NULL : py;
}

/* One line per thing a reader of the report must know before trusting it. */
static int make_warnings(mlprof__report *r) {
  size_t cap = 0;
  int rc = 0;
  for (size_t i = 0; i < r->nprocs && !rc; i++) {
    const mlprof__proc_stats *p = &r->procs[i];
    char who[96];
    snprintf(who, sizeof who, "process %" PRIu64 " (%.60s)", p->pid, p->name);
    if (p->read_error[0])
      rc = add_warning(r, &cap, "%s: read stopped early: %s", who,
                       p->read_error);
    if (!rc && !p->clean_end && p->alive == 1)
      rc = add_warning(r, &cap,
                       "%s: still running: the profile has no closing chunk "
                       "yet; up to one flush interval (%" PRIu32
                       " ms) not written yet",
                       who, p->flush_interval_ms);
    else if (!rc && !p->clean_end)
      rc = add_warning(r, &cap,
                       "%s: profile ended without a closing chunk: process was "
                       "killed%s; up to one flush interval (%" PRIu32
                       " ms) missing",
                       who, p->alive < 0 ? " or is still running" : "",
                       p->flush_interval_ms);
    if (!rc && (p->read.damaged_chunks || p->read.skipped_bytes ||
                p->read.truncated_bytes || p->read.problem[0]))
      rc = add_warning(r, &cap,
                       "%s: damage found: %" PRIu64 " damaged chunks, %" PRIu64
                       " bytes skipped, %" PRIu64
                       " bytes truncated at the end%s%s",
                       who, p->read.damaged_chunks, p->read.skipped_bytes,
                       p->read.truncated_bytes, p->read.problem[0] ? ": " : "",
                       p->read.problem);
    if (!rc && p->clock_rejected)
      rc = add_warning(r, &cap,
                       "%s: a clock offset to rank 0 (META dist.clock.init or "
                       ".final) is out of range or unreadable: left out",
                       who);
    if (p->exec_into >= 0) continue; /* counted in the program it became */
    if (!rc && p->dropped)
      rc = add_warning(r, &cap,
                       "%s: %" PRIu64
                       " events dropped (the memory cap, zones nested or "
                       "annotated past their limits, or a failed write: "
                       "docs/guide.md); counts and times are too low",
                       who, p->dropped);
    if (!rc && p->unmatched)
      rc = add_warning(r, &cap, "%s: %" PRIu64 " zone ends had no begin", who,
                       p->unmatched);
  }
  /* mlprof run's start-up module could not load mlprof in a Python (the
   * key is set by python/mlprof/_startup): one line per reason, with the
   * number of processes that gave it. */
  for (size_t i = 0; i < r->nprocs && !rc; i++) {
    const char *py = py_not_loaded(r, i);
    size_t same = 0, earlier = 0;
    for (size_t k = 0; py && k < r->nprocs && !earlier; k++) {
      const char *other = py_not_loaded(r, k);
      if (other && strcmp(other, py) == 0) {
        earlier = k < i;
        same++;
      }
    }
    if (!py || earlier) continue;
    const mlprof__proc_stats *p = &r->procs[i];
    if (same == 1)
      rc = add_warning(r, &cap,
                       "process %" PRIu64
                       " (%.60s): python instrumentation "
                       "%.400s",
                       p->pid, p->name, py);
    else
      rc = add_warning(r, &cap,
                       "%zu processes (the first: %" PRIu64
                       " (%.60s)): python instrumentation %.400s",
                       same, p->pid, p->name, py);
  }
  /* Zones the program's shutdown left open are listed (open_section of the
   * text report) but not warned about. */
  size_t unexpected = 0;
  for (size_t i = 0; i < r->nopen; i++)
    unexpected += !open_at_shutdown(r, &r->open[i]);
  if (!rc && unexpected)
    rc = add_warning(r, &cap, "%zu zone%s still open at the end", unexpected,
                     unexpected == 1 ? " was" : "s were");
  return rc;
}

static int zone_units_cmp(const void *a, const void *b) {
  const zone_unit *x = a, *y = b;
  if (x->zone != y->zone) return x->zone < y->zone ? -1 : 1;
  return (x->unit > y->unit) - (x->unit < y->unit);
}

static uint64_t *pct_slot(mlprof__zone_stats *z, unsigned k) {
  uint64_t *slot[4] = {&z->p50_ns, &z->p90_ns, &z->p95_ns, &z->p99_ns};
  return slot[k];
}

/* Computes zone i's statistics from its raw durations, or, for a spilled
 * zone, from what the selection passes found; frees the durations unless
 * the report keeps them. Returns 0 or MLPROF_ENOMEM (the zone is left as it
 * was). */
static int zone_finish(mlprof__stats *s, size_t i) {
  mlprof__zone_stats *z = &s->r.zones[i];
  zone_build *zb = &s->zb[i];
  durvec *d = &zb->durations;
  if (zb->hist) {
    zb->done = 1;
    if (!z->count) z->min_ns = 0;
    if (z->count) z->mean_ns = (double)z->total_ns / (double)z->count;
    if (z->count) z->std_ns = sqrt(zb->sq / (double)z->count);
    free(zb->hist);
    zb->hist = NULL;
    return 0;
  }
  /* 32-bit durations are sorted as 64 in a block kept for the next zone
   * (a fresh one would be faulted in again), unless the report keeps it. */
  uint64_t *v = d->v;
  size_t n = d->n;
  if (!d->wide && n) {
    if (s->widened.cap < n) {
      free(s->widened.v);
      s->widened.cap = 0;
      if (!(s->widened.v = malloc(n * sizeof *v))) return MLPROF_ENOMEM;
      s->widened.cap = n;
    }
    v = s->widened.v;
    for (size_t k = 0; k < n; k++) v[k] = ((const uint32_t *)d->v)[k];
    free(d->v);
  }
  zb->done = 1;
  if (!z->count) z->min_ns = 0;
  if (z->count) z->mean_ns = (double)z->total_ns / (double)z->count;
  sort_u64(v, n, &s->scratch);
  for (unsigned k = 0; k < 4; k++)
    *pct_slot(z, k) = mlprof__percentile_sorted(v, n, pcts[k]);
  if (n) {
    /* Two passes over the raw durations: exact where a running sum of
     * squares would cancel. */
    double sq = 0;
    for (size_t k = 0; k < n; k++) {
      double dev = (double)v[k] - z->mean_ns;
      sq += dev * dev;
    }
    z->std_ns = sqrt(sq / (double)n);
  }
  if (s->keep_durations && n) {
    z->durations = v;
    if (v == s->widened.v) s->widened = (u64vec){0};
  } else if (v != s->widened.v) {
    free(v);
  }
  *d = (durvec){0};
  return 0;
}

static int finish_zones(mlprof__stats *s) {
  mlprof__report *r = &s->r;
  for (size_t i = 0; i < r->nzones; i++) {
    mlprof__zone_stats *z = &r->zones[i];
    z->category = s->strs[s->zb[i].str].category;
    r->spans += z->count;
    if (!s->zb[i].done && zone_finish(s, i)) return MLPROF_ENOMEM;
    z->share = r->wall_ns ? (double)z->outer_ns / (double)r->wall_ns : 0;
  }
  if (s->nzu) mlprof__sort(s->zu, s->nzu, sizeof *s->zu, zone_units_cmp);
  for (size_t i = 0; i < s->nzu;) {
    size_t k = i;
    while (k < s->nzu && s->zu[k].zone == s->zu[i].zone) k++;
    mlprof__zone_stats *z = &r->zones[s->zu[i].zone];
    z->units = malloc((k - i) * sizeof *z->units);
    if (!z->units) return MLPROF_ENOMEM;
    for (size_t j = i; j < k; j++) {
      double secs = (double)z->total_ns / 1e9;
      z->units[z->nunits++] = (mlprof__zone_units){
          .unit = s->zu[j].unit,
          .n = s->zu[j].n,
          .per_s = secs > 0 ? (double)s->zu[j].n / secs : 0};
    }
    i = k;
  }
  return 0;
}

/* Folds each program that called exec into the program it became, so the
 * last of a chain stands for the process (profiles are in order of start:
 * a chain's programs come in its order). */
static void fold_execs(mlprof__report *r) {
  for (size_t i = 0; i < r->nprocs; i++) {
    const mlprof__proc_stats *p = &r->procs[i];
    if (p->exec_into < 0 || (size_t)p->exec_into >= r->nprocs) continue;
    mlprof__proc_stats *next = &r->procs[p->exec_into];
    next->spans += p->spans;
    next->threads += p->threads;
    next->dropped += p->dropped;
    next->unmatched += p->unmatched;
    if (next->offset_ns > p->offset_ns) {
      next->wall_ns += next->offset_ns - p->offset_ns;
      next->offset_ns = p->offset_ns;
    }
  }
}

int mlprof__stats_finish(mlprof__stats *s, mlprof__report *out) {
  mlprof__report *r = &s->r;
  int rc = 0;
  for (size_t i = 0; i < r->nprocs; i++) {
    uint64_t end = r->procs[i].offset_ns + r->procs[i].wall_ns;
    if (end > r->wall_ns) r->wall_ns = end;
    r->dropped += r->procs[i].dropped;
  }
  fold_execs(r);
  if (s->selection)
    r->wall_ns = s->sel_last > s->sel_first ? s->sel_last - s->sel_first : 0;
  double wall_s = (double)r->wall_ns / 1e9;
  rc = finish_zones(s);
  for (size_t i = 0; i < r->nthreads && !rc; i++) {
    mlprof__thread_stats *t = &r->threads[i];
    const mlprof__marks *m = &t->marks;
    if (m->steps) {
      t->step_mean_ns = m->total_ns / m->steps;
      t->step_p50_ns = mlprof__marks_percentile(&m, 1, 50);
    }
  }
  for (size_t i = 0; i < r->ncounters; i++) {
    mlprof__counter_stats *c = &r->counters[i];
    counter_build *cb = &s->cb[i];
    if (cb->nfinite) {
      c->mean = cb->sum / (double)cb->nfinite;
      mlprof__sort(cb->values, cb->nfinite, sizeof *cb->values, double_cmp);
      c->p50 = cb->values[mlprof__pct_rank(cb->nfinite, 50) - 1];
      c->p90 = cb->values[mlprof__pct_rank(cb->nfinite, 90) - 1];
      c->p99 = cb->values[mlprof__pct_rank(cb->nfinite, 99) - 1];
    } else {
      c->min = c->max = c->mean = c->p50 = c->p90 = c->p99 = NAN;
    }
    free(cb->values);
    cb->values = NULL;
  }
  for (size_t i = 0; i < r->nunits; i++)
    r->units[i].per_s = wall_s > 0 ? (double)r->units[i].total / wall_s : 0;
  if (!rc) rc = make_warnings(r);
  if (!rc && r->nzones && !(r->order = malloc(r->nzones * sizeof *r->order)))
    rc = MLPROF_ENOMEM;
  if (!rc) {
    mlprof__report_sort(r, MLPROF__SORT_TOTAL, 0);
    *out = *r;
    memset(r, 0, sizeof *r);
  } else {
    memset(out, 0, sizeof *out);
  }
  mlprof__stats_free(s);
  return rc;
}

void mlprof__stats_keep_durations(mlprof__stats *s, int keep) {
  s->keep_durations = keep;
}

void mlprof__stats_selection(mlprof__stats *s) {
  s->selection = 1;
  s->sel_first = UINT64_MAX;
  s->sel_last = 0;
}

void mlprof__stats_budget(mlprof__stats *s, size_t durations) {
  s->budget = durations;
}

/* ---- selection passes -----------------------------------------------------
 */

/* Adds to the next selection pass the search for percentile pcts[k] of
 * zone at rank (1-based) among its n values in [lo, hi]; answers it at once
 * when the interval holds one value, or none (a file that changed between
 * passes). Returns 0 or MLPROF_ENOMEM. */
static int add_target(mlprof__stats *s, uint32_t zone, unsigned k, uint64_t lo,
                      uint64_t hi, uint64_t n, uint64_t rank) {
  if (lo >= hi || !n) {
    *pct_slot(&s->r.zones[zone], k) = lo;
    return 0;
  }
  probe *p = s->nprobes ? &s->probes[s->nprobes - 1] : NULL;
  if (!p || p->zone != zone || p->lo != lo || p->hi != hi) {
    if (mlprof__grow(&s->probes, &s->prcap, s->nprobes + 1, sizeof *s->probes))
      return MLPROF_ENOMEM;
    p = &s->probes[s->nprobes++];
    *p = (probe){.zone = zone, .lo = lo, .hi = hi, .n = n};
  }
  p->want |= 1u << k;
  p->rank[k] = rank;
  return 0;
}

/* The bucket of the nb counts c holding rank (1-based; past their total,
 * the last value), with in *below the count of the buckets before it; nb
 * when c counts nothing. */
static size_t bucket_of_rank(const uint64_t *c, size_t nb, uint64_t rank,
                             uint64_t *below) {
  uint64_t sum = 0;
  size_t last = nb;
  for (size_t b = 0; b < nb; b++) {
    if (!c[b]) continue;
    if (sum + c[b] >= rank) {
      *below = sum;
      return b;
    }
    sum += c[b];
    last = b;
  }
  if (last < nb) *below = sum - c[last];
  return last;
}

/* Adds the search for percentile k, rank rank among the values p counted
 * in its buckets, within the bucket that holds it. */
static int narrow(mlprof__stats *s, const probe *p, unsigned k) {
  uint64_t below = 0;
  size_t b = bucket_of_rank(p->v, REFINE_BUCKETS, p->rank[k], &below);
  if (b == REFINE_BUCKETS) return add_target(s, p->zone, k, p->lo, p->lo, 0, 0);
  /* b holds a value v, and b * w <= v - lo: no overflow. */
  uint64_t lo = p->lo + b * p->w;
  uint64_t hi = p->hi - lo < p->w - 1 ? p->hi : lo + (p->w - 1);
  uint64_t rank = p->rank[k] - below;
  return add_target(s, p->zone, k, lo, hi, p->v[b],
                    rank < p->v[b] ? rank : p->v[b]);
}

/* Adds the searches for a spilled zone's percentiles within the buckets of
 * its histogram that hold them. */
static int hist_targets(mlprof__stats *s, uint32_t zi) {
  const mlprof__zone_stats *z = &s->r.zones[zi];
  const uint64_t *h = s->zb[zi].hist;
  int rc = 0;
  for (unsigned k = 0; k < 4 && !rc; k++) {
    uint64_t rank = mlprof__pct_rank(z->count, pcts[k]), below = 0, w;
    size_t b = bucket_of_rank(h, HIST_BUCKETS, rank, &below);
    uint64_t lo = hist_lo(b, &w), hi = lo + (w - 1);
    if (lo < z->min_ns) lo = z->min_ns;
    if (hi > z->max_ns) hi = z->max_ns;
    rc = add_target(s, zi, k, lo, hi, h[b], rank - below);
  }
  return rc;
}

int mlprof__stats_select_begin(mlprof__stats *s) {
  mlprof__report *r = &s->r;
  if (!s->passes) {
    int spilled = 0;
    for (size_t i = 0; i < r->nzones; i++) spilled |= s->zb[i].hist != NULL;
    if (!spilled) return 0;
    /* The zones of raw durations first: their room goes to the passes. */
    for (uint32_t i = 0; i < r->nzones; i++) {
      if (!s->zb[i].hist) {
        if (zone_finish(s, i)) return MLPROF_ENOMEM;
        continue;
      }
      r->zones[i].mean_ns =
          (double)r->zones[i].total_ns / (double)r->zones[i].count;
      if (hist_targets(s, i)) return MLPROF_ENOMEM;
    }
  } else if (!s->nprobes) {
    return 0;
  }
  /* Collect the values of the smallest intervals that fit the budget. */
  size_t room = s->budget;
  for (size_t i = 0; i < r->nzones; i++) s->zb[i].nprobes = 0;
  for (size_t i = 0; i < s->nprobes; i++) {
    probe *p = &s->probes[i];
    if (p->n <= room) {
      room -= p->n;
      p->v = malloc(p->n * sizeof *p->v);
    } else {
      p->w = (p->hi - p->lo) / REFINE_BUCKETS + 1;
      p->v = calloc(REFINE_BUCKETS, sizeof *p->v);
    }
    if (!p->v) return MLPROF_ENOMEM;
    zone_build *zb = &s->zb[p->zone];
    if (!zb->nprobes++) zb->probe0 = (uint32_t)i;
  }
  s->passes++;
  return 1;
}

static int on_select_span(void *ud, uint32_t tid, uint32_t name, uint32_t depth,
                          uint64_t begin, uint64_t end) {
  (void)tid;
  (void)depth;
  mlprof__stats *s = ud;
  str_entry *e = name_str(s, name);
  if (!e || e->zone == MLPROF__NONE || !s->zb[e->zone].hist) return 0;
  zone_build *zb = &s->zb[e->zone];
  uint64_t d = end > begin ? end - begin : 0;
  if (s->passes == 1) {
    double dev = (double)d - s->r.zones[e->zone].mean_ns;
    zb->sq += dev * dev;
  }
  for (probe *p = s->probes + zb->probe0, *pe = p + zb->nprobes; p < pe; p++) {
    if (d < p->lo || d > p->hi) continue;
    if (p->w)
      p->v[(d - p->lo) / p->w]++;
    else if (p->got < p->n)
      p->v[p->got++] = d;
  }
  return 0;
}

void mlprof__stats_select_profile(mlprof__stats *s, mlprof__visitor *v) {
  mlprof__map_clear(&s->names);
  *v = (mlprof__visitor){.ud = s, .name = on_name, .span = on_select_span};
}

int mlprof__stats_select_end(mlprof__stats *s) {
  probe *old = s->probes;
  size_t n = s->nprobes;
  s->probes = NULL;
  s->nprobes = s->prcap = 0;
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    probe *p = &old[i];
    if (!p->w) sort_u64(p->v, p->got, &s->scratch);
    for (unsigned k = 0; k < 4 && !rc; k++) {
      if (!(p->want >> k & 1)) continue;
      if (p->w) {
        rc = narrow(s, p, k);
        continue;
      }
      uint64_t at = p->rank[k] < p->got ? p->rank[k] : p->got;
      *pct_slot(&s->r.zones[p->zone], k) = at ? p->v[at - 1] : p->lo;
    }
    free(p->v);
  }
  free(old);
  return rc;
}

void mlprof__stats_free(mlprof__stats *s) {
  if (!s) return;
  for (size_t i = 0; i < s->r.nzones; i++) {
    free(s->zb[i].durations.v);
    free(s->zb[i].hist);
  }
  for (size_t i = 0; i < s->nprobes; i++) free(s->probes[i].v);
  free(s->probes);
  for (size_t i = 0; i < s->r.ncounters; i++) free(s->cb[i].values);
  for (size_t i = 0; i < s->r.nthreads; i++) thread_build_free(&s->tb[i]);
  for (size_t i = 0; i < s->nstrs; i++) free(s->strs[i].s);
  free(s->zb);
  free(s->tb);
  free(s->cb);
  free(s->strs);
  free(s->str_slots);
  free(s->zu);
  free(s->scratch.v);
  free(s->widened.v);
  mlprof__map_clear(&s->zu_index);
  mlprof__map_clear(&s->names);
  mlprof__map_clear(&s->tids);
  mlprof__report_free(&s->r);
  free(s);
}

static uint64_t sort_value(const mlprof__zone_stats *z, mlprof__sort_key key) {
  switch (key) {
    case MLPROF__SORT_SELF:
      return z->self_ns;
    case MLPROF__SORT_MEAN:
      return z->count ? z->total_ns / z->count : 0;
    case MLPROF__SORT_P99:
      return z->p99_ns;
    case MLPROF__SORT_COUNT:
      return z->count;
    case MLPROF__SORT_TOTAL:
      break;
  }
  return z->total_ns;
}

typedef struct {
  uint64_t value;
  const mlprof__zone_stats *z;
  uint32_t index;
} zone_sorting;

static int zone_sorting_cmp(const void *a, const void *b) {
  const zone_sorting *x = a, *y = b;
  if (x->value != y->value) return x->value > y->value ? -1 : 1;
  size_t n = x->z->name_len < y->z->name_len ? x->z->name_len : y->z->name_len;
  int c = memcmp(x->z->name, y->z->name, n);
  if (c) return c;
  return (x->z->name_len > y->z->name_len) - (x->z->name_len < y->z->name_len);
}

void mlprof__report_sort(mlprof__report *r, mlprof__sort_key key, size_t top) {
  r->sort = key;
  for (size_t i = 0; i < r->nzones; i++) r->order[i] = (uint32_t)i;
  /* Out of memory here leaves the zones unsorted rather than failing. */
  zone_sorting *t = malloc((r->nzones ? r->nzones : 1) * sizeof *t);
  if (t) {
    for (size_t i = 0; i < r->nzones; i++)
      t[i] = (zone_sorting){sort_value(&r->zones[i], key), &r->zones[i],
                            (uint32_t)i};
    mlprof__sort(t, r->nzones, sizeof *t, zone_sorting_cmp);
    for (size_t i = 0; i < r->nzones; i++) r->order[i] = t[i].index;
    free(t);
  }
  r->norder = top && top < r->nzones ? top : r->nzones;
}

const mlprof__marks *mlprof__report_marks(const mlprof__report *r,
                                          size_t proc) {
  const mlprof__marks *best = NULL;
  for (size_t i = 0; i < r->nthreads; i++) {
    const mlprof__marks *m = &r->threads[i].marks;
    if (r->threads[i].proc == proc && (!best || m->marks > best->marks))
      best = m;
  }
  return best;
}

void mlprof__report_free(mlprof__report *r) {
  mlprof__lines_free(&r->lines);
  mlprof__memory_free(&r->mem);
  mlprof__hot_free(&r->hot);
  for (size_t i = 0; i < r->nzones; i++) {
    free(r->zones[i].name);
    free(r->zones[i].units);
    free(r->zones[i].durations);
  }
  for (size_t i = 0; i < r->nprocs; i++) {
    mlprof__proc_stats *p = &r->procs[i];
    free(p->path);
    free(p->hostname);
    free(p->exe);
    free(p->cmdline);
    free(p->name);
    free(p->clock);
    for (size_t k = 0; k < p->nmeta; k++) {
      free(p->meta[k].key);
      free(p->meta[k].value);
    }
    free(p->meta);
  }
  for (size_t i = 0; i < r->nthreads; i++) {
    free(r->threads[i].name);
    mlprof__marks_free(&r->threads[i].marks);
  }
  for (size_t i = 0; i < r->ncounters; i++) free(r->counters[i].name);
  for (size_t i = 0; i < r->nunits; i++) free(r->units[i].name);
  for (size_t i = 0; i < r->nopen; i++) free(r->open[i].name);
  for (size_t i = 0; i < r->nwarnings; i++) free(r->warnings[i]);
  free(r->zones);
  free(r->order);
  free(r->procs);
  free(r->threads);
  free(r->counters);
  free(r->units);
  free(r->open);
  free(r->warnings);
  memset(r, 0, sizeof *r);
}
