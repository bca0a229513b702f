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

// da[i] += dout[i], db[i] += dout[i]; da, db and dout distinct (kVectorised as in map_kernel).
template <class T, bool kVectorised>
__global__ void __launch_bounds__(kThreads)
    residual_backward_kernel(T* da, T* db, const T* dout, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if constexpr (kVectorised) {
    constexpr int K = Pack<T>::kSize;
    const size_t packs = n / K;
    Pack<T>* dap = reinterpret_cast<Pack<T>*>(da);
    Pack<T>* dbp = reinterpret_cast<Pack<T>*>(db);
    const Pack<T>* dp = reinterpret_cast<const Pack<T>*>(dout);
    for (size_t j = tid; j < packs; j += stride) {
      const Pack<T> d = dp[j];
      Pack<T> x = dap[j], y = dbp[j];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const float g = to_float(d.v[k]);
        x.v[k] = from_float<T>(to_float(x.v[k]) + g);
        y.v[k] = from_float<T>(to_float(y.v[k]) + g);
      }
      dap[j] = x;
      dbp[j] = y;
    }
    done = packs * K;
  }
  for (size_t i = done + tid; i < n; i += stride) {
    const float g = to_float(dout[i]);
    da[i] = from_float<T>(to_float(da[i]) + g);
    db[i] = from_float<T>(to_float(db[i]) + g);
  }
}

}  // namespace

template <class T>
void residual_forward(T* out, const T* a, const T* b, size_t n, cudaStream_t s) {
  launch_map(out, a, b, n, Add{}, s);
}

template <class T>
void residual_backward(T* da, T* db, const T* dout, size_t n, cudaStream_t s) {
  if (n == 0) return;
  if (aligned16(da) && aligned16(db) && aligned16(dout)) {
    constexpr size_t K = Pack<T>::kSize;
    residual_backward_kernel<T, true>
        <<<blocks_for((n + K - 1) / K), kThreads, 0, s>>>(da, db, dout, n);
  } else {
    residual_backward_kernel<T, false><<<blocks_for(n), kThreads, 0, s>>>(da, db, dout, n);
  }
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
