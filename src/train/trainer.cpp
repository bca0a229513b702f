#include "src/train/trainer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

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
#include "base/check.hpp"
#include "base/gemm.hpp"
#include "base/human_units.hpp"
#include "src/model/family.hpp"
#include "src/model/layer_ops.hpp"
#include "src/pipeline/executor.hpp"
#include "src/pipeline/schedule.hpp"
#include "src/train/adamw.hpp"
#include "src/train/batch_slice.hpp"
#include "src/train/batch_source.hpp"
#include "src/train/grad_sync.hpp"
#include "src/train/loss_scale.hpp"
#include "src/train/model_checkpoint.hpp"
#include "src/train/pretrained.hpp"
#include "src/train/step_backend.hpp"
#include "src/train/watchdog.hpp"

#ifdef MPITRON_HAVE_CUDA
#include "src/cuda/device_memory.cuh"
#endif
#ifdef MPITRON_HAVE_NCCL
#include "comm/nccl/nccl_comm.hpp"
#include "base/cuda_check.hpp"
#endif

namespace mpitron {

namespace {

// Set by SIGUSR1/SIGTERM (Slurm's warning before a time limit or preemption) and SIGINT (Ctrl-C,
// whose second press kills at once: the handler restores the default); a signal handler
// can only write a sig_atomic_t, so this one flag is process-wide by necessity.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
  if (sig == SIGINT) {
    std::signal(SIGINT, SIG_DFL);
    static const char note[] =
        "\nstopping after this step with a checkpoint (Ctrl-C again to abort at once)\n";
    [[maybe_unused]] const ssize_t n = write(2, note, sizeof note - 1);  // async-signal-safe
  }
}

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "Ctrl-C (SIGINT)";
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1 (the time-limit warning)";
  }
  return "a stop signal";
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// 1 - (time every rank computed) / (ranks x the slowest rank's walk through the schedule).
double measured_bubble(const std::vector<int64_t>& busy_us, double slowest_s) {
  if (busy_us.empty() || slowest_s <= 0) return 0;
  double busy = 0;
  for (int64_t b : busy_us) busy += double(b) * 1e-6;
  return std::max(0.0, 1.0 - busy / (double(busy_us.size()) * slowest_s));
}

struct Trainer {
  TrainOptions opts;
  const RunConfig& cfg;
  const TrainConfig& tc;
  comm::Grid& grid;
  const ModelFamily& family;
  const StepBackend& ops;
  const LayerOps& layers;
  const bool on_host;     // --device cpu: nothing moves between host and device
  DeviceAllocator alloc;  // the device's memory: model, gradients, moments (peak in the trace)
  DeviceAllocator host_alloc{"cpu"};  // another device's host side: the data and file copies
  BatchSource data;
  std::unique_ptr<Model> model;
  std::unique_ptr<GradSync> sync;
  pipeline::ScheduleSpec schedule;
  std::vector<pipeline::Action> train_actions, eval_actions;  // this stage's, per step
  std::unique_ptr<pipeline::PipelineExecutor> executor;
  pipeline::StageWork work;
  size_t model_activation_bytes = 0;  // the model's activation sets and backward scratch
  int model_slots = 1;                // activation sets per chunk
  int micro_rows = 0;                 // samples per micro-batch on this rank
  int64_t first_row = 0;              // this rank's first sample of the global batch
  int64_t local_rows = 0;             // samples of the global batch on this rank
  int64_t loss_terms = 0;             // loss terms of a global batch (tokens, or samples)
  ShardRange shard;
  Buffer<float> m, v;  // AdamW moments of the shard
  // Another device's parameters, buffers and moments pass through these on their way to and from
  // files (checkpoints, --init-from); unused on the CPU.
  Buffer<float> file_params, file_buffers, file_m, file_v;
  int64_t step = 0;  // completed optimizer steps
  std::unique_ptr<io::TraceWriter> trace;
  io::TraceRow row{};  // reused every step (its per-rank vectors are sized once)
  uint64_t comm_bytes_before = 0;
  Progress progress;  // what this rank is doing, for the watchdog (--hang-timeout)

  Trainer(TrainOptions o, comm::Grid& g)
      : opts(std::move(o)),
        cfg(opts.cfg),
        tc(opts.cfg.train),
        grid(g),
        family(model_family(opts.cfg.model.type)),
        ops(step_backend(opts.device)),
        layers(layer_ops<float>(opts.device)),
        on_host(opts.device == "cpu"),
        alloc(device_memory(opts.device)) {}

  static DeviceAllocator device_memory(const std::string& device) {
#ifdef MPITRON_HAVE_CUDA
    if (device == "cuda") return cuda::device_allocator();
#endif
    return DeviceAllocator{device};
  }

  // Where files read and write the parameters, buffers and moments: the device's own buffers on
  // the CPU, else host copies (download_state before a write, upload_state after a read).
  float* params_for_files() {
    return on_host ? model->params.data() : file_params.data();
  }
  float* buffers_for_files() {
    return on_host ? model->buffers.data() : file_buffers.data();
  }
  float* m_for_files() {
    return on_host ? m.data() : file_m.data();
  }
  float* v_for_files() {
    return on_host ? v.data() : file_v.data();
  }
  void download_state() {
    if (on_host) return;
    layers.download(file_params.data(), model->params.data(), model->params.size());
    layers.download(file_buffers.data(), model->buffers.data(), model->buffers.size());
    layers.download(file_m.data(), m.data(), m.size());
    layers.download(file_v.data(), v.data(), v.size());
  }
  void upload_state() {
    if (on_host) return;
    layers.upload(model->params.data(), file_params.data(), model->params.size());
    layers.upload(model->buffers.data(), file_buffers.data(), model->buffers.size());
    layers.upload(m.data(), file_m.data(), m.size());
    layers.upload(v.data(), file_v.data(), v.size());
  }

