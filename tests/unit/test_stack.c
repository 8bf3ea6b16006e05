/* Interned stacks (src/record/stack.h) and the stack sampler, read back
 * through the reader's stack callbacks. */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
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

/* A table page is first touched by a write: one page fault, where a read
 * first costs two, the second of which flushes the TLB of every CPU the
 * process runs on (an interrupt of each of the program's threads). */
static void table_pages_fault_once(void) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  /* Shadow memory, first read, faults too: nothing to count here. */
#else
  uint32_t fr = mlprof__stack_frame_py(func("faults", 1), 1);
  CHECK(fr != 0);
  struct rusage a, b;
  getrusage(RUSAGE_THREAD, &a);
  /* New nodes, in slots spread over the node table's 8,192 pages. */
  for (uint32_t i = 0; i < 256; i++)
    CHECK(mlprof__stack_push(0x40000000u + i * 7919u, fr) != 0);
  getrusage(RUSAGE_THREAD, &b);
  long faults = b.ru_minflt - a.ru_minflt;
  fprintf(stderr, "  %ld page faults for 256 new nodes\n", faults);
  CHECK(faults > 0 && faults < 256 * 3 / 2);
#endif
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
  /* Each got the stack's one id, or 0 where it met the stack being made
   * by a thread that did not finish in time (never another id). */
  size_t zeros = 0;
  for (int i = 0; i < 200; i++) {
    uint32_t want = mlprof__stack_intern(fr + (i % 50), 1 + (i % 37));
    CHECK(want != 0);
    for (int k = 0; k < 4; k++) {
      if (ids[k][i] != want) CHECK_EQ(ids[k][i], 0);
      zeros += ids[k][i] == 0;
    }
  }
  CHECK(zeros < 80);
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
  mlprof__stack_thread t = {
      (uint32_t)getpid(), 0, fake_frames, 2, NULL, NULL, NULL};
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
  struct timespec ts = {0, 200 * 1000000};
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
  /* A thousand a second for a fifth of one: about two hundred, far fewer
   * when a loaded machine leaves the sampler waiting, never more. */
  CHECK(l.samples >= 3 && l.samples <= 260);
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

/* ---- native stacks (src/record/native.c) ------------------------------ */

/* Stand-ins for native code: functions of this program (neither the
 * "interpreter" nor its loop). */
__attribute__((noinline)) void mlprof_test_leaf(void) { __asm__ volatile(""); }
__attribute__((noinline)) void mlprof_test_ext(void) { __asm__ volatile(""); }

static void native_merge_replaces_loop_frames(void) {
#ifdef MLPROF_HAVE_LIBUNWIND
  /* The C library plays the interpreter, getaddrinfo its evaluation loop
   * (its own functions, not a sanitizer's interceptors of them). */
  void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  CHECK(libc != NULL);
  uintptr_t loop = (uintptr_t)dlsym(libc, "getaddrinfo");
  uintptr_t own1 = (uintptr_t)dlsym(libc, "getenv");
  uintptr_t own2 = (uintptr_t)dlsym(libc, "strtol");
  CHECK(loop && own1 && own2);
  mlprof__native_interp_set((const void *)loop);
  uintptr_t pcs[] = {
      (uintptr_t)mlprof_test_leaf + 2, /* where the thread was */
      (uintptr_t)mlprof_test_ext + 3,  /* its caller, native */
      own1 + 5,                        /* the interpreter's own: left out */
      loop + 20,                       /* the loop: Python frames p0, p1 */
      (uintptr_t)mlprof_test_ext + 4,  /* native between two loops */
      loop + 30,                       /* the loop: p2 */
      own2 + 5,                        /* the interpreter's start */
      (uintptr_t)mlprof_test_leaf + 1, /* outer than every loop: left out */
  };
  uint32_t f = func("native", 1);
  uint32_t py[] = {mlprof__stack_frame_py(f, 1), mlprof__stack_frame_py(f, 2),
                   mlprof__stack_frame_py(f, 3)};
  uint8_t entry[] = {0, 1, 1};
  uint32_t out[16];
  size_t n = mlprof__native_merge(pcs, 8, py, entry, 3, out, 16);
  CHECK_EQ(n, 6);
  CHECK_EQ(out[0], mlprof__stack_frame_native(pcs[0]));
  CHECK_EQ(out[1], mlprof__stack_frame_native(pcs[1]));
  CHECK_EQ(out[2], py[0]);
  CHECK_EQ(out[3], py[1]);
  CHECK_EQ(out[4], mlprof__stack_frame_native(pcs[4]));
  CHECK_EQ(out[5], py[2]);
  /* Three loops' worth of Python frames against two loops: read at
   * different moments, not merged. */
  uint8_t three[] = {1, 1, 1};
  CHECK_EQ(mlprof__native_merge(pcs, 8, py, three, 3, out, 16), 0);
  CHECK_EQ(mlprof__native_merge(pcs, 8, py, NULL, 3, out, 16), 0);
#endif
}

