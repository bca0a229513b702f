#include "src/train/model_checkpoint.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "base/check.hpp"
#include "src/model/family.hpp"
#include "src/train/adamw.hpp"

namespace mpitron {

io::Attributes model_attributes(const ModelConfig& m) {
  io::Attributes a{{"model.type", m.type}};
  for (const auto& [key, value] : m.dims) a["model." + key] = value;
  return a;
}

io::Attributes run_settings(const RunConfig& cfg) {
  const TrainConfig& t = cfg.train;
  return {{"config", cfg.name},
          {"seed", int64_t(t.seed)},
          {"train.lr", t.lr},
          {"train.min_lr_ratio", t.min_lr_ratio},
          {"train.warmup_steps", int64_t(t.warmup_steps)},
          {"train.steps", int64_t(t.steps)},
          {"train.weight_decay", t.weight_decay},
          {"train.beta1", t.beta1},
          {"train.beta2", t.beta2},
          {"train.eps", t.eps},
          {"train.grad_clip", t.grad_clip},
          {"train.loss_scale", t.loss_scale},
          {"train.loss_scale_window", int64_t(t.loss_scale_window)},
          {"train.batch_size", int64_t(t.batch_size)},
          {"train.seq_len", int64_t(t.seq_len)},
          {"train.dropout", t.dropout},
          {"train.augment", int64_t(t.augment)},
          {"train.fixed_batch", int64_t(t.fixed_batch)},
          {"train.bitwise", int64_t(t.bitwise)},
          {"train.reduction_shards", int64_t(t.bitwise ? t.reduction_shards : 0)},
          {"train.tp_shards", int64_t(t.bitwise ? t.tp_shards : 0)},
          {"train.objective", t.objective},
          {"train.span_context_words", int64_t(t.span_context_words)},
          {"train.span_loss", t.span_loss},
          {"train.span_drop_words", t.span_drop_words}};
}

std::vector<std::string> setting_changes(const io::Attributes& before, const io::Attributes& now) {
  return io::attribute_changes(before, now, /*only_common=*/true);
}

io::Attributes checkpoint_root_attributes(const CheckpointRecord& r) {
  io::Attributes a = model_attributes(r.model);
  for (const auto& [key, value] : r.settings) a[key] = value;
  a["format_version"] = kCheckpointFormat;
  a["step"] = r.step;
  a["tokens_seen"] = r.tokens_seen;
  a["seed"] = r.seed;
  a["layout.dp"] = r.dp;
  a["layout.tp"] = r.tp;
  a["layout.pp"] = r.pp;
  a["layout.zero"] = r.zero;
  a["train.lr"] = r.lr;
  a["train.steps"] = r.steps;
  a["train.batch_size"] = r.batch_size;
  a["train.seq_len"] = r.seq_len;
  a["eval.batches"] = r.eval_batches;
  a["optimizer"] = r.optimizer;
  if (r.optimizer == "adamw8bit") {
    a["optim8bit.stage_blocks"] = r.adamw8bit_stage_blocks;
    a["optim8bit.flat_sizes"] = r.adamw8bit_flat_sizes;
  }
  return a;
}

std::map<std::string, io::Attributes> checkpoint_groups(const CheckpointRecord& r) {
  io::Attributes data = r.data;
  data["next_step"] = r.step + 1;
  return {{"rng",
           {{"seed", r.seed},
            {"kind", std::string("philox4x32-10, keyed by (seed, name|step, index)")}}},
          {"data", data},
          {"loss_scale", {{"current", r.loss_scale}, {"clean_steps", r.loss_scale_clean_steps}}}};
}

CheckpointRecord read_checkpoint_record(const std::string& path) {
  const io::CheckpointHeader h = io::read_checkpoint_header(path);
  auto get = [&](const std::string& key) -> const io::AttrValue& {
    auto it = h.root.find(key);
    if (it == h.root.end())
      throw UsageError(
          fmt::format("checkpoint {} lacks attribute '{}': not an mpitron checkpoint", path, key));
    return it->second;
  };
  auto get_int = [&](const std::string& key) {
    const io::AttrValue& v = get(key);
    if (!std::holds_alternative<int64_t>(v))
      throw UsageError(fmt::format("checkpoint {}: attribute '{}' is not an integer", path, key));
    return std::get<int64_t>(v);
  };
  if (get_int("format_version") != kCheckpointFormat)
    throw UsageError(fmt::format("checkpoint {} has format version {}, this build reads {}", path,
                                 get_int("format_version"), kCheckpointFormat));
  CheckpointRecord r;
  const io::AttrValue& type = get("model.type");
  if (!std::holds_alternative<std::string>(type))
    throw UsageError(fmt::format("checkpoint {}: model.type is not a string", path));
  try {
    r.model = default_model_config(std::get<std::string>(type));
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("checkpoint {}: {}", path, e.what()));
  }
  for (const ModelKey& k : model_family(r.model.type).keys)
    if (!k.optional_in_checkpoints || h.root.count("model." + std::string(k.name)))
      r.model.dims[k.name] = get_int("model." + std::string(k.name));
  r.step = get_int("step");
  r.seed = get_int("seed");
  auto optional_int = [&](const std::string& key, int64_t& out) {
    auto it = h.root.find(key);
    if (it != h.root.end() && std::holds_alternative<int64_t>(it->second))
      out = std::get<int64_t>(it->second);
  };
  optional_int("tokens_seen", r.tokens_seen);
  optional_int("layout.dp", r.dp);
  optional_int("layout.tp", r.tp);
  optional_int("layout.pp", r.pp);
  optional_int("layout.zero", r.zero);
  optional_int("train.steps", r.steps);
  optional_int("train.batch_size", r.batch_size);
  optional_int("train.seq_len", r.seq_len);
  optional_int("eval.batches", r.eval_batches);
  if (auto it = h.root.find("train.lr");
      it != h.root.end() && std::holds_alternative<double>(it->second))
    r.lr = std::get<double>(it->second);
  if (auto it = h.root.find("optimizer");
      it != h.root.end() && std::holds_alternative<std::string>(it->second))
    r.optimizer = std::get<std::string>(it->second);
  if (auto it = h.root.find("optim8bit.stage_blocks");
      it != h.root.end() && std::holds_alternative<std::string>(it->second))
    r.adamw8bit_stage_blocks = std::get<std::string>(it->second);
  if (auto it = h.root.find("optim8bit.flat_sizes");
      it != h.root.end() && std::holds_alternative<std::string>(it->second))
    r.adamw8bit_flat_sizes = std::get<std::string>(it->second);
  if (auto it = h.root.find("tokenizer");
      it != h.root.end() && std::holds_alternative<std::string>(it->second))
    r.tokenizer = std::get<std::string>(it->second);
  if (auto d = h.groups.find("data"); d != h.groups.end()) r.data = d->second;
  if (auto g = h.groups.find("loss_scale"); g != h.groups.end()) {
    auto c = g->second.find("current");
    auto k = g->second.find("clean_steps");
    if (c != g->second.end() && std::holds_alternative<double>(c->second))
      r.loss_scale = std::get<double>(c->second);
    if (k != g->second.end() && std::holds_alternative<int64_t>(k->second))
      r.loss_scale_clean_steps = std::get<int64_t>(k->second);
  }
  if (auto p = r.data.find("path");
      p != r.data.end() && std::holds_alternative<std::string>(p->second))
    r.data_path = std::get<std::string>(p->second);
  for (const auto& [key, value] : h.root)
    if (key == "config" || key == "seed" || key.rfind("train.", 0) == 0) r.settings[key] = value;
  return r;
}