  bool is_root() const {
    return grid.rank == 0;
  }
  bool last_stage() const {
    return grid.coords.pp_rank == opts.layout.pp - 1;
  }

  uint64_t comm_bytes_total() const {
    uint64_t nccl_bytes = 0;
#ifdef MPITRON_HAVE_NCCL
    nccl_bytes = nccl_dp.comm.bytes_sent;
#endif
    return grid.world.bytes_sent + grid.dp.bytes_sent + grid.tp.bytes_sent + grid.pp.bytes_sent +
           nccl_bytes;
  }

#ifdef MPITRON_HAVE_NCCL
  // --comm nccl: NCCL over the dp ranks on a stream of its own, so that gradient buckets are
  // summed while backward's kernels go on. Each collective first waits (an event) for what the
  // compute stream has queued so far; synchronize makes the host wait for NCCL's stream, so the
  // work queued after it (norm, update, the next forward) sees the results.
  struct NcclDp {
    comm::NcclComm comm;
    cudaStream_t stream = nullptr;
    cudaEvent_t queued = nullptr;  // recorded on the compute stream before each collective
    NcclDp() = default;
    NcclDp(const NcclDp&) = delete;
    NcclDp& operator=(const NcclDp&) = delete;
    void open(comm::Group& dp) {
      comm = comm::NcclComm(dp);
      CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      CUDA_CHECK(cudaEventCreateWithFlags(&queued, cudaEventDisableTiming));
    }
    void after_compute() const {
      CUDA_CHECK(cudaEventRecord(queued, cudaStreamPerThread));
      CUDA_CHECK(cudaStreamWaitEvent(stream, queued, 0));
    }
    // No wait for the stream: the communicator's teardown finishes its work, or aborts it after
    // an asynchronous error (a dead peer would make a plain wait hang); the stream is released
    // when its work is done. Errors ignored: a failing run may be tearing down.
    ~NcclDp() {
      comm = comm::NcclComm();
      if (queued) cudaEventDestroy(queued);
      if (stream) cudaStreamDestroy(stream);
    }
  } nccl_dp;
  DeviceCollectives nccl_collectives() {
    DeviceCollectives d;
    d.ctx = &nccl_dp;
    d.allreduce_sum = [](void* c, float* buf, size_t n) {
      auto* x = static_cast<NcclDp*>(c);
      x->after_compute();
      x->comm.allreduce_sum(buf, n, x->stream);
    };
    d.reduce_scatter_sum = [](void* c, const float* send, float* recv, size_t count) {
      auto* x = static_cast<NcclDp*>(c);
      x->after_compute();
      x->comm.reduce_scatter_sum(send, recv, count, x->stream);
    };
    d.all_gather = [](void* c, const float* send, float* recv, size_t count) {
      auto* x = static_cast<NcclDp*>(c);
      x->after_compute();
      x->comm.all_gather(send, recv, count, x->stream);
    };
    d.synchronize = [](void* c) {
      auto* x = static_cast<NcclDp*>(c);
      x->comm.synchronize(x->stream);
    };
    return d;
  }
#endif
  DeviceCollectives device_dp;

  // Gradient synchronisation (and the gradients), the pipeline executor, AdamW's moments and,
  // off the host, the file copies.
  void allocate_step_state(const GradSyncOptions& sync_options) {
    const Layout& L = opts.layout;
    sync = std::make_unique<GradSync>(*model, grid.dp, &grid.tp, sync_options, ops, alloc, &grid.pp,
                                      &grid.embedding);
    size_t message = 0;  // the largest boundary message of any chunk
    for (int c = 0; L.pp > 1 && c < L.virtual_stages; ++c) {
      const StageBoundary b = model->boundary(c, 0);
      message = std::max(
          {message, size_t(micro_rows) * b.input_elements, size_t(micro_rows) * b.output_elements});
    }
    executor = std::make_unique<pipeline::PipelineExecutor>(grid.pp, L.virtual_stages, model_slots,
                                                            message, alloc);
    work = stage_work();
    shard = sync->owned();
    m = Buffer<float>(alloc, shard.size());
    v = Buffer<float>(alloc, shard.size());
    if (!on_host) {
      file_params = Buffer<float>(host_alloc, model->params.size());
      file_buffers = Buffer<float>(host_alloc, model->buffers.size());
      file_m = Buffer<float>(host_alloc, shard.size());
      file_v = Buffer<float>(host_alloc, shard.size());
    }
  }

