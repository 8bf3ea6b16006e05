/* The sampling sources: on fixture trees written here (exact values, deltas
 * between two ticks, RAPL wraparound), on this machine's /proc and /sys, and
 * against the fake libnvidia-ml.so.1 built beside this binary. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <ftw.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sample/sample.h"
#include "test.h"

/* ---- fixtures ------------------------------------------------------------ */

static char fx_root[64];

static void rm_tree(const char *root);

/* A fresh empty directory for one test's tree; fx_root holds its path. The
 * tree a failed test left behind is removed first. */
static const char *fixture(void) {
  if (fx_root[0]) rm_tree(fx_root);
  snprintf(fx_root, sizeof fx_root, "/tmp/mlprof-sample-XXXXXX");
  if (!mkdtemp(fx_root)) {
    perror("mkdtemp");
    exit(2);
  }
  chmod(fx_root, 0755); /* the tests that drop privileges walk it too */
  return fx_root;
}

static int rm_one(const char *p, const struct stat *st, int flag,
                  struct FTW *ftw) {
  (void)st;
  (void)ftw;
  if (flag == FTW_DP || flag == FTW_D)
    rmdir(p);
  else
    unlink(p);
  return 0;
}

static void rm_tree(const char *root) {
  if (root && strncmp(root, "/tmp/mlprof-sample-", 19) == 0)
    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void mkdirs(const char *path) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    mkdir(tmp, 0755);
    *p = '/';
  }
  mkdir(tmp, 0755);
}

/* Writes root/rel (parents created) from a printf format; a fixture that
 * cannot be written ends the run: nothing after it would mean anything. */
static void put_file(const char *root, const char *rel, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void put_file(const char *root, const char *rel, const char *fmt, ...) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  mkdirs(dirname(dir));
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "cannot write fixture %s: %s\n", path, strerror(errno));
    exit(2);
  }
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fclose(f);
}

static void put_dir(const char *root, const char *rel) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  mkdirs(path);
}

/* ---- rows ------------------------------------------------------------------
 */

static mlprof__row rows[64];

static const mlprof__measure *find(const mlprof__row *r, const char *name) {
  for (int i = 0; i < r->n; i++)
    if (strcmp(r->m[i].name, name) == 0) return &r->m[i];
  return NULL;
}

static const mlprof__row *row_of(int n, int subject, uint64_t id) {
  for (int i = 0; i < n; i++)
    if (rows[i].subject == subject && rows[i].id == id) return &rows[i];
  return NULL;
}

/* Measure present and equal to want (to 1e-9 relative: values come out of
 * a division or two). */
#define CHECK_VAL(r, name, want)                                    \
  do {                                                              \
    const mlprof__measure *m_ = find((r), (name));                  \
    double w_ = (double)(want);                                     \
    if (!m_) TEST_FAIL("%s: not in the row", (name));               \
    if (m_->absent) TEST_FAIL("%s absent: %s", (name), m_->absent); \
    if (fabs(m_->value - w_) > 1e-9 * fabs(w_) + 1e-12)             \
      TEST_FAIL("%s: %.17g != %.17g", (name), m_->value, w_);       \
  } while (0)

#define CHECK_ABSENT(r, name, why)                                            \
  do {                                                                        \
    const mlprof__measure *m_ = find((r), (name));                            \
    if (!m_) TEST_FAIL("%s: not in the row", (name));                         \
    if (!m_->absent)                                                          \
      TEST_FAIL("%s: present (%.17g), want absent \"%s\"", (name), m_->value, \
                (why));                                                       \
    CHECK_STR(m_->absent, (why));                                             \
  } while (0)

/* Measure present, and its value. */
#define VALUE(r, name, out)                                         \
  do {                                                              \
    const mlprof__measure *m_ = find((r), (name));                  \
    if (!m_) TEST_FAIL("%s: not in the row", (name));               \
    if (m_->absent) TEST_FAIL("%s absent: %s", (name), m_->absent); \
    (out) = m_->value;                                              \
  } while (0)

static mlprof__sample_ctx ctx_at(const char *root, const pid_t *pids,
                                 size_t npids, uint64_t now_ns, uint64_t tick) {
  mlprof__sample_ctx c = {root, pids, npids, now_ns, tick, NULL};
  return c;
}

/* ---- read helper and process tree -----------------------------------------
 */

static void test_read_at(void) {
  const char *root = fixture();
  put_file(root, "proc/loadavg", "0.50 0.40 0.30 1/100 4242\n");
  char buf[64];
  ssize_t n = mlprof__read_at(root, "/proc/loadavg", buf, sizeof buf);
  CHECK_EQ(n, 26);
  CHECK_STR(buf, "0.50 0.40 0.30 1/100 4242\n");
  /* Truncated to len - 1 and terminated. */
  n = mlprof__read_at(root, "/proc/loadavg", buf, 5);
  CHECK_EQ(n, 4);
  CHECK_STR(buf, "0.50");
  errno = 0;
  CHECK_EQ(mlprof__read_at(root, "/proc/nothing", buf, sizeof buf), -1);
  CHECK_EQ(errno, ENOENT);
  char longpath[PATH_MAX + 10];
  memset(longpath, 'a', sizeof longpath - 1);
  longpath[0] = '/';
  longpath[sizeof longpath - 1] = '\0';
  errno = 0;
  CHECK_EQ(mlprof__read_at(root, longpath, buf, sizeof buf), -1);
  CHECK_EQ(errno, ENAMETOOLONG);
  /* The live system under an empty root. */
  char want[32];
  snprintf(want, sizeof want, "%d (", (int)getpid());
  CHECK(mlprof__read_at("", "/proc/self/stat", buf, sizeof buf) > 0);
  CHECK(strncmp(buf, want, strlen(want)) == 0);
  rm_tree(root);
}

/* Open descriptors of this process. */
static int open_fds(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  while (d && (e = readdir(d))) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n - 1; /* the listing's own */
}

/* The ns this thread ran, as its schedstat says. */
static unsigned long long run_ns(const char *buf) {
  return strtoull(buf, NULL, 10);
}

/* Held files (mlprof run's sampler): a file read at one tick is kept open
 * and read again from its start at the next, fresh each time; one not read
 * at a tick is closed at its end; a process's file whose process is gone
 * reads as gone; past MLPROF__HELD_MAX, files are read and closed. */
static void test_read_held(void) {
  static mlprof__held_files h; /* starts zeroed */
  char path[64], buf[256];
  int fds = open_fds();
  snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", (int)gettid());

  mlprof__read_hold_begin(&h);
  CHECK(mlprof__read_at("", path, buf, sizeof buf) > 0);
  unsigned long long before = run_ns(buf);
  CHECK(mlprof__read_at("", "/proc/loadavg", buf, sizeof buf) > 0);
  mlprof__read_hold_end(&h);
  CHECK_EQ(open_fds(), fds + 2);

  volatile double x = 1;
  for (long i = 0; i < 20000000; i++) x = x * 1.0000001;
  mlprof__read_hold_begin(&h);
  CHECK(mlprof__read_at("", path, buf, sizeof buf) > 0);
  CHECK(run_ns(buf) > before); /* read again, not the first reading */
  mlprof__read_hold_end(&h);
  CHECK_EQ(open_fds(), fds + 1); /* loadavg, not read, was closed */

  /* A child's stat, then the child is gone. */
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  char stat[64];
  snprintf(stat, sizeof stat, "/proc/%d/stat", (int)child);
  mlprof__read_hold_begin(&h);
  CHECK(mlprof__read_at("", stat, buf, sizeof buf) > 0);
  mlprof__read_hold_end(&h);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  mlprof__read_hold_begin(&h);
  CHECK_EQ(mlprof__read_at("", stat, buf, sizeof buf), -1);
  CHECK_EQ(buf[0], '\0');
  mlprof__read_hold_end(&h);
  CHECK_EQ(open_fds(), fds);

  /* More files than are held: every one is read, at most the held stay. */
  const char *root = fixture();
  for (int i = 0; i < MLPROF__HELD_MAX + 44; i++)
    put_file(root, (snprintf(path, sizeof path, "f/%d", i), path), "%d\n", i);
  for (int tick = 0; tick < 2; tick++) {
    mlprof__read_hold_begin(&h);
    int right = 0;
    for (int i = 0; i < MLPROF__HELD_MAX + 44; i++) {
      snprintf(path, sizeof path, "/f/%d", i);
      right +=
          mlprof__read_at(root, path, buf, sizeof buf) > 0 && atoi(buf) == i;
    }
    mlprof__read_hold_end(&h);
    CHECK_EQ(right, MLPROF__HELD_MAX + 44);
    CHECK_EQ(open_fds(), fds + MLPROF__HELD_MAX);
  }
  mlprof__read_hold_close(&h);
  CHECK_EQ(open_fds(), fds);
  /* Outside a tick, nothing is kept. */
  CHECK(mlprof__read_at("", "/proc/loadavg", buf, sizeof buf) > 0);
  CHECK_EQ(open_fds(), fds);
  rm_tree(root);
}

static void stat_file(const char *root, int pid, const char *comm, int ppid,
                      unsigned long long minflt, unsigned long long majflt,
                      unsigned long long utime, unsigned long long stime,
                      int threads, unsigned long long start) {
  char rel[64];
  snprintf(rel, sizeof rel, "proc/%d/stat", pid);
  put_file(root, rel,
           "%d (%s) S %d %d %d 0 -1 4194304 %llu 0 %llu 0 %llu %llu 0 0 20 "
           "0 %d 0 %llu 123456789 2500 18446744073709551615 1 1 0 0 0 0 0 "
           "0 0 0 0 0 17 1 0 0 0 0 0\n",
           pid, comm, ppid, pid, pid, minflt, majflt, utime, stime, threads,
           start);
}

