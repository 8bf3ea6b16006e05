/* The timeline's level-of-detail pyramid (src/analyze/lod.c), fed through
 * its visitor as the analysis driver feeds it, with spans made up here:
 * every span is counted once per level, totals are kept, the size of a level
 * is bounded by the time it covers, the cap on items holds, and each span
 * keeps its metadata and units for its details (src/export/html.c). */
#include <mlprof.h>
#include <stdint.h>
#include <stdlib.h>

#include "analyze/lod.h"
#include "analyze/analysis.h"
#include "export/export.h"
#include "export/html.h"
#include "format/wire.h"
/* Small chunks: window edges fall near chunk edges. */
#define SYNTH_PAYLOAD_BYTES 256
#include "synth.h"
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

/* Two profile files, 3 threads each, written chunk by chunk with the
 * threads' chunks interleaved: per thread a long span over all of it (its
 * chunk, the last, covers the whole run), depth-1 spans of 10 ns to 1 ms,
 * some with metadata, holding depth-2 ones; a zone named in a second NAMES
 * chunk half-way. Returns 0 with the file paths in a and b. */
static int window_job(char *dir, char *a, char *b, size_t len) {
  if (!mkdtemp(dir)) return -1;
  snprintf(a, len, "%s/a.mlprof", dir);
  snprintf(b, len, "%s/b.mlprof", dir);
  for (int f = 0; f < 2; f++) {
    FILE *fp = synth_open(f ? b : a, 1);
    if (!fp) return -1;
    synth_header(fp, 100 + (uint64_t)f, 1, 1000 + 3000000 * (uint64_t)f, "h",
                 "/bin/train");
    payload p = {.n = 0};
    p_uv(&p, 6);
    p_name(&p, 1, MLPROF__NAME_ZONE, 0, "run");
    p_name(&p, 2, MLPROF__NAME_ZONE, 0, "step");
    p_name(&p, 3, MLPROF__NAME_ZONE, 0, "kernel");
    p_name(&p, 4, MLPROF__NAME_STRING, 0, "shape");
    p_name(&p, 5, MLPROF__NAME_STRING, 0, "8x8");
    p_name(&p, 6, MLPROF__NAME_UNITS, 0, "bytes");
    chunk(fp, MLPROF__CHUNK_NAMES, &p);
    synth_events ev[3];
    uint64_t now[3] = {0, 0, 0}, s = 7 + (uint64_t)f;
    for (uint32_t t = 0; t < 3; t++)
      ev[t] = (synth_events){.f = fp, .tid = 10 + t};
    for (int i = 0; i < 6000; i++) {
      if (i == 3000) {
        p_uv(&p, 1);
        p_name(&p, 7, MLPROF__NAME_ZONE, 0, "late");
        for (uint32_t t = 0; t < 3; t++) synth_ev_flush(&ev[t]);
        for (uint32_t t = 0; t < 3; t++) ev[t].p.n = 0;
        chunk(fp, MLPROF__CHUNK_NAMES, &p);
      }
      uint32_t t = (uint32_t)(next_rand(&s) % 3);
      uint64_t dur = 10;
      for (uint64_t e = next_rand(&s) % 6; e; e--) dur *= 10;
      dur += next_rand(&s) % dur;
      uint64_t begin = now[t] + 1 + next_rand(&s) % 300;
      uint64_t kids = next_rand(&s) % 3;
      for (uint64_t k = 0; k < kids; k++)
        synth_ev_span(&ev[t], i >= 3000 ? 7 : 3, 2, begin + dur * k / kids + 1,
                      begin + dur * (k + 1) / kids);
      synth_ev_span(&ev[t], 2, 1, begin, begin + dur);
      if (i % 7 == 0) {
        synth_ev_span_meta(&ev[t], 4, 5);
        synth_ev_span_units(&ev[t], 6, (uint64_t)i);
      }
      now[t] = begin + dur;
    }
    for (uint32_t t = 0; t < 3; t++) {
      synth_ev_span(&ev[t], 1, 0, 0, now[t] + 1);
      synth_ev_flush(&ev[t]);
    }
    synth_end(fp, now[0] + now[1] + now[2]);
    if (fclose(fp)) return -1;
  }
  return 0;
}

