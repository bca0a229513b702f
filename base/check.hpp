// Failure reporting shared by every library wrapper: one message, naming rank, file, line and call.
// The per-library macros (MPI_CHECK in comm/, H5_CHECK in io/, CUDA_CHECK in src/cuda/) build on
// fail_at(); MPI_Abort is used when MPI is up so a rank failing alone never leaves others hanging.
#pragma once
#include <stdexcept>
#include <string>

namespace mpitron {

// Thrown for bad user input (files, flags, configs): the CLI prints what() as one line, exit 1.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What is wrong with a path where a file (want_folder false) or a folder is expected: "" when
// nothing, else "does not exist", "is a folder, not a file" or "is a file, not a folder".
std::string wrong_kind_of_path(const std::string& path, bool want_folder);

// Rank of this process for messages; -1 before MPI is initialised.
int message_rank();

// Prints "[rank r] file:line call: reason" to stderr and aborts the job (MPI_Abort if MPI is up).
[[noreturn]] void fail_at(const char* file, int line, const std::string& call,
                          const std::string& reason);

// MPI_Init and MPI_Finalize for ASan builds' leak check (LeakSanitizer), which otherwise needs its
// slow unwinder (tripling a sanitized process's run time) to attribute Open MPI's own leftovers:
// what MPI_Init allocates is never counted as a leak (some of it comes from components it loads
// and unloads again), and the check runs before MPI_Finalize unloads the rest. Elsewhere these
// are MPI_Init, and MPI_Finalize where MPI is up and not yet finalised.
void init_mpi(int* argc, char*** argv);
void finalize_mpi();

}  // namespace mpitron

#define MPITRON_REQUIRE(cond, msg)                                   \
  do {                                                               \
    if (!(cond)) ::mpitron::fail_at(__FILE__, __LINE__, #cond, msg); \
  } while (0)
