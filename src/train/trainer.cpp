// run_training: the checks every rank makes before any work, the setup of one pipeline stage
// (batch slice, schedule, model, gradient sync, moments) and the Trainer that runs it. The step is
// in train_step.cpp, the loop in train_loop.cpp, checkpoints in trainer_checkpoint.cpp, the
// device side in train_device.cpp.
#include "src/train/trainer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/check.hpp"
#include "base/gemm.hpp"
#include "base/human_units.hpp"
#include "comm/grid.hpp"
#include "comm/world.hpp"
#include "io/sentencepiece_tokenizer.hpp"
#include "src/cpu/adamw.hpp"
#include "src/model/family.hpp"
#include "src/pipeline/schedule.hpp"
#include "src/train/memory_plan.hpp"
#include "src/train/trainer_state.hpp"

namespace mpitron {

namespace {

// A run's SentencePiece model is kept in its folder, so its checkpoints stay usable when the
// original moves; returns the copy's path (the same on every rank).
std::string keep_tokenizer_in_run_folder(const std::string& model, const std::string& out) {
  namespace fs = std::filesystem;
  (void)io::SentencePieceTokenizer::load(model);  // UsageError on every rank when unfit
  const fs::path kept = fs::path(out) / fs::path(model).filename();
  std::string error;
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  if (rank == 0) {
    std::error_code ec;
    fs::create_directories(out, ec);
    if (!ec && fs::exists(kept) && !fs::equivalent(kept, model) &&
        io::SentencePieceTokenizer::load(kept.string()).checksum() !=
            io::SentencePieceTokenizer::load(model).checksum())
      // The run's checkpoints were trained with the kept one: never overwrite it.
      error = fmt::format(
          "the run folder {} keeps another SentencePiece model under the name {}, the one its "
          "checkpoints were trained with: pass --tokenizer {} to continue, or train into another "
          "--out",
          out, kept.filename().string(), kept.string());
    else if (!ec && !fs::exists(kept))
      fs::copy_file(model, kept, ec);
    if (ec)
      error = fmt::format("cannot keep {} in the run folder {}: {}", model, out, ec.message());
  }
  comm::throw_on_all_ranks(error, 0, MPI_COMM_WORLD);
  return fs::absolute(kept).lexically_normal().string();
}

}  // namespace

Trainer::Trainer(TrainOptions o, comm::Grid& g)
    : opts(std::move(o)),
      cfg(opts.cfg),
      tc(opts.cfg.train),
      grid(g),
      family(model_family(opts.cfg.model.type)),
      dev(opts.device, opts.comm) {}

uint64_t Trainer::comm_bytes_total() const {
  return grid.world.bytes_sent + grid.dp.bytes_sent + grid.tp.bytes_sent + grid.pp.bytes_sent +
         dev.nccl_bytes_sent();
}

// Gradient synchronisation (and the gradients), the pipeline executor, AdamW's moments and,
// off the host, the file copies.
void Trainer::allocate_step_state(const GradSyncOptions& sync_options) {
  const Layout& L = opts.layout;
  {
    AllocationPurpose purpose(dev.alloc, "the gradients");
    sync = std::make_unique<GradSync>(*model, grid.dp, &grid.tp, sync_options, dev.ops, dev.alloc,
                                      &grid.pp, &grid.embedding);
  }
  size_t message = 0;  // bytes of the largest boundary message of any chunk
  for (int c = 0; L.pp > 1 && c < L.virtual_stages; ++c) {
    const StageBoundary b = model->boundary(c, 0);
    message = std::max({message, size_t(micro_rows) * b.input_elements * b.element_bytes,
                        size_t(micro_rows) * b.output_elements * b.element_bytes});
  }
  // Off the host the messages pass through host buffers (MPI here cannot read a GPU's memory).
  pipeline::StageTransfers transfers;
  if (!dev.on_host) transfers = {dev.layers.download_bytes, dev.layers.upload_bytes};
  executor = std::make_unique<pipeline::PipelineExecutor>(
      grid.pp, L.virtual_stages, model_slots, message, dev.on_host ? dev.alloc : dev.host_alloc,
      transfers, std::vector<const pipeline::SendPlan*>{&train_sends, &eval_sends});
  work = stage_work();
  shard = sync->owned();
  // The optimizer state: the device's, or with --offload optimizer the host's (where its update
  // runs, on host copies of the gradient and parameter shard when the device is not the host).
  dev.state_on_host = opts.offload_optimizer;
  DeviceAllocator& state_alloc = opts.offload_optimizer ? dev.host_alloc : dev.alloc;
  AllocationPurpose purpose(state_alloc, "the optimizer state");
  if (opts.optimizer == Optimizer::adamw8bit) {
    const size_t blocks = shard.size() / kAdamW8bitBlock;
    adamw8bit.m_codes = Buffer<uint8_t>(state_alloc, shard.size());
    adamw8bit.v_codes = Buffer<uint8_t>(state_alloc, shard.size());
    adamw8bit.m_absmax = Buffer<float>(state_alloc, blocks);
    adamw8bit.v_absmax = Buffer<float>(state_alloc, blocks);
    // Zero moments: the maps' codes of 0 (with absmax 0 any code would dequantize to 0).
    const StepBackend& state_ops = opts.offload_optimizer ? step_backend(Device::cpu) : dev.ops;
    state_ops.fill_bytes(adamw8bit.m_codes.data(),
                         cpu::quantize_nearest(cpu::signed_dynamic_map(), 0.0f), shard.size());
    state_ops.fill_bytes(adamw8bit.v_codes.data(),
                         cpu::quantize_nearest(cpu::unsigned_dynamic_map(), 0.0f), shard.size());
    if (!dev.on_host && !opts.offload_optimizer) {  // the files' host copies
      AllocationPurpose copies(dev.host_alloc, "the 8-bit state's host copies");
      adamw8bit_files.m_codes = Buffer<uint8_t>(dev.host_alloc, shard.size());
      adamw8bit_files.v_codes = Buffer<uint8_t>(dev.host_alloc, shard.size());
      adamw8bit_files.m_absmax = Buffer<float>(dev.host_alloc, blocks);
      adamw8bit_files.v_absmax = Buffer<float>(dev.host_alloc, blocks);
    }
  } else {
    m = Buffer<float>(state_alloc, shard.size());
    v = Buffer<float>(state_alloc, shard.size());
  }
  if (opts.offload_optimizer && !dev.on_host) {
    static_assert(kHostStagingElements % kAdamW8bitBlock == 0);
    // Two chunks each: one downloaded while the host updates the other (train_step).
    const size_t chunk = std::min(shard.size(), kHostStagingElements);
    AllocationPurpose staging(dev.pinned_alloc, "the offloaded update's staging");
    offload_grads = Buffer<float>(dev.pinned_alloc, 2 * chunk);
    if (!opts.offload_master) offload_params = Buffer<float>(dev.pinned_alloc, 2 * chunk);
  }
  adamw_tensors = mpitron::adamw_tensors(model->registry);
  dev.allocate_file_copies(*model, shard.size());
}

void Trainer::setup() {
  const Layout& L = opts.layout;
  loss_scale = LossScale{initial_loss_scale(), 0, tc.loss_scale_window};
  const RowRange rank_rows = batch_slice(tc.batch_size, L.dp, grid.coords.dp_rank, 1, 0);
  first_row = rank_rows.begin;
  local_rows = rank_rows.count;
  micro_rows =
      int(batch_slice(tc.batch_size, L.dp, grid.coords.dp_rank, tc.micro_batches, 0).count);
  std::string failed;  // each rank reads the data on its own node
  try {
    data = BatchSource::load(cfg.model, opts.data, tc.seq_len, local_rows, dev.data_alloc(),
                             opts.tokenizer, tc.objective, tc.span_context_words, tc.span_loss,
                             tc.span_drop_words);
  } catch (const UsageError& e) {
    failed = e.what();
  }
  comm::throw_first_error_naming_host(failed, MPI_COMM_WORLD);
  data.augment = tc.augment != 0;
  if (tc.length_buckets > 0) {
    if (data.kind != DataKind::pairs)
      throw UsageError("train.length_buckets is for translation pairs (gpt with model.task=1)");
    if (opts.device == Device::cuda)
      throw UsageError(
          "train.length_buckets runs on the CPU: the CUDA kernels have not run at a batch's own "
          "length yet (set it to 0 with --device cuda)");
    data.pairs.train_buckets = io::pair_length_buckets(data.pairs.train, tc.length_buckets);
  }
  if (tc.bleu_every > 0 && data.kind != DataKind::pairs)
    throw UsageError("train.bleu_every is for translation pairs (gpt with model.task=1)");
  if (tc.bleu_every > 0 &&
      (L.tp > 1 || L.pp > 1 || opts.device != Device::cpu || opts.precision != DType::f32))
    throw UsageError(
        "train.bleu_every translates with one whole fp32 model on the CPU: it runs at --tp 1 --pp "
        "1 --device cpu --precision fp32 (any --dp); elsewhere set it to 0 and run mpitron "
        "translate and mpitron bleu on the checkpoints");
  if (tc.bleu_every > 0) {  // loaded by every rank now, so that a bad file stops them all here
    bleu_codec.emplace();
    bleu_codec->tokens = data.pairs.tokens;
    if (!data.pairs.tokenizer.empty())
      bleu_codec->spm.emplace(io::SentencePieceTokenizer::load(data.pairs.tokenizer));
  }
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
  train_sends = pipeline::send_plan(schedule, stage, true);
  eval_sends = pipeline::send_plan(schedule, stage, false);
  ModelBuild how =
      stage_model_build(opts, data.kind, stage, grid.coords.tp_rank, grid.coords.dp_rank);
  model_slots = how.slots;
  how.tp = &grid.tp;
  how.tp_device = dev.open_tp_collectives(grid.tp);  // --comm nccl above tp 1; else MPI
  how.alloc = &dev.alloc;
  how.layers = &dev.layers;
  dev.params_on_host = opts.offload_master;
  if (opts.offload_master) {
    how.master_alloc = &dev.host_alloc;
    how.staging = &dev.staging;
    how.staging_alloc = &dev.pinned_alloc;
  }
  dev.alloc.rank = grid.rank;
  dev.pinned_alloc.rank = grid.rank;
  dev.alloc.limit_bytes = opts.max_device_memory;
  if (can_plan_memory(opts)) {
    const StageMemoryPlan plan = plan_stage_memory(opts, stage);
    planned_bytes = int64_t(plan.total());
    planned_host_bytes = int64_t(plan.host_total());
  }
  dev.alloc.planned_bytes = size_t(std::max<int64_t>(planned_bytes, 0));
  const size_t before_model = dev.alloc.current_bytes;
  AllocationPurpose purpose(dev.alloc, "the model (parameters, 16-bit weights, activations)");
  // A GPU may run out of memory on some ranks only (ranks sharing one): every rank stops with
  // the first failing rank's line instead of the others waiting for it in a collective.
  try {
    model = build_model(cfg.model, how);
  } catch (const UsageError& e) {
    failed = e.what();
  }
  comm::throw_first_error(failed, MPI_COMM_WORLD);
  model_activation_bytes =
      dev.alloc.current_bytes - before_model -
      ((opts.offload_master ? 0 : model->params.size()) + model->buffers.size()) * sizeof(float) -
      model->weight_copy_bytes();
  loss_terms = int64_t(tc.batch_size) * model->loss_terms_per_sample();
  GradSyncOptions sync_options{L.zero, L.dp_reduce, L.bucket_mb};
  if (tc.bitwise) {
    sync_options.reduction_shards = tc.reduction_shards;
    sync_options.tp_shards = bitwise_tp_shards(opts);
    sync_options.leaves_per_segment = L.virtual_stages > 1;
    shard_losses.assign(size_t(tc.micro_batches), 0.0);
  }
  if (opts.offload_master) sync_options.params_alloc = &dev.host_alloc;
  // --comm nccl; else MPI
  sync_options.device_embedding = dev.open_embedding_collectives(grid.embedding);
  sync_options.device_dp = dev.open_dp_collectives(grid.dp);
  try {  // no collective inside: gradients, pipeline buffers and moments are allocated
    allocate_step_state(sync_options);
  } catch (const UsageError& e) {
    failed = e.what();
  }
  comm::throw_first_error(failed, MPI_COMM_WORLD);
  rank_metrics.assign(is_root() ? grid.shape.world : 0, RankMetrics{});
  row.rank_comm_bytes.assign(is_root() ? grid.shape.world : 0, 0);
  row.rank_peak_mem_bytes.assign(is_root() ? grid.shape.world : 0, 0);
  row.rank_param_bytes.assign(is_root() ? grid.shape.world : 0, 0);
  row.rank_busy_us.assign(is_root() ? grid.shape.world : 0, 0);
  row.rank_grad_sync_us.assign(is_root() ? grid.shape.world : 0, 0);
  row.rank_activation_bytes.assign(is_root() ? grid.shape.world : 0, 0);
  const int64_t param_bytes = int64_t(model->flat_size * sizeof(float));
  MPI_CHECK(MPI_Gather(&param_bytes, 1, MPI_INT64_T, row.rank_param_bytes.data(), 1, MPI_INT64_T, 0,
                       MPI_COMM_WORLD));
  row.param_bytes = param_bytes;
  row.rank_planned_mem_bytes.assign(is_root() ? grid.shape.world : 0, 0);
  MPI_CHECK(MPI_Gather(&planned_bytes, 1, MPI_INT64_T, row.rank_planned_mem_bytes.data(), 1,
                       MPI_INT64_T, 0, MPI_COMM_WORLD));
}

ModelBuild stage_model_build(const TrainOptions& opts, DataKind data, int stage, int tp_rank,
                             int dp_rank) {
  const Layout& L = opts.layout;
  const TrainConfig& tc = opts.cfg.train;
  const ModelFamily& family = model_family(opts.cfg.model.type);
  const pipeline::ScheduleSpec schedule{L.schedule, L.pp, tc.micro_batches, L.virtual_stages};
  const pipeline::SimulationResult sim = pipeline::simulate(schedule);
  MPITRON_REQUIRE(sim.ok, "pipeline schedule failed its simulation: " + sim.error);
  ModelBuild how;
  how.slots = 1;
  for (int n : sim.peak_in_flight_per_chunk[stage]) how.slots = std::max(how.slots, n);
  how.micro_rows = int(batch_slice(tc.batch_size, L.dp, dp_rank, tc.micro_batches, 0).count);
  how.seq_len = is_sequence_data(data) ? tc.seq_len : 0;
  how.recompute = L.recompute;
  how.seed = tc.seed;
  // Equal ZeRO shards; 8-bit AdamW: of whole blocks, so each element keeps its block at any dp.
  how.flat_align = (opts.optimizer == Optimizer::adamw8bit ? kAdamW8bitBlock : 16) * size_t(L.dp);
  how.slice = RegistrySlice{L.tp, tp_rank, stage, L.pp, {}};
  if (family.pipeline_blocks) {
    const auto blocks = stage_blocks(family.pipeline_blocks(opts.cfg.model), L);
    for (int c = 0; c < L.virtual_stages; ++c) {
      const auto [b, e] = blocks[size_t(pipeline::virtual_stage(schedule, stage, c))];
      how.slice.chunks.push_back({b, e});
    }
  } else {
    how.slice.chunks = {BlockRange{}};
  }
  how.layers = &layer_ops<float>(opts.device);
  how.precision = opts.precision;
  how.head_chunk_rows = opts.lm_head_chunk;
  how.reduction_shards_per_rank = tc.bitwise ? tc.micro_batches : 0;
  how.tp_shards = bitwise_tp_shards(opts);
  return how;
}

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

void check_layout(const TrainOptions& opts) {
  const Layout& L = opts.layout;
  const TrainConfig& tc = opts.cfg.train;
  const ModelFamily& family = model_family(opts.cfg.model.type);
  if (L.tp >= 1) family.validate_layout(opts.cfg.model, L.tp);
  MPITRON_REQUIRE(!opts.offload_master || opts.offload_optimizer,
                  "master weights offloaded without the optimizer state");
  if (opts.offload_master && opts.precision == DType::f32)
    throw UsageError(
        "--offload optimizer,master keeps the fp32 master weights in host memory and the layers' "
        "16-bit copy on the device: it needs --precision bf16 or fp16 (in fp32 the layers read "
        "the master weights themselves)");
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
  if (L.zero < 0 || L.zero > 2)
    throw UsageError(fmt::format("--zero {} is not a ZeRO stage (0, 1 or 2)", L.zero));
  if (opts.lm_head_chunk < 0)
    throw UsageError(fmt::format(
        "--lm-head-chunk {} must be 0 (the whole micro-batch) or a number of token rows",
        opts.lm_head_chunk));
  if (opts.lm_head_chunk > 0 && !family.chunks_head)
    throw UsageError(
        fmt::format("--lm-head-chunk is for the LM head of the {} family; the {} family has none",
                    family_types_with(&ModelFamily::chunks_head), family.type));
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
}

namespace {

// Each rank's host in the log; a TP group across hosts warned about, or refused when strict. The
// same host list on every rank, so every rank decides alike.
void check_placement(const comm::Grid& grid, bool strict) {
  const std::vector<std::string> hosts = comm::gather_host_names(MPI_COMM_WORLD);
  const std::vector<std::string> spread = comm::tp_groups_across_hosts(grid.shape, hosts);
  if (grid.rank == 0) spdlog::info("ranks by host: {}", comm::ranks_by_host(hosts));
  if (spread.empty()) return;
  const std::string advice = fmt::format(
      "give each node a multiple of tp={} consecutive ranks (sbatch --ntasks-per-node, Slurm's "
      "default block distribution; not --distribution=cyclic or mpirun --map-by node)",
      grid.shape.tp);
  if (strict)
    throw UsageError(fmt::format("--strict-placement: {}; {}", fmt::join(spread, "; "), advice));
  if (grid.rank == 0)
    for (const std::string& s : spread)
      spdlog::warn("{}: its all-reduces cross the network every layer; {}", s, advice);
}

}  // namespace

int bitwise_tp_shards(const TrainOptions& opts) {
  return opts.cfg.train.bitwise && opts.precision == DType::f32 ? opts.cfg.train.tp_shards : 0;
}

void resolve_bitwise(TrainOptions& opts) {
  TrainConfig& t = opts.cfg.train;
  if (!t.bitwise) return;
  const Layout& L = opts.layout;
  if (t.reduction_shards == 0) t.reduction_shards = default_reduction_shards(t.batch_size);
  if (std::string e =
          check_reduction_shards(t.batch_size, t.reduction_shards, L.dp, t.micro_batches);
      !e.empty())
    throw UsageError(e);
  // A micro-batch of several shards runs as its shards, one pass each: the same bits, and the
  // schedule's micro-batches are the shards.
  const int asked = t.micro_batches;
  t.micro_batches = t.reduction_shards / L.dp;
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  if (asked > 1 && asked != t.micro_batches && rank == 0)
    spdlog::info(
        "--bitwise: {} micro-batches of {} shards each run as {} micro-batches of one shard (the "
        "same bits; the pipeline schedules {})",
        asked, t.micro_batches / asked, t.micro_batches, t.micro_batches);
  if (L.tp > 1 && opts.precision != DType::f32)
    throw UsageError(fmt::format(
        "--bitwise at --tp {} sums its TP shards in fp32: use --precision fp32, or --tp 1", L.tp));
  if (t.tp_shards % L.tp != 0)
    throw UsageError(fmt::format(
        "--bitwise: --tp {} does not divide the {} TP shards (train.tp_shards): use --tp {}, or "
        "--tp-shards a power of two that {} divides",
        L.tp, t.tp_shards, t.tp_shards < L.tp ? t.tp_shards : 1, L.tp));
  if (L.bucket_mb > 0)
    throw UsageError(
        "--bucket-mb reduces gradients while backward runs; --bitwise sums every shard's gradient "
        "in a fixed tree after the step's last shard: drop --bucket-mb");
  if (opts.comm == CommKind::nccl)
    throw UsageError(
        "--bitwise sums the shards' gradients in a fixed tree with MPI: use --comm mpi (NCCL's "
        "all-reduce chooses its own order)");
}

int run_training(TrainOptions opts) {
  // A closed stdout (`| head`) must not stop training: writes to it fail quietly instead. Before
  // the first log line (the ranks' hosts), or a reader that stops early kills the run.
  std::signal(SIGPIPE, SIG_IGN);
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
  resolve_bitwise(opts);
  check_layout(opts);
  const Layout& L = opts.layout;
  const ModelFamily& family = model_family(opts.cfg.model.type);
  comm::Grid grid = comm::make_grid(L.dp, L.tp, L.pp);
  check_placement(grid, opts.strict_placement);
  check_device(opts.device, opts.comm, opts.precision, family, L);
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
  if (opts.data.empty()) opts.data = preset_data(opts.cfg);
  if (opts.out.empty())
    opts.out =
        fmt::format("runs/{}_DP{}_TP{}_PP{}_zero{}", opts.cfg.name, L.dp, L.tp, L.pp, L.zero);
  if (model_family(opts.cfg.model.type).data(opts.cfg.model) == DataKind::pairs &&
      !opts.tokenizer.empty())
    opts.tokenizer = keep_tokenizer_in_run_folder(opts.tokenizer, opts.out);
  if (opts.threads > 0) {
    opts.threads_why = "--threads";
  } else {
    // The cores the node's ranks may use: the union of their affinity masks.
    cpu_set_t own, node_set;
    CPU_ZERO(&own);
    if (sched_getaffinity(0, sizeof own, &own) != 0)
      for (unsigned c = 0; c < std::max(1u, std::thread::hardware_concurrency()); ++c)
        CPU_SET(c, &own);
    MPI_Comm node = MPI_COMM_NULL;
    int ranks_on_node = 1;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_size(node, &ranks_on_node));
    MPI_CHECK(MPI_Allreduce(&own, &node_set, int(sizeof own), MPI_BYTE, MPI_BOR, node));
    MPI_CHECK(MPI_Comm_free(&node));
    const cpu::ComputeThreads t =
        cpu::default_compute_threads(CPU_COUNT(&own), CPU_COUNT(&node_set), ranks_on_node);
    opts.threads = t.threads;
    opts.threads_why = t.why;
  }
  cpu::set_compute_threads(opts.threads);
  if (opts.max_device_memory > 0 && can_plan_memory(opts)) {
    const MemoryPlan plan = plan_memory(opts);
    if (plan.peak() > opts.max_device_memory)
      throw UsageError(fmt::format("the memory plan does not fit --max-device-memory {}:\n{}",
                                   human_bytes(double(opts.max_device_memory)),
                                   memory_plan_text(opts, plan, opts.max_device_memory)));
  }
  Trainer trainer(std::move(opts), grid);
  trainer.setup();
  return trainer.run();
}

}  // namespace mpitron
