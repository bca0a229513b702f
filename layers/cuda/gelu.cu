// GELU on the device, elementwise in fp32 with the CPU's formulas (layers/cpu/gelu.cpp); tanhf,
// erfcf and expf are CUDA's accurate versions (a few ulp), the CPU's tanh_fast about 2 ulp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "base/cuda_check.hpp"
#include "layers/cuda/elementwise.cuh"
#include "layers/cuda/gelu.cuh"

namespace mpitron::cuda {

namespace {

using namespace elementwise;

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
    return 0.5f * x * erfcf(-x * kInvSqrt2);  // erfc: no cancellation below x = -4
  }
};

// op(dout, inp): dy/dx = Phi(x) + x phi(x).
struct GeluErfBackward {
  static constexpr bool kBinary = true;
  __device__ float operator()(float dy, float x) const {
    const float cdf = 0.5f * erfcf(-x * kInvSqrt2);
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
