// The GPT's KV-cache decoder (src/model/gpt_decoder.hpp): the block of transformer_block.hpp on
// the new tokens' rows, keys and values written to the cache before the cached attention reads it.
#include "src/model/gpt_decoder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "base/check.hpp"
#include "layers/attention.hpp"
#include "src/model/layer_ops.hpp"

namespace mpitron {

GptDecoder::GptDecoder(const GptModel& model, int rows, int length)
    : m_(model),
      B_(rows),
      Tc_(length > 0 ? length : model.cfg.block_size),
      C_(model.cfg.n_embd),
      NH_(model.cfg.n_head),
      V_(model.cfg.vocab_size),
      L_(model.cfg.n_layer) {
  MPITRON_REQUIRE(rows >= 1, "a decoder needs rows");
  MPITRON_REQUIRE(model.layers_on_host(),
                  "the KV-cache decoder reads the model's weights on the CPU");
  MPITRON_REQUIRE(Tc_ <= model.cfg.block_size, "a cache longer than the position embedding");
  MPITRON_REQUIRE(model.Vl == V_ && model.v0 == 0 && int(model.w.h.size()) == L_ && model.w.wte,
                  "the KV-cache decoder runs a whole model (tp 1, pp 1)");
  pos_.assign(size_t(B_), 0);
  keys_.assign(size_t(L_) * B_ * Tc_ * C_, 0.0f);
  values_.assign(keys_.size(), 0.0f);
  last_.resize(size_t(B_) * C_);
}

void GptDecoder::reset() {
  std::fill(pos_.begin(), pos_.end(), 0);
}

void GptDecoder::reorder(const std::vector<int32_t>& from) {
  MPITRON_REQUIRE(int(from.size()) == B_, "reorder names a source for every row");
  const size_t row = size_t(Tc_) * C_;
  // Into the second pair of buffers (kept between calls: no allocation per step), then swapped;
  // only each source row's filled positions are copied.
  if (spare_keys_.size() != keys_.size()) {
    spare_keys_.resize(keys_.size());
    spare_values_.resize(values_.size());
  }
  std::vector<int32_t> pos(pos_.size());
  for (int r = 0; r < B_; ++r) {
    const int32_t f = from[size_t(r)];
    MPITRON_REQUIRE(f >= 0 && f < B_, "reorder source outside the rows");
    pos[size_t(r)] = pos_[size_t(f)];
  }
  for (int l = 0; l < L_; ++l)
    for (int r = 0; r < B_; ++r) {
      const int32_t f = from[size_t(r)];
      const size_t src = (size_t(l) * B_ + size_t(f)) * row,
                   dst = (size_t(l) * B_ + size_t(r)) * row;
      const size_t used = size_t(pos_[size_t(f)]) * C_;
      std::memcpy(spare_keys_.data() + dst, keys_.data() + src, used * sizeof(float));
      std::memcpy(spare_values_.data() + dst, values_.data() + src, used * sizeof(float));
    }
  keys_.swap(spare_keys_);
  values_.swap(spare_values_);
  pos_.swap(pos);
}

void GptDecoder::feed(const int32_t* tokens, int n, const int32_t* take, float* logits) {
  const int B = B_, C = C_, N = B * n;
  // Where each row's new tokens go: a done row's into any room left (its cache no longer matters).
  std::vector<int32_t> at(pos_);
  for (int b = 0; b < B; ++b) {
    if (take[b] < 0) {
      at[size_t(b)] = std::max(0, std::min(at[size_t(b)], Tc_ - n));
      continue;
    }
    if (pos_[size_t(b)] + n > Tc_)
      throw UsageError(fmt::format("decoding past the block size {} (row {} at position {})", Tc_,
                                   b, pos_[size_t(b)]));
    MPITRON_REQUIRE(take[b] < n, "take outside the fed tokens");
  }
  MPITRON_REQUIRE(n <= Tc_, "more tokens than the block size");
  const LayerOps& L = cpu_layer_ops();
  const GptWeights& w = m_.w;
  auto grow = [](std::vector<float>& v, size_t n) {
    if (v.size() < n) v.resize(n);
  };
  grow(x_, size_t(N) * C), grow(ln_, size_t(N) * C), grow(mean_, size_t(N)), grow(rstd_, size_t(N));
  grow(qkv_, size_t(N) * 3 * C), grow(atty_, size_t(N) * C), grow(branch_, size_t(N) * C);
  grow(res_, size_t(N) * C), grow(fc_, size_t(N) * 4 * C), grow(fc_gelu_, size_t(N) * 4 * C);
  // x = wte[token] + wpe[position]
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < n; ++i) {
      const int32_t t = tokens[b * n + i];
      MPITRON_REQUIRE(t >= 0 && t < V_, "token outside the vocabulary");
      const float* e = w.wte + size_t(t) * C;
      const float* p = w.wpe + size_t(at[size_t(b)] + i) * C;
      float* out = x_.data() + (size_t(b) * n + size_t(i)) * C;
      for (int c = 0; c < C; ++c) out[c] = e[c] + p[c];
    }
  for (int l = 0; l < L_; ++l) {
    const BlockWeights& bw = w.h[size_t(l)];
    L.layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), x_.data(), bw.ln_1_w, bw.ln_1_b, N,
                        C, 1e-5);
    L.linear_forward(qkv_.data(), ln_.data(), bw.c_attn_w, bw.c_attn_b, N, C, 3 * C);
    float* kc = keys_.data() + size_t(l) * B * Tc_ * C;
    float* vc = values_.data() + size_t(l) * B * Tc_ * C;
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < n; ++i) {
        const float* q = qkv_.data() + (size_t(b) * n + size_t(i)) * 3 * C;
        const size_t to = (size_t(b) * Tc_ + size_t(at[size_t(b)] + i)) * C;
        std::memcpy(kc + to, q + C, size_t(C) * sizeof(float));
        std::memcpy(vc + to, q + 2 * C, size_t(C) * sizeof(float));
      }
    cpu::attention_cached_forward(atty_.data(), qkv_.data(), kc, vc, at.data(), B, n, Tc_, C, NH_);
    L.linear_forward(branch_.data(), atty_.data(), bw.attn_proj_w, bw.attn_proj_b, N, C, C);
    L.residual_forward(res_.data(), x_.data(), branch_.data(), size_t(N) * C);
    L.layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), res_.data(), bw.ln_2_w, bw.ln_2_b,
                        N, C, 1e-5);
    L.linear_gelu_forward(fc_.data(), fc_gelu_.data(), ln_.data(), bw.c_fc_w, bw.c_fc_b, N, C,
                          4 * C);
    L.linear_forward(branch_.data(), fc_gelu_.data(), bw.mlp_proj_w, bw.mlp_proj_b, N, 4 * C, C);
    L.residual_forward(x_.data(), res_.data(), branch_.data(), size_t(N) * C);
  }
  // The head on the taken rows only: ln_f, then logits = ln_f wte^T.
  for (int b = 0; b < B; ++b)
    std::memcpy(last_.data() + size_t(b) * C,
                x_.data() + (size_t(b) * n + size_t(std::max(take[b], 0))) * C,
                size_t(C) * sizeof(float));
  L.layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), last_.data(), w.ln_f_w, w.ln_f_b, B,
                      C, 1e-5);
  L.linear_forward(logits, ln_.data(), w.wte, nullptr, B, C, V_);
  for (int b = 0; b < B; ++b)
    if (take[b] >= 0) pos_[size_t(b)] += take[b] + 1;
}

}  // namespace mpitron
