// Flash attention (Dao et al. 2022) in fp32 SIMT arithmetic for float, bf16 and fp16 storage.
// Contracts are in layers/cuda/attention.cuh. Every kernel has 8 warps; a warp owns RW rows of the
// block's tile (queries in forward and dQ, keys in dK/dV) and each lane owns CPL columns (c = lane
// + 32 t) of the inner tile, or DPL = HS/32 head dimensions (d = lane + 32 c) of the accumulators.
// Operands read by every lane of a warp (the warp's own rows) are row-major in shared memory and
// read as float4 broadcasts; operands indexed by lane are stored transposed with a row stride of
// (columns + 1), so both the lane-indexed reads and the transposing writes hit 32 distinct banks.
// Scores are kept in base 2 (scaled by log2(e) / sqrt(HS)) for exp2f.
// These are the exact path for float and the reference for 16-bit storage, which runs on tensor
// cores (attention_mma.cu) where the device and head size allow, unless
// MPITRON_ATTENTION=reference.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "base/cuda_check.hpp"
#include "layers/cuda/attention.cuh"
#include "layers/cuda/attention_mma.cuh"
#include "layers/cuda/elementwise.cuh"

namespace mpitron::cuda {

bool attention_head_size_ok(int head_size) {
  return head_size == 32 || head_size == 64 || head_size == 128;
}

namespace {

using elementwise::store;
using elementwise::to_float;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Tile shapes per head size: RW rows per warp (block tile 8 * RW rows) and CPL columns per lane
// (inner tile 32 * CPL columns). Chosen so that every kernel's shared memory stays within 96 KiB,
// the per-block opt-in limit of V100 (sm_70); see the *_smem_floats functions.
template <int HS>
struct Tiles;
template <>
struct Tiles<32> {
  static constexpr int kFwdRW = 8, kFwdCPL = 2, kKvRW = 8, kKvCPL = 2, kQRW = 8, kQCPL = 2;
};
template <>
struct Tiles<64> {
  static constexpr int kFwdRW = 8, kFwdCPL = 2, kKvRW = 8, kKvCPL = 1, kQRW = 8, kQCPL = 1;
};
template <>
struct Tiles<128> {
  static constexpr int kFwdRW = 8, kFwdCPL = 1, kKvRW = 4, kKvCPL = 1, kQRW = 4, kQCPL = 1;
};

// Shared floats of each kernel; every region's size is a multiple of 4 floats, so the float4
// regions stay 16-byte aligned.
template <int HS, int RW, int CPL>
constexpr size_t fwd_smem_floats() {  // Qs [BR][HS], Kt [HS][BC+1], Vs [BC][HS], Ps [BR][BC]
  constexpr int BR = kWarps * RW, BC = 32 * CPL;
  return size_t(BR) * HS + size_t(HS) * (BC + 1) + size_t(BC) * HS + size_t(BR) * BC;
}
template <int HS, int RW, int CPL>
constexpr size_t dkdv_smem_floats() {  // Ks, Vs [BK][HS], Qt, Dt [HS][BQ+1], Ps [BK][BQ], Ls, Ds
  constexpr int BK = kWarps * RW, BQ = 32 * CPL;
  return 2 * size_t(BK) * HS + 2 * size_t(HS) * (BQ + 1) + size_t(BK) * BQ + 2 * size_t(BQ);
}
template <int HS, int RW, int CPL>
constexpr size_t dq_smem_floats() {  // Qs, Os [BQ][HS], Kt, Vt [HS][BC+1], Ps [BQ][BC], Ls, Ds
  constexpr int BQ = kWarps * RW, BC = 32 * CPL;
  return 2 * size_t(BQ) * HS + 2 * size_t(HS) * (BC + 1) + size_t(BQ) * BC + 2 * size_t(BQ);
}

// Butterfly reductions: every lane ends with the same value (each step adds the same pair in every
// lane, and a + b == b + a), so the result is uniform across the warp and deterministic.
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Valid keys of sequence b, clamped to [0, T] (lengths is not checked on the host).
__device__ __forceinline__ int valid_keys(const int32_t* lengths, int b, int T) {
  if (!lengths) return T;
  const int L = lengths[b];
  return L < 0 ? 0 : (L > T ? T : L);
}

// Base-2 log-sum-exp of a row as backward uses it; +inf for a row that saw no key (lse = -inf), so
// that exp2f(s - it) is 0 rather than NaN.
__device__ __forceinline__ float lse2_of(float lse) {
  return lse > -INFINITY ? lse * kLog2e : INFINITY;
}

// acc[r][t] = sum_d A[r][d] Bt[d][lane + 32t], d in order 0, 1, ..., HS-1 (one fma chain per
// entry): A is this warp's RW rows, row-major with stride HS (float4 broadcasts); Bt is a
// transposed tile with row stride BS = 32 CPL + 1 (lane-indexed reads, 32 distinct banks).
template <int HS, int RW, int CPL, int BS>
__device__ __forceinline__ void row_dot_columns(float (&acc)[RW][CPL], const float* A,
                                                const float* Bt, int lane) {
#pragma unroll
  for (int r = 0; r < RW; ++r)
#pragma unroll
    for (int t = 0; t < CPL; ++t) acc[r][t] = 0.f;
#pragma unroll 1
  for (int d = 0; d < HS; d += 4) {
    float bb[4][CPL];
#pragma unroll
    for (int e = 0; e < 4; ++e)
#pragma unroll
      for (int t = 0; t < CPL; ++t) bb[e][t] = Bt[(d + e) * BS + lane + 32 * t];
#pragma unroll
    for (int r = 0; r < RW; ++r) {
      const float4 a = *reinterpret_cast<const float4*>(A + r * HS + d);
#pragma unroll
      for (int t = 0; t < CPL; ++t) {
        acc[r][t] = fmaf(a.x, bb[0][t], acc[r][t]);
        acc[r][t] = fmaf(a.y, bb[1][t], acc[r][t]);
        acc[r][t] = fmaf(a.z, bb[2][t], acc[r][t]);
        acc[r][t] = fmaf(a.w, bb[3][t], acc[r][t]);
      }
    }
  }
}

// acc[r][c] += sum_j W[r][j] B[j * JS + (lane + 32c) * DS], j in order 0, 1, ..., NJ-1: W is this
// warp's RW rows of weights (P or dS), row-major with stride NJ (float4 broadcasts); B is a tile
// indexed by (j, d), row-major (JS = HS, DS = 1) or transposed (JS = 1, DS = NJ + 1), both
// conflict-free for d = lane + 32c.
template <int DPL, int RW, int NJ, int JS, int DS>
__device__ __forceinline__ void rows_times_tile(float (&acc)[RW][DPL], const float* W,
                                                const float* B, int lane) {
#pragma unroll 1
  for (int j = 0; j < NJ; j += 4) {
    float bb[4][DPL];
#pragma unroll
    for (int e = 0; e < 4; ++e)
#pragma unroll
      for (int c = 0; c < DPL; ++c) bb[e][c] = B[(j + e) * JS + (lane + 32 * c) * DS];
#pragma unroll
    for (int r = 0; r < RW; ++r) {
      const float4 w = *reinterpret_cast<const float4*>(W + r * NJ + j);
#pragma unroll
      for (int c = 0; c < DPL; ++c) {
        acc[r][c] = fmaf(w.x, bb[0][c], acc[r][c]);
        acc[r][c] = fmaf(w.y, bb[1][c], acc[r][c]);
        acc[r][c] = fmaf(w.z, bb[2][c], acc[r][c]);
        acc[r][c] = fmaf(w.w, bb[3][c], acc[r][c]);
      }
    }
  }
}

// ---- forward ------------------------------------------------------------------------------------
// Block: one (b,h) and query rows [q0, q0 + BR); loops over key tiles [k0, k0 + BC) up to the last
// key any of its rows sees. Online softmax per row: running max m (uniform over the warp), per-lane
// partial sums l, accumulators o rescaled by exp2(m_old - m_new).
template <int HS, int RW, int CPL, class F>
__global__ void __launch_bounds__(kThreads, 2)
    attention_forward_kernel(F* __restrict__ out, float* __restrict__ lse,
                             const F* __restrict__ qkv, int T, int C, int NH, int q_tiles,
                             float qscale, bool causal, const int32_t* __restrict__ lengths) {
  constexpr int BR = kWarps * RW, BC = 32 * CPL, DPL = HS / 32, KS = BC + 1;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* Qs = reinterpret_cast<float*>(smem_raw);  // [BR][HS], times qscale
  float* Vs = Qs + BR * HS;                        // [BC][HS]
  float* Ps = Vs + BC * HS;                        // [BR][BC], each warp its RW rows
  float* Kt = Ps + BR * BC;                        // [HS][KS], K transposed

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int BNH = int(gridDim.x) / q_tiles;
  const int bh = int(blockIdx.x) % BNH;
  const int qt = q_tiles - 1 - int(blockIdx.x) / BNH;  // last (causal: costliest) tiles first
  const int b = bh / NH, h = bh % NH;
  const int q0 = qt * BR;
  const int L = valid_keys(lengths, b, T);
  const size_t C3 = 3 * size_t(C);
  const F* qbase = qkv + size_t(b) * T * C3 + size_t(h) * HS;  // token t at qbase + t * C3
  const F* kbase = qbase + C;
  const F* vbase = qbase + 2 * size_t(C);

  for (int idx = threadIdx.x; idx < BR * HS; idx += kThreads) {
    const int r = idx / HS, d = idx % HS, i = q0 + r;
    Qs[idx] = i < T ? to_float(qbase[size_t(i) * C3 + d]) * qscale : 0.f;
  }
  // Keys any row of this block sees: j < kend (rows >= T see at most min(row + 1, L) <= L).
  const int kend = causal ? min(q0 + BR, L) : L;
  const int row0 = q0 + warp * RW;  // this warp's first query
  const float* Qw = Qs + warp * RW * HS;
  float* Pw = Ps + warp * RW * BC;

  float o[RW][DPL], m[RW], l[RW];
#pragma unroll
  for (int r = 0; r < RW; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int c = 0; c < DPL; ++c) o[r][c] = 0.f;
  }

