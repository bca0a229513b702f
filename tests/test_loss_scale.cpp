// Dynamic loss scaling's state machine: a non-finite norm skips the step and halves the scale,
// `window` finite steps double it, both within [2^-126, 2^127]; the scaled dloss and the unscaled
// norm are exact (powers of two); without scaling nothing is skipped and nothing scaled.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "src/train/loss_scale.hpp"

using mpitron::LossScale;

TEST(LossScale, OverflowSkipsAndHalvesCleanWindowDoubles) {
  LossScale s{65536, 0, 3};
  EXPECT_TRUE(s.step_ok(2.5));
  EXPECT_TRUE(s.step_ok(2.5));
  EXPECT_EQ(s.scale, 65536);
  EXPECT_TRUE(s.step_ok(2.5));  // the third clean step
  EXPECT_EQ(s.scale, 131072);
  EXPECT_EQ(s.clean_steps, 0);
  EXPECT_TRUE(s.step_ok(1.0));
  EXPECT_FALSE(s.step_ok(std::numeric_limits<double>::infinity()));
  EXPECT_EQ(s.scale, 65536);
  EXPECT_EQ(s.clean_steps, 0);  // the window starts again after an overflow
  EXPECT_FALSE(s.step_ok(std::numeric_limits<double>::quiet_NaN()));
  EXPECT_EQ(s.scale, 32768);
  EXPECT_TRUE(s.step_ok(1.0));
  EXPECT_TRUE(s.step_ok(1.0));
  EXPECT_EQ(s.scale, 32768);
}

TEST(LossScale, StaysWithinFloatRange) {
  LossScale high{LossScale::kMax, 0, 1};
  EXPECT_TRUE(high.step_ok(1.0));
  EXPECT_EQ(high.scale, LossScale::kMax);
  LossScale low{LossScale::kMin, 0, 1};
  EXPECT_FALSE(low.step_ok(std::numeric_limits<double>::infinity()));
  EXPECT_EQ(low.scale, LossScale::kMin);
  EXPECT_TRUE(std::isfinite(float(LossScale::kMax)));
  EXPECT_GT(float(LossScale::kMin), 0.0f);
}

TEST(LossScale, ScalingIsExact) {
  const LossScale s{0x1p20, 0, 2000};
  for (int64_t terms : {1, 7, 2048, 12345}) {
    const float plain = 1.0f / float(terms);
    EXPECT_EQ(s.dloss(terms), plain * 0x1p20f);
    EXPECT_EQ(s.dloss(terms) / 0x1p20f, plain);
  }
  EXPECT_EQ(s.unscaled(3.25 * 0x1p20), 3.25);
}

TEST(LossScale, DisabledScalesNothingAndSkipsNothing) {
  LossScale s;
  EXPECT_FALSE(s.enabled());
  EXPECT_EQ(s.dloss(2048), 1.0f / 2048.0f);
  EXPECT_EQ(s.unscaled(3.0), 3.0);
  EXPECT_TRUE(s.step_ok(std::numeric_limits<double>::infinity()));
  EXPECT_EQ(s.scale, 0);
}
