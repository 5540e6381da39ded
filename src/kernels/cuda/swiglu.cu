// SwiGLU (Llama MLP), element-wise over the n x f outputs with a grid-stride loop.
// gate_up[n, 2f]: gate in columns [0, f), up in [f, 2f); y = silu(gate) * up, silu(g) = g s(g).
#include "core/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {

namespace {

__device__ __forceinline__ float sigmoid(float z) {
  return 1.0f / (1.0f + expf(-z));
}

__global__ void swiglu_forward_kernel(float* __restrict__ y, const float* __restrict__ gate_up,
                                      int64_t n, int64_t f) {
  const int64_t count = n * f;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < count;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx / f, j = idx - i * f;
    const float g = gate_up[i * 2 * f + j];
    const float u = gate_up[i * 2 * f + f + j];
    y[idx] = g * sigmoid(g) * u;
  }
}

// d/dgate = dy * up * s (1 + g (1 - s)), d/dup = dy * g * s, s = sigmoid(g).
__global__ void swiglu_backward_kernel(float* __restrict__ dgate_up,
                                       const float* __restrict__ gate_up,
                                       const float* __restrict__ dy, int64_t n, int64_t f) {
  const int64_t count = n * f;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < count;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx / f, j = idx - i * f;
    const float g = gate_up[i * 2 * f + j];
    const float u = gate_up[i * 2 * f + f + j];
    const float d = dy[idx];
    const float s = sigmoid(g);
    dgate_up[i * 2 * f + j] = d * u * (s * (1.0f + g * (1.0f - s)));
    dgate_up[i * 2 * f + f + j] = d * g * s;
  }
}

}  // namespace

void swiglu_forward(float* y, const float* gate_up, int64_t n, int64_t f, cudaStream_t stream) {
  STRATA_CHECK(n >= 0 && f >= 0, "swiglu_forward: bad shape n=", n, " f=", f);
  if (n == 0 || f == 0) return;
  swiglu_forward_kernel<<<detail::grid_for(n * f), detail::kThreads, 0, stream>>>(y, gate_up, n, f);
  STRATA_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(float* dgate_up, const float* gate_up, const float* dy, int64_t n, int64_t f,
                     cudaStream_t stream) {
  STRATA_CHECK(n >= 0 && f >= 0, "swiglu_backward: bad shape n=", n, " f=", f);
  if (n == 0 || f == 0) return;
  swiglu_backward_kernel<<<detail::grid_for(n * f), detail::kThreads, 0, stream>>>(
      dgate_up, gate_up, dy, n, f);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
