#include "kernels/cuda/copy_queue.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device.h"

namespace strata::cuda {

namespace {

// Tickets keep their completion event in a ring. A ticket's slot is reused kRing copies later,
// and only after that ticket has been waited for on the host: a ticket no longer in the ring has
// therefore completed, so the ring needs no growth and the step loop allocates nothing. 256 is
// far more than any offload keeps in flight (a few copies per layer or chunk), so the retiring
// wait practically never blocks.
constexpr size_t kRing = 256;

class CudaCopyQueue final : public CopyQueue {
 public:
  explicit CudaCopyQueue(cudaStream_t compute) : compute_(compute) {
    for (auto& e : done_) e = std::make_unique<Event>();
  }
  ~CudaCopyQueue() override {
    // The host buffers of copies still in flight may be freed right after the queue.
    cudaStreamSynchronize(down_.get());
    cudaStreamSynchronize(up_.get());
  }
  CudaCopyQueue(const CudaCopyQueue&) = delete;
  CudaCopyQueue& operator=(const CudaCopyQueue&) = delete;

  CopyTicket download(void* host, const void* device, size_t bytes) override {
    return enqueue(down_.get(), host, device, bytes, cudaMemcpyDeviceToHost);
  }
  CopyTicket upload(void* device, const void* host, size_t bytes) override {
    return enqueue(up_.get(), device, host, bytes, cudaMemcpyHostToDevice);
  }
  void wait_host(CopyTicket ticket) override {
    if (Event* e = pending(ticket)) e->synchronize();
  }
  void compute_waits_for(CopyTicket ticket) override {
    if (Event* e = pending(ticket)) e->wait_on(compute_);
  }

 private:
  CopyTicket enqueue(cudaStream_t stream, void* dst, const void* src, size_t bytes,
                     cudaMemcpyKind kind) {
    // The copy starts after the compute work queued so far (cudaStreamWaitEvent takes the
    // event's latest record, so one event serves every copy).
    compute_mark_.record(compute_);
    compute_mark_.wait_on(stream);
    if (bytes > 0) STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
    const CopyTicket ticket = ++issued_;
    const size_t slot = ticket % kRing;
    if (ticket_[slot] != 0) done_[slot]->synchronize();  // retire the ticket kRing copies back
    done_[slot]->record(stream);
    ticket_[slot] = ticket;
    return ticket;
  }
  // The event of a ticket still in the ring; null for 0 and for tickets retired (completed).
  Event* pending(CopyTicket ticket) {
    STRATA_CHECK(ticket <= issued_, "CopyQueue: ticket ", ticket, " was never issued (", issued_,
                 " so far)");
    if (ticket == 0) return nullptr;
    const size_t slot = ticket % kRing;
    return ticket_[slot] == ticket ? done_[slot].get() : nullptr;
  }

  cudaStream_t compute_;
  Stream down_, up_;
  Event compute_mark_;
  std::array<std::unique_ptr<Event>, kRing> done_;
  std::array<CopyTicket, kRing> ticket_{};
  CopyTicket issued_ = 0;
};

}  // namespace

std::unique_ptr<CopyQueue> make_copy_queue(cudaStream_t compute) {
  return std::make_unique<CudaCopyQueue>(compute);
}

void* alloc_pinned(size_t bytes) {
  const size_t n = std::max<size_t>(bytes, 1);
  void* ptr = nullptr;
  const cudaError_t err = cudaHostAlloc(&ptr, n, cudaHostAllocPortable);
  if (err != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky
    fail("cannot allocate ", n,
         " bytes of page-locked host memory (cudaHostAlloc: ", cudaGetErrorString(err),
         "); the offloads keep their host state there: free host memory, or offload less");
  }
  STRATA_CHECK(reinterpret_cast<uintptr_t>(ptr) % Backend::kHostAlignment == 0,
               "cudaHostAlloc returned memory aligned to less than ", Backend::kHostAlignment,
               " bytes");
  std::memset(ptr, 0, n);
  return ptr;
}

void free_pinned(void* ptr) {
  if (ptr == nullptr) return;
  // Reported, not thrown: owners free from destructors.
  const cudaError_t err = cudaFreeHost(ptr);
  if (err != cudaSuccess)
    std::fprintf(stderr, "strata: cudaFreeHost failed: %s\n", cudaGetErrorString(err));
}

}  // namespace strata::cuda
