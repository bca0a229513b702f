// CUDA twins of layers/tanh.hpp: y = tanh(x); dx = dy (1 - y^2) from forward's output. T is float,
// __nv_bfloat16 or __half (math in fp32, one rounding per output). Device pointers; asynchronous
// on s.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace mpitron::cuda {

template <class T>
void tanh_forward(T* out, const T* inp, size_t n, cudaStream_t s);  // (n), (n); may alias

template <class T>
void tanh_backward(T* dinp,        // (n) =, may alias dout
                   const T* dout,  // (n)
                   const T* out,   // (n) forward's output
                   size_t n, cudaStream_t s);

}  // namespace mpitron::cuda
