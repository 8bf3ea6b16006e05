/* Interned stacks (src/record/stack.h) and the stack sampler, read back
 * through the reader's stack callbacks. */
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "format/reader.h"
#include "format/wire.h"
#include "mlprof.h"
#include "record/stack.h"
#include "test.h"

static uint32_t func(const char *name, uint32_t first) {
  uint64_t key = 0x1000 + (uint64_t)first * 7919 + (uint64_t)(uintptr_t)name;
  uint32_t id = mlprof__stack_func_find(key);
  return id ? id : mlprof__stack_func_add(key, "prog.py", name, first);
}

static void interning_is_stable(void) {
  uint32_t f = func("f", 10), g = func("g", 20);
  CHECK(f && g && f != g);
  CHECK_EQ(func("f", 10), f);
  uint32_t a = mlprof__stack_frame_py(f, 11), b = mlprof__stack_frame_py(g, 21);
  CHECK(a && b && a != b);
  CHECK_EQ(mlprof__stack_frame_py(f, 11), a);
  CHECK(mlprof__stack_frame_py(f, 12) != a);
  CHECK_EQ(mlprof__stack_frame_py(0, 12), 0);
  uint32_t ab[] = {a, b}, ba[] = {b, a}, just_b[] = {b};
  uint32_t s1 = mlprof__stack_intern(ab, 2), s2 = mlprof__stack_intern(ba, 2);
  CHECK(s1 && s2 && s1 != s2);
  CHECK_EQ(mlprof__stack_intern(ab, 2), s1);
  /* The outermost frame alone is s1's parent, made first. */
  uint32_t root = mlprof__stack_intern(just_b, 1);
  CHECK(root && root < s1);
  CHECK_EQ(mlprof__stack_intern(NULL, 0), 0);
  mlprof__stack_pc_add(0x55, 41);
  CHECK_EQ(mlprof__stack_pc_find(0x55), 42);
  CHECK_EQ(mlprof__stack_pc_find(0x56), 0);
  CHECK(mlprof__stack_frame_native(0x1234) != 0);
  CHECK_EQ(mlprof__stack_frame_native(0x1234),
           mlprof__stack_frame_native(0x1234));
}

/* Four threads interning the same stacks get the same ids. */
static uint32_t *race_frames;

static void *race(void *arg) {
  uint32_t *ids = arg;
  for (int i = 0; i < 200; i++)
    ids[i] = mlprof__stack_intern(race_frames + (i % 50), 1 + (i % 37));
  return NULL;
}

static void interning_from_threads_agrees(void) {
  static uint32_t fr[100];
  for (int i = 0; i < 100; i++) fr[i] = mlprof__stack_frame_py(func("r", 1), i);
  race_frames = fr;
  static uint32_t ids[4][200];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, race, ids[i]);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 200; i++) {
    CHECK(ids[0][i] != 0);
    for (int k = 1; k < 4; k++) CHECK_EQ(ids[k][i], ids[0][i]);
  }
}

static void read_survives_unmapped_memory(void) {
  long page = sysconf(_SC_PAGESIZE);
  char *p = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED);
  memcpy(p, "frame", 6);
  char got[8] = "";
  CHECK_EQ(mlprof__stack_read(got, p, 6), 0);
  CHECK_STR(got, "frame");
  munmap(p, (size_t)page);
  CHECK_EQ(mlprof__stack_read(got, p, 6), -1);
  CHECK_EQ(mlprof__stack_read(got, NULL, 6), -1);
}

/* A walker with one thread whose stack is main -> work (line 7). */
static uint32_t fake_frames[2];

static size_t fake_self(uint32_t *out, size_t max) {
  size_t n = max < 2 ? max : 2;
  memcpy(out, fake_frames, n * sizeof *out);
  return n;
}

static void fake_each(void (*fn)(void *, const mlprof__stack_thread *),
                      void *ctx) {
  mlprof__stack_thread t = {(uint32_t)getpid(), 0, fake_frames, 2};
  fn(ctx, &t);
}

static const mlprof__stack_walker fake = {fake_self, fake_each};

typedef struct {
  char funcs[8][32];
  uint32_t frame_func[16], frame_line[16], node_parent[64], node_frame[64];
  uint64_t samples, bad_order;
  uint32_t last_stack;
  uint64_t last_t;
} stack_log;

static int on_func(void *ud, const mlprof__stack_func *f) {
  stack_log *l = ud;
  if (f->id < 8) snprintf(l->funcs[f->id], 32, "%s:%s", f->file, f->function);
  return 0;
}

