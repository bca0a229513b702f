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
// TP split and owning stage. wte's rows (the tied LM head) are padded to a multiple of
// vocab_align on each rank (the device's LayerOpsT::lm_head_align); its global shape stays (V,C).
ParamRegistry gpt_registry(const GptConfig& cfg, RegistrySlice slice = {}, int vocab_align = 1);

// Pointers to every parameter this stage holds inside one flat buffer (parameters or gradients);
// null for the ones it does not hold. h is indexed by global block. W: the storage type.
template <class W>
struct GptWeightsT {
  W* wte = nullptr;  // (V,C)
  W* wpe = nullptr;  // (block_size,C)
  std::vector<BlockWeightsT<W>> h;
  W *ln_f_w = nullptr, *ln_f_b = nullptr;  // (C)
};
using GptWeights = GptWeightsT<float>;

// Activations of one micro-batch in flight in one chunk; the head's only in the last chunk.
template <class A>
struct GptActsT {
  int32_t *inputs, *targets;          // (B,T) (views into the model's token buffer)
  A* encoded;                         // (B,T,C) the chunk's input: the embedding, or received
  std::vector<BlockActsT<A>> blocks;  // the chunk's blocks, in order (recompute: only res_mlp)
  A* ln_f = nullptr;                  // (B,T,C)
  float *ln_f_mean = nullptr, *ln_f_rstd = nullptr;  // (B,T)
  A* logits = nullptr;      // (B,T,Vl) this rank's vocabulary, overwritten by dlogits
  float* lse = nullptr;     // (B,T)
  float* losses = nullptr;  // (B,T)
  // logits already hold softmax - onehot: a training forward ran the fused classifier.
  bool dlogits_ready = false;
  float dlogits_dloss = 0;  // the dloss the fused classifier applied
  // The last forward ran the head on its loss rows alone (ascending positions in the micro-batch):
  // ln_f, targets, lse and losses hold them in their first loss_rows.size() rows.
  bool compacted = false;
  std::vector<int32_t> loss_rows;
  int positions = 0;  // the last forward's positions per row (SampleView::seq_len, else T)
};

// Blocks of one chunk and its activation sets.
template <class A>
struct GptChunkT {
  BlockRange blocks;
  bool first = false;  // embeds the tokens (virtual stage 0)
  bool last = false;   // ln_f, LM head and loss (the last virtual stage)
  std::vector<GptActsT<A>> slots;
};

// A: the storage type of activations and of the weights the layers read (--precision: float,
// bf16_t or fp16_t). Below fp32 the model keeps a rounded copy of its fp32 parameters (weights,
// refreshed by parameters_changed) and runs at tp 1 and pp 1; gradients are fp32 either way.
template <class A>
class GptModelT final : public Model {
 public:
  GptModelT(const GptConfig& cfg, const ModelBuild& how);

  void bind_gradients(const std::function<float*(size_t)>& address) override;
  void bind_tied_embedding_gradient(float* g) override { embedding_wte_grad_ = g; }
  double forward(const MicroBatch& mb) override;
  void backward(const MicroBatch& mb, float dloss, GradReadyHook ready) override;
  // The layers run on the CPU: the host reads parameters and logits in place (the KV-cache
  // decoder, output()).
  bool layers_on_host() const { return layers_->device == Device::cpu; }
  ModelOutput output(int slot) const override;
  int loss_terms_per_sample() const override { return T; }
  StageBoundary boundary(int chunk, int slot) override;
  void parameters_changed() override;
  size_t weight_copy_bytes() const override { return weights.size() * sizeof(A); }

  GptConfig cfg;
  int B = 0, T = 0;  // planned micro-batch
  // This rank's vocabulary rows [v0, v0 + Vl): padded past V on the last rank when tp does not
  // divide V, and at tp 1 to the device's lm_head_align (CUDA: 50257 -> 50304), the padded rows
  // zero, their logits out of the softmax and their gradient 0.
  int Vl = 0, v0 = 0;
  GptWeightsT<A> w;  // what the layers read: params (fp32), else the rounded copy in weights
  GptWeights dw;
  Buffer<A> weights;          // below fp32: params rounded to A (flat_size); empty in fp32
  Buffer<float> acts, dacts;  // every slot's activations; backward scratch (shared)
  Buffer<int32_t> tokens;     // (chunks, slots, 2, B, T) inputs and targets
  std::vector<GptChunkT<A>> chunks;
  // (B,T,C) gradient of the residual stream; at a stage boundary the received output gradient
  // and, after backward, the input gradient to send back.
  A* dresidual;
  A* dln_f;           // (B,T,C) scratch
  float* ce_scratch;  // (3,B,T) vocab-parallel cross-entropy's row statistics
  BlockScratchT<A> scratch;
  // --recompute block: the one set of block activations every block forwards into (its output
  // goes to the slot's own res_mlp), recomputed in backward from the block's input.
  bool recompute = false;
  BlockActsT<A> recompute_acts;
  // ModelBuild::head_chunk_rows below a micro-batch's rows: the LM head and loss this many rows at
  // a time through one shared logits buffer (0: the whole micro-batch, logits kept per slot).
  int head_rows = 0;
  bool head_on_loss_rows = true;  // ModelBuild::head_on_loss_rows

 private:
  // The LM head and loss over rows [r0, r0 + n) of a slot: logits into a.logits (the whole slot's,
  // or the shared chunk buffer), losses and lse at their rows; backward recomputes a chunk's
  // logits first, overwrites them with dlogits, writes dln_f's rows and accumulates dw.wte.
  void head_forward(GptActsT<A>& a, int r0, int n);
  void head_backward(GptActsT<A>& a, float dloss, int r0, int n);
  // Positions of the micro-batch's rows: SampleView::seq_len (a batch of short pairs), else T.
  int row_positions(const MicroBatch& mb) const;
  // The activations block k of a slot forwards into and backward reads.
  BlockActsT<A> block_acts(const GptActsT<A>& a, int k) const;
  // tp 1 with logits rows of Vl > V (the device's alignment): the padded cross-entropy.
  bool device_padded() const { return tp_.size() == 1 && tp_.shards == 0 && Vl != cfg.vocab_size; }
  // The device has a fused classifier (tp 1): a training forward writes dlogits over the logits.
  bool fused_classifier() const {
    return tp_.size() == 1 && tp_.shards == 0 && layers_->crossentropy_fused;
  }
  const LayerOpsT<A>* layers_ = nullptr;  // the device's layers
  std::vector<int32_t> host_tokens_;      // (2,B,T) inputs and targets, before their upload
  std::vector<float> host_losses_;        // (B,T) the losses, downloaded
  comm::Group self_;                      // the TP group of one when the build names none
  tp::TpComm tp_;                         // over how.tp, or self_
  bool holds_first_ = false;              // this stage embeds (its first chunk is virtual stage 0)
  float* embedding_wte_grad_ = nullptr;   // bind_tied_embedding_gradient's (nullptr: dw.wte)
  size_t embedding_segment_ = SIZE_MAX;   // wte/wpe, where held
  size_t head_segment_ = SIZE_MAX;        // ln_f, where held
  std::vector<size_t> segment_of_block;   // index into segments of global block l
};
using GptModel = GptModelT<float>;

std::unique_ptr<Model> build_gpt(const ModelConfig& m, const ModelBuild& how);
// What build_gpt(m, how) would allocate (how.alloc and how.tp unused: how.slice gives the TP size).
ModelMemory gpt_model_memory(const ModelConfig& m, const ModelBuild& how);

}  // namespace mpitron
