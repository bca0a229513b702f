// cpu::adamw_update's CUDA twin (src/cpu/adamw.hpp): the same arguments plus the stream it runs
// on, the tensors as pointer and count (nvcc builds C++17 here). A plain C++ header, so .cpp
// files include it without nvcc. All pointers but tensors are device pointers.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "src/train/adamw.hpp"

namespace mpitron::cuda {

// cpu::adamw_update's math, operation for operation (no FMA contraction), over every parameter
// overlapping [r.begin, r.end) in one launch (up to 160 parameters a launch, each with its own
// decay; elementwise, so the bits are the per-tensor launches'); asynchronous on s. fp32 master
// weights and moments. Mixed precision: with r.weights set, r.weight_type (bf16 or f16) receives
// the updated weights rounded to nearest; r.weights with f32 is a contract violation (fail_at).
void adamw_update(const AdamWTensor* tensors, size_t count, const AdamWRange& r,
                  const AdamWConfig& cfg, double lr, float grad_scale, int64_t t, cudaStream_t s);
// The reference: the same update, one launch per parameter.
void adamw_update_per_tensor(const AdamWTensor* tensors, size_t count, const AdamWRange& r,
                             const AdamWConfig& cfg, double lr, float grad_scale, int64_t t,
                             cudaStream_t s);

}  // namespace mpitron::cuda
