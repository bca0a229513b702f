// ReLU: y = max(x, 0), a NaN input stays NaN; backward dinp = dout * (x > 0), written as a select
// so dinp is exactly 0 where x <= 0 (the subgradient at the kink is 0), as PyTorch's.
#include "layers/relu.hpp"

#include <algorithm>
#include <cstddef>

namespace mpitron::cpu {

namespace {
constexpr ptrdiff_t kParallelMin = 1 << 14;  // below this, threading costs more than it saves
// Blocks of kBlock elements: threads split the blocks, each block is one vectorised loop.
constexpr ptrdiff_t kBlock = 4096;

template <class F>
void relu_forward_block(F* __restrict out, const F* __restrict inp, ptrdiff_t len) {
#pragma omp simd
  for (ptrdiff_t i = 0; i < len; ++i) out[i] = inp[i] < F(0) ? F(0) : inp[i];
}

// No __restrict on dinp/dout: they may alias (each element is read before it is written).
template <class F>
void relu_backward_block(F* dinp, const F* dout, const F* __restrict inp, ptrdiff_t len) {
#pragma omp simd
  for (ptrdiff_t i = 0; i < len; ++i) dinp[i] = inp[i] > F(0) ? dout[i] : F(0);
}

}  // namespace

template <class F>
void relu_forward(F* out, const F* inp, size_t n) {
  const ptrdiff_t len = ptrdiff_t(n), blocks = (len + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (len >= kParallelMin)
  for (ptrdiff_t b = 0; b < blocks; ++b)
    relu_forward_block(out + b * kBlock, inp + b * kBlock, std::min(kBlock, len - b * kBlock));
}

template <class F>
void relu_backward(F* dinp, const F* dout, const F* inp, size_t n) {
  const ptrdiff_t len = ptrdiff_t(n), blocks = (len + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (len >= kParallelMin)
  for (ptrdiff_t b = 0; b < blocks; ++b)
    relu_backward_block(dinp + b * kBlock, dout + b * kBlock, inp + b * kBlock,
                        std::min(kBlock, len - b * kBlock));
}

template void relu_forward<float>(float*, const float*, size_t);
template void relu_forward<double>(double*, const double*, size_t);
template void relu_backward<float>(float*, const float*, const float*, size_t);
template void relu_backward<double>(double*, const double*, const double*, size_t);

}  // namespace mpitron::cpu
