#include "src/model/bert.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "base/check.hpp"
#include "src/model/tensor_parallel.hpp"

namespace mpitron {

namespace {
constexpr double kLnEps = 1e-12;  // BERT's LayerNorm epsilon
}  // namespace

BertConfig bert_config(const ModelConfig& m) {
  BertConfig c;
  c.n_layer = int(m.get("n_layer"));
  c.n_head = int(m.get("n_head"));
  c.n_embd = int(m.get("n_embd"));
  c.block_size = int(m.get("block_size"));
  c.vocab_size = int(m.get("vocab_size"));
  c.type_vocab = int(m.get("type_vocab"));
  c.task = int(m.get("task"));
  c.pad_id = int(m.get("pad_id"));
  c.unk_id = int(m.get("unk_id"));
  c.cls_id = int(m.get("cls_id"));
  c.sep_id = int(m.get("sep_id"));
  c.mask_id = int(m.get("mask_id"));
  return c;
}

int bert_masked_per_sample(int T) {
  return std::max(1, int(std::lround(0.15 * (T - 2))));
}

void validate_bert_layout(const ModelConfig& m, int tp_ranks) {
  const BertConfig c = bert_config(m);
  tp::require_tp_splits(tp_ranks, {{"n_head", c.n_head, "heads split evenly over TP"},
                                   {"n_embd", c.n_embd, "the MLP splits evenly over TP"}});
}

void validate_bert(const ModelConfig& m, const TrainConfig& t) {
  const BertConfig c = bert_config(m);
  if (c.n_embd % c.n_head != 0)
    throw UsageError(
        fmt::format("n_embd ({}) must be divisible by n_head ({})", c.n_embd, c.n_head));
  if (c.task < 0 || c.task > 2)
    throw UsageError(fmt::format(
        "model.task {} is unknown (0 masked-LM pretraining, 1 testament, 2 verse pairs)", c.task));
  if (t.seq_len > c.block_size)
    throw UsageError(fmt::format(
        "seq_len ({}) is longer than the position table (block_size {}): a sequence cannot be "
        "longer than the positions the model has",
        t.seq_len, c.block_size));
  const int shortest = c.task == 2 ? 5 : 3;
  if (t.seq_len < shortest)
    throw UsageError(fmt::format("seq_len ({}) is too short for task {}: at least {} tokens",
                                 t.seq_len, c.task, shortest));
  if (c.type_vocab < 2)
    throw UsageError(fmt::format("type_vocab ({}) must be at least 2", c.type_vocab));
  const std::pair<const char*, int> specials[] = {{"pad_id", c.pad_id},
                                                  {"unk_id", c.unk_id},
                                                  {"cls_id", c.cls_id},
                                                  {"sep_id", c.sep_id},
                                                  {"mask_id", c.mask_id}};
  for (const auto& [name, id] : specials)
    if (id < 0 || id >= c.vocab_size)
      throw UsageError(fmt::format("model.{} ({}) is outside the vocabulary (vocab_size {})", name,
                                   id, c.vocab_size));
  if (c.vocab_size < 256 && c.task != 0)
    throw UsageError(fmt::format(
        "vocab_size {} is smaller than the byte vocabulary (256) of the verse data", c.vocab_size));
}

ParamRegistry bert_registry(const BertConfig& cfg, RegistrySlice slice, int vocab_align) {
  const int64_t C = cfg.n_embd, V = cfg.vocab_size;
  const float std = 0.02f;
  ParamRegistry r(slice);
  const ShardSpec vocab_rows{0, 1, StageOwner::every, -1, true, vocab_align};
  const ShardSpec replicated{};
  r.add("embeddings.word_embeddings.weight", {V, C}, InitKind::normal, std, false, vocab_rows);
  r.add("embeddings.position_embeddings.weight", {cfg.block_size, C}, InitKind::normal, std, false);
  r.add("embeddings.token_type_embeddings.weight", {cfg.type_vocab, C}, InitKind::normal, std,
        false);
  r.add("embeddings.LayerNorm.weight", {C}, InitKind::ones, 0, false);
  r.add("embeddings.LayerNorm.bias", {C}, InitKind::zeros, 0, false);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    const ShardSpec same{-1, 1, StageOwner::block, l};
    const ShardSpec rows{0, 1, StageOwner::block, l};  // column-parallel: output features
    const ShardSpec cols{1, 1, StageOwner::block, l};  // row-parallel: input features
    for (const char* qkv : {"query", "key", "value"}) {
      r.add(p + "attention.self." + qkv + ".weight", {C, C}, InitKind::normal, std, true, rows);
      r.add(p + "attention.self." + qkv + ".bias", {C}, InitKind::zeros, 0, false, rows);
    }
    r.add(p + "attention.output.dense.weight", {C, C}, InitKind::normal, std, true, cols);
    r.add(p + "attention.output.dense.bias", {C}, InitKind::zeros, 0, false, same);
    r.add(p + "attention.output.LayerNorm.weight", {C}, InitKind::ones, 0, false, same);
    r.add(p + "attention.output.LayerNorm.bias", {C}, InitKind::zeros, 0, false, same);
    r.add(p + "intermediate.dense.weight", {4 * C, C}, InitKind::normal, std, true, rows);
    r.add(p + "intermediate.dense.bias", {4 * C}, InitKind::zeros, 0, false, rows);
    r.add(p + "output.dense.weight", {C, 4 * C}, InitKind::normal, std, true, cols);
    r.add(p + "output.dense.bias", {C}, InitKind::zeros, 0, false, same);
    r.add(p + "output.LayerNorm.weight", {C}, InitKind::ones, 0, false, same);
    r.add(p + "output.LayerNorm.bias", {C}, InitKind::zeros, 0, false, same);
  }
  if (cfg.task == 0) {
    r.add("cls.predictions.transform.dense.weight", {C, C}, InitKind::normal, std, true,
          replicated);
    r.add("cls.predictions.transform.dense.bias", {C}, InitKind::zeros, 0, false);
    r.add("cls.predictions.transform.LayerNorm.weight", {C}, InitKind::ones, 0, false);
    r.add("cls.predictions.transform.LayerNorm.bias", {C}, InitKind::zeros, 0, false);
    r.add("cls.predictions.bias", {V}, InitKind::zeros, 0, false, vocab_rows);
  } else {
    r.add("pooler.dense.weight", {C, C}, InitKind::normal, std, true);
    r.add("pooler.dense.bias", {C}, InitKind::zeros, 0, false);
    r.add("classifier.weight", {cfg.classes(), C}, InitKind::normal, std, true);
    r.add("classifier.bias", {cfg.classes()}, InitKind::zeros, 0, false);
  }
  return r;
}

