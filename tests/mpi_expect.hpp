// Checks for the MPI test programs, which run under mpiexec without GoogleTest: EXPECT counts a
// failed check and prints it with the rank, file and line; mpi_test_failures() sums the counts
// over the world, so every rank returns the same exit status.
#pragma once
#include <mpi.h>

#include <cstdio>
#include <filesystem>

#include "comm/mpi_check.hpp"

namespace mpitron::mpi_test {
inline int g_rank = 0, g_size = 1, g_failures = 0;

// Failed checks of every rank; call on every rank.
inline int mpi_test_failures() {
  int failures = g_failures;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  return failures;
}

// The end of a test program's checks: sums the failures, rank 0 prints the verdict and removes
// the work folder when every check passed. Returns the exit status, the same on every rank.
inline int mpi_test_finish(const char* name, const std::filesystem::path& work) {
  const int failures = mpi_test_failures();
  if (g_rank == 0) {
    if (failures == 0) std::filesystem::remove_all(work);
    std::printf("%s on %d ranks: %s (%d failed checks)\n", name, g_size,
                failures == 0 ? "OK" : "FAILED", failures);
  }
  return failures == 0 ? 0 : 1;
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
