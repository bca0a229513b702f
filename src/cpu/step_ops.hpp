// The step's non-layer work on the CPU: zeroing, copies, the gradient norm and AdamW. Each has a
// twin of the same name and arguments (plus a stream) in src/cuda/step_ops.cuh; StepBackend
// (src/train/step_backend.hpp) picks one set once, so call sites never branch on the device.
#pragma once
#include <cstddef>
#include <cstdint>

#include "src/model/registry.hpp"
#include "src/train/adamw.hpp"

namespace mpitron::cpu {

void zero(float* p, size_t n);
void copy(float* dst, const float* src, size_t n);

// Sum of squares of g[0, n) in double, in a fixed order (deterministic for any thread count).
double sum_of_squares(const float* g, size_t n);

// grad_scale multiplies every gradient (clipping; loss-scale removal later). t is 1-based. Per
// parameter: decay only where the registry says so. fp32 only (r.weights must be nullptr).
void adamw_update(const ParamRegistry& reg, const AdamWRange& r, const AdamWConfig& cfg, double lr,
                  float grad_scale, int64_t t);

}  // namespace mpitron::cpu
