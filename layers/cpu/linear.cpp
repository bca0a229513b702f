// Fully connected layer, W stored (OC,IC): out = inp W^T + b; dinp = dout W, dW += dout^T inp,
// db += column sums of dout. The products go through cpu::gemm (row-major).
#include "layers/linear.hpp"

#include <algorithm>
#include <cstddef>

#include "base/gemm.hpp"
#include "layers/cpu/column_blocks.hpp"

namespace mpitron::cpu {

template <class F>
void linear_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int IC, int OC) {
  if (N <= 0) return;
  F beta = 0;
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) std::copy_n(bias, OC, out + ptrdiff_t(n) * OC);
    beta = 1;
  }
  gemm<F>(false, true, N, OC, IC, F(1), inp, IC, weight, IC, beta, out, OC);
}

template <class F>
void linear_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                     int N, int IC, int OC) {
  if (N <= 0) return;
  if (dinp) gemm<F>(false, false, N, IC, OC, F(1), dout, OC, weight, IC, F(0), dinp, IC);
  if (dweight) gemm<F>(true, false, OC, IC, N, F(1), dout, OC, inp, IC, F(1), dweight, IC);
  if (dbias) {  // column sums, blocks in parallel (bits independent of thread count)
    for_each_column_block(OC, [&](int o0, int o1) {
      for (int n = 0; n < N; ++n) {
        const F* d = dout + ptrdiff_t(n) * OC;
        for (int o = o0; o < o1; ++o) dbias[o] += d[o];
      }
    });
  }
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int, int,
                                    int);
template void linear_forward<double>(double*, const double*, const double*, const double*, int, int,
                                     int);
template void linear_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int, int, int);
template void linear_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int, int, int);

}  // namespace mpitron::cpu
