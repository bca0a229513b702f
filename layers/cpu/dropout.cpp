// Inverted dropout with a counter-based mask: (r,c) is kept iff rng.uniform((row0+r)*C + c) >= p,
// kept values scaled by 1/(1-p). Backward redraws the same mask, so nothing is stored.
#include "layers/dropout.hpp"

#include <algorithm>
#include <cstddef>

namespace mpitron::cpu {

namespace {
// out = mask * inp / (1-p), element by element, so out == inp is safe.
template <class F>
void apply_mask(F* out, const F* inp, float p, const PhiloxStream& rng, uint64_t row0, int N,
                int C) {
  const ptrdiff_t total = ptrdiff_t(N) * C;
  if (p == 0.0f) {
    if (out != inp) std::copy_n(inp, total, out);
    return;
  }
  const F scale = p < 1.0f ? F(1) / (F(1) - F(p)) : F(0);  // p == 1 drops everything
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; ++r) {
    const uint64_t idx0 = (row0 + uint64_t(r)) * uint64_t(C);
    const F* x = inp + ptrdiff_t(r) * C;
    F* y = out + ptrdiff_t(r) * C;
    for (int c = 0; c < C; ++c) y[c] = rng.uniform(idx0 + uint64_t(c)) >= p ? x[c] * scale : F(0);
  }
}
}  // namespace

template <class F>
void dropout_forward(F* out, const F* inp, float p, const PhiloxStream& rng, uint64_t row0, int N,
                     int C) {
  apply_mask(out, inp, p, rng, row0, N, C);
}

template <class F>
void dropout_backward(F* dinp, const F* dout, float p, const PhiloxStream& rng, uint64_t row0,
                      int N, int C) {
  apply_mask(dinp, dout, p, rng, row0, N, C);
}

template void dropout_forward<float>(float*, const float*, float, const PhiloxStream&, uint64_t,
                                     int, int);
template void dropout_forward<double>(double*, const double*, float, const PhiloxStream&, uint64_t,
                                      int, int);
template void dropout_backward<float>(float*, const float*, float, const PhiloxStream&, uint64_t,
                                      int, int);
template void dropout_backward<double>(double*, const double*, float, const PhiloxStream&, uint64_t,
                                       int, int);

}  // namespace mpitron::cpu
