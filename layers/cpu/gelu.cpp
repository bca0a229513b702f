// GELU, tanh approximation: y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3); backward
// uses the exact derivative of that formula, dy/dx = 0.5 (1 + th) + 0.5 x (1 - th^2) du/dx.
// Exact (erf) GELU: y = x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2, dy/dx = Phi(x) + x phi(x).
#include "layers/gelu.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "base/fastmath.hpp"

namespace mpitron::cpu {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;
constexpr ptrdiff_t kParallelMin = 1 << 14;  // below this, threading costs more than it saves
}  // namespace

// Blocks of kBlock elements: threads split the blocks, each block is one vectorised loop.
constexpr ptrdiff_t kBlock = 4096;

template <class F>
void gelu_forward_block(F* __restrict out, const F* __restrict inp, ptrdiff_t len) {
  const F s = F(kSqrt2OverPi), a = F(kCubic);
#pragma omp simd
  for (ptrdiff_t i = 0; i < len; ++i) {
    const F x = inp[i];
    out[i] = F(0.5) * x * (F(1) + tanh_fast(s * (x + a * x * x * x)));
  }
}

template <class F>
void gelu_backward_block(F* __restrict dinp, const F* __restrict dout, const F* __restrict inp,
                         ptrdiff_t len) {
  const F s = F(kSqrt2OverPi), a = F(kCubic);
#pragma omp simd
  for (ptrdiff_t i = 0; i < len; ++i) {
    const F x = inp[i];
    const F th = tanh_fast(s * (x + a * x * x * x));
    const F du = s * (F(1) + F(3) * a * x * x);
    dinp[i] = dout[i] * (F(0.5) * (F(1) + th) + F(0.5) * x * (F(1) - th * th) * du);
  }
}

template <class F>
void gelu_forward(F* out, const F* inp, size_t n) {
  const ptrdiff_t len = ptrdiff_t(n), blocks = (len + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (len >= kParallelMin)
  for (ptrdiff_t b = 0; b < blocks; ++b)
    gelu_forward_block(out + b * kBlock, inp + b * kBlock, std::min(kBlock, len - b * kBlock));
}

template <class F>
void gelu_backward(F* dinp, const F* dout, const F* inp, size_t n) {
  const ptrdiff_t len = ptrdiff_t(n), blocks = (len + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (len >= kParallelMin)
  for (ptrdiff_t b = 0; b < blocks; ++b)
    gelu_backward_block(dinp + b * kBlock, dout + b * kBlock, inp + b * kBlock,
                        std::min(kBlock, len - b * kBlock));
}

template <class F>
void gelu_erf_forward_block(F* __restrict out, const F* __restrict inp, ptrdiff_t len) {
#pragma omp simd
  for (ptrdiff_t i = 0; i < len; ++i) {
    const F x = inp[i];
    out[i] = F(0.5) * x * erfc_fast(-x * F(kInvSqrt2));
  }
}

template <class F>
void gelu_erf_backward_block(F* __restrict dinp, const F* __restrict dout, const F* __restrict inp,
                             ptrdiff_t len) {
#pragma omp simd
  for (ptrdiff_t i = 0; i < len; ++i) {
    const F x = inp[i];
    const F cdf = F(0.5) * erfc_fast(-x * F(kInvSqrt2));
    const F pdf = F(kInvSqrt2Pi) * exp_fast(F(-0.5) * x * x);
    dinp[i] = dout[i] * (cdf + x * pdf);
  }
}

template <class F>
void gelu_erf_forward(F* out, const F* inp, size_t n) {
  const ptrdiff_t len = ptrdiff_t(n), blocks = (len + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (len >= kParallelMin)
  for (ptrdiff_t b = 0; b < blocks; ++b)
    gelu_erf_forward_block(out + b * kBlock, inp + b * kBlock, std::min(kBlock, len - b * kBlock));
}

template <class F>
void gelu_erf_backward(F* dinp, const F* dout, const F* inp, size_t n) {
  const ptrdiff_t len = ptrdiff_t(n), blocks = (len + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (len >= kParallelMin)
  for (ptrdiff_t b = 0; b < blocks; ++b)
    gelu_erf_backward_block(dinp + b * kBlock, dout + b * kBlock, inp + b * kBlock,
                            std::min(kBlock, len - b * kBlock));
}

template void gelu_erf_forward<float>(float*, const float*, size_t);
template void gelu_erf_forward<double>(double*, const double*, size_t);
template void gelu_erf_backward<float>(float*, const float*, const float*, size_t);
template void gelu_erf_backward<double>(double*, const double*, const double*, size_t);
template void gelu_forward<float>(float*, const float*, size_t);
template void gelu_forward<double>(double*, const double*, size_t);
template void gelu_backward<float>(float*, const float*, const float*, size_t);
template void gelu_backward<double>(double*, const double*, const double*, size_t);

}  // namespace mpitron::cpu
