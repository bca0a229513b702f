/* Point-to-point transfer time between ranks 0 and 1 by message size (ping-pong, half the round
 * trip): "bytes median minimum" lines (seconds over the repetitions) for bench/network_model.sh.
 * Usage: pingpong [reps] [bytes...] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) fprintf(stderr, "pingpong: run it on 2 ranks, not %d\n", size);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int reps = argc > 1 ? atoi(argv[1]) : 20;
  double* times = malloc(sizeof(double) * (size_t)reps);
  for (int a = 2; a < argc; ++a) {
    const long bytes = atol(argv[a]);
    char* buf = calloc((size_t)bytes + 1, 1);
    for (int r = -2; r < reps; ++r) { /* two warm-up round trips */
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      if (rank == 0) {
        MPI_Send(buf, (int)bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(buf, (int)bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, (int)bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
      }
      if (r >= 0) times[r] = (MPI_Wtime() - t0) / 2;
    }
    if (rank == 0) {
      qsort(times, (size_t)reps, sizeof(double), cmp);
      printf("%ld %.9g %.9g\n", bytes, times[reps / 2], times[0]);
      fflush(stdout);
    }
    free(buf);
  }
  free(times);
  MPI_Finalize();
  return 0;
}
