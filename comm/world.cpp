#include "comm/world.hpp"

#include <fmt/format.h>

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

void throw_first_error_naming_host(std::string error, MPI_Comm comm) {
  if (!all_ok(!error.empty(), comm) && !error.empty()) {
    int rank = 0;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    error = fmt::format("on host {} (rank {}), not on every rank: {}",
                        gather_host_names(MPI_COMM_SELF).front(), rank, error);
  }
  throw_first_error(error, comm);
}

std::vector<std::string> gather_host_names(MPI_Comm comm) {
  int size = 1, len = 0;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<char> mine(MPI_MAX_PROCESSOR_NAME, '\0'), all;
  MPI_CHECK(MPI_Get_processor_name(mine.data(), &len));
  all.resize(size_t(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_CHECK(MPI_Allgather(mine.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(),
                          MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm));
  std::vector<std::string> names;
  for (int r = 0; r < size; ++r)
    names.emplace_back(all.data() + size_t(r) * MPI_MAX_PROCESSOR_NAME);
  return names;
}

}  // namespace mpitron::comm
