// CUDA twins of layers/batchnorm.hpp (ghost groups of G samples; NCHW, T float, __nv_bfloat16 or
// __half: fp32 arithmetic, each output rounded once): one block per
// (group, channel) sums its G*HW values in double in a fixed tree, so every call gives the same
// bits; the weight and bias gradients add the groups' partials in group order, without atomics.
// cuDNN's batch norm takes its statistics over the whole batch, not over groups: these are the
// project's own kernels. Device pointers; asynchronous on s.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace mpitron::cuda {

template <class T>
void batchnorm2d_forward(T* out,           // (N,C,HW) =
                         float* mean,      // (N/G,C)
                         float* rstd,      // (N/G,C)
                         const T* inp,     // (N,C,HW)
                         const T* weight,  // (C)
                         const T* bias,    // (C)
                         int N, int C, int HW, int G, float eps, cudaStream_t s);

template <class T>
void batchnorm2d_forward_eval(T* out,                     // (N,C,HW) =
                              const T* inp,               // (N,C,HW)
                              const T* weight,            // (C)
                              const T* bias,              // (C)
                              const float* running_mean,  // (C)
                              const float* running_var,   // (C)
                              int N, int C, int HW, float eps, cudaStream_t s);

// Bytes of scratch batchnorm2d_backward needs: the (N/G,C) groups' two partial sums in double.
size_t batchnorm2d_backward_scratch_bytes(int N, int C, int G);

template <class T>
void batchnorm2d_backward(T* dinp,            // (N,C,HW) =
                          float* dweight,     // (C) +=
                          float* dbias,       // (C) +=
                          const T* dout,      // (N,C,HW)
                          const T* inp,       // (N,C,HW)
                          const T* weight,    // (C)
                          const float* mean,  // (N/G,C)
                          const float* rstd,  // (N/G,C)
                          int N, int C, int HW, int G,
                          void* scratch,  // (batchnorm2d_backward_scratch_bytes(N, C, G))
                          cudaStream_t s);

// As the CPU's: each group's mean and unbiased variance added to the sums, groups in order (one
// thread per channel), the same bits.
void batchnorm2d_group_stats(double* mean_sum,   // (C) +=
                             double* var_sum,    // (C) +=
                             const float* mean,  // (groups,C)
                             const float* rstd,  // (groups,C)
                             int groups, int C, int HW, int G, float eps, cudaStream_t s);

}  // namespace mpitron::cuda
