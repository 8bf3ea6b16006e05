/* The memory analysis (src/analyze/memory.c) fed records directly, as the
 * reader would: exact totals, frees that arrive before their allocation
 * (another thread's chunk written first), the peak and what held it, step
 * peaks, and a leak told from a cache filled once. */
#include <math.h>
#include <stdio.h>

#include "analyze/diff.h"
#include "analyze/memory.h"

#include "analyze/stats.h"
#include "export/html.h"
#include "format/wire.h"
#include "test.h"

typedef struct {
  mlprof__memory m;
  mlprof__memory_builder *b;
  mlprof__visitor v;
} mem;

static void begin(mem *x) {
  x->b = mlprof__memory_begin(&x->m);
  CHECK(x->b != NULL);
  mlprof__memory_profile_begin(x->b, 0, 42, &x->v);
}

static void zone(mem *x, uint32_t id, const char *name) {
  mlprof__name n = {.id = id,
                    .kind = MLPROF__NAME_ZONE,
                    .name = name,
                    .name_len = strlen(name),
                    .function = "",
                    .file = ""};
  CHECK_EQ(x->v.name(x->v.ud, &n), 0);
}

static void alloc(mem *x, uint32_t tid, uint64_t t, uint64_t addr,
                  uint64_t size, uint64_t weight, uint32_t zone) {
  mlprof__alloc a = {tid, t, size, weight, addr, zone, 0};
  CHECK_EQ(x->v.alloc(x->v.ud, &a), 0);
}

static void release(mem *x, uint32_t tid, uint64_t t, uint64_t addr) {
  CHECK_EQ(x->v.alloc_free(x->v.ud, tid, t, addr), 0);
}

static const mlprof__mem_zone *zone_named(const mlprof__memory *m,
                                          const char *name) {
  for (size_t i = 0; i < m->nzones; i++)
    if (!strcmp(m->zones[i].name, name)) return &m->zones[i];
  return NULL;
}

static void finish(mem *x) {
  CHECK_EQ(mlprof__memory_profile_end(x->b), 0);
  CHECK_EQ(mlprof__memory_finish(x->b), 0);
}

static void test_exact_totals_and_peak(void) {
  mem x;
  begin(&x);
  zone(&x, 1, "load");
  zone(&x, 2, "step");
  /* Thread 2's chunk comes first: its free of 0x100 (at t=30) precedes the
   * allocation (thread 1, t=10) in the file. */
  release(&x, 2, 30, 0x100);
  alloc(&x, 1, 10, 0x100, 1000, 1000, 1);
  alloc(&x, 1, 20, 0x200, 500, 500, 2);
  alloc(&x, 1, 40, 0x300, 300, 300, 2);
  release(&x, 1, 50, 0x999); /* never allocated: ends nothing */
  finish(&x);
  const mlprof__memory *m = &x.m;
  CHECK_EQ(m->nprocs, 1);
  CHECK_EQ_U64(m->procs[0].alloc_bytes, 1800);
  CHECK_EQ_U64(m->procs[0].freed_bytes, 1000);
  CHECK_EQ_U64(m->procs[0].live_end, 800);
  /* At t=20 1000 + 500 were live: the peak, before the free at 30. */
  CHECK_EQ_U64(m->procs[0].peak, 1500);
  CHECK_EQ_U64(m->procs[0].peak_t, 20);
  CHECK(m->procs[0].exact);
  const mlprof__mem_zone *load = zone_named(m, "load"),
                         *step = zone_named(m, "step");
  CHECK(load && step);
  CHECK_EQ_U64(load->alloc_bytes, 1000);
  CHECK_EQ_U64(load->freed_bytes, 1000);
  CHECK_EQ_U64(load->at_peak, 1000);
  CHECK_EQ_U64(step->peak, 800);
  CHECK_EQ_U64(step->at_peak, 500);
  mlprof__memory_free(&x.m);
}

