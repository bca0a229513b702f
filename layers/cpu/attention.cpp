// Multi-head attention over a fused qkv buffer: per (b,h), P = softmax(Q K^T / sqrt(HS) [masks])
// and out = P V, the products by cpu::gemm on strided views (row stride 3C into qkv, C into out).
// With a padding length L < T the products run over the first L keys only, so padded keys and
// values are never read; with L = T (no lengths) they are the same calls as without masks.
#include "layers/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "base/check.hpp"
#include "base/fastmath.hpp"
#include "base/gemm.hpp"

namespace mpitron::cpu {

namespace {

void check_lengths(const int32_t* lengths, int B, int T) {
  if (!lengths) return;
  for (int b = 0; b < B; ++b)
    MPITRON_REQUIRE(lengths[b] >= 1 && lengths[b] <= T,
                    "lengths[" + std::to_string(b) + "] = " + std::to_string(lengths[b]) +
                        ", must be in [1, T = " + std::to_string(T) + "]");
}

// Keys visible to query i of a sequence with L valid tokens: j < visible(i).
inline int visible(int i, int L, bool causal) {
  return causal ? std::min(i + 1, L) : L;
}

}  // namespace

template <class F>
void attention_forward(F* out, F* att, const F* qkv, int B, int T, int C, int NH, bool causal,
                       const int32_t* lengths) {
  check_lengths(lengths, B, T);
  const int HS = C / NH, C3 = 3 * C;
  const F scale = F(1) / std::sqrt(F(HS));
  // Every (b,h) is computed the same way by one thread, so the bits do not depend on the thread
  // count or schedule.
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const int L = lengths ? lengths[b] : T;  // valid keys
    const F* q = qkv + ptrdiff_t(b) * T * C3 + h * HS;
    const F* k = q + C;
    const F* v = q + 2 * C;
    F* p = att + ptrdiff_t(bh) * T * T;
    gemm<F>(false, true, T, L, HS, scale, q, C3, k, C3, F(0), p, T);  // columns j < L of S
    for (int i = 0; i < T; ++i) {
      F* row = p + ptrdiff_t(i) * T;
      const int len = visible(i, L, causal);  // keys j < len are visible to query i
      F mx = row[0];
#pragma omp simd reduction(max : mx)
      for (int j = 1; j < len; ++j) mx = std::max(mx, row[j]);
      F sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j < len; ++j) {
        row[j] = exp_fast(row[j] - mx);
        sum += row[j];
      }
      const F inv = F(1) / sum;
      for (int j = 0; j < len; ++j) row[j] *= inv;
      std::fill(row + len, row + T, F(0));
    }
    gemm<F>(false, false, T, HS, L, F(1), p, T, v, C3, F(0), out + ptrdiff_t(b) * T * C + h * HS,
            C);
  }
}

template <class F>
void attention_backward(F* dqkv, F* datt, const F* dout, const F* qkv, const F* att, int B, int T,
                        int C, int NH, bool causal, const int32_t* lengths) {
  check_lengths(lengths, B, T);
  const int HS = C / NH, C3 = 3 * C;
  const F scale = F(1) / std::sqrt(F(HS));
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const int L = lengths ? lengths[b] : T;  // valid keys
    const ptrdiff_t base = ptrdiff_t(b) * T * C3 + h * HS;
    const F* q = qkv + base;
    const F* k = q + C;
    const F* v = q + 2 * C;
    F* dq = dqkv + base;
    F* dk = dq + C;
    F* dv = dq + 2 * C;
    const F* p = att + ptrdiff_t(bh) * T * T;
    F* ds = datt + ptrdiff_t(bh) * T * T;
    const F* dO = dout + ptrdiff_t(b) * T * C + h * HS;
    gemm<F>(true, false, L, HS, T, F(1), p, T, dO, C, F(0), dv, C3);  // dV = P^T dO, rows j < L
    gemm<F>(false, true, T, L, HS, F(1), dO, C, v, C3, F(0), ds, T);  // dP = dO V^T, cols j < L
    for (int i = 0; i < T; ++i) {  // dS = P * (dP - rowsum(dP * P)), in place
      const F* prow = p + ptrdiff_t(i) * T;
      F* row = ds + ptrdiff_t(i) * T;
      const int len = visible(i, L, causal);  // P is 0 beyond len, so is dS
      F dot = 0;
      for (int j = 0; j < len; ++j) dot += prow[j] * row[j];
      for (int j = 0; j < len; ++j) row[j] = prow[j] * (row[j] - dot);
      std::fill(row + len, row + T, F(0));
    }
    gemm<F>(false, false, T, HS, L, scale, ds, T, k, C3, F(0), dq, C3);  // dQ = dS K / sqrt(HS)
    gemm<F>(true, false, L, HS, T, scale, ds, T, q, C3, F(0), dk, C3);   // dK = dS^T Q / sqrt(HS)
    for (int j = L; j < T; ++j) {  // padded keys and values get no gradient
      std::fill_n(dk + ptrdiff_t(j) * C3, HS, F(0));
      std::fill_n(dv + ptrdiff_t(j) * C3, HS, F(0));
    }
  }
}

template <class F>
void attention_cached_forward(F* out, const F* qkv, const F* key_cache, const F* value_cache,
                              const int32_t* pos, int B, int n, int Tc, int C, int NH) {
  const int HS = C / NH, C3 = 3 * C;
  const F scale = F(1) / std::sqrt(F(HS));
  for (int b = 0; b < B; ++b)
    MPITRON_REQUIRE(pos[b] >= 0 && pos[b] + n <= Tc, "cached attention past the cache's length");
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    std::vector<F> p(size_t(pos[b]) + size_t(n));
    for (int i = 0; i < n; ++i) {
      const F* q = qkv + (ptrdiff_t(b) * n + i) * C3 + h * HS;
      const int len = pos[b] + i + 1;  // visible keys
      for (int j = 0; j < len; ++j) {
        const F* k = key_cache + (ptrdiff_t(b) * Tc + j) * C + h * HS;
        F dot = 0;
        for (int d = 0; d < HS; ++d) dot += q[d] * k[d];
        p[size_t(j)] = dot * scale;
      }
      F mx = p[0];
      for (int j = 1; j < len; ++j) mx = std::max(mx, p[size_t(j)]);
      F sum = 0;
      for (int j = 0; j < len; ++j) {
        p[size_t(j)] = exp_fast(p[size_t(j)] - mx);
        sum += p[size_t(j)];
      }
      const F inv = F(1) / sum;
      F* o = out + (ptrdiff_t(b) * n + i) * C + h * HS;
      std::fill(o, o + HS, F(0));
      for (int j = 0; j < len; ++j) {
        const F w = p[size_t(j)] * inv;
        const F* v = value_cache + (ptrdiff_t(b) * Tc + j) * C + h * HS;
        for (int d = 0; d < HS; ++d) o[d] += w * v[d];
      }
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int, bool,
                                       const int32_t*);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int, bool,
                                        const int32_t*);
template void attention_cached_forward<float>(float*, const float*, const float*, const float*,
                                              const int32_t*, int, int, int, int, int);
template void attention_cached_forward<double>(double*, const double*, const double*, const double*,
                                               const int32_t*, int, int, int, int, int);
template void attention_backward<float>(float*, float*, const float*, const float*, const float*,
                                        int, int, int, int, bool, const int32_t*);
template void attention_backward<double>(double*, double*, const double*, const double*,
                                         const double*, int, int, int, int, bool, const int32_t*);

}  // namespace mpitron::cpu
