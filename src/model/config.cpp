#include "src/model/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string_view>
#include <toml.hpp>

#include "base/check.hpp"
#include "src/model/family.hpp"

namespace mpitron {

namespace {

// A key's value of another TOML type than its field's: what was expected and what was given.
struct WrongType {
  std::string expected, got;
};

std::string toml_kind(const toml::value& v) {
  switch (v.type()) {
    case toml::value_t::boolean:
      return "a boolean";
    case toml::value_t::integer:
      return "an integer";
    case toml::value_t::floating:
      return "a number";
    case toml::value_t::string:
      return "a string";
    case toml::value_t::array:
      return "an array";
    case toml::value_t::table:
      return "a table";
    default:
      return "a date or time";
  }
}

template <class T>
std::function<void(const toml::value&)> setter(T& field) {
  return [&field](const toml::value& v) {
    try {
      if constexpr (std::is_same_v<T, double>) {
        field = v.is_integer() ? double(v.as_integer()) : toml::get<double>(v);
      } else {
        field = toml::get<T>(v);
      }
    } catch (const toml::type_error&) {
      const char* expected = std::is_same_v<T, std::string> ? "a string"
                             : std::is_floating_point_v<T>  ? "a number"
                                                            : "an integer";
      throw WrongType{expected, toml_kind(v)};
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
    } catch (const WrongType& w) {
      throw UsageError(fmt::format(
          "{}: '{}.{}' has the wrong type: {} is expected, not {}{}", path, table, key, w.expected,
          w.got, w.expected == std::string("a string") && !value.is_string() ? " (quote it)" : ""));
    }
  }
}

// Offset of the first byte that is not part of well-formed UTF-8, or -1. TOML documents are UTF-8,
// and toml11 3.7 reads out of bounds when it reports a malformed sequence inside a string, so
// such input is refused before parsing.
std::ptrdiff_t invalid_utf8_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return std::ptrdiff_t(i);
    }
    if (i + n >= s.size()) return std::ptrdiff_t(i);  // the sequence is cut off
    for (size_t k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return std::ptrdiff_t(i);
      cp = cp << 6 | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return std::ptrdiff_t(i);
    i += n + 1;
  }
  return -1;
}

// "model.n_layer=6": the value as TOML (6, 3e-4, "text", true), or as a string when it is not
// TOML (model.type=mlp).
void apply_override(toml::value& root, const std::string& assignment) {
  const size_t eq = assignment.find('='), dot = assignment.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq)
    throw UsageError(fmt::format(
        "--set '{}' is not section.key=value (for example --set model.n_layer=6)", assignment));
  const std::string table = assignment.substr(0, dot),
                    key = assignment.substr(dot + 1, eq - dot - 1);
  const std::string text = assignment.substr(eq + 1);
  if (table != "model" && table != "train" && table != "data")
    throw UsageError(fmt::format("--set {}: the sections are model, train and data", assignment));
  if (invalid_utf8_at(assignment) >= 0)
    throw UsageError(fmt::format("--set {}: not valid UTF-8", assignment));
  toml::value value;
  try {
    std::istringstream in("v = " + text);
    value = toml::find(toml::parse(in, "--set"), "v");
  } catch (const std::exception&) {
    value = toml::value(text);
  }
  if (!root.contains(table)) root.as_table()[table] = toml::table{};
  if (!root.as_table()[table].is_table())
    throw UsageError(fmt::format("--set {}: '{}' in the file is not a table", assignment, table));
  root.as_table()[table].as_table()[key] = value;
}

}  // namespace

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  if (const std::string why = wrong_kind_of_path(path, false); !why.empty())
    throw UsageError(fmt::format("config file '{}' {}", path, why));
  std::ifstream file(path, std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  if (const std::ptrdiff_t at = invalid_utf8_at(text); at >= 0)
    throw UsageError(fmt::format("{}: not valid TOML: byte {} is not valid UTF-8", path, at));
  toml::value root;
  try {
    std::istringstream in(text);
    root = toml::parse(in, path);
  } catch (const std::exception& e) {
    std::string what = e.what();
    throw UsageError(fmt::format("{}: not valid TOML: {}", path, what.substr(0, what.find('\n'))));
  }
  for (const std::string& o : overrides) apply_override(root, o);
  const std::string source = overrides.empty() ? path : path + " with --set";
  RunConfig cfg;
  cfg.name = std::filesystem::path(path).stem().string();
  for (const auto& [key, _] : root.as_table())
    if (key != "model" && key != "train" && key != "data" && key != "name")
      throw UsageError(fmt::format(
          "{}: unknown table or key '{}' (expected [model], [train], [data])", path, key));
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
  read_table(root, "model", model_keys, source);
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
              {"loss_scale", setter(t.loss_scale)},
              {"loss_scale_window", setter(t.loss_scale_window)},
              {"dropout", setter(t.dropout)},
              {"seed", setter(seed)},
              {"eval_every", setter(t.eval_every)},
              {"eval_batches", setter(t.eval_batches)},
              {"ckpt_every", setter(t.ckpt_every)},
              {"log_every", setter(t.log_every)},
              {"micro_batches", setter(t.micro_batches)},
              {"bitwise", setter(t.bitwise)},
              {"reduction_shards", setter(t.reduction_shards)},
              {"tp_shards", setter(t.tp_shards)},
              {"augment", setter(t.augment)},
              {"fixed_batch", setter(t.fixed_batch)},
              {"bleu_every", setter(t.bleu_every)},
              {"bleu_lines", setter(t.bleu_lines)},
              {"length_buckets", setter(t.length_buckets)},
              {"objective", setter(t.objective)},
              {"span_context_words", setter(t.span_context_words)},
              {"span_loss", setter(t.span_loss)},
              {"span_drop_words", setter(t.span_drop_words)}},
             source);
  t.seed = uint64_t(seed);
  read_table(root, "data", {{"path", setter(cfg.data)}}, source);
  if (root.contains("data") && cfg.data.empty())
    throw UsageError(
        fmt::format("{}: 'data.path' is empty (leave [data] out for the family's "
                    "default data)",
                    source));
  return cfg;
}

