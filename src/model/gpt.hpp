// GPT-2 decoder (pre-LN, Radford et al. 2019) on the CPU backend: the "gpt" model family.
// Parameters are one flat allocation; activations for every micro-batch in flight are planned
// when the model is built; forward and backward only walk the layers over those buffers.
//   x0 = dropout(wte[tok] + wpe[t])
//   x_{l+1} = transformer_block(x_l)                     causal (src/model/transformer_block.hpp)
//   logits = ln_f(x_L) wte^T                              tied LM head
// A pipeline stage holds one chunk of contiguous blocks (several with the interleaved schedule);
// the first stage's first chunk also embeds, the last stage's last chunk also computes the loss
// with its own copy of wte (the tied head; the trainer sums the two copies' gradients).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "src/model/config.hpp"
#include "src/model/model.hpp"
#include "src/model/transformer_block.hpp"

namespace mpitron {

struct GptConfig {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int block_size = 64;   // longest sequence the position embedding covers
  int vocab_size = 256;  // byte-level by default
};

GptConfig gpt_config(const ModelConfig& m);
ModelConfig to_model_config(const GptConfig& g);

// UsageError on every rank when heads or the MLP do not split evenly over tp ranks.
void validate_gpt_layout(const ModelConfig& m, int tp);

// Number of parameters of a GPT of this shape (tied LM head counted once).
int64_t gpt_parameter_count(const GptConfig& m);

// Registers GPT-2's parameters (names as in ARCHITECTURE.md, "Files") with their initialisation,
// TP split and owning stage.
ParamRegistry gpt_registry(const GptConfig& cfg, RegistrySlice slice = {});

// Pointers to every parameter this stage holds inside one flat buffer (parameters or gradients);
// null for the ones it does not hold. h is indexed by global block.
struct GptWeights {
  float* wte = nullptr;  // (V,C)
  float* wpe = nullptr;  // (block_size,C)
  std::vector<BlockWeights> h;
  float *ln_f_w = nullptr, *ln_f_b = nullptr;  // (C)
};

// Activations of one micro-batch in flight in one chunk; the head's only in the last chunk.
struct GptActs {
  int32_t *inputs, *targets;      // (B,T) (views into the model's token buffer)
  float* encoded;                 // (B,T,C) the chunk's input: the embedding, or received
  std::vector<BlockActs> blocks;  // the chunk's blocks, in order (recompute: only res_mlp)
  float* ln_f = nullptr;          // (B,T,C)
  float *ln_f_mean = nullptr, *ln_f_rstd = nullptr;  // (B,T)
  float* logits = nullptr;  // (B,T,Vl) this rank's vocabulary, overwritten by dlogits
  float* lse = nullptr;     // (B,T)
  float* losses = nullptr;  // (B,T)
};

// Blocks of one chunk and its activation sets.
struct GptChunk {
  BlockRange blocks;
  bool first = false;  // embeds the tokens (virtual stage 0)
  bool last = false;   // ln_f, LM head and loss (the last virtual stage)
  std::vector<GptActs> slots;
};

class GptModel final : public Model {
 public:
  GptModel(const GptConfig& cfg, const ModelBuild& how);

  void bind_gradients(const std::function<float*(size_t)>& address) override;
  double forward(const MicroBatch& mb) override;
  void backward(const MicroBatch& mb, float dloss, GradReadyHook ready) override;
  ModelOutput output(int slot) const override;
  int loss_terms_per_sample() const override { return T; }
  StageBoundary boundary(int chunk, int slot) override;

  GptConfig cfg;
  int B = 0, T = 0;    // planned micro-batch
  int Vl = 0, v0 = 0;  // this rank's vocabulary rows [v0, v0 + Vl) (padded past V on the last)
  GptWeights w, dw;
  Buffer<float> acts, dacts;  // every slot's activations; backward scratch (shared)
  Buffer<int32_t> tokens;     // (chunks, slots, 2, B, T) inputs and targets
  std::vector<GptChunk> chunks;
  // (B,T,C) gradient of the residual stream; at a stage boundary the received output gradient
  // and, after backward, the input gradient to send back.
  float* dresidual;
  float* dln_f;       // (B,T,C) scratch
  float* ce_scratch;  // (3,B,T) vocab-parallel cross-entropy's row statistics
  BlockScratch scratch;
  // --recompute block: the one set of block activations every block forwards into (its output
  // goes to the slot's own res_mlp), recomputed in backward from the block's input.
  bool recompute = false;
  BlockActs recompute_acts;

 private:
  // The activations block k of a slot forwards into and backward reads.
  BlockActs block_acts(const GptActs& a, int k) const;
  const LayerOps* layers_ = nullptr;  // the device's layers
  std::vector<int32_t> host_tokens_;  // (2,B,T) inputs and targets, before their upload
  std::vector<float> host_losses_;    // (B,T) the losses, downloaded
  comm::Group self_;                  // the TP group of one when the build names none
  comm::Group* tp_ = nullptr;
  bool holds_first_ = false;             // this stage embeds (its first chunk is virtual stage 0)
  size_t embedding_segment_ = SIZE_MAX;  // wte/wpe, where held
  size_t head_segment_ = SIZE_MAX;       // ln_f, where held
  std::vector<size_t> segment_of_block;  // index into segments of global block l
};

std::unique_ptr<Model> build_gpt(const ModelConfig& m, const ModelBuild& how);

}  // namespace mpitron