static void test_leak_and_cache_over_steps(void) {
  mem x;
  begin(&x);
  zone(&x, 1, "leaky");
  zone(&x, 2, "cache");
  uint64_t t = 1000;
  for (uint64_t s = 0; s < 30; s++) {
    CHECK_EQ(x.v.step(x.v.ud, 1, t), 0);
    t += 10;
    /* 1 MiB kept every step; a cache filled in the first 5 steps only; a
     * transient block sampled (weight above its size). */
    alloc(&x, 1, t++, 0x10000000 + s * 0x100000, 1 << 20, 1 << 20, 1);
    if (s < 5) alloc(&x, 1, t++, 0x20000000 + s * 0x1000, 4 << 20, 4 << 20, 2);
    alloc(&x, 1, t++, 0x30000000, 100, 5000, 0);
    release(&x, 1, t++, 0x30000000);
    t += 10;
  }
  CHECK_EQ(x.v.step(x.v.ud, 1, t), 0);
  finish(&x);
  const mlprof__memory *m = &x.m;
  CHECK_EQ(m->procs[0].nsteps, 31);
  CHECK(!m->procs[0].exact);
  CHECK_EQ(m->nleaks, 1);
  const mlprof__mem_site *s = &m->sites[0]; /* leaks sort first */
  CHECK(s->leak);
  CHECK(!strcmp(m->zones[s->zone].name, "leaky"));
  CHECK(s->slope > 0.99 * (1 << 20) && s->slope < 1.01 * (1 << 20));
  /* Each step's peak: the leak so far, the cache and the transient. */
  CHECK_EQ_U64(m->procs[0].step_peak[10], (11u << 20) + (20u << 20) + 5000);
  for (size_t i = 0; i < m->nsites; i++)
    if (!strcmp(m->zones[m->sites[i].zone].name, "cache"))
      CHECK(!m->sites[i].leak);
  mlprof__memory_free(&x.m);
}

/* Each figure's sampling variance, sum(w (w - s)), and the mean read back
 * from the weights. */
static void test_sampling_variance_and_mean(void) {
  mem x;
  begin(&x);
  zone(&x, 1, "z");
  /* Sampled at a mean of 524288: w = s / (1 - exp(-s / mean)). */
  uint64_t s1 = 100, w1 = 524338, s2 = 8u << 20, w2 = 8u << 20;
  alloc(&x, 1, 10, 0x1000, s1, w1, 1);
  alloc(&x, 1, 20, 0x2000, s1, w1, 1);
  alloc(&x, 1, 30, 0x3000, s2, w2, 1); /* far above the mean: exact */
  release(&x, 1, 40, 0x2000);
  finish(&x);
  const mlprof__memory *m = &x.m;
  double v1 = (double)w1 * (double)(w1 - s1);
  CHECK(fabs(m->procs[0].mean - 524288) <= 1);
  CHECK_EQ(m->nsites, 1);
  CHECK(fabs(m->sites[0].alloc_var - 2 * v1) < 1e-6 * v1);
  /* At the peak (t=30) all three were live; at the end one of the small. */
  CHECK(fabs(m->procs[0].peak_var - 2 * v1) < 1e-6 * v1);
  CHECK(fabs(m->sites[0].at_peak_var - 2 * v1) < 1e-6 * v1);
  CHECK(fabs(zone_named(m, "z")->peak_var - 2 * v1) < 1e-6 * v1);
  mlprof__memory_free(&x.m);
}

static void sum(mem *x, uint32_t tid, uint64_t t, uint32_t zone, uint64_t stack,
                uint64_t count, uint64_t size, uint64_t weight, uint64_t var) {
  mlprof__alloc_sum a = {tid, t, zone, stack, count, size, weight, var};
  CHECK_EQ(x->v.alloc_sum(x->v.ud, &a), 0);
}

/* Folded allocations (a site's sum, tag 3): allocated and freed in the
 * totals, never live; the mean read from a sum of one; sums that would
 * overflow saturate; a profile holding only sums still has its figures. */
