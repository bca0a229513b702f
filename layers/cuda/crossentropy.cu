// Softmax cross-entropy on the device (layers/cpu/crossentropy.cpp's formulas in fp32), one block
// per row: an online (max, sum) pass for lse, then an elementwise backward; the fused classifier
// runs both in one launch, dlogits over the logits in place (llm.c's fused_classifier).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>

#include "base/check.hpp"
#include "base/cuda_check.hpp"
#include "layers/cuda/crossentropy.cuh"
#include "layers/cuda/elementwise.cuh"

namespace mpitron::cuda {

namespace {

using elementwise::from_float;
using elementwise::to_float;

constexpr int kWarp = 32;
constexpr int kThreads = 512;  // a multiple of kWarp: every warp is full for the shuffles
constexpr int kWarps = kThreads / kWarp;
constexpr int kUnroll = 4;  // loads issued together, then folded in in element order

// Running softmax denominator: sum of exp(x - m) over the elements seen, m their maximum.
// m starts at -FLT_MAX (not -inf) so that a -inf logit adds exp(-inf) = 0 instead of NaN.
struct MaxSum {
  float m = -FLT_MAX;
  float s = 0.0f;
  __device__ void add(float x) {
    if (x > m) {
      s = s * expf(m - x) + 1.0f;
      m = x;
    } else {
      s += expf(x - m);
    }
  }
  __device__ void merge(float m2, float s2) {
    const float mx = fmaxf(m, m2);
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
  }
};

// Row n's (lse, loss) over its first V of ld logits, into thread 0's return value (other threads:
// unspecified). Thread j folds in elements j, j + kThreads, ... in increasing order; lanes combine
// down to lane 0 (shfl_down tree), then thread 0 combines the warps in warp order.
template <class T>
__device__ float2 row_lse_loss(const T* x, int32_t t, int V) {
  __shared__ float warp_m[kWarps], warp_s[kWarps];
  MaxSum acc;
  int j = int(threadIdx.x);
  for (; j + (kUnroll - 1) * kThreads < V; j += kUnroll * kThreads) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = to_float(x[j + u * kThreads]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc.add(v[u]);
  }
  for (; j < V; j += kThreads) acc.add(to_float(x[j]));
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float m2 = __shfl_down_sync(0xffffffffu, acc.m, offset);
    const float s2 = __shfl_down_sync(0xffffffffu, acc.s, offset);
    acc.merge(m2, s2);  // lanes past the end merge stale values; only lane 0's result is used
  }
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  if (lane == 0) {
    warp_m[warp] = acc.m;
    warp_s[warp] = acc.s;
  }
  __syncthreads();
  float2 out = make_float2(0.0f, 0.0f);
  if (threadIdx.x == 0) {
    MaxSum total;
    total.m = warp_m[0];
    total.s = warp_s[0];
    for (int w = 1; w < kWarps; ++w) total.merge(warp_m[w], warp_s[w]);
    const float l = total.m + logf(total.s);
    // A negative target is no loss term; one at or past V is an error, shown as NaN.
    out = make_float2(l, t < 0 ? 0.0f : t < V ? l - to_float(x[t]) : NAN);
  }
  return out;
}

// Row n's dlogits over ld columns: (exp(logits - l) - (j == t)) * dloss below V, 0 past it, and
// 0 everywhere for a negative (masked) target.
template <class T>
__device__ void row_dlogits(T* d, const T* x, float l, int32_t t, float dloss, int V, int ld) {
  if (t < 0) V = 0;
  for (int j = int(threadIdx.x); j < ld; j += kThreads) {
    if (j < V) {
      const float p = expf(to_float(x[j]) - l);
      d[j] = from_float<T>((p - (j == t ? 1.0f : 0.0f)) * dloss);
    } else {
      d[j] = from_float<T>(0.0f);
    }
  }
}

// Block n: row n (V vocabulary logits in a row of ld).
template <class T>
__global__ void __launch_bounds__(kThreads)
    crossentropy_forward_kernel(float* losses, float* lse, const T* logits, const int32_t* targets,
                                int V, int ld) {
  const int n = int(blockIdx.x);
  const float2 r = row_lse_loss(logits + size_t(n) * size_t(ld), targets[n], V);
  if (threadIdx.x == 0) {
    lse[n] = r.x;
    losses[n] = r.y;
  }
}

// Block n: row n, dlogits[n, j] = (exp(logits[n, j] - lse[n]) - (j == target)) * dloss.
template <class T>
__global__ void __launch_bounds__(kThreads)
    crossentropy_backward_kernel(T* dlogits, const T* logits, const float* lse,
                                 const int32_t* targets, float dloss, int V, int ld) {
  const int n = int(blockIdx.x);
  const size_t row = size_t(n) * size_t(ld);
  row_dlogits(dlogits + row, logits + row, lse[n], targets[n], dloss, V, ld);
}

// Block n: row n's loss and lse, then (thread 0's lse through shared memory, after every read of
// the row by the reduction) the row overwritten by its dlogits.
template <class T>
__global__ void __launch_bounds__(kThreads)
    crossentropy_fused_kernel(float* losses, float* lse, T* logits, const int32_t* targets,
                              float dloss, int V, int ld) {
  __shared__ float row_lse;
  const int n = int(blockIdx.x);
  T* x = logits + size_t(n) * size_t(ld);
  const int32_t t = targets[n];
  const float2 r = row_lse_loss(x, t, V);
  if (threadIdx.x == 0) {
    lse[n] = r.x;
    losses[n] = r.y;
    row_lse = r.x;
  }
  __syncthreads();
  row_dlogits(x, x, row_lse, t, dloss, V, ld);
}

// The shard's real columns: [0, real) of its Vl.
__host__ __device__ int shard_real_columns(int Vl, int v0, int V) {
  const int r = V - v0;
  return r < 0 ? 0 : (r > Vl ? Vl : r);
}

// v folded over the block, lanes down to lane 0, then thread 0 over the warps in order: the result
// on thread 0 (others: unspecified). Once per kernel (one shared array).
template <class Op>
__device__ float block_fold(float v, Op op) {
  __shared__ float warp_v[kWarps];
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  if (lane == 0) warp_v[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    v = warp_v[0];
    for (int w = 1; w < kWarps; ++w) v = op(v, warp_v[w]);
  }
  return v;
}

// Block n: row n's max over the real columns, and its target's logit where the shard holds it.
template <class T>
__global__ void __launch_bounds__(kThreads)
    crossentropy_shard_stats_kernel(float* row_max, float* target_logit, const T* logits,
                                    const int32_t* targets, int Vl, int v0, int real) {
  const int n = int(blockIdx.x);
  const T* x = logits + size_t(n) * size_t(Vl);
  float m = -INFINITY;
  for (int j = int(threadIdx.x); j < real; j += kThreads) m = fmaxf(m, to_float(x[j]));
  m = block_fold(m, [](float a, float b) { return fmaxf(a, b); });
  if (threadIdx.x == 0) {
    row_max[n] = m;
    const int t = targets[n] - v0;
    target_logit[n] = t >= 0 && t < real ? to_float(x[t]) : 0.0f;
  }
}

// Block n: sum over the real columns of exp(x - row_max[n]).
template <class T>
__global__ void __launch_bounds__(kThreads)
    crossentropy_shard_sumexp_kernel(float* sum, const T* logits, const float* row_max, int Vl,
                                     int real) {
  const int n = int(blockIdx.x);
  const T* x = logits + size_t(n) * size_t(Vl);
  const float m = row_max[n];
  float acc = 0.0f;
  for (int j = int(threadIdx.x); j < real; j += kThreads) acc += expf(to_float(x[j]) - m);
  acc = block_fold(acc, [](float a, float b) { return a + b; });
  if (threadIdx.x == 0) sum[n] = acc;
}

__global__ void crossentropy_shard_loss_kernel(float* losses, float* lse, const float* row_max,
                                               const float* sum, const float* target_logit,
                                               const int32_t* targets, int N) {
  const int n = int(blockIdx.x) * int(blockDim.x) + int(threadIdx.x);
  if (n >= N) return;
  const float l = row_max[n] + logf(sum[n]);
  lse[n] = l;
  losses[n] = targets[n] < 0 ? 0.0f : l - target_logit[n];
}

// Block n: row_dlogits on the shard's columns, its target shifted by v0 (off the shard: no
// one-hot term; a negative target still zeroes the row).
template <class T>
__global__ void __launch_bounds__(kThreads)
    crossentropy_shard_backward_kernel(T* dlogits, const T* logits, const float* lse,
                                       const int32_t* targets, float dloss, int Vl, int v0,
                                       int real) {
  const int n = int(blockIdx.x);
  const size_t row = size_t(n) * size_t(Vl);
  const int32_t t = targets[n];
  const int32_t shifted = t < 0 ? -1 : (t - v0 >= 0 && t - v0 < real ? t - v0 : INT32_MAX);
  row_dlogits(dlogits + row, logits + row, lse[n], shifted, dloss, real, Vl);
}

void check_rows(int V, int ld) {
  MPITRON_REQUIRE(V <= ld, "cross-entropy: the row length ld is shorter than the vocabulary V");
}

}  // namespace