static int contains(const pid_t *v, size_t n, pid_t p) {
  for (size_t i = 0; i < n; i++)
    if (v[i] == p) return 1;
  return 0;
}

static void test_proc_tree_fixture(void) {
  const char *root = fixture();
  stat_file(root, 1, "init", 0, 0, 0, 0, 0, 1, 1);
  stat_file(root, 10, "python3", 1, 0, 0, 0, 0, 1, 5);
  /* A name made to fool a parser that stops at the first ')'. */
  stat_file(root, 11, "evil) S 1 (x", 10, 0, 0, 0, 0, 1, 6);
  stat_file(root, 12, "worker", 11, 0, 0, 0, 0, 1, 7);
  stat_file(root, 13, "worker", 10, 0, 0, 0, 0, 1, 8);
  stat_file(root, 20, "other", 1, 0, 0, 0, 0, 1, 9);
  stat_file(root, 21, "other child", 20, 0, 0, 0, 0, 1, 9);
  put_file(root, "proc/stat", "cpu  1 2 3 4\n"); /* not a pid: ignored */
  pid_t out[16];
  size_t n = mlprof__proc_tree(root, 10, out, 16, NULL);
  CHECK_EQ(n, 4);
  CHECK_EQ(out[0], 10);
  CHECK(contains(out, n, 11));
  CHECK(contains(out, n, 12));
  CHECK(contains(out, n, 13));
  /* Breadth first: the grandchild comes last. */
  CHECK_EQ(out[3], 12);
  CHECK_EQ(mlprof__proc_tree(root, 10, out, 2, NULL), 2);
  CHECK_EQ(out[0], 10);
  CHECK_EQ(mlprof__proc_tree(root, 12, out, 16, NULL), 1);
  CHECK_EQ(mlprof__proc_tree(root, 99, out, 16, NULL), 0);
  CHECK_EQ(mlprof__proc_tree(root, 1, out, 16, NULL), 7);
  rm_tree(root);
}

/* With children files (the usual case), the tree is read from them alone. */
static void test_proc_tree_children(void) {
  const char *root = fixture();
  stat_file(root, 1, "init", 0, 0, 0, 0, 0, 1, 1);
  stat_file(root, 10, "python3", 1, 0, 0, 0, 0, 3, 5);
  put_file(root, "proc/10/task/10/children", "11 ");
  put_file(root, "proc/10/task/14/children", "13 16"); /* another thread's */
  put_file(root, "proc/10/task/15/children", "%s", "");
  stat_file(root, 11, "worker", 10, 0, 0, 0, 0, 1, 6);
  put_file(root, "proc/11/task/11/children", "12");
  stat_file(root, 12, "worker", 11, 0, 0, 0, 0, 1, 7);
  put_file(root, "proc/12/task/12/children", "%s", "");
  stat_file(root, 13, "worker", 10, 0, 0, 0, 0, 1, 8);
  /* 16 exited after the listing: kept (the sources skip it); 20 claims 10
   * as parent in stat only: not in any children file, so not looked at. */
  stat_file(root, 20, "other", 10, 0, 0, 0, 0, 1, 9);
  pid_t out[16];
  size_t n = mlprof__proc_tree(root, 10, out, 16, NULL);
  CHECK_EQ(n, 5);
  CHECK_EQ(out[0], 10);
  CHECK(contains(out, n, 11));
  CHECK(contains(out, n, 13));
  CHECK(contains(out, n, 16));
  CHECK_EQ(out[4], 12); /* breadth first: the grandchild last */
  CHECK(!contains(out, n, 20));
  /* The threads listed on the way, for the sources: each process's own
   * (13 and 16 have no task directory: none). */
  pid_t tids[16];
  size_t first[17];
  mlprof__tree_threads th = {.tid = tids, .first = first, .cap = 16};
  CHECK_EQ(mlprof__proc_tree(root, 10, out, 16, &th), 5);
  CHECK_EQ(th.npids, 5);
  CHECK_EQ(first[1] - first[0], 3); /* 10, 14, 15 */
  CHECK(contains(tids + first[0], 3, 14) && contains(tids + first[0], 3, 15));
  for (size_t i = 1; i < 5; i++) {
    size_t k = first[i + 1] - first[i];
    CHECK_EQ(k, out[i] == 11 || out[i] == 12 ? 1u : 0u);
    if (k) CHECK_EQ(tids[first[i]], out[i]);
  }
  /* No room for them all: none listed, the sources list their own. */
  th.cap = 3;
  CHECK_EQ(mlprof__proc_tree(root, 10, out, 16, &th), 5);
  CHECK_EQ(th.npids, 0);
  /* The tree cut short: the last process's listing may be, so it is left
   * out. */
  th.cap = 16;
  CHECK_EQ(mlprof__proc_tree(root, 10, out, 3, &th), 3);
  CHECK(th.npids < 3);
  rm_tree(root);
}

static void test_proc_tree_live(void) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    pid_t grand = fork();
    if (grand == 0) {
      pause();
      _exit(0);
    }
    if (write(fds[1], &grand, sizeof grand) != sizeof grand) _exit(1);
    pause();
    _exit(0);
  }
  pid_t grand = 0;
  ssize_t got = read(fds[0], &grand, sizeof grand);
  close(fds[0]);
  close(fds[1]);
  pid_t out[256];
  size_t n = mlprof__proc_tree("", getpid(), out, 256, NULL);
  kill(grand, SIGKILL);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  CHECK_EQ(got, (ssize_t)sizeof grand);
  CHECK(n >= 3);
  CHECK_EQ(out[0], getpid());
  CHECK(contains(out, n, child));
  CHECK(contains(out, n, grand));
}

/* ---- proc ------------------------------------------------------------------
 */

static void status_file(const char *root, int pid, unsigned long long rss_kb,
                        unsigned long long hwm_kb, unsigned long long vol,
                        unsigned long long invol) {
  char rel[64];
  snprintf(rel, sizeof rel, "proc/%d/status", pid);
  put_file(root, rel,
           "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\n"
           "VmPeak:\t 9000000 kB\nVmHWM:\t%8llu kB\nVmRSS:\t%8llu kB\n"
           "Threads:\t4\nvoluntary_ctxt_switches:\t%llu\n"
           "nonvoluntary_ctxt_switches:\t%llu\n",
           hwm_kb, rss_kb, vol, invol);
}

static void io_file(const char *root, int pid, unsigned long long rd,
                    unsigned long long wr) {
  char rel[64];
  snprintf(rel, sizeof rel, "proc/%d/io", pid);
  put_file(root, rel,
           "rchar: 999999\nwchar: 888888\nsyscr: 10\nsyscw: 20\n"
           "read_bytes: %llu\nwrite_bytes: %llu\ncancelled_write_bytes: 77\n",
           rd, wr);
}

