// Parameter registry: every parameter is registered once with its global name, global shape and
// shard spec, and carved out of one flat allocation. Checkpoints, gradient sync, ZeRO partitioning
// and the memory planner all read this table (DESIGN.md §2.2).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mpitron {

// How a parameter is split over the parallel layout.
struct ShardSpec {
  int tp_dim = -1;  // dimension split over tensor parallelism, -1: replicated over TP
  int stage = -1;   // pipeline stage owning it, -1: every stage
};

enum class InitKind { normal, zeros, ones };

struct ParamInfo {
  std::string name;                   // global name, e.g. "h.3.attn.c_attn.weight"
  std::vector<int64_t> global_shape;  // shape of the whole tensor
  std::vector<int64_t> local_shape;   // shape of this rank's shard
  std::vector<int64_t> local_start;   // where the shard starts in the global tensor, per dim
  ShardSpec shard;
  size_t offset = 0;  // of the shard in the flat local allocation, in elements
  size_t numel = 0;   // elements of the shard
  InitKind init = InitKind::normal;
  float init_std = 0.0f;
  bool weight_decay = false;  // AdamW decays matrices, not biases, LayerNorm or embeddings

  size_t global_numel() const;
  // Global row-major index of local element i (for RNG keys and checkpoint hyperslabs).
  uint64_t global_index(size_t i) const;
};

class ParamRegistry {
 public:
  // Registers a whole (unsharded) parameter; returns its index. Offsets are 16-element aligned.
  size_t add(std::string name, std::vector<int64_t> shape, InitKind init, float init_std,
             bool weight_decay, ShardSpec shard = {});
  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo& at(const std::string& name) const;  // throws UsageError naming the parameter
  const ParamInfo* find(const std::string& name) const;
  size_t size() const { return total_; }  // elements of the flat allocation

  // Fills params (the flat allocation) from Philox keyed by (seed, hash(name), global index).
  void initialize(float* params, uint64_t seed) const;

 private:
  std::vector<ParamInfo> params_;
  size_t total_ = 0;
};

}  // namespace mpitron
