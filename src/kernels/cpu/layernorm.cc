// LayerNorm over the channels of each row (biased variance, eps inside the sqrt).
// Forward: rows in parallel; mean and variance in two passes over the row (it sits in L1), which
// is as cheap as one and avoids E[x^2] - E[x]^2 cancellation.
// Backward: dx needs whole-row reductions (parallel over rows), while dw and dbias are sums over
// rows (parallel over columns, so that each column's summation order is fixed). Both phases run
// on blocks of rows, so the second phase finds the block's dy and x still in cache.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/kernels.h"

namespace strata::kernels {

void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w,
                       const float* bias, int64_t n, int64_t c, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* __restrict xr = x + i * c;
    float* __restrict yr = y + i * c;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < c; ++j) sum += xr[j];
    const float mu = sum / float(c);
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int64_t j = 0; j < c; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    const float rs = 1.0f / std::sqrt(var / float(c) + eps);
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) yr[j] = (xr[j] - mu) * rs * w[j] + bias[j];
    mean[i] = mu;
    rstd[i] = rs;
  }
}

void layernorm_backward(float* dx, float* dw, float* dbias, const float* dy, const float* x,
                        const float* w, const float* mean, const float* rstd, int64_t n,
                        int64_t c) {
  constexpr int64_t kRows = 64;  // 64 rows x 768 ch x 2 tensors x 4 B = 384 KiB: fits in L2
  constexpr int64_t kCols = 64;  // column slice of the dw/dbias phase
  const int64_t col_blocks = (c + kCols - 1) / kCols;
#pragma omp parallel
  for (int64_t r0 = 0; r0 < n; r0 += kRows) {
    const int64_t r1 = std::min(n, r0 + kRows);
    // Phase 1: dx += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.
#pragma omp for schedule(static)
    for (int64_t i = r0; i < r1; ++i) {
      const float* __restrict dyr = dy + i * c;
      const float* __restrict xr = x + i * c;
      float* __restrict dxr = dx + i * c;
      const float mu = mean[i], rs = rstd[i];
      float sum_g = 0.0f, sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
      for (int64_t j = 0; j < c; ++j) {
        const float g = dyr[j] * w[j];
        sum_g += g;
        sum_gx += g * (xr[j] - mu) * rs;
      }
      const float mean_g = sum_g / float(c), mean_gx = sum_gx / float(c);
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) {
        const float xhat = (xr[j] - mu) * rs;
        dxr[j] += rs * (dyr[j] * w[j] - mean_g - xhat * mean_gx);
      }
    }  // implicit barrier: phase 2 may run on another thread's rows
       // Phase 2: dw += dy * xhat, dbias += dy, column slices, rows in order.
#pragma omp for schedule(static)
    for (int64_t cb = 0; cb < col_blocks; ++cb) {
      const int64_t j0 = cb * kCols, width = std::min(kCols, c - j0);
      float* __restrict dwr = dw + j0;
      float* __restrict dbr = dbias + j0;
      for (int64_t i = r0; i < r1; ++i) {
        const float* __restrict dyr = dy + i * c + j0;
        const float* __restrict xr = x + i * c + j0;
        const float mu = mean[i], rs = rstd[i];
#pragma omp simd
        for (int64_t j = 0; j < width; ++j) {
          dwr[j] += dyr[j] * ((xr[j] - mu) * rs);
          dbr[j] += dyr[j];
        }
      }
    }  // implicit barrier before the next block
  }
}

}  // namespace strata::kernels