  for (int k0 = 0; k0 < kend; k0 += BC) {  // block-uniform trip count
    __syncthreads();  // previous tile's Kt, Vs fully read (first pass: Qs written)
    for (int idx = threadIdx.x; idx < BC * HS; idx += kThreads) {
      const int jj = idx / HS, d = idx % HS, j = k0 + jj;
      float kv = 0.f, vv = 0.f;
      if (j < kend) {  // keys >= kend (padded ones included) are never read
        kv = to_float(kbase[size_t(j) * C3 + d]);
        vv = to_float(vbase[size_t(j) * C3 + d]);
      }
      Kt[d * KS + jj] = kv;
      Vs[idx] = vv;
    }
    __syncthreads();

    // s[r][t] = log2(e)/sqrt(HS) q_(row0+r) . k_(k0+lane+32t)
    float s[RW][CPL];
    row_dot_columns<HS, RW, CPL, KS>(s, Qw, Kt, lane);

    // Mask, online softmax update, P to this warp's rows of Ps.
#pragma unroll
    for (int r = 0; r < RW; ++r) {
      const int i = row0 + r;
      const int vis = causal ? min(i + 1, L) : L;  // query i sees keys j < vis
      float mt = -INFINITY;
#pragma unroll
      for (int t = 0; t < CPL; ++t) {
        if (k0 + lane + 32 * t >= vis) s[r][t] = -INFINITY;
        mt = fmaxf(mt, s[r][t]);
      }
      mt = warp_max(mt);
      const float mnew = fmaxf(m[r], mt);
      const float mref = mnew == -INFINITY ? 0.f : mnew;  // no key seen yet: avoid -inf - -inf
      const float alpha = exp2f(m[r] - mref);             // 0 while m[r] is -inf
      m[r] = mnew;
      float ps = 0.f;
#pragma unroll
      for (int t = 0; t < CPL; ++t) {
        const float p = exp2f(s[r][t] - mref);  // masked: exp2f(-inf) = 0
        ps += p;
        Pw[r * BC + lane + 32 * t] = p;
      }
      l[r] = l[r] * alpha + ps;
#pragma unroll
      for (int c = 0; c < DPL; ++c) o[r][c] *= alpha;
    }
    __syncwarp();

    // o[r][c] += sum_j P[r][j] V[j][lane + 32c]
    rows_times_tile<DPL, RW, BC, HS, 1>(o, Pw, Vs, lane);
    __syncwarp();  // Pw read by every lane before the next tile overwrites it
  }

#pragma unroll
  for (int r = 0; r < RW; ++r) {
    const float lt = warp_sum(l[r]);  // whole warp, before the row test
    const int i = row0 + r;
    if (i < T) {
      const float inv = lt > 0.f ? 1.f / lt : 0.f;  // a row that saw no key: out 0, lse -inf
      F* orow = out + (size_t(b) * T + i) * C + size_t(h) * HS;
#pragma unroll
      for (int c = 0; c < DPL; ++c) store(orow + lane + 32 * c, o[r][c] * inv);
      if (lane == 0) lse[size_t(bh) * T + i] = lt > 0.f ? (m[r] + log2f(lt)) * kLn2 : -INFINITY;
    }
  }
}

// ---- backward: delta ----------------------------------------------------------------------------
// One warp per (b,i,h) row, rows ordered as in memory: delta[b,h,i] = sum_d dO[d] O[d], each lane
// summing d = lane, lane + 32, ... in order, then the butterfly.
template <int HS, class F>
__global__ void __launch_bounds__(kThreads, 2)
    attention_delta_kernel(float* __restrict__ delta, const F* __restrict__ dout,
                           const F* __restrict__ out, int T, int NH, int64_t rows) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;  // (b*T + i)*NH + h
  if (row >= rows) return;                                  // whole warps only
  const size_t off = size_t(row) * HS;                      // = (b*T + i)*C + h*HS
  float acc = 0.f;
#pragma unroll
  for (int c = 0; c < HS / 32; ++c)
    acc += to_float(dout[off + lane + 32 * c]) * to_float(out[off + lane + 32 * c]);
  acc = warp_sum(acc);
  if (lane == 0) {
    const int64_t bt = row / NH, h = row % NH, b = bt / T, i = bt % T;
    delta[(size_t(b) * NH + h) * T + i] = acc;
  }
}