void check_same_model(const CheckpointRecord& r, const ModelConfig& m, const std::string& path) {
  if (r.model.type != m.type)
    throw UsageError(fmt::format(
        "checkpoint {} holds a '{}' model, this run trains a '{}' model (use the config it was "
        "trained with)",
        path, r.model.type, m.type));
  for (const auto& [key, value] : m.dims)
    if (r.model.get(key) != value)
      throw UsageError(fmt::format(
          "checkpoint {} is of another model shape: model.{} = {}, this model has {} (use the "
          "config it was trained with)",
          path, key, r.model.get(key), value));
}

namespace {

// Local blocks of a TP-split tensor, cut where a block crosses a part boundary along tp_dim t
// (strided tensors): first into blocks of one index in every dimension above t (so the cut keeps
// row-major order), then along t.
void split_at_parts(const io::Block& b, int t, int64_t part, std::vector<io::Block>& out) {
  const int64_t a = b.start[t], c = b.count[t];
  if (c == 0) return;
  if (a / part == (a + c - 1) / part) {
    out.push_back(b);
    return;
  }
  bool outer_single = true;
  for (int d = 0; d < t; ++d) outer_single = outer_single && b.count[d] == 1;
  if (!outer_single) {
    io::Block row = b;
    std::vector<int64_t> idx(size_t(t), 0);
    while (true) {
      for (int d = 0; d < t; ++d) row.start[d] = b.start[d] + idx[d], row.count[d] = 1;
      split_at_parts(row, t, part, out);
      int d = t - 1;
      for (; d >= 0; --d) {
        if (++idx[d] < b.count[d]) break;
        idx[d] = 0;
      }
      if (d < 0) return;
    }
  }
  for (int64_t s = a; s < a + c;) {
    const int64_t e = std::min(a + c, (s / part + 1) * part);
    io::Block piece = b;
    piece.start[t] = s;
    piece.count[t] = e - s;
    out.push_back(std::move(piece));
    s = e;
  }
}

// A replica another rank writes: TP rank 0 writes what TP replicates, the first pipeline stage
// what it shares with the last (the tied embedding).
bool writes_nothing(const RegistrySlice& slice, const ParamInfo& p, bool replicas_write_once) {
  if (!replicas_write_once) return false;
  return (p.shard.tp_dim < 0 && p.tp_rank != 0) ||
         (p.shard.stage == StageOwner::first_and_last && slice.stage != 0);
}

}  // namespace

