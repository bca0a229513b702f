// Process-level MPI helpers: agreeing on failures and decisions before any collective work, so a
// problem one rank sees is reported by every rank instead of leaving the others waiting.
#pragma once
#include <string>
#include <vector>

#include "comm/mpi_check.hpp"

namespace mpitron::comm {

// True on every rank iff ok is true on every rank of comm (so all ranks fail together, no hang).
bool all_ok(bool ok, MPI_Comm comm);

// Root's string, on every rank of comm.
std::string broadcast_string(const std::string& s, int root, MPI_Comm comm);

// Throws UsageError(error) on every rank of comm when `error` is non-empty on root (the other
// ranks' `error` is ignored): for checks only one rank can make, such as files it alone opens.
void throw_on_all_ranks(const std::string& error, int root, MPI_Comm comm);

// Collective: throws UsageError on every rank of comm, with the lowest failing rank's message,
// when `error` is non-empty on any rank: for checks that may fail on some ranks only (a node
// without a GPU, a GPU out of memory), so that no rank goes on to wait for the others.
void throw_first_error(const std::string& error, MPI_Comm comm);

// throw_first_error for checks of a rank's own view of its node (a file missing on one node):
// where some ranks but not all failed, the message names the first failing rank and its host.
void throw_first_error_naming_host(std::string error, MPI_Comm comm);

// Collective: every rank's host name (MPI_Get_processor_name), indexed by rank in comm.
std::vector<std::string> gather_host_names(MPI_Comm comm);

}  // namespace mpitron::comm
