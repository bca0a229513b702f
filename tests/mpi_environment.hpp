// A singleton MPI for a GoogleTest binary whose code under test calls MPI (HDF5 over
// MPI_COMM_SELF): initialised before the first test, finalised after the last.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>

namespace mpitron::testing {

class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    int up = 0;
    MPI_Initialized(&up);
    if (!up) MPI_Init(nullptr, nullptr);
  }
  void TearDown() override {
    int down = 0;
    MPI_Finalized(&down);
    if (!down) MPI_Finalize();
  }
};

}  // namespace mpitron::testing
