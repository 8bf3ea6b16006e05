/* A program that closes every descriptor it may have inherited, as daemons
 * and subprocess's children do, then writes a file of its own and checks
 * every byte of it (tests/e2e/test_descriptors.py). Under mlprof, the
 * library must never close, read or write a number the program may own:
 *   close_all FILE DELAY_US ROUNDS [range]
 * waits DELAY_US, then ROUNDS times: closes 1023..3 one by one (with
 * "range": close_range(3, ~0U, 0)), opens FILE, writes it in 64 pieces
 * with a pause between them, reads it back and checks that it holds no
 * descriptor but 0, 1, 2 and FILE's. Exit 0 when every byte was there, 1 with
 * what was wrong. Linked with libmlprof: run under `mlprof run` (preloaded
 * too) or started by MLPROF_OUTPUT; it records a zone per round. */
#include <errno.h>
#include <fcntl.h>
#include <mlprof.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PIECE 1024
#define PIECES 64

static int fail(const char *what, int round) {
  fprintf(stderr, "close_all: round %d: %s (%s)\n", round, what,
          strerror(errno));
  return 1;
}

/* Descriptors the program holds besides 0, 1, 2, found as test suites and
 * sandboxes look (every number tried). */
static int others(void) {
  int n = 0;
  for (int fd = 3; fd < 1024; fd++)
    if (fcntl(fd, F_GETFD) >= 0) n++;
  return n;
}

static unsigned char expect(int round, size_t i) {
  return (unsigned char)(i * 131u + (unsigned)round * 7u + i / PIECE);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: close_all FILE DELAY_US ROUNDS [range]\n");
    return 2;
  }
  const char *path = argv[1];
  long delay = atol(argv[2]);
  int rounds = atoi(argv[3]);
  int range = argc > 4 && strcmp(argv[4], "range") == 0;
  if (delay > 0) usleep((useconds_t)delay);
  static unsigned char buf[PIECE * PIECES], back[PIECE * PIECES];
  for (int r = 0; r < rounds; r++) {
    MLPROF_ZONE("round"); /* the writer has something to write */
    if (range) {
      if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0)
        return fail("close_range", r);
    } else {
      /* Downwards: the number the program's open gets next (the lowest) is
       * closed last, just before that open. */
      for (int fd = 1023; fd >= 3; fd--) close(fd);
    }
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return fail("open", r);
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = expect(r, i);
    for (int p = 0; p < PIECES; p++) {
      if (write(fd, buf + p * PIECE, PIECE) != PIECE) return fail("write", r);
      if (p % 8 == 0) usleep(100); /* let the library's threads run */
      sched_yield();
    }
    if (lseek(fd, 0, SEEK_SET) != 0) return fail("lseek", r);
    ssize_t got = read(fd, back, sizeof back);
    if (got != (ssize_t)sizeof back) {
      fprintf(stderr, "close_all: round %d: read %zd of %zu bytes (%s)\n", r,
              got, sizeof back, got < 0 ? strerror(errno) : "short");
      return 1;
    }
    if (memcmp(buf, back, sizeof buf) != 0) return fail("bytes differ", r);
    int n = others();
    if (n != 1) { /* its file, nothing else */
      fprintf(stderr, "close_all: round %d: %d descriptors open, not 1\n", r,
              n);
      return 1;
    }
    if (close(fd) != 0) return fail("close", r);
  }
  return 0;
}
