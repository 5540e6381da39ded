// GroupHooks: the Decoder announces every use of a parameter group (the embedding, a block, the
// final norm and head), so that a data-parallel strategy can act at exactly those points without
// the model knowing about it: gather a ZeRO-3 group's parameters before use and free them after,
// bind a ZeRO-2/3 group's gradients to a zeroed staging buffer, and start a bucket's reduction as
// soon as backward has finished its gradients. The default does nothing (one process, or DDP
// with resident buffers and no overlap).
#pragma once

namespace strata {

class GroupHooks {
 public:
  virtual ~GroupHooks() = default;
  // A forward pass (groups visited upwards) or a backward pass (downwards) begins.
  virtual void begin_forward() {}
  virtual void begin_backward() {}
  // Parameters of group g are about to be read / are no longer needed (forward or backward).
  virtual void acquire_params(int /*group*/) {}
  virtual void release_params(int /*group*/) {}
  // Backward is about to accumulate into group g's gradients / has finished them for this
  // micro-batch.
  virtual void begin_grads(int /*group*/) {}
  virtual void end_grads(int /*group*/) {}
};

}  // namespace strata
