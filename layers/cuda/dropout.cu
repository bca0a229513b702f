// Inverted dropout on the device with the CPU's mask (layers/cpu/dropout.cpp): one Philox4x32-10
// draw per element at counter (row0 + r) * C + c = row0 * C + (r * C + c) (mod 2^64), the same
// uniform (PhiloxStream::uniform is a host and device function), the same float scale.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "base/cuda_check.hpp"
#include "layers/cuda/dropout.cuh"
#include "layers/cuda/elementwise.cuh"

namespace mpitron::cuda {

namespace {

using namespace elementwise;

// out[i] = rng.uniform(base + i) >= p ? inp[i] * scale : 0 for i < n, base = row0 * C. Each
// thread reads an element (or pack) before writing it, so out may alias inp. kVectorised: both
// pointers 16-byte aligned; packs first, then the n % kSize tail element by element.
template <class T, bool kVectorised>
__global__ void __launch_bounds__(kThreads)
    dropout_kernel(T* out, const T* inp, size_t n, PhiloxStream rng, uint64_t base, float p,
                   float scale) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if constexpr (kVectorised) {
    constexpr int K = Pack<T>::kSize;
    const size_t packs = n / K;
    const Pack<T>* ip = reinterpret_cast<const Pack<T>*>(inp);
    Pack<T>* outp = reinterpret_cast<Pack<T>*>(out);
    for (size_t j = tid; j < packs; j += stride) {
      const Pack<T> x = ip[j];
      Pack<T> y;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const uint64_t index = base + uint64_t(j * K + k);
        y.v[k] = from_float<T>(rng.uniform(index) >= p ? __fmul_rn(to_float(x.v[k]), scale) : 0.0f);
      }
      outp[j] = y;
    }
    done = packs * K;
  }
  for (size_t i = done + tid; i < n; i += stride)
    out[i] = from_float<T>(rng.uniform(base + uint64_t(i)) >= p ? __fmul_rn(to_float(inp[i]), scale)
                                                                : 0.0f);
}

template <class T>
void apply_mask(T* out, const T* inp, float p, const PhiloxStream& rng, uint64_t row0, int N, int C,
                cudaStream_t s) {
  const size_t n = size_t(N) * size_t(C);
  if (n == 0) return;  // pointers may be null for an empty range
  if (p == 0.0f) {
    if (out != inp)
      CUDA_CHECK(cudaMemcpyAsync(out, inp, n * sizeof(T), cudaMemcpyDeviceToDevice, s));
    return;
  }
  const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;  // the CPU's float ops; p == 1 drops all
  const uint64_t base = row0 * uint64_t(C);
  if (aligned16(out) && aligned16(inp)) {
    constexpr size_t K = Pack<T>::kSize;
    dropout_kernel<T, true>
        <<<blocks_for((n + K - 1) / K), kThreads, 0, s>>>(out, inp, n, rng, base, p, scale);
  } else {
    dropout_kernel<T, false><<<blocks_for(n), kThreads, 0, s>>>(out, inp, n, rng, base, p, scale);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void dropout_forward(T* out, const T* inp, float p, const PhiloxStream& rng, uint64_t row0, int N,
                     int C, cudaStream_t s) {
  apply_mask(out, inp, p, rng, row0, N, C, s);
}

template <class T>
void dropout_backward(T* dinp, const T* dout, float p, const PhiloxStream& rng, uint64_t row0,
                      int N, int C, cudaStream_t s) {
  apply_mask(dinp, dout, p, rng, row0, N, C, s);
}

#define MPITRON_INSTANTIATE(T)                                                                    \
  template void dropout_forward<T>(T*, const T*, float, const PhiloxStream&, uint64_t, int, int,  \
                                   cudaStream_t);                                                 \
  template void dropout_backward<T>(T*, const T*, float, const PhiloxStream&, uint64_t, int, int, \
                                    cudaStream_t);
MPITRON_INSTANTIATE(float)
MPITRON_INSTANTIATE(__nv_bfloat16)
MPITRON_INSTANTIATE(__half)
#undef MPITRON_INSTANTIATE

}  // namespace mpitron::cuda
