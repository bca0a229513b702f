// Residual connection: out = a + b; gradients flow unchanged to both inputs.
#pragma once
#include <cstddef>

namespace mpitron::cpu {

template <class F>
void residual_forward(F* out, const F* a, const F* b, size_t n);  // (n) each

template <class F>
void residual_backward(F* da,          // (n) += (residual stream)
                       F* db,          // (n) +=
                       const F* dout,  // (n)
                       size_t n);

}  // namespace mpitron::cpu
