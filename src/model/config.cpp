#include "src/model/config.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <toml.hpp>

#include "src/check.hpp"

namespace mpitron {

namespace {

template <class T>
std::function<void(const toml::value&)> setter(T& field) {
  return [&field](const toml::value& v) {
    if constexpr (std::is_same_v<T, double>) {
      field = v.is_integer() ? double(v.as_integer()) : toml::get<double>(v);
    } else {
      field = toml::get<T>(v);
    }
  };
}

void read_table(const toml::value& root, const std::string& table,
                const std::map<std::string, std::function<void(const toml::value&)>>& keys,
                const std::string& path) {
  if (!root.contains(table)) return;
  const auto& t = toml::find(root, table);
  if (!t.is_table()) throw UsageError(fmt::format("{}: '{}' must be a table", path, table));
  for (const auto& [key, value] : t.as_table()) {
    auto it = keys.find(key);
    if (it == keys.end()) {
      std::string known;
      for (const auto& [k, _] : keys) known += (known.empty() ? "" : ", ") + k;
      throw UsageError(
          fmt::format("{}: unknown key '{}.{}' (known keys: {})", path, table, key, known));
    }
    try {
      it->second(value);
    } catch (const toml::type_error&) {
      throw UsageError(fmt::format("{}: '{}.{}' has the wrong type", path, table, key));
    }
  }
}

}  // namespace

RunConfig load_run_config(const std::string& path) {
  if (!std::filesystem::is_regular_file(path))
    throw UsageError(fmt::format("config file '{}' does not exist", path));
  toml::value root;
  try {
    root = toml::parse(path);
  } catch (const std::exception& e) {
    std::string what = e.what();
    throw UsageError(fmt::format("{}: not valid TOML: {}", path, what.substr(0, what.find('\n'))));
  }
  RunConfig cfg;
  cfg.name = std::filesystem::path(path).stem().string();
  for (const auto& [key, _] : root.as_table())
    if (key != "model" && key != "train" && key != "name")
      throw UsageError(
          fmt::format("{}: unknown table or key '{}' (expected [model], [train])", path, key));
  if (root.contains("name")) {
    if (!toml::find(root, "name").is_string())
      throw UsageError(fmt::format("{}: 'name' must be a string", path));
    cfg.name = toml::find<std::string>(root, "name");
  }
  GptConfig& m = cfg.model;
  read_table(root, "model",
             {{"type",
               [&](const toml::value& v) {
                 if (toml::get<std::string>(v) != "gpt")
                   throw UsageError(fmt::format("{}: model.type '{}' is not supported (gpt)", path,
                                                toml::get<std::string>(v)));
               }},
              {"n_layer", setter(m.n_layer)},
              {"n_head", setter(m.n_head)},
              {"n_embd", setter(m.n_embd)},
              {"block_size", setter(m.block_size)},
              {"vocab_size", setter(m.vocab_size)}},
             path);
  TrainConfig& t = cfg.train;
  int64_t seed = int64_t(t.seed);
  read_table(root, "train",
             {{"batch_size", setter(t.batch_size)},
              {"seq_len", setter(t.seq_len)},
              {"steps", setter(t.steps)},
              {"lr", setter(t.lr)},
              {"min_lr_ratio", setter(t.min_lr_ratio)},
              {"warmup_steps", setter(t.warmup_steps)},
              {"weight_decay", setter(t.weight_decay)},
              {"beta1", setter(t.beta1)},
              {"beta2", setter(t.beta2)},
              {"eps", setter(t.eps)},
              {"grad_clip", setter(t.grad_clip)},
              {"dropout", setter(t.dropout)},
              {"seed", setter(seed)},
              {"eval_every", setter(t.eval_every)},
              {"eval_batches", setter(t.eval_batches)},
              {"ckpt_every", setter(t.ckpt_every)},
              {"log_every", setter(t.log_every)},
              {"micro_batches", setter(t.micro_batches)}},
             path);
  t.seed = uint64_t(seed);
  return cfg;
}

void validate_config(const RunConfig& cfg) {
  auto positive = [](const char* name, int64_t v) {
    if (v <= 0) throw UsageError(fmt::format("{} must be positive (got {})", name, v));
  };
  const GptConfig& m = cfg.model;
  const TrainConfig& t = cfg.train;
  positive("n_layer", m.n_layer);
  positive("n_head", m.n_head);
  positive("n_embd", m.n_embd);
  positive("block_size", m.block_size);
  positive("vocab_size", m.vocab_size);
  if (m.n_embd % m.n_head != 0)
    throw UsageError(
        fmt::format("n_embd ({}) must be divisible by n_head ({})", m.n_embd, m.n_head));
  positive("batch_size", t.batch_size);
  positive("seq_len", t.seq_len);
  positive("micro_batches", t.micro_batches);
  positive("eval_batches", t.eval_batches);
  if (t.steps < 0) throw UsageError(fmt::format("steps must not be negative (got {})", t.steps));
  if (t.seq_len > m.block_size)
    throw UsageError(
        fmt::format("seq_len ({}) exceeds the model's block_size ({})", t.seq_len, m.block_size));
  if (!(t.lr > 0 && std::isfinite(t.lr)))
    throw UsageError(fmt::format("lr must be positive (got {})", t.lr));
  if (!(t.dropout >= 0 && t.dropout < 1))
    throw UsageError(fmt::format("dropout must be in [0, 1) (got {})", t.dropout));
  if (!(t.beta1 >= 0 && t.beta1 < 1) || !(t.beta2 >= 0 && t.beta2 < 1))
    throw UsageError(
        fmt::format("beta1 and beta2 must be in [0, 1) (got {}, {})", t.beta1, t.beta2));
  if (!(t.eps > 0 && std::isfinite(t.eps))) throw UsageError("eps must be positive");
  if (!(t.min_lr_ratio >= 0 && t.min_lr_ratio <= 1))
    throw UsageError(fmt::format("min_lr_ratio must be in [0, 1] (got {})", t.min_lr_ratio));
  if (!(t.weight_decay >= 0 && std::isfinite(t.weight_decay)))
    throw UsageError("weight_decay must be a finite number >= 0");
  if (t.warmup_steps < 0 || t.eval_every < 0 || t.ckpt_every < 0 || t.log_every < 0)
    throw UsageError("warmup_steps, eval_every, ckpt_every and log_every must not be negative");
  if (!(t.grad_clip >= 0 && std::isfinite(t.grad_clip)))
    throw UsageError("grad_clip must be a finite number >= 0 (0: no clipping)");
}

int64_t gpt_parameter_count(const GptConfig& m) {
  int64_t C = m.n_embd;
  int64_t per_block =
      2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C);
  return int64_t(m.vocab_size) * C + int64_t(m.block_size) * C + m.n_layer * per_block + 2 * C;
}

}  // namespace mpitron