std::string config_keys_help() {
  const TrainConfig d;
  struct Key {
    const char* name;
    std::string value;
    const char* meaning;
  };
  const Key train[] = {
      {"batch_size", fmt::format("{}", d.batch_size), "global batch, in samples"},
      {"seq_len", fmt::format("{}", d.seq_len), "tokens per sequence (text)"},
      {"steps", fmt::format("{}", d.steps), "optimizer steps"},
      {"lr", fmt::format("{}", d.lr), "peak learning rate"},
      {"min_lr_ratio", fmt::format("{}", d.min_lr_ratio), "cosine decay ends at lr x this"},
      {"warmup_steps", fmt::format("{}", d.warmup_steps), "linear warm-up steps"},
      {"weight_decay", fmt::format("{}", d.weight_decay), "AdamW decay of weight matrices"},
      {"beta1", fmt::format("{}", d.beta1), "AdamW first-moment decay"},
      {"beta2", fmt::format("{}", d.beta2), "AdamW second-moment decay"},
      {"eps", fmt::format("{}", d.eps), "AdamW epsilon"},
      {"grad_clip", fmt::format("{}", d.grad_clip), "clip the global gradient norm (0: never)"},
      {"loss_scale", fmt::format("{}", d.loss_scale),
       "initial dynamic loss scale, a power of two; 0: 2^16 under --precision fp16, no "
       "scaling in fp32 and bf16"},
      {"loss_scale_window", fmt::format("{}", d.loss_scale_window),
       "clean steps before the loss scale doubles"},
      {"dropout", fmt::format("{}", d.dropout), "dropout probability"},
      {"seed", fmt::format("{}", d.seed), "initialisation, data order and dropout"},
      {"eval_every", fmt::format("{}", d.eval_every), "validation every N steps (0: at the end)"},
      {"eval_batches", fmt::format("{}", d.eval_batches), "global batches per validation"},
      {"ckpt_every", fmt::format("{}", d.ckpt_every), "checkpoint every N steps (0: at the end)"},
      {"log_every", fmt::format("{}", d.log_every), "progress line every N steps"},
      {"micro_batches", fmt::format("{}", d.micro_batches), "micro-batches per rank and step"},
      {"bitwise", fmt::format("{}", d.bitwise),
       "1 = every layout trains the same bits as one process (--bitwise): fixed-order sums over "
       "reduction shards"},
      {"reduction_shards", fmt::format("{}", d.reduction_shards),
       "bitwise: shards of the global batch, one micro-batch each (0: gcd(batch_size, 24))"},
      {"tp_shards", fmt::format("{}", d.tp_shards),
       "bitwise: TP shards of every split sum (a power of two that --tp divides)"},
      {"augment", fmt::format("{}", d.augment),
       "images: 1 = random crop (2-pixel padding) and flip"},
      {"fixed_batch", fmt::format("{}", d.fixed_batch),
       "1 = every step trains on step 1's batch (overfit one batch: can the model learn it, "
       "memory and speed at a fixed batch)"},
      {"bleu_every", fmt::format("{}", d.bleu_every),
       "translation: validation BLEU every N steps and at the end (0: never)"},
      {"bleu_lines", fmt::format("{}", d.bleu_lines),
       "translation: validation pairs BLEU translates (0: all)"},
      {"length_buckets", fmt::format("{}", d.length_buckets),
       "translation: each batch from one of N length buckets, as long as its longest pair (0: "
       "off)"},
      {"objective", "\"" + d.objective + "\"",
       "gpt on text: \"next_token\", \"span_corruption\" (prefix [MASK] suffix [MASK] span) or "
       "\"name_span_corruption\" (the span a name)"},
      {"span_context_words", fmt::format("{}", d.span_context_words),
       "name_span_corruption: 0 = the line's start; K > 0 = the name and 0-K words each side"},
      {"span_loss", "\"" + d.span_loss + "\"",
       "span corruption's loss: \"all\" (every position to [END]) or \"span\" (span and [END])"},
      {"span_drop_words", fmt::format("{}", d.span_drop_words),
       "name windows: the probability each word but the name's is left out"},
  };
  std::string out =
      "Config keys (TOML tables [model] and [train]; flags and --set section.key=value override "
      "them):\n\n[train]\n";
  // One column width for every table: the longest key and value.
  size_t name_w = 0, value_w = 0;
  for (const Key& k : train) {
    name_w = std::max(name_w, std::string_view(k.name).size());
    value_w = std::max(value_w, k.value.size());
  }
  for (const ModelFamily& f : model_families())
    for (const ModelKey& k : f.keys) {
      name_w = std::max(name_w, std::string_view(k.name).size());
      value_w = std::max(value_w, fmt::format("{}", k.default_value).size());
    }
  auto row = [&](std::string_view name, const std::string& value, std::string_view meaning) {
    return fmt::format("  {:<{}} {:<{}} {}\n", name, name_w, value, value_w, meaning);
  };
  for (const Key& k : train) out += row(k.name, k.value, k.meaning);
  for (const ModelFamily& f : model_families()) {
    out += fmt::format("\n[model] type = \"{}\": {}\n", f.type, f.description);
    for (const ModelKey& k : f.keys)
      out += row(k.name, fmt::format("{}", k.default_value), k.meaning);
  }
  return out;
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
  if (t.length_buckets < 0)
    throw UsageError(fmt::format("length_buckets must not be negative (got {})", t.length_buckets));
  if (t.bleu_every < 0 || t.bleu_lines < 0)
    throw UsageError(fmt::format("bleu_every and bleu_lines must not be negative (got {}, {})",
                                 t.bleu_every, t.bleu_lines));
  if (t.fixed_batch != 0 && t.fixed_batch != 1)
    throw UsageError(
        fmt::format("fixed_batch must be 0 (off) or 1 (every step trains on step 1's "
                    "batch) (got {})",
                    t.fixed_batch));
  if (t.bitwise != 0 && t.bitwise != 1)
    throw UsageError(fmt::format("bitwise must be 0 (off) or 1 (on) (got {})", t.bitwise));
  if (t.reduction_shards < 0)
    throw UsageError(fmt::format(
        "reduction_shards must be 0 (gcd(batch_size, 24)) or a number of shards (got {})",
        t.reduction_shards));
  if (t.tp_shards < 1 || (t.tp_shards & (t.tp_shards - 1)) != 0)
    throw UsageError(
        fmt::format("tp_shards must be a power of two (1, 2, 4, 8, ...) (got {})", t.tp_shards));
  if (t.augment != 0 && t.augment != 1)
    throw UsageError(
        fmt::format("augment must be 0 (off) or 1 (crop and flip) (got {})", t.augment));
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
  if (t.loss_scale != 0) {
    int exponent = 0;
    // A power of two scales every gradient exactly: the same bits after unscaling.
    if (!(std::isfinite(t.loss_scale) && t.loss_scale > 0 &&
          std::frexp(t.loss_scale, &exponent) == 0.5 && exponent - 1 >= -126 &&
          exponent - 1 <= 127))
      throw UsageError(fmt::format(
          "loss_scale must be 0 (fp16: 2^16; fp32, bf16: no scaling) or a power of two from "
          "2^-126 to 2^127 (got {})",
          t.loss_scale));
  }
  if (t.loss_scale_window < 1)
    throw UsageError(
        fmt::format("loss_scale_window must be at least 1 (got {})", t.loss_scale_window));
  family.validate(cfg.model, t);
}

}  // namespace mpitron
