// The memory plan: what each rank's device allocator will hold at its peak, by kind, computed from
// the settings alone (the model's registry and activation carving counted, nothing allocated), so
// `mpitron plan` answers for a model this machine could not hold, and the trainer refuses a
// --max-device-memory below it before any work. The counting allocator's measured peak is the
// plan's test (the trace keeps both).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "src/train/trainer.hpp"

namespace mpitron {

struct MemoryPlanItem {
  std::string kind;
  size_t bytes = 0;
  bool host = false;  // in the host's memory (--offload), not the device's
};

// One pipeline stage's ranks (every TP and DP rank of a stage plans alike: DP rank 0's micro-batch
// is the largest).
struct StageMemoryPlan {
  int stage = 0;
  std::vector<MemoryPlanItem> items;
  size_t total() const;       // the device's
  size_t host_total() const;  // what --offload puts in the host's memory
};

struct MemoryPlan {
  std::vector<StageMemoryPlan> stages;
  size_t peak() const;  // the largest stage's total: what every rank must fit
};

// Why these settings have no memory plan ("the <type> family has no memory plan yet"), or ""
// where they have one (ModelFamily::memory).
std::string missing_memory_plan(const TrainOptions& opts);
inline bool can_plan_memory(const TrainOptions& opts) {
  return missing_memory_plan(opts).empty();
}
// opts.layout.dp must be resolved (> 0). UsageError where missing_memory_plan says why.
MemoryPlan plan_memory(const TrainOptions& opts);
StageMemoryPlan plan_stage_memory(const TrainOptions& opts, int stage);

// The plan as a table: one column per stage, one row per kind, the total; and against a cap, the
// first settings found that fit it (more micro-batches, recompute, both), or a line saying none
// of them does.
std::string memory_plan_text(const TrainOptions& opts, const MemoryPlan& plan, size_t cap);

// "11GiB", "512 MiB", "1.5GB", "4096" (bytes); UsageError naming `flag` for anything else.
size_t parse_byte_size(const std::string& text, const std::string& flag);

}  // namespace mpitron