static void test_folded_sums(void) {
  mem x;
  begin(&x);
  zone(&x, 1, "z");
  uint64_t w1 = 524338, v1 = w1 * (w1 - 100);
  alloc(&x, 1, 10, 0x1000, 8u << 20, 8u << 20, 1);
  sum(&x, 1, 20, 1, 0, 3, 300, 3 * w1, 3 * v1);
  sum(&x, 2, 25, 0, 0, 1, 100, w1, v1);
  release(&x, 1, 30, 0x1000);
  sum(&x, 1, 40, 1, 0, 2, 200, 2 * w1, 2 * v1);
  finish(&x);
  const mlprof__memory *m = &x.m;
  const mlprof__mem_proc *p = &m->procs[0];
  CHECK_EQ_U64(p->allocs, 7);
  CHECK_EQ_U64(p->frees, 7);
  CHECK_EQ_U64(p->alloc_bytes, (8u << 20) + 6 * w1);
  CHECK_EQ_U64(p->freed_bytes, (8u << 20) + 6 * w1);
  CHECK_EQ_U64(p->live_end, 0);
  CHECK_EQ_U64(p->peak, 8u << 20); /* the sums were never live */
  CHECK(!p->exact);
  CHECK(fabs(p->mean - 524288) <= 1);
  const mlprof__mem_zone *z = zone_named(m, "z");
  CHECK_EQ_U64(z->alloc_count, 6);
  CHECK_EQ_U64(z->freed_count, 6);
  CHECK_EQ_U64(z->alloc_bytes, (8u << 20) + 5 * w1);
  CHECK_EQ_U64(z->peak, 8u << 20);
  CHECK_EQ(m->nsites, 2);
  CHECK_EQ_U64(m->sites[0].alloc_bytes, (8u << 20) + 5 * w1);
  CHECK_EQ_U64(m->sites[0].alloc_count, 6);
  CHECK(fabs(m->sites[0].alloc_var - 5.0 * (double)v1) < 1e-6 * (double)v1);
  mlprof__memory_free(&x.m);

  begin(&x);
  zone(&x, 1, "z");
  sum(&x, 1, 20, 1, 0, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX);
  sum(&x, 1, 30, 1, 0, 5, 5, 5, 0);
  finish(&x);
  m = &x.m;
  CHECK_EQ(m->nprocs, 1);
  CHECK_EQ_U64(m->procs[0].allocs, UINT64_MAX);
  CHECK_EQ_U64(m->procs[0].alloc_bytes, UINT64_MAX);
  CHECK_EQ_U64(m->procs[0].freed_bytes, UINT64_MAX);
  CHECK_EQ_U64(m->procs[0].live_end, 0);
  CHECK_EQ_U64(m->procs[0].peak, 0);
  CHECK_EQ_U64(zone_named(m, "z")->alloc_count, UINT64_MAX);
  CHECK_EQ_U64(m->sites[0].alloc_bytes, UINT64_MAX);
  mlprof__memory_free(&x.m);

  /* Single allocations (tag 1) whose weights claim near 2^64 each: the
   * allocated and freed totals stop at UINT64_MAX too. */
  begin(&x);
  zone(&x, 1, "z");
  alloc(&x, 1, 10, 0x1000, 100, UINT64_MAX - 1, 1);
  alloc(&x, 1, 20, 0x2000, 100, UINT64_MAX - 1, 1);
  release(&x, 1, 30, 0x1000);
  release(&x, 1, 40, 0x2000);
  finish(&x);
  m = &x.m;
  CHECK_EQ_U64(m->procs[0].alloc_bytes, UINT64_MAX);
  CHECK_EQ_U64(m->procs[0].freed_bytes, UINT64_MAX);
  CHECK_EQ_U64(zone_named(m, "z")->alloc_bytes, UINT64_MAX);
  CHECK_EQ_U64(zone_named(m, "z")->freed_bytes, UINT64_MAX);
  CHECK_EQ_U64(m->sites[0].alloc_bytes, UINT64_MAX);
  mlprof__memory_free(&x.m);
}

