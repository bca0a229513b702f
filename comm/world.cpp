#include "comm/world.hpp"

#include <climits>

#include "base/check.hpp"

namespace mpitron::comm {

bool all_ok(bool ok, MPI_Comm comm) {
  int local = ok ? 1 : 0, global = 0;
  MPI_CHECK(MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MIN, comm));
  return global == 1;
}

std::string broadcast_string(const std::string& s, int root, MPI_Comm comm) {
  unsigned long long n = s.size();
  MPI_CHECK(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, root, comm));
  std::string out = s;
  out.resize(n);
  if (n > 0) MPI_CHECK(MPI_Bcast(out.data(), int(n), MPI_CHAR, root, comm));
  return out;
}

void throw_on_all_ranks(const std::string& error, int root, MPI_Comm comm) {
  const std::string e = broadcast_string(error, root, comm);
  if (!e.empty()) throw UsageError(e);
}

void throw_first_error(const std::string& error, MPI_Comm comm) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  const int mine = error.empty() ? INT_MAX : rank;
  int first = INT_MAX;
  MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first != INT_MAX) throw_on_all_ranks(error, first, comm);
}

}  // namespace mpitron::comm
