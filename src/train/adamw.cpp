#include "src/train/adamw.hpp"

#include <fmt/format.h>

#include <cmath>

#include "base/check.hpp"

namespace mpitron {

double learning_rate(int64_t step, double lr, int warmup, int64_t total_steps, double min_ratio) {
  if (warmup > 0 && step <= warmup) return lr * double(step) / double(warmup);
  const double min_lr = lr * min_ratio;
  if (step >= total_steps || total_steps <= warmup) return total_steps <= warmup ? lr : min_lr;
  const double progress = double(step - warmup) / double(total_steps - warmup);
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

Optimizer parse_optimizer(const std::string& name) {
  if (name == "adamw") return Optimizer::adamw;
  if (name == "adamw8bit") return Optimizer::adamw8bit;
  throw UsageError(fmt::format("--optimizer {}: not an optimizer (adamw or adamw8bit)", name));
}

const char* optimizer_name(Optimizer o) {
  return o == Optimizer::adamw8bit ? "adamw8bit" : "adamw";
}

size_t adamw8bit_state_bytes(size_t shard_elements) {
  const size_t blocks = (shard_elements + kAdamW8bitBlock - 1) / kAdamW8bitBlock;
  return 2 * shard_elements * sizeof(uint8_t) + 2 * blocks * sizeof(float);
}

}  // namespace mpitron
