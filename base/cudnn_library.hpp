// cuDNN, opened (dlopen) at its first use, as cuBLAS is (base/cublas_library.hpp): CPU runs and
// tools do not load it. Calls go through the table:
// `cudnn::library().cudnnConvolutionForward(...)`, the header's names and types as they are.
// CUDNN_CHECK names the call, file and line.
#pragma once
#include <cudnn.h>

#include "base/check.hpp"

namespace mpitron::cudnn {

#define MPITRON_CUDNN_FUNCTIONS(X)                      \
  X(cudnnCreate)                                        \
  X(cudnnDestroy)                                       \
  X(cudnnSetStream)                                     \
  X(cudnnGetErrorString)                                \
  X(cudnnGetVersion)                                    \
  X(cudnnCreateTensorDescriptor)                        \
  X(cudnnDestroyTensorDescriptor)                       \
  X(cudnnSetTensor4dDescriptor)                         \
  X(cudnnCreateFilterDescriptor)                        \
  X(cudnnDestroyFilterDescriptor)                       \
  X(cudnnSetFilter4dDescriptor)                         \
  X(cudnnCreateConvolutionDescriptor)                   \
  X(cudnnDestroyConvolutionDescriptor)                  \
  X(cudnnSetConvolution2dDescriptor)                    \
  X(cudnnSetConvolutionMathType)                        \
  X(cudnnGetConvolutionForwardAlgorithmMaxCount)        \
  X(cudnnGetConvolutionBackwardDataAlgorithmMaxCount)   \
  X(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount) \
  X(cudnnGetConvolutionForwardAlgorithm_v7)             \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7)        \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)      \
  X(cudnnGetConvolutionForwardWorkspaceSize)            \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize)       \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize)     \
  X(cudnnConvolutionForward)                            \
  X(cudnnConvolutionBackwardData)                       \
  X(cudnnConvolutionBackwardFilter)

struct Library {
#define MPITRON_CUDNN_MEMBER(name) decltype(&::name) name = nullptr;
  MPITRON_CUDNN_FUNCTIONS(MPITRON_CUDNN_MEMBER)
#undef MPITRON_CUDNN_MEMBER
};

// The table, filled on the first call (thread-safe); a library or symbol that cannot be found
// stops the job naming it and the loader's reason.
const Library& library();

}  // namespace mpitron::cudnn

#define CUDNN_CHECK(call)                                                                    \
  do {                                                                                       \
    const cudnnStatus_t cudnn_check_err_ = (call);                                           \
    if (cudnn_check_err_ != CUDNN_STATUS_SUCCESS)                                            \
      ::mpitron::fail_at(__FILE__, __LINE__, #call,                                          \
                         ::mpitron::cudnn::library().cudnnGetErrorString(cudnn_check_err_)); \
  } while (0)
