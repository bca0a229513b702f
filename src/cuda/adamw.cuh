// cpu::adamw_update's CUDA twin (src/cpu/adamw.hpp): the same arguments plus the stream it runs
// on, the tensors as pointer and count (nvcc builds C++17 here). A plain C++ header, so .cpp
// files include it without nvcc. All pointers but tensors are device pointers.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "src/train/adamw.hpp"

namespace mpitron::cuda {

// cpu::adamw_update's math (the folded form, AdamWStep's constants), operation for operation (no
// FMA contraction), so the CPU's bits, over every parameter
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

// What cpu::adamw8bit_update derives on the host, as plain data (nvcc builds C++17 here): the
// step's folded constants (AdamWStep's, with keep_decayed = 1 - lr decay), and the dynamic
// maps, their midpoints (cpu::quantization_midpoints) and their codes of 0.
struct AdamW8bitStep {
  float b1, b2, one_minus_b1, one_minus_b2, step_size, inv_sqrt_bc2, eps, keep_decayed;
};
struct AdamW8bitTables {
  float m_map[256], v_map[256];
  double m_mid[256], v_mid[256];
  uint8_t m_zero, v_zero;
};

// cpu::adamw8bit_update on the device, bit for bit: one thread block per 256-element
// quantization block (dequantize, cpu::adamw_update's folded arithmetic with every operation
// correctly rounded, the block's absmax, the nearest codes by the same midpoints). Tensors in flat
// order; each launch carries up to 160 of them. Asynchronous on s (the tables are copied to
// constant memory on s first).
void adamw8bit_update(const AdamWTensor* tensors, size_t count, const AdamW8bitRange& r,
                      const AdamW8bitStep& step, const AdamW8bitTables& tables, float grad_scale,
                      cudaStream_t s);

}  // namespace mpitron::cuda
