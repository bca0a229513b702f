// CUDA twins of layers/gelu.hpp: GELU, tanh approximation (GPT-2)
// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and the exact form (BERT)
// y = 0.5 x (1 + erf(x / sqrt 2)), dy/dx = Phi(x) + x phi(x). T is float, __nv_bfloat16 or __half
// (math in fp32, one rounding to T per output). Device pointers; asynchronous on s.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace mpitron::cuda {

template <class T>
void gelu_forward(T* out,        // (n)  may alias inp
                  const T* inp,  // (n)
                  size_t n, cudaStream_t s);

template <class T>
void gelu_backward(T* dinp,        // (n) =
                   const T* dout,  // (n)
                   const T* inp,   // (n)
                   size_t n, cudaStream_t s);

template <class T>
void gelu_erf_forward(T* out,        // (n)  may alias inp
                      const T* inp,  // (n)
                      size_t n, cudaStream_t s);

template <class T>
void gelu_erf_backward(T* dinp,        // (n) =
                       const T* dout,  // (n)
                       const T* inp,   // (n)
                       size_t n, cudaStream_t s);

}  // namespace mpitron::cuda
