// Run presets: a TOML file with a [model] table (the GPT shape) and a [train] table (defaults of
// the training flags). Unknown keys and impossible values are refused with one clear line.
#pragma once
#include <cstdint>
#include <string>

namespace mpitron {

struct GptConfig {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int block_size = 64;   // longest sequence the position embedding covers
  int vocab_size = 256;  // byte-level by default
};

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
  double dropout = 0.1;
  uint64_t seed = 1337;
  int eval_every = 100;  // 0 disables evaluation
  int eval_batches = 4;  // global batches of validation data per evaluation
  int ckpt_every = 0;    // 0: only the final checkpoint
  int log_every = 10;
  int micro_batches = 1;  // gradient accumulation steps per global batch
};

struct RunConfig {
  std::string name = "gpt";  // preset name, for run folder names
  GptConfig model;
  TrainConfig train;
};

// Reads a preset; throws UsageError for a missing file, bad TOML, unknown keys or wrong types.
RunConfig load_run_config(const std::string& path);

// Throws UsageError naming the first impossible value (non-positive sizes, n_embd % n_head,
// seq_len > block_size, ...).
void validate_config(const RunConfig& cfg);

// Number of parameters of a GPT of this shape (tied LM head counted once).
int64_t gpt_parameter_count(const GptConfig& m);

}  // namespace mpitron
