// Attention forward and backward for bf16/fp16 storage on tensor cores: mma.sync m16n8k16 with
// fp32 accumulation, fragments in registers, online softmax; about 9x the SIMT kernels of
// attention.cu, which stay the reference. After FlashAttention-2 (Dao 2023).
//
// Every kernel has 4 warps; a warp owns 16 rows of its block's 64-row tile (queries in forward
// and dQ, keys in dK/dV) and loops over tiles of the other side held in shared memory. Tiles are
// row-major [rows][HS + 8] 16-bit elements: the 16-byte pad puts the 8 rows of an ldmatrix 8x8
// read in 8 distinct bank groups. The other side's tiles are double-buffered: cp.async copies the
// next while the current one is used (one commit group per pass). Operand fragments are read with
// ldmatrix (.trans where the contraction runs along the tile's rows: V in P V, dO in P^T dO, Q in
// dS^T Q, K in dS K); the fp32 accumulator of one product is repacked in registers as the A operand
// of the next (P, dS), rounded to 16 bits as in FlashAttention-2. Softmax statistics, lse and delta
// are fp32, scores base 2 (scaled by log2(e)/sqrt(HS) after the product) as in attention.cu.
// Backward is two kernels, dK/dV per key tile and dQ per query tile, each summing its tiles in a
// fixed order: no atomics, repeated calls agree bitwise. Causal tiles above the diagonal are never
// visited.
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4; two 16-bit values per register,
// the lower column or k index in the lower half):
//   A 16x16 (row-major): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B 16x8 (k x n):      b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g)
//   C 16x8 fp32:         c0, c1 (g, 2t..2t+1), c2, c3 (g+8, 2t..2t+1)
// ldmatrix .x4: lanes 8m..8m+7 give the row addresses of 8x8 matrix m, register m receives it in
// the C layout (row g, columns 2t..2t+1); with .trans, rows 2t..2t+1 of column g.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "base/cuda_check.hpp"
#include "layers/cuda/attention_mma.cuh"

namespace mpitron::cuda::detail {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16 * kWarps;  // the block's own tile: 16 rows per warp
constexpr float kLog2e = 1.4426950408889634f;

// Other-side tile per kernel and head size: the fp32 tiles per warp (S, dP: 16 x N) and the
// accumulators (16 x HS) must stay in registers; HS 128 halves the inner tile of backward.
template <int HS>
struct MmaTiles {
  static constexpr int kFwdKeys = 64;                     // forward: keys per tile
  static constexpr int kKvQueries = HS == 128 ? 32 : 64;  // dK/dV: queries per tile
  static constexpr int kQKeys = HS == 128 ? 32 : 64;      // dQ: keys per tile
};

template <int HS>
constexpr int kStride = HS + 8;  // 16-bit elements per shared row
// Dynamic shared bytes: 16-bit tiles, then (backward) two fp32 vectors of the query tile.
// The other side's tiles are double-buffered: the next one is copied while this one is used.
template <int HS>
constexpr size_t fwd_smem_bytes() {  // Qs [64], Ks, Vs [2][kFwdKeys]
  return size_t(kRows + 4 * MmaTiles<HS>::kFwdKeys) * kStride<HS> * 2;
}
template <int HS>
constexpr size_t dkdv_smem_bytes() {  // Ks, Vs [64], Qs, Os [2][BQ]; Ls, Ds [2][BQ]
  constexpr int BQ = MmaTiles<HS>::kKvQueries;
  return size_t(2 * kRows + 4 * BQ) * kStride<HS> * 2 + 4 * BQ * sizeof(float);
}
template <int HS>
constexpr size_t dq_smem_bytes() {  // Qs, Os [64], Ks, Vs [2][BK]; Ls, Ds [64]
  constexpr int BK = MmaTiles<HS>::kQKeys;
  return size_t(2 * kRows + 4 * BK) * kStride<HS> * 2 + 2 * kRows * sizeof(float);
}

// Device helpers exist from sm_80 on only: below it the kernels are empty (never launched: the
// host checks the binary's version first).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
constexpr float kLn2 = 0.6931471805599453f;

// Valid keys of sequence b, clamped to [0, T] (as attention.cu).
__device__ __forceinline__ int valid_keys(const int32_t* lengths, int b, int T) {
  if (!lengths) return T;
  const int L = lengths[b];
  return L < 0 ? 0 : (L > T ? T : L);
}

// Base-2 lse as backward uses it: +inf for a row that saw no key, so that exp2f(s - it) is 0.
__device__ __forceinline__ float lse2_of(float lse) {
  return lse > -INFINITY ? lse * kLog2e : INFINITY;
}

// Two floats rounded to nearest even into one register, lo in the lower half.
template <class F>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t r;
  memcpy(&r, &v, 4);
  return r;
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  uint32_t r;
  memcpy(&r, &v, 4);
  return r;
}

