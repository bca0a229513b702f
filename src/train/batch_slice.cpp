#include "src/train/batch_slice.hpp"

#include <fmt/format.h>

namespace mpitron {

std::string check_batch_split(int64_t rows, int dp, int micro_batches) {
  if (rows <= 0 || dp <= 0 || micro_batches <= 0)
    return fmt::format("global batch {}, dp {} and micro-batches {} must be positive", rows, dp,
                       micro_batches);
  const int64_t parts = int64_t(dp) * micro_batches;
  if (rows % parts != 0)
    return fmt::format(
        "global batch {} is not divisible by dp ({}) x micro-batches ({}): choose --batch-size as "
        "a multiple of {}",
        rows, dp, micro_batches, parts);
  return "";
}

RowRange batch_slice(int64_t rows, int dp, int dp_rank, int micro_batches, int micro) {
  const int64_t per_rank = rows / dp, per_micro = per_rank / micro_batches;
  return {int64_t(dp_rank) * per_rank + int64_t(micro) * per_micro, per_micro};
}

}  // namespace mpitron
