/* A parent that forks a worker (as a DataLoader does); the worker starts a
 * thread of its own. Both processes record zones. */
#include <mlprof.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static void *child_thread(void *arg) {
  mlprof_thread_name("child-helper");
  for (int i = 0; i < 50; i++) {
    MLPROF_ZONE("child_thread_work");
  }
  return NULL;
}

int main(void) {
  for (int i = 0; i < 10; i++) {
    MLPROF_ZONE("parent_before_fork");
  }
  pid_t pid;
  {
    MLPROF_ZONE(
        "spawn"); /* open across fork(): the child must not inherit it */
    pid = fork();
  }
  if (pid == 0) {
    for (int i = 0; i < 20; i++) {
      MLPROF_ZONE("child_work");
    }
    pthread_t th;
    pthread_create(&th, NULL, child_thread, NULL);
    pthread_join(th, NULL);
    return 0;
  }
  int status;
  waitpid(pid, &status, 0);
  for (int i = 0; i < 5; i++) {
    MLPROF_ZONE("parent_after_fork");
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
