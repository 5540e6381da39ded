#include "model/activation_offload.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/trace.h"

namespace strata {

namespace {

constexpr const char* kBlockOutput = "block output";  // activations.cc's name for resid_out

// The slots hold any layer of the range: the layout that keeps the most (none over selective).
Recompute slot_mode(LayerRange range, const RecomputePolicy& recompute) {
  Recompute mode = Recompute::selective;
  for (int64_t local = 0; local < range.size(); ++local) {
    const Recompute m = recompute.for_layer(local);
    STRATA_CHECK(m != Recompute::full,
                 "activation offload with full recomputation: a fully recomputed block keeps only "
                 "its output, which stays on the device anyway; use train.recompute = \"none\" or "
                 "\"selective\" with the offload, or full recomputation without it");
    if (m == Recompute::none) mode = Recompute::none;
  }
  return mode;
}

int64_t block_output_bytes(const ModelConfig& cfg, const ModelShard& shard, int64_t batch,
                           int64_t seq_len) {
  return shard.local_rows(batch * seq_len) * cfg.d_model * int64_t{sizeof(float)};
}

}  // namespace

MemBytes ActivationOffload::device_bytes(const ModelConfig& cfg, const ModelShard& shard,
                                         LayerRange range, const RecomputePolicy& recompute,
                                         int64_t batch, int64_t seq_len, DType precision) {
  const int64_t layers = range.size(), window = std::min(kWindow, layers);
  const MemBytes slot = layer_bytes(cfg, shard, slot_mode(range, recompute),
                                    MemCategory::activations, batch, seq_len, precision);
  const int64_t output = block_output_bytes(cfg, shard, batch, seq_len);
  MemBytes out{};
  for (int c = 0; c < kNumMemCategories; ++c) out[c] = window * slot[c];
  out[static_cast<int>(MemCategory::activations)] += (layers - window) * output;
  return out;
}

ActivationOffload::ActivationOffload(const ModelConfig& cfg, const ModelShard& shard,
                                     LayerRange range, const RecomputePolicy& recompute,
                                     Arena& arena, Backend& backend, int64_t batch, int64_t seq_len,
                                     DType precision)
    : layers_(range.size()),
      window_(std::min(kWindow, range.size())),
      offloaded_(std::max<int64_t>(0, range.size() - kWindow)),
      host_memory_(backend),
      host_arena_(&host_memory_) {
  const Recompute mode = slot_mode(range, recompute);
  // The slots, less their block outputs: every layer has its own (resident) one.
  std::vector<std::vector<LayerBlock>> slot_blocks(static_cast<size_t>(window_));
  std::vector<LayerActivations> slots;
  for (int64_t s = 0; s < window_; ++s) {
    slots.push_back(allocate_layer_blocks(cfg, shard, mode, arena, MemCategory::activations, batch,
                                          seq_len, precision, slot_blocks[static_cast<size_t>(s)]));
    arena.release(slots.back().resid_out);
  }
  for (int64_t local = 0; local < layers_; ++local) {
    LayerActivations v = slots[static_cast<size_t>(local % window_)];
    v.resid_out = arena.alloc<float>(
        MemCategory::activations,
        block_output_bytes(cfg, shard, batch, seq_len) / int64_t{sizeof(float)}, kBlockOutput);
    // A selective layer in a slot laid out for "none" keeps no probabilities of its own: backward
    // recomputes them into the shared buffer (Decoder::layer_view).
    if (recompute.for_layer(local) != Recompute::none) v.probs = nullptr;
    views_.push_back(v);
  }
  // Host buffers of the offloaded layers, paired with their slot's buffers by name.
  for (int64_t local = 0; local < offloaded_; ++local) {
    std::vector<LayerBlock> host_blocks;
    const LayerActivations h =
        allocate_layer_blocks(cfg, shard, recompute.for_layer(local), host_arena_,
                              MemCategory::activations, batch, seq_len, precision, host_blocks);
    host_arena_.release(h.resid_out);
    std::vector<Copy> copies;
    for (const LayerBlock& hb : host_blocks) {
      if (std::strcmp(hb.what, kBlockOutput) == 0) continue;
      const std::vector<LayerBlock>& sb = slot_blocks[static_cast<size_t>(local % window_)];
      const auto it = std::find_if(sb.begin(), sb.end(), [&](const LayerBlock& b) {
        return std::strcmp(b.what, hb.what) == 0;
      });
      STRATA_CHECK(it != sb.end() && it->bytes == hb.bytes, "activation offload: the slot has no ",
                   hb.bytes, "-byte '", hb.what, "' buffer for layer ", range.begin + local);
      copies.push_back({it->ptr, hb.ptr, hb.bytes});
      bytes_per_pass_ += static_cast<int64_t>(hb.bytes);
    }
    copies_.push_back(std::move(copies));
  }
  download_.assign(static_cast<size_t>(layers_), 0);
  upload_.assign(static_cast<size_t>(layers_), 0);
  slot_holds_.assign(static_cast<size_t>(window_), -1);
  queue_ = backend.make_copy_queue();
}

ActivationOffload::~ActivationOffload() = default;  // the queue waits for its copies

void ActivationOffload::before_forward(int64_t local) {
  // The slot's previous layer may still be downloading: compute must not overwrite it yet.
  if (local >= window_) queue_->compute_waits_for(download_[static_cast<size_t>(local - window_)]);
}

void ActivationOffload::after_forward(int64_t local, bool saving) {
  const auto i = static_cast<size_t>(local);
  slot_holds_[static_cast<size_t>(local % window_)] = local;
  download_[i] = 0;
  upload_[i] = 0;
  if (!saving || local >= offloaded_) return;
  const TraceSpan span("activation download", "copy", local);
  for (const Copy& c : copies_[i]) download_[i] = queue_->download(c.host, c.device, c.bytes);
}

void ActivationOffload::upload(int64_t local) {
  STRATA_CHECK(local < offloaded_, "activation offload: layer ", local,
               " is not in its slot and was never offloaded (backward without its forward?)");
  const TraceSpan span("activation upload", "copy", local);
  const auto i = static_cast<size_t>(local);
  // Queued after the compute so far (the backward of the slot's previous layer); the host
  // buffers are complete: the forward of layer local + kWindow waited for their download.
  for (const Copy& c : copies_[i]) upload_[i] = queue_->upload(c.device, c.host, c.bytes);
  slot_holds_[static_cast<size_t>(local % window_)] = local;
}

void ActivationOffload::before_backward(int64_t local) {
  if (slot_holds_[static_cast<size_t>(local % window_)] != local) upload(local);
  queue_->compute_waits_for(upload_[static_cast<size_t>(local)]);
  // Prefetch: the layer below comes back while this one's backward runs.
  const int64_t below = local - 1;
  if (below >= 0 && slot_holds_[static_cast<size_t>(below % window_)] != below) upload(below);
}

}  // namespace strata