namespace {

template <class W, class At>
BertWeightsT<W> bert_weights(const ParamRegistry& reg, const BertConfig& cfg, At address) {
  auto at = [&](const std::string& name) -> W* {
    const ParamInfo* p = reg.find(name);
    return p ? address(p->offset) : nullptr;
  };
  BertWeightsT<W> w;
  w.word = at("embeddings.word_embeddings.weight");
  w.position = at("embeddings.position_embeddings.weight");
  w.token_type = at("embeddings.token_type_embeddings.weight");
  w.emb_ln_w = at("embeddings.LayerNorm.weight");
  w.emb_ln_b = at("embeddings.LayerNorm.bias");
  w.layer.resize(cfg.n_layer);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    w.layer[l] = {at(p + "attention.self.query.weight"),
                  at(p + "attention.self.query.bias"),
                  at(p + "attention.self.key.weight"),
                  at(p + "attention.self.key.bias"),
                  at(p + "attention.self.value.weight"),
                  at(p + "attention.self.value.bias"),
                  at(p + "attention.output.dense.weight"),
                  at(p + "attention.output.dense.bias"),
                  at(p + "attention.output.LayerNorm.weight"),
                  at(p + "attention.output.LayerNorm.bias"),
                  at(p + "intermediate.dense.weight"),
                  at(p + "intermediate.dense.bias"),
                  at(p + "output.dense.weight"),
                  at(p + "output.dense.bias"),
                  at(p + "output.LayerNorm.weight"),
                  at(p + "output.LayerNorm.bias")};
  }
  w.mlm_dense_w = at("cls.predictions.transform.dense.weight");
  w.mlm_dense_b = at("cls.predictions.transform.dense.bias");
  w.mlm_ln_w = at("cls.predictions.transform.LayerNorm.weight");
  w.mlm_ln_b = at("cls.predictions.transform.LayerNorm.bias");
  w.mlm_bias = at("cls.predictions.bias");
  w.pooler_w = at("pooler.dense.weight");
  w.pooler_b = at("pooler.dense.bias");
  w.cls_w = at("classifier.weight");
  w.cls_b = at("classifier.bias");
  return w;
}