static _Atomic int spin_stop, spin_ready, spin_bad_errno;
static _Atomic pid_t spin_tid;
static _Atomic int program_handler_runs;

static void program_handler(int sig) {
  (void)sig;
  atomic_fetch_add(&program_handler_runs, 1);
}

__attribute__((noinline)) void mlprof_test_spin(void) {
  errno = 1234;
  while (!atomic_load(&spin_stop)) {
#if defined(__SANITIZE_THREAD__)
    usleep(100);  /* TSan delivers signals in its interceptors */
    errno = 1234; /* which an interrupted usleep sets */
#endif
    if (errno != 1234) atomic_fetch_add(&spin_bad_errno, 1);
  }
}

static void *spinner(void *arg) {
  if (arg) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
  }
  atomic_store(&spin_tid, (pid_t)syscall(SYS_gettid));
  atomic_store(&spin_ready, 1);
  mlprof_test_spin();
  return NULL;
}

/* A thread's handler answers with where it was (the spinning function),
 * keeps its errno; the program's own handler of another signal is left as
 * it was and does not run. */
static void native_capture_reads_a_thread(void) {
#ifdef MLPROF_HAVE_LIBUNWIND
  struct sigaction mine = {.sa_handler = program_handler};
  CHECK_EQ(sigaction(SIGRTMAX, &mine, NULL), 0);
  CHECK_EQ(mlprof__native_start(), 0);
  int sig = mlprof__native_signal();
  /* Not the program's signal: the highest one left at SIG_DFL. */
  CHECK(sig >= SIGRTMIN && sig < SIGRTMAX);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, spinner, NULL), 0);
  while (!atomic_load(&spin_ready)) sched_yield();
  static uintptr_t pcs[MLPROF__NATIVE_MAX];
  int hits = 0, answers = 0;
  for (int i = 0; i < 20; i++) {
    long n = mlprof__native_capture((uint32_t)atomic_load(&spin_tid), pcs,
                                    MLPROF__NATIVE_MAX, 500000000u);
    if (n <= 0) continue;
    answers++;
    for (long k = 0; k < n && k < 3; k++)
      hits += pcs[k] >= (uintptr_t)mlprof_test_spin &&
              pcs[k] < (uintptr_t)mlprof_test_spin + 256;
  }
  atomic_store(&spin_stop, 1);
  pthread_join(t, NULL);
  CHECK(answers >= 15);
#if !defined(__SANITIZE_THREAD__)
  CHECK(hits >= 15);
#endif
  CHECK_EQ(atomic_load(&spin_bad_errno), 0);
  CHECK_EQ(atomic_load(&program_handler_runs), 0);
  struct sigaction now;
  CHECK_EQ(sigaction(SIGRTMAX, NULL, &now), 0);
  CHECK(now.sa_handler == program_handler);
  /* Stopped: the handler stays, inert; a capture asks nothing. */
  mlprof__native_stop();
  CHECK_EQ(mlprof__native_capture((uint32_t)getpid(), pcs, 4, 1000000u), -1);
#endif
}

/* A thread that blocks every signal never answers: the capture gives up in
 * time and the thread runs on. */
