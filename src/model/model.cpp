#include "src/model/model.hpp"

#include "src/check.hpp"

namespace mpitron {

int64_t Model::count_correct(const MicroBatch& mb) const {
  const ModelOutput out = output(mb.slot);
  MPITRON_REQUIRE(out.positions == 1 && mb.samples.labels, "accuracy needs a classifier");
  int64_t correct = 0;
  for (int r = 0; r < mb.samples.rows; ++r) {
    const float* row = out.logits + size_t(r) * out.classes;
    int best = 0;
    for (int k = 1; k < out.classes; ++k)
      if (row[k] > row[best]) best = k;
    correct += best == mb.samples.labels[r];
  }
  return correct;
}

}  // namespace mpitron
