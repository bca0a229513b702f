// CUDA twins of layers/crossentropy.hpp: softmax cross-entropy in log-sum-exp form,
// loss_i = lse_i - logits[i, target_i], lse = max + log(sum exp(x - max)); backward
// dlogits = (exp(logits - lse) - onehot) * dloss. T (the logits) is float, __nv_bfloat16 or
// __half; losses and lse are float, math in fp32. Targets are device int32 in [0, V): a target
// outside it is a contract violation, answered with a NaN loss and no one-hot term (no read out
// of the row). One block per row; any V >= 1. Device pointers; asynchronous on s; the same bits
// on every call.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace mpitron::cuda {

// Each thread keeps a running (max, sum of exp(x - max)) over its strided elements; the block
// combines them in a fixed tree, so the bits do not depend on scheduling.
template <class T>
void crossentropy_forward(float* losses,           // (N)
                          float* lse,              // (N)
                          const T* logits,         // (N,V)
                          const int32_t* targets,  // (N)
                          int N, int V, cudaStream_t s);

// dloss is dL/dloss_i, the same for every row (1 / global token count for a mean loss).
// Each element is read before it is written by the same thread, so dlogits may alias logits.
template <class T>
void crossentropy_backward(T* dlogits,              // (N,V) =
                           const T* logits,         // (N,V)
                           const float* lse,        // (N)
                           const int32_t* targets,  // (N)
                           float dloss, int N, int V, cudaStream_t s);

// Padded rows (the GPT's LM head on a device that aligns it): each row holds Vp >= V logits of
// which the first V are the vocabulary; the Vp - V padding ones are never read, and backward
// writes 0 there. With Vp == V these are the functions above, bit for bit.
template <class T>
void crossentropy_forward(float* losses,           // (N)
                          float* lse,              // (N)
                          const T* logits,         // (N,Vp)
                          const int32_t* targets,  // (N)
                          int N, int V, int Vp, cudaStream_t s);
template <class T>
void crossentropy_backward(T* dlogits,              // (N,Vp) =
                           const T* logits,         // (N,Vp)
                           const float* lse,        // (N)
                           const int32_t* targets,  // (N)
                           float dloss, int N, int V, int Vp, cudaStream_t s);

// The fused classifier (training): one block per row computes losses and lse exactly as
// crossentropy_forward (the same bits), then overwrites the row's logits with (softmax - onehot)
// dloss (crossentropy_backward's dlogits, the same bits) and 0 on padding, so backward reads no
// logits again.
template <class T>
void crossentropy_fused(float* losses,           // (N)
                        float* lse,              // (N)
                        T* logits,               // (N,Vp) logits in, dlogits out
                        const int32_t* targets,  // (N)
                        float dloss, int N, int V, int Vp, cudaStream_t s);

// The vocab-parallel shard (layers/crossentropy.hpp's crossentropy_shard_*): logits are columns
// [v0, v0+Vl) in rows of Vl, the global ones below V real. One block per row for the row max
// (-inf on a shard of padding only) with the target's logit (0 off the shard), and for the sum of
// exp(x - row_max) (a fixed tree: the same bits on every call); the loss elementwise; backward as
// crossentropy_backward on the real columns, 0 on padding.
template <class T>
void crossentropy_shard_stats(float* row_max, float* target_logit, const T* logits,
                              const int32_t* targets, int N, int Vl, int v0, int V, cudaStream_t s);
template <class T>
void crossentropy_shard_sumexp(float* sum, const T* logits, const float* row_max, int N, int Vl,
                               int v0, int V, cudaStream_t s);
void crossentropy_shard_loss(float* losses, float* lse, const float* row_max, const float* sum,
                             const float* target_logit, const int32_t* targets, int N,
                             cudaStream_t s);
template <class T>
void crossentropy_shard_backward(T* dlogits, const T* logits, const float* lse,
                                 const int32_t* targets, float dloss, int N, int Vl, int v0, int V,
                                 cudaStream_t s);

}  // namespace mpitron::cuda
