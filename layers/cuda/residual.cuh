// CUDA twins of layers/residual.hpp: out = a + b; the gradient flows unchanged into both inputs,
// accumulated (+=, the residual stream). T is float, __nv_bfloat16 or __half (fp32 sum, one
// rounding to T). Device pointers; asynchronous on s.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace mpitron::cuda {

// Each element is read before it is written by the same thread, so out may alias a or b.
template <class T>
void residual_forward(T* out,      // (n)
                      const T* a,  // (n)
                      const T* b,  // (n)
                      size_t n, cudaStream_t s);

// da, db and dout are three distinct buffers.
template <class T>
void residual_backward(T* da,          // (n) +=
                       T* db,          // (n) +=
                       const T* dout,  // (n)
                       size_t n, cudaStream_t s);

}  // namespace mpitron::cuda
