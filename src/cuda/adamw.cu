// cpu::adamw_update's CUDA twin (contracts: src/cuda/adamw.cuh): the same operation order, every
// operation correctly rounded, many tensors a launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "base/check.hpp"
#include "base/cuda_check.hpp"
#include "src/cuda/adamw.cuh"

namespace mpitron::cuda {

namespace {

// The float scalars of one AdamW step, computed on the host exactly as cpu::adamw_update does.
struct AdamWScalars {
  float b1, b2, one_minus_b1, one_minus_b2, eps, bc1, bc2, lr, decay, grad_scale;
};

// Output type tag for fp32 runs: no low-precision weights copy.
struct NoWeights {};

__device__ inline void store_rounded(NoWeights*, size_t, float) {}
__device__ inline void store_rounded(__nv_bfloat16* out, size_t i, float x) {
  out[i] = __float2bfloat16(x);  // round to nearest even
}
__device__ inline void store_rounded(__half* out, size_t i, float x) {
  out[i] = __float2half(x);  // round to nearest even
}

// cpu::adamw_update's loop body with every operation written as its own correctly rounded
// intrinsic: nvcc would otherwise contract multiply-adds into FMAs and change the rounding, so
// this is the CPU formula in the CPU order, operation for operation.
template <class W>
__device__ __forceinline__ void adamw_element(float* __restrict__ w, const float* __restrict__ g,
                                              float* __restrict__ m, float* __restrict__ v,
                                              W* __restrict__ out, size_t i, const AdamWScalars& k,
                                              float decay) {
  const float gi = __fmul_rn(g[i], k.grad_scale);
  const float mi = __fadd_rn(__fmul_rn(k.b1, m[i]), __fmul_rn(k.one_minus_b1, gi));
  const float vi = __fadd_rn(__fmul_rn(k.b2, v[i]), __fmul_rn(__fmul_rn(k.one_minus_b2, gi), gi));
  const float mhat = __fdiv_rn(mi, k.bc1), vhat = __fdiv_rn(vi, k.bc2);
  const float wi = w[i];
  const float step =
      __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), k.eps)), __fmul_rn(decay, wi));
  const float updated = __fsub_rn(wi, __fmul_rn(k.lr, step));
  m[i] = mi;
  v[i] = vi;
  w[i] = updated;
  store_rounded(out, i, updated);
}

template <class W>
__global__ void adamw_kernel(float* __restrict__ w, const float* __restrict__ g,
                             float* __restrict__ m, float* __restrict__ v, W* __restrict__ out,
                             size_t n, AdamWScalars k) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    adamw_element(w, g, m, v, out, i, k, k.decay);
}

// Up to kMaxTensors parameter ranges in one launch, passed by value (a kernel parameter under
// 4 KiB): range t is flat elements [begin[t], begin[t] + (start[t+1] - start[t])) of the update
// range, its decay decay[t]; element e of the launch lies in the range whose start holds it.
constexpr int kMaxTensors = 160;
struct AdamWTensors {
  int count;
  float decay[kMaxTensors];
  size_t begin[kMaxTensors];      // relative to the AdamWRange's begin
  size_t start[kMaxTensors + 1];  // prefix sums of the ranges' lengths
};

template <class W>
__global__ void adamw_multi_kernel(float* __restrict__ w, const float* __restrict__ g,
                                   float* __restrict__ m, float* __restrict__ v,
                                   W* __restrict__ out, AdamWScalars k, const AdamWTensors t) {
  const size_t total = t.start[t.count];
  for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += size_t(gridDim.x) * blockDim.x) {
    int lo = 0, hi = t.count - 1;  // the last range whose start <= e
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (t.start[mid] <= e)
        lo = mid;
      else
        hi = mid - 1;
    }
    adamw_element(w, g, m, v, out, t.begin[lo] + (e - t.start[lo]), k, t.decay[lo]);
  }
}

template <class W>
void launch_adamw(float* w, const float* g, float* m, float* v, W* out, size_t n,
                  const AdamWScalars& k, cudaStream_t s) {
  constexpr int kThreads = 256;
  // Grid-stride loop: the block count is capped, any n is covered.
  const size_t blocks = std::min<size_t>((n + kThreads - 1) / kThreads, size_t(1) << 16);
  adamw_kernel<W><<<unsigned(blocks), kThreads, 0, s>>>(w, g, m, v, out, n, k);
  CUDA_CHECK(cudaGetLastError());
}

