// AdamW (Loshchilov & Hutter 2019) with linear warm-up then cosine decay, and clipping by global
// gradient norm: the schedule and the update's types. The update works on flat ranges of the
// parameters' allocation, so a ZeRO shard is updated exactly as the same elements of the
// unsharded baseline; its math is cpu::adamw_update (src/cpu/adamw.hpp) with a CUDA twin
// (src/cuda/adamw.cuh), reached through StepBackend. It knows parameters only as AdamWTensors.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "src/model/precision.hpp"

namespace mpitron {

// One parameter tensor as AdamW sees it: the elements [offset, offset + numel) of the flat
// allocation, and whether weight decay applies to them.
struct AdamWTensor {
  size_t offset, numel;
  bool weight_decay;
};

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

// One step's float constants, PyTorch's folded form: w (1 - lr decay) - step_size m /
// (sqrt(v) inv_sqrt_bc2 + eps), computed in double and rounded once. Here, inline, so that the CPU
// update and its CUDA twins (src/cuda/adamw.cu) take the same floats and round alike.
struct AdamWStep {
  float b1, b2, one_minus_b1, one_minus_b2, step_size, inv_sqrt_bc2, eps, lr_decay;
  AdamWStep(const AdamWConfig& cfg, double lr, int64_t t)
      : b1(float(cfg.beta1)),
        b2(float(cfg.beta2)),
        one_minus_b1(1.0f - b1),
        one_minus_b2(1.0f - b2),
        step_size(float(lr / (1.0 - std::pow(cfg.beta1, double(t))))),
        inv_sqrt_bc2(float(1.0 / std::sqrt(1.0 - std::pow(cfg.beta2, double(t))))),
        eps(float(cfg.eps)),
        lr_decay(float(lr * cfg.weight_decay)) {}
};

// Learning rate of 1-based step s: lr * s / warmup during warm-up, then cosine from lr to
// lr * min_ratio at total_steps (and min afterwards).
double learning_rate(int64_t step, double lr, int warmup, int64_t total_steps, double min_ratio);

// The elements [begin, end) of the flat allocation to update. params (fp32 master weights) and
// grads are indexed by flat position minus p_offset/g_offset, moments by flat position minus
// m_offset (their allocation starts at that flat position). With mixed precision, weights (of
// weight_type, indexed like params) receives the updated weights rounded; nullptr in fp32 runs.
struct AdamWRange {
  size_t begin, end;
  float* params;
  size_t p_offset;
  const float* grads;
  size_t g_offset;
  float *m, *v;
  size_t m_offset;
  void* weights = nullptr;
  DType weight_type = DType::f32;
};

// --optimizer: adamw keeps both moments in fp32; adamw8bit stores them as 8-bit codes with one
// fp32 scale per block of kAdamW8bitBlock elements (bitsandbytes' blockwise 8-bit Adam).
enum class Optimizer { adamw, adamw8bit };
// UsageError naming the valid names for anything but adamw and adamw8bit.
Optimizer parse_optimizer(const std::string& name);
const char* optimizer_name(Optimizer o);

// 8-bit AdamW quantizes blocks of this many consecutive flat elements with one absmax each.
inline constexpr size_t kAdamW8bitBlock = 256;

// Bytes of 8-bit AdamW state for a shard of shard_elements: one code byte per element for each
// moment, and one fp32 absmax per (started) block for each.
size_t adamw8bit_state_bytes(size_t shard_elements);

// AdamWRange's 8-bit twin. [begin, end) and state_offset are multiples of kAdamW8bitBlock, so
// the range is whole blocks. Codes are indexed by flat position minus state_offset, absmax values
// by that over kAdamW8bitBlock. weights as in AdamWRange.
struct AdamW8bitRange {
  size_t begin, end;
  float* params;
  size_t p_offset;
  const float* grads;
  size_t g_offset;
  uint8_t *m_codes, *v_codes;  // into the signed (m) and unsigned (v) dynamic maps
  float *m_absmax, *v_absmax;  // per block
  size_t state_offset;
  void* weights = nullptr;
  DType weight_type = DType::f32;
};

}  // namespace mpitron
