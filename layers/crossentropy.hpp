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

}  // namespace mpitron::cpu
