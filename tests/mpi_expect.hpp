// Checks for the MPI test programs, which run under mpiexec without GoogleTest: EXPECT counts a
// failed check and prints it with the rank, file and line; mpi_test_failures() sums the counts
// over the world, so every rank returns the same exit status.
#pragma once
#include <mpi.h>

#include <cstdio>

#include "comm/mpi_check.hpp"

namespace mpitron::mpi_test {
inline int g_rank = 0, g_size = 1, g_failures = 0;

// Failed checks of every rank; call on every rank.
inline int mpi_test_failures() {
  int failures = g_failures;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  return failures;
}
}  // namespace mpitron::mpi_test

#define EXPECT(cond, ...)                                                                     \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      ++::mpitron::mpi_test::g_failures;                                                      \
      std::fprintf(stderr, "[rank %d] %s:%d check failed: %s: ", ::mpitron::mpi_test::g_rank, \
                   __FILE__, __LINE__, #cond);                                                \
      std::fprintf(stderr, __VA_ARGS__);                                                      \
      std::fprintf(stderr, "\n");                                                             \
    }                                                                                         \
  } while (0)
