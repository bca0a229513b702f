// CUDA_CHECK: every CUDA runtime call whose failure is fatal goes through it, so a failure prints
// "[rank r] file:line call: reason" and aborts the whole job (fail_at, src/check.hpp).
#pragma once
#include <cuda_runtime_api.h>

#include "src/check.hpp"

#define CUDA_CHECK(call)                                                                  \
  do {                                                                                    \
    const cudaError_t cuda_check_err_ = (call);                                           \
    if (cuda_check_err_ != cudaSuccess)                                                   \
      ::mpitron::fail_at(__FILE__, __LINE__, #call, cudaGetErrorString(cuda_check_err_)); \
  } while (0)
