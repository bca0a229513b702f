#include "src/train/step_backend.hpp"

#include <fmt/format.h>

#include "src/check.hpp"
#include "src/cpu/step_ops.hpp"

namespace mpitron {

const StepBackend& step_backend(const std::string& device) {
  static constexpr StepBackend cpu_backend{"cpu", cpu::zero, cpu::copy, cpu::sum_of_squares,
                                           cpu::adamw_update};
  if (device == "cpu") return cpu_backend;
  throw UsageError(fmt::format("--device {}: this build trains on the cpu only", device));
}

}  // namespace mpitron
