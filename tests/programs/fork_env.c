/* A forked child whose first recorded allocation comes while its
 * environment cannot be read, as inside setenv's realloc of the array
 * (MPICH's launcher putenv()s between fork and exec): the child's profile
 * starts there and ends at _exit, both from the copy of the environment its
 * fork handler took (src/base/env.c). The parent sets RANK and WORLD_SIZE
 * before the fork: the child's profile has them. */
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int main(void) {
  setenv("RANK", "5", 1);
  setenv("WORLD_SIZE", "8", 1);
  char **unreadable =
      mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (unreadable == MAP_FAILED) return 2;
  pid_t pid = fork();
  if (pid == 0) {
    environ = unreadable;
    volatile char *p = malloc(1000); /* the child's first event */
    if (!p) _exit(3);
    p[0] = 1;
    _exit(0);
  }
  int status;
  if (waitpid(pid, &status, 0) != pid) return 4;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
