// LayerNorm over the last dimension (Ba et al. 2016): y = (x - mean) * rstd * weight + bias,
// rstd = 1/sqrt(var + eps), biased variance; eps 1e-5 (GPT-2), 1e-12 for BERT.
#pragma once

namespace mpitron::cpu {

template <class F>
void layernorm_forward(F* out,           // (N,C)
                       F* mean,          // (N)
                       F* rstd,          // (N)
                       const F* inp,     // (N,C)
                       const F* weight,  // (C)
                       const F* bias,    // (C)
                       int N, int C, double eps = 1e-5);

template <class F>
void layernorm_backward(F* dinp,          // (N,C)  += (residual stream)
                        F* dweight,       // (C)    +=
                        F* dbias,         // (C)    +=
                        const F* dout,    // (N,C)
                        const F* inp,     // (N,C)
                        const F* weight,  // (C)
                        const F* mean,    // (N)
                        const F* rstd,    // (N)
                        int N, int C);

}  // namespace mpitron::cpu
