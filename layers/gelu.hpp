// GELU (Hendrycks & Gimpel 2016), the tanh approximation GPT-2 uses:
// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); and the exact form BERT uses:
// y = 0.5 x (1 + erf(x / sqrt 2)), dy/dx = Phi(x) + x phi(x).
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

template <class F>
void gelu_erf_forward(F* out, const F* inp, size_t n);  // (n), (n)

template <class F>
void gelu_erf_backward(F* dinp,        // (n) =
                       const F* dout,  // (n)
                       const F* inp,   // (n)
                       size_t n);

}  // namespace mpitron::cpu
