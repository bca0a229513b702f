#include "src/model/gpt.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "base/check.hpp"
#include "layers/crossentropy.hpp"
#include "layers/dropout.hpp"
#include "layers/embedding.hpp"
#include "layers/layernorm.hpp"
#include "layers/linear.hpp"
#include "src/cpu/step_ops.hpp"
#include "src/model/tensor_parallel.hpp"

namespace mpitron {

GptConfig gpt_config(const ModelConfig& m) {
  return {int(m.get("n_layer")), int(m.get("n_head")), int(m.get("n_embd")),
          int(m.get("block_size")), int(m.get("vocab_size"))};
}

ModelConfig to_model_config(const GptConfig& g) {
  return {"gpt",
          {{"n_layer", g.n_layer},
           {"n_head", g.n_head},
           {"n_embd", g.n_embd},
           {"block_size", g.block_size},
           {"vocab_size", g.vocab_size}}};
}

int64_t gpt_parameter_count(const GptConfig& m) {
  int64_t C = m.n_embd;
  int64_t per_block =
      2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C);
  return int64_t(m.vocab_size) * C + int64_t(m.block_size) * C + m.n_layer * per_block + 2 * C;
}

void validate_gpt_layout(const ModelConfig& m, int tp) {
  const GptConfig g = gpt_config(m);
  tp::require_tp_splits(tp, {{"n_head", g.n_head, "heads split evenly over TP"},
                             {"n_embd", g.n_embd, "the MLP splits evenly over TP"}});
}

ParamRegistry gpt_registry(const GptConfig& cfg, RegistrySlice slice, int vocab_align) {
  const int64_t C = cfg.n_embd, V = cfg.vocab_size;
  const float std = 0.02f;
  // GPT-2 scales the residual projections by 1/sqrt(2 * n_layer).
  const float proj_std = std / std::sqrt(2.0f * float(cfg.n_layer));
  ParamRegistry r(slice);
  // Vocabulary rows split over TP, padded when tp does not divide V and to a multiple of
  // vocab_align (the tied LM head shares it: aligned products on the device).
  r.add("wte.weight", {V, C}, InitKind::normal, std, false,
        {0, 1, StageOwner::first_and_last, -1, true, vocab_align});
  r.add("wpe.weight", {cfg.block_size, C}, InitKind::normal, std, false,
        {-1, 1, StageOwner::first});
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    const ShardSpec replicated{-1, 1, StageOwner::block, l};
    const ShardSpec qkv_rows{0, 3, StageOwner::block, l};  // q | k | v, each split by head
    const ShardSpec rows{0, 1, StageOwner::block, l};      // column-parallel: output features
    const ShardSpec cols{1, 1, StageOwner::block, l};      // row-parallel: input features
    r.add(p + "ln_1.weight", {C}, InitKind::ones, 0, false, replicated);
    r.add(p + "ln_1.bias", {C}, InitKind::zeros, 0, false, replicated);
    r.add(p + "attn.c_attn.weight", {3 * C, C}, InitKind::normal, std, true, qkv_rows);
    r.add(p + "attn.c_attn.bias", {3 * C}, InitKind::zeros, 0, false, qkv_rows);
    r.add(p + "attn.c_proj.weight", {C, C}, InitKind::normal, proj_std, true, cols);
    r.add(p + "attn.c_proj.bias", {C}, InitKind::zeros, 0, false, replicated);
    r.add(p + "ln_2.weight", {C}, InitKind::ones, 0, false, replicated);
    r.add(p + "ln_2.bias", {C}, InitKind::zeros, 0, false, replicated);
    r.add(p + "mlp.c_fc.weight", {4 * C, C}, InitKind::normal, std, true, rows);
    r.add(p + "mlp.c_fc.bias", {4 * C}, InitKind::zeros, 0, false, rows);
    r.add(p + "mlp.c_proj.weight", {C, 4 * C}, InitKind::normal, proj_std, true, cols);
    r.add(p + "mlp.c_proj.bias", {C}, InitKind::zeros, 0, false, replicated);
  }
  r.add("ln_f.weight", {C}, InitKind::ones, 0, false, {-1, 1, StageOwner::last});
  r.add("ln_f.bias", {C}, InitKind::zeros, 0, false, {-1, 1, StageOwner::last});
  return r;
}

