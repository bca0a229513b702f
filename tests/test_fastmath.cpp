// The vectorisable float exp/tanh/erfc against the C library's (the simple path they replace).
#include <gtest/gtest.h>

#include <cmath>

#include "base/fastmath.hpp"

using mpitron::cpu::erfc_fast;
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

TEST(FastMath, ErfcRelativeEverywhere) {
  double worst = 0, worst_cdf = 0;
  for (float x = -6.0f; x <= 9.0f; x += 0.0009765625f) {  // erfc(9) = 4e-37, float's bottom
    const double ref = std::erfc(double(x));
    worst = std::max(worst, std::fabs(double(erfc_fast(x)) - ref) / ref);
  }
  for (float x = -12.0f; x <= 12.0f; x += 0.0009765625f) {  // GELU's Phi(x) = erfc(-x/sqrt 2)/2
    const double ref = 0.5 * std::erfc(-double(x) / std::sqrt(2.0));
    worst_cdf = std::max(worst_cdf, std::fabs(0.5 * erfc_fast(-x * 0.70710678f) - ref));
  }
  EXPECT_LT(worst, 6e-7);      // relative, down to the tail (about 5 ulp)
  EXPECT_LT(worst_cdf, 3e-7);  // absolute: about 2 ulp near 1
  EXPECT_EQ(erfc_fast(-20.0f), 2.0f);
  EXPECT_GT(erfc_fast(20.0f), 0.0f);  // clamped, never NaN
}