std::vector<io::Block> shard_blocks(const ParamInfo& p, size_t local_begin, size_t local_end) {
  MPITRON_REQUIRE(local_begin <= local_end && local_end <= p.numel,
                  fmt::format("{}: local range [{}, {}) outside its {} elements", p.name,
                              local_begin, local_end, p.numel));
  const int t = p.shard.tp_dim;
  // At tp 1 a padded tensor (tp_pad_align) takes the split path with one part: padding dropped.
  if (t < 0 || (p.tp <= 1 && p.numel == p.global_numel()))
    return io::flat_range_blocks(p.global_shape, int64_t(local_begin), int64_t(local_end));
  const int64_t stride = p.shard.tp_stride;
  const int64_t part = p.local_shape[size_t(t)] / stride;    // local rows per part (padded: all)
  const int64_t whole = p.global_shape[size_t(t)] / stride;  // global rows per part
  std::vector<io::Block> local;
  for (const io::Block& b :
       io::flat_range_blocks(p.local_shape, int64_t(local_begin), int64_t(local_end)))
    split_at_parts(b, t, part, local);
  std::vector<io::Block> out;
  out.reserve(local.size());
  for (io::Block& b : local) {
    const int64_t a = b.start[size_t(t)], k = a / part;
    const int64_t g = k * whole + int64_t(p.tp_rank) * part + a % part;
    // Rows past the end of the part are padding (tp_pad, tp_dim 0): a suffix, dropped.
    const int64_t n = std::min(b.count[size_t(t)], (k + 1) * whole - g);
    if (n <= 0) continue;
    b.start[size_t(t)] = g;
    b.count[size_t(t)] = n;
    out.push_back(std::move(b));
  }
  return out;
}

std::vector<io::TensorPiece> parameter_pieces(const ParamRegistry& reg, float* params,
                                              float* buffers, bool with_blocks,
                                              bool replicas_write_once) {
  std::vector<io::TensorPiece> pieces;
  auto add = [&](const std::vector<ParamInfo>& list, const char* group, float* base) {
    for (const ParamInfo& p : list) {
      io::TensorPiece t{std::string(group) + "/" + p.name, p.global_shape, {}, base + p.offset};
      if (with_blocks && !writes_nothing(reg.slice(), p, replicas_write_once))
        t.blocks = shard_blocks(p, 0, p.numel);
      pieces.push_back(std::move(t));
    }
  };
  add(reg.params(), "params", params);
  add(reg.buffers(), "buffers", buffers);
  return pieces;
}

