/* A late sender for tests/e2e/test_mpi_p2p.py, run on 4 ranks under
 * `mlprof run`: `mpi_p2p STEPS MS recv|irecv`. Each of STEPS steps is 2 ms
 * of work, then a ring of 1000-byte messages with tag 3 (rank r sends to
 * r + 1 and receives from r - 1; even ranks send first), then a barrier.
 * Rank 1 works MS ms longer before its part of the ring, so rank 2 waits
 * for its message about MS ms a step. With irecv, every receive is an
 * MPI_Irecv completed by MPI_Wait. Steps are marked through the preloaded
 * libmlprof when there is one. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, ms % 1000 * 1000000L};
  nanosleep(&t, NULL);
}

static void receive(char *buf, int from, int nb) {
  if (nb) {
    MPI_Request req;
    MPI_Irecv(buf, 1000, MPI_CHAR, from, 3, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  } else {
    MPI_Recv(buf, 1000, MPI_CHAR, from, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  if (argc != 4) return 2;
  int steps = atoi(argv[1]), ms = atoi(argv[2]);
  int nb = !strcmp(argv[3], "irecv");
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  void (*step)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "mlprof_step");
  void (*step_end)(void) =
      (void (*)(void))dlsym(RTLD_DEFAULT, "mlprof_step_end");
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  static char out[1000], in[1000];
  for (int i = 0; i < steps; i++) {
    if (step) step();
    sleep_ms(2 + (rank == 1 ? ms : 0));
    if (rank % 2 == 0) {
      MPI_Send(out, 1000, MPI_CHAR, next, 3, MPI_COMM_WORLD);
      receive(in, prev, nb);
    } else {
      receive(in, prev, nb);
      MPI_Send(out, 1000, MPI_CHAR, next, 3, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (step_end) step_end();
  MPI_Finalize();
  return 0;
}
