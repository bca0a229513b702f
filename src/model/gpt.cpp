#include "src/model/gpt.hpp"

#include <cmath>
#include <cstring>
#include <string>

#include "layers/attention.hpp"
#include "layers/crossentropy.hpp"
#include "layers/dropout.hpp"
#include "layers/encoder.hpp"
#include "layers/gelu.hpp"
#include "layers/layernorm.hpp"
#include "layers/linear.hpp"
#include "layers/residual.hpp"
#include "src/check.hpp"
#include "src/philox.hpp"

namespace mpitron {

ParamRegistry gpt_registry(const GptConfig& cfg) {
  const int64_t C = cfg.n_embd, V = cfg.vocab_size;
  const float std = 0.02f;
  // GPT-2 scales the residual projections by 1/sqrt(2 * n_layer).
  const float proj_std = std / std::sqrt(2.0f * float(cfg.n_layer));
  ParamRegistry r;
  r.add("wte.weight", {V, C}, InitKind::normal, std, false);
  r.add("wpe.weight", {cfg.block_size, C}, InitKind::normal, std, false);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    r.add(p + "ln_1.weight", {C}, InitKind::ones, 0, false);
    r.add(p + "ln_1.bias", {C}, InitKind::zeros, 0, false);
    r.add(p + "attn.c_attn.weight", {3 * C, C}, InitKind::normal, std, true, {0, -1});
    r.add(p + "attn.c_attn.bias", {3 * C}, InitKind::zeros, 0, false, {0, -1});
    r.add(p + "attn.c_proj.weight", {C, C}, InitKind::normal, proj_std, true, {1, -1});
    r.add(p + "attn.c_proj.bias", {C}, InitKind::zeros, 0, false);
    r.add(p + "ln_2.weight", {C}, InitKind::ones, 0, false);
    r.add(p + "ln_2.bias", {C}, InitKind::zeros, 0, false);
    r.add(p + "mlp.c_fc.weight", {4 * C, C}, InitKind::normal, std, true, {0, -1});
    r.add(p + "mlp.c_fc.bias", {4 * C}, InitKind::zeros, 0, false, {0, -1});
    r.add(p + "mlp.c_proj.weight", {C, 4 * C}, InitKind::normal, proj_std, true, {1, -1});
    r.add(p + "mlp.c_proj.bias", {C}, InitKind::zeros, 0, false);
  }
  r.add("ln_f.weight", {C}, InitKind::ones, 0, false);
  r.add("ln_f.bias", {C}, InitKind::zeros, 0, false);
  return r;
}

template <class At>
GptWeights gpt_weights(const ParamRegistry& reg, const GptConfig& cfg, At address) {
  auto at = [&](const std::string& name) { return address(reg.at(name).offset); };
  GptWeights w;
  w.wte = at("wte.weight");
  w.wpe = at("wpe.weight");
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    w.h.push_back({at(p + "ln_1.weight"), at(p + "ln_1.bias"), at(p + "attn.c_attn.weight"),
                   at(p + "attn.c_attn.bias"), at(p + "attn.c_proj.weight"),
                   at(p + "attn.c_proj.bias"), at(p + "ln_2.weight"), at(p + "ln_2.bias"),
                   at(p + "mlp.c_fc.weight"), at(p + "mlp.c_fc.bias"), at(p + "mlp.c_proj.weight"),
                   at(p + "mlp.c_proj.bias")});
  }
  w.ln_f_w = at("ln_f.weight");
  w.ln_f_b = at("ln_f.bias");
  return w;
}

