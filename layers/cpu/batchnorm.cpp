// BatchNorm2d with ghost groups of G samples: per (group, channel) over its G*HW values,
// y = (x - m) * r * w + b, r = 1/sqrt(var + eps); dx = r * (dy*w - mean(dy*w) - xhat *
// mean(dy*w*xhat)) within the group. Statistics and gradient sums are taken in double, each plane
// with vector lanes (`omp simd reduction`: the order is fixed by the code, not the threads).
#include "layers/batchnorm.hpp"

#include <cmath>
#include <cstddef>

namespace mpitron::cpu {

namespace {

// Plane (n, c) of an (N,C,HW) tensor.
template <class T>
T* plane(T* base, int n, int c, int C, int HW) {
  return base + (ptrdiff_t(n) * C + c) * HW;
}

// y = (x - m) * scale + shift over one plane, then + residual and max(., 0) where asked (the
// expressions of residual_forward and relu_forward, so fusing them changes no bit).
template <class F, bool kAdd, bool kRelu>
void normalize_plane(F* y, const F* x, const F* r, F m, F scale, F shift, int HW) {
#pragma omp simd
  for (int i = 0; i < HW; ++i) {
    F v = (x[i] - m) * scale + shift;
    if constexpr (kAdd) v = v + r[i];
    if constexpr (kRelu) v = v < F(0) ? F(0) : v;
    y[i] = v;
  }
}

// batchnorm2d_forward, then ReLU (relu) or + residual and ReLU (residual, with relu).
template <class F>
void batchnorm2d_forward_then(F* out, F* mean, F* rstd, const F* inp, const F* weight,
                              const F* bias, const F* residual, bool relu, int N, int C, int HW,
                              int G, float eps) {
  const int groups = N / G;
  const double count = double(G) * HW;
  // One (group, channel) per iteration: independent, each summed in a fixed order.
#pragma omp parallel for schedule(static)
  for (int gc = 0; gc < groups * C; ++gc) {
    const int g = gc / C, c = gc % C;
    double sum = 0;
    for (int n = g * G; n < (g + 1) * G; ++n) {
      const F* x = plane(inp, n, c, C, HW);
#pragma omp simd reduction(+ : sum)
      for (int i = 0; i < HW; ++i) sum += double(x[i]);
    }
    const double m = sum / count;
    double sq = 0;  // two-pass variance: no cancellation when |mean| >> std
    for (int n = g * G; n < (g + 1) * G; ++n) {
      const F* x = plane(inp, n, c, C, HW);
#pragma omp simd reduction(+ : sq)
      for (int i = 0; i < HW; ++i) {
        const double d = double(x[i]) - m;
        sq += d * d;
      }
    }
    const double r = 1.0 / std::sqrt(sq / count + double(eps));
    mean[gc] = F(m);
    rstd[gc] = F(r);
    const F mf = F(m), scale = F(r * double(weight[c])), shift = bias[c];
    for (int n = g * G; n < (g + 1) * G; ++n) {
      const F* x = plane(inp, n, c, C, HW);
      F* y = plane(out, n, c, C, HW);
      if (residual) {
        normalize_plane<F, true, true>(y, x, plane(residual, n, c, C, HW), mf, scale, shift, HW);
      } else if (relu) {
        normalize_plane<F, false, true>(y, x, nullptr, mf, scale, shift, HW);
      } else {
        normalize_plane<F, false, false>(y, x, nullptr, mf, scale, shift, HW);
      }
    }
  }
}

}  // namespace

template <class F>
void batchnorm2d_forward(F* out, F* mean, F* rstd, const F* inp, const F* weight, const F* bias,
                         int N, int C, int HW, int G, float eps) {
  batchnorm2d_forward_then(out, mean, rstd, inp, weight, bias, static_cast<const F*>(nullptr),
                           false, N, C, HW, G, eps);
}

template <class F>
void batchnorm2d_add_relu_forward(F* out, F* mean, F* rstd, const F* inp, const F* weight,
                                  const F* bias, const F* residual, int N, int C, int HW, int G,
                                  float eps) {
  batchnorm2d_forward_then(out, mean, rstd, inp, weight, bias, residual, true, N, C, HW, G, eps);
}

template <class F>
void batchnorm2d_forward_eval(F* out, const F* inp, const F* weight, const F* bias,
                              const F* running_mean, const F* running_var, int N, int C, int HW,
                              float eps) {
#pragma omp parallel for schedule(static)
  for (int nc = 0; nc < N * C; ++nc) {
    const int n = nc / C, c = nc % C;
    const F m = running_mean[c];
    const F scale = F(double(weight[c]) / std::sqrt(double(running_var[c]) + double(eps)));
    const F shift = bias[c];
    const F* x = plane(inp, n, c, C, HW);
    F* y = plane(out, n, c, C, HW);
#pragma omp simd
    for (int i = 0; i < HW; ++i) y[i] = (x[i] - m) * scale + shift;
  }
}

template <class F>
void batchnorm2d_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp,
                          const F* weight, const F* mean, const F* rstd, int N, int C, int HW,
                          int G) {
  const int groups = N / G;
  const double count = double(G) * HW;
  // One channel per iteration, its groups in order: dweight/dbias get the same sums for any
  // thread count.
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; ++c) {
    double dw_sum = 0, db_sum = 0;
    for (int g = 0; g < groups; ++g) {
      const double m = double(mean[g * C + c]), r = double(rstd[g * C + c]);
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int n = g * G; n < (g + 1) * G; ++n) {
        const F* x = plane(inp, n, c, C, HW);
        const F* dy = plane(dout, n, c, C, HW);
#pragma omp simd reduction(+ : sum_dy, sum_dy_xhat)
        for (int i = 0; i < HW; ++i) {
          sum_dy += double(dy[i]);
          sum_dy_xhat += double(dy[i]) * (double(x[i]) - m) * r;
        }
      }
      dw_sum += sum_dy_xhat;
      db_sum += sum_dy;
      // dx = r*w * (dy - mean(dy) - xhat * mean(dy*xhat)) = a*dy + b*(x - m) + k
      const double w = double(weight[c]);
      const double a = r * w, mdy = sum_dy / count, mdx = sum_dy_xhat / count;
      const F fa = F(a), fb = F(-a * mdx * r), fk = F(-a * mdy), fm = F(m);
      for (int n = g * G; n < (g + 1) * G; ++n) {
        const F* x = plane(inp, n, c, C, HW);
        const F* dy = plane(dout, n, c, C, HW);
        F* dx = plane(dinp, n, c, C, HW);
#pragma omp simd
        for (int i = 0; i < HW; ++i) dx[i] = fa * dy[i] + fb * (x[i] - fm) + fk;
      }
    }
    dweight[c] += F(dw_sum);
    dbias[c] += F(db_sum);
  }
}

