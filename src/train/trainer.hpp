// The training loop for every model family: one global batch per step, sliced over data-parallel
// ranks and micro-batches; forward and backward through the Model interface; gradients reduced by
// GradSync (buckets, ZeRO 0/1/2); AdamW through the step backend; evaluation, HDF5 trace and
// checkpoints, exact resume. It names no model family.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/dp_reduce.hpp"
#include "src/model/config.hpp"
#include "src/model/family.hpp"
#include "src/model/model.hpp"
#include "src/model/precision.hpp"
#include "src/pipeline/schedule.hpp"
#include "src/train/adamw.hpp"
#include "src/train/train_device.hpp"

namespace mpitron {

using comm::dp_reduce_name;
using comm::DpReduce;
using comm::parse_dp_reduce;

struct Layout {
  int dp = 0, tp = 1, pp = 1;  // dp 0: the job's ranks / (tp * pp)
  int zero = 0;  // 0: replicated optimizer, 1: moments sharded over DP, 2: gradients sharded too
  DpReduce dp_reduce = DpReduce::allreduce;
  double bucket_mb = 0;  // > 0: reduce gradients in buckets of this size while backward runs
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::one_f_one_b;
  int virtual_stages = 1;         // model chunks per pipeline rank (interleaved)
  std::vector<int> stage_layers;  // blocks per stage; empty: balanced
  bool recompute = false;         // --recompute block (ModelBuild::recompute)
};

// Blocks [begin, end) of every virtual stage (pp * virtual_stages of them, in network order):
// layout.stage_layers when given, else as even as possible with the first stages taking the
// remainder (the last stage also carries the LM head). UsageError, identical on every rank, when
// the blocks cannot be split so.
std::vector<std::pair<int, int>> stage_blocks(int blocks, const Layout& layout);

struct TrainOptions;

// The ModelBuild of a pipeline stage's model on a TP and DP rank: its micro-batch, the schedule's
// activation sets, its slice and chunks, precision and the device's layers (alloc and tp unset).
ModelBuild stage_model_build(const TrainOptions& opts, DataKind data, int stage, int tp_rank,
                             int dp_rank);

struct TrainOptions {
  RunConfig cfg;
  Layout layout;
  std::string data;    // text file or image folder; "" picks the family's default
  std::string out;     // run folder; "" picks runs/<config>_DP<dp>_TP<tp>_PP<pp>_zero<z>
  std::string resume;  // "", "auto" (latest checkpoint in out, if any) or a checkpoint path
  // Pretrained parameters to start from when not resuming (HF GPT-2 folder or .safetensors, or an
  // mpitron checkpoint): parameters only, step 0, fresh optimizer.
  std::string init_from;
  // Verse data: a BERT WordPiece vocabulary; pairs: a SentencePiece model ("": byte tokens).
  std::string tokenizer;
  Device device = Device::cpu;
  CommKind comm = CommKind::mpi;  // how a GPU's dp ranks sum gradients: host copies or NCCL
  // Storage of activations and layer weights: fp32, bf16 or fp16 (the GPT at tp 1 and pp 1; fp32
  // master weights, gradients and moments whatever it is).
  DType precision = DType::f32;
  // adamw: fp32 moments; adamw8bit: 8-bit moments in blocks of the stage's flat positions (the
  // CPU only; tp and pp change its blocks, dp and the ZeRO stage do not).
  Optimizer optimizer = Optimizer::adamw;
  int threads = 0;          // compute threads per rank; 0: the cores shared by the node's ranks
  std::string threads_why;  // how run_training chose them, for the layout line
  int trace_flush_every = 10;
  double hang_timeout_s = 600;  // a rank that makes no progress this long ends the job; 0: never
  int keep_last = 0;            // > 0: keep only the newest keep_last checkpoints (0: every one)
  bool dp_inferred = false;     // set by run_training when layout.dp was 0
  bool allow_changes = false;   // resume with other settings (run_settings) than the checkpoint's
  // --max-device-memory in bytes (0: none): a plan above it is refused before any work, and the
  // device allocator refuses any allocation past it.
  size_t max_device_memory = 0;
  // --offload optimizer: the optimizer state in host memory and its update on the host's cores
  // (the same arithmetic, so the same bits).
  bool offload_optimizer = false;
  // --offload optimizer,master: the fp32 master weights in host memory too (below fp32: the
  // layers read the device's 16-bit copy, rounded on the host and uploaded after each update).
  bool offload_master = false;
  int lm_head_chunk = 0;  // --lm-head-chunk: ModelBuild::head_chunk_rows (0: the whole micro-batch)
  // --strict-placement: a TP group whose ranks are on more than one host is refused (else warned).
  bool strict_placement = false;
};

// --bitwise: train.reduction_shards resolved (0: gcd(batch, 24)) and micro_batches set to one
// shard each (shards / dp); UsageError for a layout that cannot sum in the fixed order.
void resolve_bitwise(TrainOptions& opts);
// --bitwise: the TP shards the split sums run over, on the CPU in fp32 (elsewhere 0: tp stays 1).
int bitwise_tp_shards(const TrainOptions& opts);

// UsageError for a layout the model, schedule or batch cannot take (opts.layout.dp resolved).
void check_layout(const TrainOptions& opts);

// Runs training on MPI_COMM_WORLD. Throws UsageError for bad input (every rank agrees before any
// collective work); returns the process exit code.
int run_training(TrainOptions opts);

}  // namespace mpitron