// Dropout sites: 0 after the embedding, 1 + 2l after layer l's attention, 2 + 2l after its MLP,
// 1 + 2L on the pooled first token.
PhiloxStream dropout_stream(const MicroBatch& mb, int site) {
  return PhiloxStream{mb.seed, mix64(mix64(uint64_t(mb.step), uint64_t(site)), 0xBE27ull)};
}

// The masked-LM draw of one batch (MicroBatch::data_step): per (global sample * T + position), v[0]
// orders the candidate positions (the m smallest are predicted), v[1] picks [MASK] / random /
// unchanged, v[2] the random token.
PhiloxStream masking_stream(const MicroBatch& mb) {
  return PhiloxStream{mb.seed, mix64(uint64_t(mb.data_step), 0x3A5Cull)};
}

// Gradient segments in flat order: the embeddings (0), each layer (1 + l), the head (last).
std::vector<GradSegment> bert_segments(const ParamRegistry& registry, const BertConfig& cfg,
                                       size_t flat_size) {
  auto begin_of = [&](int l) {
    return registry.at("encoder.layer." + std::to_string(l) + ".attention.self.query.weight")
        .offset;
  };
  const size_t head_begin =
      registry.at(cfg.task == 0 ? "cls.predictions.transform.dense.weight" : "pooler.dense.weight")
          .offset;
  std::vector<GradSegment> segments{{0, cfg.n_layer > 0 ? begin_of(0) : head_begin, false}};
  for (int l = 0; l < cfg.n_layer; ++l)
    segments.push_back({begin_of(l), l + 1 < cfg.n_layer ? begin_of(l + 1) : head_begin, true});
  segments.push_back({head_begin, flat_size, false});
  return segments;
}

// Each slot's activations (M predicted rows of the masked LM, or the classifier's B first tokens),
// the build's and the plan's carving.
template <class A>
void carve_bert_activations(ActivationCarver& a, std::vector<typename BertModelT<A>::Acts>& slots,
                            const BertConfig& cfg, const BlockShapeT<A>& shape, size_t M,
                            size_t Vl) {
  const size_t B = size_t(shape.B), BT = B * shape.T, C = cfg.n_embd, K = cfg.classes();
  for (typename BertModelT<A>::Acts& s : slots) {
    s.embedded = a.take_as<A>(BT * C);
    s.encoded = a.take_as<A>(BT * C);
    s.emb_mean = a.take(BT);
    s.emb_rstd = a.take(BT);
    s.layer.resize(cfg.n_layer);
    for (BlockActsT<A>& b : s.layer) block_acts_carve(b, a, shape);
    if (cfg.task == 0) {
      s.picked = a.take_as<A>(M * C);
      s.dense = a.take_as<A>(M * C);
      s.dense_gelu = a.take_as<A>(M * C);
      s.head_ln = a.take_as<A>(M * C);
      s.head_mean = a.take(M);
      s.head_rstd = a.take(M);
      s.logits = a.take_as<A>(M * Vl);
      s.lse = a.take(M);
      s.losses = a.take(M);
    } else {
      s.first = a.take_as<A>(B * C);
      s.pooled = a.take_as<A>(B * C);
      s.pooled_drop = a.take_as<A>(B * C);
      s.logits = a.take_as<A>(B * K);
      s.lse = a.take(B);
      s.losses = a.take(B);
    }
  }
}

// Backward's scratch: the residual stream's gradient, the head's, the cross-entropy's, a block's.
template <class A>
void carve_bert_scratch(ActivationCarver& d, A*& dresidual, A*& dhead, A*& dhead2,
                        float*& ce_scratch, BlockScratchT<A>& scratch, float*& tp_fixed,
                        size_t& tp_fixed_floats, const BertConfig& cfg, const BlockShapeT<A>& shape,
                        size_t M, size_t Vl) {
  const size_t head_rows = cfg.task == 0 ? M : size_t(shape.B), C = cfg.n_embd;
  dresidual = d.take_as<A>(size_t(shape.B) * shape.T * C);
  dhead = d.take_as<A>(head_rows * C);
  dhead2 = d.take_as<A>(head_rows * C);
  ce_scratch = d.take(3 * M);
  block_scratch_carve(scratch, d, shape);
  // --bitwise: the blocks' split linears, and the masked-LM head's and its cross-entropy's
  const int shards = shape.tp_fixed_shards(), tp = shape.tp_size();
  tp_fixed_floats = block_tp_fixed_floats(shape, false);
  if (cfg.task == 0)
    tp_fixed_floats =
        std::max({tp_fixed_floats,
                  tp::column_parallel_fixed_floats(shards, tp, int(M), int(C), int(Vl), 1, false),
                  tp::crossentropy_fixed_floats(shards, tp, int(M), int(Vl))});
  tp_fixed = tp_fixed_floats > 0 ? d.take(tp_fixed_floats) : nullptr;
}

