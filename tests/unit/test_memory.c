/* The memory analysis (src/analyze/memory.c) fed records directly, as the
 * reader would: exact totals, frees that arrive before their allocation
 * (another thread's chunk written first), the peak and what held it, step
 * peaks, and a leak told from a cache filled once. */
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

const mlprof_test mlprof_tests_memory[] = {
    {"html_memory_capped_on_job_time", test_html_memory_capped_on_job_time},
    {"live_series_bounded_peak_exact", test_live_series_bounded_peak_exact},
    {"site_path_outermost_first", test_site_path_outermost_first},
    {"exact_totals_and_peak", test_exact_totals_and_peak},
    {"leak_and_cache_over_steps", test_leak_and_cache_over_steps},
    {NULL, NULL}};