static void test_proc_fixture(void) {
  const char *root = fixture();
  double tck = (double)sysconf(_SC_CLK_TCK);
  stat_file(root, 100, "python3 train.py", 1, 5000, 12, 250, 50, 4, 1000);
  status_file(root, 100, 102400, 204800, 150, 7);
  io_file(root, 100, 4096, 8192);
  put_file(root, "proc/100/fd/0", "x");
  put_file(root, "proc/100/fd/1", "x");
  put_file(root, "proc/100/fd/2", "x");
  put_file(root, "proc/100/fd/7", "x");
  /* A kernel thread: no memory lines, no io file, no fd directory. */
  stat_file(root, 200, "kworker/0:1", 2, 0, 0, 10, 20, 1, 2000);
  put_file(root, "proc/200/status",
           "Name:\tkworker/0:1\nThreads:\t1\nvoluntary_ctxt_switches:\t3\n"
           "nonvoluntary_ctxt_switches:\t0\n");

  /* A zombie: exited, not yet reaped (a rank whose launcher has not
   * waited for it yet): stat and status, no memory lines. */
  put_file(root, "proc/400/stat",
           "400 (python3) Z 1 400 400 0 -1 4227084 9 0 0 0 12 3 0 0 20 0 1 0 "
           "5000 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 "
           "0 0 0\n");
  put_file(root, "proc/400/status",
           "Name:\tpython3\nState:\tZ (zombie)\nThreads:\t1\n");

  void *st = NULL;
  char why[256] = "";
  CHECK_EQ(mlprof__source_proc.open(&st, root, why, sizeof why), 0);
  pid_t pids[] = {100, 200, 300 /* exited: skipped */, 400 /* zombie */};
  mlprof__sample_ctx c = ctx_at(root, pids, 4, 1000000000ull, 0);
  int n = mlprof__source_proc.sample(st, &c, rows, 64, why, sizeof why);
  CHECK_EQ(n, 2);
  CHECK(row_of(n, MLPROF__SUBJECT_PROCESS, 400) == NULL);
  const mlprof__row *r = row_of(n, MLPROF__SUBJECT_PROCESS, 100);
  CHECK(r != NULL);
  CHECK_STR(r->label, "python3 train.py");
  CHECK_VAL(r, "cpu_user_s", 250 / tck);
  CHECK_VAL(r, "cpu_system_s", 50 / tck);
  CHECK_ABSENT(r, "cpu_pct", "first sample");
  CHECK_VAL(r, "rss_bytes", 102400.0 * 1024);
  CHECK_VAL(r, "peak_rss_bytes", 204800.0 * 1024);
  CHECK_VAL(r, "minor_faults", 5000);
  CHECK_VAL(r, "major_faults", 12);
  CHECK_VAL(r, "voluntary_switches", 150);
  CHECK_VAL(r, "involuntary_switches", 7);
  CHECK_VAL(r, "threads", 4);
  CHECK_VAL(r, "read_bytes", 4096);
  CHECK_VAL(r, "write_bytes", 8192);
  CHECK_VAL(r, "open_files", 4);
  r = row_of(n, MLPROF__SUBJECT_PROCESS, 200);
  CHECK(r != NULL);
  CHECK_STR(r->label, "kworker/0:1");
  CHECK_ABSENT(r, "rss_bytes", "no VmRSS in /proc/PID/status");
  CHECK_ABSENT(r, "read_bytes", "not provided by this kernel");
  CHECK_ABSENT(r, "open_files", "not provided by this kernel");

  /* Second tick, half a second later: 100 used 30 more ticks of user time
   * and 20 of system time; 200 is a new process under the same pid. */
  stat_file(root, 100, "python3 train.py", 1, 6000, 12, 280, 70, 5, 1000);
  status_file(root, 100, 153600, 204800, 160, 9);
  stat_file(root, 200, "kworker/0:1", 2, 0, 0, 10, 20, 1, 2500);
  c = ctx_at(root, pids, 3, 1500000000ull, 1);
  n = mlprof__source_proc.sample(st, &c, rows, 64, why, sizeof why);
  CHECK_EQ(n, 2);
  r = row_of(n, MLPROF__SUBJECT_PROCESS, 100);
  CHECK(r != NULL);
  CHECK_VAL(r, "cpu_pct", 50 / tck / 0.5 * 100);
  CHECK_VAL(r, "cpu_user_s", 280 / tck);
  CHECK_VAL(r, "rss_bytes", 153600.0 * 1024);
  CHECK_VAL(r, "minor_faults", 6000);
  CHECK_VAL(r, "threads", 5);
  CHECK_VAL(r, "involuntary_switches", 9);
  r = row_of(n, MLPROF__SUBJECT_PROCESS, 200);
  CHECK(r != NULL);
  CHECK_ABSENT(r, "cpu_pct", "first sample");

  /* 100 leaves the tick's pid list and comes back: it starts over. */
  c = ctx_at(root, pids + 1, 1, 2000000000ull, 2);
  CHECK_EQ(mlprof__source_proc.sample(st, &c, rows, 64, why, sizeof why), 1);
  c = ctx_at(root, pids, 1, 2500000000ull, 3);
  CHECK_EQ(mlprof__source_proc.sample(st, &c, rows, 64, why, sizeof why), 1);
  CHECK_ABSENT(&rows[0], "cpu_pct", "first sample");
  /* Room for one row only. */
  c = ctx_at(root, pids, 3, 3000000000ull, 4);
  CHECK_EQ(mlprof__source_proc.sample(st, &c, rows, 1, why, sizeof why), 1);
  mlprof__source_proc.close(st);
  rm_tree(root);
}

/* runq_wait_pct: the run-queue wait (schedstat's second field) summed over
 * the threads of the process, over the interval, as a share of one core. */
static void test_proc_runq_fixture(void) {
  const char *root = fixture();
  stat_file(root, 100, "python3", 1, 0, 0, 250, 50, 2, 1000);
  status_file(root, 100, 1024, 1024, 1, 1);
  put_file(root, "proc/100/task/100/schedstat", "5000000000 200000000 40\n");
  put_file(root, "proc/100/task/101/schedstat", "1000000000 100000000 10\n");
  /* A kernel without sched_info: "0 0 0" for every thread. */
  stat_file(root, 200, "zero", 1, 0, 0, 10, 0, 1, 2000);
  status_file(root, 200, 1024, 1024, 1, 1);
  put_file(root, "proc/200/task/200/schedstat", "0 0 0\n");
  /* No schedstat at all (and no task directory). */
  stat_file(root, 300, "none", 1, 0, 0, 10, 0, 1, 3000);
  status_file(root, 300, 1024, 1024, 1, 1);

  void *st = NULL;
  char why[256] = "";
  CHECK_EQ(mlprof__source_proc.open(&st, root, why, sizeof why), 0);
  pid_t pids[] = {100, 200, 300};
  mlprof__sample_ctx c = ctx_at(root, pids, 3, 1000000000ull, 0);
  int n = mlprof__source_proc.sample(st, &c, rows, 64, why, sizeof why);
  CHECK_EQ(n, 3);
  CHECK_ABSENT(row_of(n, MLPROF__SUBJECT_PROCESS, 100), "runq_wait_pct",
               "first sample");
  CHECK_ABSENT(row_of(n, MLPROF__SUBJECT_PROCESS, 200), "runq_wait_pct",
               "not counted by this kernel (schedstat is 0)");
  CHECK_ABSENT(row_of(n, MLPROF__SUBJECT_PROCESS, 300), "runq_wait_pct",
               "not provided by this kernel");

  /* Half a second later the threads waited 100 + 50 ms more: 30% of a
   * core. */
  put_file(root, "proc/100/task/100/schedstat", "5100000000 300000000 41\n");
  put_file(root, "proc/100/task/101/schedstat", "1100000000 150000000 11\n");
  c = ctx_at(root, pids, 1, 1500000000ull, 1);
  n = mlprof__source_proc.sample(st, &c, rows, 64, why, sizeof why);
  CHECK_EQ(n, 1);
  CHECK_VAL(&rows[0], "runq_wait_pct", 30);
  /* Of it, waited before the previous tick, had each wait ended at a time
   * uniform over the interval: d^2 / 2dt each, 10 + 2.5 ms, 2.5%. */
  CHECK_VAL(&rows[0], "runq_wait_before_pct", 2.5);
  /* Thread 100 was starved: it got a CPU after 800 ms of waiting, which
   * the kernel counts at once. 800 - 500/2 ms of it lie before this
   * interval. */
  put_file(root, "proc/100/task/100/schedstat", "5101000000 1100000000 42\n");
  c = ctx_at(root, pids, 1, 2000000000ull, 2);
  n = mlprof__source_proc.sample(st, &c, rows, 64, why, sizeof why);
  CHECK_EQ(n, 1);
  CHECK_VAL(&rows[0], "runq_wait_pct", 160);
  CHECK_VAL(&rows[0], "runq_wait_before_pct", 110);

  /* Thread 101 exits, taking its wait with it: it counts for nothing,
   * never less. */
  char gone[PATH_MAX];
  snprintf(gone, sizeof gone, "%s/proc/100/task/101/schedstat", root);
  CHECK_EQ(unlink(gone), 0);
  c = ctx_at(root, pids, 1, 2500000000ull, 3);
  n = mlprof__source_proc.sample(st, &c, rows, 64, why, sizeof why);
  CHECK_EQ(n, 1);
  CHECK_VAL(&rows[0], "runq_wait_pct", 0);
  mlprof__source_proc.close(st);

  /* With the threads the tree walk listed, those are read, the task
   * directory is not listed again: 101 and 102 were not listed, their
   * wait is not counted. */
  put_file(root, "proc/100/task/101/schedstat", "1100000000 150000000 11\n");
  put_file(root, "proc/100/task/102/schedstat", "9000000000 900000000 11\n");
  CHECK_EQ(mlprof__source_proc.open(&st, root, why, sizeof why), 0);
  pid_t tids[] = {100};
  size_t first[] = {0, 1};
  mlprof__tree_threads th = {
      .tid = tids, .first = first, .cap = 1, .ntid = 1, .npids = 1};
  c = ctx_at(root, pids, 1, 3000000000ull, 3);
  c.threads = &th;
  CHECK_EQ(mlprof__source_proc.sample(st, &c, rows, 64, why, sizeof why), 1);
  put_file(root, "proc/100/task/100/schedstat", "5200000000 1200000000 43\n");
  put_file(root, "proc/100/task/102/schedstat", "9000000000 999000000 11\n");
  c = ctx_at(root, pids, 1, 3500000000ull, 4);
  c.threads = &th;
  CHECK_EQ(mlprof__source_proc.sample(st, &c, rows, 64, why, sizeof why), 1);
  /* 100 ms more in half a second: 20% (listing would count 102's). */
  CHECK_VAL(&rows[0], "runq_wait_pct", 20);
  mlprof__source_proc.close(st);
  rm_tree(root);
}

/* Runs fn in a child without privileges (root reads anything: a root child
 * becomes nobody); the test passes when fn returns 0. */
