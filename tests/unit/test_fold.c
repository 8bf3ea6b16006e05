/* Folding sampled allocations (src/record/fold.c, docs/memory.md "File
 * growth"): which pairs fold and what their sums hold, then whole sessions
 * recorded folded and not, whose Memory figures must agree. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "analyze/memory.h"
#include "format/reader.h"
#include "format/wire.h"
#include "mlprof.h"
#include "record/fold.h"
#include "record/internal.h"
#include "test.h"

/* ---- the folder alone --------------------------------------------------- */

typedef struct {
  mlprof__fold_rec r[16];
  size_t n;
} interval;

static void add(interval *iv, int thread, uint64_t ns, uint64_t addr,
                uint64_t weight, uint32_t zone) {
  iv->r[iv->n++] = (mlprof__fold_rec){.thread = (void *)(uintptr_t)thread,
                                      .ns = ns,
                                      .addr = addr,
                                      .size = weight / 2,
                                      .weight = weight,
                                      .stack = zone * 10u,
                                      .zone = zone};
}

static void del(interval *iv, int thread, uint64_t ns, uint64_t addr) {
  iv->r[iv->n++] = (mlprof__fold_rec){
      .thread = (void *)(uintptr_t)thread, .ns = ns, .addr = addr};
}

/* The records' folded flags as a string: 'f' folded, '.' written. */
static const char *fates(const interval *iv) {
  static char s[17];
  for (size_t i = 0; i < iv->n; i++) s[i] = iv->r[i].folded ? 'f' : '.';
  s[iv->n] = 0;
  return s;
}

