/* The timeline's level-of-detail pyramid (src/analyze/lod.c), fed through
 * its visitor as the analysis driver feeds it, with spans made up here:
 * every span is counted once per level, totals are kept, the size of a level
 * is bounded by the time it covers, and the cap on items holds. */
#include <mlprof.h>
#include <stdlib.h>

#include "analyze/lod.h"
#include "format/wire.h"
#include "test.h"

/* A deterministic pseudo-random sequence. */
static uint64_t next_rand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

typedef struct {
  uint64_t spans, busy, end;
} totals;

/* Feeds one profile (offset off) of nthreads threads: on each, a run of
 * depth-0 spans of durations from 10 ns to 10 ms, each holding depth-1
 * spans of random zones, in end order as a profile has them. */
static int feed(mlprof__lod_builder *b, uint64_t seed, uint64_t off,
                int nthreads, int per_thread, totals *t) {
  static const char *const zones[] = {"step", "load", "forward", "backward"};
  mlprof__job_profile p = {
      .pid = 100 + seed, .rank = -1, .offset_ns = off, .name = "train"};
  mlprof__visitor v;
  if (mlprof__lod_profile_begin(b, &p, 0, &v)) return -1;
  for (uint32_t i = 0; i < 4; i++) {
    mlprof__name n = {.id = i + 1,
                      .kind = MLPROF__NAME_ZONE,
                      .name = zones[i],
                      .name_len = strlen(zones[i])};
    if (v.name(v.ud, &n)) return -1;
  }
  uint64_t s = seed;
  for (int th = 0; th < nthreads; th++) {
    if (v.thread(v.ud, (uint32_t)th, "worker", 6)) return -1;
    uint64_t now = 0;
    for (int i = 0; i < per_thread; i++) {
      uint64_t dur = 10;
      for (uint64_t e = next_rand(&s) % 7; e; e--) dur *= 10;
      dur += next_rand(&s) % dur;
      uint64_t begin = now + next_rand(&s) % 50, kids = 1 + next_rand(&s) % 3;
      for (uint64_t k = 0; k < kids; k++) {
        uint64_t kb = begin + dur * k / kids, ke = begin + dur * (k + 1) / kids;
        if (v.span(v.ud, (uint32_t)th, 2 + (uint32_t)(next_rand(&s) % 3), 1, kb,
                   ke))
          return -1;
        t->spans++;
        t->busy += ke - kb;
      }
      if (v.span(v.ud, (uint32_t)th, 1, 0, begin, begin + dur)) return -1;
      t->spans++;
      t->busy += dur;
      now = begin + dur;
    }
    if (now + off > t->end) t->end = now + off;
  }
  return mlprof__lod_profile_end(b);
}

static int build(mlprof__lod *l, size_t cap, totals *t) {
  memset(t, 0, sizeof *t);
  mlprof__lod_builder *b = mlprof__lod_begin(l, cap);
  if (!b) return -1;
  if (feed(b, 1, 0, 3, 4000, t) || feed(b, 2, 5000000, 2, 3000, t)) {
    mlprof__lod_abort(b);
    return -1;
  }
  return mlprof__lod_finish(b);
}

static void test_lod_counts_each_span_once_per_level(void) {
  mlprof__lod l;
  totals t;
  if (build(&l, 0, &t)) TEST_FAIL("build failed");
  CHECK_EQ_U64(l.spans, t.spans);
  CHECK_EQ(l.first, 0);
  CHECK_EQ(l.ntracks, 10); /* 5 threads, 2 depths */
  size_t items = 0;
  for (size_t k = 0; k < MLPROF__LOD_LEVELS; k++) {
    uint64_t spans = 0, busy = 0;
    size_t merged = 0;
    for (size_t i = 0; i < l.ntracks; i++) {
      const mlprof__lod_run *r = &l.tracks[i].lv[k];
      items += r->n;
      for (size_t j = 0; j < r->n; j++) {
        const mlprof__lod_item *it = &r->items[j];
        spans += it->count;
        busy += it->busy_ns;
        if (it->count > 1) merged++;
        CHECK(it->end >= it->begin && it->busy_ns <= it->end - it->begin);
        if (j) CHECK(it->begin >= r->items[j - 1].end);
        CHECK(it->count == 1 || it->end - it->begin < 2 * mlprof__lod_res(k));
      }
    }
    CHECK_EQ_U64(spans, t.spans);
    CHECK_EQ_U64(busy, t.busy);
    /* The finest level keeps most spans as they are, coarse ones merge. */
    if (k == MLPROF__LOD_LEVELS / 2) CHECK(merged > 0);
  }
  CHECK_EQ(items, l.items);
  mlprof__lod_free(&l);
}