// d += a b on one 16x8x16 tile.
template <class F>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1);
template <>
__device__ __forceinline__ void mma<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                   uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                            uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 16-bit matrices from shared memory (see the file comment); "memory" keeps the read
// after the block's stores that the preceding __syncthreads orders.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  const unsigned a = unsigned(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  const unsigned a = unsigned(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}

// The lane's ldmatrix row address for each operand role, tile row-major with stride SS:
// A fragment of rows [r0, r0 + 16), k columns [k0, k0 + 16): registers a0..a3.
template <int SS, class F>
__device__ __forceinline__ const F* a_addr(const F* tile, int r0, int k0, int lane) {
  return tile + (r0 + (lane & 15)) * SS + k0 + (lane >> 4) * 8;
}
// B fragments of two n-tiles where the tile's rows are n and its columns k (B = tile^T: K in
// Q K^T): rows [n0, n0 + 16), k [k0, k0 + 16); registers b0, b1 of n-tile n0, then of n0 + 8.
template <int SS, class F>
__device__ __forceinline__ const F* bt_addr(const F* tile, int n0, int k0, int lane) {
  return tile + (n0 + (lane & 7) + (lane >> 4) * 8) * SS + k0 + ((lane >> 3) & 1) * 8;
}
// B fragments (with .trans) of two n-tiles where the tile's rows are k and its columns n (V in
// P V): k rows [k0, k0 + 16), n [n0, n0 + 16); registers b0, b1 of n-tile n0, then of n0 + 8.
template <int SS, class F>
__device__ __forceinline__ const F* bn_addr(const F* tile, int k0, int n0, int lane) {
  return tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * SS + n0 + (lane >> 4) * 8;
}

// acc[16 x N] += A[16 rows from r0][HS] * Bt[N rows][HS]^T (S = Q K^T and its kin).
template <int HS, int N, class F>
__device__ __forceinline__ void gemm_abt(float (&acc)[N / 8][4], const F* A, int r0, const F* Bt,
                                         int lane) {
  constexpr int SS = kStride<HS>;
#pragma unroll
  for (int k0 = 0; k0 < HS; k0 += 16) {
    uint32_t a[4];
    ldsm_x4(a, a_addr<SS>(A, r0, k0, lane));
#pragma unroll
    for (int n = 0; n < N / 16; ++n) {
      uint32_t b[4];
      ldsm_x4(b, bt_addr<SS>(Bt, 16 * n, k0, lane));
      mma<F>(acc[2 * n], a, b[0], b[1]);
      mma<F>(acc[2 * n + 1], a, b[2], b[3]);
    }
  }
}

// acc[16 x HS] += W[16 x K] * Bn[K rows][HS], W an fp32 accumulator (16 x K) in C layout,
// rounded to F and repacked as A fragments: k-step ks takes n-tiles 2ks (a0, a1) and 2ks + 1
// (a2, a3).
template <int HS, int K, class F>
__device__ __forceinline__ void gemm_wb(float (&acc)[HS / 8][4], const float (&w)[K / 8][4],
                                        const F* Bn, int lane) {
  constexpr int SS = kStride<HS>;
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) {
    const uint32_t a[4] = {
        pack2<F>(w[2 * ks][0], w[2 * ks][1]), pack2<F>(w[2 * ks][2], w[2 * ks][3]),
        pack2<F>(w[2 * ks + 1][0], w[2 * ks + 1][1]), pack2<F>(w[2 * ks + 1][2], w[2 * ks + 1][3])};
#pragma unroll
    for (int n = 0; n < HS / 16; ++n) {
      uint32_t b[4];
      ldsm_x4_trans(b, bn_addr<SS>(Bn, 16 * ks, 16 * n, lane));
      mma<F>(acc[2 * n], a, b[0], b[1]);
      mma<F>(acc[2 * n + 1], a, b[2], b[3]);
    }
  }
}
// Asynchronous copies (cp.async, sm_80): issued now, complete for the issuing thread after
// wait_async<N>() (all but the N most recent commit groups), for the block after a __syncthreads.
__device__ __forceinline__ void copy16_async(void* dst, const void* src) {
  const unsigned a = unsigned(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(src) : "memory");
}
__device__ __forceinline__ void copy4_async(void* dst, const void* src) {
  const unsigned a = unsigned(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(a), "l"(src) : "memory");
}
__device__ __forceinline__ void commit_async() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wait_async() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Rows [row0, row0 + ROWS) of a (., HS) slice with row stride `ld` elements into a shared tile,
// asynchronously; rows >= limit become 0 (plain stores) and are never read. 16-byte copies: src
// and ld * 2 bytes are multiples of 16 (checked on the host).
template <int HS, int ROWS, class F>
__device__ __forceinline__ void load_tile(F* dst, const F* src, size_t ld, int row0, int limit) {
  constexpr int CPR = HS / 8;  // 16-byte chunks per row
  for (int idx = threadIdx.x; idx < ROWS * CPR; idx += kThreads) {
    const int r = idx / CPR, c = idx % CPR, row = row0 + r;
    F* d = dst + r * kStride<HS> + c * 8;
    if (row < limit)
      copy16_async(d, src + size_t(row) * ld + c * 8);
    else
      *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
  }
}

