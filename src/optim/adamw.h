// AdamW over a ParamStore: first and second moments in flat buffers of the parameters' layout
// (category "optimizer"), decoupled weight decay only for parameters marked weight_decay.
#pragma once
#include <cstdint>

#include "core/arena.h"
#include "model/params.h"
#include "optim/optim_config.h"

namespace strata {

class AdamW {
 public:
  AdamW(ParamStore& params, Arena& arena, const OptimConfig& config);
  // One update with learning rate `lr`; gradients are multiplied by grad_scale first (clipping).
  void step(float lr, float grad_scale);

  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t step) { step_ = step; }
  float* first_moment() const { return m_; }
  float* second_moment() const { return v_; }

 private:
  ParamStore& params_;
  OptimConfig config_;
  float* m_ = nullptr;
  float* v_ = nullptr;
  int64_t step_ = 0;
};

// The global L2 norm of all gradients, and the clip coefficient PyTorch's clip_grad_norm_ uses:
// min(1, max_norm / (norm + 1e-6)); max_norm <= 0 disables clipping (coefficient 1).
double global_grad_norm(const ParamStore& params);
float clip_coefficient(double norm, float max_norm);

// Learning rate at optimizer step `step` (0-based): linear warmup to lr over warmup_steps, then
// cosine or linear decay to min_lr at total_steps, or constant.
float learning_rate(const OptimConfig& config, int64_t step, int64_t total_steps);

}  // namespace strata
