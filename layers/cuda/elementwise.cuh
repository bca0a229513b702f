// What every CUDA layer shares: fp32 views of the storage types (float, bf16, fp16; rounding to
// nearest even on the way back), 16-byte packs for vector loads, grid sizing for grid-stride
// loops, and the elementwise map kernel out[i] = op(a[i], b[i]). nvcc only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "base/cuda_check.hpp"

namespace mpitron::cuda::elementwise {

__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);  // round to nearest even
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half(x);  // round to nearest even
}

// 16 bytes of T: one vector load or store when every pointer of a launch is 16-byte aligned.
template <class T>
struct alignas(16) Pack {
  static constexpr int kSize = int(16 / sizeof(T));
  T v[kSize];
};

inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = size_t(1) << 16;

// Blocks for `items` work items of a grid-stride loop: at least 1, at most kMaxBlocks.
inline unsigned blocks_for(size_t items) {
  return unsigned(std::clamp<size_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

// out[i] = op(a[i], b[i]) for i < n (b unused by unary ops, Op::kBinary false). Each thread reads
// an element (or a pack) before writing the same one, so out may alias a or b exactly.
// kVectorised: all pointers 16-byte aligned; packs first, then the n % kSize tail one by one.
template <class T, class Op, bool kVectorised>
__global__ void __launch_bounds__(kThreads)
    map_kernel(T* out, const T* a, const T* b, size_t n, Op op) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if constexpr (kVectorised) {
    constexpr int K = Pack<T>::kSize;
    const size_t packs = n / K;
    const Pack<T>* ap = reinterpret_cast<const Pack<T>*>(a);
    const Pack<T>* bp = reinterpret_cast<const Pack<T>*>(b);
    Pack<T>* outp = reinterpret_cast<Pack<T>*>(out);
    for (size_t j = tid; j < packs; j += stride) {
      const Pack<T> x = ap[j];
      Pack<T> y;
      if constexpr (Op::kBinary) {
        const Pack<T> z = bp[j];
#pragma unroll
        for (int k = 0; k < K; ++k) y.v[k] = from_float<T>(op(to_float(x.v[k]), to_float(z.v[k])));
      } else {
#pragma unroll
        for (int k = 0; k < K; ++k) y.v[k] = from_float<T>(op(to_float(x.v[k]), 0.0f));
      }
      outp[j] = y;
    }
    done = packs * K;
  }
  for (size_t i = done + tid; i < n; i += stride) {
    const float z = Op::kBinary ? to_float(b[i]) : 0.0f;
    out[i] = from_float<T>(op(to_float(a[i]), z));
  }
}

template <class T, class Op>
void launch_map(T* out, const T* a, const T* b, size_t n, Op op, cudaStream_t s) {
  if (n == 0) return;  // pointers may be null for an empty range
  if (aligned16(out) && aligned16(a) && (!Op::kBinary || aligned16(b))) {
    constexpr size_t K = Pack<T>::kSize;
    map_kernel<T, Op, true><<<blocks_for((n + K - 1) / K), kThreads, 0, s>>>(out, a, b, n, op);
  } else {
    map_kernel<T, Op, false><<<blocks_for(n), kThreads, 0, s>>>(out, a, b, n, op);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace mpitron::cuda::elementwise
