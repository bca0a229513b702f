// Transformer blocks, forward and backward side by side. The GPT's pre-LN block (causal):
//   x' = x + dropout(c_proj(attn(c_attn(ln_1(x)))))
//   y  = x' + dropout(mlp.c_proj(gelu(mlp.c_fc(ln_2(x')))))
// and the encoder's post-LN block (BERT, Devlin et al. 2019; bidirectional with a padding mask,
// separate query/key/value weights, exact GELU):
//   h = LN_1(x + dropout(dense(attn(q(x), k(x), v(x)))))
//   y = LN_2(h + dropout(output(gelu_erf(intermediate(h)))))
// Tensor parallel as Megatron-LM (Shoeybi et al. 2019): c_attn (the encoder's query, key and
// value) and mlp.c_fc column-parallel (a rank computes its own heads and its slice of the MLP's
// inner features), the two c_proj row-parallel. Attention and the MLP are one region each
// (tensor_parallel.hpp's TpRegion: copy_to_tp where the replicated input enters, reduce_from_tp
// after the row-parallel c_proj), so a block costs one all-reduce in forward and one in backward
// for attention and one each for the MLP, however many layers read a region's input; the input
// gradient's all-reduce overlaps the weight-gradient products. LayerNorms, dropout and the
// residual stream work on the full width, identical on every TP rank. Letters as in
// layers/README.md; N = B*T rows, Cl = C/tp.
#pragma once
#include <cstdint>

#include "base/philox.hpp"
#include "comm/group.hpp"
#include "src/model/activation_plan.hpp"
#include "src/model/layer_ops.hpp"
#include "src/model/tensor_parallel.hpp"