// n values of a (T) fp32 vector from row0 on into shared memory, asynchronously; entries >= T
// become `fill`.
template <int N>
__device__ __forceinline__ void load_vec(float* dst, const float* src, int row0, int T,
                                         float fill) {
  for (int i = threadIdx.x; i < N; i += kThreads) {
    if (row0 + i < T)
      copy4_async(dst + i, src + row0 + i);
    else
      dst[i] = fill;
  }
}

template <int N>
__device__ __forceinline__ void zero(float (&x)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n) x[n][0] = x[n][1] = x[n][2] = x[n][3] = 0.f;
}
#endif  // __CUDA_ARCH__ >= 800

// ---- forward ------------------------------------------------------------------------------------
// Block: one (b,h), queries [q0, q0 + 64); key tiles [k0, k0 + BK) up to the last key any of its
// rows sees. A lane holds rows g and g + 8 of its warp's 16: the running max m (uniform over the
// lane's quad, which shares the rows), a partial row sum l over the lane's columns, and o.
template <int HS, class F>
__global__ void __launch_bounds__(kThreads)
    attention_forward_mma_kernel(F* __restrict__ out, float* __restrict__ lse,
                                 const F* __restrict__ qkv, int T, int C, int NH, int q_tiles,
                                 float qscale, bool causal, const int32_t* __restrict__ lengths) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int BK = MmaTiles<HS>::kFwdKeys, SS = kStride<HS>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  F* Qs = reinterpret_cast<F*>(smem_raw);  // [64][SS]
  F* Kb = Qs + kRows * SS;                 // [2][BK][SS]
  F* Vb = Kb + 2 * BK * SS;                // [2][BK][SS]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int BNH = int(gridDim.x) / q_tiles;
  const int bh = int(blockIdx.x) % BNH;
  const int qt = q_tiles - 1 - int(blockIdx.x) / BNH;  // last (causal: costliest) tiles first
  const int b = bh / NH, h = bh % NH;
  const int q0 = qt * kRows;
  const int L = valid_keys(lengths, b, T);
  const size_t C3 = 3 * size_t(C);
  const F* qbase = qkv + size_t(b) * T * C3 + size_t(h) * HS;  // token t at qbase + t * C3

  const int kend = causal ? min(q0 + kRows, L) : L;  // keys any row of the block sees
  const int min_vis = causal ? min(q0 + 1, L) : L;   // keys every row of the block sees
  load_tile<HS, kRows>(Qs, qbase, C3, q0, T);
  if (kend > 0) {  // keys >= kend (padded ones included) are never read
    load_tile<HS, BK>(Kb, qbase + C, C3, 0, kend);
    load_tile<HS, BK>(Vb, qbase + 2 * size_t(C), C3, 0, kend);
  }
  commit_async();
  const int r0 = warp * 16;  // the warp's rows in the tile
  int vis[2];                // row g + 8e sees keys j < vis[e]
