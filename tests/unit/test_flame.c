/* The dashboard's stack samples (src/analyze/flame.h): each sample's zone,
 * step and thread, and the caps that keep a page small for any run. */
#include <stdlib.h>

#include "analyze/flame.h"
#include "base/base.h"
#include "export/html.h"
#include "format/wire.h"
#include "test.h"

typedef struct {
  mlprof__job job;
  mlprof__job_profile prof[2];
  mlprof__hot hot;
  mlprof__flame fl;
  mlprof__hot_builder *hb;
  mlprof__flame_builder *fb;
  mlprof__visitor hv, fv;
} fixture;

static void start(fixture *x, size_t nprof) {
  memset(x, 0, sizeof *x);
  for (size_t i = 0; i < nprof; i++)
    x->prof[i] = (mlprof__job_profile){.pid = 40 + i,
                                       .rank = -1,
                                       .name = (char *)"prog",
                                       .parent = (int)i - 1,
                                       .offset_ns = 1000 * i};
  x->job = (mlprof__job){x->prof, nprof, NULL};
  x->hb = mlprof__hot_begin(&x->hot);
  x->fb = mlprof__flame_begin(&x->fl, x->hb, &x->job);
}

static void profile(fixture *x, size_t i) {
  mlprof__hot_profile_begin(x->hb, &x->hv);
  mlprof__flame_profile_begin(x->fb, i, &x->fv);
}

static int profile_end(fixture *x) {
  int rc = mlprof__hot_profile_end(x->hb);
  return rc ? rc : mlprof__flame_profile_end(x->fb);
}

static int finish(fixture *x) {
  int rc = mlprof__hot_finish(x->hb);
  return rc ? rc : mlprof__flame_finish(x->fb, &x->hot);
}

static void done(fixture *x) {
  mlprof__flame_free(&x->fl);
  mlprof__hot_free(&x->hot);
}

/* Defines function id f (name), frame f (its line 10 + f) and the stack
 * id n of frame f on parent stack p. */
static void def(fixture *x, uint32_t f, const char *name, uint32_t n,
                uint32_t p) {
  mlprof__stack_func fn = {f, "run.py", name, f};
  mlprof__stack_frame fr = {
      .id = f, .func = f, .line = 10 + f, .module = "", .symbol = ""};
  x->hv.stack_func(x->hv.ud, &fn);
  x->hv.stack_frame(x->hv.ud, &fr);
  x->hv.stack_node(x->hv.ud, n, p, f);
}

static void sample(fixture *x, uint32_t tid, uint64_t t, uint32_t stack,
                   int cpu) {
  mlprof__stack_sample s = {t, tid, stack, cpu ? MLPROF__SAMPLE_ON_CPU : 0, 0};
  x->hv.stack_sample(x->hv.ud, &s);
}

static const mlprof__flame_row *row_at(const mlprof__flame *f, uint32_t tid,
                                       uint32_t step, uint32_t zone) {
  for (size_t i = 0; i < f->nrows; i++) {
    const mlprof__flame_row *r = &f->rows[i];
    if (f->threads[r->thread].tid == tid && r->step == step && r->zone == zone)
      return r;
  }
  return NULL;
}

/* Samples of the step thread and of a second thread fall in the steps of
 * the thread with the most marks (a gap after a step end in none), under
 * the innermost zone open on their own thread; a child process without
 * marks takes its parent's steps. */
