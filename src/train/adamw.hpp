// AdamW (Loshchilov & Hutter 2019) with linear warm-up then cosine decay, and clipping by global
// gradient norm. Works on flat ranges of the registry's allocation, so a ZeRO shard is updated
// exactly as the same elements of the unsharded baseline.
#pragma once
#include <cstddef>
#include <cstdint>

#include "src/model/registry.hpp"

namespace mpitron {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

// Learning rate of 1-based step s: lr * s / warmup during warm-up, then cosine from lr to
// lr * min_ratio at total_steps (and min afterwards).
double learning_rate(int64_t step, double lr, int warmup, int64_t total_steps, double min_ratio);

// Sum of squares of g[0, n) in double, in a fixed order (deterministic for any thread count).
double sum_of_squares(const float* g, size_t n);

// Updates the elements [begin, end) of the flat allocation. params and grads are indexed by flat
// position minus p_offset/g_offset, moments by flat position minus m_offset (their allocation
// starts at that flat position). grad_scale multiplies every gradient (clipping). t is 1-based.
struct AdamWRange {
  size_t begin, end;
  float* params;
  size_t p_offset;
  const float* grads;
  size_t g_offset;
  float *m, *v;
  size_t m_offset;
};
void adamw_update(const ParamRegistry& reg, const AdamWRange& r, const AdamWConfig& cfg, double lr,
                  float grad_scale, int64_t t);

}  // namespace mpitron
