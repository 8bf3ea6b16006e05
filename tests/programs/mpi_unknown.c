/* A program of the MPI library tests/programs/fake_mpi.c, whose ABI mlprof
 * does not know: 3 barriers on its communicator 7, then prints how many
 * barriers that library saw (3 when every call reached it). */
#include <stdio.h>

int MPI_Init(int *argc, char ***argv);
int MPI_Barrier(int comm);
int MPI_Finalize(void);
int fake_mpi_barriers(void);

int main(int argc, char **argv) {
  if (MPI_Init(&argc, &argv)) return 1;
  for (int i = 0; i < 3; i++)
    if (MPI_Barrier(7)) return 1;
  if (MPI_Finalize()) return 1;
  printf("%d\n", fake_mpi_barriers());
  return 0;
}
