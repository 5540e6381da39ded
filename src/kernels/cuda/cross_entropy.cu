// Fused softmax + cross-entropy over the vocabulary: one block per row. Each thread keeps an
// online (max, sum of exp(x - max)) over its strided share of the row in one pass; the block
// combines the pairs (in double for the sums: the CPU sums in double too, and the combined sum
// has up to v terms). With the gradient, a second pass writes (exp(x - max) / sum - onehot) *
// grad_scale over the logits. Rows with target < 0 get loss 0 and a zero gradient row.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {

namespace {

constexpr int kCeThreads = 512;

struct MaxSum {
  float m;   // running max
  double s;  // sum of exp(x - m)
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  // An empty side (m = -inf, s = 0) must not produce exp(-inf - -inf) = NaN.
  if (a.m == -INFINITY) return b;
  if (b.m == -INFINITY) return a;
  const float m = fmaxf(a.m, b.m);
  return {m, a.s * exp(double(a.m) - double(m)) + b.s * exp(double(b.m) - double(m))};
}

// The row's (max, sum) for every thread of the block.
__device__ MaxSum block_max_sum(const float* x, int64_t v) {
  float m = -INFINITY;
  double s = 0.0;  // float exps, double sum: a thread adds ~100 terms, and rescales them
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    const float xj = x[j];
    if (xj > m) {
      s = s * double(expf(m - xj)) + 1.0;  // m = -inf the first time: expf(-inf) = 0
      m = xj;
    } else if (m != -INFINITY) {
      s += double(expf(xj - m));
    }
  }
  MaxSum ms{m, s};
  for (int offset = 16; offset > 0; offset >>= 1) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, ms.m, offset),
                       __shfl_xor_sync(0xffffffffu, ms.s, offset)};
    ms = combine(ms, other);
  }
  __shared__ float shared_m[32];
  __shared__ double shared_s[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (lane == 0) {
    shared_m[warp] = ms.m;
    shared_s[warp] = ms.s;
  }
  __syncthreads();
  ms = lane < warps ? MaxSum{shared_m[lane], shared_s[lane]} : MaxSum{-INFINITY, 0.0};
  for (int offset = 16; offset > 0; offset >>= 1) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, ms.m, offset),
                       __shfl_xor_sync(0xffffffffu, ms.s, offset)};
    ms = combine(ms, other);
  }
  return ms;
}

// Shared by both entry points: `backward` decides whether the gradient overwrites the logits.
__global__ void cross_entropy_kernel(float* __restrict__ losses, float* __restrict__ logits,
                                     const int32_t* __restrict__ targets, int64_t v,
                                     float grad_scale, bool backward) {
  const int64_t row = blockIdx.x;
  float* x = logits + row * v;
  const int32_t target = targets[row];
  if (target < 0) {
    if (threadIdx.x == 0) losses[row] = 0.0f;
    if (backward) {
      for (int64_t j = threadIdx.x; j < v; j += blockDim.x) x[j] = 0.0f;
    }
    return;
  }
  const MaxSum ms = block_max_sum(x, v);
  if (threadIdx.x == 0) {
    losses[row] = target < v ? float(log(ms.s) + double(ms.m) - double(x[target])) : NAN;
  }
  if (!backward) return;
  __syncthreads();  // thread 0 has read x[target]: only now may the row be overwritten
  const float k = float(double(grad_scale) / ms.s);
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    float d = expf(x[j] - ms.m) * k;
    if (j == target) d -= grad_scale;
    x[j] = d;
  }
}

