// The GEMM backends gemm() can dispatch to, exposed so that bench/bench_gemm.cc can measure each
// of them on the training shapes. Model code calls kernels::gemm(), never these.
#pragma once
#include <cstdint>
#include <string>

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

// Any of these in tiles of C of a fixed size (a function of the shape), one thread per tile: the
// result does not depend on the thread count even where the library's own threading does.
using RawGemm = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                         const float*, int64_t, float, float*, int64_t);
void gemm_tiled(RawGemm raw, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                float* c, int64_t ldc);
// dnnl_sgemm in those tiles (for bench_gemm's comparison against its own threading).
void gemm_dnnl_sgemm_tiled(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                           float* c, int64_t ldc);
// OpenBLAS's cblas_sgemm, tiled as above (gemm_openblas.cc; loaded on first use). Throws
// strata::Error where OpenBLAS is not installed (openblas().why_not).
void gemm_openblas(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc);

// The OpenBLAS library found at run time: its sgemm (null, with why_not, where it is not
// installed), and whether its kernels are fast here (why_slow empty: gemm()'s auto choice may
// take it).
struct OpenBlas {
  // cblas_sgemm(order, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc): blasint is
  // int (Debian's OpenBLAS is LP64), the CBLAS enums ints (RowMajor 101, NoTrans 111, Trans 112).
  void (*sgemm)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                float*, int) = nullptr;
  std::string core;      // openblas_get_corename(), lower case: "haswell", "zen", "neoversen1"
  std::string why_not;   // empty when sgemm is set
  std::string why_slow;  // empty when the core is one of the level's vector width
};
const OpenBlas& openblas();
// The bare call, arguments already checked (gemm_openblas does that).
void openblas_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                    int64_t ldc);

}  // namespace strata::kernels::detail