namespace {

// address(flat offset) -> W*: where each parameter lives in a flat buffer of W.
template <class W, class At>
GptWeightsT<W> gpt_weights(const ParamRegistry& reg, const GptConfig& cfg, At address) {
  auto at = [&](const std::string& name) -> W* {
    const ParamInfo* p = reg.find(name);
    return p ? address(p->offset) : nullptr;
  };
  GptWeightsT<W> w;
  w.wte = at("wte.weight");
  w.wpe = at("wpe.weight");
  w.h.resize(cfg.n_layer);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    if (!reg.find(p + "ln_1.weight")) continue;
    w.h[l] = {
        at(p + "ln_1.weight"),      at(p + "ln_1.bias"),          at(p + "attn.c_attn.weight"),
        at(p + "attn.c_attn.bias"), at(p + "attn.c_proj.weight"), at(p + "attn.c_proj.bias"),
        at(p + "ln_2.weight"),      at(p + "ln_2.bias"),          at(p + "mlp.c_fc.weight"),
        at(p + "mlp.c_fc.bias"),    at(p + "mlp.c_proj.weight"),  at(p + "mlp.c_proj.bias")};
  }
  w.ln_f_w = at("ln_f.weight");
  w.ln_f_b = at("ln_f.bias");
  return w;
}

// Dropout sites: 0 after the embedding, 1 + 2l after block l's attention, 2 + 2l after its MLP.
PhiloxStream dropout_stream(const MicroBatch& mb, int site) {
  return PhiloxStream{mb.seed, mix64(mix64(uint64_t(mb.step), uint64_t(site)), 0xD50Full)};
}

BlockDropout block_dropout(const MicroBatch& mb, int layer, uint64_t row0) {
  return {mb.dropout, dropout_stream(mb, 1 + 2 * layer), dropout_stream(mb, 2 + 2 * layer), row0};
}

}  // namespace

// The chunks a stage holds (blocks, first, last), their activation sets not yet carved.
template <class A>
std::vector<GptChunkT<A>> gpt_chunks(const GptConfig& cfg, const RegistrySlice& slice) {
  std::vector<GptChunkT<A>> chunks;
  for (size_t k = 0; k < slice.chunks.size(); ++k) {
    GptChunkT<A> ch;
    ch.blocks = {slice.chunks[k].begin, std::min(slice.chunks[k].end, cfg.n_layer)};
    MPITRON_REQUIRE(ch.blocks.begin >= 0 && ch.blocks.size() >= 1, "a chunk without blocks");
    MPITRON_REQUIRE(k == 0 || ch.blocks.begin >= chunks.back().blocks.end,
                    "chunks out of network order");
    ch.first = slice.stage == 0 && k == 0;
    ch.last = slice.stage == slice.stages - 1 && k + 1 == slice.chunks.size();
    chunks.push_back(std::move(ch));
  }
  return chunks;
}

struct GptSegments {
  std::vector<GradSegment> segments;
  size_t embedding = SIZE_MAX, head = SIZE_MAX;
  std::vector<size_t> of_block;  // index into segments of global block l
};