/* The pyramid of the job of files a and b, at most cap items (0: all),
 * read through filter f (NULL: none). */
static int window_lod(const char *a, const char *b, size_t cap,
                      const mlprof__filter *f, mlprof__analysis *an) {
  const char *paths[2] = {a, b};
  mlprof__job job;
  char err[256];
  if (mlprof__job_open(&job, paths, 2, err, sizeof err)) return -1;
  mlprof__analysis_opts o;
  mlprof__analysis_opts_init(&o);
  o.want = MLPROF__ANALYSIS_LOD;
  o.lod_items = cap;
  o.filter = f;
  int rc = mlprof__analysis_run(&job, &o, an, err, sizeof err);
  mlprof__job_close(&job);
  return rc;
}

/* Whether level k of w holds in [t0, t1) the items full holds there. */
static int same_items(const mlprof__lod *full, const mlprof__lod *w, size_t k,
                      uint64_t t0, uint64_t t1, size_t *seen) {
  if (full->ntracks != w->ntracks) return 0;
  for (size_t i = 0; i < full->ntracks; i++) {
    const mlprof__lod_run *x = &full->tracks[i].lv[k], *y = &w->tracks[i].lv[k];
    size_t a = mlprof__lod_find(x, t0), c = mlprof__lod_find(y, t0);
    for (; a < x->n && x->items[a].begin < t1; a++, c++) {
      if (c >= y->n) return 0;
      const mlprof__lod_item *p = &x->items[a], *q = &y->items[c];
      if (p->begin != q->begin || p->end != q->end ||
          p->busy_ns != q->busy_ns || p->name != q->name ||
          p->count != q->count)
        return 0;
      (*seen)++;
    }
    if (c < y->n && y->items[c].begin < t1) return 0;
  }
  return 1;
}

/* Whether the timeline answer of l for [t0, t1) at resolution res says it
 * is coarser than asked. */
static int timeline_coarser(const mlprof__lod *l, uint64_t t0, uint64_t t1,
                            uint64_t res) {
  mlprof__out o;
  if (mlprof__out_open(&o, -1)) return -1;
  mlprof__export_timeline_json(l, t0, t1, res, SIZE_MAX, 0, &o);
  mlprof__out_write(&o, "", 1);
  int r = o.err ? -1 : strstr(o.buf, "\"coarser\":true") != NULL;
  mlprof__out_close(&o);
  return r;
}

/* A window built from the chunks holds at each level dropped the items of
 * a pyramid without a cap there, with the spans' metadata, reading only
 * the chunks near it; a file replaced since is an error. */
