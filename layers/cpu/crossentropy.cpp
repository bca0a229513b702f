// Softmax cross-entropy in log-sum-exp form: loss_i = lse_i - logits[i, target_i], lse computed
// max-subtracted; backward dlogits = (exp(logits - lse) - onehot) * dloss, safe in place. A row
// whose target is negative is no loss term: loss 0, gradient 0.
#include "layers/crossentropy.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "base/fastmath.hpp"

namespace mpitron::cpu {

template <class F>
void crossentropy_forward(F* losses, F* lse, const F* logits, const int32_t* targets, int N,
                          int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* x = logits + ptrdiff_t(n) * V;
    F mx = x[0];
#pragma omp simd reduction(max : mx)
    for (int j = 1; j < V; ++j) mx = std::max(mx, x[j]);
    F sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < V; ++j) sum += exp_fast(x[j] - mx);
    const F l = mx + std::log(sum);
    lse[n] = l;
    losses[n] = targets[n] < 0 ? F(0) : l - x[targets[n]];
  }
}

// Each element is read before it is written at the same index, so dlogits may alias logits.
template <class F>
void crossentropy_backward(F* dlogits, const F* logits, const F* lse, const int32_t* targets,
                           F dloss, int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* x = logits + ptrdiff_t(n) * V;
    F* d = dlogits + ptrdiff_t(n) * V;
    const F l = lse[n];
    const int t = targets[n];
    if (t < 0) {
      std::fill(d, d + V, F(0));
      continue;
    }
#pragma omp simd
    for (int j = 0; j < V; ++j) d[j] = (exp_fast(x[j] - l) - F(j == t)) * dloss;
  }
}

namespace {
// Columns of [v0, v0+Vl) that are real vocabulary entries (< V): [0, real).
int real_columns(int Vl, int v0, int V) {
  return std::clamp(V - v0, 0, Vl);
}
}  // namespace

template <class F>
void crossentropy_shard_stats(F* row_max, F* target_logit, const F* logits, const int32_t* targets,
                              int N, int Vl, int v0, int V) {
  const int real = real_columns(Vl, v0, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* x = logits + ptrdiff_t(n) * Vl;
    F m = -std::numeric_limits<F>::infinity();
#pragma omp simd reduction(max : m)
    for (int j = 0; j < real; ++j) m = std::max(m, x[j]);
    row_max[n] = m;
    const int t = targets[n] - v0;
    target_logit[n] = t >= 0 && t < real ? x[t] : F(0);
  }
}

template <class F>
void crossentropy_shard_sumexp(F* sum, const F* logits, const F* row_max, int N, int Vl, int v0,
                               int V) {
  const int real = real_columns(Vl, v0, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* x = logits + ptrdiff_t(n) * Vl;
    const F m = row_max[n];
    F s = 0;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < real; ++j) s += exp_fast(x[j] - m);
    sum[n] = s;
  }
}

template <class F>
void crossentropy_shard_loss(F* losses, F* lse, const F* row_max, const F* sum,
                             const F* target_logit, const int32_t* targets, int N) {
  for (int n = 0; n < N; ++n) {
    const F l = row_max[n] + std::log(sum[n]);
    lse[n] = l;
    losses[n] = targets[n] < 0 ? F(0) : l - target_logit[n];
  }
}

template <class F>
void crossentropy_shard_backward(F* dlogits, const F* logits, const F* lse, const int32_t* targets,
                                 F dloss, int N, int Vl, int v0, int V) {
  const int real = real_columns(Vl, v0, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* x = logits + ptrdiff_t(n) * Vl;
    F* d = dlogits + ptrdiff_t(n) * Vl;
    const F l = lse[n];
    const int t = targets[n] - v0;
    if (targets[n] < 0) {
      std::fill(d, d + Vl, F(0));
      continue;
    }
#pragma omp simd
    for (int j = 0; j < real; ++j) d[j] = (exp_fast(x[j] - l) - F(j == t)) * dloss;
    for (int j = real; j < Vl; ++j) d[j] = F(0);
  }
}

template void crossentropy_shard_stats<float>(float*, float*, const float*, const int32_t*, int,
                                              int, int, int);
template void crossentropy_shard_sumexp<float>(float*, const float*, const float*, int, int, int,
                                               int);
template void crossentropy_shard_loss<float>(float*, float*, const float*, const float*,
                                             const float*, const int32_t*, int);
template void crossentropy_shard_backward<float>(float*, const float*, const float*, const int32_t*,
                                                 float, int, int, int, int);
template void crossentropy_forward<float>(float*, float*, const float*, const int32_t*, int, int);
template void crossentropy_forward<double>(double*, double*, const double*, const int32_t*, int,
                                           int);
template void crossentropy_backward<float>(float*, const float*, const float*, const int32_t*,
                                           float, int, int);
template void crossentropy_backward<double>(double*, const double*, const double*, const int32_t*,
                                            double, int, int);

}  // namespace mpitron::cpu