#pragma unroll
  for (int e = 0; e < 2; ++e) vis[e] = causal ? min(q0 + r0 + g + 8 * e + 1, L) : L;

  float o[HS / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  zero(o);

  for (int k0 = 0, buf = 0; k0 < kend; k0 += BK, buf ^= 1) {  // block-uniform trip count
    if (k0 + BK < kend) {  // the next tile into the other buffer, read last in the previous pass
      load_tile<HS, BK>(Kb + (buf ^ 1) * BK * SS, qbase + C, C3, k0 + BK, kend);
      load_tile<HS, BK>(Vb + (buf ^ 1) * BK * SS, qbase + 2 * size_t(C), C3, k0 + BK, kend);
    }
    commit_async();   // possibly empty: one group per pass
    wait_async<1>();  // this tile's group (and Q's) complete
    __syncthreads();
    const F* Ks = Kb + buf * BK * SS;
    const F* Vs = Vb + buf * BK * SS;

    float s[BK / 8][4];
    zero(s);
    gemm_abt<HS, BK>(s, Qs, r0, Ks, lane);

    const bool masked = k0 + BK > min_vis;  // some key of the tile hidden from some row
#pragma unroll
    for (int n = 0; n < BK / 8; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        s[n][c] *= qscale;
        if (masked && k0 + 8 * n + 2 * t + (c & 1) >= vis[c >> 1]) s[n][c] = -INFINITY;
      }
#pragma unroll
    for (int e = 0; e < 2; ++e) {  // row g + 8e: entries c = 2e, 2e + 1
      float mt = -INFINITY;
#pragma unroll
      for (int n = 0; n < BK / 8; ++n) mt = fmaxf(mt, fmaxf(s[n][2 * e], s[n][2 * e + 1]));
      mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
      mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
      const float mnew = fmaxf(m[e], mt);
      const float mref = mnew == -INFINITY ? 0.f : mnew;  // no key seen yet: avoid -inf - -inf
      const float alpha = exp2f(m[e] - mref);             // 0 while m[e] is -inf
      m[e] = mnew;
      float ps = 0.f;
#pragma unroll
      for (int n = 0; n < BK / 8; ++n)
#pragma unroll
        for (int c = 2 * e; c < 2 * e + 2; ++c) {
          s[n][c] = exp2f(s[n][c] - mref);  // masked: exp2f(-inf) = 0
          ps += s[n][c];
        }
      l[e] = l[e] * alpha + ps;
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) {
        o[n][2 * e] *= alpha;
        o[n][2 * e + 1] *= alpha;
      }
    }
    gemm_wb<HS, BK>(o, s, Vs, lane);  // o += P V, P rounded to F
    __syncthreads();                  // Ks, Vs fully read before the next pass copies into them
  }
  wait_async<0>();  // none left in flight at exit (kend = 0: Q's)

#pragma unroll
  for (int e = 0; e < 2; ++e) {
    float lt = l[e] + __shfl_xor_sync(0xffffffffu, l[e], 1);  // the quad's sum, same bits in
    lt += __shfl_xor_sync(0xffffffffu, lt, 2);                // every lane (a + b == b + a)
    const int i = q0 + r0 + g + 8 * e;
    if (i < T) {
      const float inv = lt > 0.f ? 1.f / lt : 0.f;  // a row that saw no key: out 0, lse -inf
      F* orow = out + (size_t(b) * T + i) * C + size_t(h) * HS + 2 * t;
#pragma unroll
      for (int n = 0; n < HS / 8; ++n)
        *reinterpret_cast<uint32_t*>(orow + 8 * n) =
            pack2<F>(o[n][2 * e] * inv, o[n][2 * e + 1] * inv);
      if (t == 0) lse[size_t(bh) * T + i] = lt > 0.f ? (m[e] + log2f(lt)) * kLn2 : -INFINITY;
    }
  }
#endif  // never launched below sm_80: the host checks the binary's version first
}

