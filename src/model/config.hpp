// Run presets: a TOML file with a [model] table (the family's `type` and its shape keys), a
// [train] table (defaults of the training flags) and an optional [data] table (`path`). Unknown
// keys and impossible values are refused with one clear line.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mpitron {

// A model's shape as every family states it: its type and integer keys (n_layer, hidden, ...),
// each family's keys all present. Checkpoints store it as model.type and model.<key>.
struct ModelConfig {
  std::string type = "gpt";
  std::map<std::string, int64_t> dims;
  int64_t get(const std::string& key) const;  // UsageError when the key is missing
};

// The family's keys at their defaults (UsageError for an unknown type).
ModelConfig default_model_config(const std::string& type);

struct TrainConfig {
  int batch_size = 16;  // global, in sequences
  int seq_len = 64;
  int steps = 500;
  double lr = 1e-3;
  double min_lr_ratio = 0.1;  // cosine decay ends at lr * min_lr_ratio
  int warmup_steps = 20;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // clip by global norm; 0 disables
  // Dynamic loss scaling (for fp16): the loss's gradient is multiplied by the scale, a power of
  // two, and the gradients divided by it again; a step whose gradients overflow is skipped and
  // halves the scale, loss_scale_window clean steps double it. 0: 2^16 under fp16, else no
  // scaling (Trainer::initial_loss_scale).
  double loss_scale = 0;
  int loss_scale_window = 2000;
  double dropout = 0.1;
  uint64_t seed = 1337;
  int eval_every = 100;  // 0 disables evaluation
  int eval_batches = 4;  // global batches of validation data per evaluation
  int ckpt_every = 0;    // 0: only the final checkpoint
  int log_every = 10;
  int micro_batches = 1;  // gradient accumulation steps per global batch
  // 1: every layout trains the same bits (src/train/reduction_tree.hpp): the batch in
  // reduction_shards shards of equal rows (0: gcd(batch_size, 24)), one micro-batch each, whose
  // gradients, losses and batch-norm sums are summed in one fixed tree.
  int bitwise = 0;
  int reduction_shards = 0;
  // bitwise: the TP shards of every split sum (a power of two; tp must divide it): at tp 1 too
  // the row-parallel products are summed over its K-slices.
  int tp_shards = 4;
  int augment = 0;      // images: 1 = random 2-pixel shifts and horizontal flips in training
  int fixed_batch = 0;  // 1: every step trains on step 1's batch (overfitting one batch)
  int bleu_every = 0;   // translation pairs: validation BLEU every N steps and at the end; 0 off
  int bleu_lines = 0;   // validation pairs the BLEU translates (0: all)
  // Translation pairs: training batches drawn from one of N length buckets each, their rows as
  // long as the batch's longest pair (io::PairBuckets); 0: any pair, rows of seq_len
  int length_buckets = 0;
  // gpt on text: "next_token", "span_corruption" (io/span_corruption.hpp: fill a cut-out span) or
  // "name_span_corruption" (the cut-out span is a name)
  std::string objective = "next_token";
  // name_span_corruption: 0, the line's start truncated as span_corruption; K > 0, the document is
  // the name with 0 to K words on each side (io/span_corruption.hpp)
  int span_context_words = 0;
  // span corruption's loss terms: "all" (every position up to [END]) or "span" (the span, [END])
  std::string span_loss = "all";
  // name windows: the probability each word but the name's is left out (0: none)
  double span_drop_words = 0;
};

struct RunConfig {
  std::string name = "gpt";  // preset name, for run folder names
  ModelConfig model = default_model_config("gpt");
  TrainConfig train;
  // [data] path: what the preset trains on when --data is not given ("": the family's default).
  // Relative paths are relative to where mpitron runs (the checkout, as --data's are).
  std::string data;
};

// Reads a preset; throws UsageError for a missing file, bad TOML, unknown keys or wrong types.
// overrides: "section.key=value" assignments (--set), applied over the file's tables.
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides = {});

// Every [train] key and every model family's [model] keys, with defaults and meanings
// (`mpitron train --help-config`).
std::string config_keys_help();

// Throws UsageError naming the first impossible value (non-positive sizes, then the family's own
// checks: n_embd % n_head, seq_len > block_size, ...).
void validate_config(const RunConfig& cfg);

}  // namespace mpitron