static void test_leak_floor(void) {
  /* 101 marks at 512 KiB: 4 samples with probability 0.95 need a Poisson
   * mean of 7.7537, over 100 steps. */
  double f = mlprof__memory_leak_floor(101, 101, 524288);
  CHECK(fabs(f - 7.75366 * 524288 / 100) < 0.001 * f);
  /* Every allocation: the 1 MiB of growth alone. */
  CHECK(mlprof__memory_leak_floor(101, 101, 0) == (1 << 20) / 100.0);
  /* 64 KiB: 16 samples make 1 MiB. */
  CHECK(mlprof__memory_leak_floor(101, 101, 65536) > (1 << 20) / 100.0);
  CHECK(mlprof__memory_leak_floor(1001, 256, 524288) < f / 9);
  CHECK(isnan(mlprof__memory_leak_floor(7, 7, 524288)));
}

/* A memory of one process, zones "" and "z", sites given: the peak and the
 * process's bytes from them. */
typedef struct {
  mlprof__memory m;
  mlprof__mem_proc proc;
  mlprof__mem_zone zones[2];
  mlprof__mem_site sites[32];
} fake_mem;

static void fake(fake_mem *f, const double *alloc, const double *var, size_t n,
                 double peak, double peak_var) {
  memset(f, 0, sizeof *f);
  f->proc = (mlprof__mem_proc){
      .pid = 7, .peak = (uint64_t)peak, .peak_var = peak_var, .nsteps = 10};
  f->zones[0] = (mlprof__mem_zone){.name = "", .name_len = 0};
  f->zones[1] = (mlprof__mem_zone){.name = "z",
                                   .name_len = 1,
                                   .alloc_count = 1,
                                   .peak = (uint64_t)peak,
                                   .peak_var = peak_var};
  static char natives[32][16];
  for (size_t i = 0; i < n; i++) {
    snprintf(natives[i], sizeof natives[i], "f%zu+0x1", i);
    f->sites[i] = (mlprof__mem_site){.zone = 1,
                                     .python = "",
                                     .native = natives[i],
                                     .alloc_bytes = (uint64_t)alloc[i],
                                     .alloc_count = 1,
                                     .alloc_var = var[i]};
    f->proc.alloc_bytes += (uint64_t)alloc[i];
  }
  f->m = (mlprof__memory){.procs = &f->proc,
                          .nprocs = 1,
                          .zones = f->zones,
                          .nzones = 2,
                          .sites = f->sites,
                          .nsites = n};
}

static const mlprof__memdiff_item *step_item(const mlprof__memdiff *d,
                                             const char *native) {
  for (size_t i = 0; i < d->nitems; i++)
    if (d->items[i].kind == MLPROF__MEMDIFF_SITE_STEP &&
        !strcmp(d->items[i].native, native))
      return &d->items[i];
  return NULL;
}

