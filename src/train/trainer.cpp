#include "src/train/trainer.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "comm/grid.hpp"
#include "comm/group.hpp"
#include "comm/world.hpp"
#include "io/checkpoint.hpp"
#include "io/dataset.hpp"
#include "io/trace.hpp"
#include "src/check.hpp"
#include "src/cpu/gemm.hpp"
#include "src/model/gpt.hpp"
#include "src/train/adamw.hpp"
#include "src/train/batch_slice.hpp"

namespace mpitron {

namespace {

constexpr int64_t kCheckpointFormat = 1;

// Set by SIGUSR1/SIGTERM (Slurm's warning before a time limit or preemption); a signal handler
// can only write a sig_atomic_t, so this one flag is process-wide by necessity.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.1f} {}", b, units[u]);
}

std::string human_seconds(double s) {
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{:.0f}m{:02.0f}s", std::floor(s / 60), std::fmod(s, 60));
  return fmt::format("{:.0f}h{:02.0f}m", std::floor(s / 3600), std::fmod(s / 60, 60));
}

// The flat range [begin, end) of the optimizer state (and, with ZeRO, of the reduced gradients)
// this rank owns: everything at ZeRO 0, an equal 1/dp chunk of the padded allocation otherwise.
struct ShardRange {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

// Sums buf[0, n) over the group in place with the chosen method (blocking).
void allreduce_by(comm::Group& g, DpReduce method, float* buf, size_t n) {
  switch (method) {
    case DpReduce::allreduce:
      g.allreduce_sum(buf, n);
      break;
    case DpReduce::ring:
      g.ring_allreduce_sum(buf, n);
      break;
    case DpReduce::gather_scatter:
      g.gather_scatter_allreduce_sum(buf, n);
      break;
  }
}

// In place: afterwards buf[bounds[r], bounds[r+1]) holds the group's sum on rank r (the rest of
// buf is unspecified). gather-scatter sums everything, on purpose the naive way.
void reduce_scatter_by(comm::Group& g, DpReduce method, float* buf,
                       std::span<const size_t> bounds) {
  switch (method) {
    case DpReduce::allreduce:
      g.reduce_scatter_sum_v(buf, bounds);
      break;
    case DpReduce::ring:
      g.ring_reduce_scatter_sum_v(buf, bounds);
      break;
    case DpReduce::gather_scatter:
      g.gather_scatter_allreduce_sum(buf, bounds.back());
      break;
  }
}

// Reduces gradient buckets while backward runs: a bucket is launched as soon as the backward hook
// reports its whole range final.
struct GradBuckets {
  std::vector<std::pair<size_t, size_t>> ranges;  // contiguous, covering [0, flat), last first
  std::vector<comm::Request> pending;
  size_t next = 0;  // index of the next bucket to launch
  comm::Group* group = nullptr;
  DpReduce method = DpReduce::allreduce;
  float* grads = nullptr;
  bool active = false;  // only the last micro-batch's backward reduces

  void launch_ready(size_t ready_begin) {
    if (!active) return;
    while (next < ranges.size() && ranges[next].first >= ready_begin) {
      auto [b, e] = ranges[next++];
      if (method == DpReduce::allreduce)  // the one method with a non-blocking form
        pending.push_back(group->iallreduce_sum(grads + b, e - b));
      else
        allreduce_by(*group, method, grads + b, e - b);
    }
  }
  void wait_all() {
    for (auto& r : pending) r.wait();
    pending.clear();
    next = 0;
  }
};

void on_grads_ready(void* ctx, size_t flat_begin) {
  static_cast<GradBuckets*>(ctx)->launch_ready(flat_begin);
}

// ZeRO 2: as each gradient segment (a block's window, ln_f, the embeddings) becomes final, it is
// reduce-scattered over dp, the owned part added to this rank's gradient shard, and the segment
// cleared for the next block or micro-batch. No rank ever holds the whole summed gradient.
struct ShardedGradReducer {
  GptModel* model = nullptr;
  comm::Group* group = nullptr;
  DpReduce method = DpReduce::allreduce;
  std::span<const size_t> shard_bounds;  // shard k is [shard_bounds[k], shard_bounds[k + 1])
  ShardRange shard;
  float* grad_shard = nullptr;  // (shard.size()) summed gradients of the owned range
  std::vector<size_t> bounds;   // dp + 1 cut points of the current segment, sized once

