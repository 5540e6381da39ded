// The CUDA backend: kernels/cuda behind the Backend interface (kernels/backend.h), so that the
// model runs on a GPU by naming the device in its config, not by a second model.
//
// Ordering: every call enqueues its work on one compute stream the backend owns (non-blocking:
// it does not wait for the legacy default stream). Work on other streams (NCCL, see
// comm/nccl/nccl_comm.h set_compute_stream) orders itself after this one through stream().
// Calls that return a value (the loss sums, sum_squares), copy_to_host and copy_from_host wait for
// the stream; everything else returns without waiting.
// make_copy_queue's copies run on two streams of their own beside the compute stream
// (kernels/cuda/copy_queue.h); alloc_host is cudaHostAlloc'd (page-locked) memory.
//
// Memory: memory() hands out zero-filled cudaMalloc'd blocks for an Arena (at start-up: cudaMalloc
// and the zero fill synchronise). Internal scratch (the norm backwards' partial sums, the
// reductions' results) is grow-only and owned by the backend: the first call of a larger shape
// allocates (and so synchronises), which belongs in the warm-up step; later calls allocate
// nothing. An Arena on memory() must be destroyed before its backend.
//
// Threads and devices: one host thread at a time per backend (the GEMM plan cache and the scratch
// are not locked). The constructor makes `device` the calling thread's current device; calls must
// come from a thread whose current device it is (one GPU per process, as the launcher maps them).
//
// Numerics: f32 GEMMs on FP32 arithmetic (no TF32), so results agree with the CPU's to ~1e-5;
// bf16 and f16 GEMMs on tensor cores with f32 accumulation. Naive attention does not exist here
// (supports_naive_attention() is false and its methods throw): the model uses flash attention,
// head dims 64 and 128. A target >= v in a cross-entropy gives a NaN loss instead of the CPU's
// error (checking it would cost a copy of the targets to the host).
#pragma once
#include <cuda_runtime.h>

#include <memory>

#include "kernels/backend.h"

namespace strata {

// The CUDA-specific face of a CUDA backend, for code that must order other streams after it
// (dynamic_cast a Backend& whose kind() is Device::cuda, or use CudaBackend::of).
class CudaBackend : public Backend {
 public:
  Device kind() const final { return Device::cuda; }
  virtual int device() const = 0;
  // The compute stream every kernel of this backend runs on.
  virtual cudaStream_t stream() const = 0;
  // `backend` as a CudaBackend, or null when it is another kind.
  static CudaBackend* of(Backend& backend) { return dynamic_cast<CudaBackend*>(&backend); }
};

// A backend on GPU `device` (0-based among the visible ones). Throws strata::Error when there is no
// such device, naming how many this process sees and why (no driver, CUDA_VISIBLE_DEVICES, ...).
std::unique_ptr<Backend> make_cuda_backend(int device);

}  // namespace strata
