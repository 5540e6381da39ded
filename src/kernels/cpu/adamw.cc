// AdamW (PyTorch's torch.optim.AdamW semantics, decoupled weight decay) and the sum of squares
// used for the global gradient norm. Both are single streaming passes.
// Compiled once per kernel level (Highway's foreach_target.h); kernels.h's functions dispatch.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/adamw.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/vec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace strata::kernels::HWY_NAMESPACE {

// One AdamW step over [0, count) with the per-step scalars already computed; see kernels.h.
void AdamwUpdate(float* p, const float* g, float* m, float* v, int64_t count, float beta1,
                 float beta2, float eps, float decay, float grad_scale, float step_size,
                 float inv_sqrt_bc2, uint16_t* p_bf16) {
  const float one_minus_b1 = 1.0f - beta1, one_minus_b2 = 1.0f - beta2;
  // Blocks small enough that the bf16 rounding reads the updated values back from L1.
  constexpr int64_t kBlock = 2048;
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
#pragma omp parallel for schedule(static)
  for (int64_t b0 = 0; b0 < count; b0 += kBlock) {
    const int64_t end = std::min(count, b0 + kBlock);
    // Scalar code the compiler vectorises (the same operations, in the same order, as PyTorch's
    // reference formula), at this level's width.
#pragma omp simd
    for (int64_t i = b0; i < end; ++i) {
      const float gi = g[i] * grad_scale;
      const float mi = beta1 * m[i] + one_minus_b1 * gi;
      const float vi = beta2 * v[i] + one_minus_b2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
    }
    if (p_bf16) {
      for (int64_t i = b0; i < end; i += N) {
        const size_t left = size_t(end - i);
        StoreBf16(d, LoadN(d, p + i, left), p_bf16 + i, left);
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

HWY_EXPORT(AdamwUpdate);

void adamw_update(float* p, const float* g, float* m, float* v, int64_t count, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                  int64_t step, uint16_t* p_bf16) {
  // Per-step scalars in double, once: bias corrections 1 - beta^step underflow nothing in double.
  const double bc1 = 1.0 - std::pow(double(beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(beta2), double(step));
  const float step_size = float(double(lr) / bc1);
  const float inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - lr * weight_decay;
  // clang-format 14 would break this call through a macro before its arguments.
  // clang-format off
  STRATA_DISPATCH(AdamwUpdate)(p, g, m, v, count, beta1, beta2, eps, decay, grad_scale, step_size,
                               inv_sqrt_bc2, p_bf16);
  // clang-format on
}

double sum_squares(const float* x, int64_t count) {
  // A fixed number of contiguous chunks, each summed in double and then added in chunk order:
  // the result is the same for any thread count (an OpenMP reduction would not be).
  constexpr int64_t kChunks = 256;
  double partial[kChunks];
  const int64_t chunk = (count + kChunks - 1) / kChunks;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < kChunks; ++c) {
    const int64_t begin = std::min(count, c * chunk), end = std::min(count, begin + chunk);
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = begin; i < end; ++i) s += double(x[i]) * double(x[i]);
    partial[c] = s;
  }
  double total = 0.0;
  for (int64_t c = 0; c < kChunks; ++c) total += partial[c];
  return total;
}

}  // namespace strata::kernels
#endif  // HWY_ONCE
