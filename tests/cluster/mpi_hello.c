/* Each rank of an MPI job prints its host; a sum over all ranks checks that they reached each other. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  char host[256] = "";
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  gethostname(host, sizeof host - 1);
  int one = rank + 1, sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  printf("rank %d of %d on %s sum %d\n", rank, size, host, sum);
  MPI_Finalize();
  return sum == size * (size + 1) / 2 ? 0 : 1;
}
