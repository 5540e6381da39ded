// The one interface the trainer steps and checkpoints every optimizer through: AdamW with its
// moments in the model's memory (optim/adamw.h), AdamW with master weights and moments in files
// (optim/offload.h, optim.offload = "nvme") or in host memory beside a GPU (optim/host_offload.h,
// "cpu"). Every update is bitwise AdamW's on the same inputs.
#pragma once
#include <cstdint>

namespace strata {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update with learning rate lr; gradients are multiplied by grad_scale first (clipping and
  // the loss scale).
  virtual void step(float lr, float grad_scale) = 0;
  // The step's update was skipped (an fp16 overflow, a loss spike): drops what was prepared for
  // it (the host offload's gradients, downloaded during backward).
  virtual void discard_gradients() {}
  virtual int64_t steps_taken() const = 0;
  virtual void set_steps_taken(int64_t step) = 0;
  // Elements of each state buffer (master, first moment, second moment), in the state layout of
  // the segments (OptimSegment::state_offset).
  virtual int64_t state_size() const = 0;
  // Whether the moments live in the model's memory, where checkpoints read and write them in
  // place (first_moment(), second_moment(): device pointers of the model's backend; the master
  // weights are the parameters themselves). Otherwise checkpoints go through read_state and
  // write_state, and first_moment() and second_moment() are null.
  virtual bool state_in_model_memory() const = 0;
  virtual float* first_moment() const { return nullptr; }
  virtual float* second_moment() const { return nullptr; }
  // The whole state in the state layout (state_size floats each, host memory). write_state also
  // copies the master values into the segments' params, so that the working copy the model reads
  // matches the master it resumes from.
  virtual void read_state(float* master, float* exp_avg, float* exp_avg_sq) const = 0;
  virtual void write_state(const float* master, const float* exp_avg, const float* exp_avg_sq) = 0;
};

}  // namespace strata
