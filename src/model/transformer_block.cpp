#include "src/model/transformer_block.hpp"

#include "layers/attention.hpp"
#include "layers/dropout.hpp"
#include "layers/gelu.hpp"
#include "layers/layernorm.hpp"
#include "layers/linear.hpp"
#include "layers/residual.hpp"

namespace mpitron {

void block_acts_carve(BlockActs& a, ActivationCarver& c, const BlockShape& s) {
  const size_t BT = size_t(s.B) * s.T, C = s.C;
  a.ln_1 = c.take(BT * C);
  a.ln_1_mean = c.take(BT);
  a.ln_1_rstd = c.take(BT);
  a.qkv = c.take(BT * 3 * C);
  a.att = c.take(size_t(s.B) * s.NH * s.T * s.T);
  a.atty = c.take(BT * C);
  a.attn_out = c.take(BT * C);
  a.res_attn = c.take(BT * C);
  a.ln_2 = c.take(BT * C);
  a.ln_2_mean = c.take(BT);
  a.ln_2_rstd = c.take(BT);
  a.fc = c.take(BT * 4 * C);
  a.fc_gelu = c.take(BT * 4 * C);
  a.mlp_out = c.take(BT * C);
  a.res_mlp = c.take(BT * C);
}

void block_scratch_carve(BlockScratch& d, ActivationCarver& c, const BlockShape& s) {
  const size_t BT = size_t(s.B) * s.T, C = s.C;
  d.dbranch = c.take(BT * C);
  d.dln = c.take(BT * C);
  d.dqkv = c.take(BT * 3 * C);
  d.datty = c.take(BT * C);
  d.datt = c.take(size_t(s.B) * s.NH * s.T * s.T);
  d.dfc = c.take(BT * 4 * C);
  d.dfc_gelu = c.take(BT * 4 * C);
}

void transformer_block_forward(BlockActs& a, const float* x, const BlockWeights& w,
                               const BlockShape& s, const BlockDropout& drop) {
  const int B = s.B, T = s.T, C = s.C, N = B * T;
  cpu::layernorm_forward(a.ln_1, a.ln_1_mean, a.ln_1_rstd, x, w.ln_1_w, w.ln_1_b, N, C);
  cpu::linear_forward(a.qkv, a.ln_1, w.c_attn_w, w.c_attn_b, N, C, 3 * C);
  cpu::attention_forward(a.atty, a.att, a.qkv, B, T, C, s.NH, s.causal, s.lengths);
  cpu::linear_forward(a.attn_out, a.atty, w.attn_proj_w, w.attn_proj_b, N, C, C);
  cpu::dropout_forward(a.attn_out, a.attn_out, drop.p, drop.attn, drop.row0, N, C);
  cpu::residual_forward(a.res_attn, x, a.attn_out, size_t(N) * C);
  cpu::layernorm_forward(a.ln_2, a.ln_2_mean, a.ln_2_rstd, a.res_attn, w.ln_2_w, w.ln_2_b, N, C);
  cpu::linear_forward(a.fc, a.ln_2, w.c_fc_w, w.c_fc_b, N, C, 4 * C);
  cpu::gelu_forward(a.fc_gelu, a.fc, size_t(N) * 4 * C);
  cpu::linear_forward(a.mlp_out, a.fc_gelu, w.mlp_proj_w, w.mlp_proj_b, N, 4 * C, C);
  cpu::dropout_forward(a.mlp_out, a.mlp_out, drop.p, drop.mlp, drop.row0, N, C);
  cpu::residual_forward(a.res_mlp, a.res_attn, a.mlp_out, size_t(N) * C);
}

void transformer_block_backward(float* dresidual, const BlockWeights& dw, const BlockScratch& d,
                                const BlockActs& a, const float* x, const BlockWeights& w,
                                const BlockShape& s, const BlockDropout& drop) {
  const int B = s.B, T = s.T, C = s.C, N = B * T;
  // Each branch adds its input gradient to dresidual (the residual stream's += rule).
  cpu::dropout_backward(d.dbranch, dresidual, drop.p, drop.mlp, drop.row0, N, C);
  cpu::linear_backward(d.dfc_gelu, dw.mlp_proj_w, dw.mlp_proj_b, d.dbranch, a.fc_gelu, w.mlp_proj_w,
                       N, 4 * C, C);
  cpu::gelu_backward(d.dfc, d.dfc_gelu, a.fc, size_t(N) * 4 * C);
  cpu::linear_backward(d.dln, dw.c_fc_w, dw.c_fc_b, d.dfc, a.ln_2, w.c_fc_w, N, C, 4 * C);
  cpu::layernorm_backward(dresidual, dw.ln_2_w, dw.ln_2_b, d.dln, a.res_attn, w.ln_2_w, a.ln_2_mean,
                          a.ln_2_rstd, N, C);
  cpu::dropout_backward(d.dbranch, dresidual, drop.p, drop.attn, drop.row0, N, C);
  cpu::linear_backward(d.datty, dw.attn_proj_w, dw.attn_proj_b, d.dbranch, a.atty, w.attn_proj_w, N,
                       C, C);
  cpu::attention_backward(d.dqkv, d.datt, d.datty, a.qkv, a.att, B, T, C, s.NH, s.causal,
                          s.lengths);
  cpu::linear_backward(d.dln, dw.c_attn_w, dw.c_attn_b, d.dqkv, a.ln_1, w.c_attn_w, N, C, 3 * C);
  cpu::layernorm_backward(dresidual, dw.ln_1_w, dw.ln_1_b, d.dln, x, w.ln_1_w, a.ln_1_mean,
                          a.ln_1_rstd, N, C);
}

}  // namespace mpitron