  void reduce(size_t flat_begin) {
    const GradSegment seg = gpt_grad_segment(*model, flat_begin);
    const size_t n = seg.end - seg.begin;
    for (size_t k = 0; k < bounds.size(); ++k)
      bounds[k] = std::clamp(shard_bounds[k], seg.begin, seg.end) - seg.begin;
    reduce_scatter_by(*group, method, seg.data, bounds);
    const size_t b = std::max(seg.begin, shard.begin), e = std::min(seg.end, shard.end);
    for (size_t i = b; i < e; ++i) grad_shard[i - shard.begin] += seg.data[i - seg.begin];
    std::memset(seg.data, 0, n * sizeof(float));
  }
};

void on_segment_ready(void* ctx, size_t flat_begin) {
  static_cast<ShardedGradReducer*>(ctx)->reduce(flat_begin);
}

struct Trainer {
  TrainOptions opts;
  const RunConfig& cfg;
  const TrainConfig& tc;
  comm::Grid& grid;
  DeviceAllocator alloc{"cpu"};
  io::TextDataset data;
  GptModel model;
  int micro_rows = 0;      // sequences per micro-batch on this rank
  int64_t first_row = 0;   // this rank's first sequence of the global batch
  int64_t local_rows = 0;  // sequences of the global batch on this rank
  Buffer<int32_t> batch;   // (local_rows, T+1)
  ShardRange shard;
  Buffer<float> m, v;                // AdamW moments of the shard
  std::vector<size_t> shard_bounds;  // dp + 1 cut points of the ZeRO shards in the flat buffer
  Buffer<float> shard_scratch;       // all-gather source (ZeRO)
  Buffer<float> grad_shard;          // ZeRO 2: the summed gradients of the owned shard
  GradBuckets buckets;
  ShardedGradReducer sharded;
  int64_t step = 0;  // completed optimizer steps
  std::unique_ptr<io::TraceWriter> trace;
  io::TraceRow row{};  // reused every step (its per-rank vectors are sized once)
  uint64_t comm_bytes_before = 0;

  Trainer(TrainOptions o, comm::Grid& g)
      : opts(std::move(o)), cfg(opts.cfg), tc(opts.cfg.train), grid(g) {}

  bool is_root() const { return grid.rank == 0; }

  uint64_t comm_bytes_total() const {
    return grid.world.bytes_sent + grid.dp.bytes_sent + grid.tp.bytes_sent + grid.pp.bytes_sent;
  }

  void setup() {
    const Layout& L = opts.layout;
    data = io::load_text_dataset(opts.data, tc.seq_len);
    const RowRange rank_rows = batch_slice(tc.batch_size, L.dp, grid.coords.dp_rank, 1, 0);
    first_row = rank_rows.begin;
    local_rows = rank_rows.count;
    micro_rows =
        int(batch_slice(tc.batch_size, L.dp, grid.coords.dp_rank, tc.micro_batches, 0).count);
    gpt_build(model, cfg.model, micro_rows, tc.seq_len, tc.seed, alloc, L.dp, L.zero == 2);
    batch = Buffer<int32_t>(alloc, size_t(local_rows) * (tc.seq_len + 1));
    if (L.zero == 0) {
      shard = {0, model.flat_size};
    } else {
      const size_t chunk = model.flat_size / size_t(L.dp);
      for (int k = 0; k <= L.dp; ++k) shard_bounds.push_back(chunk * size_t(k));
      shard = {shard_bounds[grid.coords.dp_rank], shard_bounds[grid.coords.dp_rank + 1]};
      shard_scratch = Buffer<float>(alloc, shard.size());
    }
    if (L.zero == 2) {
      grad_shard = Buffer<float>(alloc, shard.size());
      sharded = {&model,
                 &grid.dp,
                 L.dp_reduce,
                 shard_bounds,
                 shard,
                 grad_shard.data(),
                 std::vector<size_t>(shard_bounds.size())};
    }
    m = Buffer<float>(alloc, shard.size());
    v = Buffer<float>(alloc, shard.size());
    buckets.group = &grid.dp;
    buckets.method = L.dp_reduce;
    buckets.grads = model.grads.data();
    if (L.bucket_mb > 0 && L.zero == 0 && L.dp > 1) {
      const double wanted = L.bucket_mb * 1024 * 1024 / sizeof(float);
      const size_t per = size_t(std::clamp(wanted, 16.0, double(model.flat_size)));
      for (size_t end = model.flat_size; end > 0;) {
        const size_t begin = end > per ? end - per : 0;
        buckets.ranges.push_back({begin, end});
        end = begin;
      }
      buckets.pending.reserve(buckets.ranges.size());
    }
    row.rank_comm_bytes.assign(is_root() ? grid.shape.world : 0, 0);
    row.rank_peak_mem_bytes.assign(is_root() ? grid.shape.world : 0, 0);
  }

