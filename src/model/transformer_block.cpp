#include "src/model/transformer_block.hpp"

#include <cstring>

#include "layers/attention.hpp"
#include "layers/dropout.hpp"
#include "layers/gelu.hpp"
#include "layers/layernorm.hpp"
#include "layers/linear.hpp"
#include "layers/residual.hpp"
#include "src/cpu/step_ops.hpp"
#include "src/model/tensor_parallel.hpp"

namespace mpitron {

template <class A>
void block_acts_carve(BlockActsT<A>& a, ActivationCarver& c, const BlockShapeT<A>& s) {
  const size_t BT = size_t(s.B) * s.T, C = s.C, Cl = C / s.tp_size(), NHl = s.NH / s.tp_size();
  a.ln_1 = c.take_as<A>(BT * C);
  a.ln_1_mean = c.take(BT);
  a.ln_1_rstd = c.take(BT);
  a.qkv = c.take_as<A>(BT * 3 * Cl);
  a.att = c.take(s.layers().attention_saved_elements(s.B, NHl, s.T));
  a.atty = c.take_as<A>(BT * Cl);
  a.attn_out = c.take_as<A>(BT * C);
  a.res_attn = c.take_as<A>(BT * C);
  a.ln_2 = c.take_as<A>(BT * C);
  a.ln_2_mean = c.take(BT);
  a.ln_2_rstd = c.take(BT);
  a.fc = c.take_as<A>(BT * 4 * Cl);
  a.fc_gelu = c.take_as<A>(BT * 4 * Cl);
  a.mlp_out = c.take_as<A>(BT * C);
  a.res_mlp = c.take_as<A>(BT * C);
}

template <class A>
void block_scratch_carve(BlockScratchT<A>& d, ActivationCarver& c, const BlockShapeT<A>& s) {
  const size_t BT = size_t(s.B) * s.T, C = s.C, Cl = C / s.tp_size(), NHl = s.NH / s.tp_size();
  d.dbranch = c.take_as<A>(BT * C);
  d.dln = c.take_as<A>(BT * C);
  d.dqkv = c.take_as<A>(BT * 3 * Cl);
  d.datty = c.take_as<A>(BT * Cl);
  d.datt = c.take(s.layers().attention_saved_elements(s.B, NHl, s.T));
  d.dfc = c.take_as<A>(BT * 4 * Cl);
  d.dfc_gelu = c.take_as<A>(BT * 4 * Cl);
}

template <class A>
size_t block_tp_fixed_floats(const BlockShapeT<A>& s, bool fused_qkv) {
  const int shards = s.tp_fixed_shards(), tp = s.tp_size(), N = s.B * s.T, C = s.C, Cl = C / tp;
  if (shards == 0) return 0;
  return std::max({fused_qkv ? tp::column_parallel_fixed_floats(shards, tp, N, C, 3 * Cl, 3, false)
                             : tp::column_parallel_fixed_floats(shards, tp, N, C, Cl, 1, false),
                   tp::column_parallel_fixed_floats(shards, tp, N, C, 4 * Cl, 1, fused_qkv),
                   tp::row_parallel_fixed_floats(shards, tp, N, Cl, C),
                   tp::row_parallel_fixed_floats(shards, tp, N, 4 * Cl, C)});
}

template <class A>
void transformer_block_forward(BlockActsT<A>& a, const A* x, const BlockWeightsT<A>& w,
                               const BlockShapeT<A>& s, const BlockDropout& drop) {
  const int B = s.B, T = s.T, C = s.C, N = B * T, Cl = C / s.tp_size(), NHl = s.NH / s.tp_size();
  tp::TpComm& group = *s.tp_group;
  const LayerOpsT<A>& L = s.layers();
  L.layernorm_forward(a.ln_1, a.ln_1_mean, a.ln_1_rstd, x, w.ln_1_w, w.ln_1_b, N, C, s.ln_eps);
  tp::copy_to_tp_forward(group, a.ln_1, size_t(N) * C);  // the attention region
  tp::column_parallel_linear_forward(group, a.qkv, a.ln_1, w.c_attn_w, w.c_attn_b, N, C, 3 * Cl, L,
                                     3);
  L.attention_forward(a.atty, a.att, a.qkv, B, T, Cl, NHl, s.causal, s.lengths);
  tp::row_parallel_linear_forward(group, a.attn_out, a.atty, w.attn_proj_w, w.attn_proj_b, N, Cl, C,
                                  L);
  L.dropout_forward(a.attn_out, a.attn_out, drop.p, drop.attn, drop.row0, N, C);
  L.residual_forward(a.res_attn, x, a.attn_out, size_t(N) * C);
  L.layernorm_forward(a.ln_2, a.ln_2_mean, a.ln_2_rstd, a.res_attn, w.ln_2_w, w.ln_2_b, N, C,
                      s.ln_eps);
  tp::copy_to_tp_forward(group, a.ln_2, size_t(N) * C);  // the MLP region
  tp::column_parallel_linear_gelu_forward(group, a.fc, a.fc_gelu, a.ln_2, w.c_fc_w, w.c_fc_b, N, C,
                                          4 * Cl, L);
  tp::row_parallel_linear_forward(group, a.mlp_out, a.fc_gelu, w.mlp_proj_w, w.mlp_proj_b, N,
                                  4 * Cl, C, L);
  L.dropout_forward(a.mlp_out, a.mlp_out, drop.p, drop.mlp, drop.row0, N, C);
  L.residual_forward(a.res_mlp, a.res_attn, a.mlp_out, size_t(N) * C);
}

template <class A>
void transformer_block_backward(A* dresidual, const BlockWeights& dw, const BlockScratchT<A>& d,
                                const BlockActsT<A>& a, const A* x, const BlockWeightsT<A>& w,
                                const BlockShapeT<A>& s, const BlockDropout& drop) {
  const int B = s.B, T = s.T, C = s.C, N = B * T, Cl = C / s.tp_size(), NHl = s.NH / s.tp_size();
  tp::TpComm& group = *s.tp_group;
  const LayerOpsT<A>& L = s.layers();
  // Each branch adds its input gradient to dresidual (the residual stream's += rule). c_fc and
  // c_attn are each a region's only consumer: column_parallel_linear_backward is that region.
  L.dropout_backward(d.dbranch, dresidual, drop.p, drop.mlp, drop.row0, N, C);
  tp::row_parallel_linear_backward(group, d.dfc_gelu, dw.mlp_proj_w, dw.mlp_proj_b, d.dbranch,
                                   a.fc_gelu, w.mlp_proj_w, N, 4 * Cl, C, L);
  L.gelu_backward(d.dfc, d.dfc_gelu, a.fc, size_t(N) * 4 * Cl);
  tp::column_parallel_linear_backward(group, d.dln, dw.c_fc_w, dw.c_fc_b, d.dfc, a.ln_2, w.c_fc_w,
                                      N, C, 4 * Cl, L);
  L.layernorm_backward(dresidual, dw.ln_2_w, dw.ln_2_b, d.dln, a.res_attn, w.ln_2_w, a.ln_2_mean,
                       a.ln_2_rstd, N, C);
  L.dropout_backward(d.dbranch, dresidual, drop.p, drop.attn, drop.row0, N, C);
  tp::row_parallel_linear_backward(group, d.datty, dw.attn_proj_w, dw.attn_proj_b, d.dbranch,
                                   a.atty, w.attn_proj_w, N, Cl, C, L);
  L.attention_backward(d.dqkv, d.datt, d.datty, a.atty, a.qkv, a.att, B, T, Cl, NHl, s.causal,
                       s.lengths);
  tp::column_parallel_linear_backward(group, d.dln, dw.c_attn_w, dw.c_attn_b, d.dqkv, a.ln_1,
                                      w.c_attn_w, N, C, 3 * Cl, L, 3);
  L.layernorm_backward(dresidual, dw.ln_1_w, dw.ln_1_b, d.dln, x, w.ln_1_w, a.ln_1_mean,
                       a.ln_1_rstd, N, C);
}

#define MPITRON_GPT_BLOCK(A)                                                                    \
  template void block_acts_carve<A>(BlockActsT<A>&, ActivationCarver&, const BlockShapeT<A>&);  \
  template void block_scratch_carve<A>(BlockScratchT<A>&, ActivationCarver&,                    \
                                       const BlockShapeT<A>&);                                  \
  template size_t block_tp_fixed_floats<A>(const BlockShapeT<A>&, bool);                        \
  template void transformer_block_forward<A>(BlockActsT<A>&, const A*, const BlockWeightsT<A>&, \
                                             const BlockShapeT<A>&, const BlockDropout&);       \
  template void transformer_block_backward<A>(                                                  \
      A*, const BlockWeights&, const BlockScratchT<A>&, const BlockActsT<A>&, const A*,         \
      const BlockWeightsT<A>&, const BlockShapeT<A>&, const BlockDropout&);
MPITRON_GPT_BLOCK(float)
MPITRON_GPT_BLOCK(bf16_t)
MPITRON_GPT_BLOCK(fp16_t)
#undef MPITRON_GPT_BLOCK

template <class A>
void encoder_block_forward(BlockActsT<A>& a, const A* x, const EncoderBlockWeightsT<A>& w,
                           const BlockShapeT<A>& s, const BlockDropout& drop) {
  const int B = s.B, T = s.T, C = s.C, N = B * T, Cl = C / s.tp_size(), NHl = s.NH / s.tp_size();
  tp::TpComm& group = *s.tp_group;
  const LayerOpsT<A>& L = s.layers();
  // Query, key and value are separate tensors (BERT's names), one region: each is projected into
  // atty, then into its columns of the fused buffer the attention kernel reads.
  tp::copy_to_tp_forward(group, x, size_t(N) * C);
  const A* const W[3] = {w.q_w, w.k_w, w.v_w};
  const A* const Bias[3] = {w.q_b, w.k_b, w.v_b};
  for (int p = 0; p < 3; ++p) {
    tp::column_parallel_linear_forward(group, a.atty, x, W[p], Bias[p], N, C, Cl, L);
    L.copy_strided(a.qkv + size_t(p) * Cl, 3 * Cl, a.atty, Cl, N, Cl);
  }
  L.attention_forward(a.atty, a.att, a.qkv, B, T, Cl, NHl, s.causal, s.lengths);
  tp::row_parallel_linear_forward(group, a.attn_out, a.atty, w.attn_proj_w, w.attn_proj_b, N, Cl, C,
                                  L);
  L.dropout_forward(a.attn_out, a.attn_out, drop.p, drop.attn, drop.row0, N, C);
  L.residual_forward(a.res_attn, x, a.attn_out, size_t(N) * C);
  L.layernorm_forward(a.ln_1, a.ln_1_mean, a.ln_1_rstd, a.res_attn, w.ln_1_w, w.ln_1_b, N, C,
                      s.ln_eps);
  tp::copy_to_tp_forward(group, a.ln_1, size_t(N) * C);  // the MLP region
  tp::column_parallel_linear_forward(group, a.fc, a.ln_1, w.c_fc_w, w.c_fc_b, N, C, 4 * Cl, L);
  L.gelu_erf_forward(a.fc_gelu, a.fc, size_t(N) * 4 * Cl);
  tp::row_parallel_linear_forward(group, a.mlp_out, a.fc_gelu, w.mlp_proj_w, w.mlp_proj_b, N,
                                  4 * Cl, C, L);
  L.dropout_forward(a.mlp_out, a.mlp_out, drop.p, drop.mlp, drop.row0, N, C);
  L.residual_forward(a.res_mlp, a.ln_1, a.mlp_out, size_t(N) * C);
  L.layernorm_forward(a.ln_2, a.ln_2_mean, a.ln_2_rstd, a.res_mlp, w.ln_2_w, w.ln_2_b, N, C,
                      s.ln_eps);
}

namespace {

// The encoder's two backward regions (copy_to_tp backward, once per region).
// The MLP region: dresidual = dfc W_fc, and W_fc's gradients.
template <class A>
void encoder_mlp_region_backward(A* dresidual, const EncoderBlockWeights& dw, const A* dfc,
                                 const A* ln_1, const EncoderBlockWeightsT<A>& w,
                                 const BlockShapeT<A>& s, int N, int C, int Cl) {
  const LayerOpsT<A>& L = s.layers();
  tp::TpRegionT<A> mlp = tp::copy_to_tp_backward_begin<A>(*s.tp_group, dresidual, nullptr, nullptr,
                                                          N, C, s.tp_per_layer, L);
  tp::column_parallel_linear_backward_input(mlp, dfc, w.c_fc_w, 4 * Cl);
  tp::copy_to_tp_backward_start(mlp);
  tp::column_parallel_linear_backward_weights(mlp, dw.c_fc_w, dw.c_fc_b, dfc, ln_1, 4 * Cl);
  tp::copy_to_tp_backward_wait(mlp);
}

// The attention region: dresidual = base + the input products of q, k and v, added in that
// order (partial holds each), and their weight gradients (each re-reads its part of dqkv into
// datty).
template <class A>
void encoder_attention_region_backward(A* dresidual, const EncoderBlockWeights& dw,
                                       const BlockScratchT<A>& d, const A* base, A* partial,
                                       const A* x, const EncoderBlockWeightsT<A>& w,
                                       const BlockShapeT<A>& s, int N, int C, int Cl) {
  const LayerOpsT<A>& L = s.layers();
  float* const dW[3] = {dw.q_w, dw.k_w, dw.v_w};
  float* const dB[3] = {dw.q_b, dw.k_b, dw.v_b};
  const A* const W[3] = {w.q_w, w.k_w, w.v_w};
  tp::TpRegionT<A> in = tp::copy_to_tp_backward_begin<A>(*s.tp_group, dresidual, partial, base, N,
                                                         C, s.tp_per_layer, L);
  for (int p = 0; p < 3; ++p) {
    L.copy_strided(d.datty, Cl, d.dqkv + size_t(p) * Cl, 3 * Cl, N, Cl);
    tp::column_parallel_linear_backward_input(in, d.datty, W[p], Cl);
  }
  tp::copy_to_tp_backward_start(in);
  for (int p = 0; p < 3; ++p) {
    L.copy_strided(d.datty, Cl, d.dqkv + size_t(p) * Cl, 3 * Cl, N, Cl);
    tp::column_parallel_linear_backward_weights(in, dW[p], dB[p], d.datty, x, Cl);
  }
  tp::copy_to_tp_backward_wait(in);
}

}  // namespace

template <class A>
void encoder_block_backward(A* dresidual, const EncoderBlockWeights& dw, const BlockScratchT<A>& d,
                            const BlockActsT<A>& a, const A* x, const EncoderBlockWeightsT<A>& w,
                            const BlockShapeT<A>& s, const BlockDropout& drop) {
  const int B = s.B, T = s.T, C = s.C, N = B * T, Cl = C / s.tp_size(), NHl = s.NH / s.tp_size();
  const size_t NC = size_t(N) * C;
  tp::TpComm& group = *s.tp_group;
  const LayerOpsT<A>& L = s.layers();
  // d.dln = dL/d res_mlp; its MLP branch then gives dL/d ln_1 (in dresidual) with the skip added.
  L.zero(d.dln, NC);
  L.layernorm_backward(d.dln, dw.ln_2_w, dw.ln_2_b, dresidual, a.res_mlp, w.ln_2_w, a.ln_2_mean,
                       a.ln_2_rstd, N, C);
  L.dropout_backward(d.dbranch, d.dln, drop.p, drop.mlp, drop.row0, N, C);
  tp::row_parallel_linear_backward(group, d.dfc_gelu, dw.mlp_proj_w, dw.mlp_proj_b, d.dbranch,
                                   a.fc_gelu, w.mlp_proj_w, N, 4 * Cl, C, L);
  L.gelu_erf_backward(d.dfc, d.dfc_gelu, a.fc, size_t(N) * 4 * Cl);
  // The MLP region (c_fc alone): dresidual = its input gradient, the all-reduce overlapping dW.
  encoder_mlp_region_backward(dresidual, dw, d.dfc, a.ln_1, w, s, N, C, Cl);
  L.residual_forward(dresidual, dresidual, d.dln, NC);
  // d.dln = dL/d res_attn: the skip's share of dL/dx, and the attention branch's gradient.
  L.zero(d.dln, NC);
  L.layernorm_backward(d.dln, dw.ln_1_w, dw.ln_1_b, dresidual, a.res_attn, w.ln_1_w, a.ln_1_mean,
                       a.ln_1_rstd, N, C);
  L.dropout_backward(d.dbranch, d.dln, drop.p, drop.attn, drop.row0, N, C);
  tp::row_parallel_linear_backward(group, d.datty, dw.attn_proj_w, dw.attn_proj_b, d.dbranch,
                                   a.atty, w.attn_proj_w, N, Cl, C, L);
  L.attention_backward(d.dqkv, d.datt, d.datty, a.atty, a.qkv, a.att, B, T, Cl, NHl, s.causal,
                       s.lengths);
  // The attention region (q, k, v): dresidual = the skip's share (d.dln, counted once over TP) +
  // the three input products, added in the order q, k, v; one all-reduce, overlapping the three
  // weight products.
  encoder_attention_region_backward(dresidual, dw, d, d.dln, d.dbranch, x, w, s, N, C, Cl);
}

#define MPITRON_ENCODER_BLOCK(A)                                                                   \
  template void encoder_block_forward<A>(BlockActsT<A>&, const A*, const EncoderBlockWeightsT<A>&, \
                                         const BlockShapeT<A>&, const BlockDropout&);              \
  template void encoder_block_backward<A>(                                                         \
      A*, const EncoderBlockWeights&, const BlockScratchT<A>&, const BlockActsT<A>&, const A*,     \
      const EncoderBlockWeightsT<A>&, const BlockShapeT<A>&, const BlockDropout&);
MPITRON_ENCODER_BLOCK(float)
MPITRON_ENCODER_BLOCK(bf16_t)
MPITRON_ENCODER_BLOCK(fp16_t)
#undef MPITRON_ENCODER_BLOCK

}  // namespace mpitron