// The integers one forward derives from its rows: ids, types, targets (B,T), lengths (B), masked
// rows (M), labels (B), the picked targets (M).
size_t bert_ints_per_slot(size_t B, size_t T, size_t M) {
  return 3 * B * T + B + M + B + M;
}

}  // namespace

template <class A>
BertModelT<A>::BertModelT(const BertConfig& c, const ModelBuild& how)
    : cfg(c),
      B(how.micro_rows),
      self_(comm::Group::solo()),
      layers_(&layer_ops<A>(how.layers ? how.layers->device : Device::cpu)) {
  MPITRON_REQUIRE(how.precision == dtype_of<A>(), "a BERT built for another precision");
  require_attention_head_size(*layers_, c.n_embd, c.n_head);
  tp_.group = tp::model_tp_group(how, self_);
  tp_.device = how.tp_device;
  tp_.shards = how.tp_shards;
  tp::require_tp_shards(how.tp_shards, c.n_embd);
  if (how.slice.stages != 1)
    throw UsageError("the bert family runs as one pipeline stage (--pp 1)");
  config = {"bert",
            {{"n_layer", c.n_layer},
             {"n_head", c.n_head},
             {"n_embd", c.n_embd},
             {"block_size", c.block_size},
             {"vocab_size", c.vocab_size},
             {"type_vocab", c.type_vocab},
             {"task", c.task},
             {"pad_id", c.pad_id},
             {"unk_id", c.unk_id},
             {"cls_id", c.cls_id},
             {"sep_id", c.sep_id},
             {"mask_id", c.mask_id}}};
  validate_bert_layout(config, how.slice.tp);
  const int vocab_align = tp::vocab_align_for(cfg.vocab_size, how.tp_shards, 1);
  Vl = int(padded_rows(cfg.vocab_size, how.slice.tp, vocab_align));
  v0 = how.slice.tp_rank * Vl;
  T = how.seq_len > 0 ? how.seq_len : c.block_size;
  MPITRON_REQUIRE(T >= 3 && T <= c.block_size, "sequence length outside [3, block_size]");
  m = bert_masked_per_sample(T);
  registry = bert_registry(cfg, how.slice, vocab_align);
  allocate_tensors(how);
  A* read = nullptr;
  if constexpr (std::is_same_v<A, float>) {
    read = params.data();
  } else {
    weights = Buffer<A>(*how.alloc, flat_size);
    read = weights.data();
  }
  w = bert_weights<A>(registry, cfg, [read](size_t offset) { return read + offset; });
  parameters_changed();

  segments = bert_segments(registry, cfg, flat_size);
  embedding_segment_ = 0;
  for (int l = 0; l < cfg.n_layer; ++l) segment_of_layer_.push_back(size_t(1 + l));
  head_segment_ = segments.size() - 1;

  const BlockShapeT<A> shape{B, T, cfg.n_embd, cfg.n_head, false, nullptr, &tp_, kLnEps, layers_};
  const size_t BT = size_t(B) * T, M = size_t(B) * m;
  const int slot_count = std::max(1, how.slots);
  slots.resize(slot_count);
  last_rows_.assign(slot_count, 0);
  acts = plan_activations(*how.alloc, [&](ActivationCarver& a) {
    carve_bert_activations<A>(a, slots, cfg, shape, M, size_t(Vl));
  });
  dacts = plan_activations(*how.alloc, [&](ActivationCarver& d) {
    carve_bert_scratch<A>(d, dresidual, dhead, dhead2, ce_scratch, scratch, tp_.fixed,
                          tp_.fixed_floats, cfg, shape, M, size_t(Vl));
  });
  // The integers each forward derives from its rows, made on the host; another device's layers
  // read an uploaded copy of each slot's block.
  const size_t per_slot = bert_ints_per_slot(size_t(B), size_t(T), M);
  ints = Buffer<int32_t>(*how.alloc, per_slot * slots.size());
  const bool on_host = layers_->device == Device::cpu;
  if (!on_host) host_ints_.assign(per_slot * slots.size(), 0);
  int32_t* q = on_host ? ints.data() : host_ints_.data();
  int32_t* d = ints.data();
  for (Acts& s : slots) {
    s.int_block = q;
    s.dev.block = d;
    s.int_count = per_slot;
    auto carve = [&](size_t n) {
      int32_t* host = q;
      q += n, d += n;
      return host;
    };
    const int32_t* dev0 = s.dev.block;
    auto on_dev = [&](const int32_t* host) { return dev0 + (host - s.int_block); };
    s.ids = carve(BT);
    s.types = carve(BT);
    s.targets = carve(BT);
    s.lengths = carve(size_t(B));
    s.masked = carve(M);
    s.labels = carve(size_t(B));
    s.picked_targets = carve(M);
    s.dev.ids = on_dev(s.ids);
    s.dev.types = on_dev(s.types);
    s.dev.lengths = on_dev(s.lengths);
    s.dev.masked = on_dev(s.masked);
    s.dev.labels = on_dev(s.labels);
    s.dev.picked_targets = on_dev(s.picked_targets);
  }
  host_losses_.resize(std::max(M, size_t(B)));
}

