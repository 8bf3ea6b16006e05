/* The recording library in hostile surroundings, for
 * tests/e2e/test_security_record.py. Linked statically, so that a setuid
 * copy needs no library path from its caller.
 *
 *   record_probe zones N         N zones "z" (profile from MLPROF_OUTPUT)
 *   record_probe daemon FILE N   N zones "before"; then, like a daemon, closes
 *                                every descriptor but 0-2, opens FILE and
 *                                makes it every descriptor 3..31, writes to
 *                                it, records N zones "after", writes again
 *   record_probe privileged DIR  starts its own session into DIR/, sampling
 *                                every 10 ms (so NVML is tried), records
 *                                zones for 200 ms; prints the profile's path */
#include <fcntl.h>
#include <mlprof.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void zones(const char *name, long n) {
  for (long i = 0; i < n; i++) {
    mlprof_zone_begin(name);
    mlprof_zone_end();
  }
}

static int daemon_like(const char *file, long n) {
  zones("before", n);
  if (mlprof_flush() != 0) return 1;
  for (int fd = 3; fd < 1024; fd++) close(fd);
  int own = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  if (own < 0) return 1;
  for (int fd = 3; fd < 32; fd++)
    if (fd != own && dup2(own, fd) < 0) return 1;
  static const char first[] = "daemon line 1\n", second[] = "daemon line 2\n";
  if (write(own, first, sizeof first - 1) < 0) return 1;
  zones("after", n);
  if (mlprof_flush() != 0) return 1; /* the writer meets the descriptor */
  if (write(own, second, sizeof second - 1) < 0) return 1;
  return 0;
}

static int privileged(const char *dir) {
  char out[4096];
  snprintf(out, sizeof out, "%s/", dir);
  mlprof_config c;
  mlprof_config_init(&c);
  c.output = out;
  c.sample_interval_ms = 10;
  int rc = mlprof_init(&c);
  if (rc != 0) {
    fprintf(stderr, "record_probe: %s\n", mlprof_strerror(rc));
    return 1;
  }
  printf("%s\n", mlprof_output_path());
  struct timespec ms = {0, 1000000};
  for (int i = 0; i < 200; i++) {
    MLPROF_ZONE("tick");
    nanosleep(&ms, NULL);
  }
  return mlprof_shutdown() != 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "zones") == 0) {
    zones("z", atol(argv[2]));
    return 0;
  }
  if (argc == 4 && strcmp(argv[1], "daemon") == 0)
    return daemon_like(argv[2], atol(argv[3]));
  if (argc == 3 && strcmp(argv[1], "privileged") == 0)
    return privileged(argv[2]);
  fprintf(stderr,
          "usage: record_probe zones N | daemon FILE N | privileged DIR\n");
  return 2;
}
