// ZeRO-Offload (Ren et al. 2021): AdamW whose f32 master weights and both Adam moments live in
// host memory, and whose update runs on the host (the vectorised, OpenMP-parallel CPU AdamW
// kernel), so that a GPU keeps only the parameters, the gradients and the 16-bit working copy: the
// optimizer state (12 bytes per parameter) leaves the device.
//
// Each step streams the state in chunks (state layout, chunk_elements each) through the backend's
// CopyQueue: the gradients of chunk k+1 download while the host updates chunk k, while the new
// parameters of chunk k-1 upload. The downloads can start earlier still: with one process,
// HostOffloadGradHooks starts each parameter group's download as soon as backward has finished
// its gradients on the last micro-batch, so that most of the transfer hides behind the rest of
// backward. The next forward waits (on the device, not the host) for the uploads.
//
// On the CPU backend every copy is a memcpy that has finished when it returns: the same code
// runs, the overlap does not.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "kernels/backend.h"
#include "kernels/host_memory.h"
#include "model/group_hooks.h"
#include "model/params.h"
#include "optim/state_offload.h"

namespace strata {

struct HostOffloadOptions {
  int64_t chunk_elements = int64_t{1} << 20;  // state elements per streamed chunk
};

// The segments' param, grad and param_bf16 pointers are device pointers of `backend`; the host
// state (master, both moments, a gradient buffer and, when a segment has a bf16 copy, the rounded
// parameters) is page-locked host memory of that backend, accounted in host_arena() (categories
// master, optimizer, grads and params), not in the model's arena. The master values start as the
// segments' params (read at construction: initialise the params first).
class HostOffloadAdamW final : public OffloadedOptimizer {
 public:
  HostOffloadAdamW(std::vector<OptimSegment> segments, int64_t state_size,
                   const OptimConfig& config, Backend& backend,
                   const HostOffloadOptions& options = {});
  ~HostOffloadAdamW() override;  // waits for the copies in flight
  HostOffloadAdamW(const HostOffloadAdamW&) = delete;
  HostOffloadAdamW& operator=(const HostOffloadAdamW&) = delete;

  // Starts downloading the gradients of state elements [begin, end): call when they are final
  // for this step (after the last micro-batch's backward has finished them, or after the
  // data-parallel reduction). step() downloads whatever was not started this way.
  void download_grads(int64_t begin, int64_t end);
  // Forgets the downloads of a step whose update is skipped (fp16 overflow, a non-finite or
  // spiking loss), so that the next step downloads its own gradients.
  void discard_gradients() override;

  // One AdamW update, bitwise equal to AdamW::step on the same inputs (the CPU backend's kernel,
  // applied element-wise to the same values: the master equals the param it was refreshed into).
  // Returns once the host update is done; the uploads of the new params may still be in flight,
  // and compute queued on the backend afterwards waits for them. Allocates nothing.
  void step(float lr, float grad_scale) override;

  int64_t steps_taken() const override { return step_; }
  void set_steps_taken(int64_t step) override { step_ = step; }
  int64_t state_size() const override { return state_size_; }
  void read_state(float* master, float* exp_avg, float* exp_avg_sq) const override;
  void write_state(const float* master, const float* exp_avg, const float* exp_avg_sq) override;

  // Host memory held (per category): the state that left the device.
  const Arena& host_arena() const { return host_arena_; }
  int64_t num_chunks() const { return num_chunks_; }
  // Seconds the last step's host thread waited for copies (the transfer time not hidden), and
  // the bytes it moved each way.
  double last_copy_wait_s() const { return last_copy_wait_s_; }
  int64_t last_download_bytes() const { return last_download_bytes_; }
  int64_t last_upload_bytes() const { return last_upload_bytes_; }

 private:
  int64_t chunk_begin(int64_t chunk) const { return chunk * chunk_elements_; }
  int64_t chunk_end(int64_t chunk) const {
    return std::min(state_size_, chunk_begin(chunk) + chunk_elements_);
  }
  // Downloads the gradients of chunk elements [begin, end) (inside one chunk).
  void download_range(int64_t chunk, int64_t begin, int64_t end);
  void wait(CopyTicket ticket);  // wait_host, timed
  void update_chunk(int64_t chunk, size_t& cursor, float lr, float grad_scale);
  void upload_chunk(int64_t chunk, size_t& cursor);
  void settle();  // waits for every copy in flight

  std::vector<OptimSegment> segments_;  // sorted by state_offset
  int64_t state_size_;
  OptimConfig config_;
  Backend& backend_;
  int64_t chunk_elements_ = 1, num_chunks_ = 0;
  int64_t step_ = 0;
  // Declaration order is destruction order reversed: the queue (which waits for its copies)
  // goes before the host buffers it copies.
  HostMemory host_memory_;
  Arena host_arena_;
  std::unique_ptr<CopyQueue> queue_;
  float* master_ = nullptr;
  float* m_ = nullptr;
  float* v_ = nullptr;
  float* grad_ = nullptr;            // downloaded gradients (state layout)
  uint16_t* bf16_ = nullptr;         // rounded new params for the bf16 copies (null: none has one)
  std::vector<int64_t> payload_;     // per chunk: segment elements in it
  std::vector<int64_t> downloaded_;  // per chunk: elements downloaded for this step
  std::vector<CopyTicket> download_ticket_, upload_ticket_;  // per chunk: the latest
  CopyTicket last_download_ = 0, last_upload_ = 0;
  double wait_s_ = 0, last_copy_wait_s_ = 0;
  int64_t last_download_bytes_ = 0, last_upload_bytes_ = 0, step_download_bytes_ = 0;
};

// One process (no data parallelism): starts each parameter group's gradient download as soon as
// backward has finished the group on the last micro-batch of the step (backward finishes groups in
// the flat layout's order, head first, which is the state layout of segments_for_all). The
// optimizer's segments must be segments_for_all(params). Install with Decoder::set_hooks; with
// data parallelism the DataParallel hooks are installed instead and step() downloads after the
// reduction.
class HostOffloadGradHooks final : public GroupHooks {
 public:
  HostOffloadGradHooks(const ParamStore& params, HostOffloadAdamW& optimizer);
  // Whether the micro-batch about to run is the step's last (its gradients are then final).
  void begin_micro_batch(bool last) { last_ = last; }
  void end_grads(int group) override;

 private:
  const ParamStore& params_;
  HostOffloadAdamW& optimizer_;
  bool last_ = true;
};

}  // namespace strata