// ---- backward: dK, dV ---------------------------------------------------------------------------
// Block: one (b,h) and key rows [k0, k0 + BK); loops over query tiles [q0, q0 + BQ) from the first
// query that sees k0 (causal) to T, in order. Per tile, for the warp's keys j and the lane's
// queries i: P = exp2(s - lse2_i), dV_j += sum_i P dO_i, dS = P (dP - delta_i) with dP = V_j .
// dO_i, dK_j += sum_i dS q_i; dK scaled by 1/sqrt(HS) at the end.
template <int HS, int RW, int CPL, class F>
__global__ void __launch_bounds__(kThreads, 2)
    attention_dkdv_kernel(F* __restrict__ dqkv, const F* __restrict__ dout,
                          const F* __restrict__ qkv, const float* __restrict__ lse,
                          const float* __restrict__ delta, int T, int C, int NH, int k_tiles,
                          float scale, float qscale, bool causal,
                          const int32_t* __restrict__ lengths) {
  constexpr int BK = kWarps * RW, BQ = 32 * CPL, DPL = HS / 32, QS = BQ + 1;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* Ks = reinterpret_cast<float*>(smem_raw);  // [BK][HS], times qscale
  float* Vs = Ks + BK * HS;                        // [BK][HS]
  float* Ps = Vs + BK * HS;                        // [BK][BQ], P then dS, each warp its RW rows
  float* Qt = Ps + BK * BQ;                        // [HS][QS], Q transposed
  float* Dt = Qt + HS * QS;                        // [HS][QS], dO transposed
  float* Ls = Dt + HS * QS;                        // [BQ] base-2 lse of the tile's queries
  float* Ds = Ls + BQ;                             // [BQ] delta of the tile's queries

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int BNH = int(gridDim.x) / k_tiles;
  const int bh = int(blockIdx.x) % BNH;
  const int kt = int(blockIdx.x) / BNH;  // first (causal: costliest) tiles first
  const int b = bh / NH, h = bh % NH;
  const int k0 = kt * BK;
  const int L = valid_keys(lengths, b, T);
  const size_t C3 = 3 * size_t(C);
  const size_t base = size_t(b) * T * C3 + size_t(h) * HS;
  const F* qbase = qkv + base;
  const F* kbase = qbase + C;
  const F* vbase = qbase + 2 * size_t(C);
  const F* dobase = dout + size_t(b) * T * C + size_t(h) * HS;  // token t at dobase + t * C
  F* dkbase = dqkv + base + C;
  F* dvbase = dqkv + base + 2 * size_t(C);
  const float* lse_bh = lse + size_t(bh) * T;
  const float* delta_bh = delta + size_t(bh) * T;

  if (k0 >= L) {  // every key of the tile is padding: gradients 0 (block-uniform exit)
    for (int idx = threadIdx.x; idx < BK * HS; idx += kThreads) {
      const int j = k0 + idx / HS, d = idx % HS;
      if (j < T) {
        store(dkbase + size_t(j) * C3 + d, 0.f);
        store(dvbase + size_t(j) * C3 + d, 0.f);
      }
    }
    return;
  }

  for (int idx = threadIdx.x; idx < BK * HS; idx += kThreads) {
    const int j = k0 + idx / HS, d = idx % HS;
    float kv = 0.f, vv = 0.f;
    if (j < L) {  // padded keys are never read
      kv = to_float(kbase[size_t(j) * C3 + d]) * qscale;
      vv = to_float(vbase[size_t(j) * C3 + d]);
    }
    Ks[idx] = kv;
    Vs[idx] = vv;
  }
  const int key0 = k0 + warp * RW;  // this warp's first key
  const float* Kw = Ks + warp * RW * HS;
  const float* Vw = Vs + warp * RW * HS;
  float* Pw = Ps + warp * RW * BQ;

  float dk[RW][DPL], dv[RW][DPL];
#pragma unroll
  for (int r = 0; r < RW; ++r)
#pragma unroll
    for (int c = 0; c < DPL; ++c) dk[r][c] = dv[r][c] = 0.f;

  const int qbeg = causal ? k0 : 0;        // causal: queries < k0 see none of these keys
  for (int q0 = qbeg; q0 < T; q0 += BQ) {  // block-uniform trip count
    // Previous tile's Qt, Dt, Ls, Ds fully read (first pass: Ks, Vs written).
    __syncthreads();
    for (int idx = threadIdx.x; idx < BQ * HS; idx += kThreads) {
      const int ii = idx / HS, d = idx % HS, i = q0 + ii;
      float qv = 0.f, ov = 0.f;
      if (i < T) {
        qv = to_float(qbase[size_t(i) * C3 + d]);
        ov = to_float(dobase[size_t(i) * C + d]);
      }
      Qt[d * QS + ii] = qv;
      Dt[d * QS + ii] = ov;
    }
    for (int ii = threadIdx.x; ii < BQ; ii += kThreads) {
      const int i = q0 + ii;
      Ls[ii] = i < T ? lse2_of(lse_bh[i]) : INFINITY;
      Ds[ii] = i < T ? delta_bh[i] : 0.f;
    }
    __syncthreads();

    // s[r][t] = log2(e)/sqrt(HS) k_(key0+r) . q_(q0+lane+32t), dp[r][t] = v_(key0+r) . dO_(...);
    // two passes over d, so fewer operands are live at once.
    float s[RW][CPL], dp[RW][CPL];
    row_dot_columns<HS, RW, CPL, QS>(s, Kw, Qt, lane);
    row_dot_columns<HS, RW, CPL, QS>(dp, Vw, Dt, lane);

    // P (kept in s) to Pw; dS (kept in dp).
#pragma unroll
    for (int r = 0; r < RW; ++r) {
      const int j = key0 + r;
#pragma unroll
      for (int t = 0; t < CPL; ++t) {
        const int ii = lane + 32 * t, i = q0 + ii;
        const bool seen = j < L && i < T && (!causal || j <= i);
        const float p = seen ? exp2f(s[r][t] - Ls[ii]) : 0.f;
        s[r][t] = p;
        dp[r][t] = p * (dp[r][t] - Ds[ii]);
        Pw[r * BQ + ii] = p;
      }
    }
    __syncwarp();

    // dv[r][c] += sum_i P[r][i] dO_i[lane + 32c]
    rows_times_tile<DPL, RW, BQ, 1, QS>(dv, Pw, Dt, lane);
    __syncwarp();  // P read by every lane before dS overwrites it

#pragma unroll
    for (int r = 0; r < RW; ++r)
#pragma unroll
      for (int t = 0; t < CPL; ++t) Pw[r * BQ + lane + 32 * t] = dp[r][t];
    __syncwarp();

    // dk[r][c] += sum_i dS[r][i] q_i[lane + 32c]
    rows_times_tile<DPL, RW, BQ, 1, QS>(dk, Pw, Qt, lane);
    __syncwarp();  // dS read by every lane before the next tile overwrites it
  }

#pragma unroll
  for (int r = 0; r < RW; ++r) {
    const int j = key0 + r;
    if (j < T) {
      const bool valid = j < L;  // padded keys: exactly 0
#pragma unroll
      for (int c = 0; c < DPL; ++c) {
        const size_t at = size_t(j) * C3 + lane + 32 * c;
        store(dkbase + at, valid ? dk[r][c] * scale : 0.f);
        store(dvbase + at, valid ? dv[r][c] : 0.f);
      }
    }
  }
}

