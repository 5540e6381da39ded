// GELU, tanh approximation (GPT-2), element-wise with grid-stride loops. Written as
// x * sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3), like the CPU kernel: 0.5 (1 + tanh(u)) =
// sigmoid(2u), and the sigmoid form has no cancellation in 1 + tanh(u) for x << 0.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {

namespace {

constexpr float kTwoScale = 2.0f * 0.7978845608028654f;  // 2 sqrt(2/pi)
constexpr float kCube = 0.044715f;

__device__ __forceinline__ float sigmoid(float z) {
  return 1.0f / (1.0f + expf(-z));
}

__device__ __forceinline__ float gelu(float x) {
  const float u2 = x * kTwoScale * (1.0f + kCube * x * x);
  return x * sigmoid(u2);
}

__global__ void gelu_forward_kernel(float* __restrict__ y, const float* __restrict__ x,
                                    int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = gelu(x[i]);
}

__global__ void gelu_forward_bf16_kernel(uint16_t* __restrict__ y, const float* __restrict__ x,
                                         int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = detail::f32_to_bf16_bits(gelu(x[i]));
}

// gelu'(x) = s + x s (1 - s) d(2u)/dx, s = sigmoid(2u), d(2u)/dx = 2 sqrt(2/pi)(1 + 3c x^2).
// dx may alias dy (no __restrict__ on them): each element reads dy[i] before writing dx[i].
__global__ void gelu_backward_kernel(float* dx, const float* __restrict__ x, const float* dy,
                                     int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float xi = x[i];
    const float x2 = xi * xi;
    const float s = sigmoid(xi * kTwoScale * (1.0f + kCube * x2));
    const float du2 = kTwoScale * (1.0f + 3.0f * kCube * x2);
    const float grad = s + xi * s * (1.0f - s) * du2;
    dx[i] = dy[i] * grad;
  }
}

}  // namespace

void gelu_forward(float* y, const float* x, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  gelu_forward_kernel<<<detail::grid_for(count), detail::kThreads, 0, stream>>>(y, x, count);
  STRATA_CUDA_CHECK_LAUNCH();
}

void gelu_forward_bf16(uint16_t* y, const float* x, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  gelu_forward_bf16_kernel<<<detail::grid_for(count), detail::kThreads, 0, stream>>>(y, x, count);
  STRATA_CUDA_CHECK_LAUNCH();
}

void gelu_backward(float* dx, const float* x, const float* dy, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  gelu_backward_kernel<<<detail::grid_for(count), detail::kThreads, 0, stream>>>(dx, x, dy, count);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