// ---- backward: dK, dV ---------------------------------------------------------------------------
// Block: one (b,h), keys [k0, k0 + 64); query tiles [q0, q0 + BQ) in order from the first query
// that sees k0 (causal) to T. Per tile, per warp (16 keys): S^T = K Q^T, dP^T = V dO^T,
// P^T = exp2(S^T - lse2_i), dS^T = P^T (dP^T - delta_i), dV += P^T dO, dK += dS^T Q; dK times
// 1/sqrt(HS) at the end.
template <int HS, class F>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_mma_kernel(F* __restrict__ dqkv, const F* __restrict__ dout,
                              const F* __restrict__ qkv, const float* __restrict__ lse,
                              const float* __restrict__ delta, int T, int C, int NH, int k_tiles,
                              float scale, float qscale, bool causal,
                              const int32_t* __restrict__ lengths) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int BQ = MmaTiles<HS>::kKvQueries, SS = kStride<HS>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  F* Ks = reinterpret_cast<F*>(smem_raw);                  // [64][SS]
  F* Vs = Ks + kRows * SS;                                 // [64][SS]
  F* Qb = Vs + kRows * SS;                                 // [2][BQ][SS]
  F* Ob = Qb + 2 * BQ * SS;                                // [2][BQ][SS] dO
  float* Lb = reinterpret_cast<float*>(Ob + 2 * BQ * SS);  // [2][BQ] lse of the tile's queries
  float* Db = Lb + 2 * BQ;                                 // [2][BQ] delta of the tile's queries

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int BNH = int(gridDim.x) / k_tiles;
  const int bh = int(blockIdx.x) % BNH;
  const int kt = int(blockIdx.x) / BNH;  // first (causal: costliest) tiles first
  const int b = bh / NH, h = bh % NH;
  const int k0 = kt * kRows;
  const int L = valid_keys(lengths, b, T);
  const size_t C3 = 3 * size_t(C);
  const size_t base = size_t(b) * T * C3 + size_t(h) * HS;
  const F* qbase = qkv + base;
  const F* dobase = dout + size_t(b) * T * C + size_t(h) * HS;  // token t at dobase + t * C
  F* dkbase = dqkv + base + C;
  F* dvbase = dqkv + base + 2 * size_t(C);
  const float* lse_bh = lse + size_t(bh) * T;
  const float* delta_bh = delta + size_t(bh) * T;
  const int r0 = warp * 16;  // the warp's keys in the tile

  float dk[HS / 8][4], dv[HS / 8][4];
  zero(dk);
  zero(dv);

  const int qbeg = causal ? k0 : 0;  // causal: queries < k0 see none of these keys
  const int qend = k0 < L ? T : 0;   // k0 >= L: every key of the tile is padding, gradients 0
  // Query tile q0 into buffer `to`: Q, dO, raw lse (-inf past T, so lse2 is +inf) and delta.
  auto load_queries = [&](int q0, int to) {
    load_tile<HS, BQ>(Qb + to * BQ * SS, qbase, C3, q0, T);
    load_tile<HS, BQ>(Ob + to * BQ * SS, dobase, size_t(C), q0, T);
    load_vec<BQ>(Lb + to * BQ, lse_bh, q0, T, -INFINITY);
    load_vec<BQ>(Db + to * BQ, delta_bh, q0, T, 0.f);
  };
  if (qbeg < qend) {
    load_tile<HS, kRows>(Ks, qbase + C, C3, k0, L);  // padded keys are never read
    load_tile<HS, kRows>(Vs, qbase + 2 * size_t(C), C3, k0, L);
    load_queries(qbeg, 0);
  }
  commit_async();
  for (int q0 = qbeg, buf = 0; q0 < qend; q0 += BQ, buf ^= 1) {  // block-uniform trip count
    if (q0 + BQ < qend) load_queries(q0 + BQ, buf ^ 1);  // the buffer read in the previous pass
    commit_async();                                      // possibly empty: one group per pass
    wait_async<1>();  // this tile's group (first pass: and K, V) complete
    __syncthreads();
    const F* Qs = Qb + buf * BQ * SS;
    const F* Os = Ob + buf * BQ * SS;
    const float* Ls = Lb + buf * BQ;
    const float* Ds = Db + buf * BQ;
    // The lane's queries ii = 8n + 2t + u: base-2 lse and delta.
    float l2[BQ / 8][2], dl[BQ / 8][2];
#pragma unroll
    for (int n = 0; n < BQ / 8; ++n)
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        l2[n][u] = lse2_of(Ls[8 * n + 2 * t + u]);
        dl[n][u] = Ds[8 * n + 2 * t + u];
      }

    float st[BQ / 8][4], dpt[BQ / 8][4];
    zero(st);
    zero(dpt);
    gemm_abt<HS, BQ>(st, Ks, r0, Qs, lane);
    gemm_abt<HS, BQ>(dpt, Vs, r0, Os, lane);

    // Every (key, query) pair of the tile valid and visible: no per-entry test.
    const bool clean = k0 + kRows <= L && q0 + BQ <= T && (!causal || q0 >= k0 + kRows - 1);
#pragma unroll
    for (int n = 0; n < BQ / 8; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int j = k0 + r0 + g + 8 * (c >> 1), ii = 8 * n + 2 * t + (c & 1), i = q0 + ii;
        const bool seen = clean || (j < L && i < T && (!causal || j <= i));
        const float p = seen ? exp2f(st[n][c] * qscale - l2[n][c & 1]) : 0.f;
        st[n][c] = p;
        dpt[n][c] = p * (dpt[n][c] - dl[n][c & 1]);
      }
    gemm_wb<HS, BQ>(dv, st, Os, lane);   // dV += P^T dO
    gemm_wb<HS, BQ>(dk, dpt, Qs, lane);  // dK += dS^T Q
    __syncthreads();  // this buffer fully read before the next pass copies into it
  }
  wait_async<0>();