/* A level of resolution r holds at most about 3 items per r of time on a
 * track: the spans at least r long, and a summary per bucket and between. */
static void test_lod_level_size_bounded(void) {
  mlprof__lod l;
  totals t;
  if (build(&l, 0, &t)) TEST_FAIL("build failed");
  for (size_t k = 0; k < MLPROF__LOD_LEVELS; k++) {
    uint64_t res = mlprof__lod_res(k);
    for (size_t i = 0; i < l.ntracks; i++)
      CHECK(l.tracks[i].lv[k].n <= 3 * (t.end / res) + 3);
  }
  /* The coarse levels are much smaller than the finest. */
  size_t fine = 0, coarse = 0;
  for (size_t i = 0; i < l.ntracks; i++) {
    fine += l.tracks[i].lv[0].n;
    coarse += l.tracks[i].lv[8].n;
  }
  CHECK(coarse * 10 < fine);
  mlprof__lod_free(&l);
}

/* Past the cap the finest levels go, the rest stay whole. */
static void test_lod_cap_drops_finest_levels(void) {
  mlprof__lod full, l;
  totals t;
  if (build(&full, 0, &t)) TEST_FAIL("build failed");
  size_t cap = full.items / 4;
  if (build(&l, cap, &t)) {
    mlprof__lod_free(&full);
    TEST_FAIL("build failed");
  }
  CHECK(l.first > 0);
  CHECK(l.items <= cap);
  for (size_t k = 0; k < MLPROF__LOD_LEVELS; k++)
    for (size_t i = 0; i < l.ntracks; i++)
      CHECK_EQ(l.tracks[i].lv[k].n, k < l.first ? 0 : full.tracks[i].lv[k].n);
  mlprof__lod_free(&full);
  mlprof__lod_free(&l);
}

static void test_lod_tracks_and_find(void) {
  mlprof__lod l;
  totals t;
  if (build(&l, 0, &t)) TEST_FAIL("build failed");
  const mlprof__lod_track *x = &l.tracks[l.ntracks - 1];
  CHECK_EQ(x->pid, 102);
  CHECK_EQ(x->depth, 0);
  CHECK_STR(l.names[x->process], "train");
  CHECK_STR(l.names[x->thread], "worker");
  CHECK_STR(l.names[x->lv[0].items[0].name], "step");
  /* The profile's offset places it on the job's time. */
  CHECK(x->lv[0].items[0].begin >= 5000000);
  const mlprof__lod_run *r = &x->lv[0];
  uint64_t at = r->items[r->n / 2].begin;
  size_t j = mlprof__lod_find(r, at);
  CHECK_EQ(j, r->n / 2);
  CHECK_EQ(mlprof__lod_find(r, UINT64_MAX - 1), r->n);
  CHECK_EQ(mlprof__lod_find(r, 0), 0);
  mlprof__lod_free(&l);
}

const mlprof_test mlprof_tests_lod[] = {
    {"counts_each_span_once_per_level",
     test_lod_counts_each_span_once_per_level},
    {"level_size_bounded", test_lod_level_size_bounded},
    {"cap_drops_finest_levels", test_lod_cap_drops_finest_levels},
    {"tracks_and_find", test_lod_tracks_and_find},
    {NULL, NULL}};
