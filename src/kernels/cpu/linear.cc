// Linear layer y = x w^T + bias, w stored [out, in] (PyTorch's nn.Linear layout).
// All three products are one gemm each on the stored layouts: the transposes are gemm flags,
// never copies.
#include <omp.h>

#include <algorithm>

#include "kernels/cpu/kernels.h"

namespace strata::kernels {

void linear_forward(float* y, const float* x, const float* w, const float* bias, int64_t n,
                    int64_t in, int64_t out) {
  float beta = 0.0f;
  if (bias) {
    // Fold the bias in by broadcasting it into y and letting gemm accumulate (beta = 1): the
    // extra read of y inside gemm costs far less than a second pass over y after it.
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) std::copy(bias, bias + out, y + i * out);
    beta = 1.0f;
  }
  gemm(false, true, n, out, in, 1.0f, x, in, w, in, beta, y, out);
}

void linear_backward(float* dx, float* dw, float* dbias, const float* dy, const float* x,
                     const float* w, int64_t n, int64_t in, int64_t out) {
  if (dx) gemm(false, false, n, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);  // dx = dy w
  gemm(true, false, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in);           // dw += dy^T x
  if (dbias) column_sum_accumulate(dbias, dy, n, out);
}

}  // namespace strata::kernels
