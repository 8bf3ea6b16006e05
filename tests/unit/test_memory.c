/* The memory analysis (src/analyze/memory.c) fed records directly, as the
 * reader would: exact totals, frees that arrive before their allocation
 * (another thread's chunk written first), the peak and what held it, step
 * peaks, and a leak told from a cache filled once. */
#include "analyze/memory.h"
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

const mlprof_test mlprof_tests_memory[] = {
    {"exact_totals_and_peak", test_exact_totals_and_peak},
    {"leak_and_cache_over_steps", test_leak_and_cache_over_steps},
    {NULL, NULL}};
