// RMSNorm: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) (Llama's, no mean subtraction).
// Same structure as layernorm.cc: rows in parallel for the forward and for dx; dw by column
// slices over blocks of rows so the summation order of every column is fixed.
// Compiled once per kernel level (Highway's foreach_target.h); kernels.h's functions dispatch.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/rmsnorm.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/vec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace strata::kernels::HWY_NAMESPACE {

void RmsNormForward(float* y, float* rstd, const float* x, const float* w, int64_t n, int64_t c,
                    float eps) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* HWY_RESTRICT xr = x + i * c;
    float* HWY_RESTRICT yr = y + i * c;
    const float rs = 1.0f / std::sqrt(RowSumSquaredDiff(d, xr, c, 0.0f) / float(c) + eps);
    const VF rsv = hn::Set(d, rs);
    for (int64_t j = 0; j < c; j += N) {
      const size_t left = size_t(c - j);
      StoreN(hn::Mul(hn::Mul(LoadN(d, xr + j, left), rsv), LoadN(d, w + j, left)), d, yr + j, left);
    }
    rstd[i] = rs;
  }
}

void RmsNormBackward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                     const float* rstd, int64_t n, int64_t c) {
  constexpr int64_t kRows = 64;
  constexpr int64_t kCols = 64;
  const int64_t col_blocks = (c + kCols - 1) / kCols;
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
#pragma omp parallel
  for (int64_t r0 = 0; r0 < n; r0 += kRows) {
    const int64_t r1 = std::min(n, r0 + kRows);
    // dx += rstd * (g - xhat * mean(g * xhat)), g = dy * w, xhat = x * rstd.
#pragma omp for schedule(static)
    for (int64_t i = r0; i < r1; ++i) {
      const float* HWY_RESTRICT dyr = dy + i * c;
      const float* HWY_RESTRICT xr = x + i * c;
      float* HWY_RESTRICT dxr = dx + i * c;
      const float rs = rstd[i];
      VF sum_gx = hn::Zero(d);
      for (int64_t j = 0; j < c; j += N) {
        const size_t left = size_t(c - j);
        const VF g = hn::Mul(LoadN(d, dyr + j, left), LoadN(d, w + j, left));
        sum_gx = hn::MulAdd(g, LoadN(d, xr + j, left), sum_gx);
      }
      const VF k = hn::Set(d, ReduceSum(d, sum_gx) * rs * rs / float(c));  // mean(g xhat) rstd
      const VF rsv = hn::Set(d, rs);
      for (int64_t j = 0; j < c; j += N) {
        const size_t left = size_t(c - j);
        const VF g = hn::Mul(LoadN(d, dyr + j, left), LoadN(d, w + j, left));
        const VF t = hn::NegMulAdd(LoadN(d, xr + j, left), k, g);
        StoreN(hn::MulAdd(rsv, t, LoadN(d, dxr + j, left)), d, dxr + j, left);
      }
    }
#pragma omp for schedule(static)
    for (int64_t cb = 0; cb < col_blocks; ++cb) {
      const int64_t j0 = cb * kCols, width = std::min(kCols, c - j0);
      for (int64_t j = 0; j < width; j += N) {
        const size_t left = size_t(width - j);
        VF dwv = LoadN(d, dw + j0 + j, left);
        for (int64_t i = r0; i < r1; ++i) {
          const VF xhat = hn::Mul(LoadN(d, x + i * c + j0 + j, left), hn::Set(d, rstd[i]));
          dwv = hn::MulAdd(LoadN(d, dy + i * c + j0 + j, left), xhat, dwv);
        }
        StoreN(dwv, d, dw + j0 + j, left);
      }
    }
  }
}

}  // namespace strata::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/kernels.h"

namespace strata::kernels {

HWY_EXPORT(RmsNormForward);
HWY_EXPORT(RmsNormBackward);

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t n, int64_t c,
                     float eps) {
  STRATA_DISPATCH(RmsNormForward)(y, rstd, x, w, n, c, eps);
}

void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int64_t n, int64_t c) {
  STRATA_DISPATCH(RmsNormBackward)(dx, dw, dy, x, w, rstd, n, c);
}

}  // namespace strata::kernels
#endif  // HWY_ONCE
