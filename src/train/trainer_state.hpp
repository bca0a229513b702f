// The trainer's state, shared by the files that make up run_training and included by nothing
// else: setup (trainer.cpp), the step and evaluation walks (train_step.cpp), the loop and its
// per-rank metrics (train_loop.cpp), checkpoints and resume (trainer_checkpoint.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/grid.hpp"
#include "io/checkpoint.hpp"
#include "io/trace.hpp"
#include "src/model/family.hpp"
#include "src/pipeline/executor.hpp"
#include "src/pipeline/schedule.hpp"
#include "src/task/translation.hpp"
#include "src/train/adamw.hpp"
#include "src/train/batch_slice.hpp"
#include "src/train/batch_source.hpp"
#include "src/train/grad_sync.hpp"
#include "src/train/loss_scale.hpp"
#include "src/train/model_checkpoint.hpp"
#include "src/train/train_device.hpp"
#include "src/train/trainer.hpp"
#include "src/train/watchdog.hpp"

namespace mpitron {

// What one rank contributes to a step's trace row, gathered on rank 0 in one MPI_Gather.
struct RankMetrics {
  int64_t busy_us = 0;           // forward and backward
  int64_t grad_sync_us = 0;      // GradSync's communication
  int64_t activation_bytes = 0;  // the model's activation sets, scratch and send buffers
  int64_t comm_bytes = 0;        // sent during the step
  int64_t peak_mem_bytes = 0;    // the device allocator's peak
  double pipeline_s = 0;         // its walk through the schedule (the slowest gives the bubble)
};

// "memory plan: every rank's measured peak within 0.12% of the plan (...)": the trace row's
// per-rank peaks against the plan's (rank 0).
std::string plan_accuracy_line(const io::TraceRow& row);

struct StepResult {
  double loss, grad_norm, lr;
  double busy_s;      // this rank's forward and backward
  double pipeline_s;  // its walk through the schedule
  double loss_scale;  // the scale this step's backward used (NaN: no scaling)
  bool skipped;       // its gradients overflowed: no update
};

struct EvalResult {
  double loss, accuracy;  // accuracy NaN unless the model is a classifier
};

struct Trainer {
  static constexpr int kExitStoppedBySignal = 3;

  TrainOptions opts;
  const RunConfig& cfg;
  const TrainConfig& tc;
  comm::Grid& grid;
  const ModelFamily& family;
  TrainDevice dev;  // first: its allocators outlive every buffer below
  BatchSource data;
  std::unique_ptr<Model> model;
  std::unique_ptr<GradSync> sync;
  pipeline::ScheduleSpec schedule;
  std::vector<pipeline::Action> train_actions, eval_actions;  // this stage's, per step
  pipeline::SendPlan train_sends, eval_sends;                 // when their sends are received
  std::unique_ptr<pipeline::PipelineExecutor> executor;
  pipeline::StageWork work;
  size_t model_activation_bytes = 0;  // the model's activation sets and backward scratch
  int64_t planned_bytes = -1;         // the memory plan's peak for this rank (-1: no plan)
  int64_t planned_host_bytes = 0;     // its host rows (offloaded state, staged messages)
  int model_slots = 1;                // activation sets per chunk
  int micro_rows = 0;                 // samples per micro-batch on this rank
  int64_t first_row = 0;              // this rank's first sample of the global batch
  int64_t local_rows = 0;             // samples of the global batch on this rank
  int64_t loss_terms = 0;             // loss terms of a global batch (tokens, or samples)
  ShardRange shard;
  Buffer<float> m, v;  // AdamW moments of the shard (empty with --optimizer adamw8bit)
  // --offload optimizer off the host: two staging chunks (pinned) of the gradient and parameter
  // shard, the host's update walking the shard a chunk at a time while the next comes down (no
  // parameter chunks with the master weights in host memory).
  Buffer<float> offload_grads, offload_params;
  // --optimizer adamw8bit: the shard's moments as codes (per element) and absmax (per block).
  struct AdamW8bitState {
    Buffer<uint8_t> m_codes, v_codes;
    Buffer<float> m_absmax, v_absmax;
  } adamw8bit;
  // The 8-bit state on another device than the host: its host copies, through which files read
  // and write it (empty otherwise).
  AdamW8bitState adamw8bit_files;
  AdamW8bitShard adamw8bit_shard();        // a view over shard of what files read and write
  std::vector<AdamWTensor> adamw_tensors;  // the model's parameters as AdamW sees them
  int64_t step = 0;                        // completed optimizer steps
  std::unique_ptr<io::TraceWriter> trace;
  io::TraceRow row{};                     // reused every step (its per-rank vectors are sized once)
  std::vector<RankMetrics> rank_metrics;  // rank 0: every rank's, gathered each step
  uint64_t comm_bytes_before = 0;
  Progress progress;     // what this rank is doing, for the watchdog (--hang-timeout)
  LossScale loss_scale;  // train.loss_scale > 0 or fp16: dynamic; restored from checkpoints
  // --bitwise: each micro-batch's (reduction shard's) loss sum on the last stage, this walk.
  std::vector<double> shard_losses;
  // --bitwise: the walk's loss, its shards' sums in the fixed tree, on every rank.
  double loss_in_fixed_order();