  // ---- checkpoints ----------------------------------------------------------------------------

  io::Attributes model_attributes() const {
    const GptConfig& mc = cfg.model;
    return {
        {"model.type", std::string("gpt")},           {"model.n_layer", int64_t(mc.n_layer)},
        {"model.n_head", int64_t(mc.n_head)},         {"model.n_embd", int64_t(mc.n_embd)},
        {"model.block_size", int64_t(mc.block_size)}, {"model.vocab_size", int64_t(mc.vocab_size)}};
  }

  // Every tensor of the checkpoint with this rank's part: parameters are written by DP rank 0
  // (they are replicated over DP), moments by their owner. For reading, every rank reads the
  // parameters and the moments of its own shard.
  std::vector<io::TensorPiece> checkpoint_pieces(bool for_writing) {
    std::vector<io::TensorPiece> pieces;
    const bool param_writer = !for_writing || grid.coords.dp_rank == 0;
    const bool moment_writer = !for_writing || opts.layout.zero > 0 || grid.coords.dp_rank == 0;
    for (const ParamInfo& p : model.registry.params()) {
      io::TensorPiece t{"params/" + p.name, p.global_shape, {}, model.params.data() + p.offset};
      if (param_writer) t.blocks = io::flat_range_blocks(p.global_shape, 0, int64_t(p.numel));
      pieces.push_back(std::move(t));
    }
    for (const char* which : {"m", "v"}) {
      float* base = which[0] == 'm' ? m.data() : v.data();
      for (const ParamInfo& p : model.registry.params()) {
        const size_t b = std::max(shard.begin, p.offset);
        const size_t e = std::min(shard.end, p.offset + p.numel);
        io::TensorPiece t{"optim/" + p.name + "/" + which, p.global_shape, {}, base};
        if (b < e && moment_writer) {
          t.blocks =
              io::flat_range_blocks(p.global_shape, int64_t(b - p.offset), int64_t(e - p.offset));
          t.data = base + (b - shard.begin);
        }
        pieces.push_back(std::move(t));
      }
    }
    return pieces;
  }

  std::string checkpoint_path(int64_t s) const {
    return (std::filesystem::path(opts.out) / fmt::format("ckpt_{}.h5", s)).string();
  }

  void save_checkpoint() {
    io::Attributes root = model_attributes();
    root["format_version"] = kCheckpointFormat;
    root["step"] = step;
    root["tokens_seen"] = step * int64_t(tc.batch_size) * tc.seq_len;
    root["seed"] = int64_t(tc.seed);
    root["layout.dp"] = int64_t(opts.layout.dp);
    root["layout.tp"] = int64_t(opts.layout.tp);
    root["layout.pp"] = int64_t(opts.layout.pp);
    root["layout.zero"] = int64_t(opts.layout.zero);
    root["train.lr"] = tc.lr;
    root["train.steps"] = int64_t(tc.steps);
    root["train.batch_size"] = int64_t(tc.batch_size);
    root["train.seq_len"] = int64_t(tc.seq_len);
    std::map<std::string, io::Attributes> groups;
    groups["rng"] = {{"seed", int64_t(tc.seed)},
                     {"kind", std::string("philox4x32-10, keyed by (seed, name|step, index)")}};
    groups["data"] = {{"path", data.path},
                      {"bytes", int64_t(data.bytes.size())},
                      {"checksum", int64_t(data.checksum)},
                      {"next_step", step + 1}};
    const std::string path = checkpoint_path(step);
    io::write_checkpoint(path, root, groups, checkpoint_pieces(true), MPI_COMM_WORLD);
    if (is_root()) spdlog::info("checkpoint {}", path);
  }

