// cpu::adamw_update's CUDA twin (contracts: src/cuda/adamw.cuh): its folded form in its operation
// order, every operation correctly rounded, many tensors a launch; the 8-bit update below follows
// cpu::adamw8bit_update the same way.
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

// The float scalars of one AdamW step: AdamWStep's (the CPU's), keep = 1 - lr decay for decayed
// tensors (1 for the others: per tensor in the multi-tensor launch).
struct AdamWScalars {
  float b1, b2, one_minus_b1, one_minus_b2, step_size, inv_sqrt_bc2, eps, keep_decayed, keep,
      grad_scale;
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
// this is the CPU formula in the CPU order, operation for operation (the CPU file is built
// without contraction): w keep - step_size m / (sqrt(v) inv_sqrt_bc2 + eps).
template <class W>
__device__ __forceinline__ void adamw_element(float* __restrict__ w, const float* __restrict__ g,
                                              float* __restrict__ m, float* __restrict__ v,
                                              W* __restrict__ out, size_t i, const AdamWScalars& k,
                                              float keep) {
  const float gi = __fmul_rn(g[i], k.grad_scale);
  const float mi = __fadd_rn(__fmul_rn(k.b1, m[i]), __fmul_rn(k.one_minus_b1, gi));
  const float vi = __fadd_rn(__fmul_rn(k.b2, v[i]), __fmul_rn(__fmul_rn(k.one_minus_b2, gi), gi));
  const float denominator = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), k.inv_sqrt_bc2), k.eps);
  const float updated =
      __fsub_rn(__fmul_rn(w[i], keep), __fdiv_rn(__fmul_rn(k.step_size, mi), denominator));
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
    adamw_element(w, g, m, v, out, i, k, k.keep);
}

// Up to kMaxTensors parameter ranges in one launch, passed by value (a kernel parameter under
// 4 KiB): range t is flat elements [begin[t], begin[t] + (start[t+1] - start[t])) of the update
// range, its factor keep[t] (1 - lr decay, or 1); element e of the launch lies in the range whose
// start holds it.
constexpr int kMaxTensors = 160;
struct AdamWTensors {
  int count;
  float keep[kMaxTensors];
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
    adamw_element(w, g, m, v, out, t.begin[lo] + (e - t.start[lo]), k, t.keep[lo]);
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
  const AdamWStep c(cfg, lr, t);
  AdamWScalars k{};
  k.b1 = c.b1;
  k.b2 = c.b2;
  k.one_minus_b1 = c.one_minus_b1;
  k.one_minus_b2 = c.one_minus_b2;
  k.step_size = c.step_size;
  k.inv_sqrt_bc2 = c.inv_sqrt_bc2;
  k.eps = c.eps;
  k.keep_decayed = 1.0f - c.lr_decay;  // in float, as cpu::adamw_update computes it
  k.keep = 1.0f;
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
    k.keep = p->weight_decay ? k.keep_decayed : 1.0f;
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
    batch.keep[i] = p->weight_decay ? k.keep_decayed : 1.0f;
    batch.begin[i] = begin - r.begin;
    batch.start[i + 1] = batch.start[i] + (end - begin);
  }
  if (batch.count > 0) launch(batch);
}