static void steps_zones_threads_and_inherited_steps(void) {
  fixture x;
  start(&x, 2);
  CHECK(x.hb && x.fb);
  profile(&x, 0);
  mlprof__name zn = {.id = 1,
                     .kind = MLPROF__NAME_ZONE,
                     .name = "fwd",
                     .name_len = 3,
                     .function = "",
                     .file = ""};
  x.hv.name(x.hv.ud, &zn);
  x.fv.thread(x.fv.ud, 5, "main", 4);
  def(&x, 1, "main", 1, 0);
  def(&x, 2, "work", 2, 1);
  /* Steps of tid 5: [100, 200), [200, 300), end at 300, [400, ...). */
  x.fv.step(x.fv.ud, 5, 100);
  x.fv.step(x.fv.ud, 5, 200);
  x.fv.step_end(x.fv.ud, 5, 300);
  x.fv.step(x.fv.ud, 5, 400);
  x.fv.step(x.fv.ud, 6, 50); /* fewer marks: not the steps */
  sample(&x, 5, 50, 2, 1);   /* before any step */
  sample(&x, 5, 150, 2, 1);  /* step 0, in fwd */
  sample(&x, 6, 250, 1, 0);  /* step 1, other thread, no zone */
  sample(&x, 5, 350, 2, 1);  /* gap after the end */
  sample(&x, 5, 450, 2, 0);  /* step 2 */
  x.hv.span(x.hv.ud, 5, 1, 0, 120, 180);
  CHECK_EQ(profile_end(&x), 0);
  profile(&x, 1);
  x.hv.stack_func(x.hv.ud, &(mlprof__stack_func){1, "run.py", "main", 1});
  x.hv.stack_frame(
      x.hv.ud, &(mlprof__stack_frame){
                   .id = 1, .func = 1, .line = 11, .module = "", .symbol = ""});
  x.hv.stack_node(x.hv.ud, 1, 0, 1);
  /* The child starts 1000 ns later: its 0 is the parent's 1000 ns, in
   * step 2. */
  sample(&x, 9, 0, 1, 1);
  CHECK_EQ(profile_end(&x), 0);
  CHECK_EQ(finish(&x), 0);
  const mlprof__flame *f = &x.fl;
  CHECK_EQ(f->samples, 6);
  CHECK_EQ(f->steps, 3);
  CHECK_EQ(f->step_width, 1);
  CHECK_EQ(f->nprocs, 2);
  CHECK_EQ(f->nthreads, 3);
  CHECK_STR(f->threads[0].name, "main");
  CHECK_EQ(f->threads[2].proc, 1);
  CHECK_EQ(f->procs[1].pid, 41);
  CHECK_STR(x.hot.zone_names[1], "fwd");
  const mlprof__flame_row *r = row_at(f, 5, 0, 1);
  CHECK(r != NULL);
  CHECK_EQ(r->n, 1);
  CHECK_EQ(r->n_cpu, 1);
  CHECK_EQ(
      x.hot.funcs[x.hot.frames[x.hot.nodes[r->node].frame].func].first_line, 2);
  CHECK(row_at(f, 6, 1, 0) != NULL);
  CHECK_EQ(row_at(f, 6, 1, 0)->n_cpu, 0);
  CHECK(row_at(f, 6, 1, 0)->wall_ns > 0);
  CHECK_EQ(row_at(f, 6, 1, 0)->cpu_ns, 0);
  r = row_at(f, 5, MLPROF__NONE, 0);
  CHECK(r != NULL);
  CHECK_EQ(r->n, 2); /* before the first step and in the gap */
  CHECK(row_at(f, 5, 2, 0) != NULL);
  CHECK(row_at(f, 9, 2, 0) != NULL);
  /* Every sample on the timeline, in job time, by thread then time. */
  CHECK_EQ(f->nmarks, 6);
  CHECK_EQ(f->mark_stride, 1);
  CHECK_EQ(f->marks[f->nmarks - 1].t, 1000);
  for (size_t i = 1; i < f->nmarks; i++)
    CHECK(f->marks[i - 1].thread < f->marks[i].thread ||
          (f->marks[i - 1].thread == f->marks[i].thread &&
           f->marks[i - 1].t <= f->marks[i].t));
  /* The page's data names them. */
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_html_stacks(&x.hot, f, &o), 0);
  mlprof__out_lit(&o, "");
  CHECK(o.len > 0);
  char *json = mlprof__dup(o.buf, o.len);
  CHECK(strstr(json, "\"zones\":[\"\",\"fwd\"]") != NULL);
  CHECK(strstr(json, "\"threads\":[[0,5,\"main\"],[0,6,\"\"],[1,9,\"\"]]") !=
        NULL);
  CHECK(strstr(json, "\"files\":[\"run.py\"]") != NULL);
  CHECK(strstr(json, "\"funcs\":[0,\"main\",1,0,\"work\",2]") != NULL);
  CHECK(strstr(json, "\"nodes\":[-1,0,11,0,1,12]") != NULL);
  free(json);
  mlprof__out_close(&o);
  done(&x);
}

/* A run of many steps, stacks and samples: the rows stay within their cap
 * (steps grouped, stacks cut to their largest nodes, the cut samples'
 * time in the callers kept), the samples on the timeline too, and the
 * time adds up. */