  void load_checkpoint(const std::string& path) {
    io::CheckpointHeader h = io::read_checkpoint_header(path);
    auto get_int = [&](const std::string& key) -> int64_t {
      auto it = h.root.find(key);
      if (it == h.root.end() || !std::holds_alternative<int64_t>(it->second))
        throw UsageError(fmt::format(
            "checkpoint {} lacks attribute '{}': not an mpitron checkpoint", path, key));
      return std::get<int64_t>(it->second);
    };
    if (get_int("format_version") != kCheckpointFormat)
      throw UsageError(fmt::format("checkpoint {} has format version {}, this build reads {}", path,
                                   get_int("format_version"), kCheckpointFormat));
    for (const auto& [key, value] : model_attributes()) {
      if (!std::holds_alternative<int64_t>(value)) continue;
      if (get_int(key) != std::get<int64_t>(value))
        throw UsageError(fmt::format(
            "checkpoint {} is of another model shape: {} = {}, this model has {} (use the config "
            "it was trained with)",
            path, key, get_int(key), std::get<int64_t>(value)));
    }
    io::read_checkpoint_tensors(path, checkpoint_pieces(false));
    step = get_int("step");
    if (get_int("seed") != int64_t(tc.seed) && is_root())
      spdlog::warn("checkpoint was written with seed {}, continuing with seed {}", get_int("seed"),
                   tc.seed);
    auto d = h.groups.find("data");
    if (d != h.groups.end()) {
      auto c = d->second.find("checksum");
      if (c != d->second.end() && std::get<int64_t>(c->second) != int64_t(data.checksum) &&
          is_root())
        spdlog::warn("data file differs from the one the checkpoint was trained on");
    }
  }

  // ---- one step -------------------------------------------------------------------------------

  DropoutContext dropout_for(int64_t s, int64_t global_row) const {
    return {float(tc.dropout), tc.seed, s, uint64_t(global_row) * uint64_t(tc.seq_len)};
  }

  void reduce_gradients() {
    const Layout& L = opts.layout;
    float* g = model.grads.data();
    const size_t n = model.flat_size;
    if (L.dp == 1) return;
    if (L.zero == 0) {
      if (!buckets.ranges.empty()) return buckets.wait_all();
      return allreduce_by(grid.dp, L.dp_reduce, g, n);
    }
    // ZeRO 1: only the owned shard of the summed gradient is needed.
    reduce_scatter_by(grid.dp, L.dp_reduce, g, shard_bounds);
  }

  struct StepResult {
    double loss, grad_norm, lr;
  };

