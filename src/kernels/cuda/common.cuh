// Device helpers shared by the kernels of kernels/cuda: launch sizes, warp and block reductions,
// and the bf16 rounding. Included by .cu files only (host code includes kernels.h).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace strata::cuda::detail {

constexpr int kThreads = 256;  // element-wise and per-row kernels
// Grid-stride kernels never launch more blocks than this: the grid is then a function of the size
// alone, so a kernel whose per-thread work split matters (sum_squares) is reproducible on any GPU.
constexpr int64_t kMaxBlocks = 65536;

inline unsigned grid_for(int64_t count, int threads = kThreads) {
  const int64_t blocks = (count + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kMaxBlocks));
}

// The dw/dbias sums of the norm backwards run over chunks of rows (one partial per chunk and
// column in a scratch buffer, then the chunks in order): a fixed split that depends on n only,
// so the sums are the same on every run without float atomics.
constexpr int64_t kMaxRowChunks = 1024;
inline int64_t rows_per_chunk(int64_t n) {
  return std::max<int64_t>(32, (n + kMaxRowChunks - 1) / kMaxRowChunks);
}
inline int64_t row_chunks(int64_t n) {
  const int64_t r = rows_per_chunk(n);
  return (n + r - 1) / r;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block, returned to every thread. blockDim.x must be a multiple of 32; every thread
// of the block must call it (it synchronises). The leading barrier lets a kernel call it twice in
// a row: the second call's writes to `partial` wait until every thread has read the first result.
template <typename T>
__device__ T block_sum(T v) {
  __shared__ T partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : T(0);
  return warp_sum(v);
}

// f32 -> bf16 bits with round-to-nearest-even, NaN kept quiet: core/dtype.h's f32_to_bf16 line by
// line (not __float2bfloat16, whose NaN payloads differ), so host and device agree bit for bit.
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

}  // namespace strata::cuda::detail
