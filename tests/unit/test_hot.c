/* Hot functions (src/analyze/hot.h): a zone's callee from its stacks. */
#include <math.h>
#include <mlprof.h>
#include <stdlib.h>

#include "analyze/hot.h"
#include "base/base.h"
#include "format/wire.h"
#include "test.h"

/* A hot of five functions (<module>, work, slow, fast, other) called
 * <module> -> work -> {slow (at two lines), fast, other}, with no stack
 * other than these; zones "" and "zone". */
static mlprof__hot_func funcs[] = {{"run.py", "<module>", 1},
                                   {"run.py", "work", 5},
                                   {"run.py", "slow", 10},
                                   {"run.py", "fast", 20},
                                   {"run.py", "other", 30}};
static mlprof__hot_frame frames[] = {{0, 1},  {1, 6},  {2, 11},
                                     {2, 12}, {3, 21}, {4, 31}};
static mlprof__hot_node nodes[] = {
    {MLPROF__NONE, 0}, {0, 1}, {1, 2}, {1, 3}, {1, 4}, {1, 5}};
static char zone0[] = "", zone1[] = "zone";
static char *zone_names[] = {zone0, zone1};

static mlprof__hot hot_of(mlprof__hot_stack *stacks, size_t n) {
  return (mlprof__hot){.funcs = funcs,
                       .nfuncs = 5,
                       .frames = frames,
                       .nframes = 6,
                       .nodes = nodes,
                       .nnodes = 6,
                       .stacks = stacks,
                       .nstacks = n,
                       .zone_names = zone_names,
                       .nzone_names = 2};
}

static mlprof__hot_stack stack(uint32_t node, uint32_t zone, uint64_t n) {
  return (mlprof__hot_stack){
      .node = node, .zone = zone, .samples = n, .wall_ns = n * 10000000u};
}

/* slow holds 75% of the zone, 37.5% at each of its two lines: one callee
 * however its samples split by line; work, which opened the zone, is no
 * callee. */
static void callee_is_found_across_lines(void) {
  mlprof__hot_stack s[] = {stack(2, 1, 30), stack(3, 1, 30), stack(4, 1, 20),
                           stack(0, 0, 10)};
  mlprof__hot h = hot_of(s, 4);
  double share = 0;
  uint32_t f = mlprof__hot_callee(&h, "zone", 4, &share);
  CHECK_EQ(f, 2);
  CHECK(fabs(share - 0.75) < 1e-9);
}

/* Time split three ways: no callee; too few samples: none either. */
static void no_callee_when_split_or_few(void) {
  mlprof__hot_stack s[] = {stack(2, 1, 20), stack(4, 1, 20), stack(5, 1, 20)};
  mlprof__hot h = hot_of(s, 3);
  double share = -1;
  CHECK_EQ(mlprof__hot_callee(&h, "zone", 4, &share), MLPROF__NONE);
  mlprof__hot_stack few[] = {stack(2, 1, 15), stack(4, 1, 2)};
  h = hot_of(few, 2);
  CHECK_EQ(mlprof__hot_callee(&h, "zone", 4, &share), MLPROF__NONE);
  CHECK(share == -1);
  CHECK_EQ(mlprof__hot_callee(&h, "nope", 4, &share), MLPROF__NONE);
}

/* The zone is opened by mlprof's wrapper, on 95% of the zone's stacks
 * (the rest caught before the wrapper's frame): the callee is the user's
 * loader under it, not the wrapper. */
static void callee_passes_over_own_frames(void) {
  static mlprof__hot_func f[] = {
      {"run.py", "<module>", 1},
      {"/venv/site-packages/mlprof/auto.py", "data_wait", 361},
      {"/venv/site-packages/torch/loader.py", "__next__", 720},
      {"/usr/lib/python3.11/queue.py", "get", 154}};
  static mlprof__hot_frame fr[] = {{0, 9}, {1, 362}, {2, 721}, {3, 180}};
  static mlprof__hot_node nd[] = {{MLPROF__NONE, 0}, {0, 1}, {1, 2}, {2, 3}};
  mlprof__hot_stack s[] = {stack(3, 1, 95), stack(0, 1, 5)};
  mlprof__hot h = {.funcs = f,
                   .nfuncs = 4,
                   .frames = fr,
                   .nframes = 4,
                   .nodes = nd,
                   .nnodes = 4,
                   .stacks = s,
                   .nstacks = 2,
                   .zone_names = zone_names,
                   .nzone_names = 2};
  double share = 0;
  CHECK_EQ(mlprof__hot_callee(&h, "zone", 4, &share), 2);
  CHECK(fabs(share - 0.95) < 1e-9);
}

const mlprof_test mlprof_tests_hot[] = {
    {"callee_passes_over_own_frames", callee_passes_over_own_frames},
    {"callee_is_found_across_lines", callee_is_found_across_lines},
    {"no_callee_when_split_or_few", no_callee_when_split_or_few},
    {NULL, NULL}};