  void setup() {
    const Layout& L = opts.layout;
    loss_scale = LossScale{initial_loss_scale(), 0, tc.loss_scale_window};
    const RowRange rank_rows = batch_slice(tc.batch_size, L.dp, grid.coords.dp_rank, 1, 0);
    first_row = rank_rows.begin;
    local_rows = rank_rows.count;
    micro_rows =
        int(batch_slice(tc.batch_size, L.dp, grid.coords.dp_rank, tc.micro_batches, 0).count);
    data = BatchSource::load(cfg.model, opts.data, tc.seq_len, local_rows,
                             on_host ? alloc : host_alloc, opts.tokenizer);
    data.augment = tc.augment != 0;
    if (data.kind == DataKind::images) {
      const int64_t want = family.sample_size(cfg.model), have = data.images.pixels_per_image();
      if (want != have)
        throw UsageError(fmt::format(
            "{}: images are {}x{} ({} pixels), the {} model takes {} inputs: set its size keys "
            "(--help-config) to fit the data",
            opts.data, data.images.rows, data.images.cols, have, cfg.model.type, want));
      if (family.classes(cfg.model) < data.images.classes)
        throw UsageError(fmt::format("{}: labels go up to {}, the model has {} classes", opts.data,
                                     data.images.classes - 1, family.classes(cfg.model)));
    }
    // The schedule is data: this stage's actions, and from the simulation of every stage's the
    // most micro-batches a chunk of this stage holds at once (its activation sets).
    const int stage = grid.coords.pp_rank;
    schedule = {L.schedule, L.pp, tc.micro_batches, L.virtual_stages};
    train_actions = pipeline::rank_actions(schedule, stage);
    eval_actions = pipeline::forward_only_actions(schedule, stage);
    const pipeline::SimulationResult sim = pipeline::simulate(schedule);
    MPITRON_REQUIRE(sim.ok, "pipeline schedule failed its simulation: " + sim.error);
    int slots = 1;
    for (int n : sim.peak_in_flight_per_chunk[stage]) slots = std::max(slots, n);
    model_slots = slots;

    ModelBuild how;
    how.micro_rows = micro_rows;
    how.seq_len = is_sequence_data(data.kind) ? tc.seq_len : 0;
    how.slots = slots;
    how.recompute = L.recompute;
    how.seed = tc.seed;
    how.flat_align = 16 * size_t(L.dp);  // equal ZeRO shards
    how.slice = RegistrySlice{L.tp, grid.coords.tp_rank, stage, L.pp, {}};
    if (family.pipeline_blocks) {
      const auto blocks = stage_blocks(family.pipeline_blocks(cfg.model), L);
      for (int c = 0; c < L.virtual_stages; ++c) {
        const auto [b, e] = blocks[size_t(pipeline::virtual_stage(schedule, stage, c))];
        how.slice.chunks.push_back({b, e});
      }
    } else {
      how.slice.chunks = {BlockRange{}};
    }
    how.tp = &grid.tp;
    how.alloc = &alloc;
    how.layers = &layers;
    how.precision = parse_precision(opts.precision);
    const size_t before_model = alloc.current_bytes;
    // A GPU may run out of memory on some ranks only (ranks sharing one): every rank stops with
    // the first failing rank's line instead of the others waiting for it in a collective.
    std::string failed;
    try {
      model = build_model(cfg.model, how);
    } catch (const UsageError& e) {
      failed = e.what();
    }
    comm::throw_first_error(failed, MPI_COMM_WORLD);
    model_activation_bytes = alloc.current_bytes - before_model -
                             (model->params.size() + model->buffers.size()) * sizeof(float) -
                             model->weight_copy_bytes();
    loss_terms = int64_t(tc.batch_size) * model->loss_terms_per_sample();
    GradSyncOptions sync_options{L.zero, L.dp_reduce, L.bucket_mb};
#ifdef MPITRON_HAVE_NCCL
    if (opts.comm == "nccl") {
      nccl_dp.open(grid.dp);
      device_dp = nccl_collectives();
      sync_options.device_dp = &device_dp;
    }
#endif
    try {  // no collective inside: gradients, pipeline buffers and moments are allocated
      allocate_step_state(sync_options);
    } catch (const UsageError& e) {
      failed = e.what();
    }
    comm::throw_first_error(failed, MPI_COMM_WORLD);
    row.rank_comm_bytes.assign(is_root() ? grid.shape.world : 0, 0);
    row.rank_peak_mem_bytes.assign(is_root() ? grid.shape.world : 0, 0);
    row.rank_param_bytes.assign(is_root() ? grid.shape.world : 0, 0);
    row.rank_busy_us.assign(is_root() ? grid.shape.world : 0, 0);
    row.rank_grad_sync_us.assign(is_root() ? grid.shape.world : 0, 0);
    row.rank_activation_bytes.assign(is_root() ? grid.shape.world : 0, 0);
    const int64_t param_bytes = int64_t(model->flat_size * sizeof(float));
    MPI_CHECK(MPI_Gather(&param_bytes, 1, MPI_INT64_T, row.rank_param_bytes.data(), 1, MPI_INT64_T,
                         0, MPI_COMM_WORLD));
    row.param_bytes = param_bytes;
  }

  // ---- checkpoints ----------------------------------------------------------------------------

  // Parameters are written by DP rank 0 (they are replicated over DP), moments by their owner;
  // tensors replicated over TP by TP rank 0 only. For reading, every rank reads its TP shard of
  // the parameters and the moments of its own ZeRO shard.
  std::vector<io::TensorPiece> checkpoint_pieces(bool for_writing) {
    const bool param_writer = !for_writing || grid.coords.dp_rank == 0;
    const bool moment_writer = !for_writing || opts.layout.zero > 0 || grid.coords.dp_rank == 0;
    std::vector<io::TensorPiece> pieces = parameter_pieces(
        model->registry, params_for_files(), buffers_for_files(), param_writer, for_writing);
    for (auto& t : moment_pieces(model->registry, shard, m_for_files(), v_for_files(),
                                 moment_writer, for_writing))
      pieces.push_back(std::move(t));
    // Every stage names every tensor of the whole network in the collective write.
    if (for_writing && opts.layout.pp > 1)
      pieces = pieces_for_every_stage(
          std::move(pieces),
          family.registry(cfg.model, RegistrySlice{opts.layout.tp, grid.coords.tp_rank}), true);
    return pieces;
  }

  std::string checkpoint_path(int64_t s) const {
    return (std::filesystem::path(opts.out) / fmt::format("ckpt_{}.h5", s)).string();
  }

  void save_checkpoint() {
    progress.mark("writing a checkpoint (world)");
    CheckpointRecord r;
    r.model = cfg.model;
    r.step = step;
    r.tokens_seen = step * loss_terms;
    r.seed = int64_t(tc.seed);
    r.dp = opts.layout.dp;
    r.tp = opts.layout.tp;
    r.pp = opts.layout.pp;
    r.zero = opts.layout.zero;
    r.lr = tc.lr;
    r.steps = tc.steps;
    r.batch_size = tc.batch_size;
    r.seq_len = tc.seq_len;
    r.data = data.attributes();
    r.settings = run_settings(cfg);
    r.eval_batches = tc.eval_batches;  // for `mpitron eval`'s defaults
    r.loss_scale = loss_scale.scale;
    r.loss_scale_clean_steps = loss_scale.clean_steps;
    const std::string path = checkpoint_path(step);
    download_state();
    io::write_checkpoint(path, checkpoint_root_attributes(r), checkpoint_groups(r),
                         checkpoint_pieces(true), MPI_COMM_WORLD);
    if (is_root()) spdlog::info("checkpoint {}", path);
    if (is_root() && opts.keep_last > 0)
      for (const std::string& old : io::remove_old_checkpoints(opts.out, opts.keep_last))
        spdlog::info("removed {} (--keep-last {})", old, opts.keep_last);
  }

