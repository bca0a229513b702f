// Hyperbolic tangent, elementwise (BERT's pooler): y = tanh(x), dy/dx = 1 - y^2.
#pragma once
#include <cstddef>

namespace mpitron::cpu {

template <class F>
void tanh_forward(F* out, const F* inp, size_t n);  // (n), (n); may alias

template <class F>
void tanh_backward(F* dinp,        // (n) =
                   const F* dout,  // (n)
                   const F* out,   // (n) forward's output
                   size_t n);

}  // namespace mpitron::cpu
