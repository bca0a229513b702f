#include "check.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

namespace mpitron {

int message_rank() {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (!up || down) return -1;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

void fail_at(const char* file, int line, const std::string& call, const std::string& reason) {
  std::fprintf(stderr, "[rank %d] %s:%d %s: %s\n", message_rank(), file, line, call.c_str(),
               reason.c_str());
  std::fflush(stderr);
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (up && !down) MPI_Abort(MPI_COMM_WORLD, 2);
  std::abort();
}

}  // namespace mpitron
