// The step's non-layer work (zeroing, copies, gradient norm, AdamW) as one table per device,
// chosen once when the run starts: call sites never branch on the device. The CPU table holds
// src/cpu/step_ops; a CUDA table adds src/cuda twins with the same signatures.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "src/model/registry.hpp"
#include "src/train/adamw.hpp"

namespace mpitron {

struct StepBackend {
  const char* device;
  void (*zero)(float* p, size_t n);
  void (*copy)(float* dst, const float* src, size_t n);
  double (*sum_of_squares)(const float* g, size_t n);
  void (*adamw_update)(const ParamRegistry& reg, const AdamWRange& r, const AdamWConfig& cfg,
                       double lr, float grad_scale, int64_t t);
};

// UsageError for a device this build cannot train on.
const StepBackend& step_backend(const std::string& device);

}  // namespace mpitron
