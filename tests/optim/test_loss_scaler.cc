// The dynamic loss scaler follows DeepSpeed's DynamicLossScaler step for step. The expected
// sequences below were traced by hand from deepspeed/runtime/fp16/loss_scaler.py's update_scale
// with the same settings (initial_scale_power, loss_scale_window, hysteresis, min_loss_scale).
#include <gtest/gtest.h>

#include "core/error.h"
#include "optim/loss_scaler.h"

namespace strata {
namespace {

LossScalerConfig config(int64_t power, int64_t window, int64_t hysteresis, float min_scale) {
  LossScalerConfig c;
  c.initial_scale_power = power;
  c.loss_scale_window = window;
  c.hysteresis = hysteresis;
  c.min_loss_scale = min_scale;
  return c;
}

TEST(LossScaler, GrowsEveryWindowOfCleanSteps) {
  LossScaler s(config(4, 3, 2, 1));
  EXPECT_EQ(s.scale(), 16.0f);
  // iteration 0: (0 - (-1)) % 3 != 0; 1: 2 % 3; 2: 3 % 3 == 0 -> grows at the third clean step.
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 16.0f);
  s.update(false);
  EXPECT_EQ(s.scale(), 32.0f);
  s.update(false);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 64.0f);
  EXPECT_EQ(s.skipped_steps(), 0);
}

TEST(LossScaler, HysteresisAbsorbsOverflowsBeforeBackingOff) {
  LossScaler s(config(4, 1000, 2, 1));
  s.update(true);  // hysteresis 2 -> 1, scale kept
  EXPECT_EQ(s.scale(), 16.0f);
  s.update(true);  // no hysteresis left: halve
  EXPECT_EQ(s.scale(), 8.0f);
  s.update(true);  // still none left (not refilled without a window of clean steps): halve
  EXPECT_EQ(s.scale(), 4.0f);
  EXPECT_EQ(s.skipped_steps(), 3);
}

TEST(LossScaler, WindowCountsFromTheLastOverflowAndRefillsHysteresis) {
  LossScaler s(config(4, 2, 2, 1));
  s.update(true);   // iter 0: hysteresis 2 -> 1; last overflow 0
  s.update(false);  // iter 1: (1 - 0) % 2 != 0
  EXPECT_EQ(s.scale(), 16.0f);
  s.update(false);  // iter 2: 2 % 2 == 0 -> grow to 32, hysteresis refilled to 2
  EXPECT_EQ(s.scale(), 32.0f);
  s.update(true);  // iter 3: hysteresis 2 -> 1
  EXPECT_EQ(s.scale(), 32.0f);
  s.update(true);  // iter 4: halve
  EXPECT_EQ(s.scale(), 16.0f);
}

TEST(LossScaler, ConsecutiveHysteresisRefillsAfterEveryCleanStep) {
  LossScalerConfig c = config(4, 1000, 2, 1);
  c.consecutive_hysteresis = true;
  LossScaler s(c);
  s.update(true);   // 2 -> 1
  s.update(false);  // refilled to 2
  s.update(true);   // 2 -> 1: scale kept
  EXPECT_EQ(s.scale(), 16.0f);
}

TEST(LossScaler, MinimumScaleAndStaticScale) {
  LossScaler s(config(1, 1000, 1, 1));
  s.update(true);  // 2 -> 1
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_THROW(s.update(true), Error);  // overflow at the minimum: a clear error, as DeepSpeed

  LossScalerConfig fixed;
  fixed.loss_scale = 128.0f;
  LossScaler f(fixed);
  f.update(true);
  f.update(false);
  EXPECT_EQ(f.scale(), 128.0f);
  EXPECT_EQ(f.skipped_steps(), 1);
}

TEST(LossScaler, StateRoundTrips) {
  LossScaler a(config(6, 3, 2, 1));
  a.update(true);
  a.update(false);
  LossScaler b(config(6, 3, 2, 1));
  b.restore(a.state());
  for (bool o : {false, true, true, false, false, false}) {
    a.update(o);
    b.update(o);
    EXPECT_EQ(a.scale(), b.scale());
  }
  EXPECT_EQ(a.state(), b.state());
}

}  // namespace
}  // namespace strata
