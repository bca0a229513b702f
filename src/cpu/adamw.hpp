// AdamW's update on the CPU (the schedule and types: src/train/adamw.hpp). Its CUDA twin, with
// the same arguments plus a stream, is src/cuda/adamw.cuh; StepBackend picks one.
#pragma once
#include <cstdint>
#include <span>

#include "src/train/adamw.hpp"

namespace mpitron::cpu {

// grad_scale multiplies every gradient (clipping; loss-scale removal later). t is 1-based. Each
// tensor overlapping [r.begin, r.end) decays where it says so. fp32 only (r.weights must be
// nullptr). Built without floating-point contraction: the CUDA twin rounds operation for operation.
void adamw_update(std::span<const AdamWTensor> tensors, const AdamWRange& r, const AdamWConfig& cfg,
                  double lr, float grad_scale, int64_t t);

}  // namespace mpitron::cpu
