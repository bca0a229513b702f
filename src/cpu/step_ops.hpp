// The step's non-layer work on the CPU: zeroing, copies, the gradient norm (AdamW: adamw.hpp). Each
// has a twin of the same name and arguments (plus a stream) in src/cuda/step_ops.cuh; StepBackend
// (src/train/step_backend.hpp) picks one set once, so call sites never branch on the device.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mpitron::cpu {

void zero(float* p, size_t n);
void copy(float* dst, const float* src, size_t n);

// Sum of squares of g[0, n) in double, in a fixed order (deterministic for any thread count).
double sum_of_squares(const float* g, size_t n);

}  // namespace mpitron::cpu