namespace mpitron {

// A: the storage type of activations and weights (float, bf16_t, fp16_t: precision.hpp); both
// blocks run in any (tensor parallelism in float only).
template <class A>
struct BlockShapeT {
  int B = 0, T = 0, C = 0, NH = 0;
  bool causal = true;
  const int32_t* lengths = nullptr;   // (B) valid tokens per sequence, nullptr: all T
  tp::TpComm* tp_group = nullptr;     // the tensor-parallel group (size 1: no TP)
  double ln_eps = 1e-5;               // LayerNorm's epsilon (BERT: 1e-12)
  const LayerOpsT<A>* ops = nullptr;  // the device's layers, nullptr: the CPU's
  // The reference the regions are tested against: every column-parallel layer all-reduces its own
  // input gradient (the encoder's q, k and v: three all-reduces where its region makes one).
  bool tp_per_layer = false;
  int tp_ranks = 1;   // the TP size where no group is given (a memory plan counts, runs nothing)
  int tp_shards = 0;  // --bitwise's TP shards where no group is given
  int tp_size() const { return tp_group ? tp_group->size() : tp_ranks; }
  int tp_fixed_shards() const { return tp_group ? tp_group->shards : tp_shards; }
  const LayerOpsT<A>& layers() const { return ops ? *ops : layer_ops<A>(Device::cpu); }
};
using BlockShape = BlockShapeT<float>;

// Pointers to one block's parameters (or gradients) inside a flat buffer: this rank's shards. W is
// the storage type of the weights (gradients are float).
template <class W>
struct BlockWeightsT {
  W *ln_1_w, *ln_1_b;            // (C)
  W *c_attn_w, *c_attn_b;        // (3Cl,C), (3Cl): q | k | v rows of this rank's heads
  W *attn_proj_w, *attn_proj_b;  // (C,Cl), (C)
  W *ln_2_w, *ln_2_b;            // (C)
  W *c_fc_w, *c_fc_b;            // (4Cl,C), (4Cl)
  W *mlp_proj_w, *mlp_proj_b;    // (C,4Cl), (C)
};
using BlockWeights = BlockWeightsT<float>;

// The encoder block's parameters (or gradients): this rank's shards, BERT's names. W is the
// storage type of the weights (gradients are float).
template <class W>
struct EncoderBlockWeightsT {
  W *q_w, *q_b, *k_w, *k_b, *v_w, *v_b;  // (Cl,C), (Cl): attention.self.{query,key,value}
  W *attn_proj_w, *attn_proj_b;          // (C,Cl), (C): attention.output.dense
  W *ln_1_w, *ln_1_b;                    // (C): attention.output.LayerNorm
  W *c_fc_w, *c_fc_b;                    // (4Cl,C), (4Cl): intermediate.dense
  W *mlp_proj_w, *mlp_proj_b;            // (C,4Cl), (C): output.dense
  W *ln_2_w, *ln_2_b;                    // (C): output.LayerNorm
};
using EncoderBlockWeights = EncoderBlockWeightsT<float>;

// Saved by forward for backward, one set per block and micro-batch in flight. The encoder block
// fills the same fields in its own order: res_attn = x + attn_out, ln_1 = LN_1(res_attn),
// res_mlp = ln_1 + mlp_out, ln_2 = LN_2(res_mlp) (its output).
template <class A>
struct BlockActsT {
  A* ln_1;                       // (B,T,C)
  float *ln_1_mean, *ln_1_rstd;  // (B,T)
  A* qkv;                        // (B,T,3Cl)
  float* att;                    // the softmax for backward: attention_saved_elements(B,NH/tp,T)
  A* atty;                       // (B,T,Cl)
  A* attn_out;                   // (B,T,C) after projection and dropout
  A* res_attn;                   // (B,T,C) x + attn_out
  A* ln_2;                       // (B,T,C)
  float *ln_2_mean, *ln_2_rstd;  // (B,T)
  A* fc;                         // (B,T,4Cl)
  A* fc_gelu;                    // (B,T,4Cl)
  A* mlp_out;                    // (B,T,C) after projection and dropout
  A* res_mlp;                    // (B,T,C) block output
};
using BlockActs = BlockActsT<float>;

// Backward's scratch, shared by every block (one backward runs at a time).
template <class A>
struct BlockScratchT {
  A *dbranch, *dln, *dqkv, *datty;  // (B,T,C) (B,T,C) (B,T,3Cl) (B,T,Cl)
  float* datt;
  A *dfc, *dfc_gelu;
};
using BlockScratch = BlockScratchT<float>;

// Inverted dropout on the two branch outputs; masks keyed by global row (sample * T + t).
struct BlockDropout {
  float p = 0.0f;
  PhiloxStream attn, mlp;
  uint64_t row0 = 0;
};

template <class A>
void block_acts_carve(BlockActsT<A>& a, ActivationCarver& c, const BlockShapeT<A>& s);
template <class A>
void block_scratch_carve(BlockScratchT<A>& d, ActivationCarver& c, const BlockShapeT<A>& s);
// --bitwise: the floats of TP scratch (tp::TpComm::fixed) a block's split linears need; fused_qkv:
// the decoder's one q|k|v projection and GELU-fused MLP, else the encoder's three and plain MLP.
template <class A>
size_t block_tp_fixed_floats(const BlockShapeT<A>& s, bool fused_qkv);

// Fills a from the block input x (B,T,C); the block output is a.res_mlp.
template <class A>
void transformer_block_forward(BlockActsT<A>& a, const A* x, const BlockWeightsT<A>& w,
                               const BlockShapeT<A>& s, const BlockDropout& drop);

// dresidual (B,T,C): on entry dL/d(block output), on exit dL/d(block input x). Parameter
// gradients accumulate into dw.
template <class A>
void transformer_block_backward(A* dresidual, const BlockWeights& dw, const BlockScratchT<A>& d,
                                const BlockActsT<A>& a, const A* x, const BlockWeightsT<A>& w,
                                const BlockShapeT<A>& s, const BlockDropout& drop);

// The encoder block: fills a from x (B,T,C); the block output is a.ln_2.
template <class A>
void encoder_block_forward(BlockActsT<A>& a, const A* x, const EncoderBlockWeightsT<A>& w,
                           const BlockShapeT<A>& s, const BlockDropout& drop);

// dresidual (B,T,C): on entry dL/d(block output), on exit dL/dx. Parameter gradients accumulate.
template <class A>
void encoder_block_backward(A* dresidual, const EncoderBlockWeights& dw, const BlockScratchT<A>& d,
                            const BlockActsT<A>& a, const A* x, const EncoderBlockWeightsT<A>& w,
                            const BlockShapeT<A>& s, const BlockDropout& drop);

}  // namespace mpitron
