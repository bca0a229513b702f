// CUDA twins of layers/relu.hpp: y = max(x, 0) (x < 0 ? 0 : x, so -0 and NaN pass as the CPU's);
// dx = x > 0 ? dy : 0. T is float, __nv_bfloat16 or __half (exact in every storage type).
// Device pointers; asynchronous on s.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace mpitron::cuda {

template <class T>
void relu_forward(T* out,        // (n)  may alias inp
                  const T* inp,  // (n)
                  size_t n, cudaStream_t s);

template <class T>
void relu_backward(T* dinp,        // (n) =, may alias dout
                   const T* dout,  // (n)
                   const T* inp,   // (n)
                   size_t n, cudaStream_t s);

}  // namespace mpitron::cuda
