#include "src/model/transformer_block.hpp"

#include "layers/attention.hpp"
#include "layers/dropout.hpp"
#include "layers/gelu.hpp"
#include "layers/layernorm.hpp"
#include "layers/linear.hpp"
#include "layers/residual.hpp"
#include "src/model/tensor_parallel.hpp"

namespace mpitron {

void block_acts_carve(BlockActs& a, ActivationCarver& c, const BlockShape& s) {
  const size_t BT = size_t(s.B) * s.T, C = s.C, Cl = C / s.tp_size(), NHl = s.NH / s.tp_size();
  a.ln_1 = c.take(BT * C);
  a.ln_1_mean = c.take(BT);
  a.ln_1_rstd = c.take(BT);
  a.qkv = c.take(BT * 3 * Cl);
  a.att = c.take(size_t(s.B) * NHl * s.T * s.T);
  a.atty = c.take(BT * Cl);
  a.attn_out = c.take(BT * C);
  a.res_attn = c.take(BT * C);
  a.ln_2 = c.take(BT * C);
  a.ln_2_mean = c.take(BT);
  a.ln_2_rstd = c.take(BT);
  a.fc = c.take(BT * 4 * Cl);
  a.fc_gelu = c.take(BT * 4 * Cl);
  a.mlp_out = c.take(BT * C);
  a.res_mlp = c.take(BT * C);
}

void block_scratch_carve(BlockScratch& d, ActivationCarver& c, const BlockShape& s) {
  const size_t BT = size_t(s.B) * s.T, C = s.C, Cl = C / s.tp_size(), NHl = s.NH / s.tp_size();
  d.dbranch = c.take(BT * C);
  d.dln = c.take(BT * C);
  d.dqkv = c.take(BT * 3 * Cl);
  d.datty = c.take(BT * Cl);
  d.datt = c.take(size_t(s.B) * NHl * s.T * s.T);
  d.dfc = c.take(BT * 4 * Cl);
  d.dfc_gelu = c.take(BT * 4 * Cl);
}

void transformer_block_forward(BlockActs& a, const float* x, const BlockWeights& w,
                               const BlockShape& s, const BlockDropout& drop) {
  const int B = s.B, T = s.T, C = s.C, N = B * T, Cl = C / s.tp_size(), NHl = s.NH / s.tp_size();
  comm::Group& tp = *s.tp;
  cpu::layernorm_forward(a.ln_1, a.ln_1_mean, a.ln_1_rstd, x, w.ln_1_w, w.ln_1_b, N, C);
  tp::column_parallel_linear_forward(tp, a.qkv, a.ln_1, w.c_attn_w, w.c_attn_b, N, C, 3 * Cl);
  cpu::attention_forward(a.atty, a.att, a.qkv, B, T, Cl, NHl, s.causal, s.lengths);
  tp::row_parallel_linear_forward(tp, a.attn_out, a.atty, w.attn_proj_w, w.attn_proj_b, N, Cl, C);
  cpu::dropout_forward(a.attn_out, a.attn_out, drop.p, drop.attn, drop.row0, N, C);
  cpu::residual_forward(a.res_attn, x, a.attn_out, size_t(N) * C);
  cpu::layernorm_forward(a.ln_2, a.ln_2_mean, a.ln_2_rstd, a.res_attn, w.ln_2_w, w.ln_2_b, N, C);
  tp::column_parallel_linear_forward(tp, a.fc, a.ln_2, w.c_fc_w, w.c_fc_b, N, C, 4 * Cl);
  cpu::gelu_forward(a.fc_gelu, a.fc, size_t(N) * 4 * Cl);
  tp::row_parallel_linear_forward(tp, a.mlp_out, a.fc_gelu, w.mlp_proj_w, w.mlp_proj_b, N, 4 * Cl,
                                  C);
  cpu::dropout_forward(a.mlp_out, a.mlp_out, drop.p, drop.mlp, drop.row0, N, C);
  cpu::residual_forward(a.res_mlp, a.res_attn, a.mlp_out, size_t(N) * C);
}

void transformer_block_backward(float* dresidual, const BlockWeights& dw, const BlockScratch& d,
                                const BlockActs& a, const float* x, const BlockWeights& w,
                                const BlockShape& s, const BlockDropout& drop) {
  const int B = s.B, T = s.T, C = s.C, N = B * T, Cl = C / s.tp_size(), NHl = s.NH / s.tp_size();
  comm::Group& tp = *s.tp;
  // Each branch adds its input gradient to dresidual (the residual stream's += rule).
  cpu::dropout_backward(d.dbranch, dresidual, drop.p, drop.mlp, drop.row0, N, C);
  tp::row_parallel_linear_backward(tp, d.dfc_gelu, dw.mlp_proj_w, dw.mlp_proj_b, d.dbranch,
                                   a.fc_gelu, w.mlp_proj_w, N, 4 * Cl, C);
  cpu::gelu_backward(d.dfc, d.dfc_gelu, a.fc, size_t(N) * 4 * Cl);
  tp::column_parallel_linear_backward(tp, d.dln, dw.c_fc_w, dw.c_fc_b, d.dfc, a.ln_2, w.c_fc_w, N,
                                      C, 4 * Cl);
  cpu::layernorm_backward(dresidual, dw.ln_2_w, dw.ln_2_b, d.dln, a.res_attn, w.ln_2_w, a.ln_2_mean,
                          a.ln_2_rstd, N, C);
  cpu::dropout_backward(d.dbranch, dresidual, drop.p, drop.attn, drop.row0, N, C);
  tp::row_parallel_linear_backward(tp, d.datty, dw.attn_proj_w, dw.attn_proj_b, d.dbranch, a.atty,
                                   w.attn_proj_w, N, Cl, C);
  cpu::attention_backward(d.dqkv, d.datt, d.datty, a.qkv, a.att, B, T, Cl, NHl, s.causal,
                          s.lengths);
  tp::column_parallel_linear_backward(tp, d.dln, dw.c_attn_w, dw.c_attn_b, d.dqkv, a.ln_1,
                                      w.c_attn_w, N, C, 3 * Cl);
  cpu::layernorm_backward(dresidual, dw.ln_1_w, dw.ln_1_b, d.dln, x, w.ln_1_w, a.ln_1_mean,
                          a.ln_1_rstd, N, C);
}

}  // namespace mpitron
