// Residual add and its gradient on the device, elementwise in fp32 (layers/cpu/residual.cpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "base/cuda_check.hpp"
#include "layers/cuda/elementwise.cuh"
#include "layers/cuda/residual.cuh"

namespace mpitron::cuda {

namespace {

using namespace elementwise;

struct Add {
  static constexpr bool kBinary = true;
  __device__ float operator()(float a, float b) const { return a + b; }
};

// da[i] += dout[i], db[i] += dout[i]; da, db and dout distinct (kVectorised as in for_each_run).
template <class T, bool kVectorised>
__global__ void __launch_bounds__(kThreads)
    residual_backward_kernel(T* da, T* db, const T* dout, size_t n) {
  for_each_run<T, kVectorised>(n, [&](auto width, size_t i) {
    constexpr int K = decltype(width)::value;
    const Lanes<K> g = load<K>(dout, i);
    Lanes<K> x = load<K>(da, i), y = load<K>(db, i);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      x.v[k] += g.v[k];
      y.v[k] += g.v[k];
    }
    store<K>(da, i, x);
    store<K>(db, i, y);
  });
}

}  // namespace

template <class T>
void residual_forward(T* out, const T* a, const T* b, size_t n, cudaStream_t s) {
  launch_map(out, a, b, n, Add{}, s);
}

template <class T>
void residual_backward(T* da, T* db, const T* dout, size_t n, cudaStream_t s) {
  if (n == 0) return;
  if (aligned16(da) && aligned16(db) && aligned16(dout))
    residual_backward_kernel<T, true>
        <<<blocks_for_runs<T>(n, true), kThreads, 0, s>>>(da, db, dout, n);
  else
    residual_backward_kernel<T, false>
        <<<blocks_for_runs<T>(n, false), kThreads, 0, s>>>(da, db, dout, n);
  CUDA_CHECK_LAUNCH();
}

#define MPITRON_INSTANTIATE(T)                                                     \
  template void residual_forward<T>(T*, const T*, const T*, size_t, cudaStream_t); \
  template void residual_backward<T>(T*, T*, const T*, size_t, cudaStream_t);
MPITRON_INSTANTIATE(float)
MPITRON_INSTANTIATE(__nv_bfloat16)
MPITRON_INSTANTIATE(__half)
#undef MPITRON_INSTANTIATE

}  // namespace mpitron::cuda
