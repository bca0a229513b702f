// Inverted dropout with a counter-based mask: element (r, c) is kept when
// rng.uniform((row0 + r) * C + c) >= p and then scaled by 1/(1-p). row0 is the global row
// (global sample * T + t), so every layout draws the baseline's mask; backward recomputes the
// mask instead of storing it. p == 0 is the identity. out may alias inp, dinp may alias dout.
#pragma once
#include <cstdint>

#include "base/philox.hpp"

namespace mpitron::cpu {

template <class F>
void dropout_forward(F* out,        // (N,C)
                     const F* inp,  // (N,C)
                     float p, const PhiloxStream& rng, uint64_t row0, int N, int C);

template <class F>
void dropout_backward(F* dinp,        // (N,C) =
                      const F* dout,  // (N,C)
                      float p, const PhiloxStream& rng, uint64_t row0, int N, int C);

}  // namespace mpitron::cpu