template <class A>
void BertModelT<A>::bind_gradients(const std::function<float*(size_t)>& address) {
  dw = bert_weights<float>(registry, cfg, address);
}

template <class A>
void BertModelT<A>::parameters_changed() {
  if constexpr (!std::is_same_v<A, float>) round_weight_copy(*layers_, weights.data());
}

template <class A>
void BertModelT<A>::prepare_inputs(Acts& a, const MicroBatch& mb) const {
  const int rows = mb.samples.rows, V = cfg.vocab_size;
  const int32_t* tok = mb.samples.tokens;
  std::fill(a.types, a.types + size_t(rows) * T, 0);
  std::fill(a.targets, a.targets + size_t(rows) * T, -1);
  if (cfg.task != 0) {
    for (int b = 0; b < rows; ++b) {
      const int32_t* row = tok + size_t(b) * (T + 1);
      int32_t* ids = a.ids + size_t(b) * T;
      int length = T, segment = 0;
      for (int t = 0; t < T; ++t) {
        MPITRON_REQUIRE(row[t] >= 0 && row[t] < V, "token outside the vocabulary");
        ids[t] = row[t];
        if (row[t] == cfg.pad_id && length == T) length = t;
        if (t < length) a.types[size_t(b) * T + t] = segment;
        if (row[t] == cfg.sep_id) segment = 1;
      }
      MPITRON_REQUIRE(length >= 1, "a sample without tokens before its padding");
      MPITRON_REQUIRE(row[T] >= 0 && row[T] < cfg.classes(), "label outside the classes");
      a.lengths[b] = length;
      a.labels[b] = row[T];
    }
    return;
  }
  // [CLS] row[0..T-2) [SEP], then m positions of 1..T-2 masked.
  const PhiloxStream rng = masking_stream(mb);
  for (int b = 0; b < rows; ++b) {
    const int32_t* row = tok + size_t(b) * (T + 1);
    int32_t* ids = a.ids + size_t(b) * T;
    ids[0] = cfg.cls_id;
    for (int t = 1; t < T - 1; ++t) {
      MPITRON_REQUIRE(row[t - 1] >= 0 && row[t - 1] < V, "token outside the vocabulary");
      ids[t] = row[t - 1];
    }
    ids[T - 1] = cfg.sep_id;
    a.lengths[b] = T;
    const uint64_t base = uint64_t(mb.first_sample + b) * uint64_t(T);
    // The m positions of smallest (key, position), in position order: selection by repeated scans.
    uint64_t prev = 0;
    bool any = false;
    for (int k = 0; k < m; ++k) {
      uint64_t best = UINT64_MAX;
      for (int t = 1; t < T - 1; ++t) {
        const uint64_t key = (uint64_t(rng.block(base + uint64_t(t)).v[0]) << 32) | uint64_t(t);
        if ((!any || key > prev) && key < best) best = key;
      }
      prev = best, any = true;
      a.masked[size_t(b) * m + k] = int32_t(best & 0xFFFFFFFFu);  // the position, for now
    }
    std::sort(a.masked + size_t(b) * m, a.masked + size_t(b + 1) * m);
    for (int k = 0; k < m; ++k) {
      const int t = a.masked[size_t(b) * m + k];
      const Philox4x32 r = rng.block(base + uint64_t(t));
      a.targets[size_t(b) * T + t] = ids[t];
      const float u = float(r.v[1] >> 8) * (1.0f / 16777216.0f);
      if (u < 0.8f)
        ids[t] = cfg.mask_id;
      else if (u < 0.9f)
        ids[t] = int32_t(r.v[2] % uint32_t(V));
      a.masked[size_t(b) * m + k] = b * T + t;  // flat row of the prediction
    }
  }
  for (int k = 0; k < rows * m; ++k) a.picked_targets[k] = a.targets[a.masked[k]];
}

