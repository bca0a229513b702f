// GELU on the device, elementwise in fp32 with the CPU's formulas (layers/cpu/gelu.cpp); tanhf,
// erff and expf are CUDA's accurate versions (a few ulp), the CPU's tanh_fast about 2 ulp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "layers/cuda/gelu.cuh"
#include "base/cuda_check.hpp"

namespace mpitron::cuda {

namespace {

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

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = size_t(1) << 16;

// Blocks for `items` work items of a grid-stride loop: at least 1, at most kMaxBlocks.
unsigned blocks_for(size_t items) {
  return unsigned(std::clamp<size_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

// out[i] = op(a[i], b[i]) for i < n (b unused by unary ops). Each thread reads an element (or a
// pack) before writing the same one, so out may alias a or b exactly. kVectorised: all pointers
// 16-byte aligned; packs first, then the n % kSize tail element by element.
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

// The CPU's constants, rounded to float as F(constant) rounds them there.
constexpr float kSqrt2OverPi = float(0.7978845608028654);
constexpr float kCubic = float(0.044715);
constexpr float kInvSqrt2 = float(0.7071067811865476);
constexpr float kInvSqrt2Pi = float(0.3989422804014327);

struct GeluTanhForward {
  static constexpr bool kBinary = false;
  __device__ float operator()(float x, float) const {
    return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kCubic * x * x * x)));
  }
};

// op(dout, inp): dy/dx = 0.5 (1 + th) + 0.5 x (1 - th^2) du/dx, u = s (x + a x^3).
struct GeluTanhBackward {
  static constexpr bool kBinary = true;
  __device__ float operator()(float dy, float x) const {
    const float th = tanhf(kSqrt2OverPi * (x + kCubic * x * x * x));
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    return dy * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
  }
};

struct GeluErfForward {
  static constexpr bool kBinary = false;
  __device__ float operator()(float x, float) const {
    return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
  }
};

// op(dout, inp): dy/dx = Phi(x) + x phi(x).
struct GeluErfBackward {
  static constexpr bool kBinary = true;
  __device__ float operator()(float dy, float x) const {
    const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
    return dy * (cdf + x * pdf);
  }
};

}  // namespace

template <class T>
void gelu_forward(T* out, const T* inp, size_t n, cudaStream_t s) {
  launch_map(out, inp, static_cast<const T*>(nullptr), n, GeluTanhForward{}, s);
}

template <class T>
void gelu_backward(T* dinp, const T* dout, const T* inp, size_t n, cudaStream_t s) {
  launch_map(dinp, dout, inp, n, GeluTanhBackward{}, s);
}

template <class T>
void gelu_erf_forward(T* out, const T* inp, size_t n, cudaStream_t s) {
  launch_map(out, inp, static_cast<const T*>(nullptr), n, GeluErfForward{}, s);
}

template <class T>
void gelu_erf_backward(T* dinp, const T* dout, const T* inp, size_t n, cudaStream_t s) {
  launch_map(dinp, dout, inp, n, GeluErfBackward{}, s);
}

#define MPITRON_INSTANTIATE(T)                                                  \
  template void gelu_forward<T>(T*, const T*, size_t, cudaStream_t);            \
  template void gelu_backward<T>(T*, const T*, const T*, size_t, cudaStream_t); \
  template void gelu_erf_forward<T>(T*, const T*, size_t, cudaStream_t);        \
  template void gelu_erf_backward<T>(T*, const T*, const T*, size_t, cudaStream_t);
MPITRON_INSTANTIATE(float)
MPITRON_INSTANTIATE(__nv_bfloat16)
MPITRON_INSTANTIATE(__half)
#undef MPITRON_INSTANTIATE

}  // namespace mpitron::cuda
