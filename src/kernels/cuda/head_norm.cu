// Per-head RMSNorm of q and k (Qwen3) on the GPU, in place on the fused qkv rows: one warp per
// head row (hd values) for the forward and dx, and for dwq / dwk the deterministic two-pass sum of
// rmsnorm.cu (per-chunk partials in scratch, then the chunks in order; no float atomics).
#include "core/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {

namespace {

using detail::kThreads;
using detail::warp_sum;

constexpr int kWarps = kThreads / 32;

// Head row r of all rows * heads: token r / heads, head r % heads (q heads, then k heads).
__global__ void head_rmsnorm_forward_kernel(float* __restrict__ qkv, float* __restrict__ pre,
                                            float* __restrict__ rstd, const float* __restrict__ wq,
                                            const float* __restrict__ wk, int64_t head_rows,
                                            int64_t heads, int64_t q_heads, int64_t hd,
                                            int64_t qkv_width, float eps) {
  const int64_t r = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= head_rows) return;  // whole warps leave together
  const int64_t token = r / heads, h = r % heads;
  float* x = qkv + token * qkv_width + h * hd;
  float* kept = pre + r * hd;
  const float* w = h < q_heads ? wq : wk;
  float ss = 0.0f;
  for (int64_t j = lane; j < hd; j += 32) {
    kept[j] = x[j];
    ss += x[j] * x[j];
  }
  const float rs = 1.0f / sqrtf(warp_sum(ss) / float(hd) + eps);
  for (int64_t j = lane; j < hd; j += 32) x[j] = kept[j] * rs * w[j];
  if (lane == 0) rstd[r] = rs;
}

// In place: dy -> rstd * (g - xhat * mean(g * xhat)), g = dy * w, xhat = x * rstd.
__global__ void head_rmsnorm_backward_dx_kernel(
    float* __restrict__ dqkv, const float* __restrict__ pre, const float* __restrict__ rstd,
    const float* __restrict__ wq, const float* __restrict__ wk, int64_t head_rows, int64_t heads,
    int64_t q_heads, int64_t hd, int64_t qkv_width) {
  const int64_t r = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= head_rows) return;
  const int64_t token = r / heads, h = r % heads;
  float* d = dqkv + token * qkv_width + h * hd;
  const float* x = pre + r * hd;
  const float* w = h < q_heads ? wq : wk;
  const float rs = rstd[r];
  float sum_gx = 0.0f;
  for (int64_t j = lane; j < hd; j += 32) sum_gx += d[j] * w[j] * x[j];
  const float k = warp_sum(sum_gx) * rs * rs / float(hd);
  for (int64_t j = lane; j < hd; j += 32) d[j] = rs * (d[j] * w[j] - x[j] * k);
}

// partial[(which * chunks + chunk) * hd + j]: column j's sum of dy * x * rstd over the q heads
// (which 0) or the k heads (which 1) of the chunk's tokens.
__global__ void head_rmsnorm_backward_partial_kernel(
    float* __restrict__ partial, const float* __restrict__ dqkv, const float* __restrict__ pre,
    const float* __restrict__ rstd, int64_t rows, int64_t heads, int64_t q_heads, int64_t hd,
    int64_t qkv_width, int64_t rows_per_chunk, int64_t chunks) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunk = blockIdx.y, which = blockIdx.z;
  if (j >= hd) return;
  const int64_t h0 = which == 0 ? 0 : q_heads, h1 = which == 0 ? q_heads : heads;
  const int64_t t0 = chunk * rows_per_chunk;
  const int64_t t1 = t0 + rows_per_chunk < rows ? t0 + rows_per_chunk : rows;
  float acc = 0.0f;
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t r = t * heads + h;
      acc += dqkv[t * qkv_width + h * hd + j] * pre[r * hd + j] * rstd[r];
    }
  partial[(which * chunks + chunk) * hd + j] = acc;
}

__global__ void head_rmsnorm_backward_reduce_kernel(float* __restrict__ dwq,
                                                    float* __restrict__ dwk,
                                                    const float* __restrict__ partial,
                                                    int64_t chunks, int64_t hd) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t which = blockIdx.y;
  if (j >= hd) return;
  float s = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) s += partial[(which * chunks + k) * hd + j];
  (which == 0 ? dwq : dwk)[j] += s;
}

void check_shape(const AttentionShape& s, const char* what) {
  STRATA_CHECK(s.b >= 0 && s.t >= 0 && s.heads >= 1 && s.kv_heads >= 1 && s.head_dim >= 1, what,
               ": bad shape b=", s.b, " t=", s.t, " heads=", s.heads, " kv_heads=", s.kv_heads,
               " head_dim=", s.head_dim);
}

}  // namespace

void head_rmsnorm_forward(float* qkv, float* pre, float* rstd, const float* wq, const float* wk,
                          const AttentionShape& s, float eps, cudaStream_t stream) {
  check_shape(s, "head_rmsnorm_forward");
  const int64_t head_rows = s.rows() * s.qk_heads();
  if (head_rows == 0) return;
  head_rmsnorm_forward_kernel<<<unsigned((head_rows + kWarps - 1) / kWarps), kThreads, 0, stream>>>(
      qkv, pre, rstd, wq, wk, head_rows, s.qk_heads(), s.heads, s.head_dim, s.qkv_width(), eps);
  STRATA_CUDA_CHECK_LAUNCH();
}

int64_t head_rmsnorm_backward_scratch_floats(const AttentionShape& s) {
  return 2 * detail::row_chunks(s.rows()) * s.head_dim;
}

void head_rmsnorm_backward(float* dqkv, float* dwq, float* dwk, float* scratch, const float* pre,
                           const float* rstd, const float* wq, const float* wk,
                           const AttentionShape& s, cudaStream_t stream) {
  check_shape(s, "head_rmsnorm_backward");
  const int64_t rows = s.rows(), head_rows = rows * s.qk_heads(), hd = s.head_dim;
  if (head_rows == 0) return;
  // dw first: it reads dy, which the dx pass overwrites (both on one stream, in order).
  const int64_t per_chunk = detail::rows_per_chunk(rows), chunks = detail::row_chunks(rows);
  const unsigned col_blocks = unsigned((hd + kThreads - 1) / kThreads);
  head_rmsnorm_backward_partial_kernel<<<dim3(col_blocks, unsigned(chunks), 2), kThreads, 0,
                                         stream>>>(scratch, dqkv, pre, rstd, rows, s.qk_heads(),
                                                   s.heads, hd, s.qkv_width(), per_chunk, chunks);
  STRATA_CUDA_CHECK_LAUNCH();
  head_rmsnorm_backward_reduce_kernel<<<dim3(col_blocks, 2), kThreads, 0, stream>>>(
      dwq, dwk, scratch, chunks, hd);
  STRATA_CUDA_CHECK_LAUNCH();
  head_rmsnorm_backward_dx_kernel<<<unsigned((head_rows + kWarps - 1) / kWarps), kThreads, 0,
                                    stream>>>(dqkv, pre, rstd, wq, wk, head_rows, s.qk_heads(),
                                              s.heads, hd, s.qkv_width());
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
