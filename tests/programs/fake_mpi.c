/* An MPI library of neither ABI mlprof knows, for tests/e2e/test_mpi.py:
 * PMPI_Init, PMPI_Barrier and PMPI_Finalize (and the MPI_* names as aliases,
 * as real MPI libraries define them) with int handles, counting barriers. */
static int barriers;

int PMPI_Init(int *argc, char ***argv) { return 0; }
int PMPI_Barrier(int comm) { return comm == 7 ? (barriers++, 0) : 1; }
int PMPI_Finalize(void) { return 0; }
int fake_mpi_barriers(void) { return barriers; }

int MPI_Init(int *argc, char ***argv) __attribute__((weak, alias("PMPI_Init")));
int MPI_Barrier(int comm) __attribute__((weak, alias("PMPI_Barrier")));
int MPI_Finalize(void) __attribute__((weak, alias("PMPI_Finalize")));
