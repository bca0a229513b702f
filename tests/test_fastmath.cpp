// The vectorisable float exp/tanh against the C library's (the simple path they replace).
#include <gtest/gtest.h>

#include <cmath>

#include "base/fastmath.hpp"

using mpitron::cpu::exp_fast;
using mpitron::cpu::tanh_fast;

TEST(FastMath, ExpWithinFewUlp) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.001953125f) {
    const double ref = std::exp(double(x));
    worst = std::max(worst, std::fabs(double(exp_fast(x)) - ref) / ref);
  }
  EXPECT_LT(worst, 4e-7);  // about 3 ulp of float
  EXPECT_EQ(exp_fast(0.0f), 1.0f);
  EXPECT_GT(exp_fast(-1000.0f), 0.0f);  // clamped, never 0 or NaN
  EXPECT_TRUE(std::isfinite(exp_fast(1000.0f)));
}

TEST(FastMath, TanhCloseEverywhere) {
  double worst = 0;
  for (float u = -20.0f; u <= 20.0f; u += 0.0009765625f) {
    const double ref = std::tanh(double(u));
    worst = std::max(worst, std::fabs(double(tanh_fast(u)) - ref));
  }
  EXPECT_LT(worst, 3e-7);  // absolute: GELU uses 1 + tanh
  EXPECT_EQ(tanh_fast(0.0f), 0.0f);
  EXPECT_EQ(tanh_fast(-3.0f), -tanh_fast(3.0f));
  EXPECT_EQ(tanh_fast(100.0f), 1.0f);
}