// cross_entropy_forward_backward_bf16 for rows [r0, r0 + gridDim.x): the loss as above, then the
// gradient as bf16 at byte 2 (row v + j) of the logits. Every row this launch overwrites (rows
// < r0; see kernels.h) was finished by an earlier launch, except row 0 over itself: there the
// bf16 of element j lands in f32 element j / 2, possibly another thread's input. So the row goes
// in chunks of blockDim.x elements, each read into registers before a barrier and written after
// it: chunk k's writes reach f32 elements below the end of chunk k, all read by then. The other
// rows pay one barrier per chunk for not branching on the row.
__global__ void cross_entropy_bf16_kernel(float* losses, float* logits,
                                          const int32_t* __restrict__ targets, int64_t r0,
                                          int64_t v, float grad_scale) {
  // No __restrict__ on logits: the f32 reads and the bf16 writes share its storage.
  const int64_t row = r0 + blockIdx.x;
  const float* x = logits + row * v;
  uint16_t* g = reinterpret_cast<uint16_t*>(logits) + row * v;
  const int32_t target = targets[row];
  if (target < 0) {  // the same for the whole block: no barrier is skipped by part of it
    if (threadIdx.x == 0) losses[row] = 0.0f;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) g[j] = 0;
    return;
  }
  const MaxSum ms = block_max_sum(x, v);
  if (threadIdx.x == 0) {
    losses[row] = target < v ? float(log(ms.s) + double(ms.m) - double(x[target])) : NAN;
  }
  const float k = float(double(grad_scale) / ms.s);
  for (int64_t j0 = 0; j0 < v; j0 += blockDim.x) {
    const int64_t j = j0 + threadIdx.x;
    float d = 0.0f;
    if (j < v) {
      d = expf(x[j] - ms.m) * k;
      if (j == target) d -= grad_scale;
    }
    __syncthreads();  // this chunk's reads (and thread 0's x[target]) before any write
    if (j < v) g[j] = detail::f32_to_bf16_bits(d);
  }
}

__global__ void sum_losses_kernel(double* __restrict__ total, const float* __restrict__ losses,
                                  const int32_t* __restrict__ targets, int64_t n) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (targets[i] >= 0) s += double(losses[i]);
  }
  s = detail::block_sum(s);
  if (threadIdx.x == 0) *total = s;
}

void launch(float* losses, float* logits, const int32_t* targets, int64_t n, int64_t v,
            float grad_scale, bool backward, cudaStream_t stream) {
  STRATA_CHECK(n >= 0 && v > 0 && n < (int64_t{1} << 31), "cross_entropy: bad shape n=", n,
               " v=", v);
  if (n == 0) return;
  cross_entropy_kernel<<<unsigned(n), kCeThreads, 0, stream>>>(losses, logits, targets, v,
                                                               grad_scale, backward);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t n,
                           int64_t v, cudaStream_t stream) {
  // The kernel does not write the logits without `backward`.
  launch(losses, const_cast<float*>(logits), targets, n, v, 0.0f, false, stream);
}

void cross_entropy_forward_backward(float* losses, float* logits, const int32_t* targets, int64_t n,
                                    int64_t v, float grad_scale, cudaStream_t stream) {
  launch(losses, logits, targets, n, v, grad_scale, true, stream);
}

void cross_entropy_forward_backward_bf16(float* losses, float* logits, const int32_t* targets,
                                         int64_t n, int64_t v, float grad_scale,
                                         cudaStream_t stream) {
  STRATA_CHECK(n >= 0 && v > 0 && n < (int64_t{1} << 31),
               "cross_entropy_forward_backward_bf16: bad shape n=", n, " v=", v);
  // Blocks of doubling size (see kernels.h): {0}, {1}, {2, 3}, {4..7}, ...
  for (int64_t r0 = 0; r0 < n;) {
    const int64_t r1 = std::min(n, r0 == 0 ? int64_t{1} : 2 * r0);
    cross_entropy_bf16_kernel<<<unsigned(r1 - r0), kCeThreads, 0, stream>>>(losses, logits, targets,
                                                                            r0, v, grad_scale);
    STRATA_CUDA_CHECK_LAUNCH();
    r0 = r1;
  }
}

void sum_losses(double* total, const float* losses, const int32_t* targets, int64_t n,
                cudaStream_t stream) {
  STRATA_CHECK(n >= 0, "sum_losses: bad n=", n);
  // One block: n is the number of rows (thousands), and one block fixes the order of the sum.
  sum_losses_kernel<<<1, 1024, 0, stream>>>(total, losses, targets, n);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