template <class T>
void crossentropy_forward(float* losses, float* lse, const T* logits, const int32_t* targets, int N,
                          int V, int Vp, cudaStream_t s) {
  check_rows(V, Vp);
  if (N <= 0 || V <= 0) return;
  crossentropy_forward_kernel<T>
      <<<unsigned(N), kThreads, 0, s>>>(losses, lse, logits, targets, V, Vp);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void crossentropy_backward(T* dlogits, const T* logits, const float* lse, const int32_t* targets,
                           float dloss, int N, int V, int Vp, cudaStream_t s) {
  check_rows(V, Vp);
  if (N <= 0 || V <= 0) return;
  crossentropy_backward_kernel<T>
      <<<unsigned(N), kThreads, 0, s>>>(dlogits, logits, lse, targets, dloss, V, Vp);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void crossentropy_forward(float* losses, float* lse, const T* logits, const int32_t* targets, int N,
                          int V, cudaStream_t s) {
  crossentropy_forward(losses, lse, logits, targets, N, V, V, s);
}

template <class T>
void crossentropy_backward(T* dlogits, const T* logits, const float* lse, const int32_t* targets,
                           float dloss, int N, int V, cudaStream_t s) {
  crossentropy_backward(dlogits, logits, lse, targets, dloss, N, V, V, s);
}

template <class T>
void crossentropy_fused(float* losses, float* lse, T* logits, const int32_t* targets, float dloss,
                        int N, int V, int Vp, cudaStream_t s) {
  check_rows(V, Vp);
  if (N <= 0 || V <= 0) return;
  crossentropy_fused_kernel<T>
      <<<unsigned(N), kThreads, 0, s>>>(losses, lse, logits, targets, dloss, V, Vp);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void crossentropy_shard_stats(float* row_max, float* target_logit, const T* logits,
                              const int32_t* targets, int N, int Vl, int v0, int V,
                              cudaStream_t s) {
  if (N <= 0) return;
  crossentropy_shard_stats_kernel<T><<<unsigned(N), kThreads, 0, s>>>(
      row_max, target_logit, logits, targets, Vl, v0, shard_real_columns(Vl, v0, V));
  CUDA_CHECK_LAUNCH();
}

template <class T>
void crossentropy_shard_sumexp(float* sum, const T* logits, const float* row_max, int N, int Vl,
                               int v0, int V, cudaStream_t s) {
  if (N <= 0) return;
  crossentropy_shard_sumexp_kernel<T>
      <<<unsigned(N), kThreads, 0, s>>>(sum, logits, row_max, Vl, shard_real_columns(Vl, v0, V));
  CUDA_CHECK_LAUNCH();
}

void crossentropy_shard_loss(float* losses, float* lse, const float* row_max, const float* sum,
                             const float* target_logit, const int32_t* targets, int N,
                             cudaStream_t s) {
  if (N <= 0) return;
  const int threads = 256;
  crossentropy_shard_loss_kernel<<<unsigned((N + threads - 1) / threads), threads, 0, s>>>(
      losses, lse, row_max, sum, target_logit, targets, N);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void crossentropy_shard_backward(T* dlogits, const T* logits, const float* lse,
                                 const int32_t* targets, float dloss, int N, int Vl, int v0, int V,
                                 cudaStream_t s) {
  if (N <= 0 || Vl <= 0) return;
  crossentropy_shard_backward_kernel<T><<<unsigned(N), kThreads, 0, s>>>(
      dlogits, logits, lse, targets, dloss, Vl, v0, shard_real_columns(Vl, v0, V));
  CUDA_CHECK_LAUNCH();
}

#define MPITRON_INSTANTIATE(T)                                                                    \
  template void crossentropy_forward<T>(float*, float*, const T*, const int32_t*, int, int,       \
                                        cudaStream_t);                                            \
  template void crossentropy_backward<T>(T*, const T*, const float*, const int32_t*, float, int,  \
                                         int, cudaStream_t);                                      \
  template void crossentropy_forward<T>(float*, float*, const T*, const int32_t*, int, int, int,  \
                                        cudaStream_t);                                            \
  template void crossentropy_backward<T>(T*, const T*, const float*, const int32_t*, float, int,  \
                                         int, int, cudaStream_t);                                 \
  template void crossentropy_fused<T>(float*, float*, T*, const int32_t*, float, int, int, int,   \
                                      cudaStream_t);                                              \
  template void crossentropy_shard_stats<T>(float*, float*, const T*, const int32_t*, int, int,   \
                                            int, int, cudaStream_t);                              \
  template void crossentropy_shard_sumexp<T>(float*, const T*, const float*, int, int, int, int,  \
                                             cudaStream_t);                                       \
  template void crossentropy_shard_backward<T>(T*, const T*, const float*, const int32_t*, float, \
                                               int, int, int, int, cudaStream_t);
MPITRON_INSTANTIATE(float)
MPITRON_INSTANTIATE(__nv_bfloat16)
MPITRON_INSTANTIATE(__half)
#undef MPITRON_INSTANTIATE

}  // namespace mpitron::cuda
