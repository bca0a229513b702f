// What every CUDA layer shares: fp32 views of the storage types (float, bf16, fp16; rounding to
// nearest even on the way back), 16-byte packs for vector loads, grid sizing for grid-stride
// loops over runs of packs (for_each_run), and the elementwise map kernel out[i] = op(a[i], b[i]).
// nvcc only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

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

template <class T>
__device__ __forceinline__ void store(T* p, float x) {
  *p = from_float<T>(x);
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

// K consecutive elements as floats: a whole Pack<T> (one 16-byte access) or one element (K 1).
template <int K>
struct Lanes {
  float v[K];
};
template <int K>
using Width = std::integral_constant<int, K>;

template <int K, class T>
__device__ __forceinline__ Lanes<K> load(const T* p, size_t i) {
  Lanes<K> r;
  if constexpr (K == 1) {
    r.v[0] = to_float(p[i]);
  } else {
    static_assert(K == Pack<T>::kSize, "a run is one element or one pack");
    const Pack<T> x = *reinterpret_cast<const Pack<T>*>(p + i);
#pragma unroll
    for (int k = 0; k < K; ++k) r.v[k] = to_float(x.v[k]);
  }
  return r;
}

template <int K, class T>
__device__ __forceinline__ void store(T* p, size_t i, const Lanes<K>& r) {
  if constexpr (K == 1) {
    p[i] = from_float<T>(r.v[0]);
  } else {
    static_assert(K == Pack<T>::kSize, "a run is one element or one pack");
    Pack<T> y;
#pragma unroll
    for (int k = 0; k < K; ++k) y.v[k] = from_float<T>(r.v[k]);
    *reinterpret_cast<Pack<T>*>(p + i) = y;
  }
}

// A grid-stride walk over n elements of T in runs: f(Width<K>{}, i) handles elements i .. i+K-1
// (load<K> and store<K> move them). kVectorised (every pointer f touches 16-byte aligned): whole
// packs first, then the n % kSize tail one by one; otherwise one element per run.
template <class T, bool kVectorised, class F>
__device__ __forceinline__ void for_each_run(size_t n, F&& f) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if constexpr (kVectorised) {
    constexpr int K = Pack<T>::kSize;
    const size_t packs = n / K;
    for (size_t j = tid; j < packs; j += stride) f(Width<K>{}, j * K);
    done = packs * K;
  }
  for (size_t i = done + tid; i < n; i += stride) f(Width<1>{}, i);
}

// Blocks for a for_each_run over n elements of T.
template <class T>
inline unsigned blocks_for_runs(size_t n, bool vectorised) {
  constexpr size_t K = Pack<T>::kSize;
  return blocks_for(vectorised ? (n + K - 1) / K : n);
}

// out[i] = op(a[i], b[i]) for i < n (b unused by unary ops, Op::kBinary false). Each run is read
// before it is written, so out may alias a or b exactly.
template <class T, class Op, bool kVectorised>
__global__ void __launch_bounds__(kThreads)
    map_kernel(T* out, const T* a, const T* b, size_t n, Op op) {
  for_each_run<T, kVectorised>(n, [&](auto width, size_t i) {
    constexpr int K = decltype(width)::value;
    const Lanes<K> x = load<K>(a, i);
    Lanes<K> z{};  // 0 for unary ops
    if constexpr (Op::kBinary) z = load<K>(b, i);
    Lanes<K> y;
#pragma unroll
    for (int k = 0; k < K; ++k) y.v[k] = op(x.v[k], z.v[k]);
    store<K>(out, i, y);
  });
}

template <class T, class Op>
void launch_map(T* out, const T* a, const T* b, size_t n, Op op, cudaStream_t s) {
  if (n == 0) return;  // pointers may be null for an empty range
  if (aligned16(out) && aligned16(a) && (!Op::kBinary || aligned16(b)))
    map_kernel<T, Op, true><<<blocks_for_runs<T>(n, true), kThreads, 0, s>>>(out, a, b, n, op);
  else
    map_kernel<T, Op, false><<<blocks_for_runs<T>(n, false), kThreads, 0, s>>>(out, a, b, n, op);
  CUDA_CHECK_LAUNCH();
}

}  // namespace mpitron::cuda::elementwise