static int as_nobody(int (*fn)(const char *root), const char *root) {
  pid_t p = fork();
  if (p < 0) return -1;
  if (p == 0) {
    if (geteuid() == 0 &&
        (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
      _exit(3);
    _exit(fn(root));
  }
  int status = 0;
  waitpid(p, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

static int proc_private_child(const char *root) {
  void *st = NULL;
  char why[256];
  if (mlprof__source_proc.open(&st, root, why, sizeof why) != 0) return 10;
  pid_t pid = 100;
  mlprof__sample_ctx c = ctx_at(root, &pid, 1, 1, 0);
  int n = mlprof__source_proc.sample(st, &c, rows, 64, why, sizeof why);
  mlprof__source_proc.close(st);
  if (n != 1) return 11;
  const mlprof__measure *io = find(&rows[0], "read_bytes");
  const mlprof__measure *fd = find(&rows[0], "open_files");
  const mlprof__measure *rss = find(&rows[0], "rss_bytes");
  if (!io || !io->absent || strcmp(io->absent, "no permission") != 0) {
    fprintf(stderr, "  read_bytes absent: %s\n",
            io && io->absent ? io->absent : "(null)");
    return 12;
  }
  if (!fd || !fd->absent || strcmp(fd->absent, "no permission") != 0) return 13;
  if (!rss || rss->absent || rss->value != 1024.0 * 1024) return 14;
  return 0;
}

static void test_proc_no_permission(void) {
  const char *root = fixture();
  stat_file(root, 100, "python3", 1, 0, 0, 0, 0, 1, 1);
  status_file(root, 100, 1024, 2048, 0, 0);
  io_file(root, 100, 1, 2);
  put_file(root, "proc/100/fd/0", "x");
  char path[PATH_MAX];
  /* Mode 0: unreadable by nobody (the child when we are root) and by an
   * ordinary owner alike. */
  snprintf(path, sizeof path, "%s/proc/100/io", root);
  CHECK(chmod(path, 0) == 0);
  snprintf(path, sizeof path, "%s/proc/100/fd", root);
  CHECK(chmod(path, 0) == 0);
  int rc = as_nobody(proc_private_child, root);
  chmod(path, 0755);
  CHECK_EQ(rc, 0);
  rm_tree(root);
}

static void test_proc_live(void) {
  void *st = NULL;
  char why[256] = "";
  CHECK_EQ(mlprof__source_proc.open(&st, "", why, sizeof why), 0);
  pid_t self = getpid();
  mlprof__sample_ctx c = ctx_at("", &self, 1, 1000000000ull, 0);
  CHECK_EQ(mlprof__source_proc.sample(st, &c, rows, 64, why, sizeof why), 1);
  double rss0, peak0, user0, fds, thr;
  VALUE(&rows[0], "rss_bytes", rss0);
  VALUE(&rows[0], "peak_rss_bytes", peak0);
  VALUE(&rows[0], "cpu_user_s", user0);
  VALUE(&rows[0], "open_files", fds);
  VALUE(&rows[0], "threads", thr);
  CHECK(rss0 > 1e5 && rss0 < 1e10);
  CHECK(peak0 >= rss0);
  CHECK(fds >= 1);
  CHECK(thr >= 1);
  CHECK_ABSENT(&rows[0], "cpu_pct", "first sample");
  CHECK(find(&rows[0], "read_bytes") && !find(&rows[0], "read_bytes")->absent);

  /* Touch 256 MiB and burn 300 ms of CPU: the peak must follow within 5%,
   * and cpu_pct must be the CPU this process used over the wall time it
   * took (on a loaded machine it gets a fraction of a core: the CPU time it
   * read itself, not 100%, is what to expect). */
  const size_t big = 256u << 20;
  struct timespec t0, t1, c0, c1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
  char *p = malloc(big);
  CHECK(p != NULL);
  memset(p, 1, big);
  volatile unsigned sum = 0;
  for (size_t i = 0; i < big; i += 4096) sum += (unsigned char)p[i];
  do {
    for (int i = 0; i < 100000; i++) sum += (unsigned)i;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
  } while ((c1.tv_sec - c0.tv_sec) * 1000000000ll + (c1.tv_nsec - c0.tv_nsec) <
           300000000ll);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double wall =
      (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  double cpu =
      (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) / 1e9;
  c.now_ns = 1000000000ull + (uint64_t)(wall * 1e9);
  c.tick = 1;
  int n = mlprof__source_proc.sample(st, &c, rows, 64, why, sizeof why);
  free(p);
  CHECK_EQ(n, 1);
  double rss1, peak1, user1, pct;
  VALUE(&rows[0], "rss_bytes", rss1);
  VALUE(&rows[0], "peak_rss_bytes", peak1);
  VALUE(&rows[0], "cpu_user_s", user1);
  VALUE(&rows[0], "cpu_pct", pct);
  double want = rss0 + (double)big;
  if (rss1 < 0.95 * want || rss1 > 1.05 * want)
    TEST_FAIL("rss %.0f, want %.0f within 5%%", rss1, want);
  if (peak1 < 0.95 * want || peak1 > 1.05 * (peak0 > want ? peak0 : want))
    TEST_FAIL("peak rss %.0f, want %.0f within 5%%", peak1, want);
  CHECK(user1 >= user0);
  /* /proc counts whole clock ticks: a tick of error at each sample. */
  double slack = 2.0 / (double)sysconf(_SC_CLK_TCK);
  if (fabs(pct / 100 * wall - cpu) > slack)
    TEST_FAIL("cpu_pct %.1f over %.3f s, want %.1f (%.3f s of CPU)", pct, wall,
              100 * cpu / wall, cpu);
  mlprof__source_proc.close(st);
}

/* ---- system ----------------------------------------------------------------
 */

static void system_files(const char *root, unsigned long long user,
                         unsigned long long sys, unsigned long long idle,
                         unsigned long long iowait, unsigned long long sda_rd,
                         unsigned long long sda_wr, unsigned long long eth_rx,
                         unsigned long long eth_tx) {
  /* user nice system idle iowait irq softirq steal guest guest_nice; the
   * idle time given beyond 8000 jiffies is split idle and steal */
  unsigned long long steal = idle > 8000 ? (idle - 8000) / 5 : 0;
  put_file(root, "proc/stat",
           "cpu  %llu 0 %llu %llu %llu 0 0 %llu 0 0\n"
           "cpu0 1 2 3 4 5 6 7 8 0 0\nintr 12345 0 0\nctxt 999\n",
           user, sys, idle - steal, iowait, steal);
  put_file(root, "proc/diskstats",
           "   7       0 loop0 100 0 %llu 10 0 0 0 0 0 10 10 0 0 0 0\n"
           "   8       0 sda 100 0 %llu 10 50 0 %llu 20 0 30 30 0 0 0 0\n"
           "   8       1 sda1 100 0 %llu 10 50 0 %llu 20 0 30 30 0 0 0 0\n"
           " 259       0 nvme0n1 10 0 1000 1 5 0 2000 1 0 2 2 0 0 0 0\n"
           " 259       1 nvme0n1p1 10 0 1000 1 5 0 2000 1 0 2 2 0 0 0 0\n"
           " 253       0 dm-0 10 0 %llu 1 5 0 %llu 1 0 2 2 0 0 0 0\n",
           sda_rd * 7, sda_rd, sda_wr, sda_rd, sda_wr, sda_rd, sda_wr);
  put_file(root, "proc/net/dev",
           "Inter-|   Receive                                                |"
           "  Transmit\n"
           " face |bytes    packets errs drop fifo frame compressed multicast|"
           "bytes    packets errs drop fifo colls carrier compressed\n"
           "    lo: %llu 10 0 0 0 0 0 0 %llu 10 0 0 0 0 0 0\n"
           "  eth0: %llu 20 0 0 0 0 0 0 %llu 20 0 0 0 0 0 0\n"
           "  wlan0: 1000 5 0 0 0 0 0 0 500 5 0 0 0 0 0 0\n",
           eth_rx * 3, eth_tx * 3, eth_rx, eth_tx);
}

static void test_system_fixture(void) {
  const char *root = fixture();
  put_dir(root, "sys/block/sda");
  put_dir(root, "sys/block/nvme0n1");
  put_dir(root, "sys/block/loop0");
  put_dir(root, "sys/block/dm-0");
  put_file(root, "proc/loadavg", "1.25 0.75 0.50 2/345 6789\n");
  put_file(root, "proc/meminfo",
           "MemTotal:       16000000 kB\nMemFree:         1000000 kB\n"
           "MemAvailable:    6000000 kB\nBuffers:          100000 kB\n"
           "SwapCached:            0 kB\nSwapTotal:       2000000 kB\n"
           "SwapFree:        1500000 kB\n");
  system_files(root, 1000, 500, 8000, 500, 2000, 4000, 10000, 5000);
  void *st = NULL;
  char why[256] = "";
  CHECK_EQ(mlprof__source_system.open(&st, root, why, sizeof why), 0);
  mlprof__sample_ctx c = ctx_at(root, NULL, 0, 5000000000ull, 0);
  CHECK_EQ(mlprof__source_system.sample(st, &c, rows, 64, why, sizeof why), 1);
  const mlprof__row *r = &rows[0];
  CHECK_EQ(r->subject, MLPROF__SUBJECT_SYSTEM);
  CHECK_ABSENT(r, "cpu_user_pct", "first sample");
  CHECK_ABSENT(r, "cpu_idle_pct", "first sample");
  CHECK_ABSENT(r, "cpu_steal_pct", "first sample");
  CHECK_ABSENT(r, "disk_read_bytes_s", "first sample");
  CHECK_ABSENT(r, "net_tx_bytes_s", "first sample");
  CHECK_VAL(r, "load1", 1.25);
  CHECK_VAL(r, "mem_used_bytes", 10000000.0 * 1024);
  CHECK_VAL(r, "mem_available_bytes", 6000000.0 * 1024);
  CHECK_VAL(r, "mem_total_bytes", 16000000.0 * 1024);
  CHECK_VAL(r, "swap_used_bytes", 500000.0 * 1024);

  /* Two seconds later: 1000 jiffies split 250/125/400/125 and 100 stolen
   * by the hypervisor; sda read 4000
   * sectors and wrote 1000; eth0 received 4 MB and sent 1 MB. Partitions,
   * loop, dm and lo move too and must not count. */
  system_files(root, 1250, 625, 8500, 625, 6000, 5000, 4010000, 1005000);
  c = ctx_at(root, NULL, 0, 7000000000ull, 1);
  CHECK_EQ(mlprof__source_system.sample(st, &c, rows, 64, why, sizeof why), 1);
  CHECK_VAL(r, "cpu_user_pct", 25);
  CHECK_VAL(r, "cpu_system_pct", 12.5);
  CHECK_VAL(r, "cpu_idle_pct", 40);
  CHECK_VAL(r, "cpu_steal_pct", 10);
  CHECK_VAL(r, "cpu_iowait_pct", 12.5);
  CHECK_VAL(r, "disk_read_bytes_s", 4000.0 * 512 / 2);
  CHECK_VAL(r, "disk_write_bytes_s", 1000.0 * 512 / 2);
  CHECK_VAL(r, "net_rx_bytes_s", 4000000.0 / 2);
  CHECK_VAL(r, "net_tx_bytes_s", 1000000.0 / 2);

  /* The interface went away: its counters leave the sum. */
  put_file(root, "proc/net/dev",
           "h1\nh2\n    lo: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n");
  put_file(root, "proc/meminfo", "MemTotal: 100 kB\n");
  c = ctx_at(root, NULL, 0, 8000000000ull, 2);
  CHECK_EQ(mlprof__source_system.sample(st, &c, rows, 64, why, sizeof why), 1);
  CHECK_ABSENT(r, "net_rx_bytes_s", "counters went back (device removed)");
  CHECK_ABSENT(r, "mem_available_bytes", "no MemAvailable in /proc/meminfo");
  CHECK_VAL(r, "disk_read_bytes_s", 0);

  /* A disk appeared first in the list, the others moved down: whether a
   * line is a whole disk is remembered by its name, not by its place (sdb1
   * now stands where sda stood, and does not count). */
  put_dir(root, "sys/block/sdb");
  put_file(root, "proc/diskstats",
           "   8      16 sdb 10 0 2048 1 0 0 0 1 0 2 2 0 0 0 0\n"
           "   8      17 sdb1 10 0 999999 1 0 0 999999 1 0 2 2 0 0 0 0\n"
           "   8       0 sda 100 0 6000 10 50 0 5000 20 0 30 30 0 0 0 0\n"
           " 259       0 nvme0n1 10 0 1000 1 5 0 2000 1 0 2 2 0 0 0 0\n");
  c = ctx_at(root, NULL, 0, 9000000000ull, 3);
  CHECK_EQ(mlprof__source_system.sample(st, &c, rows, 64, why, sizeof why), 1);
  CHECK_VAL(r, "disk_read_bytes_s", 2048.0 * 512);
  CHECK_VAL(r, "disk_write_bytes_s", 0);
  mlprof__source_system.close(st);
  rm_tree(root);
}

/* Without /sys/block, a partition is told by its disk's name before it. */
static void test_system_no_sysblock(void) {
  const char *root = fixture();
  system_files(root, 1000, 500, 8000, 500, 2000, 4000, 10000, 5000);
  void *st = NULL;
  char why[256] = "";
  CHECK_EQ(mlprof__source_system.open(&st, root, why, sizeof why), 0);
  mlprof__sample_ctx c = ctx_at(root, NULL, 0, 1000000000ull, 0);
  CHECK_EQ(mlprof__source_system.sample(st, &c, rows, 64, why, sizeof why), 1);
  CHECK_ABSENT(&rows[0], "load1", "cannot read /proc/loadavg");
  CHECK_ABSENT(&rows[0], "mem_used_bytes", "cannot read /proc/meminfo");
  system_files(root, 1000, 500, 8000, 500, 2100, 4000, 10000, 5000);
  c = ctx_at(root, NULL, 0, 2000000000ull, 1);
  CHECK_EQ(mlprof__source_system.sample(st, &c, rows, 64, why, sizeof why), 1);
  CHECK_ABSENT(&rows[0], "cpu_user_pct", "no time elapsed");
  /* sda and nvme0n1 only: +100 sectors on sda. */
  CHECK_VAL(&rows[0], "disk_read_bytes_s", 100.0 * 512);
  mlprof__source_system.close(st);
  CHECK_EQ(
      mlprof__source_system.open(&st, "/nonexistent-root", why, sizeof why),
      -1);
  CHECK(strncmp(why, "cannot read /proc/stat", 22) == 0);
  rm_tree(root);
}

static void test_system_live(void) {
  void *st = NULL;
  char why[256] = "";
  CHECK_EQ(mlprof__source_system.open(&st, "", why, sizeof why), 0);
  mlprof__sample_ctx c = ctx_at("", NULL, 0, 1000000000ull, 0);
  CHECK_EQ(mlprof__source_system.sample(st, &c, rows, 64, why, sizeof why), 1);
  double used, avail, load;
  VALUE(&rows[0], "mem_used_bytes", used);
  VALUE(&rows[0], "mem_available_bytes", avail);
  VALUE(&rows[0], "load1", load);
  CHECK(used > 0 && avail > 0 && load >= 0);
  CHECK_ABSENT(&rows[0], "cpu_idle_pct", "first sample");
  usleep(200000);
  c = ctx_at("", NULL, 0, 1200000000ull, 1);
  CHECK_EQ(mlprof__source_system.sample(st, &c, rows, 64, why, sizeof why), 1);
  double u, s, w, i, rx;
  VALUE(&rows[0], "cpu_user_pct", u);
  VALUE(&rows[0], "cpu_system_pct", s);
  VALUE(&rows[0], "cpu_iowait_pct", w);
  VALUE(&rows[0], "cpu_idle_pct", i);
  VALUE(&rows[0], "net_rx_bytes_s", rx);
  CHECK(u >= 0 && s >= 0 && w >= 0 && i >= 0);
  CHECK(u + s + w + i <= 100.0 + 1e-9);
  CHECK(rx >= 0);
  mlprof__source_system.close(st);
}

/* ---- thermal
 * ------------------------------------------------------------------ */

static void test_thermal_hwmon(void) {
  const char *root = fixture();
  put_file(root, "sys/class/hwmon/hwmon0/name", "nvme\n");
  put_file(root, "sys/class/hwmon/hwmon0/temp1_input", "80000\n");
  put_file(root, "sys/class/hwmon/hwmon1/name", "coretemp\n");
  put_file(root, "sys/class/hwmon/hwmon1/temp1_input", "45000\n");
  put_file(root, "sys/class/hwmon/hwmon1/temp1_label", "Package id 0\n");
  put_file(root, "sys/class/hwmon/hwmon1/temp2_input", "52500\n");
  put_file(root, "sys/class/hwmon/hwmon1/temp2_max", "100000\n");
  /* A zone too: hwmon wins. */
  put_file(root, "sys/class/thermal/thermal_zone0/type", "x86_pkg_temp\n");
  put_file(root, "sys/class/thermal/thermal_zone0/temp", "99000\n");
  void *st = NULL;
  char why[256] = "";
  CHECK_EQ(mlprof__source_thermal.open(&st, root, why, sizeof why), 0);
  mlprof__sample_ctx c = ctx_at(root, NULL, 0, 1, 0);
  CHECK_EQ(mlprof__source_thermal.sample(st, &c, rows, 64, why, sizeof why), 1);
  CHECK_EQ(rows[0].subject, MLPROF__SUBJECT_SYSTEM);
  CHECK_STR(rows[0].label, "coretemp");
  CHECK_VAL(&rows[0], "cpu_temp_c", 52.5);
  put_file(root, "sys/class/hwmon/hwmon1/temp2_input", "61000\n");
  CHECK_EQ(mlprof__source_thermal.sample(st, &c, rows, 64, why, sizeof why), 1);
  CHECK_VAL(&rows[0], "cpu_temp_c", 61);
  /* Sensors gone between ticks: absent with the reason. */
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/sys/class/hwmon/hwmon1/temp1_input", root);
  unlink(path);
  snprintf(path, sizeof path, "%s/sys/class/hwmon/hwmon1/temp2_input", root);
  unlink(path);
  CHECK_EQ(mlprof__source_thermal.sample(st, &c, rows, 64, why, sizeof why), 1);
  const mlprof__measure *m = find(&rows[0], "cpu_temp_c");
  CHECK(m && m->absent);
  CHECK(strstr(m->absent, "No such file or directory") != NULL);
  mlprof__source_thermal.close(st);
  rm_tree(root);
}

static void test_thermal_zone(void) {
  const char *root = fixture();
  put_file(root, "sys/class/hwmon/hwmon0/name", "acpitz\n");
  put_file(root, "sys/class/hwmon/hwmon0/temp1_input", "27800\n");
  put_file(root, "sys/class/thermal/thermal_zone0/type", "acpitz\n");
  put_file(root, "sys/class/thermal/thermal_zone0/temp", "27800\n");
  put_file(root, "sys/class/thermal/thermal_zone1/type", "x86_pkg_temp\n");
  put_file(root, "sys/class/thermal/thermal_zone1/temp", "48000\n");
  put_dir(root, "sys/class/thermal/cooling_device0");
  void *st = NULL;
  char why[256] = "";
  CHECK_EQ(mlprof__source_thermal.open(&st, root, why, sizeof why), 0);
  mlprof__sample_ctx c = ctx_at(root, NULL, 0, 1, 0);
  CHECK_EQ(mlprof__source_thermal.sample(st, &c, rows, 64, why, sizeof why), 1);
  CHECK_STR(rows[0].label, "x86_pkg_temp");
  CHECK_VAL(&rows[0], "cpu_temp_c", 48);
  mlprof__source_thermal.close(st);
  rm_tree(root);

  /* An ARM board: cpu-thermal zone, negative readings parse. */
  root = fixture();
  put_file(root, "sys/class/thermal/thermal_zone0/type", "cpu-thermal\n");
  put_file(root, "sys/class/thermal/thermal_zone0/temp", "-5500\n");
  CHECK_EQ(mlprof__source_thermal.open(&st, root, why, sizeof why), 0);
  CHECK_EQ(mlprof__source_thermal.sample(st, &c, rows, 64, why, sizeof why), 1);
  CHECK_VAL(&rows[0], "cpu_temp_c", -5.5);
  mlprof__source_thermal.close(st);
  rm_tree(root);
}

static void test_thermal_unavailable(void) {
  const char *root = fixture();
  put_file(root, "sys/class/thermal/thermal_zone0/type", "acpitz\n");
  put_file(root, "sys/class/thermal/thermal_zone0/temp", "27800\n");
  void *st = NULL;
  char why[256] = "";
  CHECK_EQ(mlprof__source_thermal.open(&st, root, why, sizeof why), -1);
  CHECK_STR(why,
            "no CPU temperature sensor in /sys/class/hwmon or "
            "/sys/class/thermal");
  put_file(root, "sys/class/thermal/thermal_zone1/type", "x86_pkg_temp\n");
  put_file(root, "sys/class/thermal/thermal_zone1/temp", "garbage\n");
  CHECK_EQ(mlprof__source_thermal.open(&st, root, why, sizeof why), -1);
  CHECK_STR(why, "CPU temperature sensor not readable: Invalid argument");
  rm_tree(root);

  /* This machine. */
  why[0] = '\0';
  st = NULL;
  if (mlprof__source_thermal.open(&st, "", why, sizeof why) == 0) {
    mlprof__sample_ctx c = ctx_at("", NULL, 0, 1, 0);
    CHECK_EQ(mlprof__source_thermal.sample(st, &c, rows, 64, why, sizeof why),
             1);
    double t;
    VALUE(&rows[0], "cpu_temp_c", t);
    CHECK(t > -40 && t < 150);
    mlprof__source_thermal.close(st);
  } else {
    CHECK(strncmp(why, "no CPU temperature sensor", 25) == 0 ||
          strncmp(why, "CPU temperature sensor not readable", 35) == 0);
  }
}

/* ---- energy
 * --------------------------------------------------------------------- */

static void rapl_zone(const char *root, const char *zone, const char *name,
                      unsigned long long uj, unsigned long long max) {
  char rel[128];
  snprintf(rel, sizeof rel, "sys/class/powercap/%s/name", zone);
  put_file(root, rel, "%s\n", name);
  snprintf(rel, sizeof rel, "sys/class/powercap/%s/energy_uj", zone);
  put_file(root, rel, "%llu\n", uj);
  snprintf(rel, sizeof rel, "sys/class/powercap/%s/max_energy_range_uj", zone);
  put_file(root, rel, "%llu\n", max);
}

static void test_energy_rapl(void) {
  const char *root = fixture();
  const unsigned long long max = 10000000;
  rapl_zone(root, "intel-rapl:0", "package-0", 1000000, max);
  rapl_zone(root, "intel-rapl:0:0", "core", 1000000, max);
  rapl_zone(root, "intel-rapl:1", "package-1", 5000000, max);
  rapl_zone(root, "intel-rapl:2", "psys", 5000000, max);
  put_dir(root, "sys/class/powercap/intel-rapl");
  void *st = NULL;
  char why[256] = "";
  CHECK_EQ(mlprof__source_energy.open(&st, root, why, sizeof why), 0);

  /* +2 J and +1 J since open. */
  rapl_zone(root, "intel-rapl:0", "package-0", 3000000, max);
  rapl_zone(root, "intel-rapl:0:0", "core", 9000000, max);
  rapl_zone(root, "intel-rapl:1", "package-1", 6000000, max);
  rapl_zone(root, "intel-rapl:2", "psys", 9000000, max);
  mlprof__sample_ctx c = ctx_at(root, NULL, 0, 1000000000ull, 0);
  CHECK_EQ(mlprof__source_energy.sample(st, &c, rows, 64, why, sizeof why), 1);
  CHECK_EQ(rows[0].subject, MLPROF__SUBJECT_SYSTEM);
  CHECK_VAL(&rows[0], "cpu_energy_j", 3);
  CHECK_ABSENT(&rows[0], "cpu_power_w", "first sample");

  /* Package 0 wraps: 7 J up to the top, then 0.5 J; package 1 +2.5 J.
   * 10 J in 2 s. */
  rapl_zone(root, "intel-rapl:0", "package-0", 500000, max);
  rapl_zone(root, "intel-rapl:1", "package-1", 8500000, max);
  c = ctx_at(root, NULL, 0, 3000000000ull, 1);
  CHECK_EQ(mlprof__source_energy.sample(st, &c, rows, 64, why, sizeof why), 1);
  CHECK_VAL(&rows[0], "cpu_energy_j", 13);
  CHECK_VAL(&rows[0], "cpu_power_w", 5);

  /* A read fails: absent with the reason, then power starts over. */
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/sys/class/powercap/intel-rapl:1/energy_uj",
           root);
  unlink(path);
  c = ctx_at(root, NULL, 0, 4000000000ull, 2);
  CHECK_EQ(mlprof__source_energy.sample(st, &c, rows, 64, why, sizeof why), 1);
  const mlprof__measure *m = find(&rows[0], "cpu_energy_j");
  CHECK(m && m->absent && strstr(m->absent, "No such file or directory"));
  rapl_zone(root, "intel-rapl:1", "package-1", 9500000, max);
  c = ctx_at(root, NULL, 0, 5000000000ull, 3);
  CHECK_EQ(mlprof__source_energy.sample(st, &c, rows, 64, why, sizeof why), 1);
  CHECK_VAL(&rows[0], "cpu_energy_j", 14);
  CHECK_ABSENT(&rows[0], "cpu_power_w", "first sample");
  mlprof__source_energy.close(st);
  rm_tree(root);
}

static int energy_private_child(const char *root) {
  void *st = NULL;
  char why[256] = "";
  if (mlprof__source_energy.open(&st, root, why, sizeof why) != -1) return 10;
  if (strcmp(why, "RAPL not readable: Permission denied") != 0) {
    fprintf(stderr, "  why: %s\n", why);
    return 11;
  }
  return 0;
}

static void test_energy_unavailable(void) {
  const char *root = fixture();
  void *st = NULL;
  char why[256] = "";
  CHECK_EQ(mlprof__source_energy.open(&st, root, why, sizeof why), -1);
  CHECK_STR(why, "no RAPL in /sys/class/powercap");
  /* Only subzones and psys: still no package. */
  rapl_zone(root, "intel-rapl:0:0", "core", 1, 100);
  rapl_zone(root, "intel-rapl:1", "psys", 1, 100);
  CHECK_EQ(mlprof__source_energy.open(&st, root, why, sizeof why), -1);
  CHECK_STR(why, "no RAPL in /sys/class/powercap");
  /* Since Linux 5.10 energy_uj is readable by root only. */
  rapl_zone(root, "intel-rapl:0", "package-0", 1, 100);
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/sys/class/powercap/intel-rapl:0/energy_uj",
           root);
  CHECK(chmod(path, 0) == 0);
  CHECK_EQ(as_nobody(energy_private_child, root), 0);
  rm_tree(root);

  /* This machine. */
  why[0] = '\0';
  st = NULL;
  if (mlprof__source_energy.open(&st, "", why, sizeof why) == 0) {
    mlprof__sample_ctx c = ctx_at("", NULL, 0, 1, 0);
    CHECK_EQ(mlprof__source_energy.sample(st, &c, rows, 64, why, sizeof why),
             1);
    mlprof__source_energy.close(st);
  } else {
    CHECK(strcmp(why, "no RAPL in /sys/class/powercap") == 0 ||
          strncmp(why, "RAPL not readable: ", 19) == 0);
  }
}

/* ---- nvml (fake library)
 * ------------------------------------------------------ */

static char fake_lib[PATH_MAX];

/* MLPROF_NVML_LIB as the library reads it: from its copy of the
 * environment (src/base/env.c), taken again here. */
static void nvml_lib(const char *path) {
  if (path)
    setenv("MLPROF_NVML_LIB", path, 1);
  else
    unsetenv("MLPROF_NVML_LIB");
  mlprof__env_copy();
}

/* Points the nvml source at the fake built beside this binary and writes the
 * script; 0, or -1 when the fake is not there. */
static int use_fake(const char *root, const char *script) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return -1;
  exe[n] = '\0';
  snprintf(fake_lib, sizeof fake_lib, "%s/fake_nvml/libnvidia-ml.so.1",
           dirname(exe));
  if (access(fake_lib, R_OK) != 0) return -1;
  put_file(root, "script", "%s", script);
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/script", root);
  nvml_lib(fake_lib);
  setenv("FAKE_NVML_SCRIPT", path, 1);
  return 0;
}

static void no_fake(void) {
  nvml_lib(NULL);
  unsetenv("FAKE_NVML_SCRIPT");
}

/* A source a failed check left open: closed before the next test opens one,
 * so that one failure does not spill into the tests after it. */
static void *nvml_left;

static int nv_open(void **st, char *why, size_t len) {
  if (nvml_left) {
    mlprof__source_nvml.close(nvml_left);
    nvml_left = NULL;
  }
  *st = NULL;
  int rc = mlprof__source_nvml.open(st, "", why, len);
  if (rc == 0 && (rc = mlprof__source_nvml.start(*st, why, len)) != 0)
    *st = NULL; /* start released it */
  if (rc == 0) nvml_left = *st;
  return rc;
}

static void nv_close(void *st) {
  mlprof__source_nvml.close(st);
  nvml_left = NULL;
}

#define FAKE(root, script)                            \
  do {                                                \
    if (use_fake((root), (script)) != 0)              \
      TEST_FAIL("fake NVML not built: %s", fake_lib); \
  } while (0)

static void test_nvml_missing(void) {
  void *st = NULL;
  char why[256] = "";
  nvml_lib("/nonexistent/libnvidia-ml.so.1");
  CHECK_EQ(nv_open(&st, why, sizeof why), -1);
  CHECK_STR(why, "no NVML: /nonexistent/libnvidia-ml.so.1 not found");
  no_fake();
  /* The real name, on a machine without the driver. */
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h) {
    dlclose(h);
  } else {
    CHECK_EQ(nv_open(&st, why, sizeof why), -1);
    CHECK_STR(why, "no NVML: libnvidia-ml.so.1 not found");
  }
  /* A library that is not NVML. */
  nvml_lib("libc.so.6");
  CHECK_EQ(nv_open(&st, why, sizeof why), -1);
  CHECK_STR(why, "no NVML: libc.so.6 has no nvmlInit_v2");
  no_fake();
}

static void test_nvml_no_gpu_and_init_failure(void) {
  const char *root = fixture();
  void *st = NULL;
  char why[256] = "";
  FAKE(root, "devices 0\n");
  CHECK_EQ(nv_open(&st, why, sizeof why), -1);
  CHECK_STR(why, "NVML found no GPU");
  FAKE(root, "init 9   # NVML_ERROR_DRIVER_NOT_LOADED\ndevices 2\n");
  CHECK_EQ(nv_open(&st, why, sizeof why), -1);
  CHECK_STR(why, "NVML init failed: Driver Not Loaded");
  FAKE(root, "devices 1\nbogus line\n");
  CHECK_EQ(nv_open(&st, why, sizeof why), -1);
  CHECK_STR(why, "NVML init failed: Unknown Error");
  no_fake();
  rm_tree(root);
}

static const char one_gpu[] =
    "devices 1\n"
    "name 0 NVIDIA A100-SXM4-40GB\n"
    "util 0 87 41\n"
    "memory 0 30000000000 42949672960\n"
    "temp 0 71\n"
    "power 0 312500\n"
    "energy 0 5000000 2500\n"
    "clock 0 1410\n"
    "pcie 0 2000 500\n"
    "throttle 0 4\n"
    "process 0 4242 1073741824\n"
    "process 0 9999 2048\n";

static void test_nvml_one_gpu(void) {
  const char *root = fixture();
  FAKE(root, one_gpu);
  void *st = NULL;
  char why[256] = "";
  CHECK_EQ(nv_open(&st, why, sizeof why), 0);
  pid_t pids[] = {4242, 4343};
  mlprof__sample_ctx c = ctx_at("", pids, 2, 1000000000ull, 0);
  int n = mlprof__source_nvml.sample(st, &c, rows, 64, why, sizeof why);
  /* Tick 0: the GPU row with PCIe, and a row for the one pid on the GPU. */
  CHECK_EQ(n, 2);
  const mlprof__row *g = row_of(n, MLPROF__SUBJECT_GPU, 0);
  CHECK(g != NULL);
  CHECK_STR(g->label, "NVIDIA A100-SXM4-40GB");
  CHECK_VAL(g, "gpu_util_pct", 87);
  CHECK_VAL(g, "gpu_mem_util_pct", 41);
  CHECK_VAL(g, "gpu_mem_used_bytes", 30000000000.0);
  CHECK_VAL(g, "gpu_mem_total_bytes", 42949672960.0);
  CHECK_VAL(g, "gpu_temp_c", 71);
  CHECK_VAL(g, "gpu_power_w", 312.5);
  CHECK_VAL(g, "gpu_energy_j", 2.5);
  CHECK_VAL(g, "gpu_sm_clock_mhz", 1410);
  CHECK_VAL(g, "gpu_pcie_rx_bytes_s", 2000.0 * 1024);
  CHECK_VAL(g, "gpu_pcie_tx_bytes_s", 500.0 * 1024);
  CHECK_VAL(g, "gpu_throttle_reasons", 4);
  CHECK_EQ(g->n, 11);
  const mlprof__row *p = row_of(n, MLPROF__SUBJECT_PROCESS, 4242);
  CHECK(p != NULL);
  CHECK_VAL(p, "gpu_mem_bytes", 1073741824.0);
  CHECK(row_of(n, MLPROF__SUBJECT_PROCESS, 4343) == NULL);

  /* Ticks 1..9: the fast measures only. */
  for (uint64_t t = 1; t < 10; t++) {
    c = ctx_at("", pids, 2, 1000000000ull + t * 100000000ull, t);
    n = mlprof__source_nvml.sample(st, &c, rows, 64, why, sizeof why);
    CHECK_EQ(n, 1);
    CHECK(find(&rows[0], "gpu_pcie_rx_bytes_s") == NULL);
    CHECK_VAL(&rows[0], "gpu_energy_j", 2.5 * (double)(t + 1));
  }
  c = ctx_at("", pids, 2, 2000000000ull, 10);
  CHECK_EQ(mlprof__source_nvml.sample(st, &c, rows, 64, why, sizeof why), 2);
  CHECK_VAL(&rows[0], "gpu_pcie_tx_bytes_s", 500.0 * 1024);
  /* Room for the GPU row only. */
  c = ctx_at("", pids, 2, 3000000000ull, 20);
  CHECK_EQ(mlprof__source_nvml.sample(st, &c, rows, 1, why, sizeof why), 1);
  nv_close(st);
  no_fake();
  rm_tree(root);
}

static const char four_gpus[] =
    "devices 4\n"
    "name * Fake H100\n"
    "name 3 Fake L4\n"
    "util * 10 5\n"
    "util 1 20 6\n"
    "util 2 30 7\n"
    "util 3 40 8\n"
    "memory * 1000 8000\n"
    "memory 3 7000 24000\n"
    "temp * 60\n"
    "power * 100000\n"
    "power 3 72000\n"
    "power 1 100000 20000 # 100 W, then 120 W\n"
    "energy * 0 1000\n"
    "clock * 1980\n"
    "pcie * 1 2\n"
    "throttle * 0\n"
    "throttle 2 68\n"
    "fail 2 temp 3        # NOT_SUPPORTED\n"
    "fail 3 clock 4       # NO_PERMISSION\n"
    "fail 1 energy 3      # pre-Volta: integrate the power\n"
    "fail 3 pcie 3\n"
    "process 0 777 100\n"
    "process 2 777 50\n"
    "process 3 778 18446744073709551615\n";

static void test_nvml_four_gpus(void) {
  const char *root = fixture();
  FAKE(root, four_gpus);
  void *st = NULL;
  char why[256] = "";
  CHECK_EQ(nv_open(&st, why, sizeof why), 0);
  pid_t pids[] = {777, 778, 779};
  mlprof__sample_ctx c = ctx_at("", pids, 3, 1000000000ull, 0);
  int n = mlprof__source_nvml.sample(st, &c, rows, 64, why, sizeof why);
  CHECK_EQ(n, 6);
  for (uint64_t d = 0; d < 4; d++) {
    const mlprof__row *g = row_of(n, MLPROF__SUBJECT_GPU, d);
    if (!g) TEST_FAIL("no row for GPU %d", (int)d);
    CHECK_STR(g->label, d == 3 ? "Fake L4" : "Fake H100");
    CHECK_VAL(g, "gpu_util_pct", 10.0 * (double)(d + 1));
    CHECK_VAL(g, "gpu_mem_util_pct", 5 + (double)d);
  }
  const mlprof__row *g0 = row_of(n, MLPROF__SUBJECT_GPU, 0);
  const mlprof__row *g1 = row_of(n, MLPROF__SUBJECT_GPU, 1);
  const mlprof__row *g2 = row_of(n, MLPROF__SUBJECT_GPU, 2);
  const mlprof__row *g3 = row_of(n, MLPROF__SUBJECT_GPU, 3);
  CHECK_VAL(g0, "gpu_temp_c", 60);
  CHECK_ABSENT(g2, "gpu_temp_c", "not supported by this GPU");
  CHECK_VAL(g2, "gpu_throttle_reasons", 68);
  CHECK_ABSENT(g3, "gpu_sm_clock_mhz", "Insufficient Permissions");
  CHECK_ABSENT(g3, "gpu_pcie_rx_bytes_s", "not supported by this GPU");
  CHECK_VAL(g3, "gpu_mem_used_bytes", 7000);
  CHECK_VAL(g3, "gpu_mem_total_bytes", 24000);
  CHECK_VAL(g3, "gpu_power_w", 72);
  CHECK_VAL(g0, "gpu_energy_j", 1);
  CHECK_VAL(g1, "gpu_energy_j", 0); /* integrated: starts at the first tick */
  const mlprof__row *p = row_of(n, MLPROF__SUBJECT_PROCESS, 777);
  CHECK(p != NULL);
  CHECK_VAL(p, "gpu_mem_bytes", 150); /* on GPUs 0 and 2 */
  p = row_of(n, MLPROF__SUBJECT_PROCESS, 778);
  CHECK(p != NULL);
  CHECK_ABSENT(p, "gpu_mem_bytes", "not available from NVML");
  CHECK(row_of(n, MLPROF__SUBJECT_PROCESS, 779) == NULL);

  /* Half a second from 100 W to 120 W: 55 J on the integrated GPU. */
  c = ctx_at("", pids, 3, 1500000000ull, 1);
  n = mlprof__source_nvml.sample(st, &c, rows, 64, why, sizeof why);
  CHECK_EQ(n, 4);
  CHECK_VAL(row_of(n, MLPROF__SUBJECT_GPU, 1), "gpu_power_w", 120);
  CHECK_VAL(row_of(n, MLPROF__SUBJECT_GPU, 1), "gpu_energy_j", 55);
  CHECK_VAL(row_of(n, MLPROF__SUBJECT_GPU, 0), "gpu_energy_j", 2);
  nv_close(st);
  no_fake();
  rm_tree(root);
}

static void test_nvml_unsupported_everywhere(void) {
  const char *root = fixture();
  FAKE(root,
       "devices 2\nfail * util 3\nfail * memory 3\nfail * temp 3\n"
       "fail * power 3\nfail * energy 3\nfail * clock 3\nfail * pcie 3\n"
       "fail * throttle 3\nfail * processes 3\nfail 1 name 3\n");
  void *st = NULL;
  char why[256] = "";
  CHECK_EQ(nv_open(&st, why, sizeof why), 0);
  pid_t pids[] = {4242};
  mlprof__sample_ctx c = ctx_at("", pids, 1, 1000000000ull, 0);
  int n = mlprof__source_nvml.sample(st, &c, rows, 64, why, sizeof why);
  CHECK_EQ(n, 3);
  const mlprof__row *g = row_of(n, MLPROF__SUBJECT_GPU, 1);
  CHECK(g != NULL);
  CHECK_STR(g->label, "GPU 1");
  CHECK_EQ(g->n, 11);
  for (int i = 0; i < g->n; i++)
    if (!g->m[i].absent ||
        strcmp(g->m[i].absent, "not supported by this GPU") != 0)
      TEST_FAIL("%s: %s", g->m[i].name,
                g->m[i].absent ? g->m[i].absent : "present");
  const mlprof__row *p = row_of(n, MLPROF__SUBJECT_PROCESS, 4242);
  CHECK(p != NULL);
  CHECK_ABSENT(p, "gpu_mem_bytes", "not supported by this GPU");
  nv_close(st);
  no_fake();
  rm_tree(root);
}

static void test_nvml_gpu_lost(void) {
  const char *root = fixture();
  FAKE(root, "devices 2\nutil * 50 50\nlost 1 2\n");
  void *st = NULL;
  char why[256] = "";
  CHECK_EQ(nv_open(&st, why, sizeof why), 0);
  int ok = 0, failed = 0;
  for (uint64_t t = 1; t <= 5; t++) {
    mlprof__sample_ctx c = ctx_at("", NULL, 0, t * 100000000ull, t);
    int n = mlprof__source_nvml.sample(st, &c, rows, 64, why, sizeof why);
    if (n < 0) {
      failed++;
      break; /* what the sampler does: close, never call again */
    }
    CHECK_EQ(n, 2);
    ok++;
  }
  CHECK_EQ(ok, 2);
  CHECK_EQ(failed, 1);
  CHECK_STR(why, "GPU 1 lost: GPU is lost");
  nv_close(st);
  /* Opened afresh, the script starts over. */
  CHECK_EQ(nv_open(&st, why, sizeof why), 0);
  mlprof__sample_ctx c = ctx_at("", NULL, 0, 1, 1);
  CHECK_EQ(mlprof__source_nvml.sample(st, &c, rows, 64, why, sizeof why), 2);
  nv_close(st);
  no_fake();
  rm_tree(root);
}

/* ---- the list
 * ------------------------------------------------------------------ */

static void test_sources_list(void) {
  static const char *const want[] = {"proc", "system", "thermal", "energy",
                                     "nvml"};
  CHECK_EQ(mlprof__nsources, 5);
  for (size_t i = 0; i < mlprof__nsources; i++) {
    CHECK_STR(mlprof__sources[i]->name, want[i]);
    CHECK(mlprof__sources[i]->open && mlprof__sources[i]->sample &&
          mlprof__sources[i]->close);
  }
  /* On an empty root every source either says why it cannot run, or runs
   * and finds nothing. */
  const char *root = fixture();
  nvml_lib("/nonexistent/libnvidia-ml.so.1");
  pid_t pid = 12345;
  for (size_t i = 0; i < mlprof__nsources; i++) {
    void *st = NULL;
    char why[256] = "";
    if (mlprof__sources[i]->open(&st, root, why, sizeof why) != 0) {
      if (!why[0]) TEST_FAIL("%s: no reason", mlprof__sources[i]->name);
      continue;
    }
    mlprof__sample_ctx c = ctx_at(root, &pid, 1, 1, 0);
    CHECK_EQ(mlprof__sources[i]->sample(st, &c, rows, 64, why, sizeof why), 0);
    mlprof__sources[i]->close(st);
  }
  no_fake();
  rm_tree(root);
}

/* ---- the sampler and its sink ------------------------------------------- */

/* A sink of the test's own: the sampler reaches the recorder only through
 * one, so any consumer can take its rows. */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int nsources, nvml_off, rows, system_rows, bad_time;
  uint64_t clock;
} got = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static uint64_t sink_now(void) {
  return __atomic_add_fetch(&got.clock, 1000, __ATOMIC_RELAXED);
}

