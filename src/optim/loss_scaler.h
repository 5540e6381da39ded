// LossScaler: fp16 training multiplies the loss by a scale so that small gradients survive f16's
// range, divides the gradients by it before clipping, and skips any step whose gradients
// overflowed. The dynamic policy is DeepSpeed's DynamicLossScaler (deepspeed/runtime/fp16/
// loss_scaler.py), step for step:
//   overflow:  if no hysteresis is left (delayed_shift == 1 or cur_hysteresis == 1), the scale
//              is divided by 2 (not below min_loss_scale; at the minimum already, an error);
//              otherwise one unit of hysteresis is used up. last_overflow_iter = cur_iter.
//   no overflow: with consecutive_hysteresis the hysteresis refills; every loss_scale_window
//              iterations since the last overflow the scale doubles (and, without
//              consecutive_hysteresis, the hysteresis refills).
//   cur_iter += 1 either way.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

#include "optim/optim_config.h"

namespace strata {

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& config);

  float scale() const { return scale_; }
  bool dynamic() const { return config_.loss_scale <= 0.0f; }
  // After the gradients of a step are known (overflow: any of them is Inf or NaN, on any rank).
  void update(bool overflow);

  int64_t skipped_steps() const { return skipped_; }
  // For checkpoints: scale, iteration counters, hysteresis, skipped steps.
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  LossScalerConfig config_;
  float scale_;
  int64_t iteration_ = 0, last_overflow_ = -1, hysteresis_left_, skipped_ = 0;
};

}  // namespace strata
