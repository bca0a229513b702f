// ReLU on the device, elementwise with the CPU's comparisons (layers/cpu/relu.cpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "layers/cuda/elementwise.cuh"
#include "layers/cuda/relu.cuh"

namespace mpitron::cuda {

namespace {

using namespace elementwise;

struct ReluForward {
  static constexpr bool kBinary = false;
  __device__ float operator()(float x, float) const { return x < 0.0f ? 0.0f : x; }
};

// op(dout, inp).
struct ReluBackward {
  static constexpr bool kBinary = true;
  __device__ float operator()(float dy, float x) const { return x > 0.0f ? dy : 0.0f; }
};

}  // namespace

template <class T>
void relu_forward(T* out, const T* inp, size_t n, cudaStream_t s) {
  launch_map(out, inp, static_cast<const T*>(nullptr), n, ReluForward{}, s);
}

template <class T>
void relu_backward(T* dinp, const T* dout, const T* inp, size_t n, cudaStream_t s) {
  launch_map(dinp, dout, inp, n, ReluBackward{}, s);
}

#define MPITRON_INSTANTIATE(T)                                       \
  template void relu_forward<T>(T*, const T*, size_t, cudaStream_t); \
  template void relu_backward<T>(T*, const T*, const T*, size_t, cudaStream_t);
MPITRON_INSTANTIATE(float)
MPITRON_INSTANTIATE(__nv_bfloat16)
MPITRON_INSTANTIATE(__half)
#undef MPITRON_INSTANTIATE

}  // namespace mpitron::cuda
