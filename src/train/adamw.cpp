#include "src/train/adamw.hpp"

#include <cmath>

namespace mpitron {

double learning_rate(int64_t step, double lr, int warmup, int64_t total_steps, double min_ratio) {
  if (warmup > 0 && step <= warmup) return lr * double(step) / double(warmup);
  const double min_lr = lr * min_ratio;
  if (step >= total_steps || total_steps <= warmup) return total_steps <= warmup ? lr : min_lr;
  const double progress = double(step - warmup) / double(total_steps - warmup);
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace mpitron