static void test_pairs_fold_but_at_new_highs(void) {
  mlprof__fold *f = mlprof__fold_new();
  CHECK(f != NULL);
  const mlprof__fold_sum *s;
  size_t ns;

  /* Thread 1, then thread 2, whose records are earlier in time and free
   * one of thread 1's blocks. Process live bytes: 1 11 1 101 151 51 551
   * 501 1: the highest at 40, X2 and X3 live then; zone 1's at 20 (X1,
   * X2 live); X4 (5..7) was live at neither: it folds. */
  interval a = {.n = 0};
  add(&a, 1, 1, 0x100, 1, 3); /* L: stays live */
  add(&a, 1, 10, 0x200, 100, 1);
  add(&a, 1, 20, 0x300, 50, 1);
  del(&a, 1, 30, 0x200);
  add(&a, 1, 40, 0x400, 500, 2);
  del(&a, 1, 60, 0x400);
  del(&a, 2, 50, 0x300);
  add(&a, 2, 5, 0x500, 10, 1);
  del(&a, 2, 7, 0x500);
  CHECK_EQ(mlprof__fold_interval(f, a.r, a.n, 0, UINT64_MAX, &s, &ns), 0);
  CHECK_STR(fates(&a), ".......ff");
  CHECK_EQ_U64(ns, 1);
  CHECK_EQ(s[0].run, 6); /* thread 2's records start at 6 */
  CHECK_EQ(s[0].zone, 1);
  CHECK_EQ_U64(s[0].stack, 10);
  CHECK_EQ_U64(s[0].count, 1);
  CHECK_EQ_U64(s[0].size, 5);
  CHECK_EQ_U64(s[0].weight, 10);
  CHECK_EQ_U64(s[0].var, 10 * 5);
  CHECK_EQ_U64(s[0].ns, 7);

  /* Below every highest so far (551, zone 1 151, zone 2 500): all fold,
   * summed per site; L's free (a block of the first interval) is written
   * and takes its weight away. */
  interval b = {.n = 0};
  add(&b, 1, 100, 0x200, 100, 1);
  del(&b, 1, 105, 0x100);
  del(&b, 1, 110, 0x200);
  add(&b, 1, 120, 0x600, 200, 2);
  del(&b, 1, 130, 0x600);
  add(&b, 1, 140, 0x200, 40, 1);
  del(&b, 1, 150, 0x200);
  CHECK_EQ(mlprof__fold_interval(f, b.r, b.n, 0, UINT64_MAX, &s, &ns), 0);
  CHECK_STR(fates(&b), "f.fffff");
  CHECK_EQ_U64(ns, 2);
  CHECK_EQ(s[0].zone, 1);
  CHECK_EQ_U64(s[0].count, 2);
  CHECK_EQ_U64(s[0].weight, 140);
  CHECK_EQ_U64(s[0].size, 70);
  CHECK_EQ_U64(s[0].var, 100 * 50 + 40 * 20);
  CHECK_EQ_U64(s[0].ns, 150);
  CHECK_EQ(s[1].zone, 2);
  CHECK_EQ_U64(s[1].weight, 200);

  /* A new highest of the process (1000 > 551) stays whole. */
  interval c = {.n = 0};
  add(&c, 1, 200, 0x700, 1000, 2);
  del(&c, 1, 210, 0x700);
  CHECK_EQ(mlprof__fold_interval(f, c.r, c.n, 0, UINT64_MAX, &s, &ns), 0);
  CHECK_STR(fates(&c), "..");
  CHECK_EQ_U64(ns, 0);

  /* Having forgotten, the folder cannot tell a new highest: each
   * interval's own highest points stay whole (the process's at Y2, zone
   * 1's at Y1); Y3 folds. */
  mlprof__fold_forget(f);
  interval d = {.n = 0};
  add(&d, 1, 300, 0x200, 100, 1);
  del(&d, 1, 310, 0x200);
  add(&d, 1, 320, 0x600, 200, 2);
  del(&d, 1, 330, 0x600);
  add(&d, 1, 340, 0x800, 30, 1);
  del(&d, 1, 350, 0x800);
  CHECK_EQ(mlprof__fold_interval(f, d.r, d.n, 0, UINT64_MAX, &s, &ns), 0);
  CHECK_STR(fates(&d), "....ff");

  /* A free before its allocation in time, the same address twice: the
   * free ends nothing; the second allocation pairs with the later free. */
  interval e = {.n = 0};
  del(&e, 1, 400, 0x900);
  add(&e, 1, 401, 0x900, 5, 1);
  add(&e, 1, 402, 0x900, 6, 1);
  del(&e, 1, 403, 0x900);
  CHECK_EQ(mlprof__fold_interval(f, e.r, e.n, 0, UINT64_MAX, &s, &ns), 0);
  CHECK_EQ(e.r[0].partner, MLPROF__FOLD_NONE);
  CHECK_EQ(e.r[1].partner, MLPROF__FOLD_NONE);
  CHECK_EQ(e.r[2].partner, 3);
  CHECK_EQ(e.r[3].partner, 2);

  /* The process's highest (160, P2 and P3 live) is neither zone's (zone 4:
   * 100 with P1; zone 5: 100 with P4): all four stay whole, P5 folds. */
  interval g = {.n = 0};
  add(&g, 1, 500, 0x1000, 100, 4);
  del(&g, 1, 501, 0x1000);
  add(&g, 1, 502, 0x1000, 80, 4);
  add(&g, 1, 503, 0x2000, 80, 5);
  del(&g, 1, 504, 0x1000);
  del(&g, 1, 505, 0x2000);
  add(&g, 1, 506, 0x3000, 100, 5);
  del(&g, 1, 507, 0x3000);
  add(&g, 1, 508, 0x3000, 10, 4);
  del(&g, 1, 509, 0x3000);
  CHECK_EQ(mlprof__fold_interval(f, g.r, g.n, 0, UINT64_MAX, &s, &ns), 0);
  CHECK_STR(fates(&g), "........ff");

  mlprof__fold_free(f);

  /* Only what was made after lo and freed before hi folds: the writer may
   * not have every record outside (another thread's, drained later). A
   * first interval sets the highs; in the next, no pair reaches them. */
  f = mlprof__fold_new();
  interval h = {.n = 0};
  add(&h, 1, 500, 0x1000, 1000, 4);
  del(&h, 1, 501, 0x1000);
  CHECK_EQ(mlprof__fold_interval(f, h.r, h.n, 0, UINT64_MAX, &s, &ns), 0);
  CHECK_STR(fates(&h), "..");
  h.n = 0;
  add(&h, 1, 600, 0x1000, 10, 4);
  del(&h, 1, 601, 0x1000);
  add(&h, 1, 602, 0x1000, 10, 4);
  del(&h, 1, 603, 0x1000);
  add(&h, 1, 604, 0x1000, 10, 4);
  del(&h, 1, 605, 0x1000);
  CHECK_EQ(mlprof__fold_interval(f, h.r, h.n, 600, 605, &s, &ns), 0);
  CHECK_STR(fates(&h), "..ff..");
  CHECK_EQ(mlprof__fold_interval(f, h.r, h.n, 0, UINT64_MAX, &s, &ns), 0);
  CHECK_STR(fates(&h), "ffffff");
  mlprof__fold_free(f);
}

