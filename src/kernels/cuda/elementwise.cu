// Element-wise kernels (residual adds, bias, gradient scaling) and the bf16 conversions:
// memory-bound grid-stride loops, one element per thread per iteration.
#include "core/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {

namespace {

#define STRATA_GRID_STRIDE(i, count)                                            \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (count); \
       i += int64_t(gridDim.x) * blockDim.x)

__global__ void add_bias_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t n,
                                int64_t c) {
  STRATA_GRID_STRIDE(idx, n * c) {
    y[idx] += bias[idx % c];
  }
}

// out may alias a or b: no __restrict__, and each element is read before it is written.
__global__ void add_kernel(float* out, const float* a, const float* b, int64_t count) {
  STRATA_GRID_STRIDE(i, count) {
    out[i] = a[i] + b[i];
  }
}

__global__ void add_inplace_kernel(float* __restrict__ y, const float* __restrict__ x,
                                   int64_t count) {
  STRATA_GRID_STRIDE(i, count) {
    y[i] += x[i];
  }
}

__global__ void scale_inplace_kernel(float* __restrict__ y, float s, int64_t count) {
  STRATA_GRID_STRIDE(i, count) {
    y[i] *= s;
  }
}

__global__ void to_bf16_kernel(uint16_t* __restrict__ out, const float* __restrict__ in,
                               int64_t count) {
  STRATA_GRID_STRIDE(i, count) {
    out[i] = detail::f32_to_bf16_bits(in[i]);
  }
}

__global__ void from_bf16_kernel(float* __restrict__ out, const uint16_t* __restrict__ in,
                                 int64_t count) {
  STRATA_GRID_STRIDE(i, count) {
    out[i] = detail::bf16_bits_to_f32(in[i]);
  }
}

#undef STRATA_GRID_STRIDE

}  // namespace

void add_bias(float* y, const float* bias, int64_t n, int64_t c, cudaStream_t stream) {
  STRATA_CHECK(n >= 0 && c >= 0, "add_bias: bad shape n=", n, " c=", c);
  if (n * c == 0) return;
  add_bias_kernel<<<detail::grid_for(n * c), detail::kThreads, 0, stream>>>(y, bias, n, c);
  STRATA_CUDA_CHECK_LAUNCH();
}

void add(float* out, const float* a, const float* b, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  add_kernel<<<detail::grid_for(count), detail::kThreads, 0, stream>>>(out, a, b, count);
  STRATA_CUDA_CHECK_LAUNCH();
}

void add_inplace(float* y, const float* x, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  add_inplace_kernel<<<detail::grid_for(count), detail::kThreads, 0, stream>>>(y, x, count);
  STRATA_CUDA_CHECK_LAUNCH();
}

void scale_inplace(float* y, float s, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  scale_inplace_kernel<<<detail::grid_for(count), detail::kThreads, 0, stream>>>(y, s, count);
  STRATA_CUDA_CHECK_LAUNCH();
}

void to_bf16(uint16_t* out, const float* in, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  to_bf16_kernel<<<detail::grid_for(count), detail::kThreads, 0, stream>>>(out, in, count);
  STRATA_CUDA_CHECK_LAUNCH();
}

void from_bf16(float* out, const uint16_t* in, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  from_bf16_kernel<<<detail::grid_for(count), detail::kThreads, 0, stream>>>(out, in, count);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
