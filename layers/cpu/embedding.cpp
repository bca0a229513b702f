// Token + position embedding: out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]; backward scatters dout
// into the rows of dwte/dwpe the forward read.
#include "layers/embedding.hpp"

#include <algorithm>
#include <cstddef>

#include "layers/cpu/column_blocks.hpp"

namespace mpitron::cpu {

template <class F>
void embedding_forward(F* out, const int32_t* tokens, const F* wte, const F* wpe, int B, int T,
                       int C) {
  const ptrdiff_t N = ptrdiff_t(B) * T;
#pragma omp parallel for schedule(static)
  for (ptrdiff_t i = 0; i < N; ++i) {
    const F* e = wte + ptrdiff_t(tokens[i]) * C;
    const F* p = wpe + (i % T) * C;
    F* o = out + i * C;
    for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
  }
}

// Several tokens may share a dwte row, so the work is split over channel blocks: every thread owns
// whole columns and adds the rows in token order, which keeps the sum order independent of the
// thread count.
template <class F>
void embedding_backward(F* dwte, F* dwpe, const F* dout, const int32_t* tokens, int B, int T,
                        int C) {
  for_each_column_block(C, [&](int c0, int c1) {
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        const ptrdiff_t i = ptrdiff_t(b) * T + t;
        const F* d = dout + i * C;
        F* e = dwte + ptrdiff_t(tokens[i]) * C;
        F* p = dwpe + ptrdiff_t(t) * C;
        for (int c = c0; c < c1; ++c) {
          e[c] += d[c];
          p[c] += d[c];
        }
      }
    }
  });
}

template <class F>
void embedding_shard_forward(F* out, const int32_t* tokens, const F* wte, int N, int C, int v0,
                             int Vl) {
#pragma omp parallel for schedule(static)
  for (ptrdiff_t i = 0; i < ptrdiff_t(N); ++i) {
    const int v = tokens[i] - v0;
    F* o = out + i * C;
    if (v >= 0 && v < Vl)
      std::copy_n(wte + ptrdiff_t(v) * C, C, o);
    else
      std::fill_n(o, C, F(0));
  }
}

template <class F>
void embedding_add_positions(F* out, const F* wpe, int B, int T, int C) {
  const ptrdiff_t N = ptrdiff_t(B) * T;
#pragma omp parallel for schedule(static)
  for (ptrdiff_t i = 0; i < N; ++i) {
    const F* p = wpe + (i % T) * C;
    F* o = out + i * C;
    for (int c = 0; c < C; ++c) o[c] += p[c];
  }
}

template <class F>
void embedding_shard_backward(F* dwte, F* dwpe, const F* dout, const int32_t* tokens, int B, int T,
                              int C, int v0, int Vl) {
  for_each_column_block(C, [&](int c0, int c1) {
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        const ptrdiff_t i = ptrdiff_t(b) * T + t;
        const F* d = dout + i * C;
        F* p = dwpe + ptrdiff_t(t) * C;
        for (int c = c0; c < c1; ++c) p[c] += d[c];
        const int v = tokens[i] - v0;
        if (v < 0 || v >= Vl) continue;
        F* e = dwte + ptrdiff_t(v) * C;
        for (int c = c0; c < c1; ++c) e[c] += d[c];
      }
    }
  });
}

template void embedding_shard_forward<float>(float*, const int32_t*, const float*, int, int, int,
                                             int);
template void embedding_add_positions<float>(float*, const float*, int, int, int);
template void embedding_shard_backward<float>(float*, float*, const float*, const int32_t*, int,
                                              int, int, int, int);
template void embedding_forward<float>(float*, const int32_t*, const float*, const float*, int, int,
                                       int);
template void embedding_forward<double>(double*, const int32_t*, const double*, const double*, int,
                                        int, int);
template void embedding_backward<float>(float*, float*, const float*, const int32_t*, int, int,
                                        int);
template void embedding_backward<double>(double*, double*, const double*, const int32_t*, int, int,
                                         int);

}  // namespace mpitron::cpu
