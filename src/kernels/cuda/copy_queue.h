// The CUDA backend's CopyQueue (kernels/backend.h): host <-> device copies on two non-blocking
// streams of their own (downloads on one, uploads on the other, so that both directions use the
// GPU's two copy engines at once), ordered after the compute stream by an event recorded on it at
// each copy, and completed per copy by an event recorded behind it.
#pragma once
#include <cuda_runtime.h>

#include <memory>

#include "kernels/backend.h"

namespace strata::cuda {

// `compute`: the backend's compute stream; it must outlive the queue.
std::unique_ptr<CopyQueue> make_copy_queue(cudaStream_t compute);

// Page-locked host memory (cudaHostAlloc), zero-filled; throws naming the size when refused.
void* alloc_pinned(size_t bytes);
void free_pinned(void* ptr);

}  // namespace strata::cuda
