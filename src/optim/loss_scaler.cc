#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace strata {

LossScaler::LossScaler(const LossScalerConfig& config)
    : config_(config),
      scale_(config.loss_scale > 0.0f
                 ? config.loss_scale
                 : std::ldexp(1.0f, static_cast<int>(config.initial_scale_power))),
      hysteresis_left_(config.hysteresis) {}

void LossScaler::update(bool overflow) {
  if (overflow) ++skipped_;
  if (!dynamic()) return;
  if (overflow) {
    if (config_.hysteresis == 1 || hysteresis_left_ == 1) {
      STRATA_CHECK(
          scale_ > config_.min_loss_scale,
          "fp16: the gradients overflow even at the minimum loss scale (fp16.min_loss_scale "
          "= ",
          config_.min_loss_scale, ") at iteration ", iteration_,
          "; the model diverged in f16's range. Lower optim.lr, use train.precision = "
          "\"bf16\", or lower fp16.min_loss_scale");
      scale_ = std::max(scale_ / 2.0f, config_.min_loss_scale);
    } else {
      --hysteresis_left_;
    }
    last_overflow_ = iteration_;
  } else {
    if (config_.consecutive_hysteresis) hysteresis_left_ = config_.hysteresis;
    if ((iteration_ - last_overflow_) % config_.loss_scale_window == 0) {
      if (!config_.consecutive_hysteresis) hysteresis_left_ = config_.hysteresis;
      scale_ *= 2.0f;
    }
  }
  ++iteration_;
}

nlohmann::json LossScaler::state() const {
  return {{"scale", scale_},
          {"iteration", iteration_},
          {"last_overflow", last_overflow_},
          {"hysteresis_left", hysteresis_left_},
          {"skipped_steps", skipped_}};
}

void LossScaler::restore(const nlohmann::json& s) {
  scale_ = s.at("scale").get<float>();
  iteration_ = s.at("iteration").get<int64_t>();
  last_overflow_ = s.at("last_overflow").get<int64_t>();
  hysteresis_left_ = s.at("hysteresis_left").get<int64_t>();
  skipped_ = s.at("skipped_steps").get<int64_t>();
}

}  // namespace strata
