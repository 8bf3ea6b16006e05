/* Records one "tick" zone per millisecond and prints how many ticks have
 * ended, so a test can SIGKILL it and compare with what the profile kept. */
#include <mlprof.h>
#include <stdio.h>
#include <time.h>

int main(void) {
  struct timespec ms = {0, 1000000};
  MLPROF_ZONE("whole_run"); /* never ends: the process is killed */
  for (long i = 1;; i++) {
    {
      MLPROF_ZONE("tick");
      nanosleep(&ms, NULL);
    }
    printf("%ld\n", i);
    fflush(stdout);
  }
}