static void native_capture_gives_up_on_blocked_thread(void) {
#ifdef MLPROF_HAVE_LIBUNWIND
  CHECK_EQ(mlprof__native_start(), 0);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, spinner, (void *)1), 0);
  while (!atomic_load(&spin_ready)) sched_yield();
  uintptr_t pcs[8];
  CHECK_EQ(mlprof__native_capture((uint32_t)atomic_load(&spin_tid), pcs, 8,
                                  20000000u),
           -2);
  atomic_store(&spin_stop, 1);
  pthread_join(t, NULL);
  mlprof__native_stop();
#endif
}

/* The program takes the sampler's signal: native stacks stop for good and
 * its handler gets what it asked for. */
static void native_signal_goes_to_program(void) {
#ifdef MLPROF_HAVE_LIBUNWIND
  CHECK_EQ(mlprof__native_start(), 0);
  int sig = mlprof__native_signal();
  CHECK(sig > 0);
  struct sigaction mine = {.sa_handler = program_handler}, old;
  CHECK_EQ(sigaction(sig, &mine, &old), 0);
  /* What it replaced reads as the default. */
  CHECK(old.sa_handler == SIG_DFL);
  CHECK_EQ(mlprof__native_signal(), 0);
  CHECK(mlprof__native_start() != 0);
  raise(sig);
  CHECK_EQ(atomic_load(&program_handler_runs), 1);
#endif
}

/* ---- native symbols (src/record/symbols.c) ---------------------------- */

typedef struct {
  uintptr_t pcs[8192];
  size_t n;
} some_pcs;

/* Addresses through every loaded object's segments (the program, the C
 * library, the vDSO...): each segment's edges and evenly spaced ones. */
static int segment_pcs(struct dl_phdr_info *info, size_t size, void *arg) {
  some_pcs *a = arg;
  (void)size;
  for (size_t i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *p = &info->dlpi_phdr[i];
    if (p->p_type != PT_LOAD || !p->p_memsz) continue;
    uintptr_t lo = info->dlpi_addr + p->p_vaddr;
    size_t step = p->p_memsz / 97 + 1;
    for (uintptr_t at = lo; at < lo + p->p_memsz && a->n < 8192; at += step)
      a->pcs[a->n++] = at;
    if (a->n < 8192) a->pcs[a->n++] = lo + p->p_memsz - 1;
  }
  return 0;
}

/* A function of this program that is not exported. */
static __attribute__((noinline)) int hidden_fn(int x) {
  __asm__ volatile("" : "+r"(x));
  return x + 1;
}

/* What dladdr says of an address, the symbolizer says too: the object,
 * the symbol holding it and its start, the object's first page. */
static void symbolize_agrees_with_dladdr(void) {
  static some_pcs a;
  a.n = 0;
  dl_iterate_phdr(segment_pcs, &a);
  /* And the entries of exported functions, and inside them. */
  void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  CHECK(libc != NULL);
  static const char *const fns[] = {"malloc", "getaddrinfo", "strtol",
                                    "qsort",  "printf",      "pthread_create"};
  for (size_t i = 0; i < sizeof fns / sizeof *fns; i++) {
    uintptr_t f = (uintptr_t)dlsym(libc, fns[i]);
    CHECK(f != 0);
    a.pcs[a.n++] = f;
    a.pcs[a.n++] = f + 7;
  }
  a.pcs[a.n++] = (uintptr_t)symbolize_agrees_with_dladdr + 5;
  a.pcs[a.n++] = 16; /* no object */
  CHECK(a.n > 500);
  size_t named = 0, disagree = 0, from_file = 0;
  static mlprof__symbol sym;
  for (size_t i = 0; i < a.n; i++) {
    Dl_info d;
    int ok = dladdr((void *)a.pcs[i], &d) != 0;
    int rc = mlprof__symbolize(a.pcs[i], &sym);
    int same = (rc == 0) == ok;
    if (ok && same) {
      same = strcmp(sym.module, d.dli_fname ? d.dli_fname : "") == 0 &&
             sym.base == (uintptr_t)d.dli_fbase;
      if (d.dli_sname) /* the same symbol, C++ names demangled */
        same = same &&
               (strcmp(sym.name, d.dli_sname) == 0 ||
                strncmp(d.dli_sname, "_Z", 2) == 0) &&
               sym.start == (uintptr_t)d.dli_saddr;
      else /* none, or a function of the file's own symbol table */
        same = same && (!sym.name[0] || (sym.start <= a.pcs[i] &&
                                         a.pcs[i] - sym.start < sym.size));
      named += d.dli_sname != NULL;
      from_file += !d.dli_sname && sym.name[0];
    }
    if (!same && disagree++ < 5)
      fprintf(stderr, "  %#lx: dladdr %s %s %p, symbolize %d %s %s %#lx\n",
              (unsigned long)a.pcs[i], ok ? d.dli_fname : "-",
              ok && d.dli_sname ? d.dli_sname : "-", ok ? d.dli_saddr : NULL,
              rc, sym.module, sym.name, (unsigned long)sym.start);
  }
  CHECK_EQ(disagree, 0);
  CHECK(named > 50);
  /* This program's own functions that dladdr cannot name (not exported):
   * from its .symtab. */
  CHECK(from_file > 0);
  CHECK_EQ(mlprof__symbolize((uintptr_t)hidden_fn + 1, &sym), 0);
  CHECK_STR(sym.name, "hidden_fn");
  CHECK_EQ(sym.start, (uintptr_t)hidden_fn);
  /* The object alone. */
  CHECK_EQ(mlprof__object_of((uintptr_t)dlsym(libc, "malloc"), &sym), 0);
  CHECK(sym.lo <= (uintptr_t)dlsym(libc, "malloc") &&
        (uintptr_t)dlsym(libc, "malloc") < sym.hi);
  CHECK_EQ(sym.name[0], 0);
  CHECK(mlprof__object_of(16, &sym) != 0);
  dlclose(libc);
}

