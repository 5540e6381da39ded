// The GEMM backends gemm() can dispatch to, exposed so that bench/bench_gemm.cc can measure each
// of them on the training shapes. Model code calls kernels::gemm(), never these.
#pragma once
#include <cstdint>

namespace strata::kernels::detail {

// oneDNN's BLAS-like row-major dnnl_sgemm.
void gemm_dnnl_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                     int64_t ldc);
// oneDNN matmul primitive on strided plain-layout views, primitives cached by shape, strides,
// transposes, alpha and beta.
void gemm_dnnl_matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                      float* c, int64_t ldc);

}  // namespace strata::kernels::detail
