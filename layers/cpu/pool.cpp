// Max pooling: out = max over the window's in-image positions (padding never wins), argmax the
// first maximum in row-major order (a NaN wins, as PyTorch's); backward routes dout to the argmax.
// Global average pooling: out[n,c] = mean over the HW plane; backward spreads dout / HW.
#include "layers/pool.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace mpitron::cpu {

// Every window must hold an input position: pad < K (PyTorch asks pad <= K/2).
template <class F>
void maxpool2d_forward_windows(F* out, int32_t* argmax, const F* inp, const Pool2dShape& s) {
  const int OH = s.OH(), OW = s.OW(), HW = s.H * s.W;
#pragma omp parallel for schedule(static)
  for (int nc = 0; nc < s.N * s.C; ++nc) {
    const F* x = inp + ptrdiff_t(nc) * HW;
    F* y = out + ptrdiff_t(nc) * OH * OW;
    int32_t* am = argmax + ptrdiff_t(nc) * OH * OW;
    for (int oy = 0; oy < OH; ++oy) {
      const int y0 = oy * s.stride - s.pad;
      const int ya = y0 < 0 ? 0 : y0, yb = y0 + s.K < s.H ? y0 + s.K : s.H;
      for (int ox = 0; ox < OW; ++ox) {
        const int x0 = ox * s.stride - s.pad;
        const int xa = x0 < 0 ? 0 : x0, xb = x0 + s.K < s.W ? x0 + s.K : s.W;
        int best = ya * s.W + xa;
        F v = x[best];
        for (int iy = ya; iy < yb; ++iy)
          for (int ix = xa; ix < xb; ++ix) {
            const F e = x[iy * s.W + ix];
            if (e > v || std::isnan(e)) {   // strict: the first of equal maxima stays
              if (std::isnan(v)) continue;  // the first NaN stays
              v = e;
              best = iy * s.W + ix;
            }
          }
        y[oy * OW + ox] = v;
        am[oy * OW + ox] = best;
      }
    }
  }
}

// 2x2 windows, stride 2, no padding (AlexNet's): the same rule as branch-free selects, which
// vectorise. An element wins over the best so far if greater, or if it is the first NaN.
template <class F>
void maxpool2x2_forward(F* out, int32_t* argmax, const F* inp, const Pool2dShape& s) {
  const int OH = s.OH(), OW = s.OW(), HW = s.H * s.W, W = s.W;
#pragma omp parallel for schedule(static)
  for (int nc = 0; nc < s.N * s.C; ++nc) {
    const F* x = inp + ptrdiff_t(nc) * HW;
    for (int oy = 0; oy < OH; ++oy) {
      const F* r0 = x + 2 * oy * W;
      const F* r1 = r0 + W;
      F* y = out + (ptrdiff_t(nc) * OH + oy) * OW;
      int32_t* am = argmax + (ptrdiff_t(nc) * OH + oy) * OW;
      const int32_t i0 = 2 * oy * W;
#pragma omp simd
      for (int ox = 0; ox < OW; ++ox) {
        F v = r0[2 * ox];
        int32_t best = i0 + 2 * ox;
        const F e[3] = {r0[2 * ox + 1], r1[2 * ox], r1[2 * ox + 1]};
        const int32_t at[3] = {i0 + 2 * ox + 1, i0 + W + 2 * ox, i0 + W + 2 * ox + 1};
        for (int k = 0; k < 3; ++k) {
          const bool wins = e[k] > v || (e[k] != e[k] && v == v);
          v = wins ? e[k] : v;
          best = wins ? at[k] : best;
        }
        y[ox] = v;
        am[ox] = best;
      }
    }
  }
}

template <class F>
void maxpool2d_forward(F* out, int32_t* argmax, const F* inp, const Pool2dShape& s) {
  if (s.K == 2 && s.stride == 2 && s.pad == 0) {
    maxpool2x2_forward(out, argmax, inp, s);
  } else {
    maxpool2d_forward_windows(out, argmax, inp, s);
  }
}

template <class F>
void maxpool2d_backward(F* dinp, const F* dout, const int32_t* argmax, const Pool2dShape& s) {
  const int P = s.OH() * s.OW(), HW = s.H * s.W;
  // One plane per iteration, outputs in order: overlapping windows add in a fixed order.
#pragma omp parallel for schedule(static)
  for (int nc = 0; nc < s.N * s.C; ++nc) {
    F* dx = dinp + ptrdiff_t(nc) * HW;
    const F* dy = dout + ptrdiff_t(nc) * P;
    const int32_t* am = argmax + ptrdiff_t(nc) * P;
    for (int i = 0; i < HW; ++i) dx[i] = F(0);
    for (int p = 0; p < P; ++p) dx[am[p]] += dy[p];
  }
}

template <class F>
void global_avgpool_forward(F* out, const F* inp, int N, int C, int HW) {
#pragma omp parallel for schedule(static)
  for (int nc = 0; nc < N * C; ++nc) {
    const F* x = inp + ptrdiff_t(nc) * HW;
    double sum = 0;
    for (int i = 0; i < HW; ++i) sum += double(x[i]);
    out[nc] = F(sum / HW);
  }
}

template <class F>
void global_avgpool_backward(F* dinp, const F* dout, int N, int C, int HW) {
#pragma omp parallel for schedule(static)
  for (int nc = 0; nc < N * C; ++nc) {
    const F g = F(double(dout[nc]) / HW);
    F* dx = dinp + ptrdiff_t(nc) * HW;
    for (int i = 0; i < HW; ++i) dx[i] = g;
  }
}

template void maxpool2d_forward<float>(float*, int32_t*, const float*, const Pool2dShape&);
template void maxpool2d_forward_windows<float>(float*, int32_t*, const float*, const Pool2dShape&);
template void maxpool2d_forward_windows<double>(double*, int32_t*, const double*,
                                                const Pool2dShape&);
template void maxpool2d_forward<double>(double*, int32_t*, const double*, const Pool2dShape&);
template void maxpool2d_backward<float>(float*, const float*, const int32_t*, const Pool2dShape&);
template void maxpool2d_backward<double>(double*, const double*, const int32_t*,
                                         const Pool2dShape&);
template void global_avgpool_forward<float>(float*, const float*, int, int, int);
template void global_avgpool_forward<double>(double*, const double*, int, int, int);
template void global_avgpool_backward<float>(float*, const float*, int, int, int);
template void global_avgpool_backward<double>(double*, const double*, int, int, int);

}  // namespace mpitron::cpu
