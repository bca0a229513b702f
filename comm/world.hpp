// Process-level MPI helpers.
#pragma once
#include "comm/mpi_check.hpp"

namespace mpitron::comm {

// True on every rank iff ok is true on every rank of comm (so all ranks fail together, no hang).
bool all_ok(bool ok, MPI_Comm comm);

}  // namespace mpitron::comm