  void load_checkpoint(const std::string& path) {
    const CheckpointRecord r = read_checkpoint_record(path);
    check_same_model(r, cfg.model, path);
    const std::vector<std::string> changes = setting_changes(r.settings, run_settings(cfg));
    if (!changes.empty()) {
      const std::string list = fmt::format("{}", fmt::join(changes, ", "));
      if (!opts.allow_changes)
        throw UsageError(fmt::format(
            "resuming {} would change the run's settings ({}): use the checkpoint's, or pass "
            "--allow-changes to continue with the new ones (the trace records each segment's)",
            path, list));
      if (is_root()) spdlog::warn("continuing {} with changed settings: {}", path, list);
    }
    // Stages read different tensors, so a missing one may stop only some ranks: every rank stops
    // with the message of the first rank that failed, instead of the others waiting for it.
    std::string error;
    download_state();  // what the file does not hold stays as it is
    try {
      io::read_checkpoint_tensors(path, checkpoint_pieces(false));
    } catch (const UsageError& e) {
      error = e.what();
    }
    comm::throw_first_error(error, MPI_COMM_WORLD);
    upload_state();
    model->parameters_changed();
    step = r.step;
    if (loss_scale.enabled() && r.loss_scale > 0) {  // the scaler continues where it stopped
      loss_scale.scale = r.loss_scale;
      loss_scale.clean_steps = r.loss_scale_clean_steps;
    }
    auto c = r.data.find("checksum");
    if (c != r.data.end() && std::holds_alternative<int64_t>(c->second) &&
        std::get<int64_t>(c->second) != int64_t(data.checksum()) && is_root())
      spdlog::warn("data differs from the data the checkpoint was trained on");
    // Verses encoded otherwise than the checkpoint's (bytes vs WordPiece) would be other tokens.
    auto t = r.data.find("tokenizer");
    if (data.kind == DataKind::verses && t != r.data.end() &&
        std::holds_alternative<std::string>(t->second) &&
        std::get<std::string>(t->second) != data.verses.tokenizer) {
      const std::string& was = std::get<std::string>(t->second);
      throw UsageError(fmt::format(
          "{} was trained on verses encoded {}; this run encodes them {}: resume with {}", path,
          was.empty() ? "as bytes" : "with the WordPiece vocabulary " + was,
          data.verses.tokenizer.empty() ? "as bytes" : "with " + data.verses.tokenizer,
          was.empty() ? "no --tokenizer" : "--tokenizer " + was));
    }
  }

  // --init-from: every rank reads its own parameter pieces; the first failure stops every rank.
  void init_from(const std::string& source) {
    std::string error;
    std::vector<std::string> fresh;
    download_state();  // the fresh head keeps its initialisation
    try {
      fresh = load_pretrained_parameters(
          source, cfg.model,
          parameter_pieces(model->registry, params_for_files(), buffers_for_files(), true));
    } catch (const UsageError& e) {
      error = e.what();
    }
    comm::throw_first_error(error, MPI_COMM_WORLD);
    upload_state();
    model->parameters_changed();
    if (is_root()) spdlog::info("parameters from {} (step 0, fresh optimizer)", source);
    if (is_root() && !fresh.empty())
      spdlog::info("initialised, not in {} (this run's task head): {}", source,
                   fmt::join(fresh, ", "));
  }

  // ---- one step -------------------------------------------------------------------------------

  MicroBatch micro_batch(int64_t s, int64_t global_row, int rows, float dropout) const {
    MicroBatch mb;
    mb.samples = data.view(global_row - first_row, rows);
    mb.first_sample = global_row;
    mb.step = s;
    mb.dropout = dropout;
    mb.seed = tc.seed;
    return mb;
  }

  struct StepResult {
    double loss, grad_norm, lr;
    double busy_s;      // this rank's forward and backward
    double pipeline_s;  // its walk through the schedule
    double loss_scale;  // the scale this step's backward used (NaN: no scaling)
    bool skipped;       // its gradients overflowed: no update
  };

  LossScale loss_scale;  // train.loss_scale > 0 or fp16: dynamic; restored from checkpoints

  // train.loss_scale, or 2^16 for fp16 when it is 0: fp16 gradients underflow without a scale.
  double initial_loss_scale() const {
    if (tc.loss_scale == 0 && opts.precision == "fp16") return 0x1p16;
    return tc.loss_scale;
  }

  // Rows of micro-batch mb of this rank's part of the global batch.
  RowRange micro_batch_rows(int mb) const {
    return batch_slice(tc.batch_size, opts.layout.dp, grid.coords.dp_rank, tc.micro_batches, mb);
  }

  // What the current walk through the schedule computes: a training step or an evaluation batch.
  struct Walk {
    int64_t step = 0;
    float dropout = 0, dloss = 0;
    int64_t* correct = nullptr;  // counts arg-max hits on the last stage (classifier evaluation)
    bool training = false;
  } walk;

