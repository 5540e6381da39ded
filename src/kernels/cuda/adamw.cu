// AdamW (PyTorch's torch.optim.AdamW, decoupled weight decay) and the sum of squares used for the
// global gradient norm. AdamW is one element-wise pass with the per-step scalars formed on the
// host in double, exactly as the CPU kernel forms them. sum_squares is a two-stage reduction with
// a fixed grid (kSumBlocks blocks, each writing one double partial), then one block adding the
// partials: the same additions in the same order on every run.
#include <cmath>

#include "core/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {

namespace {

constexpr int kSumBlocks = 1024;
constexpr int kSumThreads = 256;

__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g,
                             float* __restrict__ m, float* __restrict__ v,
                             uint16_t* __restrict__ p_bf16, int64_t count, float beta1, float beta2,
                             float one_minus_b1, float one_minus_b2, float eps, float grad_scale,
                             float step_size, float inv_sqrt_bc2, float decay) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = g[i] * grad_scale;
    const float mi = beta1 * m[i] + one_minus_b1 * gi;
    const float vi = beta2 * v[i] + one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] * decay - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    p[i] = pi;
    if (p_bf16) p_bf16[i] = detail::f32_to_bf16_bits(pi);
  }
}

__global__ void sum_squares_partial_kernel(double* __restrict__ partial,
                                           const float* __restrict__ x, int64_t count) {
  double s = 0.0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const double xi = x[i];
    s += xi * xi;
  }
  s = detail::block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// One block of kSumBlocks threads: thread k holds partial k.
__global__ void sum_squares_final_kernel(double* __restrict__ out,
                                         const double* __restrict__ partial) {
  const double s = detail::block_sum(partial[threadIdx.x]);
  if (threadIdx.x == 0) *out = s;
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, int64_t count, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                  int64_t step, uint16_t* p_bf16, cudaStream_t stream) {
  STRATA_CHECK(step >= 1, "adamw_update: step is ", step, ", it counts from 1");
  if (count <= 0) return;
  const double bc1 = 1.0 - std::pow(double(beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(beta2), double(step));
  const float step_size = float(double(lr) / bc1);
  const float inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - lr * weight_decay;
  adamw_kernel<<<detail::grid_for(count), detail::kThreads, 0, stream>>>(
      p, g, m, v, p_bf16, count, beta1, beta2, 1.0f - beta1, 1.0f - beta2, eps, grad_scale,
      step_size, inv_sqrt_bc2, decay);
  STRATA_CUDA_CHECK_LAUNCH();
}

int64_t sum_squares_scratch_doubles() {
  return kSumBlocks;
}

void sum_squares(double* out, double* scratch, const float* x, int64_t count, cudaStream_t stream) {
  STRATA_CHECK(count >= 0, "sum_squares: bad count ", count);
  // Launched even for count 0, so that *out is always written (0).
  sum_squares_partial_kernel<<<kSumBlocks, kSumThreads, 0, stream>>>(scratch, x, count);
  STRATA_CUDA_CHECK_LAUNCH();
  sum_squares_final_kernel<<<1, kSumBlocks, 0, stream>>>(out, scratch);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