// Gradient segments in flat order: the embeddings, each block, ln_f (those this stage holds).
GptSegments gpt_segments(const ParamRegistry& registry, int n_layer, size_t flat_size) {
  GptSegments out;
  auto begin_of = [&](int l) {
    return registry.at("h." + std::to_string(l) + ".ln_1.weight").offset;
  };
  auto held = [&](int l) { return registry.find("h." + std::to_string(l) + ".ln_1.weight"); };
  int first_block = 0;
  while (first_block < n_layer && !held(first_block)) ++first_block;
  const size_t first_block_at = begin_of(first_block);
  if (first_block_at > 0) {
    out.embedding = out.segments.size();
    out.segments.push_back({0, first_block_at, false});
  }
  out.of_block.assign(n_layer, SIZE_MAX);
  const ParamInfo* ln_f = registry.find("ln_f.weight");
  const size_t blocks_end = ln_f ? ln_f->offset : flat_size;
  for (int l = first_block; l < n_layer; ++l) {
    if (!held(l)) continue;
    const bool next_held = l + 1 < n_layer && held(l + 1);
    out.of_block[l] = out.segments.size();
    out.segments.push_back({begin_of(l), next_held ? begin_of(l + 1) : blocks_end, true});
  }
  if (ln_f) {
    out.head = out.segments.size();
    out.segments.push_back({ln_f->offset, flat_size, false});
  } else {
    out.segments.back().end = flat_size;  // the flat padding joins the last block
  }
  return out;
}

// Every slot's activations; the head's (ln_f, logits, losses) only in the last chunk.
// head_rows > 0: one (head_rows, V) logits buffer every slot shares (the chunked LM head).
template <class A>
void carve_gpt_activations(ActivationCarver& a, std::vector<GptChunkT<A>>& chunks,
                           BlockActsT<A>& recompute_acts, bool recompute,
                           const BlockShapeT<A>& shape, size_t V, size_t head_rows) {
  const size_t BT = size_t(shape.B) * shape.T, C = size_t(shape.C);
  if (recompute) block_acts_carve(recompute_acts, a, shape);
  const bool any_last = std::any_of(chunks.begin(), chunks.end(), [](auto& ch) { return ch.last; });
  A* shared_logits = head_rows > 0 && any_last ? a.take_as<A>(head_rows * V) : nullptr;
  for (GptChunkT<A>& ch : chunks)
    for (GptActsT<A>& s : ch.slots) {
      s.encoded = a.take_as<A>(BT * C);
      s.blocks.resize(ch.blocks.size());
      for (BlockActsT<A>& b : s.blocks) {
        if (recompute)
          b.res_mlp = a.take_as<A>(BT * C);
        else
          block_acts_carve(b, a, shape);
      }
      if (!ch.last) continue;
      s.ln_f = a.take_as<A>(BT * C);
      s.ln_f_mean = a.take(BT);
      s.ln_f_rstd = a.take(BT);
      s.logits = head_rows > 0 ? shared_logits : a.take_as<A>(BT * V);
      s.lse = a.take(BT);
      s.losses = a.take(BT);
    }
}

// Backward's scratch, shared by every slot and block.
template <class A>
void carve_gpt_scratch(ActivationCarver& d, A*& dresidual, float*& ce_scratch,
                       BlockScratchT<A>& scratch, float*& tp_fixed, size_t& tp_fixed_floats,
                       bool any_last, const BlockShapeT<A>& shape, int Vl) {
  const size_t BT = size_t(shape.B) * shape.T, C = size_t(shape.C);
  dresidual = d.take_as<A>(BT * C);
  ce_scratch = any_last ? d.take(3 * BT) : nullptr;
  block_scratch_carve(scratch, d, shape);
  // --bitwise: the blocks' split linears, and the LM head's and its cross-entropy's
  const int shards = shape.tp_fixed_shards(), tp = shape.tp_size();
  tp_fixed_floats = block_tp_fixed_floats(shape, true);
  if (any_last)
    tp_fixed_floats =
        std::max({tp_fixed_floats,
                  tp::column_parallel_fixed_floats(shards, tp, int(BT), shape.C, Vl, 1, false),
                  tp::crossentropy_fixed_floats(shards, tp, int(BT), Vl)});
  tp_fixed = tp_fixed_floats > 0 ? d.take(tp_fixed_floats) : nullptr;
}