static void sink_rows(void *ctx, uint64_t t, const mlprof__row *r, int n) {
  pthread_mutex_lock(&got.lock);
  if (ctx != &got || t == 0 || t % 1000 != 0) got.bad_time++;
  for (int i = 0; i < n; i++)
    got.system_rows += r[i].subject == MLPROF__SUBJECT_SYSTEM;
  got.rows += n;
  pthread_cond_signal(&got.cond);
  pthread_mutex_unlock(&got.lock);
}

static void sink_source(void *ctx, const char *name, int available,
                        const char *reason) {
  pthread_mutex_lock(&got.lock);
  got.nsources++;
  if (strcmp(name, "nvml") == 0 && !available && strstr(reason, "switched off"))
    got.nvml_off = 1;
  pthread_mutex_unlock(&got.lock);
}

static void test_sampler_sink(void) {
  mlprof__sample_sink sink = {
      .ctx = &got, .now = sink_now, .rows = sink_rows, .source = sink_source};
  mlprof__sampler *s;
  CHECK_EQ(mlprof__sampler_start(&s, &sink, 5, 0, "", 1), 0);
  /* Waits for rows from two ticks at least; the bound only keeps a broken
   * sampler from hanging the run. */
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 30;
  pthread_mutex_lock(&got.lock);
  while (got.system_rows < 2 &&
         pthread_cond_timedwait(&got.cond, &got.lock, &until) == 0) {
  }
  pthread_mutex_unlock(&got.lock);
  mlprof__sampler_stop(s);
  CHECK_EQ(got.nsources, mlprof__nsources);
  CHECK_EQ(got.nvml_off, 1);
  CHECK(got.system_rows >= 2);
  CHECK_EQ(got.bad_time, 0);
}