namespace {

// Address of a parameter's gradient in the windowed layout: head | one block | tail.
float* windowed_grad(GptModel& m, size_t offset) {
  const size_t head = m.block_offsets.empty() ? m.ln_f_offset : m.block_offsets[0];
  float* g = m.grads.data();
  if (offset < head) return g + offset;
  if (offset >= m.ln_f_offset) return g + head + m.block_span + (offset - m.ln_f_offset);
  return g + head + (offset - head) % m.block_span;
}

// Hands out consecutive 16-float aligned slices of one buffer; with base == nullptr only counts.
struct Carver {
  float* base;
  size_t used = 0;
  float* take(size_t n) {
    float* p = base ? base + used : nullptr;
    used += (n + 15) / 16 * 16;
    return p;
  }
};

void carve_activations(GptModel& m, Carver& a, Carver& d) {
  const size_t B = m.B, T = m.T, C = m.cfg.n_embd, NH = m.cfg.n_head, V = m.cfg.vocab_size;
  const size_t BT = B * T;
  m.encoded = a.take(BT * C);
  m.blocks.resize(m.cfg.n_layer);
  for (auto& b : m.blocks) {
    b.ln_1 = a.take(BT * C);
    b.ln_1_mean = a.take(BT);
    b.ln_1_rstd = a.take(BT);
    b.qkv = a.take(BT * 3 * C);
    b.att = a.take(B * NH * T * T);
    b.atty = a.take(BT * C);
    b.attn_out = a.take(BT * C);
    b.res_attn = a.take(BT * C);
    b.ln_2 = a.take(BT * C);
    b.ln_2_mean = a.take(BT);
    b.ln_2_rstd = a.take(BT);
    b.fc = a.take(BT * 4 * C);
    b.fc_gelu = a.take(BT * 4 * C);
    b.mlp_out = a.take(BT * C);
    b.res_mlp = a.take(BT * C);
  }
  m.ln_f = a.take(BT * C);
  m.ln_f_mean = a.take(BT);
  m.ln_f_rstd = a.take(BT);
  m.logits = a.take(BT * V);
  m.lse = a.take(BT);
  m.losses = a.take(BT);
  m.dresidual = d.take(BT * C);
  m.dbranch = d.take(BT * C);
  m.dln = d.take(BT * C);
  m.dqkv = d.take(BT * 3 * C);
  m.datty = d.take(BT * C);
  m.datt = d.take(B * NH * T * T);
  m.dfc = d.take(BT * 4 * C);
  m.dfc_gelu = d.take(BT * 4 * C);
  m.dln_f = m.dln;
}

// Dropout sites: 0 after the embedding, 1 + 2l after block l's attention, 2 + 2l after its MLP.
PhiloxStream dropout_stream(const DropoutContext& drop, int site) {
  return PhiloxStream{drop.seed, mix64(mix64(uint64_t(drop.step), uint64_t(site)), 0xD50Full)};
}

}  // namespace

void gpt_build(GptModel& m, const GptConfig& cfg, int B, int T, uint64_t seed,
               DeviceAllocator& alloc, int shards, bool grad_window) {
  m.cfg = cfg;
  m.B = B;
  m.T = T;
  m.registry = gpt_registry(cfg);
  const size_t unit = 16 * size_t(shards);
  m.flat_size = (m.registry.size() + unit - 1) / unit * unit;
  m.params = Buffer<float>(alloc, m.flat_size);
  m.registry.initialize(m.params.data(), seed);
  m.block_offsets.clear();
  for (int l = 0; l < cfg.n_layer; ++l)
    m.block_offsets.push_back(m.registry.at("h." + std::to_string(l) + ".ln_1.weight").offset);
  m.ln_f_offset = m.registry.at("ln_f.weight").offset;
  m.grad_window = grad_window && cfg.n_layer > 0;
  m.block_span = cfg.n_layer > 0 ? (m.ln_f_offset - m.block_offsets[0]) / size_t(cfg.n_layer) : 0;
  float* p = m.params.data();
  m.w = gpt_weights(m.registry, cfg, [p](size_t offset) { return p + offset; });
  if (m.grad_window) {
    m.grads =
        Buffer<float>(alloc, m.block_offsets[0] + m.block_span + (m.flat_size - m.ln_f_offset));
    m.dw = gpt_weights(m.registry, cfg, [&m](size_t offset) { return windowed_grad(m, offset); });
  } else {
    m.grads = Buffer<float>(alloc, m.flat_size);
    float* g = m.grads.data();
    m.dw = gpt_weights(m.registry, cfg, [g](size_t offset) { return g + offset; });
  }
  Carver count_a{nullptr}, count_d{nullptr};
  carve_activations(m, count_a, count_d);
  m.acts = Buffer<float>(alloc, count_a.used);
  m.dacts = Buffer<float>(alloc, count_d.used);
  Carver a{m.acts.data()}, d{m.dacts.data()};
  carve_activations(m, a, d);
  m.inputs = Buffer<int32_t>(alloc, size_t(B) * T);
  m.targets = Buffer<int32_t>(alloc, size_t(B) * T);
}

