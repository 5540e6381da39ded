#include "optim/host_offload.h"

#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "core/error.h"
#include "core/trace.h"
#include "kernels/cpu/kernels.h"

namespace strata {

namespace {
size_t float_bytes(int64_t count) {
  return static_cast<size_t>(count) * sizeof(float);
}
}  // namespace

HostOffloadAdamW::HostOffloadAdamW(std::vector<OptimSegment> segments, int64_t state_size,
                                   const OptimConfig& config, Backend& backend,
                                   const HostOffloadOptions& options)
    : segments_(std::move(segments)),
      state_size_(state_size),
      config_(config),
      backend_(backend),
      host_memory_(backend),
      host_arena_(&host_memory_) {
  STRATA_CHECK(options.chunk_elements > 0, "optimizer offload (cpu): chunk_elements is ",
               options.chunk_elements, "; it must be at least 1");
  STRATA_CHECK(state_size_ >= 0, "optimizer offload (cpu): negative state size ", state_size_);
  sort_and_check_segments(segments_, state_size_, "optimizer offload (cpu)");
  // A chunk larger than the state would only make the first wait longer.
  chunk_elements_ = std::max<int64_t>(1, std::min(options.chunk_elements, state_size_));
  num_chunks_ = (state_size_ + chunk_elements_ - 1) / chunk_elements_;

  master_ = host_arena_.alloc<float>(MemCategory::master, state_size_, "host master weights");
  m_ = host_arena_.alloc<float>(MemCategory::optimizer, state_size_, "host adam first moment");
  v_ = host_arena_.alloc<float>(MemCategory::optimizer, state_size_, "host adam second moment");
  grad_ = host_arena_.alloc<float>(MemCategory::grads, state_size_, "host gradients");
  const bool any_bf16 = std::any_of(segments_.begin(), segments_.end(),
                                    [](const OptimSegment& s) { return s.param_bf16 != nullptr; });
  if (any_bf16)
    bf16_ = host_arena_.alloc<uint16_t>(MemCategory::params, state_size_,
                                        "host bf16 parameters (upload staging)");
  queue_ = backend_.make_copy_queue();

  const auto chunks = static_cast<size_t>(num_chunks_);
  payload_.assign(chunks, 0);
  downloaded_.assign(chunks, 0);
  download_ticket_.assign(chunks, 0);
  upload_ticket_.assign(chunks, 0);
  size_t cursor = 0;
  for (int64_t k = 0; k < num_chunks_; ++k)
    for_each_overlap(segments_, chunk_begin(k), chunk_end(k), cursor,
                     [&](const OptimSegment&, int64_t lo, int64_t hi) {
                       payload_[static_cast<size_t>(k)] += hi - lo;
                     });
  // The master weights start as the params (padding between segments stays zero, like AdamW's
  // moments there).
  CopyTicket last = 0;
  for (const OptimSegment& s : segments_)
    if (s.count > 0)
      last = queue_->download(master_ + s.state_offset, s.param, float_bytes(s.count));
  queue_->wait_host(last);
}

HostOffloadAdamW::~HostOffloadAdamW() = default;  // the queue waits for its copies

void HostOffloadAdamW::download_range(int64_t chunk, int64_t begin, int64_t end) {
  size_t cursor = 0;
  CopyTicket ticket = 0;
  int64_t elements = 0;
  for_each_overlap(
      segments_, begin, end, cursor, [&](const OptimSegment& s, int64_t lo, int64_t hi) {
        ticket = queue_->download(grad_ + lo, s.grad + (lo - s.state_offset), float_bytes(hi - lo));
        elements += hi - lo;
      });
  if (ticket == 0) return;
  // Downloads complete in order: the latest ticket covers every earlier piece of the chunk.
  download_ticket_[static_cast<size_t>(chunk)] = ticket;
  downloaded_[static_cast<size_t>(chunk)] += elements;
  last_download_ = ticket;
  step_download_bytes_ += static_cast<int64_t>(float_bytes(elements));
}

void HostOffloadAdamW::download_grads(int64_t begin, int64_t end) {
  begin = std::max<int64_t>(begin, 0);
  end = std::min(end, state_size_);
  if (begin >= end) return;
  const TraceSpan span("offload grads download", "copy");
  for (int64_t k = begin / chunk_elements_; k < num_chunks_ && chunk_begin(k) < end; ++k)
    download_range(k, std::max(begin, chunk_begin(k)), std::min(end, chunk_end(k)));
}

void HostOffloadAdamW::discard_gradients() {
  // The copies still in flight write the host gradient buffer, which the next step's downloads
  // overwrite in queue order; only the bookkeeping must start over.
  std::fill(downloaded_.begin(), downloaded_.end(), 0);
  step_download_bytes_ = 0;
}

void HostOffloadAdamW::wait(CopyTicket ticket) {
  const auto start = Clock::now();
  queue_->wait_host(ticket);
  wait_s_ += seconds_since(start);
}

void HostOffloadAdamW::update_chunk(int64_t chunk, size_t& cursor, float lr, float grad_scale) {
  for_each_overlap(segments_, chunk_begin(chunk), chunk_end(chunk), cursor,
                   [&](const OptimSegment& s, int64_t lo, int64_t hi) {
                     const float wd = s.weight_decay ? config_.weight_decay : 0.0f;
                     uint16_t* bf16 = s.param_bf16 ? bf16_ + lo : nullptr;
                     kernels::adamw_update(master_ + lo, grad_ + lo, m_ + lo, v_ + lo, hi - lo, lr,
                                           config_.beta1, config_.beta2, config_.eps, wd,
                                           grad_scale, step_, bf16);
                   });
}

void HostOffloadAdamW::upload_chunk(int64_t chunk, size_t& cursor) {
  CopyTicket ticket = 0;
  int64_t bytes = 0;
  for_each_overlap(segments_, chunk_begin(chunk), chunk_end(chunk), cursor,
                   [&](const OptimSegment& s, int64_t lo, int64_t hi) {
                     const int64_t at = lo - s.state_offset;
                     ticket = queue_->upload(s.param + at, master_ + lo, float_bytes(hi - lo));
                     bytes += static_cast<int64_t>(float_bytes(hi - lo));
                     if (s.param_bf16) {
                       const size_t half = static_cast<size_t>(hi - lo) * sizeof(uint16_t);
                       ticket = queue_->upload(s.param_bf16 + at, bf16_ + lo, half);
                       bytes += static_cast<int64_t>(half);
                     }
                   });
  if (ticket == 0) return;
  upload_ticket_[static_cast<size_t>(chunk)] = ticket;
  last_upload_ = ticket;
  last_upload_bytes_ += bytes;
}

void HostOffloadAdamW::step(float lr, float grad_scale) {
  const TraceSpan span("adamw (host offload)", "optimizer");
  ++step_;
  wait_s_ = 0;
  last_upload_bytes_ = 0;
  // Gradients not downloaded during backward (data parallelism, or no hooks): queue every chunk
  // now, in order, so that chunk k+1 is in flight while chunk k updates.
  for (int64_t k = 0; k < num_chunks_; ++k) {
    const auto i = static_cast<size_t>(k);
    if (downloaded_[i] < payload_[i]) {
      downloaded_[i] = 0;  // a partly downloaded chunk is downloaded again whole
      download_range(k, chunk_begin(k), chunk_end(k));
    }
  }
  size_t update_cursor = 0, upload_cursor = 0;
  for (int64_t k = 0; k < num_chunks_; ++k) {
    const auto i = static_cast<size_t>(k);
    if (payload_[i] == 0) continue;
    wait(download_ticket_[i]);
    // The previous step's upload of this chunk reads the master values about to change.
    wait(upload_ticket_[i]);
    update_chunk(k, update_cursor, lr, grad_scale);
    upload_chunk(k, upload_cursor);
  }
  // Uploads complete in order: the next forward waits for the last one, on the device.
  queue_->compute_waits_for(last_upload_);
  last_copy_wait_s_ = wait_s_;
  last_download_bytes_ = step_download_bytes_;
  discard_gradients();  // consumed
}

void HostOffloadAdamW::settle() {
  queue_->wait_host(last_download_);
  queue_->wait_host(last_upload_);
}

void HostOffloadAdamW::read_state(float* master, float* exp_avg, float* exp_avg_sq) const {
  // step() updates the host state synchronously: it is current whatever is still uploading.
  std::memcpy(master, master_, float_bytes(state_size_));
  std::memcpy(exp_avg, m_, float_bytes(state_size_));
  std::memcpy(exp_avg_sq, v_, float_bytes(state_size_));
}

void HostOffloadAdamW::write_state(const float* master, const float* exp_avg,
                                   const float* exp_avg_sq) {
  settle();  // no copy may still read or write the buffers replaced here
  std::memcpy(master_, master, float_bytes(state_size_));
  std::memcpy(m_, exp_avg, float_bytes(state_size_));
  std::memcpy(v_, exp_avg_sq, float_bytes(state_size_));
  // The params become the master values; the bf16 copies are the model's to refresh (the caller
  // bumps the parameter version, as after any load).
  CopyTicket last = 0;
  for (const OptimSegment& s : segments_)
    if (s.count > 0) last = queue_->upload(s.param, master_ + s.state_offset, float_bytes(s.count));
  queue_->wait_host(last);
  queue_->compute_waits_for(last);
  discard_gradients();
}

HostOffloadGradHooks::HostOffloadGradHooks(const ParamStore& params, HostOffloadAdamW& optimizer)
    : params_(params), optimizer_(optimizer) {
  STRATA_CHECK(params.grads() != nullptr && optimizer.state_size() == params.size(),
               "HostOffloadGradHooks: the optimizer's state (", optimizer.state_size(),
               " elements) is not the flat layout of the parameters (", params.size(),
               "); the hooks serve one process whose optimizer has segments_for_all(params)");
}

void HostOffloadGradHooks::end_grads(int group) {
  if (!last_) return;  // later micro-batches still accumulate into these gradients
  const int64_t begin = params_.group_offset(group);
  optimizer_.download_grads(begin, begin + params_.group_size(group));
}

}  // namespace strata
