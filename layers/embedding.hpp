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

// The vocab-parallel shard (tensor parallelism, Megatron-style): this rank holds wte rows
// [v0, v0+Vl). out row i = wte[tokens[i] - v0] for a token in the shard, zeros for any other; the
// positions are added once, after the sum over TP (embedding_add_positions).
template <class F>
void embedding_shard_forward(F* out,                 // (N,C) =
                             const int32_t* tokens,  // (N)
                             const F* wte,           // (Vl,C)
                             int N, int C, int v0, int Vl);

// out[b,t,:] += wpe[t,:].
template <class F>
void embedding_add_positions(F* out,        // (B,T,C) +=
                             const F* wpe,  // (maxT,C)
                             int B, int T, int C);

// embedding_backward on the shard: dwte rows of the shard's tokens +=, dwpe += every row (the
// same on every rank); rows added in token order per column block, as embedding_backward.
template <class F>
void embedding_shard_backward(F* dwte,                // (Vl,C)    +=
                              F* dwpe,                // (maxT,C)  +=
                              const F* dout,          // (B,T,C)
                              const int32_t* tokens,  // (B,T)
                              int B, int T, int C, int v0, int Vl);

}  // namespace mpitron::cpu