  StepResult train_step(int64_t s) {
    const Layout& L = opts.layout;
    const int T = tc.seq_len;
    io::fill_batch(data, io::Split::train, tc.seed, s, first_row, local_rows, T, batch.data());
    std::memset(model.grads.data(), 0, model.grads.size() * sizeof(float));
    if (L.zero == 2) std::memset(grad_shard.data(), 0, grad_shard.size() * sizeof(float));
    GradReadyHook hook{};
    if (L.zero == 2)
      hook = {on_segment_ready, &sharded};
    else if (!buckets.ranges.empty())
      hook = {on_grads_ready, &buckets};
    const float dloss = 1.0f / float(int64_t(tc.batch_size) * T);
    double loss_sum = 0.0;
    for (int mb = 0; mb < tc.micro_batches; ++mb) {
      const RowRange rows =
          batch_slice(tc.batch_size, opts.layout.dp, grid.coords.dp_rank, tc.micro_batches, mb);
      const DropoutContext drop = dropout_for(s, rows.begin);
      const int64_t local = rows.begin - first_row;
      loss_sum += gpt_forward(model, batch.data() + local * (T + 1), micro_rows, drop);
      buckets.active = !buckets.ranges.empty() && mb == tc.micro_batches - 1;
      gpt_backward(model, micro_rows, dloss, drop, hook);
    }
    if (L.zero < 2) reduce_gradients();
    // Global gradient norm: every rank holds the summed gradient of its shard.
    const float* g = L.zero == 2 ? grad_shard.data() : model.grads.data() + shard.begin;
    double sq = sum_of_squares(g, shard.size());
    if (L.zero > 0) sq = grid.dp.allreduce_sum(sq);
    const double norm = std::sqrt(sq);
    const float scale =
        tc.grad_clip > 0 && norm > tc.grad_clip ? float(tc.grad_clip / (norm + 1e-6)) : 1.0f;
    const double lr = learning_rate(s, tc.lr, tc.warmup_steps, tc.steps, tc.min_lr_ratio);
    const AdamWConfig acfg{tc.beta1, tc.beta2, tc.eps, tc.weight_decay};
    adamw_update(model.registry,
                 {shard.begin, shard.end, model.params.data(), 0, g, shard.begin, m.data(),
                  v.data(), shard.begin},
                 acfg, lr, scale, s);
    if (L.zero > 0) {
      float* p = model.params.data();
      if (L.dp_reduce == DpReduce::ring) {
        grid.dp.ring_all_gather(p, model.flat_size);
      } else {
        std::memcpy(shard_scratch.data(), p + shard.begin, shard.size() * sizeof(float));
        grid.dp.all_gather(shard_scratch.data(), p, shard.size());
      }
    }
    const double loss = (L.dp > 1 ? grid.dp.allreduce_sum(loss_sum) : loss_sum) /
                        double(int64_t(tc.batch_size) * T);
    return {loss, norm, lr};
  }

  double evaluate() {
    const int T = tc.seq_len;
    double sum = 0.0;
    for (int e = 0; e < tc.eval_batches; ++e) {
      io::fill_batch(data, io::Split::val, tc.seed, e, first_row, local_rows, T, batch.data());
      for (int mb = 0; mb < tc.micro_batches; ++mb)
        sum += gpt_forward(model, batch.data() + int64_t(mb) * micro_rows * (T + 1), micro_rows,
                           DropoutContext{});
    }
    if (opts.layout.dp > 1) sum = grid.dp.allreduce_sum(sum);
    return sum / double(int64_t(tc.eval_batches) * tc.batch_size * T);
  }

  // ---- the loop -------------------------------------------------------------------------------

  io::Attributes run_attributes() const {
    io::Attributes a = model_attributes();
    const Layout& L = opts.layout;
    a["config"] = cfg.name;
    a["data"] = opts.data;
    a["seed"] = int64_t(tc.seed);
    a["train.batch_size"] = int64_t(tc.batch_size);
    a["train.seq_len"] = int64_t(tc.seq_len);
    a["train.steps"] = int64_t(tc.steps);
    a["train.lr"] = tc.lr;
    a["train.min_lr_ratio"] = tc.min_lr_ratio;
    a["train.warmup_steps"] = int64_t(tc.warmup_steps);
    a["train.weight_decay"] = tc.weight_decay;
    a["train.grad_clip"] = tc.grad_clip;
    a["train.dropout"] = tc.dropout;
    a["train.micro_batches"] = int64_t(tc.micro_batches);
    a["layout.world"] = int64_t(grid.shape.world);
    a["layout.dp"] = int64_t(L.dp);
    a["layout.tp"] = int64_t(L.tp);
    a["layout.pp"] = int64_t(L.pp);
    a["layout.zero"] = int64_t(L.zero);
    a["layout.dp_reduce"] = dp_reduce_name(L.dp_reduce);
    a["layout.bucket_mb"] = L.bucket_mb;
    a["gemm"] = std::string(cpu::gemm_library());
    a["parameters"] = int64_t(gpt_parameter_count(cfg.model));
    return a;
  }

