// The training loop: one global batch per step, sliced over data-parallel ranks and
// micro-batches, gradients reduced over the DP group (optionally in buckets while backward runs,
// optionally ZeRO-sharded), AdamW, evaluation, HDF5 trace and checkpoints, exact resume.
#pragma once
#include <cstdint>
#include <string>

#include "src/model/config.hpp"

namespace mpitron {

enum class DpReduce { allreduce, ring, gather_scatter };

struct Layout {
  int dp = 1, tp = 1, pp = 1;
  int zero = 0;  // 0: replicated optimizer, 1: moments sharded over DP, 2: gradients sharded too
  DpReduce dp_reduce = DpReduce::allreduce;
  double bucket_mb = 0;  // > 0: reduce gradients in buckets of this size while backward runs
};

struct TrainOptions {
  RunConfig cfg;
  Layout layout;
  std::string data;    // text file
  std::string out;     // run folder; "" picks runs/<config>_DP<dp>_TP<tp>_PP<pp>_zero<z>
  std::string resume;  // "", "auto" (latest checkpoint in out, if any) or a checkpoint path
  int threads = 0;     // compute threads per rank; 0: all cores for one rank, else 1
  int trace_flush_every = 10;
};

// Runs training on MPI_COMM_WORLD. Throws UsageError for bad input (every rank agrees before any
// collective work); returns the process exit code.
int run_training(TrainOptions opts);

std::string dp_reduce_name(DpReduce r);
DpReduce parse_dp_reduce(const std::string& s);  // UsageError when unknown

}  // namespace mpitron