static void test_memdiff_verdicts(void) {
  mlprof__diff_options opt;
  mlprof__diff_options_init(&opt);
  const double mean = 524288, mb = 1e6;
  fake_mem a, b;
  mlprof__memdiff d;
  /* Sampled: 100 MB against 104 MB (standard errors ~7 MB each) is chance;
   * 100 MB against 200 MB is not. */
  double x[2] = {100 * mb, 100 * mb},
         vx[2] = {mean * 100 * mb, mean * 100 * mb};
  double y[2] = {104 * mb, 200 * mb},
         vy[2] = {mean * 104 * mb, mean * 200 * mb};
  fake(&a, x, vx, 2, 300 * mb, mean * 300 * mb);
  fake(&b, y, vy, 2, 300 * mb, mean * 300 * mb);
  CHECK_EQ(mlprof__memdiff_build(&a.m, &b.m, &opt, &d), 0);
  CHECK(d.compared);
  const mlprof__memdiff_item *s0 = step_item(&d, "f0+0x1"),
                             *s1 = step_item(&d, "f1+0x1");
  CHECK(s0 && s1);
  CHECK_EQ(s0->verdict, MLPROF__MEMDIFF_UNCHANGED);
  CHECK_EQ(s1->verdict, MLPROF__MEMDIFF_GREW);
  /* Per step: 10 step marks. */
  CHECK(fabs(s1->value[1] - 20 * mb) < 1);
  CHECK(fabs(s1->se[1] - sqrt(mean * 200 * mb) / 10) < 1);
  CHECK(fabs(s1->z - 10 * mb / sqrt(2 * mean * 200 * mb / 100)) < 1e-6);
  CHECK_EQ(d.count[MLPROF__MEMDIFF_GREW], 1);
  CHECK(d.regression);
  mlprof__memdiff_free(&d);

  /* Exact: no sampling error; +3% is under the threshold, a tiny site
   * doubled is under 1% of the bytes a step, +10% counts. */
  double e[3] = {100 * mb, 100 * mb, 0.1 * mb}, z0[3] = {0, 0, 0};
  double f[3] = {103 * mb, 110 * mb, 0.2 * mb};
  fake(&a, e, z0, 3, 300 * mb, 0);
  fake(&b, f, z0, 3, 300 * mb, 0);
  CHECK_EQ(mlprof__memdiff_build(&a.m, &b.m, &opt, &d), 0);
  CHECK_EQ(step_item(&d, "f0+0x1")->verdict, MLPROF__MEMDIFF_UNCHANGED);
  CHECK_EQ(step_item(&d, "f1+0x1")->verdict, MLPROF__MEMDIFF_GREW);
  CHECK(step_item(&d, "f1+0x1")->p == 0);
  CHECK_EQ(step_item(&d, "f2+0x1")->verdict, MLPROF__MEMDIFF_UNCHANGED);
  mlprof__memdiff_free(&d);

  /* Holm: 20 sites each moved by 2.7 standard errors (p 0.007 alone, below
   * alpha) are chance among 20 + 2 figures. */
  double g[20], vg[20], h[20], vh[20];
  for (int i = 0; i < 20; i++) {
    g[i] = 100 * mb;
    vg[i] = vh[i] = mean * 100 * mb;
    h[i] = g[i] + 2.7 * sqrt(2 * vg[i]);
  }
  fake(&a, g, vg, 20, 300 * mb, mean * 300 * mb);
  fake(&b, h, vh, 20, 300 * mb, mean * 300 * mb);
  CHECK_EQ(mlprof__memdiff_build(&a.m, &b.m, &opt, &d), 0);
  CHECK(step_item(&d, "f3+0x1")->p < opt.alpha);
  CHECK(step_item(&d, "f3+0x1")->p_holm > opt.alpha);
  CHECK_EQ(d.count[MLPROF__MEMDIFF_GREW], 0);
  CHECK(!d.regression);
  mlprof__memdiff_free(&d);
  /* No records on a side: nothing compared. */
  mlprof__memory none = {0};
  CHECK_EQ(mlprof__memdiff_build(&a.m, &none, &opt, &d), 0);
  CHECK(!d.compared && d.nitems == 0);
}

/* The live-bytes series: bounded whatever the records, its highest point
 * the peak, at the peak's time; the step marks kept. */