/* A C++ function is named as people read it, its parameters left out. */
static void cxx_names_are_demangled(void) {
  static const char *const cases[][2] = {
      {"ns::f<int>(int) const", "ns::f<int>"},
      {"at::native::(anonymous namespace)::run(at::Tensor const&)",
       "at::native::(anonymous namespace)::run"},
      {"Outer::operator()(int)", "Outer::operator()"},
      {"std::operator<< <char>(std::ostream&, char const*)",
       "std::operator<< <char>"},
      {"f(int)::{lambda(char*)#1}::operator()(char*) const", "f"},
      {"std::vector<std::pair<int, int>>::size() const",
       "std::vector<std::pair<int, int>>::size"},
      {"void at::native::(anonymous namespace)::pool<float, false>(int)",
       "at::native::(anonymous namespace)::pool<float, false>"},
      {"unsigned long f<int>(int)", "f<int>"},
      {"A::operator new(unsigned long)", "A::operator new"},
      {"A::operator int() const", "A::operator int"},
      {"plain_c", "plain_c"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", cases[i][0]);
    mlprof__cxx_name_short(buf);
    CHECK_STR(buf, cases[i][1]);
  }
  /* A mangled symbol of a C++ runtime loaded in a local scope, as torch's
   * extension loads its own. */
  void *cxx = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL);
  CHECK(cxx != NULL);
  uintptr_t join = (uintptr_t)dlsym(cxx, "_ZNSt6thread4joinEv");
  CHECK(join != 0);
  static mlprof__symbol sym;
  CHECK_EQ(mlprof__symbolize(join + 4, &sym), 0);
  CHECK_STR(sym.name, "std::thread::join");
  CHECK(strstr(sym.module, "libstdc++") != NULL);
  CHECK_EQ(sym.start, join);
  dlclose(cxx);
}

/* A copy of libz loaded from dir as name (*h); *crc gets its crc32. */
static void libz_copy(const char *dir, const char *name, char *path, void **h,
                      uintptr_t *crc) {
  char cmd[256];
  snprintf(path, 128, "%s/%s", dir, name);
  snprintf(cmd, sizeof cmd, "cp /usr/lib/x86_64-linux-gnu/libz.so.1 %s", path);
  CHECK_EQ(system(cmd), 0);
  *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  CHECK(*h != NULL);
  *crc = (uintptr_t)dlsym(*h, "crc32");
  CHECK(*crc != 0);
}

