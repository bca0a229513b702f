#include "src/train/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mpitron {

double learning_rate(int64_t step, double lr, int warmup, int64_t total_steps, double min_ratio) {
  if (warmup > 0 && step <= warmup) return lr * double(step) / double(warmup);
  const double min_lr = lr * min_ratio;
  if (step >= total_steps || total_steps <= warmup) return total_steps <= warmup ? lr : min_lr;
  const double progress = double(step - warmup) / double(total_steps - warmup);
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

double sum_of_squares(const float* g, size_t n) {
  // Fixed chunks summed in chunk order: the same bits whatever the thread count.
  constexpr size_t chunk = 1 << 16;
  const size_t chunks = (n + chunk - 1) / chunk;
  double total = 0.0;
#pragma omp parallel for ordered schedule(static)
  for (size_t c = 0; c < chunks; ++c) {
    double s = 0.0;
    const size_t end = std::min(n, (c + 1) * chunk);
    for (size_t i = c * chunk; i < end; ++i) s += double(g[i]) * double(g[i]);
#pragma omp ordered
    total += s;
  }
  return total;
}

void adamw_update(const ParamRegistry& reg, const AdamWRange& r, const AdamWConfig& cfg, double lr,
                  float grad_scale, int64_t t) {
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

}  // namespace mpitron
