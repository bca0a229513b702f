// CUDA twins of src/cpu/step_ops.hpp (zeroing, copies, gradient norm, AdamW): the same names and
// arguments plus the stream they run on, for StepBackend's CUDA table. A plain C++17 header, so
// .cpp files include it without nvcc. All pointers are device pointers.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "src/model/registry.hpp"
#include "src/train/adamw.hpp"

namespace mpitron::cuda {

// Asynchronous on s.
void zero(float* p, size_t n, cudaStream_t s);
void copy(float* dst, const float* src, size_t n, cudaStream_t s);

// Sum of squares of g[0, n) in double. Deterministic: 64 chunks as on the CPU, each summed by one
// block in a fixed tree order, the partials added in chunk order on the host; bitwise the same on
// every call, not bitwise the CPU's (within ~1e-15 relative of it). Synchronises s. Uses a small
// device buffer per host thread, allocated on the first call (and again if that thread's current
// device changes) and kept: calls from different threads never share it.
double sum_of_squares(const float* g, size_t n, cudaStream_t s);

// cpu::adamw_update's math, operation for operation (no FMA contraction), over every parameter
// overlapping [r.begin, r.end) in one launch (up to 160 parameters a launch, each with its own
// decay; elementwise, so the bits are the per-tensor launches'); asynchronous on s. fp32 master
// weights and moments. Mixed precision: with r.weights set, r.weight_type (bf16 or f16) receives
// the updated weights rounded to nearest; r.weights with f32 is a contract violation (fail_at).
void adamw_update(const ParamRegistry& reg, const AdamWRange& r, const AdamWConfig& cfg, double lr,
                  float grad_scale, int64_t t, cudaStream_t s);
// The reference: the same update, one launch per parameter.
void adamw_update_per_tensor(const ParamRegistry& reg, const AdamWRange& r, const AdamWConfig& cfg,
                             double lr, float grad_scale, int64_t t, cudaStream_t s);

}  // namespace mpitron::cuda
