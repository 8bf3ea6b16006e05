/* A parent that records N "work" zones, makes a child without the C
 * library's fork handlers, waits for it and records N more; the child
 * returns through exit(), as programs do (tests/e2e/test_bare_child.py):
 *   bare_child HOW N      HOW: _Fork, clone, sys_fork, sys_clone, vfork
 *   bare_child chdir N    a plain fork() whose child enters a directory of
 *                         its own (./elsewhere, made here) and records N
 *                         "child" zones: its profile stays where the
 *                         parent's output was, not relative to the child.
 * A child made without fork handlers has no session of its own: it records
 * nothing, and must end as it would without mlprof. Prints the child's exit
 * status. */
#include <mlprof.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

pid_t _Fork(void); /* glibc 2.34 */

static void work(long n) {
  for (long i = 0; i < n; i++) {
    MLPROF_ZONE("work");
  }
}

static void child_work(long n) {
  for (long i = 0; i < n; i++) {
    MLPROF_ZONE("child");
  }
}

static int child_main(void *arg) {
  (void)arg;
  exit(0);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: bare_child HOW N\n");
    return 2;
  }
  const char *how = argv[1];
  long n = atol(argv[2]);
  work(n);
  fflush(stdout);
  pid_t pid;
  static char stack[256 << 10];
  if (strcmp(how, "_Fork") == 0) {
    pid = _Fork();
  } else if (strcmp(how, "clone") == 0) {
    pid = clone(child_main, stack + sizeof stack, SIGCHLD, NULL);
  } else if (strcmp(how, "sys_fork") == 0) {
    pid = (pid_t)syscall(SYS_fork);
  } else if (strcmp(how, "sys_clone") == 0) {
    pid = (pid_t)syscall(SYS_clone, SIGCHLD, 0, NULL, NULL, 0);
  } else if (strcmp(how, "vfork") == 0) {
    pid = vfork();
  } else if (strcmp(how, "chdir") == 0) {
    if (mkdir("elsewhere", 0755) != 0) return 3;
    pid = fork();
    if (pid == 0) {
      if (chdir("elsewhere") != 0) _exit(3);
      child_work(n);
      exit(0);
    }
  } else {
    fprintf(stderr, "bare_child: unknown HOW %s\n", how);
    return 2;
  }
  if (pid < 0) {
    perror("bare_child");
    return 3;
  }
  if (pid == 0) exit(0);
  int status;
  if (waitpid(pid, &status, 0) != pid) return 3;
  work(n);
  printf("child %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return 0;
}
