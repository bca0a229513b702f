// tanh forward and backward; the backward reads forward's output (1 - y^2), not its input.
#include "layers/tanh.hpp"

#include <cmath>

namespace mpitron::cpu {

template <class F>
void tanh_forward(F* out, const F* inp, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = std::tanh(inp[i]);
}

template <class F>
void tanh_backward(F* dinp, const F* dout, const F* out, size_t n) {
  for (size_t i = 0; i < n; ++i) dinp[i] = dout[i] * (F(1) - out[i] * out[i]);
}

template void tanh_forward<float>(float*, const float*, size_t);
template void tanh_forward<double>(double*, const double*, size_t);
template void tanh_backward<float>(float*, const float*, const float*, size_t);
template void tanh_backward<double>(double*, const double*, const double*, size_t);

}  // namespace mpitron::cpu
