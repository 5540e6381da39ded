// Host emulation shim: just enough of the CUDA runtime for the mma flash attention sources.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct float2 {
  float x, y;
};
inline float2 make_float2(float a, float b) {
  return {a, b};
}
typedef int cudaError_t;
constexpr cudaError_t cudaSuccess = 0;
typedef struct CUstream_st* cudaStream_t;
inline const char* cudaGetErrorString(cudaError_t) {
  return "emu";
}
inline const char* cudaGetErrorName(cudaError_t) {
  return "emu";
}
inline cudaError_t cudaGetLastError() {
  return 0;
}
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
template <class K>
cudaError_t cudaFuncSetAttribute(K, cudaFuncAttribute, int) {
  return 0;
}
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
namespace emu {
struct Idx {
  unsigned x, y, z;
};
Idx& thread_idx();
Idx& block_idx();
Idx& block_dim();
Idx& grid_dim();
void syncthreads();
float shfl_xor(float v, int off);
unsigned char* smem();
}  // namespace emu
#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx())
#define blockDim (::emu::block_dim())
#define gridDim (::emu::grid_dim())
inline void __syncthreads() {
  ::emu::syncthreads();
}
inline float __shfl_xor_sync(unsigned, float v, int off) {
  return ::emu::shfl_xor(v, off);
}
#include "emu_launch.h"