  // The pipeline's view of the model, built once (its callbacks read `walk`).
  pipeline::StageWork stage_work() {
    pipeline::StageWork w;
    w.forward = [this](int mb, int chunk, int slot) {
      progress.mark("a forward, or waiting for a neighbour stage's message (pp)");
      const MicroBatch b = micro_batch_of(mb, chunk, slot);
      const double loss = model->forward(b);
      if (walk.correct && last_stage() && chunk == opts.layout.virtual_stages - 1)
        *walk.correct += model->count_correct(b);
      return loss;
    };
    w.backward = [this](int mb, int chunk, int slot) {
      progress.mark("a backward, or waiting for a neighbour stage's message (pp)");
      model->backward(micro_batch_of(mb, chunk, slot), walk.dloss,
                      sync->hook(mb == tc.micro_batches - 1));
    };
    w.boundary = [this](int chunk, int slot) { return model->boundary(chunk, slot); };
    w.rows = [this](int mb) { return int(micro_batch_rows(mb).count); };
    return w;
  }

  MicroBatch micro_batch_of(int mb, int chunk, int slot) const {
    const RowRange rows = micro_batch_rows(mb);
    MicroBatch b = micro_batch(walk.step, rows.begin, int(rows.count), walk.dropout);
    b.slot = slot;
    b.chunk = chunk;
    b.training = walk.training;
    return b;
  }

  // A sum the last stage of each DP rank holds, on every rank.
  template <class T>
  T sum_over_stages_and_dp(T v) {
    if (opts.layout.pp > 1) v = grid.pp.allreduce_sum(v);
    if (opts.layout.dp > 1) v = grid.dp.allreduce_sum(v);
    return v;
  }

  StepResult train_step(int64_t s) {
    progress.step.store(s);
    progress.mark("reading the batch");
    data.fill(io::Split::train, tc.seed, s, first_row, local_rows);
    sync->begin_step();
    progress.mark("forward and backward (pipeline messages over pp, TP all-reduces over tp)");
    const float dloss = loss_scale.dloss(loss_terms);
    walk = {s, float(tc.dropout), dloss, nullptr, true};
    const double loss_sum = executor->run(train_actions, work, true);
    progress.mark("the batch-norm statistics' all-reduce (dp)");
    model->end_step(grid.dp);
    progress.mark("the gradient reduction (embedding group, then dp)");
    sync->finish_backward();
    progress.mark("the gradient norm's all-reduce (dp, tp, pp)");
    // Global gradient norm: every rank holds the summed gradient of its shard.
    const double used_scale = loss_scale.scale;
    const double norm = loss_scale.unscaled(sync->grad_norm());
    const double lr = learning_rate(s, tc.lr, tc.warmup_steps, tc.steps, tc.min_lr_ratio);
    progress.mark("the loss all-reduce (pp, dp)");
    const double loss = sum_over_stages_and_dp(loss_sum) / double(loss_terms);
    // The norm is the same on every rank, so every rank skips (or not) alike.
    const bool skipped = !loss_scale.step_ok(norm);
    if (!skipped) {
      const float clip =
          tc.grad_clip > 0 && norm > tc.grad_clip ? float(tc.grad_clip / (norm + 1e-6)) : 1.0f;
      // Unscaling and clipping in one factor; a power of two keeps the product exact.
      const float grad_scale = used_scale > 0 ? clip * float(1.0 / used_scale) : clip;
      const AdamWConfig acfg{tc.beta1, tc.beta2, tc.eps, tc.weight_decay};
      ops.adamw_update(model->registry,
                       {shard.begin, shard.end, model->params.data(), 0, sync->owned_grads(),
                        shard.begin, m.data(), v.data(), shard.begin},
                       acfg, lr, grad_scale, s);
      progress.mark("the parameter all-gather (dp)");
      sync->gather_params(model->params.data());
      model->parameters_changed();
    }
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return {loss,
            norm,
            lr,
            executor->timing().busy_s,
            executor->timing().total_s,
            used_scale > 0 ? used_scale : nan,
            skipped};
  }

  struct EvalResult {
    double loss, accuracy;  // accuracy NaN unless the model is a classifier
  };

  EvalResult evaluate() {
    double sum = 0.0;
    int64_t correct = 0;
    const bool classifier = is_labelled_data(data.kind);
    for (int e = 0; e < tc.eval_batches; ++e) {
      progress.mark("evaluation (pipeline messages over pp, TP all-reduces over tp)");
      data.fill(io::Split::val, tc.seed, e, first_row, local_rows);
      walk = {0, 0.0f, 0.0f, classifier ? &correct : nullptr, false};
      sum += executor->run(eval_actions, work, false);
    }
    sum = sum_over_stages_and_dp(sum);
    correct = sum_over_stages_and_dp(correct);
    const double samples = double(tc.eval_batches) * tc.batch_size;
    return {sum / (samples * model->loss_terms_per_sample()),
            classifier ? double(correct) / samples : std::numeric_limits<double>::quiet_NaN()};
  }

  // ---- the loop -------------------------------------------------------------------------------

  // Of the whole network (a stage's registry holds its own part).
  int64_t total_parameters() const {
    return family.registry ? family.registry(cfg.model, RegistrySlice{}).parameter_count()
                           : model->registry.parameter_count();
  }

  // Blocks of each virtual stage, "3,3,2,4" (empty for a family that does not pipeline).
  std::string stage_layers_text() const {
    if (!family.pipeline_blocks) return "";
    std::string t;
    for (auto [b, e] : stage_blocks(family.pipeline_blocks(cfg.model), opts.layout)) {
      if (!t.empty()) t += ',';
      t += std::to_string(e - b);
    }
    return t;
  }

