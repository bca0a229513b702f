// CUDA twins of layers/dropout.hpp: inverted dropout with the CPU's counter-based mask. Element
// (r, c) is kept when rng.uniform((row0 + r) * C + c) >= p and then scaled by 1/(1-p), the scale
// computed on the host as the CPU computes it: the mask is the CPU's bit for bit and, for float,
// so is every output. p == 0 copies (or does nothing in place), p == 1 zeroes. out may alias inp,
// dinp may alias dout. T is float, __nv_bfloat16 or __half. Device pointers; asynchronous on s.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/philox.hpp"

namespace mpitron::cuda {

template <class T>
void dropout_forward(T* out,        // (N,C)
                     const T* inp,  // (N,C)
                     float p, const PhiloxStream& rng, uint64_t row0, int N, int C, cudaStream_t s);

// The forward's mask redrawn (nothing is stored): dinp = mask * dout / (1-p).
template <class T>
void dropout_backward(T* dinp,        // (N,C) =
                      const T* dout,  // (N,C)
                      float p, const PhiloxStream& rng, uint64_t row0, int N, int C,
                      cudaStream_t s);

}  // namespace mpitron::cuda
