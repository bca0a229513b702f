// A singleton MPI for a GoogleTest binary whose code under test calls MPI (HDF5 over
// MPI_COMM_SELF): initialised before the first test, finalised after the last.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>

#include "base/check.hpp"

namespace mpitron::testing {

class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    int up = 0;
    MPI_Initialized(&up);
    if (!up) init_mpi(nullptr, nullptr);
  }
  void TearDown() override { finalize_mpi(); }
};

}  // namespace mpitron::testing