// ---- backward: dQ -------------------------------------------------------------------------------
// Block: one (b,h) and query rows [q0, q0 + BQ); loops over key tiles [k0, k0 + BC) in order up to
// the last key any of its rows sees. Per tile, for the warp's queries i and the lane's keys j: dS =
// P (dO_i . v_j - delta_i), dQ_i += sum_j dS k_j; scaled by 1/sqrt(HS) at the end.
template <int HS, int RW, int CPL, class F>
__global__ void __launch_bounds__(kThreads, 2)
    attention_dq_kernel(F* __restrict__ dqkv, const F* __restrict__ dout, const F* __restrict__ qkv,
                        const float* __restrict__ lse, const float* __restrict__ delta, int T,
                        int C, int NH, int q_tiles, float scale, float qscale, bool causal,
                        const int32_t* __restrict__ lengths) {
  constexpr int BQ = kWarps * RW, BC = 32 * CPL, DPL = HS / 32, KS = BC + 1;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* Qs = reinterpret_cast<float*>(smem_raw);  // [BQ][HS], times qscale
  float* Os = Qs + BQ * HS;                        // [BQ][HS], dO
  float* Ps = Os + BQ * HS;                        // [BQ][BC], dS, each warp its RW rows
  float* Kt = Ps + BQ * BC;                        // [HS][KS], K transposed
  float* Vt = Kt + HS * KS;                        // [HS][KS], V transposed
  float* Ls = Vt + HS * KS;                        // [BQ] base-2 lse of the block's queries
  float* Ds = Ls + BQ;                             // [BQ] delta of the block's queries

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int BNH = int(gridDim.x) / q_tiles;
  const int bh = int(blockIdx.x) % BNH;
  const int qt = q_tiles - 1 - int(blockIdx.x) / BNH;  // last (causal: costliest) tiles first
  const int b = bh / NH, h = bh % NH;
  const int q0 = qt * BQ;
  const int L = valid_keys(lengths, b, T);
  const size_t C3 = 3 * size_t(C);
  const size_t base = size_t(b) * T * C3 + size_t(h) * HS;
  const F* qbase = qkv + base;
  const F* kbase = qbase + C;
  const F* vbase = qbase + 2 * size_t(C);
  const F* dobase = dout + size_t(b) * T * C + size_t(h) * HS;
  F* dqbase = dqkv + base;

  for (int idx = threadIdx.x; idx < BQ * HS; idx += kThreads) {
    const int r = idx / HS, d = idx % HS, i = q0 + r;
    float qv = 0.f, ov = 0.f;
    if (i < T) {
      qv = to_float(qbase[size_t(i) * C3 + d]) * qscale;
      ov = to_float(dobase[size_t(i) * C + d]);
    }
    Qs[idx] = qv;
    Os[idx] = ov;
  }
  const int row0 = q0 + warp * RW;  // this warp's first query
  const float* Qw = Qs + warp * RW * HS;
  const float* Ow = Os + warp * RW * HS;
  float* Pw = Ps + warp * RW * BC;
  for (int ii = threadIdx.x; ii < BQ; ii += kThreads) {
    const int i = q0 + ii;
    Ls[ii] = i < T ? lse2_of(lse[size_t(bh) * T + i]) : INFINITY;
    Ds[ii] = i < T ? delta[size_t(bh) * T + i] : 0.f;
  }
  float dq[RW][DPL];
#pragma unroll
  for (int r = 0; r < RW; ++r)
#pragma unroll
    for (int c = 0; c < DPL; ++c) dq[r][c] = 0.f;

  const int kend = causal ? min(q0 + BQ, L) : L;  // keys any row of this block sees
  for (int k0 = 0; k0 < kend; k0 += BC) {         // block-uniform trip count
    // Previous tile's Kt, Vt fully read (first pass: Qs, Os, Ls, Ds written).
    __syncthreads();
    for (int idx = threadIdx.x; idx < BC * HS; idx += kThreads) {
      const int jj = idx / HS, d = idx % HS, j = k0 + jj;
      float kv = 0.f, vv = 0.f;
      if (j < kend) {  // padded keys are never read
        kv = to_float(kbase[size_t(j) * C3 + d]);
        vv = to_float(vbase[size_t(j) * C3 + d]);
      }
      Kt[d * KS + jj] = kv;
      Vt[d * KS + jj] = vv;
    }
    __syncthreads();

    // s[r][t] = log2(e)/sqrt(HS) q_(row0+r) . k_(k0+lane+32t), dp[r][t] = dO_(row0+r) . v_(...)
    float s[RW][CPL], dp[RW][CPL];
    row_dot_columns<HS, RW, CPL, KS>(s, Qw, Kt, lane);
    row_dot_columns<HS, RW, CPL, KS>(dp, Ow, Vt, lane);

#pragma unroll
    for (int r = 0; r < RW; ++r) {
      const int i = row0 + r;
      const int vis = i < T ? (causal ? min(i + 1, L) : L) : 0;  // query i sees keys j < vis
#pragma unroll
      for (int t = 0; t < CPL; ++t) {
        const int jj = lane + 32 * t;
        const float p = k0 + jj < vis ? exp2f(s[r][t] - Ls[warp * RW + r]) : 0.f;
        Pw[r * BC + jj] = p * (dp[r][t] - Ds[warp * RW + r]);
      }
    }
    __syncwarp();

    // dq[r][c] += sum_j dS[r][j] k_j[lane + 32c]
    rows_times_tile<DPL, RW, BC, 1, KS>(dq, Pw, Kt, lane);
    __syncwarp();  // dS read by every lane before the next tile overwrites it
  }

#pragma unroll
  for (int r = 0; r < RW; ++r) {
    const int i = row0 + r;
    if (i < T) {
#pragma unroll
      for (int c = 0; c < DPL; ++c)
        store(dqbase + size_t(i) * C3 + lane + 32 * c, dq[r][c] * scale);
    }
  }
}