template <class A>
double BertModelT<A>::forward(const MicroBatch& mb) {
  MPITRON_REQUIRE(mb.samples.tokens && mb.samples.rows <= B && mb.slot >= 0 &&
                      mb.slot < int(slots.size()) && mb.chunk == 0,
                  "micro-batch larger than planned, or not tokens");
  const LayerOpsT<A>& L = *layers_;
  Acts& a = slots[mb.slot];
  const int rows = mb.samples.rows, C = cfg.n_embd, V = cfg.vocab_size, N = rows * T;
  last_rows_[mb.slot] = rows;
  prepare_inputs(a, mb);
  if (a.dev.block != a.int_block) L.upload_int32(a.dev.block, a.int_block, a.int_count);
  tp::TpComm& group = tp_;
  const uint64_t row0 = uint64_t(mb.first_sample) * uint64_t(T);
  tp::vocab_parallel_embedding_forward(group, a.embedded, a.dev.ids, w.word, w.position, rows, T, C,
                                       v0, Vl, L);
  L.add_table_rows(a.embedded, w.token_type, a.dev.types, N, C);
  L.layernorm_forward(a.encoded, a.emb_mean, a.emb_rstd, a.embedded, w.emb_ln_w, w.emb_ln_b, N, C,
                      kLnEps);
  L.dropout_forward(a.encoded, a.encoded, mb.dropout, dropout_stream(mb, 0), row0, N, C);
  const BlockShapeT<A> shape{rows, T, C, cfg.n_head, false, a.dev.lengths, &tp_, kLnEps, layers_};
  const A* x = a.encoded;
  for (int l = 0; l < cfg.n_layer; ++l) {
    const BlockDropout drop{mb.dropout, dropout_stream(mb, 1 + 2 * l),
                            dropout_stream(mb, 2 + 2 * l), row0};
    encoder_block_forward(a.layer[l], x, w.layer[l], shape, drop);
    x = a.layer[l].ln_2;
  }
  double sum = 0.0;
  if (cfg.task == 0) {
    const int M = rows * m;
    L.gather_rows(a.picked, x, a.dev.masked, M, C);
    L.linear_forward(a.dense, a.picked, w.mlm_dense_w, w.mlm_dense_b, M, C, C);
    L.gelu_erf_forward(a.dense_gelu, a.dense, size_t(M) * C);
    L.layernorm_forward(a.head_ln, a.head_mean, a.head_rstd, a.dense_gelu, w.mlm_ln_w, w.mlm_ln_b,
                        M, C, kLnEps);
    tp::column_parallel_linear_forward(group, a.logits, a.head_ln, w.word, w.mlm_bias, M, C, Vl, L);
    tp::vocab_parallel_crossentropy_forward(group, a.losses, a.lse, ce_scratch, a.logits,
                                            a.dev.picked_targets, M, Vl, v0, V, L);
    L.download(host_losses_.data(), a.losses, size_t(M));
    for (int k = 0; k < M; ++k) sum += host_losses_[size_t(k)];
    return sum;
  }
  const int K = cfg.classes();
  L.copy_strided(a.first, C, x, T * C, rows, C);  // each sequence's first token ([CLS])
  L.linear_forward(a.pooled, a.first, w.pooler_w, w.pooler_b, rows, C, C);
  L.tanh_forward(a.pooled, a.pooled, size_t(rows) * C);
  L.dropout_forward(a.pooled_drop, a.pooled, mb.dropout, dropout_stream(mb, 1 + 2 * cfg.n_layer),
                    uint64_t(mb.first_sample), rows, C);
  L.linear_forward(a.logits, a.pooled_drop, w.cls_w, w.cls_b, rows, C, K);
  L.crossentropy_forward(a.losses, a.lse, a.logits, a.dev.labels, rows, K);
  L.download(host_losses_.data(), a.losses, size_t(rows));
  for (int b = 0; b < rows; ++b) sum += host_losses_[size_t(b)];
  return sum;
}