template <class A>
GptModelT<A>::GptModelT(const GptConfig& c, const ModelBuild& how)
    : cfg(c), B(how.micro_rows), self_(comm::Group::solo()) {
  MPITRON_REQUIRE(how.precision == dtype_of<A>(), "a GPT built for another precision");
  tp_.group = how.tp ? how.tp : &self_;
  tp_.device = how.tp_device;
  tp_.shards = how.tp_shards;
  tp::require_tp_shards(how.tp_shards, c.n_embd);
  MPITRON_REQUIRE(tp_.size() == how.slice.tp && tp_.rank() == how.slice.tp_rank,
                  "the TP group does not match the registry slice");
  validate_gpt_layout(to_model_config(c), how.slice.tp);
  config = to_model_config(c);
  if constexpr (std::is_same_v<A, float>)
    layers_ = how.layers ? how.layers : &cpu_layer_ops();
  else
    layers_ = &layer_ops<A>(how.layers ? how.layers->device : Device::cpu);
  require_attention_head_size(*layers_, c.n_embd, c.n_head);
  const int vocab_align =
      tp::vocab_align_for(cfg.vocab_size, how.tp_shards, layers_->lm_head_align);
  Vl = int(padded_rows(cfg.vocab_size, how.slice.tp, vocab_align));
  v0 = how.slice.tp_rank * Vl;
  T = how.seq_len > 0 ? how.seq_len : c.block_size;
  DeviceAllocator& alloc = *how.alloc;
  const RegistrySlice& slice = how.slice;
  chunks = gpt_chunks<A>(cfg, slice);
  holds_first_ = chunks.front().first;
  registry = gpt_registry(cfg, slice, vocab_align);
  allocate_tensors(how);
  if constexpr (std::is_same_v<A, float>) {
    float* p = params.data();
    w = gpt_weights<float>(registry, cfg, [p](size_t offset) { return p + offset; });
  } else {
    weights = Buffer<A>(alloc, flat_size);
    A* p = weights.data();
    w = gpt_weights<A>(registry, cfg, [p](size_t offset) { return p + offset; });
  }

  const GptSegments seg = gpt_segments(registry, cfg.n_layer, flat_size);
  segments = seg.segments;
  embedding_segment_ = seg.embedding;
  head_segment_ = seg.head;
  segment_of_block = seg.of_block;

  parameters_changed();
  const BlockShapeT<A> shape{B, T, cfg.n_embd, cfg.n_head, true, nullptr, &tp_, 1e-5, layers_};
  const size_t BT = size_t(B) * T, V = size_t(Vl);
  const int slot_count = std::max(1, how.slots);
  bool any_last = false;
  for (GptChunkT<A>& ch : chunks) ch.slots.resize(slot_count), any_last |= ch.last;
  recompute = how.recompute;
  head_rows = how.head_chunk_rows > 0 && size_t(how.head_chunk_rows) < BT ? how.head_chunk_rows : 0;
  head_on_loss_rows = how.head_on_loss_rows && layers_->compact_rows;
  acts = plan_activations(alloc, [&](ActivationCarver& a) {
    carve_gpt_activations(a, chunks, recompute_acts, recompute, shape, V, size_t(head_rows));
  });
  dacts = plan_activations(alloc, [&](ActivationCarver& d) {
    carve_gpt_scratch(d, dresidual, ce_scratch, scratch, tp_.fixed, tp_.fixed_floats, any_last,
                      shape, Vl);
  });
  dln_f = scratch.dln;
  tokens = Buffer<int32_t>(alloc, chunks.size() * slot_count * 2 * BT);
  host_tokens_.resize(2 * BT);
  host_losses_.resize(BT);
  int32_t* t = tokens.data();
  for (GptChunkT<A>& ch : chunks)
    for (GptActsT<A>& s : ch.slots) {
      s.inputs = t;
      s.targets = t + BT;
      t += 2 * BT;
    }
}

template <class A>
BlockActsT<A> GptModelT<A>::block_acts(const GptActsT<A>& a, int k) const {
  if (!recompute) return a.blocks[k];
  BlockActsT<A> b = recompute_acts;
  b.res_mlp = a.blocks[k].res_mlp;
  return b;
}

