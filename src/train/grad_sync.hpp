// Data-parallel gradient synchronisation over the model's gradient segments, driven by the
// backward hook: ZeRO 0 (every rank sums everything; optionally in buckets launched while
// backward still runs), ZeRO 1 (gradients reduce-scattered after backward, each rank updating its
// 1/dp shard; parameters all-gathered after the update) and ZeRO 2 (each segment reduce-scattered
// as soon as backward leaves it, so no rank holds the whole summed gradient). Models know none of
// this: they declare segments and announce them (src/model/model.hpp). On a device MPI cannot read
// (a GPU with --comm mpi), every collective runs on a host copy of its range.
#pragma once
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "base/allocator.hpp"
#include "comm/dp_reduce.hpp"
#include "comm/group.hpp"
#include "src/model/model.hpp"
#include "src/train/reduction_tree.hpp"
#include "src/train/step_backend.hpp"

namespace mpitron {

// A flat range [begin, end) of the parameter allocation.
struct ShardRange {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

// Where a model's gradients live. full: a flat copy of the parameters. windowed: every segment
// not marked `window` in place, and one window shared by all window segments (their gradients
// must be reduced and cleared before the next one is written).
struct GradStorage {
  Buffer<float> data;
  std::vector<float*> segment_data;  // gradient of segment i's first parameter
  // extra: elements after the parameters' gradients (--bitwise's tied-embedding part).
  static GradStorage full(Model& model, DeviceAllocator& alloc, size_t extra = 0);
  static GradStorage windowed(Model& model, DeviceAllocator& alloc);
};

// Collectives on the device's own memory over the dp ranks (NCCL, --comm nccl): each starts after
// the work queued so far on the device's compute stream and runs beside what is queued after it
// (buckets overlap backward) until synchronize, which the host waits on; GradSync then needs no
// host copies. Only the allreduce method, ZeRO 0 and 1 (equal shards, in place).
struct DeviceCollectives {
  void* ctx = nullptr;
  void (*allreduce_sum)(void* ctx, float* buf, size_t n) = nullptr;
  void (*reduce_scatter_sum)(void* ctx, const float* send, float* recv, size_t count) = nullptr;
  void (*all_gather)(void* ctx, const float* send, float* recv, size_t count) = nullptr;
  void (*synchronize)(void* ctx) = nullptr;
};

struct GradSyncOptions {
  int zero = 0;  // ZeRO stage 0, 1 or 2
  comm::DpReduce method = comm::DpReduce::allreduce;
  double bucket_mb = 0;  // ZeRO 0: > 0 reduces buckets of this size while backward runs
  const DeviceCollectives* device_dp = nullptr;  // NCCL over dp, or nullptr: MPI
  // The tied embedding's sum over the first and last stage on the device (NCCL over the
  // embedding group, queued on the compute stream before the dp reduction), or nullptr: MPI.
  const DeviceCollectives* device_embedding = nullptr;
  // The parameters' memory where it is not the gradients' (the master weights in the host's
  // memory, --offload optimizer,master): the ZeRO all-gather's scratch is there and the gather
  // runs on the host with MPI. nullptr: the parameters live beside the gradients.
  DeviceAllocator* params_alloc = nullptr;
  // --bitwise: the step's S reduction shards (src/train/reduction_tree.hpp), 0: off. Each shard's
  // gradient is computed alone (end_shard after its backward) and the S summed in the fixed tree
  // at any dp and ZeRO stage: this rank's frontier, then the nodes above it on each chunk of
  // flat / dp values, then an all-gather, so every rank holds the whole summed gradient (the norm
  // is summed tensor by tensor from it). No buckets (the trainer refuses them).
  int reduction_shards = 0;
  int tp_shards = 0;  // --bitwise: the model's TP shards (a row-parallel weight's norm segments)
  // --bitwise with model chunks that interleave micro-batches (the interleaved schedule): a leaf
  // per gradient segment, pushed when backward announces the segment final (GradReadyHook), the
  // segments' frontiers assembled into the whole's before the reduction.
  bool leaves_per_segment = false;
};

class GradSync {
 public:
  // Allocates the gradients (and, with ZeRO, the shard buffers) and binds them to the model.
  // model.flat_size must be a multiple of dp (ModelBuild::flat_align). tp: the model's
  // tensor-parallel group (nullptr: tp 1), for the global gradient norm. pp: the pipeline group
  // (nullptr: one stage), for the norm; embedding: the first and last stage, which sum the
  // gradient of the tied embedding (StageOwner::first_and_last) before the DP reduction (nullptr
  // or size 0 on other stages and at pp 1). With an embedding group ZeRO 2 and buckets are
  // refused: both would reduce gradients while the pipeline still runs.
  GradSync(Model& model, comm::Group& dp, comm::Group* tp, const GradSyncOptions& opts,
           const StepBackend& ops, DeviceAllocator& alloc, comm::Group* pp = nullptr,
           comm::Group* embedding = nullptr);
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Clears the gradients before a step's first micro-batch.
  void begin_step();
  // The hook to pass to the backward of a micro-batch (the last one launches buckets).
  GradReadyHook hook(bool last_micro_batch);
  // --bitwise, after the backward of reduction shard `shard` (this rank's, in order): the shard's
  // gradient joins the tree and the gradients are cleared for the next.
  void end_shard(int shard);
  // After the last micro-batch: completes the reduction of owned().
  void finish_backward();
  // The flat range whose optimizer state this rank holds and whose parameters it updates.
  ShardRange owned() const { return shard_; }
  // Summed gradients of owned(), indexed from owned().begin.
  const float* owned_grads() const;
  // Global gradient norm (after finish_backward), the same on every rank: TP-sharded tensors
  // summed over the TP ranks, replicated ones counted once, each stage's tensors summed over the
  // pipeline and the tied embedding counted once (on the first stage).
  double grad_norm();
  // After the update of owned(): every rank gets every parameter (ZeRO 1 and 2).
  void gather_params(float* params);
  // dp + 1 cut points of the ZeRO shards (empty at ZeRO 0).
  const std::vector<size_t>& shard_bounds() const { return shard_bounds_; }
  // Seconds this rank spent in gradient communication since the last call, which resets it: the
  // reductions the backward hooks make or launch (buckets, ZeRO 2 segments), finish_backward's
  // reduction or wait, gather_params. Waiting for slower ranks counts; the scalar all-reduces of
  // grad_norm do not. The trace's rank_grad_sync_us.
  double take_comm_seconds() { return std::exchange(comm_s_, 0.0); }