#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int j = k0 + r0 + g + 8 * e;
    if (j < T) {
      const bool valid = j < L;  // padded keys: exactly 0
      const size_t at = size_t(j) * C3 + 2 * t;
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) {
        *reinterpret_cast<uint32_t*>(dkbase + at + 8 * n) =
            valid ? pack2<F>(dk[n][2 * e] * scale, dk[n][2 * e + 1] * scale) : 0u;
        *reinterpret_cast<uint32_t*>(dvbase + at + 8 * n) =
            valid ? pack2<F>(dv[n][2 * e], dv[n][2 * e + 1]) : 0u;
      }
    }
  }
#endif
}

// ---- backward: dQ -------------------------------------------------------------------------------
// Block: one (b,h), queries [q0, q0 + 64); key tiles [k0, k0 + BK) in order up to the last key
// any of its rows sees. Per tile, per warp (16 queries): S = Q K^T, dP = dO V^T,
// dS = exp2(S - lse2_i) (dP - delta_i), dQ += dS K; times 1/sqrt(HS) at the end.
template <int HS, class F>
__global__ void __launch_bounds__(kThreads)
    attention_dq_mma_kernel(F* __restrict__ dqkv, const F* __restrict__ dout,
                            const F* __restrict__ qkv, const float* __restrict__ lse,
                            const float* __restrict__ delta, int T, int C, int NH, int q_tiles,
                            float scale, float qscale, bool causal,
                            const int32_t* __restrict__ lengths) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int BK = MmaTiles<HS>::kQKeys, SS = kStride<HS>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  F* Qs = reinterpret_cast<F*>(smem_raw);                  // [64][SS]
  F* Os = Qs + kRows * SS;                                 // [64][SS] dO
  F* Kb = Os + kRows * SS;                                 // [2][BK][SS]
  F* Vb = Kb + 2 * BK * SS;                                // [2][BK][SS]
  float* Ls = reinterpret_cast<float*>(Vb + 2 * BK * SS);  // [64] lse of the block's queries
  float* Ds = Ls + kRows;                                  // [64] delta of the block's queries

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int BNH = int(gridDim.x) / q_tiles;
  const int bh = int(blockIdx.x) % BNH;
  const int qt = q_tiles - 1 - int(blockIdx.x) / BNH;  // last (causal: costliest) tiles first
  const int b = bh / NH, h = bh % NH;
  const int q0 = qt * kRows;
  const int L = valid_keys(lengths, b, T);
  const size_t C3 = 3 * size_t(C);
  const size_t base = size_t(b) * T * C3 + size_t(h) * HS;
  const F* qbase = qkv + base;
  const F* dobase = dout + size_t(b) * T * C + size_t(h) * HS;
  F* dqbase = dqkv + base;

  const int r0 = warp * 16;                          // the warp's queries in the tile
  const int kend = causal ? min(q0 + kRows, L) : L;  // keys any row of the block sees
  const int min_vis = causal ? min(q0 + 1, L) : L;   // keys every row of the block sees
  load_tile<HS, kRows>(Qs, qbase, C3, q0, T);
  load_tile<HS, kRows>(Os, dobase, size_t(C), q0, T);
  load_vec<kRows>(Ls, lse + size_t(bh) * T, q0, T, -INFINITY);  // raw lse; -inf past T
  load_vec<kRows>(Ds, delta + size_t(bh) * T, q0, T, 0.f);
  if (kend > 0) {  // padded keys are never read
    load_tile<HS, BK>(Kb, qbase + C, C3, 0, kend);
    load_tile<HS, BK>(Vb, qbase + 2 * size_t(C), C3, 0, kend);
  }
  commit_async();
  int vis[2];  // row g + 8e sees keys j < vis[e]; rows >= T none (their lse2 is +inf anyway)
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int i = q0 + r0 + g + 8 * e;
    vis[e] = i < T ? (causal ? min(i + 1, L) : L) : 0;
  }

  float dq[HS / 8][4];
  zero(dq);
  float lse2[2], dl[2];
  for (int k0 = 0, buf = 0; k0 < kend; k0 += BK, buf ^= 1) {  // block-uniform trip count
    if (k0 + BK < kend) {  // the next tile into the other buffer, read last in the previous pass
      load_tile<HS, BK>(Kb + (buf ^ 1) * BK * SS, qbase + C, C3, k0 + BK, kend);
      load_tile<HS, BK>(Vb + (buf ^ 1) * BK * SS, qbase + 2 * size_t(C), C3, k0 + BK, kend);
    }
    commit_async();   // possibly empty: one group per pass
    wait_async<1>();  // this tile's group (first pass: and Q, dO, lse, delta) complete
    __syncthreads();
    const F* Ks = Kb + buf * BK * SS;
    const F* Vs = Vb + buf * BK * SS;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      lse2[e] = lse2_of(Ls[r0 + g + 8 * e]);
      dl[e] = Ds[r0 + g + 8 * e];
    }

    float s[BK / 8][4], dp[BK / 8][4];
    zero(s);
    zero(dp);
    gemm_abt<HS, BK>(s, Qs, r0, Ks, lane);
    gemm_abt<HS, BK>(dp, Os, r0, Vs, lane);

    const bool masked = k0 + BK > min_vis;