  // What the current walk through the schedule computes: a training step or an evaluation batch.
  struct Walk {
    int64_t step = 0;
    int64_t data_step = 0;  // the step whose batch it trains on (MicroBatch::data_step)
    float dropout = 0, dloss = 0;
    int64_t* correct = nullptr;  // counts arg-max hits on the last stage (classifier evaluation)
    bool training = false;
  } walk;

  Trainer(TrainOptions o, comm::Grid& g);

  bool is_root() const { return grid.rank == 0; }
  bool last_stage() const { return grid.coords.pp_rank == opts.layout.pp - 1; }
  uint64_t comm_bytes_total() const;

  // ---- setup (trainer.cpp)
  void setup();
  void allocate_step_state(const GradSyncOptions& sync_options);

  // ---- one step and evaluation (train_step.cpp)
  double initial_loss_scale() const;
  RowRange micro_batch_rows(int mb) const;
  MicroBatch micro_batch(int64_t s, int64_t global_row, int rows, float dropout) const;
  MicroBatch micro_batch_of(int mb, int chunk, int slot) const;
  pipeline::StageWork stage_work();
  StepResult train_step(int64_t s);
  EvalResult evaluate();
  // Translation pairs: corpus BLEU of the validation split (train.bleu_lines of it), greedy with
  // the KV cache on world rank 0, the score on every rank.
  double evaluate_bleu();
  std::optional<PairCodec> bleu_codec;  // train.bleu_every: the pairs' text <-> ids
  // A sum the last stage of each DP rank holds, on every rank.
  template <class T>
  T sum_over_stages_and_dp(T v) {
    if (opts.layout.pp > 1) v = grid.pp.allreduce_sum(v);
    if (opts.layout.dp > 1) v = grid.dp.allreduce_sum(v);
    return v;
  }

  // ---- the loop, metrics, trace and log (train_loop.cpp)
  int run();
  int64_t total_parameters() const;
  std::string stage_layers_text() const;
  io::Attributes run_attributes() const;

  // ---- checkpoints and resume (trainer_checkpoint.cpp)
  // The checkpoint --resume names or finds, loaded; else --init-from's parameters. Returns the
  // checkpoint resumed from ("" for a fresh start).
  std::string resume_or_init();
  // The device's state to the host copies files read and write (parameters, buffers, moments,
  // 8-bit state), and back after a read; nothing on the host's own device.
  void download_state();
  void upload_state();
  std::string choose_checkpoint();
  std::vector<io::TensorPiece> checkpoint_pieces(bool for_writing);
  // adamw8bit: each (stage, TP rank)'s flat parameter count, "pp0_tp0 67456, ..." (collective):
  // 8-bit blocks are positions in that array, which a device's padding moves.
  std::string adamw8bit_flat_sizes();
  std::string checkpoint_path(int64_t s) const;
  void save_checkpoint();
  void load_checkpoint(const std::string& path);
  void init_from(const std::string& source);
};

}  // namespace mpitron