 private:
  void on_segment(size_t segment);
  static void on_segment_ready(void* ctx, size_t segment);
  void reduce_segment_sharded(size_t segment);
  void reduce_in_fixed_order();
  double grad_norm_in_fixed_order();

  Model& model_;
  comm::Group& dp_;
  comm::Group* tp_;
  comm::Group* pp_;
  comm::Group* embedding_;
  std::vector<std::pair<size_t, size_t>> tied_;  // flat ranges of the tied embedding
  GradSyncOptions opts_;
  const StepBackend& ops_;
  GradStorage grads_;
  ShardRange shard_;
  std::vector<size_t> shard_bounds_;
  std::vector<size_t> segment_bounds_;  // ZeRO 2: the shard cut points of one segment
  Buffer<float> grad_shard_;            // ZeRO 2: summed gradients of the owned shard
  Buffer<float> gather_scratch_;        // ZeRO 1/2: all-gather source
  // ZeRO 0 buckets: contiguous ranges covering [0, flat_size), last first.
  std::vector<std::pair<size_t, size_t>> buckets_;
  std::vector<comm::Request> pending_;
  size_t next_bucket_ = 0;
  bool buckets_active_ = false;
  double comm_s_ = 0;  // take_comm_seconds
  // A device whose memory MPI cannot read (StepBackend::staged): the collectives run on host
  // copies. staging_: the flat gradients (or parameters, for the all-gather); shard_sums_: ZeRO 2's
  // owned shard, summed on the host over the step's segments and uploaded by finish_backward.
  // Host memory, not the device's: outside the allocator's count.
  std::vector<float> staging_, shard_sums_;
  // --bitwise: this rank's frontier sums (host memory), a staged leaf's host copy, the nodes other
  // ranks send for this rank's chunk, and the chunk's sum before the all-gather.
  std::unique_ptr<FrontierSums> frontier_;
  std::vector<std::unique_ptr<FrontierSums>> segment_frontiers_;  // leaves_per_segment
  std::vector<size_t> announced_;  // segments backward announced since the last end_shard
  // The values each shard's leaf holds: the gradients, then (one stage holding both ends of the
  // tied embedding) the embedding's part of the tied gradient [flat, flat + tied numel), padded to
  // a multiple of dp; tree_bounds_ cuts them into the dp chunks the tree's top is summed on.
  size_t leaf_size_ = 0;
  std::pair<size_t, size_t> tied_part_{0, 0};  // the tied parameter's flat range, when split
  std::vector<size_t> tree_bounds_;
  std::vector<float> leaf_host_, chunk_sum_;
  std::vector<std::vector<float>> received_;
  // Runs a collective on staging_[b, e) with the device's [b, e) of data around it.
  template <class Collective>
  void staged(float* data, size_t b, size_t e, Collective collective);
};

}  // namespace mpitron
