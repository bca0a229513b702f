// ReLU (Nair & Hinton 2010): y = max(x, 0); dy/dx = 1 for x > 0, else 0 (0 at the kink).
#pragma once
#include <cstddef>

namespace mpitron::cpu {

// out must not alias inp: backward reads inp.
template <class F>
void relu_forward(F* out, const F* inp, size_t n);  // (n), (n)

template <class F>
void relu_backward(F* dinp,        // (n) =, may alias dout
                   const F* dout,  // (n)
                   const F* inp,   // (n)
                   size_t n);

}  // namespace mpitron::cpu
