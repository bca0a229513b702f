// Multi-head scaled dot-product attention (Vaswani et al. 2017) over a fused qkv buffer:
// per head, P = softmax(Q K^T / sqrt(HS) [+ causal mask] [+ padding mask]), out = P V.
// Backward: dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dP * P)), dQ = dS K / sqrt(HS),
// dK = dS^T Q / sqrt(HS).
// Masks: with lengths, sequence b has lengths[b] valid tokens (1 <= lengths[b] <= T, checked) and
// keys j >= lengths[b] get probability 0 for every query; with causal, query i sees keys
// j < min(i + 1, lengths[b]). Queries at padded positions are computed normally over the valid
// keys; padded keys/values are never read, their gradients are 0. lengths == nullptr: all T valid.
#pragma once
#include <cstdint>

namespace mpitron::cpu {

template <class F>
void attention_forward(F* out,        // (B,T,C)    heads side by side, head h in [h*HS,(h+1)*HS)
                       F* att,        // (B,NH,T,T) softmax probabilities (masked entries 0)
                       const F* qkv,  // (B,T,3C)   q | k | v, each (NH,HS)
                       int B, int T, int C, int NH, bool causal,
                       const int32_t* lengths = nullptr);  // (B) valid tokens, or nullptr

template <class F>
void attention_backward(F* dqkv,        // (B,T,3C)   =
                        F* datt,        // (B,NH,T,T) scratch
                        const F* dout,  // (B,T,C)
                        const F* qkv,   // (B,T,3C)
                        const F* att,   // (B,NH,T,T)
                        int B, int T, int C, int NH, bool causal,
                        const int32_t* lengths = nullptr);  // (B) as in forward

// Decoding with a key/value cache: n new queries per sequence attend to the sequence's cached
// keys and values. Query i of sequence b sits at position pos[b] + i and sees cache positions
// [0, pos[b] + i] (causal); the new tokens' keys and values must already be in the cache. The
// softmax is attention_forward's (max-subtracted, scale 1/sqrt(HS)).
template <class F>
void attention_cached_forward(
    F* out,                // (B,n,C)
    const F* qkv,          // (B,n,3C) the new tokens' q | k | v
    const F* key_cache,    // (B,Tc,C) heads side by side
    const F* value_cache,  // (B,Tc,C)
    const int32_t* pos,    // (B) position of each sequence's first new token
    int B, int n, int Tc, int C, int NH);

}  // namespace mpitron::cpu
