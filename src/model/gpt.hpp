// GPT-2 decoder (pre-LN, Radford et al. 2019) on the CPU backend: parameters, gradients and
// activations are each one flat allocation, planned when the model is built for a micro-batch of
// B sequences of T tokens; forward and backward only walk the layers over those buffers.
//   x0 = dropout(wte[tok] + wpe[t])
//   x' = x + dropout(c_proj(attn(c_attn(ln_1(x)))))      per block
//   x'' = x' + dropout(mlp.c_proj(gelu(mlp.c_fc(ln_2(x')))))
//   logits = ln_f(x_L) wte^T                              tied LM head
#pragma once
#include <cstdint>
#include <vector>

#include "src/allocator.hpp"
#include "src/model/config.hpp"
#include "src/model/registry.hpp"

namespace mpitron {

// Registers GPT-2's parameters (DESIGN.md §7 names) with their initialisation.
ParamRegistry gpt_registry(const GptConfig& cfg);

// Pointers to every parameter inside one flat buffer (parameters or gradients).
struct GptBlockWeights {
  float *ln_1_w, *ln_1_b;            // (C)
  float *c_attn_w, *c_attn_b;        // (3C,C), (3C)
  float *attn_proj_w, *attn_proj_b;  // (C,C), (C)
  float *ln_2_w, *ln_2_b;            // (C)
  float *c_fc_w, *c_fc_b;            // (4C,C), (4C)
  float *mlp_proj_w, *mlp_proj_b;    // (C,4C), (C)
};
struct GptWeights {
  float* wte;  // (V,C)
  float* wpe;  // (block_size,C)
  std::vector<GptBlockWeights> h;
  float *ln_f_w, *ln_f_b;  // (C)
};
// `at` maps a parameter's flat offset to its address (the flat buffer, or a gradient window).
template <class At>
GptWeights gpt_weights(const ParamRegistry& reg, const GptConfig& cfg, At at);

// Per-block activations saved by forward for backward.
struct GptBlockActs {
  float* ln_1;                   // (B,T,C)
  float *ln_1_mean, *ln_1_rstd;  // (B,T)
  float* qkv;                    // (B,T,3C)
  float* att;                    // (B,NH,T,T)
  float* atty;                   // (B,T,C)
  float* attn_out;               // (B,T,C) after projection and dropout
  float* res_attn;               // (B,T,C) x + attn_out
  float* ln_2;                   // (B,T,C)
  float *ln_2_mean, *ln_2_rstd;  // (B,T)
  float* fc;                     // (B,T,4C)
  float* fc_gelu;                // (B,T,4C)
  float* mlp_out;                // (B,T,C) after projection and dropout
  float* res_mlp;                // (B,T,C) block output
};

// Where a micro-batch sits in the global batch, for dropout masks keyed by global position.
struct DropoutContext {
  float p = 0.0f;
  uint64_t seed = 0;
  int64_t step = 0;
  uint64_t row0 = 0;  // global row (sample * T) of the micro-batch's first token
};

struct GptModel {
  GptConfig cfg;
  ParamRegistry registry;
  int B = 0, T = 0;                   // planned micro-batch
  std::vector<size_t> block_offsets;  // flat offset of block l's first parameter
  size_t ln_f_offset = 0;
  size_t flat_size = 0;  // elements of params: the registry's, padded for sharding
  bool grad_window = false;
  size_t block_span = 0;  // flat elements of one block  // elements of params/grads: the
                          // registry's, padded for sharding
  Buffer<float> params, grads;
  GptWeights w, dw;
  // activations (one allocation) and activation gradients (one allocation, reused per block)
  Buffer<float> acts, dacts;
  Buffer<int32_t> inputs, targets;  // (B,T)
  float* encoded;                   // (B,T,C)
  std::vector<GptBlockActs> blocks;
  float* ln_f;                   // (B,T,C)
  float *ln_f_mean, *ln_f_rstd;  // (B,T)
  float* logits;                 // (B,T,V), overwritten by dlogits in backward
  float* lse;                    // (B,T)
  float* losses;                 // (B,T)
  float *dresidual, *dbranch, *dln, *dqkv, *datty, *datt, *dfc, *dfc_gelu, *dln_f;  // scratch
};

// Builds the model for micro-batches of B sequences of T tokens, parameters initialised from seed.
// The flat parameter allocation is padded to a multiple of 16 * shards elements so that it splits
// into `shards` equal ZeRO shards. With grad_window (ZeRO 2) gradients do not get a flat copy of
// the parameters: the embeddings (head) and ln_f (tail) keep theirs, and every block writes its
// gradients into one shared block-sized window, which the backward hook must reduce and clear
// after each block (see gpt_grad_segment).
void gpt_build(GptModel& model, const GptConfig& cfg, int B, int T, uint64_t seed,
               DeviceAllocator& alloc, int shards = 1, bool grad_window = false);

// Called during backward with flat_begin whenever the gradients of [flat_begin, end of the
// registry) are final for this micro-batch (for reducing buckets while backward still runs).
struct GradReadyHook {
  void (*fn)(void* ctx, size_t flat_begin) = nullptr;
  void* ctx = nullptr;
};

// Forward over `rows` sequences (rows <= B) of tokens (rows, T+1): inputs are [0,T), targets
// [1,T]. Returns the sum of the token losses (the caller normalises by the global token count).
double gpt_forward(GptModel& m, const int32_t* tokens, int rows, const DropoutContext& drop);

// Backward of the last forward; parameter gradients accumulate into m.grads. dloss is the
// gradient of the objective with respect to each token loss (1 / global tokens for the mean).
void gpt_backward(GptModel& m, int rows, float dloss, const DropoutContext& drop,
                  GradReadyHook ready = {});

// The gradients that became final when backward announced flat_begin: flat range [begin, end)
// and where they are. Without a window that is [flat_begin, previous announcement) in the flat
// gradients; with one, block l's window, ln_f's tail or the embeddings' head.
struct GradSegment {
  size_t begin, end;
  float* data;
};
GradSegment gpt_grad_segment(GptModel& m, size_t flat_begin);

// Logits of the last forward for sequence b, position t: (V).
inline const float* gpt_logits(const GptModel& m, int b, int t) {
  return m.logits + (size_t(b) * m.T + t) * m.cfg.vocab_size;
}

}  // namespace mpitron
