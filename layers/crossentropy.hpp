// Softmax cross-entropy in log-sum-exp form: loss_i = lse(logits_i) - logits_i[target_i],
// lse(x) = max(x) + log(sum exp(x - max(x))). Backward: dlogits = (softmax - onehot) * dloss.
// A negative target marks a row that is no loss term (a masked position): loss 0, dlogits 0.
#pragma once
#include <cstdint>

namespace mpitron::cpu {

template <class F>
void crossentropy_forward(F* losses,               // (N)
                          F* lse,                  // (N)
                          const F* logits,         // (N,V)
                          const int32_t* targets,  // (N)
                          int N, int V);

// dloss is dL/dloss_i, the same for every row (1 / global token count for a mean loss).
// dlogits may alias logits.
template <class F>
void crossentropy_backward(F* dlogits,              // (N,V) =
                           const F* logits,         // (N,V)
                           const F* lse,            // (N)
                           const int32_t* targets,  // (N)
                           F dloss, int N, int V);

// The vocab-parallel shard (tensor parallelism): this rank's logits are vocabulary columns
// [v0, v0+Vl), of which the global ones below V are real (the rest pads a vocabulary TP does not
// divide, never read). Forward in three steps with the TP group's reductions between them:
//   crossentropy_shard_stats    row_max = the shard's row max (-inf on a shard of padding only),
//                               target_logit = the target's logit where this shard holds it, 0
//                               elsewhere;            then all-reduce max(row_max),
//                               sum(target_logit)
//   crossentropy_shard_sumexp   sum = sum over the shard of exp(x - row_max); then all-reduce sum
//   crossentropy_shard_loss     lse = row_max + log(sum), loss = lse - target_logit (0 for a
//                               negative target)
// Backward needs no communication: dlogits = (exp(x - lse) - onehot) * dloss on real columns, 0 on
// padding and on a negative target's row; dlogits may alias logits.
template <class F>
void crossentropy_shard_stats(F* row_max, F* target_logit, const F* logits, const int32_t* targets,
                              int N, int Vl, int v0, int V);
template <class F>
void crossentropy_shard_sumexp(F* sum, const F* logits, const F* row_max, int N, int Vl, int v0,
                               int V);
template <class F>
void crossentropy_shard_loss(F* losses, F* lse, const F* row_max, const F* sum,
                             const F* target_logit, const int32_t* targets, int N);
template <class F>
void crossentropy_shard_backward(F* dlogits, const F* logits, const F* lse, const int32_t* targets,
                                 F dloss, int N, int Vl, int v0, int V);

}  // namespace mpitron::cpu
