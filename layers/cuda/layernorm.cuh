// CUDA twins of layers/layernorm.hpp: y = (x - mean) * rstd * weight + bias over the last
// dimension, rstd = 1/sqrt(var + eps), biased two-pass variance; backward
// dx += rstd * (dy*w - mean(dy*w) - xhat * mean(dy*w*xhat)). T is float, __nv_bfloat16 or __half
// for activations and weights; statistics and parameter gradients are float, math in fp32.
// Device pointers; asynchronous on s; the same bits on every call.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace mpitron::cuda {

// One warp per row.
template <class T>
void layernorm_forward(T* out,           // (N,C)
                       float* mean,      // (N)
                       float* rstd,      // (N)
                       const T* inp,     // (N,C)
                       const T* weight,  // (C)
                       const T* bias,    // (C)
                       int N, int C, double eps, cudaStream_t s);

// Floats of scratch layernorm_backward needs for (N, C): 2 * P * C, P = min(128, ceil(N / 32))
// row chunks (at least 1), a function of N alone so that the sum order never changes.
size_t layernorm_backward_scratch(int N, int C);

// dinp: one warp per row. dweight/dbias without atomics: each of P row chunks sums its rows per
// column into scratch (rows in increasing order, strided over 8 threads whose sums are then added
// in order), then the P partials are added in chunk order and the total added to dweight/dbias.
// The CPU adds the rows one by one into dweight: the same terms in another order (within 1e-4
// relative, not its bits). scratch is overwritten and must not be in use by other work in flight.
template <class T>
void layernorm_backward(T* dinp,            // (N,C)  += (residual stream)
                        float* dweight,     // (C)    +=
                        float* dbias,       // (C)    +=
                        const T* dout,      // (N,C)
                        const T* inp,       // (N,C)
                        const T* weight,    // (C)
                        const float* mean,  // (N)
                        const float* rstd,  // (N)
                        int N, int C,
                        float* scratch,  // (layernorm_backward_scratch(N, C))
                        cudaStream_t s);

}  // namespace mpitron::cuda
