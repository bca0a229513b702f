// Token + position embedding: out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].
#pragma once
#include <cstdint>

namespace mpitron::cpu {

template <class F>
void embedding_forward(F* out,                 // (B,T,C)
                       const int32_t* tokens,  // (B,T)
                       const F* wte,           // (V,C)
                       const F* wpe,           // (maxT,C)
                       int B, int T, int C);

template <class F>
void embedding_backward(F* dwte,                // (V,C)     +=
                        F* dwpe,                // (maxT,C)  +=
                        const F* dout,          // (B,T,C)
                        const int32_t* tokens,  // (B,T)
                        int B, int T, int C);

}  // namespace mpitron::cpu