template <class A>
void GptModelT<A>::bind_gradients(const std::function<float*(size_t)>& address) {
  dw = gpt_weights<float>(registry, cfg, address);
}

template <class A>
void GptModelT<A>::parameters_changed() {
  if constexpr (!std::is_same_v<A, float>) round_weight_copy(*layers_, weights.data());
}

template <class A>
int GptModelT<A>::row_positions(const MicroBatch& mb) const {
  const int Tm = mb.samples.seq_len > 0 ? mb.samples.seq_len : T;
  MPITRON_REQUIRE(Tm <= T, "a micro-batch's rows longer than the model was built for");
  return Tm;
}

template <class A>
double GptModelT<A>::forward(const MicroBatch& mb) {
  MPITRON_REQUIRE(mb.chunk >= 0 && mb.chunk < int(chunks.size()), "no such chunk on this stage");
  GptChunkT<A>& ch = chunks[mb.chunk];
  MPITRON_REQUIRE(
      mb.samples.tokens && mb.samples.rows <= B && mb.slot >= 0 && mb.slot < int(ch.slots.size()),
      "micro-batch larger than planned, or not tokens");
  GptActsT<A>& a = ch.slots[mb.slot];
  const int rows = mb.samples.rows, C = cfg.n_embd;
  const int Tm = row_positions(mb);
  const int N = rows * Tm;
  const LayerOpsT<A>& L = *layers_;
  const int32_t* tok = mb.samples.tokens;
  int32_t* inputs = host_tokens_.data();
  int32_t* targets = inputs + N;
  const int32_t* spans = mb.samples.loss_spans;
  for (int b = 0; b < rows; ++b)
    for (int t = 0; t < Tm; ++t) {
      const bool counts = !spans || (t >= spans[2 * b] && t < spans[2 * b + 1]);
      inputs[size_t(b) * Tm + t] = tok[size_t(b) * (Tm + 1) + t];
      targets[size_t(b) * Tm + t] = counts ? tok[size_t(b) * (Tm + 1) + t + 1] : -1;  // -1: no loss
    }
  L.upload_int32(a.inputs, inputs, size_t(N));
  // Rows outside the spans add no loss and no gradient: the head skips them (the translation's
  // source and padding, about three quarters of its rows).
  a.positions = Tm;
  a.compacted = ch.last && spans && head_on_loss_rows;
  int M = N;
  if (a.compacted) {
    a.loss_rows.reserve(size_t(B) * T);  // once: no allocation in later steps
    a.loss_rows.clear();
    for (int i = 0; i < N; ++i)
      if (targets[i] >= 0) {
        targets[a.loss_rows.size()] = targets[i];
        a.loss_rows.push_back(i);
      }
    M = int(a.loss_rows.size());
  }
  L.upload_int32(a.targets, targets, size_t(M));
  const uint64_t row0 = uint64_t(mb.first_sample) * uint64_t(Tm);
  tp::TpComm& tp = tp_;
  if (ch.first) {
    tp::vocab_parallel_embedding_forward(tp, a.encoded, a.inputs, w.wte, w.wpe, rows, Tm, C, v0, Vl,
                                         L);
    L.dropout_forward(a.encoded, a.encoded, mb.dropout, dropout_stream(mb, 0), row0, N, C);
  }
  const BlockShapeT<A> shape{rows, Tm, C, cfg.n_head, true, nullptr, &tp_, 1e-5, layers_};
  const A* x = a.encoded;
  for (int l = ch.blocks.begin; l < ch.blocks.end; ++l) {
    BlockActsT<A> acts_l = block_acts(a, l - ch.blocks.begin);
    transformer_block_forward(acts_l, x, w.h[l], shape, block_dropout(mb, l, row0));
    x = acts_l.res_mlp;
  }
  if (!ch.last) return 0.0;
  L.layernorm_forward(a.ln_f, a.ln_f_mean, a.ln_f_rstd, x, w.ln_f_w, w.ln_f_b, N, C, 1e-5);
  if (a.compacted) L.compact_rows(a.ln_f, a.loss_rows.data(), M, C);
  a.dlogits_ready = mb.training && fused_classifier() && head_rows == 0;
  a.dlogits_dloss = mb.dloss;
  const int rows_at_once = head_rows > 0 ? head_rows : M;
  for (int r0 = 0; r0 < M; r0 += rows_at_once) head_forward(a, r0, std::min(rows_at_once, M - r0));
  L.download(host_losses_.data(), a.losses, size_t(M));
  double sum = 0.0;
  for (int i = 0; i < M; ++i) sum += host_losses_[size_t(i)];
  return sum;
}

