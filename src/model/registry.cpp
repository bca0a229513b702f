#include "src/model/registry.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "base/check.hpp"
#include "base/philox.hpp"

namespace mpitron {

namespace {

void fill(const std::vector<ParamInfo>& tensors, float* flat, uint64_t seed) {
  for (const auto& p : tensors) {
    float* w = flat + p.offset;
    const PhiloxStream rng{seed, fnv1a64(p.name)};
    const size_t real = p.real_numel();  // padding (tp_pad) is the suffix [real, numel): zeros
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < p.numel; ++i) {
      if (i >= real) {
        w[i] = 0.0f;
        continue;
      }
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

}  // namespace

bool RegistrySlice::holds(const ShardSpec& s) const {
  switch (s.stage) {
    case StageOwner::every:
      return true;
    case StageOwner::first:
      return stage == 0;
    case StageOwner::last:
      return stage == stages - 1;
    case StageOwner::first_and_last:
      return stage == 0 || stage == stages - 1;
    case StageOwner::block:
      return std::any_of(chunks.begin(), chunks.end(), [&](const BlockRange& c) {
        return s.block >= c.begin && s.block < c.end;
      });
  }
  return false;
}

size_t ParamInfo::global_numel() const {
  size_t n = 1;
  for (auto d : global_shape) n *= size_t(d);
  return n;
}

uint64_t ParamInfo::global_index(size_t i) const {
  // Unravel i over the local shape, map each coordinate to the global one, ravel globally.
  uint64_t g = 0, stride = 1;
  for (int d = int(local_shape.size()) - 1; d >= 0; --d) {
    const uint64_t local = uint64_t(local_shape[d]);
    uint64_t coord = i % local;
    i /= local;
    if (d == shard.tp_dim && tp > 1) {
      const uint64_t part = local / uint64_t(shard.tp_stride);  // D / (stride * tp)
      const uint64_t whole_part = uint64_t(global_shape[d]) / uint64_t(shard.tp_stride);
      coord = coord / part * whole_part + uint64_t(tp_rank) * part + coord % part;
    }
    g += coord * stride;
    stride *= uint64_t(global_shape[d]);
  }
  return g;
}

int64_t padded_rows(int64_t D, int tp, int align) {
  MPITRON_REQUIRE(tp >= 1 && align >= 1, "padded_rows needs tp >= 1 and align >= 1");
  const int64_t rows = (D + tp - 1) / tp;
  return (rows + align - 1) / align * align;
}

size_t ParamInfo::real_numel() const {
  if (!shard.tp_pad || shard.tp_dim != 0 || local_shape.empty()) return numel;
  const int64_t rows = local_shape[0];
  if (rows == 0) return 0;
  const int64_t real_rows = std::clamp<int64_t>(global_shape[0] - int64_t(tp_rank) * rows, 0, rows);
  return size_t(real_rows) * (numel / size_t(rows));
}

bool ParamInfo::is_padding(size_t i) const {
  return i >= real_numel();
}

ParamInfo ParamRegistry::make(std::string name, std::vector<int64_t> shape, ShardSpec shard) const {
  ParamInfo p;
  p.name = std::move(name);
  p.global_shape = shape;
  p.local_shape = shape;
  p.shard = shard;
  p.tp = slice_.tp;
  p.tp_rank = slice_.tp_rank;
  if (shard.tp_pad)  // padding must be a suffix of every flat range of the shard
    MPITRON_REQUIRE(shard.tp_dim == 0 && shard.tp_stride == 1 && !shape.empty(),
                    p.name + ": a padded shard spec (tp_pad) needs tp_dim 0 and tp_stride 1");
  if (shard.tp_pad && slice_.tp == 1 && shard.tp_pad_align > 1)
    p.local_shape[0] = padded_rows(shape[0], 1, shard.tp_pad_align);
  if (shard.tp_dim >= 0 && slice_.tp > 1) {
    MPITRON_REQUIRE(shard.tp_dim < int(shape.size()) && shard.tp_stride >= 1,
                    "shard spec names a dimension the tensor does not have");
    const int64_t parts = int64_t(shard.tp_stride) * slice_.tp;
    if (shard.tp_pad) {
      p.local_shape[0] = padded_rows(shape[0], slice_.tp, shard.tp_pad_align);
    } else if (shape[shard.tp_dim] % parts != 0) {
      throw UsageError(fmt::format(
          "{}: dimension {} ({}) does not split into {} x {} equal parts (tensor parallelism)",
          p.name, shard.tp_dim, shape[shard.tp_dim], shard.tp_stride, slice_.tp));
    } else {
      p.local_shape[shard.tp_dim] = shape[shard.tp_dim] / slice_.tp;
    }
  }
  p.numel = 1;
  for (auto d : p.local_shape) p.numel *= size_t(d);
  return p;
}

bool ParamRegistry::add(std::string name, std::vector<int64_t> shape, InitKind init, float init_std,
                        bool weight_decay, ShardSpec shard) {
  if (!slice_.holds(shard)) return false;
  ParamInfo p = make(std::move(name), std::move(shape), shard);
  p.offset = total_;
  p.init = init;
  p.init_std = init_std;
  p.weight_decay = weight_decay;
  total_ += (p.numel + 15) / 16 * 16;
  params_.push_back(std::move(p));
  return true;
}

bool ParamRegistry::add_buffer(std::string name, std::vector<int64_t> shape, InitKind init,
                               ShardSpec shard) {
  if (!slice_.holds(shard)) return false;
  ParamInfo p = make(std::move(name), std::move(shape), shard);
  p.kind = TensorKind::buffer;
  p.offset = buffer_total_;
  p.init = init;
  buffer_total_ += (p.numel + 15) / 16 * 16;
  buffers_.push_back(std::move(p));
  return true;
}

const ParamInfo* ParamRegistry::find(const std::string& name) const {
  for (const auto* list : {&params_, &buffers_})
    for (const auto& p : *list)
      if (p.name == name) return &p;
  return nullptr;
}

const ParamInfo& ParamRegistry::at(const std::string& name) const {
  const ParamInfo* p = find(name);
  if (!p) throw UsageError(fmt::format("no parameter named '{}'", name));
  return *p;
}

int64_t ParamRegistry::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : params_) n += int64_t(p.global_numel());
  return n;
}

void ParamRegistry::initialize(float* params, uint64_t seed) const {
  fill(params_, params, seed);
}

void ParamRegistry::initialize_buffers(float* buffers, uint64_t seed) const {
  fill(buffers_, buffers, seed);
}

}  // namespace mpitron
