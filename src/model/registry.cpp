#include "src/model/registry.hpp"

#include <fmt/format.h>

#include "src/check.hpp"
#include "src/philox.hpp"

namespace mpitron {

size_t ParamInfo::global_numel() const {
  size_t n = 1;
  for (auto d : global_shape) n *= size_t(d);
  return n;
}

uint64_t ParamInfo::global_index(size_t i) const {
  // Unravel i over the local shape, offset by local_start, ravel over the global shape.
  uint64_t g = 0, stride = 1;
  for (int d = int(local_shape.size()) - 1; d >= 0; --d) {
    uint64_t coord = i % uint64_t(local_shape[d]) + uint64_t(local_start[d]);
    i /= uint64_t(local_shape[d]);
    g += coord * stride;
    stride *= uint64_t(global_shape[d]);
  }
  return g;
}

size_t ParamRegistry::add(std::string name, std::vector<int64_t> shape, InitKind init,
                          float init_std, bool weight_decay, ShardSpec shard) {
  ParamInfo p;
  p.name = std::move(name);
  p.global_shape = shape;
  p.local_shape = shape;
  p.local_start.assign(shape.size(), 0);
  p.shard = shard;
  p.numel = 1;
  for (auto d : shape) p.numel *= size_t(d);
  p.offset = total_;
  p.init = init;
  p.init_std = init_std;
  p.weight_decay = weight_decay;
  total_ += (p.numel + 15) / 16 * 16;
  params_.push_back(std::move(p));
  return params_.size() - 1;
}

const ParamInfo* ParamRegistry::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

const ParamInfo& ParamRegistry::at(const std::string& name) const {
  const ParamInfo* p = find(name);
  if (!p) throw UsageError(fmt::format("no parameter named '{}'", name));
  return *p;
}

void ParamRegistry::initialize(float* params, uint64_t seed) const {
  for (const auto& p : params_) {
    float* w = params + p.offset;
    const PhiloxStream rng{seed, fnv1a64(p.name)};
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < p.numel; ++i) {
      switch (p.init) {
        case InitKind::normal:
          w[i] = float(p.init_std * rng.normal(p.global_index(i)));
          break;
        case InitKind::zeros:
          w[i] = 0.0f;
          break;
        case InitKind::ones:
          w[i] = 1.0f;
          break;
      }
    }
  }
}

}  // namespace mpitron