#pragma unroll
    for (int n = 0; n < BK / 8; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int e = c >> 1;
        const bool seen = !masked || k0 + 8 * n + 2 * t + (c & 1) < vis[e];
        const float p = seen ? exp2f(s[n][c] * qscale - lse2[e]) : 0.f;
        dp[n][c] = p * (dp[n][c] - dl[e]);
      }
    gemm_wb<HS, BK>(dq, dp, Ks, lane);  // dQ += dS K
    __syncthreads();                    // Ks, Vs fully read before the next pass copies into them
  }
  wait_async<0>();

#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int i = q0 + r0 + g + 8 * e;
    if (i < T) {
      F* row = dqbase + size_t(i) * C3 + 2 * t;
#pragma unroll
      for (int n = 0; n < HS / 8; ++n)
        *reinterpret_cast<uint32_t*>(row + 8 * n) =
            pack2<F>(dq[n][2 * e] * scale, dq[n][2 * e + 1] * scale);
    }
  }
#endif
}

// ---- host ---------------------------------------------------------------------------------------

// -1 unread, 0 off, 1 on.
std::atomic<int> g_force_reference{-1};

// Per device: 0 not probed, 1 available, 2 not. Probing sets each kernel's dynamic shared memory
// limit once, so launches need no attribute call. Devices past kMaxDevices take the reference.
constexpr int kMaxDevices = 64;

template <class F>
bool probe(int dev) {
  int major = 0, optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (major < 8) return false;
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaFuncGetAttributes(&attr, attention_forward_mma_kernel<64, F>));
  if (attr.ptxVersion < 80 || attr.binaryVersion < 80) return false;  // built for < sm_80 only
  bool ok = true;
  auto allow = [&](auto kernel, size_t bytes) {
    if (bytes > size_t(optin)) {
      ok = false;
      return;
    }
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  };
  allow(attention_forward_mma_kernel<32, F>, fwd_smem_bytes<32>());
  allow(attention_forward_mma_kernel<64, F>, fwd_smem_bytes<64>());
  allow(attention_forward_mma_kernel<128, F>, fwd_smem_bytes<128>());
  allow(attention_dkdv_mma_kernel<32, F>, dkdv_smem_bytes<32>());
  allow(attention_dkdv_mma_kernel<64, F>, dkdv_smem_bytes<64>());
  allow(attention_dkdv_mma_kernel<128, F>, dkdv_smem_bytes<128>());
  allow(attention_dq_mma_kernel<32, F>, dq_smem_bytes<32>());
  allow(attention_dq_mma_kernel<64, F>, dq_smem_bytes<64>());
  allow(attention_dq_mma_kernel<128, F>, dq_smem_bytes<128>());
  return ok;
}

template <class F>
bool available_on_current_device() {
  static std::atomic<int> state[kMaxDevices];  // zero-initialised: not probed
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= kMaxDevices) return false;
  int st = state[dev].load(std::memory_order_acquire);
  if (st == 0) {  // two threads may both probe: the same attributes, set twice
    st = probe<F>(dev) ? 1 : 2;
    state[dev].store(st, std::memory_order_release);
  }
  return st == 1;
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The common gate of both directions; HS from the caller's checked shape.
template <class F>
bool takes(int HS, int C, std::initializer_list<const void*> ptrs) {
  if (reference_attention_forced()) return false;
  if (HS != 32 && HS != 64 && HS != 128) return false;
  if (C % 8 != 0) return false;  // rows of 16-byte chunks (always true for these HS)
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return available_on_current_device<F>();
}

template <int HS, class F>
void forward_hs(F* out, float* lse, const F* qkv, int B, int T, int C, int NH, bool causal,
                const int32_t* lengths, cudaStream_t s) {
  const int q_tiles = (T + kRows - 1) / kRows;
  const int64_t blocks = int64_t(q_tiles) * B * NH;  // < 2^31: checked by the caller's grid size
  const float qscale = kLog2e / std::sqrt(float(HS));
  attention_forward_mma_kernel<HS, F><<<int(blocks), kThreads, fwd_smem_bytes<HS>(), s>>>(
      out, lse, qkv, T, C, NH, q_tiles, qscale, causal, lengths);
  CUDA_CHECK_LAUNCH();
}

