/* The calls whose recording depends on the MPI's ABI (src/intercept/mpi.c),
 * for tests/e2e/test_mpi.py, on 2 ranks: MPI_IN_PLACE, MPI_STATUS_IGNORE,
 * MPI_ANY_SOURCE, MPI_PROC_NULL, and request arrays completed by
 * MPI_Testall. Every value here is what the test expects. */
#include <mpi.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, other;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  other = 1 - rank;
  static int all[6], in[4], out[4];
  static double x, y;
  /* In place: the send count is ignored; 3 ints are this rank's part. */
  all[3 * rank] = rank;
  MPI_Allgather(MPI_IN_PLACE, 12345, MPI_DOUBLE, all, 3, MPI_INT,
                MPI_COMM_WORLD);
  /* 16 bytes each way, the status ignored, from any source, any tag. */
  MPI_Sendrecv(out, 4, MPI_INT, other, 5, in, 4, MPI_INT, MPI_ANY_SOURCE,
               MPI_ANY_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  /* A receive from any source, a send to no one, both done by Testall. */
  MPI_Request reqs[2];
  MPI_Irecv(&y, 1, MPI_DOUBLE, MPI_ANY_SOURCE, 6, MPI_COMM_WORLD, &reqs[0]);
  MPI_Isend(&x, 1, MPI_DOUBLE, MPI_PROC_NULL, 6, MPI_COMM_WORLD, &reqs[1]);
  MPI_Send(&x, 1, MPI_DOUBLE, other, 6, MPI_COMM_WORLD);
  for (int done = 0; !done;) MPI_Testall(2, reqs, &done, MPI_STATUSES_IGNORE);
  MPI_Finalize();
  return all[3 * other] == other ? 0 : 1;
}