static int on_frame(void *ud, const mlprof__stack_frame *f) {
  stack_log *l = ud;
  if (f->id < 16) {
    l->frame_func[f->id] = f->func;
    l->frame_line[f->id] = f->line;
  }
  return 0;
}

static int on_node(void *ud, uint32_t id, uint32_t parent, uint32_t frame) {
  stack_log *l = ud;
  if (id < 64) {
    l->node_parent[id] = parent;
    l->node_frame[id] = frame;
  }
  return 0;
}

static int on_sample(void *ud, const mlprof__stack_sample *s) {
  stack_log *l = ud;
  l->samples++;
  l->bad_order += s->t < l->last_t;
  l->last_t = s->t;
  l->last_stack = s->stack;
  return 0;
}

static void sampler_writes_stacks(void) {
  static const mlprof__stack_walker *w = &fake;
  const mlprof__stack_api *api = mlprof__stack_api_get();
  CHECK(api && api->size == sizeof *api);
  uint32_t fmain = api->func_add(1, "train.py", "main", 1);
  uint32_t fwork = api->func_add(2, "train.py", "work", 5);
  fake_frames[0] = api->frame_py(fwork, 7);
  fake_frames[1] = api->frame_py(fmain, 3);
  CHECK_EQ(api->walker_set(w), 0);
  CHECK_EQ(api->walker_set(w), MLPROF_EALREADY);
  uint32_t here = mlprof__stack_here();
  CHECK(here != 0);
  char path[] = "/tmp/mlprof-stack-XXXXXX";
  CHECK(mkdtemp(path) != NULL);
  char file[64];
  snprintf(file, sizeof file, "%s/s.mlprof", path);
  mlprof_config c;
  mlprof_config_init(&c);
  CHECK_EQ(c.stacks_hz, 100);
  c.output = file;
  c.sample_interval_ms = -1;
  c.stacks_hz = 1000;
  CHECK_EQ(mlprof_init(&c), 0);
  struct timespec ts = {0, 100 * 1000000};
  nanosleep(&ts, NULL);
  CHECK_EQ(mlprof_shutdown(), 0);
  stack_log l = {0};
  mlprof__visitor v = {.ud = &l,
                       .stack_func = on_func,
                       .stack_frame = on_frame,
                       .stack_node = on_node,
                       .stack_sample = on_sample};
  mlprof__read_report rep;
  char err[256];
  CHECK_EQ(mlprof__read_file(file, &v, &rep, err, sizeof err), 0);
  CHECK_EQ(rep.damaged_chunks, 0);
  unlink(file);
  rmdir(path);
  /* A thousand a second for a tenth of one: about a hundred. */
  CHECK(l.samples >= 20 && l.samples <= 150);
  CHECK_EQ(l.bad_order, 0);
  CHECK_EQ(l.last_stack, here);
  /* here = work:7 on top of main:3. */
  CHECK(here < 64);
  uint32_t top = l.node_frame[here], parent = l.node_parent[here];
  CHECK(top < 16 && parent && parent < here);
  CHECK_EQ(l.frame_line[top], 7);
  CHECK_STR(l.funcs[l.frame_func[top]], "train.py:work");
  uint32_t outer = l.node_frame[parent];
  CHECK_EQ(l.node_parent[parent], 0);
  CHECK_EQ(l.frame_line[outer], 3);
  CHECK_STR(l.funcs[l.frame_func[outer]], "train.py:main");
}

/* Deeper than the recorder keeps: the innermost frames under
 * "<truncated>". */
static void deep_stack_is_truncated(void) {
  static uint32_t fr[MLPROF__STACK_MAX_DEPTH + 10];
  uint32_t f = func("deep", 1);
  for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++)
    fr[i] = mlprof__stack_frame_py(f, (uint32_t)(i % 3));
  uint32_t a = mlprof__stack_intern(fr, MLPROF__STACK_MAX_DEPTH + 10);
  uint32_t b = mlprof__stack_intern(fr, MLPROF__STACK_MAX_DEPTH + 3);
  CHECK(a != 0);
  CHECK_EQ(a, b); /* the same innermost frames */
}

const mlprof_test mlprof_tests_stack[] = {
    {"interning_is_stable", interning_is_stable},
    {"interning_from_threads_agrees", interning_from_threads_agrees},
    {"read_survives_unmapped_memory", read_survives_unmapped_memory},
    {"sampler_writes_stacks", sampler_writes_stacks},
    {"deep_stack_is_truncated", deep_stack_is_truncated},
    {NULL, NULL}};