std::vector<io::TensorPiece> parameter_pieces(Model& model, bool with_blocks,
                                              bool replicas_write_once) {
  return parameter_pieces(model.registry, model.params.data(), model.buffers.data(), with_blocks,
                          replicas_write_once);
}

std::vector<io::TensorPiece> moment_pieces(const ParamRegistry& reg, ShardRange shard, float* m,
                                           float* v, bool with_blocks, bool replicas_write_once) {
  std::vector<io::TensorPiece> pieces;
  for (const char* which : {"m", "v"}) {
    float* base = which[0] == 'm' ? m : v;
    for (const ParamInfo& p : reg.params()) {
      const size_t b = std::max(shard.begin, p.offset);
      const size_t e = std::min(shard.end, p.offset + p.numel);
      io::TensorPiece t{"optim/" + p.name + "/" + which, p.global_shape, {}, base};
      if (b < e && with_blocks && !writes_nothing(reg.slice(), p, replicas_write_once)) {
        t.blocks = shard_blocks(p, b - p.offset, e - p.offset);
        t.data = base + (b - shard.begin);
      }
      pieces.push_back(std::move(t));
    }
  }
  return pieces;
}

std::string adamw8bit_group(int pp_rank, int tp_rank) {
  return fmt::format("optim8bit/pp{}_tp{}", pp_rank, tp_rank);
}

std::vector<io::TensorPiece> adamw8bit_pieces(const std::string& group, size_t elements,
                                              const AdamW8bitShard* mine) {
  constexpr size_t B = kAdamW8bitBlock;
  MPITRON_REQUIRE(elements % B == 0, "8-bit AdamW state is stored in whole blocks");
  std::vector<io::TensorPiece> pieces;
  // per: flat elements per dataset element (1: codes, B: absmax values).
  auto add = [&](const char* name, size_t per, uint8_t* codes, float* absmax) {
    io::TensorPiece t{group + "/" + name, {int64_t(elements / per)}, {}, absmax};
    if (per == 1) t.type = io::ElementType::u8, t.codes = codes;
    if (mine) {
      const size_t b = mine->shard.begin / per, e = std::min(mine->shard.end, elements) / per;
      if (b < e) t.blocks.push_back(io::Block{{int64_t(b)}, {int64_t(e - b)}});
    }
    pieces.push_back(std::move(t));
  };
  add("m_codes", 1, mine ? mine->m_codes : nullptr, nullptr);
  add("v_codes", 1, mine ? mine->v_codes : nullptr, nullptr);
  add("m_absmax", B, nullptr, mine ? mine->m_absmax : nullptr);
  add("v_absmax", B, nullptr, mine ? mine->v_absmax : nullptr);
  return pieces;
}

std::vector<io::TensorPiece> pieces_for_every_stage(std::vector<io::TensorPiece> local,
                                                    const ParamRegistry& whole, bool with_moments) {
  std::map<std::string, io::TensorPiece*> mine;
  for (io::TensorPiece& t : local) mine[t.dataset] = &t;
  std::vector<io::TensorPiece> all;
  auto take = [&](const std::string& dataset, const std::vector<int64_t>& shape) {
    auto it = mine.find(dataset);
    if (it != mine.end()) {
      all.push_back(std::move(*it->second));
      mine.erase(it);
    } else {
      all.push_back(io::TensorPiece{dataset, shape, {}, nullptr});
    }
  };
  for (const ParamInfo& p : whole.params()) take("params/" + p.name, p.global_shape);
  for (const ParamInfo& p : whole.buffers()) take("buffers/" + p.name, p.global_shape);
  if (with_moments)
    for (const char* which : {"m", "v"})
      for (const ParamInfo& p : whole.params())
        take("optim/" + p.name + "/" + which, p.global_shape);
  MPITRON_REQUIRE(mine.empty(), "a stage holds a tensor the whole network does not");
  return all;
}

std::unique_ptr<Model> load_model(const std::string& path, const ModelConfig& model_config,
                                  ModelBuild how) {
  std::unique_ptr<Model> model = build_model(model_config, how);
  io::read_checkpoint_tensors(path, parameter_pieces(*model, true));
  return model;
}

}  // namespace mpitron