double gpt_forward(GptModel& m, const int32_t* tokens, int rows, const DropoutContext& drop) {
  const int B = rows, T = m.T, C = m.cfg.n_embd, NH = m.cfg.n_head, V = m.cfg.vocab_size;
  const int N = B * T;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      m.inputs[size_t(b) * T + t] = tokens[size_t(b) * (T + 1) + t];
      m.targets[size_t(b) * T + t] = tokens[size_t(b) * (T + 1) + t + 1];
    }
  cpu::encoder_forward(m.encoded, m.inputs.data(), m.w.wte, m.w.wpe, B, T, C);
  cpu::dropout_forward(m.encoded, m.encoded, drop.p, dropout_stream(drop, 0), drop.row0, N, C);
  const float* x = m.encoded;
  for (int l = 0; l < m.cfg.n_layer; ++l) {
    const GptBlockWeights& w = m.w.h[l];
    GptBlockActs& a = m.blocks[l];
    cpu::layernorm_forward(a.ln_1, a.ln_1_mean, a.ln_1_rstd, x, w.ln_1_w, w.ln_1_b, N, C);
    cpu::linear_forward(a.qkv, a.ln_1, w.c_attn_w, w.c_attn_b, N, C, 3 * C);
    cpu::attention_forward(a.atty, a.att, a.qkv, B, T, C, NH, true);
    cpu::linear_forward(a.attn_out, a.atty, w.attn_proj_w, w.attn_proj_b, N, C, C);
    cpu::dropout_forward(a.attn_out, a.attn_out, drop.p, dropout_stream(drop, 1 + 2 * l), drop.row0,
                         N, C);
    cpu::residual_forward(a.res_attn, x, a.attn_out, size_t(N) * C);
    cpu::layernorm_forward(a.ln_2, a.ln_2_mean, a.ln_2_rstd, a.res_attn, w.ln_2_w, w.ln_2_b, N, C);
    cpu::linear_forward(a.fc, a.ln_2, w.c_fc_w, w.c_fc_b, N, C, 4 * C);
    cpu::gelu_forward(a.fc_gelu, a.fc, size_t(N) * 4 * C);
    cpu::linear_forward(a.mlp_out, a.fc_gelu, w.mlp_proj_w, w.mlp_proj_b, N, 4 * C, C);
    cpu::dropout_forward(a.mlp_out, a.mlp_out, drop.p, dropout_stream(drop, 2 + 2 * l), drop.row0,
                         N, C);
    cpu::residual_forward(a.res_mlp, a.res_attn, a.mlp_out, size_t(N) * C);
    x = a.res_mlp;
  }
  cpu::layernorm_forward(m.ln_f, m.ln_f_mean, m.ln_f_rstd, x, m.w.ln_f_w, m.w.ln_f_b, N, C);
  cpu::linear_forward(m.logits, m.ln_f, m.w.wte, static_cast<const float*>(nullptr), N, C, V);
  cpu::crossentropy_forward(m.losses, m.lse, m.logits, m.targets.data(), N, V);
  double sum = 0.0;
  for (int i = 0; i < N; ++i) sum += m.losses[i];
  return sum;
}

GradSegment gpt_grad_segment(GptModel& m, size_t flat_begin) {
  float* g = m.grads.data();
  const size_t head = m.block_offsets.empty() ? m.ln_f_offset : m.block_offsets[0];
  if (flat_begin >= m.ln_f_offset) {
    return {m.ln_f_offset, m.flat_size,
            m.grad_window ? windowed_grad(m, m.ln_f_offset) : g + m.ln_f_offset};
  }
  if (flat_begin < head) return {0, head, g};
  const size_t begin = head + (flat_begin - head) / m.block_span * m.block_span;
  return {begin, begin + m.block_span, m.grad_window ? g + head : g + begin};
}

