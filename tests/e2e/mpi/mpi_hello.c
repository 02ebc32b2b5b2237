/* An MPI program as a user writes one, for the tests that start it under muster: it says its
 * rank, the world's size and its rank among the ranks of its node, checks an all-reduce
 * element by element, and with an argument N, rank N calls MPI_Abort(MPI_COMM_WORLD, 7). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size, local;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local);
  enum { kCount = 4096 };
  static double mine[kCount], sums[kCount];
  for (int i = 0; i < kCount; ++i) mine[i] = rank + i;
  MPI_Allreduce(mine, sums, kCount, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  long wrong = 0;
  for (int i = 0; i < kCount; ++i) wrong += sums[i] != (double)size * (size - 1) / 2 + (double)size * i;
  if (argc > 1 && atoi(argv[1]) == rank) MPI_Abort(MPI_COMM_WORLD, 7);
  printf("rank %d of %d local %d wrong %ld\n", rank, size, local, wrong);
  MPI_Finalize();
  return 0;
}
