// tanh on the device, elementwise in fp32 (tanhf, CUDA's accurate version: a few ulp from the
// CPU's std::tanh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "layers/cuda/elementwise.cuh"
#include "layers/cuda/tanh.cuh"

namespace mpitron::cuda {

namespace {

using namespace elementwise;

struct TanhForward {
  static constexpr bool kBinary = false;
  __device__ float operator()(float x, float) const { return tanhf(x); }
};

// op(dout, out).
struct TanhBackward {
  static constexpr bool kBinary = true;
  __device__ float operator()(float dy, float y) const { return dy * (1.0f - y * y); }
};

}  // namespace

template <class T>
void tanh_forward(T* out, const T* inp, size_t n, cudaStream_t s) {
  launch_map(out, inp, static_cast<const T*>(nullptr), n, TanhForward{}, s);
}

template <class T>
void tanh_backward(T* dinp, const T* dout, const T* out, size_t n, cudaStream_t s) {
  launch_map(dinp, dout, out, n, TanhBackward{}, s);
}

#define MPITRON_INSTANTIATE(T)                                       \
  template void tanh_forward<T>(T*, const T*, size_t, cudaStream_t); \
  template void tanh_backward<T>(T*, const T*, const T*, size_t, cudaStream_t);
MPITRON_INSTANTIATE(float)
MPITRON_INSTANTIATE(__nv_bfloat16)
MPITRON_INSTANTIATE(__half)
#undef MPITRON_INSTANTIATE

}  // namespace mpitron::cuda
