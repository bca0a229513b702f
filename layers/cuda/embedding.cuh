// CUDA twins of layers/embedding.hpp: token + position embedding,
// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]; backward scatters dout into the rows it read. S is
// the storage type (float, __nv_bfloat16 or __half; T is the sequence length here); gradients are
// float, sums in fp32. Tokens are device int32 in [0, V) (not checked). Device pointers;
// asynchronous on s; the same bits on every call.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace mpitron::cuda {

template <class S>
void embedding_forward(S* out,                 // (B,T,C)
                       const int32_t* tokens,  // (B,T)
                       const S* wte,           // (V,C)
                       const S* wpe,           // (maxT,C)
                       int B, int T, int C, cudaStream_t s);

// Bytes of scratch embedding_backward needs for B*T tokens on the current device: three int32
// arrays of B*T plus CUB's radix-sort workspace (queried from CUB; needs a device).
size_t embedding_backward_scratch_bytes(int B, int T);

// Deterministic without atomics, in the CPU's order: a stable radix sort of the (token, position)
// pairs groups the positions of each token in increasing order; one block per distinct token then
// adds, per channel, dout at those positions in that order to dwte's row (starting from its old
// value), and dwpe[t,c] adds b = 0..B-1 in order. Both are the CPU's sequences of +=, so float
// results equal the CPU's bit for bit. A token's positions are walked by one block, so a token
// filling much of the batch serialises (B*T dependent adds per channel at worst). scratch is
// overwritten and must not be in use by other work in flight.
template <class S>
void embedding_backward(
    float* dwte,            // (V,C)     +=
    float* dwpe,            // (maxT,C)  +=
    const S* dout,          // (B,T,C)
    const int32_t* tokens,  // (B,T)
    int B, int T, int C,
    void* scratch,  // (embedding_backward_scratch_bytes(B, T)), 256-byte aligned
    cudaStream_t s);

// The vocab-parallel shard (layers/embedding.hpp's embedding_shard_*): wte holds rows
// [v0, v0+Vl); a token outside them gives a row of zeros; positions added after the sum over TP.
// Backward as embedding_backward (the same scratch, the CPU's order and bits), the tokens outside
// the shard adding only to dwpe.
template <class S>
void embedding_shard_forward(S* out, const int32_t* tokens, const S* wte, int N, int C, int v0,
                             int Vl, cudaStream_t s);
template <class S>
void embedding_add_positions(S* out, const S* wpe, int B, int T, int C, cudaStream_t s);
template <class S>
void embedding_shard_backward(float* dwte, float* dwpe, const S* dout, const int32_t* tokens, int B,
                              int T, int C, int v0, int Vl, void* scratch, cudaStream_t s);

}  // namespace mpitron::cuda
