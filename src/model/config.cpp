#include "src/model/config.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <toml.hpp>

#include "src/check.hpp"
#include "src/model/family.hpp"

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
  std::string type = "gpt";
  if (root.contains("model") && toml::find(root, "model").is_table() &&
      toml::find(root, "model").contains("type")) {
    const auto& v = toml::find(root, "model", "type");
    if (!v.is_string()) throw UsageError(fmt::format("{}: 'model.type' must be a string", path));
    type = v.as_string();
  }
  try {
    cfg.model = default_model_config(type);
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("{}: {}", path, e.what()));
  }
  std::map<std::string, std::function<void(const toml::value&)>> model_keys{
      {"type", [](const toml::value&) {}}};
  for (auto& [key, value] : cfg.model.dims) model_keys[key] = setter(value);
  read_table(root, "model", model_keys, path);
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

int64_t ModelConfig::get(const std::string& key) const {
  auto it = dims.find(key);
  if (it == dims.end())
    throw UsageError(fmt::format("model of type '{}' has no key '{}'", type, key));
  return it->second;
}

ModelConfig default_model_config(const std::string& type) {
  const ModelFamily& f = model_family(type);
  ModelConfig m{type, {}};
  for (const ModelKey& k : f.keys) m.dims[k.name] = k.default_value;
  return m;
}

void validate_config(const RunConfig& cfg) {
  auto positive = [](const std::string& name, int64_t v) {
    if (v <= 0) throw UsageError(fmt::format("{} must be positive (got {})", name, v));
  };
  const TrainConfig& t = cfg.train;
  const ModelFamily& family = model_family(cfg.model.type);
  for (const ModelKey& k : family.keys)
    if (k.must_be_positive) positive(k.name, cfg.model.get(k.name));
  positive("batch_size", t.batch_size);
  positive("seq_len", t.seq_len);
  positive("micro_batches", t.micro_batches);
  positive("eval_batches", t.eval_batches);
  if (t.steps < 0) throw UsageError(fmt::format("steps must not be negative (got {})", t.steps));
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
  family.validate(cfg.model, t);
}

}  // namespace mpitron
