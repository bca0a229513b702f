// The loss trace, DIR/trace.h5: one row per optimizer step in extendible datasets under /trace and
// the run's configuration as root attributes (ARCHITECTURE.md, "Files"). Flushed every N steps so a
// killed job keeps its history; a resumed run truncates to the checkpoint's step and continues.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/h5.hpp"

namespace mpitron::io {

struct TraceRow {
  int64_t step = 0;
  double loss = 0;
  double val_loss = 0;      // NaN when not evaluated at this step
  double val_accuracy = 0;  // classifiers: fraction of validation samples right; NaN otherwise
  double val_bleu = 0;      // translation: corpus BLEU of the validation split; NaN otherwise
  double lr = 0, grad_norm = 0, tokens_per_s = 0, step_s = 0;
  int64_t comm_bytes = 0;
  int64_t peak_mem_bytes = 0;
  int64_t param_bytes = 0;  // this rank's parameters (its TP shard), bytes
  // Measured idle fraction of the step's forward and backward: 1 - (time every rank spent
  // computing) / (ranks x the slowest rank's time); the pipeline bubble, plus any imbalance.
  double bubble = 0;
  // Dynamic loss scaling: the scale this step's backward used (NaN without scaling) and 1 when the
  // step was skipped because its gradients overflowed (the scale then halves).
  double loss_scale = 0;
  int64_t skipped = 0;
  // One entry per world rank; empty => not written for this row (stored as -1).
  std::vector<int64_t> rank_comm_bytes, rank_peak_mem_bytes, rank_param_bytes;
  std::vector<int64_t> rank_busy_us;  // microseconds in forward and backward this step
  // Microseconds in gradient communication this step (GradSync::take_comm_seconds): the backward
  // hooks' reductions or launches (also inside rank_busy_us), the reduction or wait after backward.
  std::vector<int64_t> rank_grad_sync_us;
  // Activation sets, backward scratch and pipeline message buffers: what grows with micro-batches
  // in flight (GPipe: m, 1F1B: at most pp), apart from parameters and optimizer state.
  std::vector<int64_t> rank_activation_bytes;
  // The memory plan's peak per rank (-1: the family has none), beside rank_peak_mem_bytes.
  std::vector<int64_t> rank_planned_mem_bytes;
};

// Layout: /trace/{step,comm_bytes,peak_mem_bytes,param_bytes,skipped} int64 and
// /trace/{loss,val_loss,val_accuracy,val_bleu,lr,grad_norm,tokens_per_s,step_s,bubble,loss_scale}
// float64, 1-D chunked with unlimited length;
// /trace/rank_{comm_bytes,peak_mem_bytes,planned_mem_bytes,param_bytes,busy_us,grad_sync_us,
// activation_bytes} int64
// (steps, world), both dimensions unlimited, created at the first row that carries them (earlier
// rows and absent ranks read -1). Steps strictly increase.
//
// Each run of the trace (the first, and each resume) also records its attributes and the step it
// started at under /segments/<k> (k = 0, 1, ...), so the root attributes, which the latest run
// writes, never hide what earlier rows were trained with.
//
// Used by rank 0 only, with plain (non-MPI) file access. Crash safety: HDF5 is touched only inside
// flush(), which ends with H5Fflush, so a process killed between flushes leaves the file exactly
// as the last flush wrote it. The file keeps the default (earliest) format on purpose: the 1.10+
// superblock marks files "open for write" and a killed writer would leave them unreadable without
// h5clear. The writer takes no file lock, so h5py and `mpitron info` can read the trace while the
// run is going (they see the last flush).
class TraceWriter {
 public:
  // Creates `path` fresh (overwriting), or when resume_after_step >= 0 opens the existing trace
  // (creating it when absent) and drops every row with step > resume_after_step (and every row
  // after the first such one), so the resumed run continues without gap or repeat. attrs are
  // written as root attributes, replacing same-named ones. flush_every (>= 1; smaller means 1):
  // rows buffered before they are written and flushed to disk. Throws UsageError when an
  // existing file cannot be resumed (not HDF5, corrupt, not a trace) or `path` cannot be created.
  TraceWriter(const std::string& path, const Attributes& attrs, int64_t resume_after_step,
              int flush_every);
  TraceWriter(TraceWriter&&) = default;  // the moved-from writer does nothing when destroyed
  TraceWriter& operator=(TraceWriter&&) = delete;
  ~TraceWriter();  // flush + close; never throws

  void append(const TraceRow& row);
  // Writes buffered rows, then H5Fflush; std::runtime_error naming the file when it cannot.
  void flush();
  int64_t rows() const { return rows_ + static_cast<int64_t>(pending_.size()); }

 private:
  void open_or_create_columns();
  void record_segment(const Attributes& attrs, int64_t first_step);
  void write_pending();
  void write_matrix(const char* name, std::vector<int64_t> TraceRow::*field);

  std::string path_;
  Handle file_, group_;
  int flush_every_ = 1;
  int64_t rows_ = 0;  // rows on disk
  std::vector<TraceRow> pending_;
};

// Read side: every /trace column, each of the length of /trace/step (a column that is shorter or
// missing, e.g. from an older writer, is padded with NaN / -1), and the root attributes.
struct Trace {
  std::vector<int64_t> step;
  std::vector<double> loss, val_loss, val_accuracy, val_bleu, lr, grad_norm, tokens_per_s, step_s,
      bubble, loss_scale;
  std::vector<int64_t> comm_bytes, peak_mem_bytes, param_bytes, skipped;
  Attributes attrs;
};

// UsageError when the file is missing, unreadable or not a trace (no /trace/step, /trace/loss).
Trace read_trace(const std::string& path);

}  // namespace mpitron::io