/* ---- whole sessions, folded and not ------------------------------------- */

static char dir[] = "/tmp/mlprof-fold-XXXXXX";

static const char *path(const char *leaf) {
  static char buf[256];
  static int made;
  if (!made) made = mkdtemp(dir) != NULL;
  snprintf(buf, sizeof buf, "%s/%s", dir, leaf);
  return buf;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

#define BLOCK(i) (0x10000000ull + (uint64_t)(i)*4096)

static void *other_thread(void *arg) {
  (void)arg;
  mlprof_zone_begin("other");
  for (int i = 0; i < 40; i++)
    mlprof__put_mem(BLOCK(5000 + i), 2000 + (uint64_t)i, 7);
  mlprof_zone_end();
  return NULL;
}

/* The same records each time: kept blocks, steps of transient ones (three
 * a flush; a few kept in the first three), another thread's blocks freed
 * here, a step with the process's peak but neither zone's, then lower
 * steps again. */
static void record(const char *leaf, int fold) {
  if (!fold) setenv(MLPROF__ENV_MEMORY_FOLD, "0", 1);
  mlprof_config c;
  mlprof_config_init(&c);
  c.output = path(leaf);
  c.sample_interval_ms = -1;
  c.flush_interval_ms = 60000; /* flushes are the test's */
  CHECK_EQ(mlprof_memory_set("sampled:4096"), 0);
  CHECK_EQ(mlprof_init(&c), 0);
  unsetenv(MLPROF__ENV_MEMORY_FOLD);
  rng = 88172645463325252ull;
  mlprof_zone_begin("base");
  for (int i = 0; i < 10; i++) mlprof__put_mem(BLOCK(i), 1000 + (uint64_t)i, 1);
  mlprof_zone_end();
  for (int round = 0; round < 60; round++) {
    int n = round == 6 ? 48 : 20 + (int)(next_rand() % 10);
    mlprof_step();
    mlprof_zone_begin(round % 2 ? "fwd" : "bwd");
    for (int i = 0; i < n; i++) {
      /* Round 6 holds the most, half in each zone: neither zone's most. */
      if (round == 6 && i == n / 2) {
        mlprof_zone_end();
        mlprof_zone_begin("fwd");
      }
      mlprof__put_mem(BLOCK(100 + i),
                      round == 6 ? 100 : 500 + next_rand() % 3000,
                      2 + next_rand() % 3);
    }
    mlprof_zone_end();
    for (int i = 0; i < n; i++)
      if (i % 7 != 3 || round > 2) mlprof__put_mem(BLOCK(100 + i), 0, 0);
    /* a block reused at once */
    mlprof__put_mem(BLOCK(99), 300, 5);
    mlprof__put_mem(BLOCK(99), 0, 0);
    mlprof__put_mem(BLOCK(99), 400, 6);
    mlprof__put_mem(BLOCK(99), 0, 0);
    if (round == 3) {
      pthread_t th;
      pthread_create(&th, NULL, other_thread, NULL);
      pthread_join(th, NULL);
      for (int i = 0; i < 40; i += 2) mlprof__put_mem(BLOCK(5000 + i), 0, 0);
    }
    if (round % 3 == 2) CHECK_EQ(mlprof_flush(), 0);
  }
  mlprof_step();
  for (int i = 0; i < 5; i++) mlprof__put_mem(BLOCK(i), 0, 0);
  CHECK_EQ(mlprof_shutdown(), 0);
  mlprof_memory_set("sampled");
}

typedef struct {
  uint64_t allocs, frees, sums, summed;
} kinds;

static int k_alloc(void *ud, const mlprof__alloc *a) {
  (void)a;
  ((kinds *)ud)->allocs++;
  return 0;
}
static int k_free(void *ud, uint32_t tid, uint64_t t, uint64_t addr) {
  (void)tid, (void)t, (void)addr;
  ((kinds *)ud)->frees++;
  return 0;
}
static int k_sum(void *ud, const mlprof__alloc_sum *s) {
  ((kinds *)ud)->sums++;
  ((kinds *)ud)->summed += s->count;
  return 0;
}

static void analyse(const char *leaf, mlprof__memory *m, kinds *k) {
  mlprof__visitor kv = {
      .ud = k, .alloc = k_alloc, .alloc_free = k_free, .alloc_sum = k_sum};
  *k = (kinds){0, 0, 0, 0};
  CHECK_EQ(mlprof__read_file(path(leaf), &kv, NULL, NULL, 0), 0);
  mlprof__memory_builder *b = mlprof__memory_begin(m);
  CHECK(b != NULL);
  mlprof__visitor v;
  mlprof__memory_profile_begin(b, 0, 1, &v);
  CHECK_EQ(mlprof__read_file(path(leaf), &v, NULL, NULL, 0), 0);
  CHECK_EQ(mlprof__memory_profile_end(b), 0);
  CHECK_EQ(mlprof__memory_finish(b), 0);
}

static const mlprof__mem_site *site_of(const mlprof__memory *m,
                                       const char *zone, uint64_t stack) {
  for (size_t i = 0; i < m->nsites; i++)
    if (m->sites[i].stack == stack &&
        !strcmp(m->zones[m->sites[i].zone].name, zone))
      return &m->sites[i];
  return NULL;
}

static void test_folded_session_tells_the_same(void) {
  record("folded.mlprof", 1);
  record("whole.mlprof", 0);
  mlprof__memory fm, wm;
  kinds fk, wk;
  analyse("folded.mlprof", &fm, &fk);
  analyse("whole.mlprof", &wm, &wk);
  /* One by one: every allocation and free; folded: far fewer, the rest in
   * sums, every allocation counted once. */
  CHECK_EQ_U64(wk.sums, 0);
  CHECK(fk.sums > 0);
  CHECK(fk.allocs < wk.allocs / 3);
  CHECK_EQ_U64(fk.allocs + fk.summed, wk.allocs);
  CHECK_EQ_U64(fk.frees + fk.summed, wk.frees);

  CHECK_EQ_U64(fm.nprocs, 1);
  const mlprof__mem_proc *f = &fm.procs[0], *w = &wm.procs[0];
  CHECK_EQ_U64(f->allocs, w->allocs);
  CHECK_EQ_U64(f->alloc_bytes, w->alloc_bytes);
  CHECK_EQ_U64(f->freed_bytes, w->freed_bytes);
  CHECK_EQ_U64(f->live_end, w->live_end);
  CHECK_EQ_U64(f->peak, w->peak);
  CHECK(fabs(f->peak_var - w->peak_var) <= 1e-9 * w->peak_var);
  CHECK(!f->exact);
  CHECK(fabs(f->mean - 4096) < 8);
  CHECK_EQ_U64(f->nsteps, w->nsteps);
  CHECK_EQ_U64(fm.nzones, wm.nzones);
  for (size_t i = 0; i < wm.nzones; i++) {
    const mlprof__mem_zone *a = &fm.zones[i], *b = &wm.zones[i];
    CHECK_STR(a->name, b->name);
    CHECK_EQ_U64(a->alloc_bytes, b->alloc_bytes);
    CHECK_EQ_U64(a->alloc_count, b->alloc_count);
    CHECK_EQ_U64(a->freed_bytes, b->freed_bytes);
    CHECK_EQ_U64(a->freed_count, b->freed_count);
    CHECK_EQ_U64(a->peak, b->peak);
    CHECK_EQ_U64(a->at_peak, b->at_peak);
  }
  CHECK_EQ_U64(fm.nsites, wm.nsites);
  for (size_t i = 0; i < wm.nsites; i++) {
    const mlprof__mem_site *b = &wm.sites[i];
    const mlprof__mem_site *a = site_of(&fm, wm.zones[b->zone].name, b->stack);
    CHECK(a != NULL);
    CHECK_EQ_U64(a->alloc_bytes, b->alloc_bytes);
    CHECK_EQ_U64(a->alloc_count, b->alloc_count);
    CHECK_EQ_U64(a->at_peak, b->at_peak);
    CHECK_EQ_U64(a->live_end, b->live_end);
    /* Sums carry the variance whole-byte by whole-byte. */
    CHECK(fabs(a->alloc_var - b->alloc_var) <= 1e-6 * b->alloc_var + 16);
  }
  mlprof__memory_free(&fm);
  mlprof__memory_free(&wm);
}

const mlprof_test mlprof_tests_fold[] = {
    {"pairs_fold_but_at_new_highs", test_pairs_fold_but_at_new_highs},
    {"folded_session_tells_the_same", test_folded_session_tells_the_same},
    {NULL, NULL}};
