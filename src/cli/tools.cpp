// The smaller commands: compare two traces, info on a file, write token batches, simulate a
// pipeline schedule, import and export Hugging Face weights, list devices.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>

#include "base/check.hpp"
#include "base/gemm.hpp"
#include "io/arrays.hpp"
#include "io/bleu.hpp"
#include "io/checkpoint.hpp"
#include "io/compare_bits.hpp"
#include "io/dataset.hpp"
#include "io/inspect.hpp"
#include "io/text_lines.hpp"
#include "src/cli/cli.hpp"
#include "src/pipeline/schedule_chart.hpp"
#include "src/train/pretrained.hpp"

#ifdef MPITRON_HAVE_NCCL
#include <nccl.h>
#endif
#ifdef MPITRON_HAVE_CUDNN
#include <cudnn_version.h>
#endif
#ifdef MPITRON_HAVE_CUDA
#include "src/cuda/device_query.hpp"
#endif

namespace mpitron::cli {

// Exit 1 when the loss curves differ beyond rtol or do not cover the same steps once each.
int cmd_compare(const std::string& a, const std::string& b, double rtol, bool allow_partial) {
  const io::TraceComparison c = io::compare_traces(a, b);
  fmt::print(
      "steps compared: {}\nmax relative loss difference: {:.3e} (step {})\n"
      "steps within 1%: {:.2f}%\n",
      c.steps_compared, c.max_rel_diff, c.worst_step, 100.0 * c.frac_within_1pct);
  if (c.val_compared > 0)
    fmt::print("max relative validation loss difference: {:.3e} ({} evaluations)\n",
               c.max_val_rel_diff, c.val_compared);
  if (c.steps_only_in_one > 0) fmt::print("steps in only one trace: {}\n", c.steps_only_in_one);
  if (c.duplicate_steps > 0) fmt::print("repeated steps: {}\n", c.duplicate_steps);
  if (c.steps_compared == 0) {
    fmt::print(stderr, "error: the traces have no step in common\n");
    return 1;
  }
  if (std::max(c.max_rel_diff, c.max_val_rel_diff) > rtol) {
    fmt::print("DIFFERENT: {:.3e} exceeds --rtol {:.1e}\n",
               std::max(c.max_rel_diff, c.max_val_rel_diff), rtol);
    return 1;
  }
  if (!allow_partial && (c.steps_only_in_one > 0 || c.duplicate_steps > 0)) {
    fmt::print(
        "DIFFERENT: the traces do not cover the same steps once each "
        "(--allow-partial compares the common ones)\n");
    return 1;
  }
  fmt::print("SAME within --rtol {:.1e}\n", rtol);
  return 0;
}

int cmd_compare_bits(const std::string& a, const std::string& b) {
  const io::BitComparison c = io::compare_bits(a, b);
  constexpr size_t kShown = 12;
  for (size_t k = 0; k < std::min(c.differences.size(), kShown); ++k)
    fmt::print("{}\n", c.differences[k]);
  if (c.differences.size() > kShown)
    fmt::print("... and {} more differences\n", c.differences.size() - kShown);
  const char* unit = c.kind == "trace" ? "steps" : "datasets";
  if (!c.differences.empty() || c.compared == 0) {
    fmt::print("DIFFERENT: {} {} compared, {} differences\n", c.compared, unit,
               c.differences.size());
    return 1;
  }
  fmt::print("BITWISE SAME: {} {} compared, every bit equal\n", c.compared, unit);
  return 0;
}

int cmd_bleu(const std::string& hypotheses, const std::string& references, int width) {
  const std::vector<std::string> hyp = io::read_lines(hypotheses, "hypotheses");
  const std::vector<std::string> ref = io::read_lines(references, "references");
  if (hyp.size() != ref.size())
    throw UsageError(
        fmt::format("{} has {} lines but {} has {}: line k of each must be the same "
                    "sentence",
                    hypotheses, hyp.size(), references, ref.size()));
  const io::BleuScore b = io::corpus_bleu(hyp, ref);
  fmt::print("{}\n{}\n", io::describe(b, width), io::describe_counts(b.stats));
  return 0;
}

// A summary of a trace or checkpoint; --verify reads every tensor against its checksum.
int cmd_info(const std::string& path, bool all, bool verify) {
  if (verify) {
    const io::CheckpointVerification v = io::verify_checkpoint(path);
    for (const std::string& t : v.failed) fmt::print("FAILED {}\n", t);
    if (!v.unchecked.empty())
      fmt::print("{} tensors carry no checksum (written by an older mpitron)\n",
                 v.unchecked.size());
    fmt::print("{}: {} of {} tensors read back {}\n", path, v.tensors - int64_t(v.failed.size()),
               v.tensors, v.failed.empty() ? "intact" : "intact; the file is corrupt");
    return v.failed.empty() ? 0 : 1;
  }
  io::print_info(path, std::cout, all);
  return 0;
}

int cmd_batch(const BatchArgs& a) {
  // The config's batch, sequence length and seed (a run's batches), each flag given overriding.
  TrainConfig defaults;
  defaults.batch_size = 8;
  defaults.seq_len = 64;
  if (!a.config.empty()) defaults = load_run_config(a.config).train;
  const int steps = a.steps, batch_size = a.batch_size.value_or(defaults.batch_size),
            seq_len = a.seq_len.value_or(defaults.seq_len);
  const uint64_t seed = a.seed.value_or(defaults.seed);
  if (steps <= 0 || batch_size <= 0 || seq_len <= 0)
    throw UsageError("--steps, --batch-size and --seq-len must be positive");
  io::TextDataset data = io::load_text_dataset(a.data, seq_len);
  std::vector<int32_t> tokens(size_t(steps) * batch_size * (seq_len + 1));
  for (int s = 0; s < steps; ++s)
    io::fill_batch(data, a.val ? io::Split::val : io::Split::train, seed, a.first_step + s, 0,
                   batch_size, seq_len, tokens.data() + size_t(s) * batch_size * (seq_len + 1));
  std::vector<int64_t> shape{steps, batch_size, seq_len + 1};
  if (steps == 1) shape.erase(shape.begin());
  io::write_int32_dataset(a.out, "tokens", shape, tokens);
  fmt::print("{}: /tokens ({}) int32, {} {}-{} of {}x{} tokens (+1 target), seed {}\n", a.out,
             fmt::join(shape, ", "), a.val ? "validation batches" : "steps", a.first_step,
             a.first_step + steps - 1, batch_size, seq_len, seed);
  return 0;
}

// Simulates a pipeline schedule without a model: the timeline as text (and a PNG), the bubble
// against the theory, the activations and message buffers each stage keeps.
int cmd_schedule(const pipeline::ScheduleSpec& spec, double forward_time, double backward_time,
                 const std::string& png) {
  if (std::string e = pipeline::check_schedule(spec); !e.empty()) throw UsageError(e);
  if (!(forward_time > 0 && backward_time > 0))
    throw UsageError("--forward-time and --backward-time must be positive");
  // A stage's layers split into virtual_stages chunks: each chunk takes its share of the time, so
  // schedules of the same model compare.
  const double chunks = std::max(spec.virtual_stages, 1);
  const pipeline::SimulationResult r =
      pipeline::simulate(spec, forward_time / chunks, backward_time / chunks);
  fmt::print("{}", pipeline::schedule_timeline_text(spec, r));
  if (!r.ok) return 1;
  // Each a micro-batch's boundary tensor: what the memory plan counts per stage.
  std::vector<int> train, eval;
  for (int rank = 0; rank < spec.pp; ++rank) {
    train.push_back(pipeline::send_plan(spec, rank, true).buffers);
    eval.push_back(pipeline::send_plan(spec, rank, false).buffers);
  }
  fmt::print("send buffers per rank: {} (training), {} (evaluation)\n", fmt::join(train, " "),
             fmt::join(eval, " "));
  if (!png.empty()) {
    pipeline::write_schedule_png(png, spec, r);
    fmt::print("timeline: {}\n", png);
  }
  return 0;
}

int cmd_devices() {
#ifdef MPITRON_HAVE_CUDA
  cuda::DeviceQuery q = cuda::query_devices();
  if (q.devices.empty()) fmt::print("no CUDA devices: {}\n", q.reason);
  for (const auto& d : q.devices)
    fmt::print("cuda:{} {} (sm_{}{}), {:.1f} GiB\n", d.index, d.name, d.major, d.minor,
               double(d.total_bytes) / (1 << 30));
#ifdef MPITRON_HAVE_NCCL
  int nccl_version = 0;
  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch (2.28.3 is 22803) since 2.9.
  if (ncclGetVersion(&nccl_version) == ncclSuccess)
    fmt::print("nccl: {}.{}.{}\n", nccl_version / 10000, nccl_version / 100 % 100,
               nccl_version % 100);
#else
  fmt::print("nccl: not in this build\n");
#endif
#ifdef MPITRON_HAVE_CUDNN
  fmt::print("cudnn: {}.{}.{} (the CNNs' convolutions; opened at first use)\n", CUDNN_MAJOR,
             CUDNN_MINOR, CUDNN_PATCHLEVEL);
#else
  fmt::print("cudnn: not in this build (the CNNs train on the cpu only)\n");
#endif
#else
  fmt::print("built without CUDA (MPITRON_CUDA=OFF or no nvcc)\n");
#endif
  const char* kernels = cpu::blas_kernels();
  fmt::print("cpu: gemm via {}{}{}\n", cpu::gemm_library(), kernels ? ", kernels " : "",
             kernels ? kernels : "");
  return 0;
}

int cmd_import(const std::string& from, const std::string& out, bool plan) {
  if (plan) {
    print_import_plan(from, std::cout);
  } else {
    if (out.empty()) throw UsageError("import needs --out CKPT.h5 (or --plan)");
    import_hf(from, out);
    fmt::print("imported {} into {}\n", from, out);
    // What later commands know from the checkpoint, and what they must still be given.
    const CheckpointRecord rec = read_checkpoint_record(out);
    const bool bert = rec.model.type == "bert";
    if (!rec.tokenizer.empty() && bert)
      fmt::print("tokenizer: {} (recorded; verse data needs --tokenizer {} to train and eval)\n",
                 rec.tokenizer, rec.tokenizer);
    else if (!rec.tokenizer.empty())
      fmt::print("tokenizer: {} (recorded: generate and eval use it without --tokenizer)\n",
                 rec.tokenizer);
    else
      fmt::print(
          "tokenizer: none beside the weights ({}): give --tokenizer DIR to {}{}\n",
          bert ? "vocab.txt" : "vocab.json and merges.txt, or encoder.json and vocab.bpe",
          bert ? "eval and train (verse data)" : "generate and eval, and tokenize the data with it",
          bert ? "" : "; io/get_gpt2_tokenizer.sh DIR fetches GPT-2's");
  }
  return 0;
}

int cmd_export(const std::string& ckpt, const std::string& out) {
  export_hf(ckpt, out);
  fmt::print("exported {} to {}/model.safetensors and config.json\n", ckpt, out);
  return 0;
}

}  // namespace mpitron::cli
