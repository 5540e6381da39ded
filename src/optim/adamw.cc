#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/trace.h"

namespace strata {

std::vector<OptimSegment> segments_for_all(const ParamStore& params) {
  std::vector<OptimSegment> out;
  for (int i = 0; i < params.count(); ++i) {
    const ParamInfo& p = params.info(i);
    out.push_back({params.param(i), params.grad(i), p.numel, p.weight_decay, p.offset});
  }
  return out;
}

AdamW::AdamW(std::vector<OptimSegment> segments, int64_t state_size, Arena& arena,
             const OptimConfig& config, Backend& backend)
    : segments_(std::move(segments)), state_size_(state_size), config_(config), backend_(backend) {
  STRATA_CHECK(arena.memory() == backend_.memory(), "AdamW: the arena's memory (",
               arena.memory() ? arena.memory()->name() : std::string("host"),
               ") is not the memory of the optimizer's backend (",
               backend_.memory() ? backend_.memory()->name() : std::string("host"), ")");
  m_ = arena.alloc<float>(MemCategory::optimizer, state_size, "adam first moment");
  v_ = arena.alloc<float>(MemCategory::optimizer, state_size, "adam second moment");
}

void AdamW::step(float lr, float grad_scale) {
  const TraceSpan span("adamw", "optimizer");
  ++step_;
  for (const OptimSegment& s : segments_) {
    const float wd = s.weight_decay ? config_.weight_decay : 0.0f;
    backend_.adamw_update(s.param, s.grad, m_ + s.state_offset, v_ + s.state_offset, s.count, lr,
                          config_.beta1, config_.beta2, config_.eps, wd, grad_scale, step_,
                          s.param_bf16);
  }
}

void AdamW::read_state(float* master, float* exp_avg, float* exp_avg_sq) const {
  for (const OptimSegment& s : segments_)
    if (s.count > 0)  // an empty segment's pointers may be null
      backend_.copy_to_host(master + s.state_offset, s.param,
                            static_cast<size_t>(s.count) * sizeof(float));
  backend_.copy_to_host(exp_avg, m_, static_cast<size_t>(state_size_) * sizeof(float));
  backend_.copy_to_host(exp_avg_sq, v_, static_cast<size_t>(state_size_) * sizeof(float));
}

void AdamW::write_state(const float* master, const float* exp_avg, const float* exp_avg_sq) {
  for (const OptimSegment& s : segments_) {
    if (s.count == 0) continue;  // an empty segment's pointers may be null
    backend_.copy_from_host(s.param, master + s.state_offset,
                            static_cast<size_t>(s.count) * sizeof(float));
    if (s.param_bf16)  // the working copy follows the master, as after an update
      backend_.to_lowp(DType::bf16, s.param_bf16, s.param, s.count);
  }
  backend_.copy_from_host(m_, exp_avg, static_cast<size_t>(state_size_) * sizeof(float));
  backend_.copy_from_host(v_, exp_avg_sq, static_cast<size_t>(state_size_) * sizeof(float));
}

double global_grad_norm(const ParamStore& params) {
  return std::sqrt(params.backend().sum_squares(params.grads(), params.size()));
}

float clip_coefficient(double norm, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  const double coef = static_cast<double>(max_norm) / (norm + 1e-6);
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

float learning_rate(const OptimConfig& config, int64_t step, int64_t total_steps) {
  if (step < config.warmup_steps)
    return config.lr * static_cast<float>(step + 1) / static_cast<float>(config.warmup_steps);
  if (config.decay == LrDecay::constant) return config.lr;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - config.warmup_steps);
  const double progress = std::min(
      1.0, static_cast<double>(step - config.warmup_steps) / static_cast<double>(decay_steps));
  const double shape =
      config.decay == LrDecay::linear ? 1.0 - progress : 0.5 * (1.0 + std::cos(M_PI * progress));
  return static_cast<float>(config.min_lr + shape * (config.lr - config.min_lr));
}

}  // namespace strata