namespace {

__constant__ float c_m_map[256], c_v_map[256];
__constant__ double c_m_mid[256], c_v_mid[256];

constexpr int kQuantBlock = 256;  // kAdamW8bitBlock: one thread an element, one block a block

// Up to kMaxTensors parameters overlapping the launch's blocks, by absolute flat position.
struct AdamW8bitTensors {
  int count;
  size_t offset[kMaxTensors], end[kMaxTensors];
  unsigned char decay[kMaxTensors];
};

// Index of the code nearest x: the midpoints below it, by cpu's branch-free binary search.
__device__ __forceinline__ int nearest_code(const double* mid, double x) {
  int i = 0;
  for (int half = 128; half > 0; half /= 2) i += mid[i + half - 1] < x ? half : 0;
  return i + (mid[i] < x ? 1 : 0);
}

__device__ __forceinline__ float block_max(float x, float* scratch) {
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  if (warp == 0) {
    x = lane < kQuantBlock / 32 ? scratch[lane] : 0.0f;
    for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    if (lane == 0) scratch[0] = x;
  }
  __syncthreads();
  const float result = scratch[0];
  __syncthreads();  // scratch is reused by the next reduction
  return result;
}

__global__ void adamw8bit_kernel(float* __restrict__ params, const float* __restrict__ grads,
                                 uint8_t* __restrict__ m_codes, uint8_t* __restrict__ v_codes,
                                 float* __restrict__ m_absmax, float* __restrict__ v_absmax,
                                 size_t launch_begin, size_t p_offset, size_t g_offset,
                                 size_t state_offset, AdamW8bitStep c, float grad_scale,
                                 uint8_t m_zero, uint8_t v_zero, const AdamW8bitTensors t) {
  __shared__ float scratch[kQuantBlock / 32];
  const size_t first = launch_begin + size_t(blockIdx.x) * kQuantBlock;
  const size_t e = first + threadIdx.x, s = e - state_offset, k = (first - state_offset) / 256;
  float m = __fmul_rn(c_m_map[m_codes[s]], m_absmax[k]);
  float v = __fmul_rn(c_v_map[v_codes[s]], v_absmax[k]);
  int lo = 0, hi = t.count - 1;  // the last tensor starting at or before e
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (t.offset[mid] <= e)
      lo = mid;
    else
      hi = mid - 1;
  }
  if (t.count > 0 && t.offset[lo] <= e && e < t.end[lo]) {  // else padding: the moments stay
    const float g = __fmul_rn(grads[e - g_offset], grad_scale);
    const float keep = t.decay[lo] ? c.keep_decayed : 1.0f;
    m = __fadd_rn(__fmul_rn(c.b1, m), __fmul_rn(c.one_minus_b1, g));
    v = __fadd_rn(__fmul_rn(c.b2, v), __fmul_rn(__fmul_rn(c.one_minus_b2, g), g));
    float& w = params[e - p_offset];
    w = __fsub_rn(__fmul_rn(w, keep),
                  __fdiv_rn(__fmul_rn(c.step_size, m),
                            __fadd_rn(__fmul_rn(__fsqrt_rn(v), c.inv_sqrt_bc2), c.eps)));
  }
  // max |value| ignores NaN as std::max from 0 does; max is exact in any order.
  const float m_max = block_max(fabsf(m), scratch), v_max = block_max(fabsf(v), scratch);
  if (threadIdx.x == 0) m_absmax[k] = m_max, v_absmax[k] = v_max;
  m_codes[s] = m_max > 0.0f ? uint8_t(nearest_code(c_m_mid, double(__fdiv_rn(m, m_max)))) : m_zero;
  v_codes[s] = v_max > 0.0f ? uint8_t(nearest_code(c_v_mid, double(__fdiv_rn(v, v_max)))) : v_zero;
}

}  // namespace

void adamw8bit_update(const AdamWTensor* tensors, size_t count, const AdamW8bitRange& r,
                      const AdamW8bitStep& step, const AdamW8bitTables& tables, float grad_scale,
                      cudaStream_t s) {
  MPITRON_REQUIRE(r.weights == nullptr, "8-bit AdamW keeps no 16-bit weights copy");
  constexpr size_t B = kQuantBlock;
  MPITRON_REQUIRE(r.begin % B == 0 && r.end % B == 0 && r.state_offset % B == 0 &&
                      r.state_offset <= r.begin && r.begin <= r.end,
                  "8-bit AdamW updates whole blocks of 256 flat elements");
  if (r.begin == r.end) return;
  CUDA_CHECK(cudaMemcpyToSymbolAsync(c_m_map, tables.m_map, sizeof(tables.m_map), 0,
                                     cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyToSymbolAsync(c_v_map, tables.v_map, sizeof(tables.v_map), 0,
                                     cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyToSymbolAsync(c_m_mid, tables.m_mid, sizeof(tables.m_mid), 0,
                                     cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyToSymbolAsync(c_v_mid, tables.v_mid, sizeof(tables.v_mid), 0,
                                     cudaMemcpyHostToDevice, s));
  // Launches over whole blocks [from, to), each with the tensors overlapping them (a tensor that
  // crosses a cut goes with both launches).
  auto launch = [&](size_t from, size_t to, const AdamW8bitTensors& t) {
    if (from >= to) return;
    adamw8bit_kernel<<<unsigned((to - from) / B), kQuantBlock, 0, s>>>(
        r.params, r.grads, r.m_codes, r.v_codes, r.m_absmax, r.v_absmax, from, r.p_offset,
        r.g_offset, r.state_offset, step, grad_scale, tables.m_zero, tables.v_zero, t);
    CUDA_CHECK(cudaGetLastError());
  };
  AdamW8bitTensors batch{};
  size_t from = r.begin;
  for (const AdamWTensor* p = tensors; p != tensors + count; ++p) {
    const size_t begin = std::max(r.begin, p->offset), end = std::min(r.end, p->offset + p->numel);
    if (begin >= end) continue;
    if (batch.count == kMaxTensors) {  // cut at the block that holds this tensor's start
      const size_t cut = begin / B * B;
      MPITRON_REQUIRE(cut > from, "more than 160 parameters in one 8-bit block");
      launch(from, cut, batch);
      AdamW8bitTensors next{};  // the tensors that reach past the cut go on
      for (int i = 0; i < batch.count; ++i)
        if (batch.end[i] > cut) {
          next.offset[next.count] = batch.offset[i];
          next.end[next.count] = batch.end[i];
          next.decay[next.count++] = batch.decay[i];
        }
      MPITRON_REQUIRE(next.count < kMaxTensors, "more than 160 parameters in one 8-bit block");
      batch = next;
      from = cut;
    }
    batch.offset[batch.count] = begin;
    batch.end[batch.count] = end;
    batch.decay[batch.count++] = p->weight_decay ? 1 : 0;
  }
  launch(from, r.end, batch);
}

}  // namespace mpitron::cuda