static void test_lod_window_reads_chunks(void) {
  char dir[] = "/tmp/mlprof-lodwin-XXXXXX", a[128], b[128];
  if (window_job(dir, a, b, sizeof a)) TEST_FAIL("cannot write the job");
  mlprof__analysis full, capped;
  if (window_lod(a, b, 0, NULL, &full)) TEST_FAIL("cannot read the job");
  if (window_lod(a, b, full.lod.items / 3, NULL, &capped))
    TEST_FAIL("cannot read the job");
  const mlprof__lod *l = &capped.lod;
  CHECK(l->indexed);
  CHECK(l->first >= 2);
  CHECK_EQ(l->ntracks, full.lod.ntracks);
  uint64_t end = 0, bytes = 0;
  for (size_t i = 0; i < l->ntracks; i++) {
    const mlprof__lod_run *r = &l->tracks[i].lv[MLPROF__LOD_LEVELS - 1];
    if (r->n && r->items[r->n - 1].end > end) end = r->items[r->n - 1].end;
  }
  for (size_t i = 0; i < l->nfiles; i++)
    for (size_t j = 0; j < l->files[i].nchunks; j++)
      bytes += l->files[i].chunks[j].len;
  mlprof__lod w;
  char err[300];
  uint64_t s = 99;
  size_t seen = 0;
  for (int n = 0; n < 300; n++) {
    uint64_t width = 1000ull << (2 * (next_rand(&s) % 8));
    uint64_t t0 = next_rand(&s) % end, t1 = t0 + width;
    size_t k = (size_t)(next_rand(&s) % l->first);
    /* A small window reads a part of the chunks: the long spans' and those
     * near it. */
    int rc = mlprof__lod_window(l, t0, t1, k, SIZE_MAX,
                                width < 100000 ? (size_t)bytes / 2 : SIZE_MAX,
                                &w, err, sizeof err);
    if (rc) TEST_FAIL("window %d: %d %s", n, rc, err);
    CHECK_EQ(w.first, k);
    for (size_t j = k; j < l->first; j++)
      if (!same_items(&full.lod, &w, j, t0, t1, &seen))
        TEST_FAIL("window %d [%" PRIu64 ", %" PRIu64 ") level %zu differs", n,
                  t0, t1, j);
    mlprof__lod_window_free(&w);
  }
  CHECK(seen > 1000);
  /* Past the bytes allowed, or coarse enough, it is not built. */
  CHECK_EQ(mlprof__lod_window(l, 0, end, 0, SIZE_MAX, (size_t)bytes / 2, &w,
                              err, sizeof err),
           1);
  CHECK_EQ(mlprof__lod_window(l, 0, end, l->first, SIZE_MAX, SIZE_MAX, &w, err,
                              sizeof err),
           1);
  /* The levels kept answering a finer request say they are coarser; a
   * request they hold, or a window built, not. */
  CHECK_EQ(timeline_coarser(l, 0, end, 1), 1);
  CHECK_EQ(timeline_coarser(l, 0, end, mlprof__lod_res(l->first)), 0);
  CHECK_EQ(mlprof__lod_window(l, end / 2, end / 2 + 100000, 0, SIZE_MAX,
                              SIZE_MAX, &w, err, sizeof err),
           0);
  CHECK_EQ(timeline_coarser(&w, end / 2, end / 2 + 100000, 1), 0);
  mlprof__lod_window_free(&w);

  /* A span's window has its metadata and its children. */
  size_t track = 0, found = 0;
  for (size_t i = 0; i < full.lod.ntracks && !found; i++)
    if (full.lod.tracks[i].depth == 1 && full.lod.tracks[i].nargs > 10) {
      track = i;
      found = 1;
    }
  CHECK(found);
  const mlprof__lod_arg *x = &full.lod.tracks[track].args[10];
  CHECK_EQ(mlprof__lod_window(l, x->begin, x->end, 0, track, SIZE_MAX, &w, err,
                              sizeof err),
           0);
  size_t nf, nw;
  const mlprof__lod_arg *af =
      mlprof__lod_args(&full.lod.tracks[track], x->begin, x->end, &nf);
  const mlprof__lod_arg *aw =
      mlprof__lod_args(&w.tracks[track], x->begin, x->end, &nw);
  CHECK_EQ(nf, 2);
  CHECK_EQ(nw, nf);
  for (size_t i = 0; i < nf && i < nw; i++)
    CHECK(af[i].key == aw[i].key && af[i].value == aw[i].value &&
          af[i].n == aw[i].n);
  mlprof__out o1, o2;
  CHECK_EQ(mlprof__out_open(&o1, -1), 0);
  CHECK_EQ(mlprof__out_open(&o2, -1), 0);
  CHECK_EQ(mlprof__export_span_json(&full.lod, track, x->begin, x->end, &o1),
           0);
  CHECK_EQ(mlprof__export_span_json(&w, track, x->begin, x->end, &o2), 0);
  CHECK(o1.len == o2.len && memcmp(o1.buf, o2.buf, o1.len) == 0);
  mlprof__out_close(&o1);
  mlprof__out_close(&o2);
  mlprof__lod_window_free(&w);

  /* A file replaced since it was read. */
  remove(b);
  CHECK(mlprof__lod_window(l, 0, end, 0, SIZE_MAX, SIZE_MAX, &w, err,
                           sizeof err) < 0);
  CHECK(strstr(err, b) != NULL);
  FILE *f = fopen(b, "wb");
  if (f) fclose(f);
  CHECK(mlprof__lod_window(l, 0, end, 0, SIZE_MAX, SIZE_MAX, &w, err,
                           sizeof err) < 0);
  CHECK(strstr(err, "since it was read") != NULL);
  remove(a);
  remove(b);
  rmdir(dir);
  mlprof__analysis_free(&full);
  mlprof__analysis_free(&capped);
}

