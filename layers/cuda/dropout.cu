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

// out[i] = rng.uniform(base + i) >= p ? inp[i] * scale : 0 for i < n, base = row0 * C. Each run
// is read before it is written, so out may alias inp (kVectorised as in for_each_run).
template <class T, bool kVectorised>
__global__ void __launch_bounds__(kThreads)
    dropout_kernel(T* out, const T* inp, size_t n, PhiloxStream rng, uint64_t base, float p,
                   float scale) {
  for_each_run<T, kVectorised>(n, [&](auto width, size_t i) {
    constexpr int K = decltype(width)::value;
    Lanes<K> x = load<K>(inp, i);
#pragma unroll
    for (int k = 0; k < K; ++k)
      x.v[k] = rng.uniform(base + uint64_t(i + k)) >= p ? __fmul_rn(x.v[k], scale) : 0.0f;
    store<K>(out, i, x);
  });
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
  const bool vectorised = aligned16(out) && aligned16(inp);
  if (vectorised)
    dropout_kernel<T, true>
        <<<blocks_for_runs<T>(n, true), kThreads, 0, s>>>(out, inp, n, rng, base, p, scale);
  else
    dropout_kernel<T, false>
        <<<blocks_for_runs<T>(n, false), kThreads, 0, s>>>(out, inp, n, rng, base, p, scale);
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