template <class A>
void GptModelT<A>::head_forward(GptActsT<A>& a, int r0, int n) {
  const LayerOpsT<A>& L = *layers_;
  const int C = cfg.n_embd, V = cfg.vocab_size;
  float* losses = a.losses + r0;
  float* lse = a.lse + r0;
  const int32_t* targets = a.targets + r0;
  tp::column_parallel_linear_forward(tp_, a.logits, a.ln_f + size_t(r0) * C, w.wte, nullptr, n, C,
                                     Vl, L);
  if (a.dlogits_ready)
    L.crossentropy_fused(losses, lse, a.logits, targets, a.dlogits_dloss, n, V, Vl);
  else if (device_padded())
    L.crossentropy_padded_forward(losses, lse, a.logits, targets, n, V, Vl);
  else
    tp::vocab_parallel_crossentropy_forward(tp_, losses, lse, ce_scratch, a.logits, targets, n, Vl,
                                            v0, V, L);
}

template <class A>
void GptModelT<A>::head_backward(GptActsT<A>& a, float dloss, int r0, int n) {
  const LayerOpsT<A>& L = *layers_;
  const int C = cfg.n_embd, V = cfg.vocab_size;
  const A* x = a.ln_f + size_t(r0) * C;
  const float* lse = a.lse + r0;
  const int32_t* targets = a.targets + r0;
  // The chunked head kept no logits: this chunk's again, as forward computed them.
  if (head_rows > 0)
    tp::column_parallel_linear_forward(tp_, a.logits, x, w.wte, nullptr, n, C, Vl, L);
  if (device_padded())
    L.crossentropy_padded_backward(a.logits, a.logits, lse, targets, dloss, n, V, Vl);
  else
    tp::vocab_parallel_crossentropy_backward(tp_, a.logits, a.logits, lse, targets, dloss, n, Vl,
                                             v0, V, L);
  tp::column_parallel_linear_backward(tp_, dln_f + size_t(r0) * C, dw.wte, nullptr, a.logits, x,
                                      w.wte, n, C, Vl, L);
}

