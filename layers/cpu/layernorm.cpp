// LayerNorm over the last dimension: y = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps);
// dx = rstd * (dy*w - mean(dy*w) - xhat * mean(dy*w*xhat)), accumulated into the residual stream.
#include "layers/layernorm.hpp"

#include <cmath>
#include <cstddef>

#include "layers/cpu/column_blocks.hpp"

namespace mpitron::cpu {

template <class F>
void layernorm_forward(F* out, F* mean, F* rstd, const F* inp, const F* weight, const F* bias,
                       int N, int C, double eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* x = inp + ptrdiff_t(n) * C;
    F* y = out + ptrdiff_t(n) * C;
    F sum = 0;
    for (int c = 0; c < C; ++c) sum += x[c];
    const F m = sum / F(C);
    F sq = 0;  // two-pass variance: no cancellation when |mean| >> std
    for (int c = 0; c < C; ++c) {
      const F d = x[c] - m;
      sq += d * d;
    }
    const F s = F(1) / std::sqrt(sq / F(C) + F(eps));
    for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <class F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                        const F* mean, const F* rstd, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* x = inp + ptrdiff_t(n) * C;
    const F* dy = dout + ptrdiff_t(n) * C;
    F* dx = dinp + ptrdiff_t(n) * C;
    const F m = mean[n], s = rstd[n];
    F dnorm_mean = 0, dnorm_xhat_mean = 0;
    for (int c = 0; c < C; ++c) {
      const F dnorm = dy[c] * weight[c];
      dnorm_mean += dnorm;
      dnorm_xhat_mean += dnorm * (x[c] - m) * s;
    }
    dnorm_mean /= F(C);
    dnorm_xhat_mean /= F(C);
    for (int c = 0; c < C; ++c) {
      const F xhat = (x[c] - m) * s;
      dx[c] += (dy[c] * weight[c] - dnorm_mean - xhat * dnorm_xhat_mean) * s;
    }
  }
  // Parameter sums over the N rows, column blocks in parallel (bits independent of thread count).
  for_each_column_block(C, [&](int c0, int c1) {
    for (int n = 0; n < N; ++n) {
      const F* x = inp + ptrdiff_t(n) * C;
      const F* dy = dout + ptrdiff_t(n) * C;
      const F m = mean[n], s = rstd[n];
      for (int c = c0; c < c1; ++c) {
        dweight[c] += dy[c] * (x[c] - m) * s;
        dbias[c] += dy[c];
      }
    }
  });
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, int, int, double);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*,
                                        const double*, int, int, double);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, int, int);

}  // namespace mpitron::cpu
