#include "src/model/model.hpp"

#include <fmt/format.h>

#include "src/check.hpp"

namespace mpitron {

void Model::allocate_tensors(const ModelBuild& how) {
  flat_size = (registry.size() + how.flat_align - 1) / how.flat_align * how.flat_align;
  params = Buffer<float>(*how.alloc, flat_size);
  registry.initialize(params.data(), how.seed);
  buffers = Buffer<float>(*how.alloc, registry.buffer_size());
  registry.initialize_buffers(buffers.data(), how.seed);
}

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

void Model::end_step(comm::Group&) {}

std::vector<DumpTensor> Model::input_dump(int) const {
  return {};
}

StageBoundary Model::boundary(int, int) {
  throw UsageError(fmt::format("the {} family runs as one pipeline stage (--pp 1)", config.type));
}

}  // namespace mpitron
