// Step-time benchmark of one training step (forward, backward, global-norm clipping, AdamW; dropout
// off) of the CPU GPT on random tokens, for comparison with bench/torch_step.py (same figures).
// Model FLOPs per step (PaLM's MFU convention, Chowdhery et al. 2022, appendix B):
//   6 * (parameters - wpe) * B*T  +  6 * L * B * T^2 * C
// the first term every weight-matrix product (2 FLOPs per multiply-add, forward + 2x backward; the
// tied LM head counted through wte), the second the attention products QK^T and PV (12 L B T^2 C in
// full) halved for the causal mask. Biases, LayerNorm, GELU, softmax and AdamW are not counted.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "base/allocator.hpp"
#include "base/gemm.hpp"
#include "src/model/config.hpp"
#include "src/model/gpt.hpp"
#include "src/train/adamw.hpp"
#include "src/train/grad_sync.hpp"
#include "src/train/step_backend.hpp"

using namespace mpitron;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* kernels = cpu::better_blas_kernels()) {  // as mpitron does
    setenv("OPENBLAS_CORETYPE", kernels, 1);
    execv("/proc/self/exe", argv);
  }
  CLI::App app{"mpitron step-time benchmark: forward + backward + AdamW on random tokens"};
  std::string config_path;
  int batch = 8, seq = 128, steps = 10, warmup = 3, threads = 2;
  int layers = 4, embd = 256, heads = 4, vocab = 256;
  uint64_t seed = 1337;
  bool json = false;
  app.add_option("--config", config_path, "TOML preset ([model] table); default: the small config");
  auto opt = [&](const char* flag, auto& value, const char* help) {
    return app.add_option(flag, value, help)->capture_default_str();
  };
  opt("--batch", batch, "sequences per step");
  opt("--seq", seq, "tokens per sequence");
  opt("--steps", steps, "timed steps");
  opt("--warmup", warmup, "untimed steps first");
  opt("--threads", threads, "compute threads (OpenMP and OpenBLAS)");
  auto* o_layers = opt("--layers", layers, "n_layer (small config, or override)");
  auto* o_embd = opt("--embd", embd, "n_embd");
  auto* o_heads = opt("--heads", heads, "n_head");
  auto* o_vocab = opt("--vocab", vocab, "vocab_size");
  opt("--seed", seed, "initialisation and token seed");
  app.add_flag("--json", json, "print one JSON line instead of the table");
  CLI11_PARSE(app, argc, argv);

  GptConfig cfg{layers, heads, embd, seq, vocab};
  std::string name = "small";
  if (!config_path.empty()) {
    const RunConfig rc = load_run_config(config_path);
    cfg = gpt_config(rc.model);
    name = rc.name;
    if (o_layers->count()) cfg.n_layer = layers;
    if (o_embd->count()) cfg.n_embd = embd;
    if (o_heads->count()) cfg.n_head = heads;
    if (o_vocab->count()) cfg.vocab_size = vocab;
  }
  cfg.block_size = std::max(cfg.block_size, seq);
  if (steps <= 0 || batch <= 0 || seq <= 0 || threads <= 0 || cfg.n_embd % cfg.n_head != 0) {
    fmt::print(stderr,
               "error: steps, batch, seq and threads must be positive and embd divisible "
               "by heads\n");
    return 1;
  }

  cpu::set_compute_threads(threads);
  DeviceAllocator alloc{"cpu"};
  ModelBuild how;
  how.micro_rows = batch;
  how.seq_len = seq;
  how.seed = seed;
  how.alloc = &alloc;
  GptModel model(cfg, how);
  GradStorage grads = GradStorage::full(model, alloc);
  const StepBackend& ops = step_backend(Device::cpu);
  Buffer<float> m(alloc, model.flat_size), v(alloc, model.flat_size);
  std::vector<int32_t> tokens(size_t(batch) * (seq + 1));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, cfg.vocab_size - 1);
  for (auto& t : tokens) t = pick(rng);

  const AdamWConfig acfg{0.9, 0.95, 1e-8, 0.1};
  const double lr = 1e-4, clip = 1.0;
  const float dloss = 1.0f / float(batch * seq);
  int64_t t = 0;
  double last_loss = 0;
  const std::vector<AdamWTensor> tensors = adamw_tensors(model.registry);
  auto step = [&] {
    MicroBatch mb;
    mb.samples = {tokens.data(), nullptr, nullptr, batch};
    ops.zero(grads.data.data(), model.flat_size);
    last_loss = model.forward(mb) / double(batch * seq);
    model.backward(mb, dloss, {});
    const double norm = std::sqrt(ops.sum_of_squares(grads.data.data(), model.flat_size));
    const float scale = norm > clip ? float(clip / (norm + 1e-6)) : 1.0f;
    ops.adamw_update(
        tensors,
        {0, model.flat_size, model.params.data(), 0, grads.data.data(), 0, m.data(), v.data(), 0},
        acfg, lr, scale, ++t);
  };

  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < warmup; ++i) step();
  const size_t allocs_before = alloc.allocations;
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const size_t allocs = alloc.allocations - allocs_before;

  const double tokens_per_step = double(batch) * seq;
  const int64_t params = gpt_parameter_count(cfg);
  const double flops =
      6.0 * double(params - int64_t(cfg.block_size) * cfg.n_embd) * tokens_per_step +
      6.0 * cfg.n_layer * double(batch) * seq * seq * cfg.n_embd;
  const double med = median(ms);
  const double lo = *std::min_element(ms.begin(), ms.end());
  const double hi = *std::max_element(ms.begin(), ms.end());
  const double tok_s = tokens_per_step / (med / 1e3);
  const double gflops = flops / (med / 1e3) / 1e9;
  const double per_step = double(allocs) / steps;
  if (json) {
    fmt::print(
        "{{\"impl\": \"mpitron\", \"config\": \"{}\", \"n_layer\": {}, \"n_embd\": {}, "
        "\"n_head\": {}, \"vocab_size\": {}, \"batch\": {}, \"seq\": {}, \"threads\": {}, "
        "\"params\": {}, \"steps\": {}, \"ms_per_step\": {:.3f}, \"ms_min\": {:.3f}, "
        "\"ms_max\": {:.3f}, \"tokens_per_s\": {:.1f}, \"model_gflop_per_step\": {:.4f}, "
        "\"gflops\": {:.2f}, \"allocations_per_step\": {}, \"peak_bytes\": {}, \"loss\": {:.6f}, "
        "\"gemm\": \"{}\", \"blas_kernels\": \"{}\"}}\n",
        name, cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.vocab_size, batch, seq, threads, params,
        steps, med, lo, hi, tok_s, flops / 1e9, gflops, per_step, alloc.peak_bytes, last_loss,
        cpu::gemm_library(), cpu::blas_kernels() ? cpu::blas_kernels() : "");
  } else {
    fmt::print("config {}: {} layers, width {}, {} heads, vocab {}, {} parameters\n", name,
               cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.vocab_size, params);
    fmt::print("batch {} x seq {}, {} threads, gemm {}, {} warm-up + {} timed steps\n", batch, seq,
               threads, cpu::gemm_library(), warmup, steps);
    fmt::print("ms/step median {:.2f} (min {:.2f}, max {:.2f})\n", med, lo, hi);
    fmt::print("tokens/s {:.0f}\n", tok_s);
    fmt::print(
        "model GFLOP/step {:.3f} (6*(params-wpe)*tokens + 6*L*B*T^2*C), achieved GFLOP/s "
        "{:.2f}\n",
        flops / 1e9, gflops);
    fmt::print("allocations per step: {}\n", per_step);
    fmt::print("peak memory {:.1f} MiB, last loss {:.4f}\n", double(alloc.peak_bytes) / (1 << 20),
               last_loss);
  }
  return allocs == 0 ? 0 : 1;
}