static void test_live_series_bounded_peak_exact(void) {
  mem x;
  begin(&x);
  zone(&x, 1, "z");
  uint64_t t = 100;
  /* 20000 records: a block kept every 10 ns, each freed 5 records later,
   * a 1 MB spike in the middle (t = 50100 + 3). */
  for (uint64_t i = 0; i < 10000; i++) {
    if (i % 100 == 0) CHECK_EQ(x.v.step(x.v.ud, 1, t), 0);
    alloc(&x, 1, t, 0x1000 + i * 16, 16, 16, 1);
    if (i >= 5) release(&x, 1, t + 1, 0x1000 + (i - 5) * 16);
    if (i == 5000) {
      alloc(&x, 1, t + 3, 0x9000000, 1000000, 1000000, 1);
      release(&x, 1, t + 4, 0x9000000);
    }
    t += 10;
  }
  finish(&x);
  const mlprof__mem_proc *p = &x.m.procs[0];
  CHECK(p->nlive > 100);
  CHECK(p->nlive <= MLPROF__MEM_SERIES + 1);
  CHECK_EQ_U64(p->peak, 1000000 + 5 * 16); /* 5 blocks live then */
  CHECK_EQ_U64(p->peak_t, 50100 + 3);
  uint64_t hi = 0, hi_t = 0;
  for (size_t i = 0; i < p->nlive; i++) {
    if (i) CHECK(p->live_t[i] >= p->live_t[i - 1]);
    if (p->live_v[i] > hi) hi = p->live_v[i], hi_t = p->live_t[i];
  }
  CHECK_EQ_U64(hi, p->peak);
  CHECK_EQ_U64(hi_t, p->peak_t);
  CHECK_EQ_U64(p->live_v[0], 0);
  CHECK_EQ(p->nsteps, 100);
  CHECK_EQ_U64(p->step_t[1], 1100);
  mlprof__memory_free(&x.m);
}

static void func(mem *x, uint32_t id, const char *file, const char *fn) {
  mlprof__stack_func f = {id, file, fn, 1};
  CHECK_EQ(x->v.stack_func(x->v.ud, &f), 0);
}

static void frame(mem *x, uint32_t id, uint32_t fn, uint32_t line,
                  const char *symbol) {
  mlprof__stack_frame f = {id,
                           fn,
                           line,
                           symbol != NULL,
                           0x1234,
                           0x10,
                           symbol ? "/lib/libc.so.6" : "",
                           symbol ? symbol : ""};
  CHECK_EQ(x->v.stack_frame(x->v.ud, &f), 0);
}

/* A site's path: every frame, outermost first, the native one last; a
 * stack deeper than the path's cap keeps its innermost frames. */
static void test_site_path_outermost_first(void) {
  mem x;
  begin(&x);
  zone(&x, 1, "z");
  func(&x, 1, "/usr/lib/python3/site-packages/torch/nn.py", "forward");
  func(&x, 2, "/home/u/train.py", "main");
  frame(&x, 1, 2, 50, NULL);
  frame(&x, 2, 1, 7, NULL);
  frame(&x, 3, 0, 0, "malloc_caller");
  /* node 1: main (root); 2: forward; 3: the native frame. */
  CHECK_EQ(x.v.stack_node(x.v.ud, 1, 0, 1), 0);
  CHECK_EQ(x.v.stack_node(x.v.ud, 2, 1, 2), 0);
  CHECK_EQ(x.v.stack_node(x.v.ud, 3, 2, 3), 0);
  /* A chain of 100 frames of main under node 3's stack: 4..103. */
  for (uint32_t i = 0; i < 100; i++)
    CHECK_EQ(x.v.stack_node(x.v.ud, 4 + i, i ? 3 + i : 0, 1), 0);
  mlprof__alloc a = {1, 10, 64, 64, 0x100, 1, 3};
  CHECK_EQ(x.v.alloc(x.v.ud, &a), 0);
  mlprof__alloc deep = {1, 11, 64, 64, 0x200, 1, 103};
  CHECK_EQ(x.v.alloc(x.v.ud, &deep), 0);
  finish(&x);
  CHECK_EQ(x.m.nsites, 2);
  for (size_t i = 0; i < x.m.nsites; i++) {
    const mlprof__mem_site *s = &x.m.sites[i];
    if (s->stack == 3) {
      CHECK_EQ(s->npath, 3);
      CHECK_STR(x.m.frames[s->path[0]], "/home/u/train.py:50 main");
      CHECK_STR(x.m.frames[s->path[1]],
                "/usr/lib/python3/site-packages/torch/nn.py:7 forward");
      CHECK_STR(x.m.frames[s->path[2]], "[malloc_caller+0x10]");
    } else {
      CHECK_EQ(s->npath, MLPROF__MEM_PATH_FRAMES);
      /* one text for the 48 frames of main */
      for (uint32_t k = 1; k < s->npath; k++) CHECK_EQ(s->path[k], s->path[0]);
    }
  }
  CHECK_EQ(x.m.nframes, 3);
  mlprof__memory_free(&x.m);
}

