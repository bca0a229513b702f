// One check macro per CUDA library: a failing call prints "[rank r] file:line call: reason" and
// aborts the whole job (fail_at, base/check.hpp). NCCL_CHECK lives in comm/nccl/nccl_comm.hpp.
#pragma once
#include <cuda_runtime_api.h>

#include "base/check.hpp"
#include "base/cublas_library.hpp"

#define CUDA_CHECK(call)                                                                  \
  do {                                                                                    \
    const cudaError_t cuda_check_err_ = (call);                                           \
    if (cuda_check_err_ != cudaSuccess)                                                   \
      ::mpitron::fail_at(__FILE__, __LINE__, #call, cudaGetErrorString(cuda_check_err_)); \
  } while (0)

// cuBLAS and cuBLASLt share cublasStatus_t.
#define CUBLAS_CHECK(call)                                                                       \
  do {                                                                                           \
    const cublasStatus_t cublas_check_err_ = (call);                                             \
    if (cublas_check_err_ != CUBLAS_STATUS_SUCCESS)                                              \
      ::mpitron::fail_at(__FILE__, __LINE__, #call,                                              \
                         ::mpitron::cublas::library().cublasGetStatusString(cublas_check_err_)); \
  } while (0)

// A launch's configuration errors show at the launch, not at the next synchronisation.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