/* A span of mlprof trace's output (job ns). */
typedef struct {
  uint64_t tid, begin, end;
} trace_span;

/* The number after key in the event at p (µs with three decimals: ns), or
 * UINT64_MAX. */
static uint64_t trace_field(const char *p, const char *key, int us) {
  const char *q = strstr(p, key);
  const char *stop = strchr(p, '}');
  if (!q || (stop && q > stop)) return UINT64_MAX;
  char *end;
  uint64_t v = strtoull(q + strlen(key), &end, 10);
  if (us && *end == '.') v = v * 1000 + strtoull(end + 1, NULL, 10);
  return v;
}

/* The spans of the trace of job a, b through filter f into *out (*n of
 * them, malloc'ed), as mlprof trace writes them. Returns 0 or -1. */
static int trace_spans(const char *a, const char *b, const mlprof__filter *f,
                       trace_span **out, size_t *n) {
  const char *paths[2] = {a, b};
  mlprof__job job;
  char err[256];
  if (mlprof__job_open(&job, paths, 2, err, sizeof err)) return -1;
  mlprof__out o;
  int rc = mlprof__out_open(&o, -1);
  if (!rc) rc = mlprof__export_chrome(&job, f, &o, NULL, err, sizeof err);
  mlprof__job_close(&job);
  if (!rc) mlprof__out_write(&o, "", 1);
  if (!rc) rc = o.err;
  size_t cap = 0;
  *out = NULL;
  *n = 0;
  for (const char *p = o.buf; !rc && (p = strstr(p, "\"ph\":\"X\"")); p++) {
    if (mlprof__grow(out, &cap, *n + 1, sizeof **out)) rc = -1;
    trace_span *t = &(*out)[(*n)++];
    t->tid = trace_field(p, "\"tid\":", 0);
    t->begin = trace_field(p, "\"ts\":", 1);
    t->end = t->begin + trace_field(p, "\"dur\":", 1);
  }
  mlprof__out_close(&o);
  return rc ? -1 : 0;
}

/* Served through a filter (--process, --thread, --window), a pyramid past
 * its cap still builds windows from the chunks, through the same filter: a
 * window at level 0 holds the items of the filtered pyramid without a cap,
 * and its spans of a 1 ms window are those mlprof trace writes with that
 * filter, none of the processes, threads or times it leaves out. */
