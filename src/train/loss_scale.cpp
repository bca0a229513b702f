#include "src/train/loss_scale.hpp"

#include <algorithm>
#include <cmath>

namespace mpitron {

float LossScale::dloss(int64_t loss_terms) const {
  const float d = 1.0f / float(loss_terms);
  return enabled() ? d * float(scale) : d;  // times a power of two: exact
}

double LossScale::unscaled(double scaled_norm) const {
  return enabled() ? scaled_norm / scale : scaled_norm;
}

bool LossScale::step_ok(double scaled_norm) {
  if (!enabled()) return true;
  if (!std::isfinite(scaled_norm)) {
    scale = std::max(scale / 2, kMin);
    clean_steps = 0;
    return false;
  }
  if (++clean_steps >= window) {
    scale = std::min(scale * 2, kMax);
    clean_steps = 0;
  }
  return true;
}

}  // namespace mpitron
