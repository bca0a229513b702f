// Process-level MPI helpers: agreeing on failures before any collective work.
#include "comm/world.hpp"

namespace mpitron::comm {

bool all_ok(bool ok, MPI_Comm comm) {
  int local = ok ? 1 : 0, global = 0;
  MPI_CHECK(MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MIN, comm));
  return global == 1;
}

}  // namespace mpitron::comm
