// Every CUDA runtime, cuBLAS(Lt) and NCCL call goes through one of these checks: a failure throws
// strata::Error naming the call as written, where it was made, and the library's own message,
// e.g. "CUDA error at kernels/cuda/gemm.cc:88: cudaMalloc(&ptr, bytes) failed:
// out of memory (cudaErrorMemoryAllocation)".
#pragma once
#include <cuda_runtime.h>

#include "core/error.h"

namespace strata::cuda {

[[noreturn]] inline void fail_cuda(cudaError_t err, const char* call, const char* file, int line) {
  fail("CUDA error at ", file, ":", line, ": ", call, " failed: ", cudaGetErrorString(err), " (",
       cudaGetErrorName(err), ")");
}

}  // namespace strata::cuda

#define STRATA_CUDA_CHECK(call)                                               \
  do {                                                                        \
    const cudaError_t strata_cuda_err_ = (call);                              \
    if (strata_cuda_err_ != cudaSuccess)                                      \
      ::strata::cuda::fail_cuda(strata_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface at once (execution errors surface
// at the next synchronising call, which is checked too).
#define STRATA_CUDA_CHECK_LAUNCH() STRATA_CUDA_CHECK(cudaGetLastError())