  io::Attributes run_attributes() const {
    io::Attributes a = model_attributes(cfg.model);
    const Layout& L = opts.layout;
    a["config"] = cfg.name;
    a["data"] = opts.data;
    a["device"] = opts.device;
    a["comm"] = opts.comm;
    a["precision"] = opts.precision;
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
    a["train.augment"] = int64_t(tc.augment);
    a["layout.world"] = int64_t(grid.shape.world);
    a["layout.dp"] = int64_t(L.dp);
    a["layout.tp"] = int64_t(L.tp);
    a["layout.pp"] = int64_t(L.pp);
    a["layout.zero"] = int64_t(L.zero);
    a["layout.dp_reduce"] = dp_reduce_name(L.dp_reduce);
    a["layout.bucket_mb"] = L.bucket_mb;
    a["layout.schedule"] = std::string(pipeline::schedule_name(L.schedule));
    a["layout.virtual_stages"] = int64_t(L.virtual_stages);
    a["layout.stage_layers"] = stage_layers_text();
    a["layout.recompute"] = std::string(L.recompute ? "block" : "none");
    a["gemm"] = std::string(on_host ? cpu::gemm_library() : "cublas");
    if (!opts.init_from.empty()) a["init_from"] = opts.init_from;
    a["parameters"] = total_parameters();
    return a;
  }

