// Activation offload: what a block saves for backward goes to host memory after its forward and
// comes back before its backward, so that the device holds the saved activations of only a small
// window of blocks instead of all of them (DecoderOptions::offload_activations).
//
// Layout. Each layer's block output (resid_out, the next block's input) stays on the device: it
// is the residual stream backward reads at two layers, and 1/16th or less of a layer. Everything
// else a layer keeps lives in one of kWindow device slots (layer l in slot l % kWindow) while it is
// in use, and in page-locked host buffers of its own in between. The last kWindow layers are
// never offloaded: backward starts with them while they are still in their slots.
//
// Schedule, on the backend's CopyQueue (kernels/backend.h):
//   forward:  after block l, its slot downloads to the host; before block l + kWindow overwrites
//             that slot, compute waits (on the device) for the download.
//   backward: before block l, compute waits for its upload; then block l - 1's upload starts into
//             the other slot (which block l + 1's finished backward held), so that it overlaps
//             block l's backward.
// Uploads and downloads of a slot are ordered through the compute queue: each copy waits for the
// compute queued before it, and compute waits for each copy before reusing its buffer. The values
// are those of a run that kept everything: the same kernels read the same bytes.
//
// Recomputation: "selective" composes (its recomputed attention probabilities live in the shared
// recompute buffers, not in the slots); "full" keeps only the block outputs, which stay resident
// anyway, so there is nothing to offload and the Decoder refuses the combination.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "kernels/backend.h"
#include "kernels/host_memory.h"
#include "model/activations.h"
#include "model/config.h"
#include "model/shard.h"

namespace strata {

class ActivationOffload {
 public:
  static constexpr int64_t kWindow = 2;  // the block computing and the one in flight

  // The layers of `range` (each in recompute.for_layer's mode, none of them full), slots and
  // block outputs from `arena` (the backend's memory, category activations), host buffers from
  // a host arena of its own.
  ActivationOffload(const ModelConfig& cfg, const ModelShard& shard, LayerRange range,
                    const RecomputePolicy& recompute, Arena& arena, Backend& backend, int64_t batch,
                    int64_t seq_len, DType precision);
  ~ActivationOffload();  // waits for the copies in flight
  ActivationOffload(const ActivationOffload&) = delete;
  ActivationOffload& operator=(const ActivationOffload&) = delete;

  // The layers as ActivationStore::layers holds them: views into the slots, with each layer's
  // own block output (valid for layer l between before_forward/before_backward(l) and the next
  // use of its slot).
  const std::vector<LayerActivations>& layers() const { return views_; }

  // Around each block of a forward whose activations backward will read (`saving`; an
  // evaluation forward copies nothing) and before each block's backward; `local` is the layer's
  // index in the range.
  void before_forward(int64_t local);
  void after_forward(int64_t local, bool saving);
  void before_backward(int64_t local);

  int64_t offloaded_layers() const { return offloaded_; }
  const Arena& host_arena() const { return host_arena_; }
  // Bytes one forward downloads (and one backward uploads).
  int64_t bytes_per_pass() const { return bytes_per_pass_; }

  // Device bytes per category the offload allocates (the planner: plan/memory_model.cc), counted
  // without allocating: the slots (less their block outputs) and every layer's block output.
  static MemBytes device_bytes(const ModelConfig& cfg, const ModelShard& shard, LayerRange range,
                               const RecomputePolicy& recompute, int64_t batch, int64_t seq_len,
                               DType precision);

 private:
  struct Copy {
    void* device = nullptr;
    void* host = nullptr;
    size_t bytes = 0;
  };
  void upload(int64_t local);

  int64_t layers_ = 0, window_ = 0, offloaded_ = 0;
  HostMemory host_memory_;
  Arena host_arena_;
  std::unique_ptr<CopyQueue> queue_;  // after the host arena: destroyed (and drained) first
  std::vector<LayerActivations> views_;
  std::vector<std::vector<Copy>> copies_;  // per offloaded layer
  std::vector<CopyTicket> download_, upload_;
  std::vector<int64_t> slot_holds_;  // per slot: the layer whose values it holds (-1: none)
  int64_t bytes_per_pass_ = 0;
};

}  // namespace strata
