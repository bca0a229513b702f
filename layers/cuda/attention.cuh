// CUDA twin of layers/attention.hpp: multi-head scaled dot-product attention over a fused qkv
// buffer as fused flash-attention kernels (online softmax, Dao et al. 2022). Per (b,h):
//   S = Q K^T / sqrt(HS) [masks], P = softmax(S), out = P V, lse_i = log sum_j exp(S_ij).
// Backward recomputes P_ij = exp(S_ij - lse_i) tile by tile:
//   delta_i = rowsum(dO * O)_i (= rowsum(dP * P)_i), dV = P^T dO, dP = dO V^T,
//   dS = P * (dP - delta), dQ = dS K / sqrt(HS), dK = dS^T Q / sqrt(HS).
// Why: lse (B,NH,T) replaces the CPU's (B,NH,T,T) probabilities, so memory is linear in T.
// Masks as on the CPU: with lengths, keys j >= lengths[b] get probability 0 for every query; with
// causal, query i sees keys j < min(i + 1, lengths[b]). Queries at padded positions are computed
// normally over the valid keys; padded keys/values are never read, their gradients are exactly 0.
// lengths is a device array and is not checked on the host (that would synchronise): values are
// clamped to [0, T], and a query that sees no key gets out = 0, lse = -inf and gradient 0.
// HS = C/NH must be 32, 64 or 128 (anything else fails through fail_at). Storage F is float,
// __nv_bfloat16 or __half, every sum in fp32; 16-bit storage runs on tensor cores from sm_80 on
// (16-bit products, P and dS rounded to F as in FlashAttention-2; layers/cuda/attention_mma.cu).
// All pointers are device pointers; asynchronous on s; no allocation. Backward has no atomics and
// sums in a fixed order, so repeated calls agree bitwise. A plain C++17 header: .cpp files include
// it without nvcc.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace mpitron::cuda {

// The head sizes C / NH the kernels take (their tiles): 32, 64 or 128.
bool attention_head_size_ok(int head_size);

template <class F>
void attention_forward(F* out,        // (B,T,C)   heads side by side, head h in [h*HS,(h+1)*HS)
                       float* lse,    // (B,NH,T)  log-sum-exp of each query row's masked S
                       const F* qkv,  // (B,T,3C)  q | k | v, each (NH,HS)
                       int B, int T, int C, int NH, bool causal,
                       const int32_t* lengths,  // (B) valid tokens, or nullptr: all T valid
                       cudaStream_t s);

template <class F>
void attention_backward(F* dqkv,           // (B,T,3C)  =
                        float* delta,      // (B,NH,T)  scratch: rowsum(dout * out)
                        const F* dout,     // (B,T,C)
                        const F* out,      // (B,T,C)   forward's out
                        const F* qkv,      // (B,T,3C)
                        const float* lse,  // (B,NH,T)  forward's lse
                        int B, int T, int C, int NH, bool causal,
                        const int32_t* lengths,  // (B) as in forward
                        cudaStream_t s);

}  // namespace mpitron::cuda