  // Rank 0 looks at the run folder and decides; every rank gets its verdict (file systems may
  // show ranks different views, and a refusal must reach every rank).
  std::string choose_checkpoint() {
    std::string chosen, error;
    if (is_root()) {
      try {
        for (const std::string& stale : io::remove_stale_checkpoint_writes(opts.out))
          spdlog::info("removed {}: the remains of an interrupted checkpoint write", stale);
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
    const Watchdog watchdog(progress, opts.hang_timeout_s, grid.rank);
    progress.mark("choosing and loading the checkpoint (world)");
    if (!opts.init_from.empty() && !opts.resume.empty() && opts.resume != "auto")
      throw UsageError(
          "--init-from and --resume CKPT exclude each other (with --resume auto, a "
          "checkpoint in --out wins over --init-from)");
    const std::string resume_from = choose_checkpoint();
    if (!resume_from.empty()) {
      load_checkpoint(resume_from);
      if (is_root()) spdlog::info("resumed from {} at step {}", resume_from, step);
    } else if (!opts.init_from.empty()) {
      init_from(opts.init_from);
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
          "{} ({}): {} parameters, layout dp={}{} tp={} pp={} zero={}{}, global batch {} "
          "({} micro-batches of {} per rank), {} steps, {}{}, gemm {}, {}",
          cfg.name, cfg.model.type, total_parameters(), opts.layout.dp,
          opts.dp_inferred ? " (ranks / tp·pp)" : "", opts.layout.tp, opts.layout.pp,
          opts.layout.zero,
          opts.layout.pp > 1
              ? fmt::format(", schedule {} (blocks per stage {}, {} activation sets on stage 0)",
                            pipeline::schedule_name(opts.layout.schedule), stage_layers_text(),
                            model_slots)
              : "",
          is_sequence_data(data.kind) ? fmt::format("{}x{}", tc.batch_size, tc.seq_len)
                                      : fmt::format("{}", tc.batch_size),
          tc.micro_batches, micro_rows, tc.steps, opts.device,
          opts.precision == "fp32"
              ? ""
              : fmt::format(" {}{}", opts.precision,
                            loss_scale.enabled() ? fmt::format(" (loss scale from 2^{})",
                                                               std::ilogb(loss_scale.scale))
                                                 : ""),
          on_host ? cpu::gemm_library() : "cublas", data.describe());
    }
    std::signal(SIGUSR1, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
    std::signal(SIGINT, on_stop_signal);

    const int64_t first = step + 1;
    const auto t_start = Clock::now();
    // Tokens (or samples) a step reads; a masked LM predicts only some of its tokens.
    const double tokens_per_step =
        is_sequence_data(data.kind) ? double(tc.batch_size) * tc.seq_len : double(tc.batch_size);
    comm_bytes_before = comm_bytes_total();
    for (int64_t s = first; s <= tc.steps; ++s) {
      const auto t0 = Clock::now();
      const StepResult r = train_step(s);
      const double dt = seconds_since(t0);
      step = s;
      const double nan = std::numeric_limits<double>::quiet_NaN();
      EvalResult eval{nan, nan};
      if ((tc.eval_every > 0 && s % tc.eval_every == 0) || s == tc.steps) eval = evaluate();
      const double val = eval.loss;
      const uint64_t bytes_now = comm_bytes_total();
      const int64_t comm_bytes = int64_t(bytes_now - comm_bytes_before);
      comm_bytes_before = bytes_now;
      progress.mark("gathering the per-rank figures (world)");
      int64_t peak = int64_t(alloc.peak_bytes);
      int64_t busy_us = int64_t(r.busy_s * 1e6);
      MPI_CHECK(MPI_Gather(&busy_us, 1, MPI_INT64_T, row.rank_busy_us.data(), 1, MPI_INT64_T, 0,
                           MPI_COMM_WORLD));
      int64_t sync_us = int64_t(sync->take_comm_seconds() * 1e6);
      MPI_CHECK(MPI_Gather(&sync_us, 1, MPI_INT64_T, row.rank_grad_sync_us.data(), 1, MPI_INT64_T,
                           0, MPI_COMM_WORLD));
      int64_t act_bytes = int64_t(model_activation_bytes + executor->send_buffer_bytes());
      MPI_CHECK(MPI_Gather(&act_bytes, 1, MPI_INT64_T, row.rank_activation_bytes.data(), 1,
                           MPI_INT64_T, 0, MPI_COMM_WORLD));
      double slowest_s = 0;
      MPI_CHECK(MPI_Reduce(&r.pipeline_s, &slowest_s, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
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
        row.val_accuracy = eval.accuracy;
        row.lr = r.lr;
        row.grad_norm = r.grad_norm;
        row.tokens_per_s = tokens_per_step / dt;
        row.step_s = dt;
        row.comm_bytes = comm_bytes;
        row.peak_mem_bytes = peak;
        row.bubble = measured_bubble(row.rank_busy_us, slowest_s);
        row.loss_scale = r.loss_scale;
        row.skipped = r.skipped ? 1 : 0;
        if (r.skipped)
          spdlog::info(
              "step {}: gradients overflowed at loss scale 2^{}: step skipped, scale now 2^{}", s,
              std::ilogb(r.loss_scale), std::ilogb(loss_scale.scale));
        trace->append(row);
        if ((tc.log_every > 0 && s % tc.log_every == 0) || s == first || s == tc.steps ||
            !std::isnan(val)) {
          const double elapsed = seconds_since(t_start);
          const double eta = elapsed / double(s - first + 1) * double(tc.steps - s);
          spdlog::info(
              "step {:>6}/{} | loss {:.4f}{}{} | lr {:.2e} | norm {:.3f}{} | {:.1f}k {}/s | "
              "{:.1f} ms{} | params {} | peak {} | ETA {}",
              s, tc.steps, r.loss, std::isnan(val) ? "" : fmt::format(" | val {:.4f}", val),
              std::isnan(eval.accuracy) ? "" : fmt::format(" | acc {:.2f}%", 100 * eval.accuracy),
              r.lr, r.grad_norm,
              std::isnan(r.loss_scale) ? ""
                                       : fmt::format(" | scale 2^{}", std::ilogb(r.loss_scale)),
              tokens_per_step / dt / 1000, is_sequence_data(data.kind) ? "tok" : "samples",
              dt * 1000, opts.layout.pp > 1 ? fmt::format(" | bubble {:.2f}", row.bubble) : "",
              human_bytes(double(row.param_bytes)), human_bytes(double(peak)), human_seconds(eta));
        }
      }
      const bool ckpt_due = tc.ckpt_every > 0 && s % tc.ckpt_every == 0;
      progress.mark("the stop-signal agreement (world)");
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
              "{} received: stopped after step {} with a checkpoint; continue "
              "with --resume auto",
              stop_signal_name(stop), s);
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

std::vector<std::pair<int, int>> stage_blocks(int blocks, const Layout& L) {
  const int stages = L.pp * L.virtual_stages;
  std::vector<int> counts = L.stage_layers;
  if (!counts.empty()) {
    if (L.schedule == pipeline::ScheduleKind::interleaved)
      throw UsageError(
          "--stage-layers chooses the blocks of gpipe and 1f1b stages; the interleaved schedule "
          "splits the blocks evenly over its model chunks");
    if (int(counts.size()) != L.pp)
      throw UsageError(
          fmt::format("--stage-layers lists {} stages but --pp is {}: give one block "
                      "count per stage",
                      counts.size(), L.pp));
    int sum = 0;
    for (size_t s = 0; s < counts.size(); ++s) {
      if (counts[s] < 1)
        throw UsageError(
            fmt::format("--stage-layers gives stage {} {} blocks: every stage needs at least one",
                        s, counts[s]));
      sum += counts[s];
    }
    if (sum != blocks)
      throw UsageError(
          fmt::format("--stage-layers sums to {} blocks but the model has {} (n_layer, or 3 x "
                      "blocks_per_stage): the stages must hold "
                      "every block once",
                      sum, blocks));
  } else {
    if (stages > blocks)
      throw UsageError(fmt::format(
          "--pp {}{} makes {} pipeline stages for {} blocks (n_layer, or 3 x blocks_per_stage): "
          "more stages than blocks; "
          "use at most {}",
          L.pp, L.virtual_stages > 1 ? fmt::format(" x --virtual-stages {}", L.virtual_stages) : "",
          stages, blocks, blocks));
    if (L.schedule == pipeline::ScheduleKind::interleaved && blocks % stages != 0)
      throw UsageError(
          fmt::format("the model's {} blocks (n_layer, or 3 x blocks_per_stage) do not divide by "
                      "--pp {} x --virtual-stages {}: the interleaved "
                      "schedule gives every model chunk the same number of blocks",
                      blocks, L.pp, L.virtual_stages));
    for (int s = 0; s < stages; ++s) counts.push_back(blocks / stages + (s < blocks % stages));
  }
  std::vector<std::pair<int, int>> ranges;
  int begin = 0;
  for (int n : counts) ranges.push_back({begin, begin + n}), begin += n;
  return ranges;
}

namespace {
// --device: one the build has, for a family and a layout it runs; makes the rank's GPU current
// (ranks of one node share its GPUs round-robin: --comm mpi stages their collectives on the host).
void check_device(const std::string& device, const std::string& comm_kind,
                  const std::string& precision, const ModelFamily& family, const Layout& L) {
  if (device != "cpu" && device != "cuda" && device != "cpu-staged")
    throw UsageError(fmt::format("--device {}: not a device (cpu, cuda or cpu-staged)", device));
  if (parse_precision(precision) != DType::f32) {
    if (family.type != std::string("gpt"))
      throw UsageError(
          fmt::format("--precision {} trains the gpt family so far; the {} family runs in fp32",
                      precision, family.type));
    if (L.tp > 1 || L.pp > 1)
      throw UsageError(fmt::format(
          "--precision {} runs with data parallelism only so far (--tp 1 --pp 1, got --tp {} --pp "
          "{}); tensor and pipeline parallelism run in fp32",
          precision, L.tp, L.pp));
    if (device == "cpu-staged")
      throw UsageError(
          fmt::format("--precision {}: --device cpu-staged runs in fp32 only", precision));
  }
  if (comm_kind != "mpi" && comm_kind != "nccl")
    throw UsageError(
        fmt::format("--comm {}: not a communication library (mpi or nccl)", comm_kind));
  if (comm_kind == "nccl") {
    if (device != "cuda")
      throw UsageError(
          fmt::format("--comm nccl sums a GPU's gradients: it needs --device cuda "
                      "(got --device {})",
                      device));
#ifndef MPITRON_HAVE_NCCL
    throw UsageError("--comm nccl: this build has no NCCL (use --comm mpi)");
#endif
    if (L.zero > 1 || L.dp_reduce != comm::DpReduce::allreduce)
      throw UsageError(fmt::format(
          "--comm nccl reduces with NCCL's allreduce at ZeRO 0 or 1 (got --zero {} --dp-reduce "
          "{}): use --comm mpi for the others",
          L.zero, comm::dp_reduce_name(L.dp_reduce)));
  }
  if (device == "cpu") return;
  step_backend(device);  // UsageError where this build has no CUDA backend
  if (family.type != std::string("gpt"))
    throw UsageError(
        fmt::format("--device {} trains the gpt family so far; the {} family runs on the cpu",
                    device, family.type));
  if (L.tp > 1 || L.pp > 1)
    throw UsageError(fmt::format(
        "--device {} runs data parallelism only so far (--tp 1 --pp 1, got --tp {} --pp {}); "
        "tensor and pipeline parallelism run on the cpu",
        device, L.tp, L.pp));
  if (device != "cuda") return;
#ifdef MPITRON_HAVE_CUDA
  MPI_Comm node = MPI_COMM_NULL;
  int local_rank = 0;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &local_rank));
  MPI_CHECK(MPI_Comm_free(&node));
  std::string error;
  try {
#ifdef MPITRON_HAVE_NCCL
    // NCCL refuses two ranks on one GPU: one each, or a clear line on every rank.
    if (comm_kind == "nccl") {
      comm::select_local_device(MPI_COMM_WORLD, true);
      return;
    }
#endif
    cuda::select_device(local_rank);
  } catch (const UsageError& e) {
    error = e.what();
  }
  comm::throw_first_error(error, MPI_COMM_WORLD);  // a node without a GPU may be any rank's
#endif
}
}  // namespace

int run_training(TrainOptions opts) {
  validate_config(opts.cfg);
  const bool dp_inferred = opts.layout.dp == 0;
  if (dp_inferred) {
    int world = 1;
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    const int64_t model_ranks = int64_t(opts.layout.tp) * opts.layout.pp;
    if (opts.layout.tp < 1 || opts.layout.pp < 1 || world % model_ranks != 0)
      throw UsageError(fmt::format(
          "the job has {} ranks, which tp {} x pp {} does not divide: dp is the job's ranks / "
          "(tp x pp); choose --tp and --pp to fit, or give --dp",
          world, opts.layout.tp, opts.layout.pp));
    opts.layout.dp = int(world / model_ranks);
  }
  opts.dp_inferred = dp_inferred;
  const Layout& L = opts.layout;
  const TrainConfig& tc = opts.cfg.train;
  if (L.tp >= 1) model_family(opts.cfg.model.type).validate_layout(opts.cfg.model, L.tp);
  const ModelFamily& family = model_family(opts.cfg.model.type);
  if (L.pp > 1 && !family.pipeline_blocks)
    throw UsageError(fmt::format(
        "the {} family runs as one pipeline stage: use --pp 1 (got --pp {})", family.type, L.pp));
  if (L.recompute && !family.recomputes)
    throw UsageError(fmt::format(
        "--recompute block is for the GPT's transformer blocks; the {} family keeps its "
        "activations (--recompute none)",
        family.type));
  if (L.pp >= 1) {
    const pipeline::ScheduleSpec spec{L.schedule, L.pp, tc.micro_batches, L.virtual_stages};
    if (std::string e = pipeline::check_schedule(spec); !e.empty()) throw UsageError(e);
    if (family.pipeline_blocks) stage_blocks(family.pipeline_blocks(opts.cfg.model), L);
  }
  if (L.pp > 1 && L.zero == 2)
    throw UsageError(
        "--zero 2 reduces gradients while backward runs, which a pipeline cannot (the tied "
        "embedding's gradient is complete only after the flush): use --zero 1 with --pp > 1");
  if (L.pp > 1 && L.bucket_mb > 0)
    throw UsageError(
        "--bucket-mb overlaps the gradient reduction with backward, which a pipeline cannot (the "
        "tied embedding's gradient is complete only after the flush): drop it with --pp > 1");
  comm::Grid grid = comm::make_grid(L.dp, L.tp, L.pp);
  check_device(opts.device, opts.comm, opts.precision, family, L);
  if (L.zero < 0 || L.zero > 2)
    throw UsageError(fmt::format("--zero {} is not a ZeRO stage (0, 1 or 2)", L.zero));
  if (std::string e = check_batch_split(tc.batch_size, L.dp, tc.micro_batches); !e.empty())
    throw UsageError(e);
  if (family.sample_group) {
    const int64_t group = family.sample_group(opts.cfg.model),
                  rows = tc.batch_size / (int64_t(L.dp) * tc.micro_batches);
    if (rows % group != 0)
      throw UsageError(fmt::format(
          "micro-batches of {} samples (batch {} / dp {} / micro-batches {}) do not hold whole "
          "batch-norm groups of {} (model.norm_group): choose --batch-size as a multiple of {}",
          rows, tc.batch_size, L.dp, tc.micro_batches, group,
          group * int64_t(L.dp) * tc.micro_batches));
  }
  if (!(L.bucket_mb >= 0 && L.bucket_mb <= 1e6))
    throw UsageError("--bucket-mb must be between 0 (no buckets) and 1e6 MiB");
  if (!(opts.hang_timeout_s >= 0))
    throw UsageError("--hang-timeout must be 0 (no watchdog) or a number of seconds");
  if (opts.keep_last < 0)
    throw UsageError(
        fmt::format("--keep-last {} must be 0 (keep every checkpoint) or more", opts.keep_last));
  if (opts.threads < 0 || opts.threads > 1024)
    throw UsageError(
        fmt::format("--threads {} is out of range (0: default, else 1..1024)", opts.threads));
  if (opts.data.empty()) opts.data = model_family(opts.cfg.model.type).default_data;
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