template <class A>
void BertModelT<A>::backward(const MicroBatch& mb, float dloss, GradReadyHook ready) {
  const LayerOpsT<A>& L = *layers_;
  const Acts& a = slots[mb.slot];
  const int rows = mb.samples.rows, C = cfg.n_embd, V = cfg.vocab_size, N = rows * T;
  const size_t NC = size_t(N) * C;
  tp::TpComm& group = tp_;
  const uint64_t row0 = uint64_t(mb.first_sample) * uint64_t(T);
  L.zero(dresidual, NC);
  if (cfg.task == 0) {
    const int M = rows * m;
    tp::vocab_parallel_crossentropy_backward(group, a.logits, a.logits, a.lse, a.dev.picked_targets,
                                             dloss, M, Vl, v0, V, L);
    tp::column_parallel_linear_backward(group, dhead, dw.word, dw.mlm_bias, a.logits, a.head_ln,
                                        w.word, M, C, Vl, L);
    L.zero(dhead2, size_t(M) * C);
    L.layernorm_backward(dhead2, dw.mlm_ln_w, dw.mlm_ln_b, dhead, a.dense_gelu, w.mlm_ln_w,
                         a.head_mean, a.head_rstd, M, C);
    L.gelu_erf_backward(dhead, dhead2, a.dense, size_t(M) * C);
    L.linear_backward(dhead2, dw.mlm_dense_w, dw.mlm_dense_b, dhead, a.picked, w.mlm_dense_w, M, C,
                      C);
    L.scatter_add_rows(dresidual, dhead2, a.dev.masked, M, C);  // each row predicted at most once
  } else {
    const int K = cfg.classes();
    L.crossentropy_backward(a.logits, a.logits, a.lse, a.dev.labels, dloss, rows, K);
    L.linear_backward(dhead, dw.cls_w, dw.cls_b, a.logits, a.pooled_drop, w.cls_w, rows, C, K);
    L.dropout_backward(dhead2, dhead, mb.dropout, dropout_stream(mb, 1 + 2 * cfg.n_layer),
                       uint64_t(mb.first_sample), rows, C);
    L.tanh_backward(dhead, dhead2, a.pooled, size_t(rows) * C);
    L.linear_backward(dhead2, dw.pooler_w, dw.pooler_b, dhead, a.first, w.pooler_w, rows, C, C);
    L.copy_strided(dresidual, T * C, dhead2, C, rows, C);
  }
  ready(head_segment_);
  const BlockShapeT<A> shape{rows, T, C, cfg.n_head, false, a.dev.lengths, &tp_, kLnEps, layers_};
  for (int l = cfg.n_layer - 1; l >= 0; --l) {
    const A* x = l == 0 ? a.encoded : a.layer[l - 1].ln_2;
    const BlockDropout drop{mb.dropout, dropout_stream(mb, 1 + 2 * l),
                            dropout_stream(mb, 2 + 2 * l), row0};
    encoder_block_backward(dresidual, dw.layer[l], scratch, a.layer[l], x, w.layer[l], shape, drop);
    ready(segment_of_layer_[l]);
  }
  L.dropout_backward(scratch.dbranch, dresidual, mb.dropout, dropout_stream(mb, 0), row0, N, C);
  L.zero(dresidual, NC);
  L.layernorm_backward(dresidual, dw.emb_ln_w, dw.emb_ln_b, scratch.dbranch, a.embedded, w.emb_ln_w,
                       a.emb_mean, a.emb_rstd, N, C);
  L.table_rows_backward(dw.token_type, dresidual, a.dev.types, N, C);
  tp::vocab_parallel_embedding_backward(group, dw.word, dw.position, dresidual, a.dev.ids, rows, T,
                                        C, v0, Vl, L);
  ready(embedding_segment_);
}