template <class W>
void launch_adamw_multi(float* w, const float* g, float* m, float* v, W* out, const AdamWScalars& k,
                        const AdamWTensors& t, cudaStream_t s) {
  constexpr int kThreads = 256;
  const size_t n = t.start[t.count];
  if (n == 0) return;
  const size_t blocks = std::min<size_t>((n + kThreads - 1) / kThreads, size_t(1) << 16);
  adamw_multi_kernel<W><<<unsigned(blocks), kThreads, 0, s>>>(w, g, m, v, out, k, t);
  CUDA_CHECK(cudaGetLastError());
}

AdamWScalars adamw_scalars(const AdamWConfig& cfg, double lr, float grad_scale, int64_t t) {
  AdamWScalars k{};
  k.b1 = float(cfg.beta1);
  k.b2 = float(cfg.beta2);
  k.one_minus_b1 = 1.0f - k.b1;  // in float, as the CPU loop computes it
  k.one_minus_b2 = 1.0f - k.b2;
  k.eps = float(cfg.eps);
  k.bc1 = float(1.0 - std::pow(cfg.beta1, double(t)));
  k.bc2 = float(1.0 - std::pow(cfg.beta2, double(t)));
  k.lr = float(lr);
  k.grad_scale = grad_scale;
  return k;
}

void require_weight_type(const AdamWRange& r) {
  MPITRON_REQUIRE(r.weights == nullptr || r.weight_type != DType::f32,
                  "a weights copy is bf16 or f16; fp32 runs pass weights = nullptr");
}

}  // namespace

void adamw_update_per_tensor(const AdamWTensor* tensors, size_t count, const AdamWRange& r,
                             const AdamWConfig& cfg, double lr, float grad_scale, int64_t t,
                             cudaStream_t s) {
  require_weight_type(r);
  AdamWScalars k = adamw_scalars(cfg, lr, grad_scale, t);
  for (const AdamWTensor* p = tensors; p != tensors + count; ++p) {
    const size_t begin = std::max(r.begin, p->offset), end = std::min(r.end, p->offset + p->numel);
    if (begin >= end) continue;
    k.decay = p->weight_decay ? float(cfg.weight_decay) : 0.0f;
    float* w = r.params + (begin - r.p_offset);
    const float* g = r.grads + (begin - r.g_offset);
    float* m = r.m + (begin - r.m_offset);
    float* v = r.v + (begin - r.m_offset);
    const size_t n = end - begin;
    if (r.weights == nullptr) {
      launch_adamw(w, g, m, v, static_cast<NoWeights*>(nullptr), n, k, s);
    } else if (r.weight_type == DType::bf16) {
      launch_adamw(w, g, m, v, static_cast<__nv_bfloat16*>(r.weights) + (begin - r.p_offset), n, k,
                   s);
    } else {
      launch_adamw(w, g, m, v, static_cast<__half*>(r.weights) + (begin - r.p_offset), n, k, s);
    }
  }
}

void adamw_update(const AdamWTensor* tensors, size_t count, const AdamWRange& r,
                  const AdamWConfig& cfg, double lr, float grad_scale, int64_t t, cudaStream_t s) {
  require_weight_type(r);
  const AdamWScalars k = adamw_scalars(cfg, lr, grad_scale, t);
  // Every pointer at the range's begin: a tensor's elements at (its begin - r.begin).
  float* w = r.params + (r.begin - r.p_offset);
  const float* g = r.grads + (r.begin - r.g_offset);
  float* m = r.m + (r.begin - r.m_offset);
  float* v = r.v + (r.begin - r.m_offset);
  auto launch = [&](const AdamWTensors& batch) {
    if (r.weights == nullptr)
      launch_adamw_multi(w, g, m, v, static_cast<NoWeights*>(nullptr), k, batch, s);
    else if (r.weight_type == DType::bf16)
      launch_adamw_multi(
          w, g, m, v, static_cast<__nv_bfloat16*>(r.weights) + (r.begin - r.p_offset), k, batch, s);
    else
      launch_adamw_multi(w, g, m, v, static_cast<__half*>(r.weights) + (r.begin - r.p_offset), k,
                         batch, s);
  };
  AdamWTensors batch{};
  batch.start[0] = 0;
  for (const AdamWTensor* p = tensors; p != tensors + count; ++p) {
    const size_t begin = std::max(r.begin, p->offset), end = std::min(r.end, p->offset + p->numel);
    if (begin >= end) continue;
    if (batch.count == kMaxTensors) {
      launch(batch);
      batch.count = 0;
    }
    const int i = batch.count++;
    batch.decay[i] = p->weight_decay ? float(cfg.weight_decay) : 0.0f;
    batch.begin[i] = begin - r.begin;
    batch.start[i + 1] = batch.start[i] + (end - begin);
  }
  if (batch.count > 0) launch(batch);
}

}  // namespace mpitron::cuda
