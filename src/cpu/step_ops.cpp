#include "src/cpu/step_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.hpp"

namespace mpitron::cpu {

void zero(float* p, size_t n) {
  std::memset(p, 0, n * sizeof(float));
}

void copy(float* dst, const float* src, size_t n) {
  std::memcpy(dst, src, n * sizeof(float));
}

double sum_of_squares(const float* g, size_t n) {
  // A fixed number of chunks, each summed in order and then added in chunk order: the same bits
  // whatever the thread count.
  constexpr int kChunks = 64;
  double partial[kChunks];
  const size_t per = (n + kChunks - 1) / kChunks;
#pragma omp parallel for schedule(static)
  for (int c = 0; c < kChunks; ++c) {
    const size_t begin = std::min(n, size_t(c) * per), end = std::min(n, begin + per);
    double s = 0.0;
    for (size_t i = begin; i < end; ++i) s += double(g[i]) * double(g[i]);
    partial[c] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

void adamw_update(const ParamRegistry& reg, const AdamWRange& r, const AdamWConfig& cfg, double lr,
                  float grad_scale, int64_t t) {
  MPITRON_REQUIRE(r.weights == nullptr, "the CPU backend trains in fp32 only");
  const float b1 = float(cfg.beta1), b2 = float(cfg.beta2), eps = float(cfg.eps);
  const float bc1 = float(1.0 - std::pow(cfg.beta1, double(t)));
  const float bc2 = float(1.0 - std::pow(cfg.beta2, double(t)));
  const float flr = float(lr);
  for (const ParamInfo& p : reg.params()) {
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
