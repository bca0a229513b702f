// GELU, tanh approximation (Hendrycks & Gimpel 2016):
// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once
#include <cstddef>

namespace mpitron::cpu {

template <class F>
void gelu_forward(F* out, const F* inp, size_t n);  // (n), (n)

template <class F>
void gelu_backward(F* dinp,        // (n) =
                   const F* dout,  // (n)
                   const F* inp,   // (n)
                   size_t n);

}  // namespace mpitron::cpu