const mlprof_test mlprof_tests_sample[] = {
    {"read_at", test_read_at},
    {"read_held", test_read_held},
    {"sampler_sink", test_sampler_sink},
    {"proc_tree_fixture", test_proc_tree_fixture},
    {"proc_tree_children", test_proc_tree_children},
    {"proc_tree_live", test_proc_tree_live},
    {"proc_fixture", test_proc_fixture},
    {"proc_runq_fixture", test_proc_runq_fixture},
    {"proc_no_permission", test_proc_no_permission},
    {"proc_live", test_proc_live},
    {"system_fixture", test_system_fixture},
    {"system_no_sysblock", test_system_no_sysblock},
    {"system_live", test_system_live},
    {"thermal_hwmon", test_thermal_hwmon},
    {"thermal_zone", test_thermal_zone},
    {"thermal_unavailable", test_thermal_unavailable},
    {"energy_rapl", test_energy_rapl},
    {"energy_unavailable", test_energy_unavailable},
    {"nvml_missing", test_nvml_missing},
    {"nvml_no_gpu_and_init_failure", test_nvml_no_gpu_and_init_failure},
    {"nvml_one_gpu", test_nvml_one_gpu},
    {"nvml_four_gpus", test_nvml_four_gpus},
    {"nvml_unsupported_everywhere", test_nvml_unsupported_everywhere},
    {"nvml_gpu_lost", test_nvml_gpu_lost},
    {"sources_list", test_sources_list},
    {NULL, NULL},
};
