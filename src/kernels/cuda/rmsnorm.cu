// RMSNorm on the GPU, structured like layernorm.cu: one block per row for the forward and dx, and
// a deterministic two-pass sum (per-chunk partials in scratch, then the chunks in order) for dw.
#include "core/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {

namespace {

using detail::block_sum;
using detail::kThreads;

__global__ void rmsnorm_forward_kernel(float* __restrict__ y, float* __restrict__ rstd,
                                       const float* __restrict__ x, const float* __restrict__ w,
                                       int64_t c, float eps) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * c;
  float* yr = y + row * c;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) ss += xr[j] * xr[j];
  const float rs = 1.0f / sqrtf(block_sum(ss) / float(c) + eps);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) yr[j] = xr[j] * rs * w[j];
  if (threadIdx.x == 0) rstd[row] = rs;
}

// dx += rstd * (g - xhat * mean(g * xhat)), g = dy * w, xhat = x * rstd.
__global__ void rmsnorm_backward_dx_kernel(float* __restrict__ dx, const float* __restrict__ dy,
                                           const float* __restrict__ x, const float* __restrict__ w,
                                           const float* __restrict__ rstd, int64_t c) {
  const int64_t row = blockIdx.x;
  const float* dyr = dy + row * c;
  const float* xr = x + row * c;
  float* dxr = dx + row * c;
  const float rs = rstd[row];
  float sum_gx = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) sum_gx += dyr[j] * w[j] * xr[j];
  const float k = block_sum(sum_gx) * rs * rs / float(c);  // mean(g * xhat) * rstd
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) dxr[j] += rs * (dyr[j] * w[j] - xr[j] * k);
}

__global__ void rmsnorm_backward_partial_kernel(float* __restrict__ partial_w,
                                                const float* __restrict__ dy,
                                                const float* __restrict__ x,
                                                const float* __restrict__ rstd, int64_t n,
                                                int64_t c, int64_t rows_per_chunk) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  if (j >= c) return;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < n ? r0 + rows_per_chunk : n;
  float acc = 0.0f;
  for (int64_t i = r0; i < r1; ++i) acc += dy[i * c + j] * (x[i * c + j] * rstd[i]);
  partial_w[chunk * c + j] = acc;
}

__global__ void rmsnorm_backward_reduce_kernel(float* __restrict__ dw,
                                               const float* __restrict__ partial_w, int64_t chunks,
                                               int64_t c) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  float s = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) s += partial_w[k * c + j];
  dw[j] += s;
}

}  // namespace

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t n, int64_t c,
                     float eps, cudaStream_t stream) {
  STRATA_CHECK(n >= 0 && c >= 0 && n < (int64_t{1} << 31), "rmsnorm_forward: bad shape n=", n,
               " c=", c);
  if (n == 0 || c == 0) return;
  rmsnorm_forward_kernel<<<unsigned(n), kThreads, 0, stream>>>(y, rstd, x, w, c, eps);
  STRATA_CUDA_CHECK_LAUNCH();
}

int64_t rmsnorm_backward_scratch_floats(int64_t n, int64_t c) {
  return detail::row_chunks(n) * c;
}

void rmsnorm_backward(float* dx, float* dw, float* scratch, const float* dy, const float* x,
                      const float* w, const float* rstd, int64_t n, int64_t c,
                      cudaStream_t stream) {
  STRATA_CHECK(n >= 0 && c >= 0 && n < (int64_t{1} << 31), "rmsnorm_backward: bad shape n=", n,
               " c=", c);
  if (n == 0 || c == 0) return;
  rmsnorm_backward_dx_kernel<<<unsigned(n), kThreads, 0, stream>>>(dx, dy, x, w, rstd, c);
  STRATA_CUDA_CHECK_LAUNCH();
  const int64_t rows = detail::rows_per_chunk(n), chunks = detail::row_chunks(n);
  const unsigned col_blocks = unsigned((c + kThreads - 1) / kThreads);
  rmsnorm_backward_partial_kernel<<<dim3(col_blocks, unsigned(chunks)), kThreads, 0, stream>>>(
      scratch, dy, x, rstd, n, c, rows);
  STRATA_CUDA_CHECK_LAUNCH();
  rmsnorm_backward_reduce_kernel<<<col_blocks, kThreads, 0, stream>>>(dw, scratch, chunks, c);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
