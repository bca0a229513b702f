// What `mpitron info` and `mpitron compare` print and decide: a summary of a trace or checkpoint,
// and a step-by-step comparison of two loss traces (the basis of the equivalence tests, §2.1).
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

namespace mpitron::io {

// Human-readable account of any HDF5 file, recognising mpitron traces and checkpoints.
// A checkpoint, unless full: the model, the run settings grouped by prefix (train., layout., ...),
// step and tokens seen, and its tensors summarised (parameter, optimizer-moment and buffer counts
// and sizes, parameters grouped into repeated blocks on their first numeric dotted component, the
// largest tensors), a few dozen lines whatever the model's size. A trace: root and group
// attributes, datasets, the step range, first/last loss and last evaluated val_loss, and one line
// per run segment (/segments/<k>) with the settings changed since the previous one; unless full,
// the segments' attributes are not listed. With full, and for any other HDF5 file: every attribute
// and every dataset with dtype and shape (for a checkpoint, then the total parameter count).
// UsageError when the file is missing or unreadable.
void print_info(const std::string& path, std::ostream& out, bool full = false);

struct TraceComparison {
  int64_t steps_compared = 0;     // steps present in both traces
  double max_rel_diff = 0;        // over compared steps; 0 when none
  int64_t worst_step = -1;        // step of max_rel_diff; -1 when none compared
  double frac_within_1pct = 0;    // fraction of compared steps with rel diff <= 0.01; 0 when none
  int64_t steps_only_in_one = 0;  // steps present in exactly one trace
  int64_t duplicate_steps = 0;    // rows repeating a step already in the same trace
  int64_t val_compared = 0;       // steps where both traces have a validation loss
  double max_val_rel_diff = 0;    // over those steps
};

// Compares /trace/loss (and /trace/val_loss where both evaluated) of two traces, rows matched by
// step number; repeated steps are counted, not compared. Relative difference
// |a-b| / max(|a|, |b|, 1e-30); NaN in both counts as equal, NaN in one as +inf.
// UsageError when either file is missing or not a trace.
TraceComparison compare_traces(const std::string& a, const std::string& b);

}  // namespace mpitron::io
