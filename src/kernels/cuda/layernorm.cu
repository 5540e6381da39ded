// LayerNorm on the GPU. Forward and dx: one block per row (the row's sums are block reductions;
// mean and variance in two passes, like the CPU, to avoid E[x^2] - E[x]^2 cancellation).
// dw and dbias are sums over rows: a first kernel writes one partial per (chunk of rows, column)
// to scratch, with each thread walking its column's rows in order; a second adds the chunks in
// order into dw and dbias. Deterministic without float atomics.
#include "core/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {

namespace {

using detail::block_sum;
using detail::kThreads;

__global__ void layernorm_forward_kernel(float* __restrict__ y, float* __restrict__ mean,
                                         float* __restrict__ rstd, const float* __restrict__ x,
                                         const float* __restrict__ w,
                                         const float* __restrict__ bias, int64_t c, float eps) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * c;
  float* yr = y + row * c;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) sum += xr[j];
  const float mu = block_sum(sum) / float(c);
  float var = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float d = xr[j] - mu;
    var += d * d;
  }
  const float rs = 1.0f / sqrtf(block_sum(var) / float(c) + eps);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) yr[j] = (xr[j] - mu) * rs * w[j] + bias[j];
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// dx += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.
__global__ void layernorm_backward_dx_kernel(float* __restrict__ dx, const float* __restrict__ dy,
                                             const float* __restrict__ x,
                                             const float* __restrict__ w,
                                             const float* __restrict__ mean,
                                             const float* __restrict__ rstd, int64_t c) {
  const int64_t row = blockIdx.x;
  const float* dyr = dy + row * c;
  const float* xr = x + row * c;
  float* dxr = dx + row * c;
  const float mu = mean[row], rs = rstd[row];
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float g = dyr[j] * w[j];
    sum_g += g;
    sum_gx += g * (xr[j] - mu) * rs;
  }
  const float mean_g = block_sum(sum_g) / float(c);
  const float mean_gx = block_sum(sum_gx) / float(c);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const float xhat = (xr[j] - mu) * rs;
    dxr[j] += rs * (dyr[j] * w[j] - mean_g - xhat * mean_gx);
  }
}

// Block (column block, chunk): partial_w[chunk, j] = sum over the chunk's rows of dy * xhat,
// partial_b[chunk, j] = sum of dy. Adjacent threads read adjacent columns (coalesced).
__global__ void layernorm_backward_partial_kernel(
    float* __restrict__ partial_w, float* __restrict__ partial_b, const float* __restrict__ dy,
    const float* __restrict__ x, const float* __restrict__ mean, const float* __restrict__ rstd,
    int64_t n, int64_t c, int64_t rows_per_chunk) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  if (j >= c) return;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < n ? r0 + rows_per_chunk : n;
  float acc_w = 0.0f, acc_b = 0.0f;
  for (int64_t i = r0; i < r1; ++i) {
    const float d = dy[i * c + j];
    acc_w += d * ((x[i * c + j] - mean[i]) * rstd[i]);
    acc_b += d;
  }
  partial_w[chunk * c + j] = acc_w;
  partial_b[chunk * c + j] = acc_b;
}

__global__ void layernorm_backward_reduce_kernel(float* __restrict__ dw, float* __restrict__ dbias,
                                                 const float* __restrict__ partial_w,
                                                 const float* __restrict__ partial_b,
                                                 int64_t chunks, int64_t c) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  float sw = 0.0f, sb = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) {
    sw += partial_w[k * c + j];
    sb += partial_b[k * c + j];
  }
  dw[j] += sw;
  dbias[j] += sb;
}

}  // namespace

void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w,
                       const float* bias, int64_t n, int64_t c, float eps, cudaStream_t stream) {
  STRATA_CHECK(n >= 0 && c >= 0 && n < (int64_t{1} << 31), "layernorm_forward: bad shape n=", n,
               " c=", c);
  if (n == 0 || c == 0) return;
  layernorm_forward_kernel<<<unsigned(n), kThreads, 0, stream>>>(y, mean, rstd, x, w, bias, c, eps);
  STRATA_CUDA_CHECK_LAUNCH();
}

int64_t layernorm_backward_scratch_floats(int64_t n, int64_t c) {
  return 2 * detail::row_chunks(n) * c;
}

void layernorm_backward(float* dx, float* dw, float* dbias, float* scratch, const float* dy,
                        const float* x, const float* w, const float* mean, const float* rstd,
                        int64_t n, int64_t c, cudaStream_t stream) {
  STRATA_CHECK(n >= 0 && c >= 0 && n < (int64_t{1} << 31), "layernorm_backward: bad shape n=", n,
               " c=", c);
  if (n == 0 || c == 0) return;
  layernorm_backward_dx_kernel<<<unsigned(n), kThreads, 0, stream>>>(dx, dy, x, w, mean, rstd, c);
  STRATA_CUDA_CHECK_LAUNCH();
  const int64_t rows = detail::rows_per_chunk(n), chunks = detail::row_chunks(n);
  const unsigned col_blocks = unsigned((c + kThreads - 1) / kThreads);
  float* partial_w = scratch;
  float* partial_b = scratch + chunks * c;
  layernorm_backward_partial_kernel<<<dim3(col_blocks, unsigned(chunks)), kThreads, 0, stream>>>(
      partial_w, partial_b, dy, x, mean, rstd, n, c, rows);
  STRATA_CUDA_CHECK_LAUNCH();
  layernorm_backward_reduce_kernel<<<col_blocks, kThreads, 0, stream>>>(dw, dbias, partial_w,
                                                                        partial_b, chunks, c);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
