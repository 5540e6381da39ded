// What the forward and backward mma flash attention files (flash_attention_mma*.cu) share: tile
// sizes, the shape and alignment checks, and the launch helper.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_check.h"

namespace strata::cuda::mma {

constexpr int kTile = 64;              // query rows per tile = keys per tile
constexpr int kWarps = 4;              // each warp owns 16 rows (queries, or keys in dK/dV)
constexpr int kThreads = 32 * kWarps;  // 128
constexpr float kLog2e = 1.4426950408889634f;

// Throws strata::Error for sizes the kernels cannot take (same messages as the scalar kernel).
void check_shape(const char* what, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd);

inline bool aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Launch with `smem` bytes of dynamic shared memory (the opt-in above 48 KiB is per kernel and
// cheap: set at every launch so that it holds on whichever device is current).
template <typename Kernel, typename... Args>
void launch(Kernel kernel, dim3 grid, size_t smem, cudaStream_t stream, Args... args) {
  STRATA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)));
  kernel<<<grid, kThreads, smem, stream>>>(args...);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda::mma