static size_t count_of(const char *s, const char *what) {
  size_t n = 0;
  for (const char *p = s; (p = strstr(p, what)); p++) n++;
  return n;
}

/* The page's memory data: sites capped at MLPROF__HTML_MEM_SITES, the rest
 * summed (the totals stay whole), times moved onto the job's timeline. */
static void test_html_memory_capped_on_job_time(void) {
  mem x;
  begin(&x);
  zone(&x, 1, "z");
  size_t n = MLPROF__HTML_MEM_SITES + 500;
  for (size_t i = 0; i < n; i++) {
    mlprof__alloc a = {1, 10 + i, 100 + i, 100 + i, 0x1000 + 16 * i, 1, 1 + i};
    CHECK_EQ(x.v.alloc(x.v.ud, &a), 0);
  }
  finish(&x);
  CHECK_EQ(x.m.nsites, n);
  mlprof__proc_stats proc = {.pid = 42, .offset_ns = 1000000};
  mlprof__report r = {.procs = &proc, .nprocs = 1, .mem = x.m};
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_html_memory(&r, &o), 0);
  mlprof__out_write(&o, "", 1);
  CHECK_EQ(o.err, 0);
  const char *j = o.buf;
  /* Each site's row has its frames: "[]," when it has none. */
  CHECK_EQ(count_of(j, ",[],"), MLPROF__HTML_MEM_SITES);
  CHECK(strstr(j, "\"other_sites\":500") != NULL);
  /* The 500 smallest: 100..599 bytes, all live at the peak (the end). */
  CHECK(strstr(j, "\"other\":[[174750,174750,500,174750]]") != NULL);
  char want[64];
  snprintf(want, sizeof want, "\"peak_ns\":%llu",
           (unsigned long long)(1000000 + x.m.procs[0].peak_t));
  CHECK(strstr(j, want) != NULL);
  mlprof__out_close(&o);
  mlprof__memory_free(&x.m);
}

/* A track's allocations in zone "cuda:N" are device N's memory, replayed
 * apart: a free on a thread ends only the process's own allocation of that
 * address, a free on the track only the device's; each space has its own
 * peak, and its sites name it (mproc). A program's zone "cuda:0" on a
 * thread stays its own. */
static void test_cuda_space_replayed_apart(void) {
  mem x;
  uint32_t track = MLPROF__TRACK_TID_BASE + 1;
  begin(&x);
  zone(&x, 1, "fwd");
  zone(&x, 2, "cuda:0");
  alloc(&x, 1, 10, 0x100, 1000, 1000, 1);
  alloc(&x, track, 15, 0x100, 5000, 5000, 2);
  alloc(&x, 1, 16, 0x200, 7, 7, 2); /* the program's own zone cuda:0 */
  release(&x, 1, 20, 0x100);
  alloc(&x, track, 25, 0x300, 2000, 2000, 2);
  release(&x, track, 30, 0x100);
  finish(&x);
  const mlprof__memory *m = &x.m;
  CHECK_EQ(m->nprocs, 2);
  CHECK_EQ(m->procs[0].device, -1);
  CHECK_EQ(m->procs[1].device, 0);
  CHECK_EQ_U64(m->procs[0].peak, 1007);
  CHECK_EQ_U64(m->procs[0].live_end, 7);
  CHECK_EQ_U64(m->procs[1].peak, 7000);
  CHECK_EQ_U64(m->procs[1].peak_t, 25);
  CHECK_EQ_U64(m->procs[1].live_end, 2000);
  CHECK(m->procs[1].exact);
  for (size_t i = 0; i < m->nsites; i++) {
    const mlprof__mem_site *s = &m->sites[i];
    CHECK_EQ(s->mproc, s->alloc_bytes == 7000 ? 1u : 0u);
  }
  CHECK_EQ_U64(zone_named(m, "cuda:0")->alloc_bytes, 7007);
  mlprof__memory_free(&x.m);
}

