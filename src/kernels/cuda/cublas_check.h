// Every cuBLAS / cuBLASLt call goes through STRATA_CUBLAS_CHECK: a failure throws strata::Error
// naming the call as written, where it was made, and cuBLAS's status name and text, e.g.
// "cuBLAS error at kernels/cuda/gemm.cc:120: cublasLtMatmul(...) failed:
// CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not supported)".
#pragma once
#include <cublasLt.h>

#include "core/error.h"

namespace strata::cuda {

[[noreturn]] inline void fail_cublas(cublasStatus_t status, const char* call, const char* file,
                                     int line) {
  fail("cuBLAS error at ", file, ":", line, ": ", call, " failed: ", cublasLtGetStatusName(status),
       " (", cublasLtGetStatusString(status), ")");
}

}  // namespace strata::cuda

#define STRATA_CUBLAS_CHECK(call)                                                    \
  do {                                                                               \
    const cublasStatus_t strata_cublas_status_ = (call);                             \
    if (strata_cublas_status_ != CUBLAS_STATUS_SUCCESS)                              \
      ::strata::cuda::fail_cublas(strata_cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)
