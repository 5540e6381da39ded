// Element-wise kernels (residual adds, bias, gradient scaling, fills) and the bf16 and f16
// conversions: memory-bound grid-stride loops, one element per thread per iteration.
#include <cuda_fp16.h>

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

__global__ void fill_kernel(float* __restrict__ y, float value, int64_t count) {
  STRATA_GRID_STRIDE(i, count) {
    y[i] = value;
  }
}

__global__ void scale_matrix_kernel(float* __restrict__ c, int64_t ldc, int64_t m, int64_t n,
                                    float beta) {
  STRATA_GRID_STRIDE(idx, m * n) {
    const int64_t i = idx / n, j = idx - i * n;
    float* p = c + i * ldc + j;
    *p = beta == 0.0f ? 0.0f : *p * beta;  // BLAS: beta = 0 never reads C (it may hold NaN)
  }
}

// Finite values and infinities through the hardware conversion (cvt.rn.f16.f32: round to nearest
// even, overflow to inf, f16 subnormals); NaN by hand so that the payload is core/dtype.h's and
// the CPU kernel's (quiet, top mantissa bits kept), not the hardware's canonical NaN.
__device__ __forceinline__ uint16_t f32_to_f16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7e00u | ((u & 0x7fffffu) >> 13));
  return __half_as_ushort(__float2half_rn(f));
}

// Exact widening; NaN quieted with its payload kept, as the CPU kernel's vcvtph2ps does.
__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) {
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0u) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    return __uint_as_float(sign | 0x7fc00000u | (static_cast<uint32_t>(h & 0x3ffu) << 13));
  }
  return __half2float(__ushort_as_half(h));
}

__global__ void to_f16_kernel(uint16_t* __restrict__ out, const float* __restrict__ in,
                              int64_t count) {
  STRATA_GRID_STRIDE(i, count) {
    out[i] = f32_to_f16_bits(in[i]);
  }
}

__global__ void from_f16_kernel(float* __restrict__ out, const uint16_t* __restrict__ in,
                                int64_t count) {
  STRATA_GRID_STRIDE(i, count) {
    out[i] = f16_bits_to_f32(in[i]);
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

void fill(float* y, float value, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  fill_kernel<<<detail::grid_for(count), detail::kThreads, 0, stream>>>(y, value, count);
  STRATA_CUDA_CHECK_LAUNCH();
}

void scale_matrix(float* c, int64_t ldc, int64_t m, int64_t n, float beta, cudaStream_t stream) {
  STRATA_CHECK(m >= 0 && n >= 0 && ldc >= n, "scale_matrix: bad shape m=", m, " n=", n,
               " ldc=", ldc);
  if (m * n == 0 || beta == 1.0f) return;
  scale_matrix_kernel<<<detail::grid_for(m * n), detail::kThreads, 0, stream>>>(c, ldc, m, n, beta);
  STRATA_CUDA_CHECK_LAUNCH();
}

void to_f16(uint16_t* out, const float* in, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  to_f16_kernel<<<detail::grid_for(count), detail::kThreads, 0, stream>>>(out, in, count);
  STRATA_CUDA_CHECK_LAUNCH();
}

void from_f16(float* out, const uint16_t* in, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  from_f16_kernel<<<detail::grid_for(count), detail::kThreads, 0, stream>>>(out, in, count);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
