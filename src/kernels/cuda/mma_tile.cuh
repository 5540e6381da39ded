// Warp-level tensor-core building blocks for the mma flash attention kernels
// (flash_attention_mma*.cu): cp.async copies of bf16 tiles into padded shared memory, ldmatrix
// loads of mma fragments, and mma.sync.m16n8k16 (bf16 operands, f32 accumulators).
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), lane = 4 * gid + tig:
//  A (16 x 16, row-major), 4 registers of 2 bf16: a0 = (gid, 2 tig..+1), a1 = (gid + 8, 2 tig..),
//    a2 = (gid, 2 tig + 8..), a3 = (gid + 8, 2 tig + 8..).
//  B (16 x 8, k x n), 2 registers: b0 = (k 2 tig..+1, n gid), b1 = (k 2 tig + 8..+9, n gid).
//  C (16 x 8, f32), 4 floats: c0, c1 = (gid, 2 tig..+1), c2, c3 = (gid + 8, 2 tig..+1).
// Two adjacent C tiles (16 x 16) hold exactly the values of one A fragment, which is what lets a
// product's result (P, dS) feed the next product straight from registers.
//
// Shared tiles are row-major bf16 with a row stride of HD + 8 elements: the 16-byte pad shifts
// consecutive rows by 4 banks, so the 8 row addresses of one ldmatrix 8x8 matrix (and the
// 16-byte cp.async stores of 8 consecutive threads) hit 32 distinct banks.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda::mma {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zero-filled (nothing read) when !valid.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}

// 4 bytes global -> shared (lse and D rows), zero-filled when !valid.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 4 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits for this thread's copies; a __syncthreads() after it publishes every thread's copies.
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c += A B on one 16 x 8 x 16 tile.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two f32 rounded to bf16 (nearest even) and packed: `lo` in the low half (the lower column).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// A fragments for a product over K = 16 * KC from the C tiles acc[2 KC][4] of a 16 x 16 KC result
// (rounded to bf16 here: the one rounding of P or dS before it is used as an operand).
template <int KC>
__device__ __forceinline__ void c_to_a(uint32_t (&a)[KC][4], const float (&acc)[2 * KC][4]) {
#pragma unroll
  for (int kk = 0; kk < KC; ++kk) {
    a[kk][0] = pack_bf16(acc[2 * kk][0], acc[2 * kk][1]);
    a[kk][1] = pack_bf16(acc[2 * kk][2], acc[2 * kk][3]);
    a[kk][2] = pack_bf16(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
    a[kk][3] = pack_bf16(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
  }
}

// ROWS x HD bf16 rows [row0, row0 + ROWS) of a strided global matrix -> shared tile (stride
// HD + 8), by all THREADS threads of the block, as 16-byte cp.async; rows at or past `rows`
// (the sequence end) are zero-filled: masked probabilities are exactly 0, and 0 * garbage could
// still be NaN. The caller commits the group.
template <int ROWS, int HD, int THREADS>
__device__ __forceinline__ void load_tile_async(bf16* tile, const bf16* src, int64_t stride,
                                                int row0, int rows) {
  constexpr int kChunks = HD / 8;  // 16-byte chunks per row
  static_assert((ROWS * kChunks) % THREADS == 0, "tile chunks must split evenly over the block");
#pragma unroll
  for (int i = 0; i < ROWS * kChunks / THREADS; ++i) {
    const int idx = static_cast<int>(threadIdx.x) + i * THREADS;
    const int r = idx / kChunks, c = idx % kChunks;
    const bool valid = row0 + r < rows;
    // An invalid row still passes a mapped address (row 0 of the matrix); nothing is read.
    const bf16* g = src + (valid ? static_cast<int64_t>(row0 + r) * stride : 0) + c * 8;
    cp_async16(tile + r * (HD + 8) + c * 8, g, valid);
  }
}

// COUNT consecutive floats src[row0 ..] -> dst, zero at or past `rows` (the caller commits).
template <int COUNT>
__device__ __forceinline__ void load_rows_async(float* dst, const float* src, int row0, int rows) {
  for (int i = static_cast<int>(threadIdx.x); i < COUNT; i += static_cast<int>(blockDim.x)) {
    const bool valid = row0 + i < rows;
    cp_async4(dst + i, src + (valid ? row0 + i : 0), valid);
  }
}

// acc[NT][4] (16 x 8 NT) += A B^T for the warp: A = 16 rows x K of a shared tile at `a`, B = 8 NT
// rows x K of a shared tile at `b` (both row-major, stride LD). "NT" as in S = Q K^T: both
// operands are read along their rows, so plain ldmatrix gives the fragments.
template <int K, int NT, int LD>
__device__ __forceinline__ void mma_nt(float (&acc)[NT][4], const bf16* a, const bf16* b,
                                       int lane) {
  static_assert(K % 16 == 0 && NT % 2 == 0, "mma_nt: K a multiple of 16, NT even");
  // Lanes 0-15 address rows 0-15 at column 0, lanes 16-31 rows 0-15 at column 8: matrices
  // a0..a3 in order. For B, lanes 8i..8i+7 address matrix i: (n 0-7, k 0), (n 0-7, k 8),
  // (n 8-15, k 0), (n 8-15, k 8) = b0, b1 of n-tile 2np, then of 2np + 1.
  const bf16* a_lane = a + (lane & 15) * LD + (lane >> 4) * 8;
  const bf16* b_lane = b + ((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8;
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t af[4];
    ldsm_x4(af, a_lane + kk * 16);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t bfr[4];
      ldsm_x4(bfr, b_lane + np * 16 * LD + kk * 16);
      mma_bf16(acc[2 * np], af, bfr[0], bfr[1]);
      mma_bf16(acc[2 * np + 1], af, bfr[2], bfr[3]);
    }
  }
}

// acc[NT][4] += A B for the warp: A = 16 x 16 KC in registers (c_to_a), B = 16 KC rows x 8 NT
// columns of a row-major shared tile at `b` (stride LD). "NN" as in O = P V: B is read down its
// columns, so ldmatrix.trans gives the fragments.
template <int KC, int NT, int LD>
__device__ __forceinline__ void mma_nn(float (&acc)[NT][4], const uint32_t (&a)[KC][4],
                                       const bf16* b, int lane) {
  static_assert(NT % 2 == 0, "mma_nn: NT even");
  // Lanes 0-15 address k rows 0-15 at column 0, lanes 16-31 the same rows at column 8; transposed,
  // the four matrices are b0, b1 of n-tile 2np, then b0, b1 of n-tile 2np + 1.
  const bf16* b_lane = b + (lane & 15) * LD + (lane >> 4) * 8;
#pragma unroll
  for (int kk = 0; kk < KC; ++kk) {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t bfr[4];
      ldsm_x4_trans(bfr, b_lane + kk * 16 * LD + np * 16);
      mma_bf16(acc[2 * np], a[kk], bfr[0], bfr[1]);
      mma_bf16(acc[2 * np + 1], a[kk], bfr[2], bfr[3]);
    }
  }
}

// Max / sum over the 4 lanes of a quad (the threads holding one accumulator row).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

}  // namespace strata::cuda::mma
