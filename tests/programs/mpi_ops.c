/* Known MPI operations for tests/e2e/test_mpi.py, run on 4 ranks under
 * `mlprof run`. Every count and size here is what the test expects to find
 * in each rank's profile: change them together. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* `mpi_ops straggler STEPS MS`: STEPS steps of 5 ms of work then an
 * all-reduce of 1000 doubles, rank 2 (on 2 ranks rank 0) working MS ms
 * longer each step. Through the preloaded libmlprof when there is one,
 * steps are marked and each step's work is a zone "work", which records
 * how long a rank really worked (a loaded machine wakes it late). `mpi_ops
 * istraggler STEPS MS`: the same with MPI_Iallreduce and MPI_Wait
 * (nonblocking). */
static int straggler(int steps, int ms, int nonblocking) {
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  void (*step)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "mlprof_step");
  void (*step_end)(void) =
      (void (*)(void))dlsym(RTLD_DEFAULT, "mlprof_step_end");
  void (*begin)(const char *) =
      (void (*)(const char *))dlsym(RTLD_DEFAULT, "mlprof_zone_begin");
  void (*end)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "mlprof_zone_end");
  static double d[1000], dr[1000];
  for (int i = 0; i < steps; i++) {
    if (step) step();
    if (begin) begin("work");
    long ns = (5 + (rank == 2 % size ? ms : 0)) * 1000000L;
    struct timespec t = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&t, NULL);
    if (end) end();
    if (nonblocking) {
      MPI_Request req;
      MPI_Iallreduce(d, dr, 1000, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req);
      MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else {
      MPI_Allreduce(d, dr, 1000, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
  }
  if (step_end) step_end();
  MPI_Finalize();
  return 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc == 4 &&
      (!strcmp(argv[1], "straggler") || !strcmp(argv[1], "istraggler")))
    return straggler(atoi(argv[2]), atoi(argv[3]), argv[1][0] == 'i');
  static double d[1000], dr[1000];
  static int in[1024], out[1024];
  static char text[1000];
  for (int i = 0; i < 3; i++) /* 3 x 8000 bytes */
    MPI_Allreduce(d, dr, 1000, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Bcast(in, 256, MPI_INT, 1, MPI_COMM_WORLD);                   /* 1024 */
  MPI_Reduce(d, dr, 100, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);    /* 400 */
  MPI_Allgather(in, 10, MPI_INT, out, 10, MPI_INT, MPI_COMM_WORLD); /* 40 */
  MPI_Alltoall(in, 5, MPI_INT, out, 5, MPI_INT, MPI_COMM_WORLD);    /* 4x20 */
  MPI_Allreduce(MPI_IN_PLACE, d, 50, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);

  /* A ring: 123 bytes with tag 7 to the next rank, received from any
   * source into a larger buffer. */
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  MPI_Status st;
  if (rank % 2 == 0) {
    MPI_Send(text, 123, MPI_CHAR, next, 7, MPI_COMM_WORLD);
    MPI_Recv(text, 1000, MPI_CHAR, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &st);
  } else {
    MPI_Recv(text, 1000, MPI_CHAR, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    MPI_Send(text, 123, MPI_CHAR, next, 7, MPI_COMM_WORLD);
  }

  /* Nonblocking: 64 doubles each way with tag 9, and an Iallreduce. */
  MPI_Request reqs[3];
  MPI_Irecv(dr, 64, MPI_DOUBLE, prev, 9, MPI_COMM_WORLD, &reqs[0]);
  MPI_Isend(d, 64, MPI_DOUBLE, next, 9, MPI_COMM_WORLD, &reqs[1]);
  MPI_Iallreduce(in, out, 32, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &reqs[2]);
  MPI_Waitall(3, reqs, MPI_STATUSES_IGNORE);

  /* Even and odd ranks apart: 16 doubles on each half. */
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  MPI_Allreduce(d, dr, 16, MPI_DOUBLE, MPI_SUM, half);
  MPI_Comm_free(&half);
  MPI_Finalize();
  return 0;
}
