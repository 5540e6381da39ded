// Per-head RMSNorm of q and k (Qwen3's q_norm and k_norm), in place on the fused qkv rows. Each
// head is hd values (64 to 256): too short for the row-parallel structure of rmsnorm.cc to pay,
// so the rows of tokens run in parallel and each head in a plain simd loop. dwq and dwk are summed
// by columns over all rows in a fixed order (parallel over columns, not rows), so that the sums
// are the same for any thread count.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/kernels.h"

namespace strata::kernels {

namespace {

void check_shape(const AttentionShape& s, const char* what) {
  STRATA_CHECK(s.b >= 0 && s.t >= 0 && s.heads >= 1 && s.kv_heads >= 1 && s.head_dim >= 1, what,
               ": bad shape b=", s.b, " t=", s.t, " heads=", s.heads, " kv_heads=", s.kv_heads,
               " head_dim=", s.head_dim);
}

}  // namespace

void head_rmsnorm_forward(float* qkv, float* pre, float* rstd, const float* wq, const float* wk,
                          const AttentionShape& s, float eps) {
  check_shape(s, "head_rmsnorm_forward");
  const int64_t hd = s.head_dim, heads = s.qk_heads(), width = heads * hd;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < s.rows(); ++i) {
    float* row = qkv + i * s.qkv_width();
    float* kept = pre + i * width;
    std::memcpy(kept, row, sizeof(float) * size_t(width));  // q heads then k heads, adjacent
    for (int64_t h = 0; h < heads; ++h) {
      const float* __restrict x = kept + h * hd;
      float* __restrict y = row + h * hd;
      const float* __restrict w = h < s.heads ? wq : wk;
      float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
      for (int64_t j = 0; j < hd; ++j) ss += x[j] * x[j];
      const float rs = 1.0f / std::sqrt(ss / float(hd) + eps);
#pragma omp simd
      for (int64_t j = 0; j < hd; ++j) y[j] = x[j] * rs * w[j];
      rstd[i * heads + h] = rs;
    }
  }
}

void head_rmsnorm_backward(float* dqkv, float* dwq, float* dwk, const float* pre, const float* rstd,
                           const float* wq, const float* wk, const AttentionShape& s) {
  check_shape(s, "head_rmsnorm_backward");
  const int64_t hd = s.head_dim, heads = s.qk_heads(), width = heads * hd, n = s.rows();
  const int64_t W = s.qkv_width();
  // dw first (it reads dy, which the dx pass overwrites): dw[j] += sum over head rows of
  // dy * x * rstd, in blocks of 16 columns (a cache line of each row), rows in order.
  constexpr int64_t kCols = 16;
  const int64_t blocks = (hd + kCols - 1) / kCols;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < 2 * blocks; ++blk) {
    const bool q = blk < blocks;
    const int64_t j0 = (q ? blk : blk - blocks) * kCols, j1 = std::min(hd, j0 + kCols);
    const int64_t h0 = q ? 0 : s.heads, h1 = q ? s.heads : heads;
    float acc[kCols] = {};
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t h = h0; h < h1; ++h) {
        const float* dy = dqkv + i * W + h * hd;
        const float* x = pre + i * width + h * hd;
        const float rs = rstd[i * heads + h];
        for (int64_t j = j0; j < j1; ++j) acc[j - j0] += dy[j] * x[j] * rs;
      }
    }
    float* dw = q ? dwq : dwk;
    for (int64_t j = j0; j < j1; ++j) dw[j] += acc[j - j0];
  }
  // dx = rstd * (g - xhat * mean(g * xhat)), g = dy * w, xhat = x * rstd; in place over dy.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      float* __restrict d = dqkv + i * W + h * hd;
      const float* __restrict x = pre + i * width + h * hd;
      const float* __restrict w = h < s.heads ? wq : wk;
      const float rs = rstd[i * heads + h];
      float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
      for (int64_t j = 0; j < hd; ++j) sum_gx += d[j] * w[j] * x[j];
      const float k = sum_gx * rs * rs / float(hd);
#pragma omp simd
      for (int64_t j = 0; j < hd; ++j) d[j] = rs * (d[j] * w[j] - x[j] * k);
    }
  }
}

}  // namespace strata::kernels
