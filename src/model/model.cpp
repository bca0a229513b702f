#include "src/model/model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "base/check.hpp"

namespace mpitron {

void Model::allocate_tensors(const ModelBuild& how) {
  flat_size = (registry.size() + how.flat_align - 1) / how.flat_align * how.flat_align;
  const bool device_layers = how.layers && how.layers != &cpu_layer_ops();
  MPITRON_REQUIRE(!how.master_alloc || how.precision != DType::f32,
                  "master weights apart from the layers' need a 16-bit weight copy");
  master_on_host_ = how.master_alloc && device_layers;
  MPITRON_REQUIRE(!master_on_host_ || (how.staging && how.staging_alloc),
                  "master weights in host memory upload through a staging queue");
  params = Buffer<float>(how.master_alloc ? *how.master_alloc : *how.alloc, flat_size);
  buffers = Buffer<float>(*how.alloc, registry.buffer_size());
  if (master_on_host_) {
    staging_ = how.staging;
    AllocationPurpose purpose(*how.staging_alloc, "the 16-bit copy's upload staging");
    weight_staging_ =
        Buffer<uint16_t>(*how.staging_alloc, 2 * std::min(flat_size, kHostStagingElements));
  }
  if (!device_layers || master_on_host_) registry.initialize(params.data(), how.seed);
  if (!device_layers) {
    registry.initialize_buffers(buffers.data(), how.seed);
    return;
  }
  // Another device: the same values, drawn on the host, then uploaded.
  std::vector<float> host(std::max(master_on_host_ ? 0 : flat_size, buffers.size()), 0.0f);
  if (!master_on_host_) {
    registry.initialize(host.data(), how.seed);
    how.layers->upload(params.data(), host.data(), flat_size);
    std::fill(host.begin(), host.end(), 0.0f);
  }
  registry.initialize_buffers(host.data(), how.seed);
  how.layers->upload(buffers.data(), host.data(), buffers.size());
}

// Chunk k is rounded into half k % 2 of the staging buffer once chunk k - 2's upload from there is
// done, so the host rounds one chunk while the copy stream uploads the one before.
template <class A>
void Model::upload_rounded_master_as(A* weights) {
  static_assert(sizeof(A) == sizeof(uint16_t), "a 16-bit weight copy");
  const size_t per = weight_staging_.size() / 2;
  uint64_t uploaded[2] = {0, 0};
  for (size_t b = 0, k = 0; b < flat_size; b += per, ++k) {
    const size_t n = std::min(per, flat_size - b);
    A* chunk = reinterpret_cast<A*>(weight_staging_.data()) + (k % 2) * per;
    staging_->wait(uploaded[k % 2]);
    constexpr size_t kPiece = 16384;  // elements a thread rounds at a time
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i += kPiece)
      round_to(chunk + i, params.data() + b + i, std::min(kPiece, n - i));
    uploaded[k % 2] = staging_->upload(weights + b, chunk, n * sizeof(A));
  }
  staging_->wait_all();  // the layers read the copy next
}

void Model::upload_rounded_master(bf16_t* weights) {
  upload_rounded_master_as(weights);
}

void Model::upload_rounded_master(fp16_t* weights) {
  upload_rounded_master_as(weights);
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

void Model::bind_tied_embedding_gradient(float*) {
  MPITRON_REQUIRE(false, "this model has no tied embedding to split the gradient of");
}

std::vector<DumpTensor> Model::input_dump(int) const {
  return {};
}

StageBoundary Model::boundary(int, int) {
  throw UsageError(fmt::format("the {} family runs as one pipeline stage (--pp 1)", config.type));
}

}  // namespace mpitron