/* A loaded object whose path names something else by the time its symbols
 * are read: a FIFO (opening it would block) or a file whose section
 * headers claim sizes past its end. The answer comes at once, the object
 * still named, its exported symbols too. */
static void symbolize_survives_a_changed_file(void) {
  char dir[] = "/tmp/mlprof-sym-XXXXXX", a[128], b[128];
  CHECK(mkdtemp(dir) != NULL);
  uintptr_t crc_a = 0, crc_b = 0;
  void *ha = NULL, *hb = NULL;
  libz_copy(dir, "libz-a.so.1", a, &ha, &crc_a);
  libz_copy(dir, "libz-b.so.1", b, &hb, &crc_b);
  CHECK(ha && hb);
  /* a's section headers claim tables at a huge offset, of huge sizes. */
  int fd = open(a, O_RDWR);
  CHECK(fd >= 0);
  Elf64_Ehdr e;
  CHECK_EQ(pread(fd, &e, sizeof e, 0), (ssize_t)sizeof e);
  for (unsigned i = 0; i < e.e_shnum; i++) {
    Elf64_Shdr sh;
    CHECK_EQ(pread(fd, &sh, sizeof sh, e.e_shoff + i * sizeof sh),
             (ssize_t)sizeof sh);
    sh.sh_type = i % 2 ? SHT_STRTAB : SHT_SYMTAB;
    sh.sh_entsize = sizeof(Elf64_Sym);
    sh.sh_offset = 1ull << 62;
    sh.sh_size = 200u << 20;
    sh.sh_link = i + 1;
    CHECK_EQ(pwrite(fd, &sh, sizeof sh, e.e_shoff + i * sizeof sh),
             (ssize_t)sizeof sh);
  }
  close(fd);
  /* b is a FIFO now. */
  CHECK_EQ(unlink(b), 0);
  CHECK_EQ(mkfifo(b, 0600), 0);
  static mlprof__symbol sym;
  CHECK_EQ(mlprof__symbolize(crc_a + 3, &sym), 0);
  CHECK_STR(sym.name, "crc32");
  CHECK_EQ(mlprof__symbolize(crc_b + 3, &sym), 0);
  CHECK_STR(sym.name, "crc32");
  CHECK(strstr(sym.module, "libz-b") != NULL);
  dlclose(ha);
  dlclose(hb);
  unlink(a);
  unlink(b);
  rmdir(dir);
}

/* How a report names a native frame: its symbol, else its offset in its
 * module, else (in no module: a JIT's code) one name for all such. */
static void native_frames_are_named(void) {
  char buf[64];
  mlprof__stack_frame f = {.native = 1,
                           .pc = 0x7f0012345678,
                           .offset = 0x1a2b,
                           .module = "/lib/libx.so",
                           .symbol = "run"};
  CHECK_STR(mlprof__native_name(&f, buf, sizeof buf), "run");
  f.symbol = "";
  CHECK_STR(mlprof__native_name(&f, buf, sizeof buf), "0x1a2b");
  f.module = "";
  CHECK_STR(mlprof__native_name(&f, buf, sizeof buf), "[unknown]");
}

const mlprof_test mlprof_tests_stack[] = {
    {"interning_is_stable", interning_is_stable},
    {"interning_from_threads_agrees", interning_from_threads_agrees},
    {"table_pages_fault_once", table_pages_fault_once},
    {"read_survives_unmapped_memory", read_survives_unmapped_memory},
    {"sampler_writes_stacks", sampler_writes_stacks},
    {"deep_stack_is_truncated", deep_stack_is_truncated},
    {"native_merge_replaces_loop_frames", native_merge_replaces_loop_frames},
    {"native_capture_reads_a_thread", native_capture_reads_a_thread},
    {"native_capture_gives_up_on_blocked_thread",
     native_capture_gives_up_on_blocked_thread},
    {"native_signal_goes_to_program", native_signal_goes_to_program},
    {"symbolize_agrees_with_dladdr", symbolize_agrees_with_dladdr},
    {"symbolize_survives_a_changed_file", symbolize_survives_a_changed_file},
    {"native_frames_are_named", native_frames_are_named},
    {"cxx_names_are_demangled", cxx_names_are_demangled},
    {NULL, NULL}};