// ---- host ---------------------------------------------------------------------------------------

// Checks the shape, returns HS; fails (fail_at) naming what is wrong.
int head_size(const char* fn, int B, int T, int C, int NH) {
  const std::string dims = "B = " + std::to_string(B) + ", T = " + std::to_string(T) +
                           ", C = " + std::to_string(C) + ", NH = " + std::to_string(NH);
  if (B < 0 || T < 0 || NH < 1 || C < 1) fail_at(__FILE__, __LINE__, fn, "invalid shape: " + dims);
  if (C % NH != 0) fail_at(__FILE__, __LINE__, fn, "C is not a multiple of NH: " + dims);
  const int HS = C / NH;
  if (!attention_head_size_ok(HS))
    fail_at(__FILE__, __LINE__, fn,
            "head size HS = C/NH = " + std::to_string(HS) +
                " is not supported (the CUDA kernels take HS = 32, 64 or 128): " + dims);
  return HS;
}

// Tiles of `per` rows covering T, times B*NH blocks: the grid size, checked to fit one dimension.
int grid_blocks(const char* fn, int B, int T, int NH, int per) {
  const int64_t tiles = (int64_t(T) + per - 1) / per;
  const int64_t blocks = tiles * B * NH;
  if (blocks > INT_MAX)
    fail_at(__FILE__, __LINE__, fn,
            "grid of " + std::to_string(blocks) + " blocks exceeds 2^31 - 1 (B*NH*ceil(T/" +
                std::to_string(per) + "))");
  return int(blocks);
}

