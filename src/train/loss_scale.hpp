// Dynamic loss scaling (Micikevicius et al. 2018, "Mixed Precision Training"): fp16 gradients
// underflow unless the loss's gradient is multiplied by a large scale, and overflow when it is too
// large. The scale is a power of two, so scaling and unscaling change no bit of a gradient that
// stays in range; a step whose gradients are not finite is skipped and halves the scale, `window`
// clean steps in a row double it.
#pragma once
#include <cstdint>

namespace mpitron {

struct LossScale {
  static constexpr double kMin = 0x1p-126, kMax = 0x1p127;
  double scale = 0;         // the current scale, a power of two in [kMin, kMax]; 0: no scaling
  int64_t clean_steps = 0;  // finite steps since the scale last changed
  int64_t window = 2000;

  bool enabled() const { return scale > 0; }
  // The gradient of the objective with respect to each of loss_terms loss terms, scaled.
  float dloss(int64_t loss_terms) const;
  // The gradient norm without the scale.
  double unscaled(double scaled_norm) const;
  // After a step whose scaled gradients have the global norm scaled_norm: whether the step may
  // update the parameters (its gradients are finite); moves the scale for the next step.
  bool step_ok(double scaled_norm);
};

}  // namespace mpitron