template <class A>
void GptModelT<A>::backward(const MicroBatch& mb, float dloss, GradReadyHook ready) {
  GptChunkT<A>& ch = chunks[mb.chunk];
  GptActsT<A>& a = ch.slots[mb.slot];
  const int rows = mb.samples.rows, C = cfg.n_embd;
  const int Tm = row_positions(mb);
  const int N = rows * Tm;
  const uint64_t row0 = uint64_t(mb.first_sample) * uint64_t(Tm);
  tp::TpComm& tp = tp_;
  const LayerOpsT<A>& L = *layers_;
  if (ch.last) {
    const int M = a.compacted ? int(a.loss_rows.size()) : N;
    if (a.dlogits_ready) {  // the fused classifier left the dlogits in the logits
      MPITRON_REQUIRE(dloss == a.dlogits_dloss,
                      "backward's dloss differs from the MicroBatch::dloss its forward's fused "
                      "classifier applied");
      L.lm_head_backward(dln_f, dw.wte, a.logits, a.ln_f, w.wte, 1.0f, M, C, Vl);
    } else {
      const int rows_at_once = head_rows > 0 ? head_rows : M;
      for (int r0 = 0; r0 < M; r0 += rows_at_once)
        head_backward(a, dloss, r0, std::min(rows_at_once, M - r0));
    }
    if (a.compacted) L.expand_rows(dln_f, a.loss_rows.data(), M, N, C);
    a.dlogits_ready = false;
    const A* x_last = a.blocks.back().res_mlp;
    L.zero(dresidual, size_t(N) * C);
    L.layernorm_backward(dresidual, dw.ln_f_w, dw.ln_f_b, dln_f, x_last, w.ln_f_w, a.ln_f_mean,
                         a.ln_f_rstd, N, C);
    ready(head_segment_);
  }  // else dresidual holds the gradient of the chunk's output, received from the next stage
  const BlockShapeT<A> shape{rows, Tm, C, cfg.n_head, true, nullptr, &tp_, 1e-5, layers_};
  for (int l = ch.blocks.end - 1; l >= ch.blocks.begin; --l) {
    const int k = l - ch.blocks.begin;
    const A* x = k == 0 ? a.encoded : a.blocks[k - 1].res_mlp;
    BlockActsT<A> acts_l = block_acts(a, k);
    // Recompute: the block again from its input, the same dropout masks (keyed by Philox).
    if (recompute) transformer_block_forward(acts_l, x, w.h[l], shape, block_dropout(mb, l, row0));
    transformer_block_backward(dresidual, dw.h[l], scratch, acts_l, x, w.h[l], shape,
                               block_dropout(mb, l, row0));
    ready(segment_of_block[l]);
  }
  if (ch.first) {
    L.dropout_backward(scratch.dbranch, dresidual, mb.dropout, dropout_stream(mb, 0), row0, N, C);
    tp::vocab_parallel_embedding_backward(tp, embedding_wte_grad_ ? embedding_wte_grad_ : dw.wte,
                                          dw.wpe, scratch.dbranch, a.inputs, rows, Tm, C, v0, Vl,
                                          L);
  }
  // The embedding segment is final after the embedding (first stage) or the tied head (last).
  if (ch.first || (ch.last && !holds_first_)) ready(embedding_segment_);
}

template <class A>
ModelOutput GptModelT<A>::output(int slot) const {
  if (head_rows > 0)
    throw UsageError(
        "the chunked LM head (--lm-head-chunk) keeps no micro-batch's logits whole: build the "
        "model without it to read them");
  if (chunks.back().slots[slot].compacted)
    throw UsageError(
        "the last forward had loss spans: the LM head ran on their rows alone (run it without "
        "spans to read every position's logits)");
  if (!layers_on_host())
    throw UsageError(fmt::format(
        "the GPT's logits are read where the layers ran, on the CPU only (this model's are on {})",
        device_name(layers_->device)));
  if constexpr (std::is_same_v<A, float>) {
    const GptActsT<A>& a = chunks.back().slots[slot];
    return {a.logits, a.positions > 0 ? a.positions : T, Vl};
  } else {
    (void)slot;
    throw UsageError(fmt::format("the logits of a {} model are not fp32: use --precision fp32",
                                 precision_name(dtype_of<A>())));
  }
}

template <class A>
StageBoundary GptModelT<A>::boundary(int chunk, int slot) {
  GptChunkT<A>& ch = chunks[chunk];
  GptActsT<A>& a = ch.slots[slot];
  StageBoundary b;
  b.input_elements = b.output_elements = size_t(T) * cfg.n_embd;
  b.element_bytes = sizeof(A);  // activations and their gradients in the storage type
  if (!ch.first) {
    b.input = a.encoded;
    b.input_grad = dresidual;
  }
  if (!ch.last) {
    b.output = a.blocks.back().res_mlp;
    b.output_grad = dresidual;
  }
  return b;
}

template class GptModelT<float>;
template class GptModelT<bf16_t>;
template class GptModelT<fp16_t>;