template <int HS, class F>
void backward_hs(F* dqkv, const float* delta, const F* dout, const F* qkv, const float* lse, int B,
                 int T, int C, int NH, bool causal, const int32_t* lengths, cudaStream_t s) {
  const int tiles = (T + kRows - 1) / kRows;
  const int64_t blocks = int64_t(tiles) * B * NH;
  const float scale = 1.f / std::sqrt(float(HS)), qscale = kLog2e * scale;
  attention_dkdv_mma_kernel<HS, F><<<int(blocks), kThreads, dkdv_smem_bytes<HS>(), s>>>(
      dqkv, dout, qkv, lse, delta, T, C, NH, tiles, scale, qscale, causal, lengths);
  CUDA_CHECK_LAUNCH();
  attention_dq_mma_kernel<HS, F><<<int(blocks), kThreads, dq_smem_bytes<HS>(), s>>>(
      dqkv, dout, qkv, lse, delta, T, C, NH, tiles, scale, qscale, causal, lengths);
  CUDA_CHECK_LAUNCH();
}

// The grid is tiles * B * NH blocks in one dimension.
bool grid_fits(int B, int T, int NH) {
  return (int64_t(T) + kRows - 1) / kRows * B * NH <= INT32_MAX;
}

}  // namespace

bool reference_attention_forced() {
  int v = g_force_reference.load(std::memory_order_acquire);
  if (v < 0) {
    const char* env = std::getenv("MPITRON_ATTENTION");
    v = env && std::strcmp(env, "reference") == 0 ? 1 : 0;
    int expected = -1;  // a concurrent force_reference_attention wins
    if (!g_force_reference.compare_exchange_strong(expected, v)) v = expected;
  }
  return v == 1;
}

void force_reference_attention(bool on) {
  g_force_reference.store(on ? 1 : 0, std::memory_order_release);
}

bool attention_mma_available(int HS) {
  return (HS == 32 || HS == 64 || HS == 128) && available_on_current_device<__nv_bfloat16>() &&
         available_on_current_device<__half>();
}

template <class F>
bool attention_forward_mma(F* out, float* lse, const F* qkv, int B, int T, int C, int NH,
                           bool causal, const int32_t* lengths, cudaStream_t s) {
  const int HS = C / NH;
  if (!grid_fits(B, T, NH) || !takes<F>(HS, C, {out, qkv})) return false;
  switch (HS) {
    case 32:
      forward_hs<32>(out, lse, qkv, B, T, C, NH, causal, lengths, s);
      break;
    case 64:
      forward_hs<64>(out, lse, qkv, B, T, C, NH, causal, lengths, s);
      break;
    default:
      forward_hs<128>(out, lse, qkv, B, T, C, NH, causal, lengths, s);
  }
  return true;
}

template <class F>
bool attention_backward_mma(F* dqkv, const float* delta, const F* dout, const F* qkv,
                            const float* lse, int B, int T, int C, int NH, bool causal,
                            const int32_t* lengths, cudaStream_t s) {
  const int HS = C / NH;
  if (!grid_fits(B, T, NH) || !takes<F>(HS, C, {dqkv, dout, qkv})) return false;
  switch (HS) {
    case 32:
      backward_hs<32>(dqkv, delta, dout, qkv, lse, B, T, C, NH, causal, lengths, s);
      break;
    case 64:
      backward_hs<64>(dqkv, delta, dout, qkv, lse, B, T, C, NH, causal, lengths, s);
      break;
    default:
      backward_hs<128>(dqkv, delta, dout, qkv, lse, B, T, C, NH, causal, lengths, s);
  }
  return true;
}

#define MPITRON_ATTENTION_MMA_INSTANTIATE(F)                                                       \
  template bool attention_forward_mma<F>(F*, float*, const F*, int, int, int, int, bool,           \
                                         const int32_t*, cudaStream_t);                            \
  template bool attention_backward_mma<F>(F*, const float*, const F*, const F*, const float*, int, \
                                          int, int, int, bool, const int32_t*, cudaStream_t);
MPITRON_ATTENTION_MMA_INSTANTIATE(__nv_bfloat16)
MPITRON_ATTENTION_MMA_INSTANTIATE(__half)
#undef MPITRON_ATTENTION_MMA_INSTANTIATE

}  // namespace mpitron::cuda::detail
