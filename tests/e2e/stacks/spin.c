/* An MPICH job that hangs with one rank busy: rank 5 spins in a loop of its own while the
 * other ranks wait in MPI_Barrier (MPICH polls there, so every rank is on a CPU). */
#include <mpi.h>
#include <stdio.h>

__attribute__((noinline)) static void spin_here(void) {
  volatile unsigned long turns = 0;
  for (;;) ++turns;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  printf("in place\n");
  fflush(stdout);
  if (rank == 5) spin_here();
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