  // Rank 0 looks at the run folder and decides; every rank gets its verdict (file systems may
  // show ranks different views, and a refusal must reach every rank).
  std::string choose_checkpoint() {
    std::string chosen, error;
    if (is_root()) {
      try {
        std::filesystem::create_directories(opts.out);
        const std::string latest = io::latest_checkpoint(opts.out);
        if (opts.resume == "auto") {
          chosen = latest;
          if (latest.empty()) spdlog::info("no checkpoint in {}: starting from scratch", opts.out);
        } else if (!opts.resume.empty()) {
          chosen = opts.resume;
        } else if (!latest.empty()) {
          error = fmt::format(
              "run folder {} already holds checkpoints ({}): continue it with --resume auto, or "
              "choose another --out",
              opts.out, latest);
        }
      } catch (const std::exception& e) {
        error = fmt::format("cannot use run folder {}: {}", opts.out, e.what());
      }
    }
    comm::throw_on_all_ranks(error, 0, MPI_COMM_WORLD);
    return comm::broadcast_string(chosen, 0, MPI_COMM_WORLD);
  }

  int run() {
    const std::string resume_from = choose_checkpoint();
    if (!resume_from.empty()) {
      load_checkpoint(resume_from);
      if (is_root()) spdlog::info("resumed from {} at step {}", resume_from, step);
    }
    std::string trace_error;
    if (is_root()) {
      try {
        trace = std::make_unique<io::TraceWriter>(
            (std::filesystem::path(opts.out) / "trace.h5").string(), run_attributes(),
            resume_from.empty() ? -1 : step, opts.trace_flush_every);
      } catch (const UsageError& e) {
        trace_error = e.what();
      }
    }
    comm::throw_on_all_ranks(trace_error, 0, MPI_COMM_WORLD);
    if (is_root()) {
      spdlog::info(
          "{}: {} parameters, layout dp={} tp={} pp={} zero={}, global batch {}x{} "
          "({} micro-batches of {} per rank), {} steps, gemm {}, data {} ({} bytes)",
          cfg.name, gpt_parameter_count(cfg.model), opts.layout.dp, opts.layout.tp, opts.layout.pp,
          opts.layout.zero, tc.batch_size, tc.seq_len, tc.micro_batches, micro_rows, tc.steps,
          cpu::gemm_library(), data.path, data.bytes.size());
    }
    std::signal(SIGUSR1, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);

    const int64_t first = step + 1;
    const auto t_start = Clock::now();
    const double tokens_per_step = double(tc.batch_size) * tc.seq_len;
    comm_bytes_before = comm_bytes_total();
    for (int64_t s = first; s <= tc.steps; ++s) {
      const auto t0 = Clock::now();
      const StepResult r = train_step(s);
      const double dt = seconds_since(t0);
      step = s;
      double val = std::numeric_limits<double>::quiet_NaN();
      if ((tc.eval_every > 0 && s % tc.eval_every == 0) || s == tc.steps) val = evaluate();
      const uint64_t bytes_now = comm_bytes_total();
      const int64_t comm_bytes = int64_t(bytes_now - comm_bytes_before);
      comm_bytes_before = bytes_now;
      int64_t peak = int64_t(alloc.peak_bytes);
      MPI_CHECK(MPI_Gather(&comm_bytes, 1, MPI_INT64_T, row.rank_comm_bytes.data(), 1, MPI_INT64_T,
                           0, MPI_COMM_WORLD));
      MPI_CHECK(MPI_Gather(&peak, 1, MPI_INT64_T, row.rank_peak_mem_bytes.data(), 1, MPI_INT64_T, 0,
                           MPI_COMM_WORLD));
      if (!std::isfinite(r.loss)) {
        if (is_root()) trace->flush();
        throw UsageError(
            fmt::format("loss is {} at step {}: training diverged (lower --lr?)", r.loss, s));
      }
      if (is_root()) {
        row.step = s;
        row.loss = r.loss;
        row.val_loss = val;
        row.lr = r.lr;
        row.grad_norm = r.grad_norm;
        row.tokens_per_s = tokens_per_step / dt;
        row.step_s = dt;
        row.comm_bytes = comm_bytes;
        row.peak_mem_bytes = peak;
        trace->append(row);
        if ((tc.log_every > 0 && s % tc.log_every == 0) || s == first || s == tc.steps ||
            !std::isnan(val)) {
          const double elapsed = seconds_since(t_start);
          const double eta = elapsed / double(s - first + 1) * double(tc.steps - s);
          spdlog::info(
              "step {:>6}/{} | loss {:.4f}{} | lr {:.2e} | norm {:.3f} | {:.1f}k tok/s | "
              "{:.1f} ms | peak {} | ETA {}",
              s, tc.steps, r.loss, std::isnan(val) ? "" : fmt::format(" | val {:.4f}", val), r.lr,
              r.grad_norm, tokens_per_step / dt / 1000, dt * 1000, human_bytes(double(peak)),
              human_seconds(eta));
        }
      }
      const bool ckpt_due = tc.ckpt_every > 0 && s % tc.ckpt_every == 0;
      // Every rank must agree to stop at the same step boundary.
      int stop_local = g_stop_signal, stop = 0;
      MPI_CHECK(MPI_Allreduce(&stop_local, &stop, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
      if (ckpt_due || s == tc.steps || stop) {
        if (is_root()) trace->flush();
        save_checkpoint();
      }
      if (stop && s < tc.steps) {
        if (is_root()) {
          trace->flush();
          spdlog::warn(
              "signal {} received: stopped after step {} with a checkpoint; continue "
              "with --resume auto",
              stop, s);
        }
        return kExitStoppedBySignal;
      }
    }
    if (first > tc.steps) {
      if (step == 0) {
        save_checkpoint();  // --steps 0: the initial parameters
      } else if (is_root()) {
        spdlog::info("checkpoint is at step {}: nothing to do for --steps {}", step, tc.steps);
      }
    }
    if (is_root()) trace->flush();
    return 0;
  }

 public:
  static constexpr int kExitStoppedBySignal = 3;
};

}  // namespace

std::string dp_reduce_name(DpReduce r) {
  switch (r) {
    case DpReduce::allreduce:
      return "allreduce";
    case DpReduce::ring:
      return "ring";
    case DpReduce::gather_scatter:
      return "gather-scatter";
  }
  return "?";
}

DpReduce parse_dp_reduce(const std::string& s) {
  if (s == "allreduce") return DpReduce::allreduce;
  if (s == "ring") return DpReduce::ring;
  if (s == "gather-scatter") return DpReduce::gather_scatter;
  throw UsageError(
      fmt::format("--dp-reduce '{}' is unknown (allreduce, ring or gather-scatter)", s));
}

int run_training(TrainOptions opts) {
  validate_config(opts.cfg);
  const Layout& L = opts.layout;
  const TrainConfig& tc = opts.cfg.train;
  comm::Grid grid = comm::make_grid(L.dp, L.tp, L.pp);
  if (L.tp != 1)
    throw UsageError(
        fmt::format("tensor parallelism (--tp {}) is not supported yet: use --tp 1", L.tp));
  if (L.pp != 1)
    throw UsageError(
        fmt::format("pipeline parallelism (--pp {}) is not supported yet: use --pp 1", L.pp));
  if (L.zero < 0 || L.zero > 2)
    throw UsageError(fmt::format("--zero {} is not a ZeRO stage (0, 1 or 2)", L.zero));
  if (std::string e = check_batch_split(tc.batch_size, L.dp, tc.micro_batches); !e.empty())
    throw UsageError(e);
  if (!(L.bucket_mb >= 0 && L.bucket_mb <= 1e6))
    throw UsageError("--bucket-mb must be between 0 (no buckets) and 1e6 MiB");
  if (opts.threads < 0 || opts.threads > 1024)
    throw UsageError(
        fmt::format("--threads {} is out of range (0: default, else 1..1024)", opts.threads));
  if (opts.cfg.model.vocab_size < 256)
    throw UsageError(
        fmt::format("vocab_size {} is smaller than the byte vocabulary (256) of the text data",
                    opts.cfg.model.vocab_size));
  if (opts.out.empty())
    opts.out =
        fmt::format("runs/{}_DP{}_TP{}_PP{}_zero{}", opts.cfg.name, L.dp, L.tp, L.pp, L.zero);
  const int threads =
      opts.threads > 0 ? opts.threads : cpu::default_compute_threads(grid.shape.world);
  cpu::set_compute_threads(threads);
  Trainer trainer(std::move(opts), grid);
  trainer.setup();
  return trainer.run();
}

}  // namespace mpitron