std::unique_ptr<Model> build_gpt(const ModelConfig& m, const ModelBuild& how) {
  switch (how.precision) {
    case DType::bf16:
      return std::make_unique<GptModelT<bf16_t>>(gpt_config(m), how);
    case DType::f16:
      return std::make_unique<GptModelT<fp16_t>>(gpt_config(m), how);
    case DType::f32:
      break;
  }
  return std::make_unique<GptModel>(gpt_config(m), how);
}

namespace {

template <class A>
ModelMemory gpt_memory(const GptConfig& cfg, const ModelBuild& how) {
  const LayerOpsT<A>& L = layer_ops<A>(how.layers ? how.layers->device : Device::cpu);
  const int vocab_align = tp::vocab_align_for(cfg.vocab_size, how.tp_shards, L.lm_head_align);
  const int Vl = int(padded_rows(cfg.vocab_size, how.slice.tp, vocab_align));
  const int T = how.seq_len > 0 ? how.seq_len : cfg.block_size;
  const ParamRegistry registry = gpt_registry(cfg, how.slice, vocab_align);
  ModelMemory out;
  out.flat_size = (registry.size() + how.flat_align - 1) / how.flat_align * how.flat_align;
  out.buffer_elements = registry.buffer_size();
  out.weight_copy_bytes = std::is_same_v<A, float> ? 0 : out.flat_size * sizeof(A);
  out.segments = gpt_segments(registry, cfg.n_layer, out.flat_size).segments;
  for (const ParamInfo& p : registry.params())
    if (p.shard.stage == StageOwner::first_and_last) {
      out.first_and_last = true;
      out.first_and_last_elements += p.numel;
    }
  std::vector<GptChunkT<A>> chunks = gpt_chunks<A>(cfg, how.slice);
  const int slot_count = std::max(1, how.slots);
  bool any_last = false;
  for (GptChunkT<A>& ch : chunks) ch.slots.resize(slot_count), any_last |= ch.last;
  BlockShapeT<A> shape{how.micro_rows, T, cfg.n_embd, cfg.n_head, true, nullptr, nullptr, 1e-5, &L};
  shape.tp_ranks = how.slice.tp;
  shape.tp_shards = how.tp_shards;
  ActivationCarver a, d;
  BlockActsT<A> recompute_acts;
  const size_t BT = size_t(how.micro_rows) * T;
  const size_t head_rows =
      how.head_chunk_rows > 0 && size_t(how.head_chunk_rows) < BT ? size_t(how.head_chunk_rows) : 0;
  carve_gpt_activations(a, chunks, recompute_acts, how.recompute, shape, size_t(Vl), head_rows);
  A* dresidual = nullptr;
  float* ce_scratch = nullptr;
  BlockScratchT<A> scratch;
  float* tp_fixed = nullptr;
  size_t tp_fixed_floats = 0;
  carve_gpt_scratch(d, dresidual, ce_scratch, scratch, tp_fixed, tp_fixed_floats, any_last, shape,
                    Vl);
  const size_t tokens = chunks.size() * size_t(slot_count) * 2 * BT * sizeof(int32_t);
  out.activation_bytes = (a.used + d.used) * sizeof(float) + tokens;
  out.logit_bytes = !any_last       ? 0
                    : head_rows > 0 ? carved_bytes<A>(head_rows * size_t(Vl))
                                    : size_t(slot_count) * carved_bytes<A>(BT * size_t(Vl));
  out.boundary_elements = how.slice.stages > 1 ? size_t(T) * cfg.n_embd : 0;
  return out;
}

}  // namespace

ModelMemory gpt_model_memory(const ModelConfig& m, const ModelBuild& how) {
  switch (how.precision) {
    case DType::bf16:
      return gpt_memory<bf16_t>(gpt_config(m), how);
    case DType::f16:
      return gpt_memory<fp16_t>(gpt_config(m), how);
    case DType::f32:
      break;
  }
  return gpt_memory<float>(gpt_config(m), how);
}

}  // namespace mpitron