/* Per step: each site's bytes allocated in it and held at its peak. */
static void test_step_groups(void) {
  mem x;
  begin(&x);
  zone(&x, 1, "a");
  zone(&x, 2, "b");
  alloc(&x, 1, 1, 0x10, 100, 100, 1); /* before the first step */
  CHECK_EQ(x.v.step(x.v.ud, 1, 10), 0);
  alloc(&x, 1, 11, 0x20, 50, 50, 2);
  release(&x, 1, 12, 0x20);
  alloc(&x, 1, 13, 0x30, 30, 30, 2);
  CHECK_EQ(x.v.step(x.v.ud, 1, 20), 0);
  CHECK_EQ(x.v.step(x.v.ud, 1, 30), 0); /* an empty step */
  alloc(&x, 1, 31, 0x40, 10, 10, 1);
  release(&x, 1, 32, 0x10);
  finish(&x);
  const mlprof__mem_proc *p = &x.m.procs[0];
  CHECK_EQ(p->ngroups, 3);
  /* Step 1: 100 live when it began, 150 at 11. */
  CHECK_EQ_U64(p->groups[0].peak, 150);
  CHECK_EQ_U64(p->groups[0].peak_t, 11);
  CHECK_EQ_U64(p->groups[0].t1, 20);
  /* Step 2: nothing happened: what was live when it began. */
  CHECK_EQ_U64(p->groups[1].peak, 130);
  CHECK_EQ_U64(p->groups[1].peak_t, 20);
  /* Step 3, to the last record: 140 at 31. */
  CHECK_EQ_U64(p->groups[2].peak, 140);
  CHECK_EQ_U64(p->groups[2].t1, 32);
  uint64_t got[3][2][2] = {{{0}}}; /* group, zone a/b, alloc / at peak */
  for (size_t i = 0; i < p->nstep_sites; i++) {
    const mlprof__mem_step_site *e = &p->step_sites[i];
    const mlprof__mem_site *s = &x.m.sites[e->site];
    int b = !strcmp(x.m.zones[s->zone].name, "b");
    got[e->group][b][0] += e->alloc_bytes;
    got[e->group][b][1] += e->at_peak;
  }
  CHECK_EQ_U64(got[0][1][0], 80);
  CHECK_EQ_U64(got[0][0][0], 0);
  CHECK_EQ_U64(got[0][0][1], 100);
  CHECK_EQ_U64(got[0][1][1], 50);
  CHECK_EQ_U64(got[1][0][1], 100);
  CHECK_EQ_U64(got[1][1][1], 30);
  CHECK_EQ_U64(got[1][1][0], 0);
  CHECK_EQ_U64(got[2][0][0], 10);
  CHECK_EQ_U64(got[2][0][1], 110);
  mlprof__memory_free(&x.m);
}

const mlprof_test mlprof_tests_memory[] = {
    {"cuda_space_replayed_apart", test_cuda_space_replayed_apart},
    {"step_groups", test_step_groups},
    {"html_memory_capped_on_job_time", test_html_memory_capped_on_job_time},
    {"live_series_bounded_peak_exact", test_live_series_bounded_peak_exact},
    {"site_path_outermost_first", test_site_path_outermost_first},
    {"exact_totals_and_peak", test_exact_totals_and_peak},
    {"leak_and_cache_over_steps", test_leak_and_cache_over_steps},
    {"sampling_variance_and_mean", test_sampling_variance_and_mean},
    {"leak_floor", test_leak_floor},
    {"folded_sums", test_folded_sums},
    {"memdiff_verdicts", test_memdiff_verdicts},
    {NULL, NULL}};
