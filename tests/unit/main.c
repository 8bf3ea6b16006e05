/* Runs every unit test, or those whose "group/name" contains an argument.
 * As libuv's runner does, each test runs in a process of its own with a
 * deadline, so a crash or a hang fails that test alone and the run goes on;
 * the last line is "N passed, N failed". MLPROF_TEST_TIMEOUT sets the
 * deadline in seconds (default 60). */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#define DEFAULT_TIMEOUT_S 60

int mlprof_test_failed;

static const struct {
  const char *group;
  const mlprof_test *tests;
} groups[] = {
#define MLPROF__GROUP_ENTRY(g) {#g, mlprof_tests_##g},
    MLPROF_TEST_GROUPS(MLPROF__GROUP_ENTRY)
#undef MLPROF__GROUP_ENTRY
};

/* The runner's own tests, each failing in one of the ways the runner must
 * report; run only when named in full (tests/e2e/test_unit_runner.py). */
static void selftest_crash(void) {
  /* A segmentation fault as a signal: a null store would be caught by
   * UBSan before it faults in the sanitizer build. */
  raise(SIGSEGV);
}

static void selftest_hang(void) {
  for (;;) pause();
}

static void selftest_fail(void) { CHECK_EQ(1 + 1, 3); }

static const mlprof_test selftests[] = {{"crash", selftest_crash},
                                        {"hang", selftest_hang},
                                        {"fail", selftest_fail},
                                        {NULL, NULL}};

static int selected(const char *full, int argc, char **argv) {
  if (argc < 2) return 1;
  for (int i = 1; i < argc; i++)
    if (strstr(full, argv[i])) return 1;
  return 0;
}

static int named(const char *full, int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(full, argv[i]) == 0) return 1;
  return 0;
}

/* Runs t in a child process; returns 1 when it passed, 0 when it failed,
 * after printing which way on stdout. */
static int run_one(const mlprof_test *t, const char *full, unsigned timeout_s) {
  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, &old);
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    sigprocmask(SIG_SETMASK, &old, NULL);
    printf("FAIL %s: cannot fork: %s\n", full, strerror(errno));
    return 0;
  }
  if (pid == 0) {
    setpgid(0, 0); /* a timeout then ends what the test started too */
    sigprocmask(SIG_SETMASK, &old, NULL);
    t->fn();
    fflush(NULL);
    _exit(mlprof_test_failed ? 1 : 0);
  }
  setpgid(pid, pid);
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += timeout_s;
  int status = 0, timed_out = 0;
  pid_t got;
  while ((got = waitpid(pid, &status, WNOHANG)) == 0) {
    struct timespec now, left;
    clock_gettime(CLOCK_MONOTONIC, &now);
    left.tv_sec = deadline.tv_sec - now.tv_sec;
    left.tv_nsec = deadline.tv_nsec - now.tv_nsec;
    if (left.tv_nsec < 0) {
      left.tv_sec--;
      left.tv_nsec += 1000000000L;
    }
    if (left.tv_sec < 0) {
      timed_out = 1;
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      while ((got = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
      }
      break;
    }
    /* Wakes when the test's process ends, or at the deadline. */
    sigtimedwait(&chld, NULL, &left);
  }
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (got < 0) {
    printf("FAIL %s: waitpid: %s\n", full, strerror(errno));
    return 0;
  }
  if (timed_out) {
    printf("FAIL %s: timed out after %u s\n", full, timeout_s);
    return 0;
  }
  if (WIFSIGNALED(status)) {
    printf("FAIL %s: killed by signal %d (%s)\n", full, WTERMSIG(status),
           strsignal(WTERMSIG(status)));
    return 0;
  }
  if (WEXITSTATUS(status) == 1) {
    printf("FAIL %s: assertion failed (above)\n", full);
    return 0;
  }
  if (WEXITSTATUS(status)) {
    printf("FAIL %s: exited with status %d\n", full, WEXITSTATUS(status));
    return 0;
  }
  printf("ok   %s\n", full);
  return 1;
}

int main(int argc, char **argv) {
  unsigned timeout_s = DEFAULT_TIMEOUT_S;
  const char *env = getenv("MLPROF_TEST_TIMEOUT");
  if (env && *env) {
    char *end;
    unsigned long v = strtoul(env, &end, 10);
    if (*end || !v || v > 86400 || *env == '-') {
      fprintf(stderr,
              "mlprof_unit: MLPROF_TEST_TIMEOUT wants seconds (1 to 86400), "
              "not '%s'\n",
              env);
      return 2;
    }
    timeout_s = (unsigned)v;
  }
  int passed = 0, failed = 0;
  char full[256];
  for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
    for (const mlprof_test *t = groups[g].tests; t->name; t++) {
      snprintf(full, sizeof full, "%s/%s", groups[g].group, t->name);
      if (!selected(full, argc, argv)) continue;
      if (run_one(t, full, timeout_s))
        passed++;
      else
        failed++;
      fflush(stdout);
    }
  }
  for (const mlprof_test *t = selftests; t->name; t++) {
    snprintf(full, sizeof full, "selftest/%s", t->name);
    if (!named(full, argc, argv)) continue;
    if (run_one(t, full, timeout_s))
      passed++;
    else
      failed++;
    fflush(stdout);
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed || passed == 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