// Allows the kernel `bytes` of dynamic shared memory, failing clearly if the device cannot.
template <class Kernel>
void allow_shared(const char* fn, Kernel kernel, size_t bytes) {
  int dev = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (bytes > size_t(optin))
    fail_at(__FILE__, __LINE__, fn,
            "needs " + std::to_string(bytes) + " bytes of shared memory per block, device " +
                std::to_string(dev) + " allows " + std::to_string(optin));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

template <int HS, class F>
void forward_hs(F* out, float* lse, const F* qkv, int B, int T, int C, int NH, bool causal,
                const int32_t* lengths, cudaStream_t s) {
  constexpr int RW = Tiles<HS>::kFwdRW, CPL = Tiles<HS>::kFwdCPL, BR = kWarps * RW;
  constexpr size_t bytes = fwd_smem_floats<HS, RW, CPL>() * sizeof(float);
  const char* fn = "cuda::attention_forward";
  const int blocks = grid_blocks(fn, B, T, NH, BR);
  const int q_tiles = (T + BR - 1) / BR;
  const float qscale = kLog2e / std::sqrt(float(HS));
  auto kernel = attention_forward_kernel<HS, RW, CPL, F>;
  allow_shared(fn, kernel, bytes);
  kernel<<<blocks, kThreads, bytes, s>>>(out, lse, qkv, T, C, NH, q_tiles, qscale, causal, lengths);
  CUDA_CHECK_LAUNCH();
}

template <int HS, class F>
void backward_hs(F* dqkv, float* delta, const F* dout, const F* out, const F* qkv, const float* lse,
                 int B, int T, int C, int NH, bool causal, const int32_t* lengths, cudaStream_t s) {
  const char* fn = "cuda::attention_backward";
  const float scale = 1.f / std::sqrt(float(HS)), qscale = kLog2e * scale;

  const int64_t rows = int64_t(B) * T * NH;
  const int64_t delta_blocks = (rows + kWarps - 1) / kWarps;
  if (delta_blocks > INT_MAX)
    fail_at(__FILE__, __LINE__, fn, "B*T*NH = " + std::to_string(rows) + " rows is too many");
  attention_delta_kernel<HS, F>
      <<<int(delta_blocks), kThreads, 0, s>>>(delta, dout, out, T, NH, rows);
  CUDA_CHECK_LAUNCH();
  if constexpr (!std::is_same_v<F, float>)  // 16-bit storage: tensor cores where they can
    if (detail::attention_backward_mma(dqkv, delta, dout, qkv, lse, B, T, C, NH, causal, lengths,
                                       s))
      return;

  {
    constexpr int RW = Tiles<HS>::kKvRW, CPL = Tiles<HS>::kKvCPL, BK = kWarps * RW;
    constexpr size_t bytes = dkdv_smem_floats<HS, RW, CPL>() * sizeof(float);
    const int blocks = grid_blocks(fn, B, T, NH, BK);
    const int k_tiles = (T + BK - 1) / BK;
    auto kernel = attention_dkdv_kernel<HS, RW, CPL, F>;
    allow_shared(fn, kernel, bytes);
    kernel<<<blocks, kThreads, bytes, s>>>(dqkv, dout, qkv, lse, delta, T, C, NH, k_tiles, scale,
                                           qscale, causal, lengths);
    CUDA_CHECK_LAUNCH();
  }
  {
    constexpr int RW = Tiles<HS>::kQRW, CPL = Tiles<HS>::kQCPL, BQ = kWarps * RW;
    constexpr size_t bytes = dq_smem_floats<HS, RW, CPL>() * sizeof(float);
    const int blocks = grid_blocks(fn, B, T, NH, BQ);
    const int q_tiles = (T + BQ - 1) / BQ;
    auto kernel = attention_dq_kernel<HS, RW, CPL, F>;
    allow_shared(fn, kernel, bytes);
    kernel<<<blocks, kThreads, bytes, s>>>(dqkv, dout, qkv, lse, delta, T, C, NH, q_tiles, scale,
                                           qscale, causal, lengths);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

template <class F>
void attention_forward(F* out, float* lse, const F* qkv, int B, int T, int C, int NH, bool causal,
                       const int32_t* lengths, cudaStream_t s) {
  const int HS = head_size("cuda::attention_forward", B, T, C, NH);
  if (B == 0 || T == 0) return;
  if constexpr (!std::is_same_v<F, float>)  // 16-bit storage: tensor cores where they can
    if (detail::attention_forward_mma(out, lse, qkv, B, T, C, NH, causal, lengths, s)) return;
  switch (HS) {
    case 32:
      return forward_hs<32>(out, lse, qkv, B, T, C, NH, causal, lengths, s);
    case 64:
      return forward_hs<64>(out, lse, qkv, B, T, C, NH, causal, lengths, s);
    default:
      return forward_hs<128>(out, lse, qkv, B, T, C, NH, causal, lengths, s);
  }
}

template <class F>
void attention_backward(F* dqkv, float* delta, const F* dout, const F* out, const F* qkv,
                        const float* lse, int B, int T, int C, int NH, bool causal,
                        const int32_t* lengths, cudaStream_t s) {
  const int HS = head_size("cuda::attention_backward", B, T, C, NH);
  if (B == 0 || T == 0) return;
  switch (HS) {
    case 32:
      return backward_hs<32>(dqkv, delta, dout, out, qkv, lse, B, T, C, NH, causal, lengths, s);
    case 64:
      return backward_hs<64>(dqkv, delta, dout, out, qkv, lse, B, T, C, NH, causal, lengths, s);
    default:
      return backward_hs<128>(dqkv, delta, dout, out, qkv, lse, B, T, C, NH, causal, lengths, s);
  }
}

#define MPITRON_ATTENTION_INSTANTIATE(F)                                                           \
  template void attention_forward<F>(F*, float*, const F*, int, int, int, int, bool,               \
                                     const int32_t*, cudaStream_t);                                \
  template void attention_backward<F>(F*, float*, const F*, const F*, const F*, const float*, int, \
                                      int, int, int, bool, const int32_t*, cudaStream_t);
MPITRON_ATTENTION_INSTANTIATE(float)
MPITRON_ATTENTION_INSTANTIATE(__nv_bfloat16)
MPITRON_ATTENTION_INSTANTIATE(__half)
#undef MPITRON_ATTENTION_INSTANTIATE

}  // namespace mpitron::cuda
