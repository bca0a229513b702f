#include "check.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MPITRON_LEAK_CHECK 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define MPITRON_LEAK_CHECK 1
#endif
#ifdef MPITRON_LEAK_CHECK
#include <sanitizer/lsan_interface.h>
#endif

namespace mpitron {

std::string wrong_kind_of_path(const std::string& path, bool want_folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (path.empty() || !fs::exists(st)) return "does not exist";
  if (want_folder && !fs::is_directory(st)) return "is a file, not a folder";
  if (!want_folder && fs::is_directory(st)) return "is a folder, not a file";
  return "";
}

int message_rank() {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (!up || down) return -1;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

void fail_at(const char* file, int line, const std::string& call, const std::string& reason) {
  std::fprintf(stderr, "[rank %d] %s:%d %s: %s\n", message_rank(), file, line, call.c_str(),
               reason.c_str());
  std::fflush(stderr);
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (up && !down) MPI_Abort(MPI_COMM_WORLD, 2);
  std::abort();
}

void init_mpi(int* argc, char*** argv) {
#ifdef MPITRON_LEAK_CHECK
  __lsan::ScopedDisabler not_leaks;
#endif
  MPI_Init(argc, argv);
}

void finalize_mpi() {
#ifdef MPITRON_LEAK_CHECK
  __lsan_do_leak_check();  // exits with the report on a leak; later checks (at exit) are no-ops
#endif
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (up && !down) MPI_Finalize();
}

}  // namespace mpitron
