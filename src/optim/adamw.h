// AdamW over segments of flat buffers: each segment is a run of parameters with their gradients
// and a place in the optimizer state (first and second moments, category "optimizer"). One
// process updates every parameter (one segment per parameter); a ZeRO rank updates only the
// slices it owns. Decoupled weight decay applies to segments of matrices only.
//
// The update runs on a Backend (kernels/backend.h): the segments' pointers (parameters, gradients,
// bf16 copies) are device pointers of that backend, and the moments are allocated from `arena`,
// whose memory must be the backend's (host memory for the CPU).
#pragma once
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "model/params.h"
#include "optim/optim_config.h"
#include "optim/optimizer.h"

namespace strata {

struct OptimSegment {
  float* param = nullptr;
  const float* grad = nullptr;
  int64_t count = 0;
  bool weight_decay = false;
  int64_t state_offset = 0;  // where its moments live in the state buffers
  // The bf16 working copy of these parameters (mixed precision), rounded from the new values as
  // they are written; null when there is none to keep current.
  uint16_t* param_bf16 = nullptr;
};

// One segment per parameter of the store, state laid out like the flat parameter buffer.
std::vector<OptimSegment> segments_for_all(const ParamStore& params);

class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<OptimSegment> segments, int64_t state_size, Arena& arena,
        const OptimConfig& config, Backend& backend = cpu_backend());
  // Every parameter of the store, on the store's backend.
  AdamW(ParamStore& params, Arena& arena, const OptimConfig& config)
      : AdamW(segments_for_all(params), params.size(), arena, config, params.backend()) {}
  // One update with learning rate `lr`; gradients are multiplied by grad_scale first (clipping).
  void step(float lr, float grad_scale) override;

  Backend& backend() const { return backend_; }
  int64_t steps_taken() const override { return step_; }
  void set_steps_taken(int64_t step) override { step_ = step; }
  int64_t state_size() const override { return state_size_; }
  // The moments in the arena's memory: device pointers of backend() (read them through
  // backend().copy_to_host off the CPU); the master weights are the segments' params.
  bool state_in_model_memory() const override { return true; }
  float* first_moment() const override { return m_; }
  float* second_moment() const override { return v_; }
  // Host copies of the state: the segments' params as the master, and the moments.
  void read_state(float* master, float* exp_avg, float* exp_avg_sq) const override;
  void write_state(const float* master, const float* exp_avg, const float* exp_avg_sq) override;

 private:
  std::vector<OptimSegment> segments_;
  int64_t state_size_;
  OptimConfig config_;
  Backend& backend_;
  float* m_ = nullptr;
  float* v_ = nullptr;
  int64_t step_ = 0;
};

// The global L2 norm of all gradients, and the clip coefficient PyTorch's clip_grad_norm_ uses:
// min(1, max_norm / (norm + 1e-6)); max_norm <= 0 disables clipping (coefficient 1).
// The norm is computed on the store's backend.
double global_grad_norm(const ParamStore& params);
float clip_coefficient(double norm, float max_norm);

// Learning rate at optimizer step `step` (0-based): linear warmup to lr over warmup_steps, then
// cosine or linear decay to min_lr at total_steps, or constant.
float learning_rate(const OptimConfig& config, int64_t step, int64_t total_steps);

}  // namespace strata