template <class A>
ModelOutput BertModelT<A>::output(int slot) const {
  const int positions = cfg.task == 0 ? m : 1, classes = cfg.task == 0 ? Vl : cfg.classes();
  const size_t n = size_t(B) * size_t(positions) * size_t(classes);
  return {host_floats(*layers_, slots[size_t(slot)].logits, n, host_logits_, host_logits_16_),
          positions, classes};
}

template <class A>
std::vector<DumpTensor> BertModelT<A>::input_dump(int slot) const {
  const Acts& a = slots[slot];
  const int rows = last_rows_[slot];
  auto floats = [](const int32_t* p, size_t n) { return std::vector<float>(p, p + n); };
  const size_t BT = size_t(rows) * T;
  std::vector<DumpTensor> out = {
      {"inputs", {rows, T}, floats(a.ids, BT)},
      {"token_types", {rows, T}, floats(a.types, BT)},
      {"lengths", {rows}, floats(a.lengths, size_t(rows))},
  };
  if (cfg.task == 0)
    out.push_back({"targets", {rows, T}, floats(a.targets, BT)});
  else
    out.push_back({"targets", {rows}, floats(a.labels, size_t(rows))});
  return out;
}

template class BertModelT<float>;
template class BertModelT<bf16_t>;
template class BertModelT<fp16_t>;

namespace {

template <class A>
ModelMemory bert_memory(const BertConfig& cfg, const ModelBuild& how) {
  const LayerOpsT<A>& L = layer_ops<A>(how.layers ? how.layers->device : Device::cpu);
  const int B = how.micro_rows, T = how.seq_len > 0 ? how.seq_len : cfg.block_size;
  const size_t M = size_t(B) * bert_masked_per_sample(T);
  const int vocab_align = tp::vocab_align_for(cfg.vocab_size, how.tp_shards, 1);
  const size_t Vl = size_t(padded_rows(cfg.vocab_size, how.slice.tp, vocab_align));
  const ParamRegistry registry = bert_registry(cfg, how.slice, vocab_align);
  ModelMemory out;
  out.flat_size = (registry.size() + how.flat_align - 1) / how.flat_align * how.flat_align;
  out.buffer_elements = registry.buffer_size();
  out.weight_copy_bytes = std::is_same_v<A, float> ? 0 : out.flat_size * sizeof(A);
  out.segments = bert_segments(registry, cfg, out.flat_size);
  BlockShapeT<A> shape{B, T, cfg.n_embd, cfg.n_head, false, nullptr, nullptr, kLnEps, &L};
  shape.tp_ranks = how.slice.tp;
  shape.tp_shards = how.tp_shards;
  std::vector<typename BertModelT<A>::Acts> slots(size_t(std::max(1, how.slots)));
  ActivationCarver a, d;
  carve_bert_activations<A>(a, slots, cfg, shape, M, Vl);
  A *dresidual, *dhead, *dhead2;
  float* ce_scratch;
  BlockScratchT<A> scratch;
  float* tp_fixed;
  size_t tp_fixed_floats;
  carve_bert_scratch<A>(d, dresidual, dhead, dhead2, ce_scratch, scratch, tp_fixed, tp_fixed_floats,
                        cfg, shape, M, Vl);
  const size_t ints = slots.size() * bert_ints_per_slot(size_t(B), size_t(T), M) * sizeof(int32_t);
  out.activation_bytes = (a.used + d.used) * sizeof(float) + ints;
  const size_t logits = cfg.task == 0 ? M * Vl : size_t(B) * cfg.classes();
  out.logit_bytes = slots.size() * carved_bytes<A>(logits);
  return out;
}

}  // namespace

ModelMemory bert_model_memory(const ModelConfig& m, const ModelBuild& how) {
  switch (how.precision) {
    case DType::bf16:
      return bert_memory<bf16_t>(bert_config(m), how);
    case DType::f16:
      return bert_memory<fp16_t>(bert_config(m), how);
    case DType::f32:
      break;
  }
  return bert_memory<float>(bert_config(m), how);
}

std::unique_ptr<Model> build_bert(const ModelConfig& m, const ModelBuild& how) {
  switch (how.precision) {
    case DType::bf16:
      return std::make_unique<BertModelT<bf16_t>>(bert_config(m), how);
    case DType::f16:
      return std::make_unique<BertModelT<fp16_t>>(bert_config(m), how);
    case DType::f32:
      break;
  }
  return std::make_unique<BertModel>(bert_config(m), how);
}

}  // namespace mpitron