void gpt_backward(GptModel& m, int rows, float dloss, const DropoutContext& drop,
                  GradReadyHook ready) {
  MPITRON_REQUIRE(!m.grad_window || ready.fn,
                  "a model with a gradient window needs a hook that reduces each block");
  auto announce = [&](size_t flat_begin) {
    if (ready.fn) ready.fn(ready.ctx, flat_begin);
  };
  const int B = rows, T = m.T, C = m.cfg.n_embd, NH = m.cfg.n_head, V = m.cfg.vocab_size;
  const int N = B * T;
  const size_t NC = size_t(N) * C;
  cpu::crossentropy_backward(m.logits, m.logits, m.lse, m.targets.data(), dloss, N, V);
  const float* x_last = m.cfg.n_layer > 0 ? m.blocks.back().res_mlp : m.encoded;
  cpu::linear_backward(m.dln_f, m.dw.wte, static_cast<float*>(nullptr), m.logits, m.ln_f, m.w.wte,
                       N, C, V);
  std::memset(m.dresidual, 0, NC * sizeof(float));
  cpu::layernorm_backward(m.dresidual, m.dw.ln_f_w, m.dw.ln_f_b, m.dln_f, x_last, m.w.ln_f_w,
                          m.ln_f_mean, m.ln_f_rstd, N, C);
  announce(m.ln_f_offset);
  // dresidual holds dL/d(residual stream); each block adds its branches' input gradients to it.
  for (int l = m.cfg.n_layer - 1; l >= 0; --l) {
    const GptBlockWeights& w = m.w.h[l];
    const GptBlockWeights& dw = m.dw.h[l];
    const GptBlockActs& a = m.blocks[l];
    const float* x = l == 0 ? m.encoded : m.blocks[l - 1].res_mlp;
    cpu::dropout_backward(m.dbranch, m.dresidual, drop.p, dropout_stream(drop, 2 + 2 * l),
                          drop.row0, N, C);
    cpu::linear_backward(m.dfc_gelu, dw.mlp_proj_w, dw.mlp_proj_b, m.dbranch, a.fc_gelu,
                         w.mlp_proj_w, N, 4 * C, C);
    cpu::gelu_backward(m.dfc, m.dfc_gelu, a.fc, size_t(N) * 4 * C);
    cpu::linear_backward(m.dln, dw.c_fc_w, dw.c_fc_b, m.dfc, a.ln_2, w.c_fc_w, N, C, 4 * C);
    cpu::layernorm_backward(m.dresidual, dw.ln_2_w, dw.ln_2_b, m.dln, a.res_attn, w.ln_2_w,
                            a.ln_2_mean, a.ln_2_rstd, N, C);
    cpu::dropout_backward(m.dbranch, m.dresidual, drop.p, dropout_stream(drop, 1 + 2 * l),
                          drop.row0, N, C);
    cpu::linear_backward(m.datty, dw.attn_proj_w, dw.attn_proj_b, m.dbranch, a.atty, w.attn_proj_w,
                         N, C, C);
    cpu::attention_backward(m.dqkv, m.datt, m.datty, a.qkv, a.att, B, T, C, NH, true);
    cpu::linear_backward(m.dln, dw.c_attn_w, dw.c_attn_b, m.dqkv, a.ln_1, w.c_attn_w, N, C, 3 * C);
    cpu::layernorm_backward(m.dresidual, dw.ln_1_w, dw.ln_1_b, m.dln, x, w.ln_1_w, a.ln_1_mean,
                            a.ln_1_rstd, N, C);
    announce(m.block_offsets[l]);
  }
  cpu::dropout_backward(m.dbranch, m.dresidual, drop.p, dropout_stream(drop, 0), drop.row0, N, C);
  cpu::encoder_backward(m.dw.wte, m.dw.wpe, m.dbranch, m.inputs.data(), B, T, C);
  announce(0);
}

}  // namespace mpitron
