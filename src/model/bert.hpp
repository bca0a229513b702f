// BERT-style encoder (Devlin et al. 2019), the "bert" model family, on any device's layer table.
//   x0 = dropout(LN(word[tok] + position[t] + token_type[tt]))
//   x_{l+1} = encoder_block(x_l)            post-LN, bidirectional, padding mask
//                                           (src/model/transformer_block.hpp)
// task 0, masked-LM pretraining: each sample is [CLS] text [SEP]; exactly m = round(0.15 (T-2))
//   positions are predicted (80% [MASK], 10% a random token, 10% unchanged), drawn from Philox
//   keyed by (seed, step, global sample) so every layout masks alike;
//   logits = LN(gelu_erf(dense(x_L))) word^T + bias at those positions (decoder tied to word).
// tasks 1 and 2, classification (io/verse_dataset.hpp: testament; consecutive verse pairs):
//   logits = classifier(dropout(tanh(pooler(x_L[:, 0])))).
// Tensor parallel as the GPT: heads and the MLP split over tp, the word embedding, the MLM
// decoder and its bias by vocabulary rows. One pipeline stage only.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "src/model/config.hpp"
#include "src/model/model.hpp"
#include "src/model/transformer_block.hpp"

namespace mpitron {

struct BertConfig {
  int n_layer = 2, n_head = 4, n_embd = 64;
  int block_size = 128;  // position table rows: the longest sequence
  int vocab_size = 261;  // bytes and the five specials by default
  int type_vocab = 2;
  int task = 0;  // 0 masked LM, 1 testament, 2 verse pairs
  int pad_id = 256, unk_id = 257, cls_id = 258, sep_id = 259, mask_id = 260;
  int classes() const { return task == 0 ? vocab_size : 2; }
};

BertConfig bert_config(const ModelConfig& m);

// Masked positions per sample of T tokens: round(0.15 (T - 2)), at least 1.
int bert_masked_per_sample(int T);

// UsageError when heads, the MLP or the vocabulary cannot split over tp.
void validate_bert_layout(const ModelConfig& m, int tp);
// UsageError naming the first impossible value: special ids outside the vocabulary, an unknown
// task, seq_len beyond the position table, n_embd not divisible by n_head.
void validate_bert(const ModelConfig& m, const TrainConfig& t);

// BERT's parameter names (embeddings.word_embeddings.weight, encoder.layer.0.attention.self.query
// .weight, ...); the MLM head (cls.predictions.*) for task 0, pooler and classifier otherwise.
// vocab_align: each TP rank's vocabulary rows a multiple of it (tp::vocab_align_for).
ParamRegistry bert_registry(const BertConfig& cfg, RegistrySlice slice = {}, int vocab_align = 1);

// Pointers to the parameters this rank holds inside one flat buffer (parameters, their rounded
// copy, or gradients); null for the ones the task does not have. W: the storage type.
template <class W>
struct BertWeightsT {
  W *word = nullptr, *position = nullptr, *token_type = nullptr;  // (Vl,C) (P,C) (2,C)
  W *emb_ln_w = nullptr, *emb_ln_b = nullptr;                     // (C)
  std::vector<EncoderBlockWeightsT<W>> layer;
  W *mlm_dense_w = nullptr, *mlm_dense_b = nullptr;  // (C,C), (C)
  W *mlm_ln_w = nullptr, *mlm_ln_b = nullptr;        // (C)
  W* mlm_bias = nullptr;                             // (Vl)
  W *pooler_w = nullptr, *pooler_b = nullptr;        // (C,C), (C)
  W *cls_w = nullptr, *cls_b = nullptr;              // (K,C), (K)
};
// A: the storage type of activations and of the weights the layers read (--precision: float,
// bf16_t or fp16_t; below fp32 a rounded copy of the fp32 parameters, refreshed by
// parameters_changed, at tp 1). Gradients, losses and statistics are fp32 either way.
template <class A>
class BertModelT final : public Model {
 public:
  BertModelT(const BertConfig& cfg, const ModelBuild& how);

  void bind_gradients(const std::function<float*(size_t)>& address) override;
  double forward(const MicroBatch& mb) override;
  void backward(const MicroBatch& mb, float dloss, GradReadyHook ready) override;
  // The slot's logits in host memory as float (off the CPU or in 16 bits: a copy).
  ModelOutput output(int slot) const override;
  int loss_terms_per_sample() const override { return cfg.task == 0 ? m : 1; }
  std::vector<DumpTensor> input_dump(int slot) const override;
  void parameters_changed() override;
  size_t weight_copy_bytes() const override { return weights.size() * sizeof(A); }

  template <class W>
  using WeightsT = BertWeightsT<W>;
  // One micro-batch in flight.
  struct Acts {
    int32_t *ids, *types, *lengths, *targets;  // (B,T) (B,T) (B) (B,T): -1 where not predicted
    int32_t *masked, *labels;                  // (B,m) flat row index of each prediction; (B)
    A* embedded;                               // (B,T,C) before the embedding LayerNorm
    A* encoded;                                // (B,T,C) after it and dropout
    float *emb_mean, *emb_rstd;                // (B,T)
    std::vector<BlockActsT<A>> layer;
    // masked LM head over M = B*m predicted rows
    A *picked, *dense, *dense_gelu, *head_ln;  // (M,C)
    float *head_mean, *head_rstd;              // (M)
    int32_t* picked_targets;                   // (M)
    // classifier head over the B first tokens
    A *first, *pooled, *pooled_drop;  // (B,C)
    A* logits;                        // (M,Vl) or (B,K)
    float *lse, *losses;              // (M or B); (M or B)
    // The integers above are one block of int_count on the host; the layers read them at dev
    // (the block itself on the CPU, its uploaded copy on another device).
    int32_t* int_block = nullptr;
    size_t int_count = 0;
    struct {
      int32_t* block = nullptr;
      const int32_t *ids, *types, *lengths, *masked, *labels, *picked_targets;
    } dev{};
  };

  BertConfig cfg;
  int B = 0, T = 0, m = 0;
  int Vl = 0, v0 = 0;  // this rank's vocabulary rows [v0, v0 + Vl)
  WeightsT<A> w;       // what the layers read: params (fp32), else the rounded copy in weights
  WeightsT<float> dw;
  Buffer<A> weights;  // below fp32: params rounded to A (flat_size); empty in fp32
  Buffer<float> acts, dacts;
  Buffer<int32_t> ints;
  std::vector<Acts> slots;
  A *dresidual, *dhead, *dhead2;  // backward scratch
  float* ce_scratch;
  BlockScratchT<A> scratch;

 private:
  comm::Group self_;
  tp::TpComm tp_;  // over how.tp, or self_
  size_t embedding_segment_ = 0, head_segment_ = 0;
  std::vector<size_t> segment_of_layer_;
  std::vector<int> last_rows_;  // rows of each slot's last forward (input_dump)
  const LayerOpsT<A>* layers_;
  std::vector<int32_t> host_ints_;  // the slots' integer blocks off the CPU
  std::vector<float> host_losses_;
  mutable std::vector<float> host_logits_;  // output() off the CPU or in 16 bits
  mutable std::vector<A> host_logits_16_;
  void prepare_inputs(Acts& a, const MicroBatch& mb) const;
};

using BertModel = BertModelT<float>;

std::unique_ptr<Model> build_bert(const ModelConfig& m, const ModelBuild& how);
// What build_bert allocates, counted without building (the memory plan).
ModelMemory bert_model_memory(const ModelConfig& m, const ModelBuild& how);

}  // namespace mpitron
