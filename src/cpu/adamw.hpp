// AdamW's update on the CPU (the schedule and types: src/train/adamw.hpp). Its CUDA twin, with
// the same arguments plus a stream, is src/cuda/adamw.cuh; StepBackend picks one.
#pragma once
#include <array>
#include <cstdint>
#include <span>

#include "src/train/adamw.hpp"

namespace mpitron::cpu {

using mpitron::AdamWStep;  // the step's folded constants (src/train/adamw.hpp)

// grad_scale multiplies every gradient (clipping; loss-scale removal later). t is 1-based. Each
// tensor overlapping [r.begin, r.end) decays where it says so. fp32 only (r.weights must be
// nullptr). PyTorch's AdamW with the step's constants folded (one division and one square root
// an element), threaded over the flat range; bits do not depend on the thread count. Built
// without floating-point contraction.
void adamw_update(std::span<const AdamWTensor> tensors, const AdamWRange& r, const AdamWConfig& cfg,
                  double lr, float grad_scale, int64_t t);

// The simple path adamw_update replaced, serial: bias corrections divided out element by element,
// m_hat / (sqrt(v_hat) + eps) + decay w; adamw_update agrees with it to a few ulps
// (tests/test_adamw.cpp). The CUDA twin (src/cuda/adamw.cuh) rounds as adamw_update does.
void adamw_update_reference(std::span<const AdamWTensor> tensors, const AdamWRange& r,
                            const AdamWConfig& cfg, double lr, float grad_scale, int64_t t);

// bitsandbytes' dynamic quantization maps, ascending, computed in double and rounded to float:
// for i = 0..6 the midpoints of linspace(0.1, 1, k + 1) scaled by 10^(i-6), with k = 2^i and
// their negatives (signed, the first moment) or k = 2^(i+1) (unsigned, the second), plus 0 and 1.
using QuantizationMap = std::array<float, 256>;
const QuantizationMap& signed_dynamic_map();
const QuantizationMap& unsigned_dynamic_map();

// Index of the map value nearest x (ties: the lower index).
uint8_t quantize_nearest(const QuantizationMap& map, float x);

// The decision points between neighbouring codes, (map[k] + map[k+1]) / 2, exact in double (the
// neighbours' exponents differ by far less than double's 29 spare bits), then +inf: the nearest
// code of x (ties: the lower) is the number of points below x.
using Midpoints = std::array<double, 256>;
Midpoints quantization_midpoints(const QuantizationMap& map);

// quantize_nearest(map, value[j] / absmax) for the kAdamW8bitBlock values of a block (absmax >
// 0), as adamw8bit_update requantizes: the midpoints below the float's bucket (its sign, exponent
// and top mantissa bits) from a table, then one comparison with the midpoint rounded down to float.
void quantize_block(const QuantizationMap& map, const float* value, float absmax, uint8_t* code);
// The simple path it replaced: a binary search over the midpoints rounded down to float.
void quantize_block_reference(const QuantizationMap& map, const float* value, float absmax,
                              uint8_t* code);

// Blockwise 8-bit AdamW: per block, the moments dequantized (code value x block absmax), then
// adamw_update's arithmetic element for element, then each moment requantized to its
// nearest code against the block's new absmax max |value| (0: every code the map's 0). Elements in
// no tensor (padding) keep their value. Bits do not depend on the thread count.
void adamw8bit_update(std::span<const AdamWTensor> tensors, const AdamW8bitRange& r,
                      const AdamWConfig& cfg, double lr, float grad_scale, int64_t t);

}  // namespace mpitron::cpu
