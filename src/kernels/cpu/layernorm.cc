// LayerNorm over the channels of each row (biased variance, eps inside the sqrt).
// Forward: rows in parallel; mean and variance in two passes over the row (it sits in L1), which
// is as cheap as one and avoids E[x^2] - E[x]^2 cancellation.
// Backward: dx needs whole-row reductions (parallel over rows), while dw and dbias are sums over
// rows (parallel over columns, so that each column's summation order is fixed). Both phases run
// on blocks of rows, so the second phase finds the block's dy and x still in cache.
// Compiled once per kernel level (Highway's foreach_target.h); kernels.h's functions dispatch.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/layernorm.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/vec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace strata::kernels::HWY_NAMESPACE {

void LayerNormForward(float* y, float* mean, float* rstd, const float* x, const float* w,
                      const float* bias, int64_t n, int64_t c, float eps) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* HWY_RESTRICT xr = x + i * c;
    float* HWY_RESTRICT yr = y + i * c;
    const float mu = RowSum(d, xr, c) / float(c);
    const VF muv = hn::Set(d, mu);
    const float var = RowSumSquaredDiff(d, xr, c, mu);
    const float rs = 1.0f / std::sqrt(var / float(c) + eps);
    const VF rsv = hn::Set(d, rs);
    for (int64_t j = 0; j < c; j += N) {
      const size_t left = size_t(c - j);
      const VF xhat = hn::Mul(hn::Sub(LoadN(d, xr + j, left), muv), rsv);
      StoreN(hn::MulAdd(xhat, LoadN(d, w + j, left), LoadN(d, bias + j, left)), d, yr + j, left);
    }
    mean[i] = mu;
    rstd[i] = rs;
  }
}

void LayerNormBackward(float* dx, float* dw, float* dbias, const float* dy, const float* x,
                       const float* w, const float* mean, const float* rstd, int64_t n, int64_t c) {
  constexpr int64_t kRows = 64;  // 64 rows x 768 ch x 2 tensors x 4 B = 384 KiB: fits in L2
  constexpr int64_t kCols = 64;  // column slice of the dw/dbias phase (a multiple of any width)
  const int64_t col_blocks = (c + kCols - 1) / kCols;
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
#pragma omp parallel
  for (int64_t r0 = 0; r0 < n; r0 += kRows) {
    const int64_t r1 = std::min(n, r0 + kRows);
    // Phase 1: dx += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.
#pragma omp for schedule(static)
    for (int64_t i = r0; i < r1; ++i) {
      const float* HWY_RESTRICT dyr = dy + i * c;
      const float* HWY_RESTRICT xr = x + i * c;
      float* HWY_RESTRICT dxr = dx + i * c;
      const VF muv = hn::Set(d, mean[i]), rsv = hn::Set(d, rstd[i]);
      VF sum_g = hn::Zero(d), sum_gx = hn::Zero(d);
      for (int64_t j = 0; j < c; j += N) {
        // Zero-filled tails: g is 0 there, so both sums see nothing past the row.
        const size_t left = size_t(c - j);
        const VF g = hn::Mul(LoadN(d, dyr + j, left), LoadN(d, w + j, left));
        const VF xhat = hn::Mul(hn::Sub(LoadN(d, xr + j, left), muv), rsv);
        sum_g = hn::Add(sum_g, g);
        sum_gx = hn::MulAdd(g, xhat, sum_gx);
      }
      const VF mean_g = hn::Set(d, ReduceSum(d, sum_g) / float(c));
      const VF mean_gx = hn::Set(d, ReduceSum(d, sum_gx) / float(c));
      for (int64_t j = 0; j < c; j += N) {
        const size_t left = size_t(c - j);
        const VF g = hn::Mul(LoadN(d, dyr + j, left), LoadN(d, w + j, left));
        const VF xhat = hn::Mul(hn::Sub(LoadN(d, xr + j, left), muv), rsv);
        const VF t = hn::NegMulAdd(xhat, mean_gx, hn::Sub(g, mean_g));
        StoreN(hn::MulAdd(rsv, t, LoadN(d, dxr + j, left)), d, dxr + j, left);
      }
    }  // implicit barrier: phase 2 may run on another thread's rows
       // Phase 2: dw += dy * xhat, dbias += dy, column slices, rows in order.
#pragma omp for schedule(static)
    for (int64_t cb = 0; cb < col_blocks; ++cb) {
      const int64_t j0 = cb * kCols, width = std::min(kCols, c - j0);
      for (int64_t j = 0; j < width; j += N) {
        const size_t left = size_t(width - j);
        VF dwv = LoadN(d, dw + j0 + j, left), dbv = LoadN(d, dbias + j0 + j, left);
        for (int64_t i = r0; i < r1; ++i) {
          const VF dyv = LoadN(d, dy + i * c + j0 + j, left);
          const VF xhat = hn::Mul(hn::Sub(LoadN(d, x + i * c + j0 + j, left), hn::Set(d, mean[i])),
                                  hn::Set(d, rstd[i]));
          dwv = hn::MulAdd(dyv, xhat, dwv);
          dbv = hn::Add(dbv, dyv);
        }
        StoreN(dwv, d, dw + j0 + j, left);
        StoreN(dbv, d, dbias + j0 + j, left);
      }
    }  // implicit barrier before the next block
  }
}

}  // namespace strata::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/kernels.h"

namespace strata::kernels {

HWY_EXPORT(LayerNormForward);
HWY_EXPORT(LayerNormBackward);

void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w,
                       const float* bias, int64_t n, int64_t c, float eps) {
  STRATA_DISPATCH(LayerNormForward)(y, mean, rstd, x, w, bias, n, c, eps);
}

void layernorm_backward(float* dx, float* dw, float* dbias, const float* dy, const float* x,
                        const float* w, const float* mean, const float* rstd, int64_t n,
                        int64_t c) {
  STRATA_DISPATCH(LayerNormBackward)(dx, dw, dbias, dy, x, w, mean, rstd, n, c);
}

}  // namespace strata::kernels
#endif  // HWY_ONCE