static void test_lod_window_filtered(void) {
  char dir[] = "/tmp/mlprof-lodfilt-XXXXXX", a[128], b[128], err[300];
  if (window_job(dir, a, b, sizeof a)) TEST_FAIL("cannot write the job");
  mlprof__filter f = {0};
  const uint64_t T0 = 50000000, T1 = 150000000; /* --window 50ms:150ms */
  if (mlprof__filter_add(&f, MLPROF__SEL_PROCESS, "101", err, sizeof err) ||
      mlprof__filter_add(&f, MLPROF__SEL_THREAD, "11", err, sizeof err) ||
      mlprof__filter_add(&f, MLPROF__SEL_THREAD, "12", err, sizeof err) ||
      mlprof__filter_add(&f, MLPROF__FILTER_WINDOW, "50ms:150ms", err,
                         sizeof err))
    TEST_FAIL("%s", err);
  mlprof__analysis full, capped;
  if (window_lod(a, b, 0, &f, &full)) TEST_FAIL("cannot read the job");
  if (window_lod(a, b, full.lod.items / 3, &f, &capped))
    TEST_FAIL("cannot read the job");
  const mlprof__lod *l = &capped.lod;
  CHECK(l->indexed);
  CHECK(l->first >= 2);
  trace_span *ts;
  size_t nts;
  if (trace_spans(a, b, &f, &ts, &nts)) TEST_FAIL("cannot trace the job");
  CHECK(nts > 1000);
  uint64_t s = 5;
  size_t seen = 0, spans = 0;
  for (int n = 0; n < 60; n++) {
    /* 1 ms windows across the filter's window and both its edges. */
    uint64_t w0 = T0 - 2000000 + next_rand(&s) % (T1 - T0 + 3000000),
             w1 = w0 + 1000000;
    if (n == 0) w0 = T0 - 500000, w1 = w0 + 1000000;
    if (n == 1) w0 = T1 - 500000, w1 = w0 + 1000000;
    mlprof__lod w;
    int rc = mlprof__lod_window(l, w0, w1, 0, SIZE_MAX, SIZE_MAX, &w, err,
                                sizeof err);
    if (rc) TEST_FAIL("window %d: %d %s", n, rc, err);
    for (size_t j = 0; j < l->first; j++)
      if (!same_items(&full.lod, &w, j, w0, w1, &seen))
        TEST_FAIL("window %d [%" PRIu64 ", %" PRIu64 ") level %zu differs", n,
                  w0, w1, j);
    /* Its spans kept whole are the trace's there, and so is every trace
     * span of 1 µs or more (those are never merged). */
    size_t whole = 0, longer = 0, traced = 0;
    for (size_t i = 0; i < w.ntracks; i++) {
      const mlprof__lod_track *t = &w.tracks[i];
      const mlprof__lod_run *r = &t->lv[0];
      for (size_t j = mlprof__lod_find(r, w0);
           j < r->n && r->items[j].begin < w1; j++) {
        const mlprof__lod_item *it = &r->items[j];
        CHECK(t->pid == 101 && (t->tid == 11 || t->tid == 12));
        CHECK(it->begin >= T0 && it->begin < T1);
        if (it->count != 1) continue;
        whole++;
        longer += it->end - it->begin >= MLPROF__LOD_RES0_NS;
        size_t k = 0;
        while (k < nts && !(ts[k].tid == t->tid && ts[k].begin == it->begin &&
                            ts[k].end == it->end))
          k++;
        if (k == nts)
          TEST_FAIL("window %d: span [%" PRIu64 ", %" PRIu64 ") not traced", n,
                    it->begin, it->end);
      }
    }
    for (size_t k = 0; k < nts; k++)
      if (ts[k].begin < w1 && ts[k].end > w0 &&
          ts[k].end - ts[k].begin >= MLPROF__LOD_RES0_NS)
        traced++;
    CHECK_EQ(longer, traced);
    spans += whole;
    mlprof__lod_window_free(&w);
  }
  CHECK(seen > 1000);
  CHECK(spans > 500);
  free(ts);
  remove(a);
  remove(b);
  rmdir(dir);
  mlprof__filter_free(&f);
  mlprof__analysis_free(&full);
  mlprof__analysis_free(&capped);
}

const mlprof_test mlprof_tests_lod[] = {
    {"window_reads_chunks", test_lod_window_reads_chunks},
    {"window_filtered", test_lod_window_filtered},
    {"counts_each_span_once_per_level",
     test_lod_counts_each_span_once_per_level},
    {"level_size_bounded", test_lod_level_size_bounded},
    {"cap_drops_finest_levels", test_lod_cap_drops_finest_levels},
    {"tracks_and_find", test_lod_tracks_and_find},
    {"keeps_span_metadata", test_lod_keeps_span_metadata},
    {NULL, NULL}};
