#include "src/cpu/adamw.hpp"

#include <algorithm>
#include <cmath>

#include "base/check.hpp"

namespace mpitron::cpu {

void adamw_update(std::span<const AdamWTensor> tensors, const AdamWRange& r, const AdamWConfig& cfg,
                  double lr, float grad_scale, int64_t t) {
  MPITRON_REQUIRE(r.weights == nullptr, "the CPU backend trains in fp32 only");
  const float b1 = float(cfg.beta1), b2 = float(cfg.beta2), eps = float(cfg.eps);
  const float bc1 = float(1.0 - std::pow(cfg.beta1, double(t)));
  const float bc2 = float(1.0 - std::pow(cfg.beta2, double(t)));
  const float flr = float(lr);
  for (const AdamWTensor& p : tensors) {
    const size_t begin = std::max(r.begin, p.offset), end = std::min(r.end, p.offset + p.numel);
    if (begin >= end) continue;
    const float decay = p.weight_decay ? float(cfg.weight_decay) : 0.0f;
    float* w = r.params + (begin - r.p_offset);
    const float* g = r.grads + (begin - r.g_offset);
    float* m = r.m + (begin - r.m_offset);
    float* v = r.v + (begin - r.m_offset);
    const long n = long(end - begin);
#pragma omp parallel for simd schedule(static)
    for (long i = 0; i < n; ++i) {
      const float gi = g[i] * grad_scale;
      m[i] = b1 * m[i] + (1.0f - b1) * gi;
      v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
      const float mhat = m[i] / bc1, vhat = v[i] / bc2;
      w[i] -= flr * (mhat / (std::sqrt(vhat) + eps) + decay * w[i]);
    }
  }
}

}  // namespace mpitron::cpu
