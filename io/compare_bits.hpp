// Bit-for-bit comparison of two traces or two checkpoints (`mpitron compare --bitwise`): what the
// equivalence tests of --bitwise training hold, for a user to check the same by hand.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mpitron::io {

struct BitComparison {
  std::string kind;                      // "trace" or "checkpoint"
  int64_t compared = 0;                  // trace: steps; checkpoint: datasets
  std::vector<std::string> differences;  // one line each; empty when every bit agrees
};

// Traces: rows matched by step, and every value a layout must not change (loss, val_loss,
// val_accuracy, val_bleu, lr, grad_norm, loss_scale, skipped) bit for bit; a step in one trace
// only is a difference. Checkpoints: the step, and every dataset (parameters, optimizer state,
// buffers) byte for byte in its stored type; the layout attributes may differ. UsageError when a
// file is missing, unreadable, or the two are not both traces or both checkpoints.
BitComparison compare_bits(const std::string& a, const std::string& b);

}  // namespace mpitron::io
