// MPI_CHECK: every MPI call's return code, reported as "[rank r] file:line call: reason".
#pragma once
#include <mpi.h>

#include <string>

#include "base/check.hpp"

namespace mpitron::comm {
inline std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, len);
}
}  // namespace mpitron::comm

#define MPI_CHECK(call)                                                                          \
  do {                                                                                           \
    int mpi_rc_ = (call);                                                                        \
    if (mpi_rc_ != MPI_SUCCESS)                                                                  \
      ::mpitron::fail_at(__FILE__, __LINE__, #call, ::mpitron::comm::mpi_error_string(mpi_rc_)); \
  } while (0)
