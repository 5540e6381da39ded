// RMSNorm: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) (Llama's, no mean subtraction).
// Same structure as layernorm.cc: rows in parallel for the forward and for dx; dw by column
// slices over blocks of rows so the summation order of every column is fixed.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/kernels.h"

namespace strata::kernels {

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t n, int64_t c,
                     float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* __restrict xr = x + i * c;
    float* __restrict yr = y + i * c;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < c; ++j) ss += xr[j] * xr[j];
    const float rs = 1.0f / std::sqrt(ss / float(c) + eps);
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) yr[j] = xr[j] * rs * w[j];
    rstd[i] = rs;
  }
}

void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int64_t n, int64_t c) {
  constexpr int64_t kRows = 64;
  constexpr int64_t kCols = 64;
  const int64_t col_blocks = (c + kCols - 1) / kCols;
#pragma omp parallel
  for (int64_t r0 = 0; r0 < n; r0 += kRows) {
    const int64_t r1 = std::min(n, r0 + kRows);
    // dx += rstd * (g - xhat * mean(g * xhat)), g = dy * w, xhat = x * rstd.
#pragma omp for schedule(static)
    for (int64_t i = r0; i < r1; ++i) {
      const float* __restrict dyr = dy + i * c;
      const float* __restrict xr = x + i * c;
      float* __restrict dxr = dx + i * c;
      const float rs = rstd[i];
      float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
      for (int64_t j = 0; j < c; ++j) sum_gx += dyr[j] * w[j] * xr[j];
      const float k = sum_gx * rs * rs / float(c);  // mean(g * xhat) * rstd
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) dxr[j] += rs * (dyr[j] * w[j] - xr[j] * k);
    }
#pragma omp for schedule(static)
    for (int64_t cb = 0; cb < col_blocks; ++cb) {
      const int64_t j0 = cb * kCols, width = std::min(kCols, c - j0);
      float* __restrict dwr = dw + j0;
      for (int64_t i = r0; i < r1; ++i) {
        const float* __restrict dyr = dy + i * c + j0;
        const float* __restrict xr = x + i * c + j0;
        const float rs = rstd[i];
#pragma omp simd
        for (int64_t j = 0; j < width; ++j) dwr[j] += dyr[j] * (xr[j] * rs);
      }
    }
  }
}

}  // namespace strata::kernels