template <class F>
void batchnorm2d_group_stats(double* mean_sum, double* var_sum, const F* mean, const F* rstd,
                             int groups, int C, int HW, int G, float eps) {
  const double n = double(G) * HW;
  const double unbias = n > 1 ? n / (n - 1) : 1.0;  // one value per group: variance 0
  for (int g = 0; g < groups; ++g)
    for (int c = 0; c < C; ++c) {
      const double r = double(rstd[g * C + c]);
      const double var = std::fmax(0.0, 1.0 / (r * r) - double(eps));  // rounding can dip below 0
      mean_sum[c] += double(mean[g * C + c]);
      var_sum[c] += var * unbias;
    }
}

template void batchnorm2d_forward<float>(float*, float*, float*, const float*, const float*,
                                         const float*, int, int, int, int, float);
template void batchnorm2d_forward<double>(double*, double*, double*, const double*, const double*,
                                          const double*, int, int, int, int, float);
template void batchnorm2d_add_relu_forward<float>(float*, float*, float*, const float*,
                                                  const float*, const float*, const float*, int,
                                                  int, int, int, float);
template void batchnorm2d_add_relu_forward<double>(double*, double*, double*, const double*,
                                                   const double*, const double*, const double*, int,
                                                   int, int, int, float);
template void batchnorm2d_forward_eval<float>(float*, const float*, const float*, const float*,
                                              const float*, const float*, int, int, int, float);
template void batchnorm2d_forward_eval<double>(double*, const double*, const double*, const double*,
                                               const double*, const double*, int, int, int, float);
template void batchnorm2d_backward<float>(float*, float*, float*, const float*, const float*,
                                          const float*, const float*, const float*, int, int, int,
                                          int);
template void batchnorm2d_backward<double>(double*, double*, double*, const double*, const double*,
                                           const double*, const double*, const double*, int, int,
                                           int, int);
template void batchnorm2d_group_stats<float>(double*, double*, const float*, const float*, int, int,
                                             int, int, float);
template void batchnorm2d_group_stats<double>(double*, double*, const double*, const double*, int,
                                              int, int, int, float);

}  // namespace mpitron::cpu
