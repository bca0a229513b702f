// Softmax cross-entropy in log-sum-exp form: loss_i = lse_i - logits[i, target_i], lse computed
// max-subtracted; backward dlogits = (exp(logits - lse) - onehot) * dloss, safe in place. A row
// whose target is negative is no loss term: loss 0, gradient 0.
#include "layers/crossentropy.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

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

template void crossentropy_forward<float>(float*, float*, const float*, const int32_t*, int, int);
template void crossentropy_forward<double>(double*, double*, const double*, const int32_t*, int,
                                           int);
template void crossentropy_backward<float>(float*, const float*, const float*, const int32_t*,
                                           float, int, int);
template void crossentropy_backward<double>(double*, const double*, const double*, const int32_t*,
                                            double, int, int);

}  // namespace mpitron::cpu