static void caps_group_steps_cut_stacks_keep_the_time(void) {
  fixture x;
  start(&x, 1);
  profile(&x, 0);
  enum { STEPS = 3000, LEAVES = 9000 };
  def(&x, 1, "main", 1, 0);
  for (uint32_t k = 0; k < LEAVES; k++) {
    /* Leaf k: function 2 + k under main. */
    mlprof__stack_func fn = {2 + k, "run.py", "leaf", 2 + k};
    mlprof__stack_frame fr = {
        .id = 2 + k, .func = 2 + k, .line = 1, .module = "", .symbol = ""};
    x.hv.stack_func(x.hv.ud, &fn);
    x.hv.stack_frame(x.hv.ud, &fr);
    x.hv.stack_node(x.hv.ud, 2 + k, 1, 2 + k);
  }
  uint64_t t = 0, n = 0;
  for (uint32_t s = 0; s < STEPS; s++) {
    x.fv.step(x.fv.ud, 1, t);
    for (uint32_t j = 0; j < 20; j++, n++) {
      t += 1000;
      /* Leaves 0..9 often, the others once or twice. */
      uint32_t leaf = j < 10 ? j : 10 + (uint32_t)(n % (LEAVES - 10));
      sample(&x, 1, t, 2 + leaf, 1);
    }
  }
  CHECK_EQ(profile_end(&x), 0);
  CHECK_EQ(finish(&x), 0);
  const mlprof__flame *f = &x.fl;
  CHECK_EQ(f->samples, n);
  CHECK(f->nrows <= MLPROF__FLAME_ROWS);
  CHECK(f->step_width > 1);
  CHECK(f->nmarks <= MLPROF__FLAME_MARKS);
  CHECK(f->mark_stride > 1);
  CHECK_EQ(f->nmarks, (n + f->mark_stride - 1) / f->mark_stride);
  CHECK(f->merged > 0);
  uint64_t rows_n = 0, wall = 0, nodes = 0;
  mlprof__map seen = {0};
  for (size_t i = 0; i < f->nrows; i++) {
    rows_n += f->rows[i].n;
    wall += f->rows[i].wall_ns;
    if (mlprof__map_get(&seen, f->rows[i].node) == MLPROF__NONE) {
      mlprof__map_put(&seen, f->rows[i].node, 1);
      nodes++;
    }
    CHECK(f->rows[i].step == MLPROF__NONE ||
          f->rows[i].step < (STEPS + f->step_width - 1) / f->step_width);
  }
  mlprof__map_clear(&seen);
  CHECK(nodes <= f->nodes_cap);
  CHECK_EQ(rows_n + f->dropped, n);
  CHECK_EQ(wall + f->dropped_ns, x.hot.wall_ns);
  /* The page's share of it stays within the budget docs/guide.md states
   * (about 1.2 MB at every cap). */
  mlprof__out o;
  CHECK_EQ(mlprof__out_open(&o, -1), 0);
  CHECK_EQ(mlprof__export_html_stacks(&x.hot, f, &o), 0);
  CHECK(o.len < 1200000);
  mlprof__out_close(&o);
  done(&x);
}

/* Uncapped (mlprof export --format pprof): past every cap, each (stack,
 * step) keeps its own row, no step grouped, no stack cut, none dropped. */
static void uncapped_keeps_every_row(void) {
  fixture x;
  start(&x, 1);
  mlprof__flame_uncapped(x.fb);
  profile(&x, 0);
  enum { STEPS = 1200, LEAVES = 40 };
  def(&x, 1, "main", 1, 0);
  for (uint32_t k = 0; k < LEAVES; k++) {
    mlprof__stack_func fn = {2 + k, "run.py", "leaf", 2 + k};
    mlprof__stack_frame fr = {
        .id = 2 + k, .func = 2 + k, .line = 1, .module = "", .symbol = ""};
    x.hv.stack_func(x.hv.ud, &fn);
    x.hv.stack_frame(x.hv.ud, &fr);
    x.hv.stack_node(x.hv.ud, 2 + k, 1, 2 + k);
  }
  uint64_t t = 0, n = 0;
  for (uint32_t s = 0; s < STEPS; s++) {
    x.fv.step(x.fv.ud, 1, t + 500); /* between two samples */
    /* 20 leaves a step, two samples each: 20 rows a step. */
    for (uint32_t j = 0; j < 40; j++, n++) {
      t += 1000;
      sample(&x, 1, t, 2 + (s + j / 2) % LEAVES, 1);
    }
  }
  CHECK_EQ(profile_end(&x), 0);
  CHECK_EQ(finish(&x), 0);
  const mlprof__flame *f = &x.fl;
  CHECK_EQ(f->samples, n);
  CHECK_EQ(f->nrows, (size_t)STEPS * 20);
  CHECK(f->nrows > MLPROF__FLAME_ROWS);
  CHECK_EQ(f->step_width, 1);
  CHECK_EQ(f->merged, 0);
  CHECK_EQ(f->dropped, 0);
  uint64_t rows_n = 0;
  for (size_t i = 0; i < f->nrows; i++) {
    rows_n += f->rows[i].n;
    CHECK_EQ(f->rows[i].n, 2);
    CHECK(f->rows[i].step < STEPS);
  }
  CHECK_EQ(rows_n, n);
  done(&x);
}

const mlprof_test mlprof_tests_flame[] = {
    {"flame_steps_zones_threads_and_inherited_steps",
     steps_zones_threads_and_inherited_steps},
    {"flame_caps_group_steps_cut_stacks_keep_the_time",
     caps_group_steps_cut_stacks_keep_the_time},
    {"flame_uncapped_keeps_every_row", uncapped_keeps_every_row},
    {NULL, NULL}};
