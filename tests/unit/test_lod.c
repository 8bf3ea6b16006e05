/* The timeline's level-of-detail pyramid (src/analyze/lod.c), fed through
 * its visitor as the analysis driver feeds it, with spans made up here:
 * every span is counted once per level, totals are kept, the size of a level
 * is bounded by the time it covers, the cap on items holds, and each span
 * keeps its metadata and units for its details (src/export/html.c). */
#include <mlprof.h>
#include <stdlib.h>

#include "analyze/lod.h"
#include "export/html.h"
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

/* One thread: "outer" [100, 900) ms holding "inner" [200, 300) and [400,
 * 500), a span nested too deep after it, then "inner" [1000, 1100);
 * metadata and units follow the span they belong to, as in a profile. */
#define MS 1000000ull
static int feed_args(mlprof__lod *l, size_t cap) {
  static const struct {
    uint32_t id, kind;
    const char *s;
  } names[] = {{1, MLPROF__NAME_ZONE, "outer"},
               {2, MLPROF__NAME_ZONE, "inner"},
               {3, MLPROF__NAME_STRING, "dtype"},
               {4, MLPROF__NAME_STRING, "float32"},
               {5, MLPROF__NAME_STRING, "</script><b>"},
               {6, MLPROF__NAME_UNITS, "bytes"}};
  mlprof__lod_builder *b = mlprof__lod_begin(l, cap);
  mlprof__job_profile p = {.pid = 7, .rank = -1, .offset_ns = 0, .name = "p"};
  mlprof__visitor v;
  if (!b || mlprof__lod_profile_begin(b, &p, 0, &v)) goto fail;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    mlprof__name n = {.id = names[i].id,
                      .kind = names[i].kind,
                      .name = names[i].s,
                      .name_len = strlen(names[i].s)};
    if (v.name(v.ud, &n)) goto fail;
  }
  if (v.span(v.ud, 1, 2, 1, 200 * MS, 300 * MS) || v.span_meta(v.ud, 1, 3, 4) ||
      v.span(v.ud, 1, 2, 1, 400 * MS, 500 * MS) ||
      v.span(v.ud, 1, 1, 0, 100 * MS, 900 * MS) ||
      v.span_units(v.ud, 1, 6, 4096) || v.span_meta(v.ud, 1, 5, 5) ||
      v.span(v.ud, 1, 2, MLPROF__LOD_MAX_DEPTH, 950 * MS, 960 * MS) ||
      v.span_meta(v.ud, 1, 3, 4) ||
      v.span(v.ud, 1, 2, 1, 1000 * MS, 1100 * MS) ||
      v.span_units(v.ud, 1, 6, 1) || mlprof__lod_profile_end(b))
    goto fail;
  return mlprof__lod_finish(b);
fail:
  mlprof__lod_abort(b);
  return -1;
}

static void test_lod_keeps_span_metadata(void) {
  mlprof__lod l;
  if (feed_args(&l, 0)) TEST_FAIL("build failed");
  CHECK_EQ(l.ntracks, 2);
  CHECK_EQ(l.args, 4);
  const mlprof__lod_track *inner = &l.tracks[0], *outer = &l.tracks[1];
  CHECK_EQ(inner->depth, 1);
  size_t n;
  const mlprof__lod_arg *a = mlprof__lod_args(inner, 200 * MS, 300 * MS, &n);
  CHECK_EQ(n, 1);
  CHECK_STR(l.strs[a[0].key], "dtype");
  CHECK_STR(l.strs[a[0].value], "float32");
  mlprof__lod_args(inner, 400 * MS, 500 * MS, &n);
  CHECK_EQ(n, 0);
  /* The deep span's metadata is not the previous span's. */
  a = mlprof__lod_args(inner, 1000 * MS, 1100 * MS, &n);
  CHECK_EQ(n, 1);
  CHECK(a[0].value == MLPROF__NONE && a[0].n == 1);
  a = mlprof__lod_args(outer, 100 * MS, 900 * MS, &n);
  CHECK_EQ(n, 2);
  CHECK_STR(l.strs[a[0].key], "bytes");
  CHECK_EQ_U64(a[0].n, 4096);
  CHECK_STR(l.strs[a[1].value], "</script><b>");
  mlprof__lod_args(outer, 100 * MS, 901 * MS, &n);
  CHECK_EQ(n, 0);

  /* The details: self time and the strings, escaped. */
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_span_json(&l, 1, 100 * MS, 900 * MS, &o), 0);
  mlprof__out_write(&o, "", 1);
  CHECK_STR(o.buf,
            "{\"self_ns\":600000000,\"args\":[[[\"\\u003c/script\\u003e"
            "\\u003cb\\u003e\",\"\\u003c/script\\u003e\\u003cb\\u003e\"]"
            "],[[\"bytes\",4096]]],\"args_missed\":0}\n");
  CHECK_EQ(mlprof__export_span_json(&l, 1, 900 * MS, 100 * MS, &o),
           MLPROF_EINVAL);
  CHECK_EQ(mlprof__export_span_json(&l, 2, 100 * MS, 900 * MS, &o),
           MLPROF_EINVAL);
  mlprof__out_close(&o);

  /* The page embeds them within its budget, else says so. */
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_timeline_json(&l, 0, UINT64_MAX, 0, 1000, 4096, &o),
           0);
  mlprof__out_write(&o, "", 1);
  CHECK(
      strstr(o.buf,
             "\"args\":[[0,200000000,300000000,[[\"dtype\",\"float32\"]],[]],\n"
             "[0,1000000000,1100000000,[],[[\"bytes\",1]]],\n[1,100000000,"
             "900000000,") != NULL);
  mlprof__out_close(&o);
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_timeline_json(&l, 0, UINT64_MAX, 0, 1000, 40, &o), 0);
  mlprof__out_write(&o, "", 1);
  CHECK(strstr(o.buf, "\"args\":null}") != NULL);
  mlprof__out_close(&o);
  mlprof__lod_free(&l);

  /* Past the cap, later ones are counted, not kept. */
  if (feed_args(&l, 3)) TEST_FAIL("build failed");
  CHECK_EQ(l.args, 3);
  CHECK_EQ_U64(l.args_missed, 1);
  mlprof__lod_free(&l);
}

const mlprof_test mlprof_tests_lod[] = {
    {"counts_each_span_once_per_level",
     test_lod_counts_each_span_once_per_level},
    {"level_size_bounded", test_lod_level_size_bounded},
    {"cap_drops_finest_levels", test_lod_cap_drops_finest_levels},
    {"tracks_and_find", test_lod_tracks_and_find},
    {"keeps_span_metadata", test_lod_keeps_span_metadata},
    {NULL, NULL}};
