// Which rows of the global batch a data-parallel rank and micro-batch compute: DP rank r takes the
// r-th of dp equal consecutive slices, and its micro-batch m the m-th of equal consecutive parts of
// that slice. Together they cover the global batch exactly once, whatever the layout.
#pragma once
#include <cstdint>
#include <string>

namespace mpitron {

struct RowRange {
  int64_t begin = 0;  // first global row (sequence)
  int64_t count = 0;
};

// "" when a global batch of `rows` splits evenly over dp ranks x micro-batches, else the message.
std::string check_batch_split(int64_t rows, int dp, int micro_batches);

// Rows of micro-batch `micro` on DP rank `dp_rank` (the split must pass check_batch_split).
RowRange batch_slice(int64_t rows, int dp, int dp_rank, int micro_batches, int micro);

}  // namespace mpitron
