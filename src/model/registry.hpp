// Parameter registry: every tensor is registered once with its global name, global shape and
// shard spec, and carved out of one flat allocation. Checkpoints, gradient sync, ZeRO partitioning
// and the memory planner all read this table (ARCHITECTURE.md, "Invariants").
// Two kinds: parameters (trained: gradients and optimizer state follow the flat layout) and
// buffers (checkpointed, not trained: batch-norm running statistics), in two flat allocations.
#pragma once
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mpitron {

// Which pipeline stages hold a tensor.
enum class StageOwner {
  every,           // replicated on every stage
  first,           // the stage with the input (position embedding)
  last,            // the stage with the loss (final LayerNorm, classifier)
  first_and_last,  // tied: the token embedding, which the last stage uses as its LM head
  block,           // the stage that owns transformer (or residual) block `block`
};

// How a tensor splits over the parallel layout.
struct ShardSpec {
  int tp_dim = -1;  // dimension split over tensor parallelism, -1: replicated over TP
  // Fused tensors: tp_dim holds tp_stride equal parts that split over TP each on its own, so a
  // rank holds its slice of every part (c_attn: the q, k and v rows of its own heads).
  int tp_stride = 1;
  StageOwner stage = StageOwner::every;
  int block = -1;  // with StageOwner::block
  // tp_dim is padded up to a multiple of tp (a vocabulary tp does not divide): each rank holds
  // ceil(D / tp) rows, the last rank's rows beyond D are padding. Padding rows are zero, get zero
  // gradients (the model keeps them out of its results) and are never checkpointed. Requires tp_dim
  // == 0 (so a shard's padding is a suffix of its flat range) and tp_stride == 1.
  bool tp_pad = false;
  // With tp_pad: each rank's rows are also rounded up to a multiple of this (the device's LM-head
  // alignment, LayerOpsT::lm_head_align), at any tp, tp 1 included; the rows past D are padding.
  int tp_pad_align = 1;
};

// Rows per rank of a dimension D padded over tp ranks (ShardSpec::tp_pad): ceil(D / tp) rounded
// up to a multiple of align.
int64_t padded_rows(int64_t D, int tp, int align);

// Blocks [begin, end) of a network: one model chunk of a pipeline stage.
struct BlockRange {
  int begin = 0, end = INT_MAX;
  int size() const { return end - begin; }
};

// The part of the model this process holds: its TP slice and its pipeline stage. A stage holds
// one chunk of contiguous blocks, or several with the interleaved schedule (chunk c of stage s is
// virtual stage c * stages + s); the first stage holds the input, the last the loss.
struct RegistrySlice {
  int tp = 1, tp_rank = 0;
  int stage = 0, stages = 1;
  std::vector<BlockRange> chunks{BlockRange{}};  // in network order
  bool holds(const ShardSpec& s) const;
};

enum class InitKind { normal, zeros, ones };
enum class TensorKind { parameter, buffer };

struct ParamInfo {
  std::string name;                   // global name, e.g. "h.3.attn.c_attn.weight"
  std::vector<int64_t> global_shape;  // shape of the whole tensor
  std::vector<int64_t> local_shape;   // shape of this rank's shard
  ShardSpec shard;
  int tp = 1, tp_rank = 0;  // the TP slice local_shape was cut for
  TensorKind kind = TensorKind::parameter;
  size_t offset = 0;  // of the shard in its flat local allocation, in elements
  size_t numel = 0;   // elements of the shard
  InitKind init = InitKind::normal;
  float init_std = 0.0f;
  bool weight_decay = false;  // AdamW decays matrices, not biases, LayerNorm or embeddings

  size_t global_numel() const;
  // Global row-major index of local element i (for RNG keys and checkpoint hyperslabs). Along a
  // strided tp_dim, local coordinate c is part c / (D/(stride*tp)) of the global dimension D.
  // For a padding element (is_padding(i)) the result is unspecified: it names no element of the
  // global tensor and must never be used (as an RNG key or otherwise).
  uint64_t global_index(size_t i) const;
  // Local element i lies beyond the global dimension D along a padded tp_dim (ShardSpec::tp_pad):
  // the rows past D (the last ranks', or past D at tp 1 with tp_pad_align). Always false without
  // padding.
  bool is_padding(size_t i) const;
  // Local elements that are real (not padding); with tp_dim == 0 they are the first ones.
  size_t real_numel() const;
};

class ParamRegistry {
 public:
  explicit ParamRegistry(RegistrySlice slice = {}) : slice_(slice) {}

  // Registers a parameter at its global shape; false (and nothing registered) when this slice's
  // stage does not hold it. Offsets are 16-element aligned. UsageError when tp does
  // not divide the split dimension (by parts, for strided tensors) and the spec is not tp_pad;
  // with tp_pad the dimension is padded to padded_rows(D, tp, tp_pad_align) rows per rank.
  bool add(std::string name, std::vector<int64_t> shape, InitKind init, float init_std,
           bool weight_decay, ShardSpec shard = {});
  // Registers a buffer: checkpointed and initialised like a parameter, never trained.
  bool add_buffer(std::string name, std::vector<int64_t> shape, InitKind init,
                  ShardSpec shard = {});

  const std::vector<ParamInfo>& params() const { return params_; }
  const std::vector<ParamInfo>& buffers() const { return buffers_; }
  const ParamInfo& at(const std::string& name) const;  // throws UsageError naming the parameter
  const ParamInfo* find(const std::string& name) const;
  size_t size() const { return total_; }                // elements of the parameters' allocation
  size_t buffer_size() const { return buffer_total_; }  // elements of the buffers' allocation
  int64_t parameter_count() const;                      // global elements of all parameters
  const RegistrySlice& slice() const { return slice_; }

  // Fills a flat allocation (params or buffers) from Philox keyed by (seed, hash(name), global
  // index), so a shard is exactly its slice of the baseline's tensor. Padding elements are 0.
  void initialize(float* params, uint64_t seed) const;
  void initialize_buffers(float* buffers, uint64_t seed) const;

 private:
  ParamInfo make(std::string name, std::vector<int64_t> shape, ShardSpec shard) const;
  RegistrySlice slice_;
  std::vector<ParamInfo> params_, buffers_;
  size_t total_ = 0, buffer_total_ = 0;
};

}  // namespace mpitron
