// mpitron train: the preset and its overrides, the flags that override them, the data checks the
// command line can make before any MPI work, then run_training (src/train/trainer.hpp).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "base/check.hpp"
#include "comm/world.hpp"
#include "io/dataset.hpp"
#include "src/cli/cli.hpp"
#include "src/model/family.hpp"
#include "src/train/batch_source.hpp"
#include "src/train/memory_plan.hpp"

namespace mpitron::cli {

namespace {

// A token file of a WordPiece vocabulary: the model's special ids must be the vocabulary's, or
// [MASK] would be some word. The vocabulary is read where the file says it was; if it moved,
// nothing is checked.
void check_special_tokens(const io::TokenFileInfo& info, const ModelConfig& model,
                          const std::string& data_path) {
  if (is_wordpiece_vocabulary(info.tokenizer) && std::filesystem::exists(info.tokenizer))
    require_vocabulary_special_ids(info.tokenizer, model, "the tokens of " + data_path);
}

}  // namespace

// The presets shipped in configs/: under the working directory, beside the executable's folder
// (a build folder inside the checkout), then in the source tree CMake was configured from (a
// build folder anywhere). The first folder holding any wins.
std::string preset_list() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> dirs{fs::path("configs"), exe.parent_path().parent_path() / "configs"};
#ifdef MPITRON_SOURCE_DIR
  dirs.push_back(fs::path(MPITRON_SOURCE_DIR) / "configs");
#endif
  for (const fs::path& dir : dirs) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".toml") names.push_back((dir / e.path().filename()).string());
    std::sort(names.begin(), names.end());
    if (!names.empty()) return fmt::format("presets: {}", fmt::join(names, ", "));
  }
  return "no presets found (configs/*.toml in the source tree)";
}

int cmd_train(TrainArgs a) {
  if (a.help_config) {
    fmt::print("{}", config_keys_help());
    return 0;
  }
  // Every rank checks its own view of the files (a data file may be missing on one node only);
  // all agree before any work, and the message names the host where it failed on some only.
  std::string error;
  TrainOptions opts;
  try {
    opts = train_options(a, true);
  } catch (const UsageError& e) {
    error = e.what();
  }
  comm::throw_first_error_naming_host(error, MPI_COMM_WORLD);
  return run_training(std::move(opts));
}

int cmd_data_path(TrainArgs a) {
  const TrainOptions opts = train_options(a, false);
  fmt::print("{}\n", preset_data(opts.cfg));
  return 0;
}

TrainOptions train_options(TrainArgs& a, bool check_data) {
  const std::string& config_path = a.config_path;
  std::string& data_path = a.data_path;
  TrainOptions& opts = a.opts;
  if (config_path.empty()) throw UsageError(fmt::format("--config is required: {}", preset_list()));
  if (const std::string why = wrong_kind_of_path(config_path, false); !why.empty())
    throw UsageError(fmt::format("config file '{}' {}; {}", config_path, why, preset_list()));
  opts.cfg = load_run_config(config_path, a.overrides);
  TrainConfig& t = opts.cfg.train;
  if (a.steps) t.steps = *a.steps;
  if (a.batch_size) t.batch_size = *a.batch_size;
  if (a.seq_len) t.seq_len = *a.seq_len;
  if (a.lr) t.lr = *a.lr;
  if (a.warmup) t.warmup_steps = *a.warmup;
  if (a.seed) t.seed = *a.seed;
  if (a.dropout) t.dropout = *a.dropout;
  if (a.micro_batches) t.micro_batches = *a.micro_batches;
  if (a.bitwise) t.bitwise = 1;
  if (a.reduction_shards) t.reduction_shards = *a.reduction_shards;
  if (a.tp_shards) t.tp_shards = *a.tp_shards;
  if (a.ckpt_every) t.ckpt_every = *a.ckpt_every;
  if (a.eval_every) t.eval_every = *a.eval_every;
  if (a.eval_batches) t.eval_batches = *a.eval_batches;
  if (a.log_every) t.log_every = *a.log_every;
  const ModelFamily& family = model_family(opts.cfg.model.type);
  if (!a.max_device_memory.empty())
    opts.max_device_memory = parse_byte_size(a.max_device_memory, "--max-device-memory");
  opts.layout.dp_reduce = parse_dp_reduce(a.dp_reduce);
  opts.layout.schedule = pipeline::parse_schedule(a.schedule);
  opts.layout.recompute = a.recompute == "block";
  opts.device = parse_device(a.device);
  opts.comm = parse_comm(a.comm);
  opts.precision = parse_precision(a.precision);
  opts.optimizer = parse_optimizer(a.optimizer);
  opts.offload_optimizer = a.offload != "none";
  opts.offload_master = a.offload == "optimizer,master";
  if (!check_data) return opts;
  if (data_path.empty()) {
    data_path = preset_data(opts.cfg);
    if (!std::filesystem::exists(data_path))
      throw UsageError(
          opts.cfg.data.empty()
              ? fmt::format("default data {} does not exist: {}", data_path,
                            default_data_hint(family, opts.cfg.model))
              : fmt::format("{}'s data {} ([data] path) does not exist: prepare it with "
                            "io/prepare_data.sh {}, or pass --data",
                            config_path, data_path, config_path));
  }
  opts.data = data_path;
  if (family.data(opts.cfg.model) == DataKind::text && io::is_token_file(data_path)) {
    const io::TokenFileInfo info = io::read_token_file_info(data_path);
    check_vocab("the token file " + data_path, info.vocab_size, config_path,
                family.classes(opts.cfg.model));
    check_special_tokens(info, opts.cfg.model, data_path);
  }
  return opts;
}

}  // namespace mpitron::cli
