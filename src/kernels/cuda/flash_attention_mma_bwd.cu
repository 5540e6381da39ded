// Tensor-core causal flash attention, backward (see flash_attention_mma.h for the contract).
// Deterministic: every dq, dk, dv element is written once, by one thread, after a fixed order of
// additions, so results are bitwise reproducible run to run (no atomics).
//
//  1. prep: D = rowsum(bf16(dO) o O) and dO rounded to bf16, both into the workspace. D takes
//     the rounded dO, as dP = bf16(dO) V^T does, so that sum_j dS_ij stays ~0. Converting dO
//     once also halves what the two passes below read, tile after tile.
//  2. dK/dV: one block of 4 warps per (64-key tile, kv head, batch); each warp owns 16 keys and
//     their dK, dV rows in f32 registers. For every query head of the group and every query tile
//     from the diagonal on: S^T = K Q^T and dP^T = V dO^T (keys as the mma's M dimension, so P^T
//     and dS^T come out of the accumulators already in A-fragment layout), P^T = exp2(S^T
//     log2(e) / sqrt(hd) - lse log2(e)), dS^T = P^T (dP^T - D), then dV += bf16(P^T) dO and
//     dK += bf16(dS^T) Q. The next query tile, dO tile, lse and D are fetched by cp.async into
//     the other half of a double buffer while this one is used.
//  3. dQ: one block per (64-row query tile, head, batch), each warp 16 rows; over the key tiles
//     up to the diagonal it recomputes S = Q K^T, dP = dO V^T, P and dS, and adds dQ += bf16(dS) K
//     (K, V double-buffered). Recomputing S and dP is the price of no atomics: 7 tile products
//     per (query, key) tile pair instead of 5.
// dK and dQ are scaled by 1 / sqrt(hd) once, at the end (dS is rounded unscaled, as the scalar
// kernel does).
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/flash_attention_mma.h"
#include "kernels/cuda/flash_attention_mma_common.cuh"
#include "kernels/cuda/mma_tile.cuh"

namespace strata::cuda {
namespace mma {
namespace {

constexpr int kPrepThreads = 256;

// Blocks per SM the dK/dV and dQ kernels are compiled for: their ~55 KB (HD 64) / ~103 KB
// (HD 128) of shared memory allow 4 / 2. For HD 64, 3 caps registers at 168 without spills
// (4 would cap at 128 and spill); HD 128 needs up to 255 registers (2 blocks).
template <int HD>
constexpr int kBwdBlocksPerSm = HD == 64 ? 3 : 2;

__device__ __forceinline__ float2 load2(const float* p) {
  return *reinterpret_cast<const float2*>(p);
}
__device__ __forceinline__ float2 load2(const bf16* p) {
  const uint32_t u = *reinterpret_cast<const uint32_t*>(p);
  return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}
__device__ __forceinline__ void store2(float* p, float a, float b) {
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
}

// One warp per (row, head): dO rounded to bf16 into do16, D = sum_d bf16(dO) O into dsum[b, nh,
// t]. Lanes take pairs of columns (hd is 64 or 128, a multiple of 64).
template <typename OutT>
__global__ void __launch_bounds__(kPrepThreads)
    prep_kernel(float* __restrict__ dsum, bf16* __restrict__ do16, const float* __restrict__ dout,
                const OutT* __restrict__ out, int64_t rows, int t, int nh, int hd) {
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * kPrepThreads + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (w >= rows * nh) return;  // whole warps leave together (kPrepThreads % 32 == 0)
  const int64_t row = w / nh;
  const int h = static_cast<int>(w % nh);
  const int64_t off = row * nh * hd + static_cast<int64_t>(h) * hd;
  float acc = 0.0f;
  for (int d = 2 * lane; d < hd; d += 64) {
    const float2 g = load2(dout + off + d);
    const uint32_t packed = pack_bf16(g.x, g.y);
    *reinterpret_cast<uint32_t*>(do16 + off + d) = packed;
    const float2 o = load2(out + off + d);
    acc = fmaf(__uint_as_float(packed << 16), o.x, acc);
    acc = fmaf(__uint_as_float(packed & 0xffff0000u), o.y, acc);
  }
  for (int s = 16; s > 0; s /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, s);
  if (lane == 0) {
    const int64_t bi = row / t, r = row % t;
    dsum[(bi * nh + h) * t + r] = acc;
  }
}

template <int HD>
__global__ void __launch_bounds__(kThreads, kBwdBlocksPerSm<HD>)
    dkv_kernel(float* __restrict__ dqkv, const bf16* __restrict__ qkv,
               const bf16* __restrict__ do16, const float* __restrict__ lse,
               const float* __restrict__ dsum, int t, int nh, int nkv, float scale,
               float scale_log2) {
  constexpr int LD = HD + 8, NS = kTile / 8, NO = HD / 8, TILE = kTile * LD;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* ks = reinterpret_cast<bf16*>(smem_raw);
  bf16* vs = ks + TILE;
  bf16* qs = vs + TILE;                                     // [2][TILE]
  bf16* dos = qs + 2 * TILE;                                // [2][TILE]
  float* lse_s = reinterpret_cast<float*>(dos + 2 * TILE);  // [2][kTile]
  float* d_s = lse_s + 2 * kTile;                           // [2][kTile]

  // grid (kv head, batch, key tile), tiles last: the first key tiles (the most query tiles) of
  // every head are launched first.
  const int g = static_cast<int>(blockIdx.x), bi = static_cast<int>(blockIdx.y);
  const int kb = static_cast<int>(blockIdx.z), group = nh / nkv;
  const int64_t stride = static_cast<int64_t>(nh + 2 * nkv) * HD;
  const int64_t ostride = static_cast<int64_t>(nh) * HD;
  const bf16* base = qkv + static_cast<int64_t>(bi) * t * stride;
  const bf16* dobase = do16 + static_cast<int64_t>(bi) * t * ostride;
  const int k0 = kb * kTile, nqt = (t + kTile - 1) / kTile;
  const int per_head = nqt - kb, steps = group * per_head;  // (head, query tile) pairs
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int gid = lane >> 2, tig = lane & 3;
  const int key0 = k0 + warp * 16 + gid;  // this thread's keys: key0 (c0, c1) and key0 + 8

  // Step i: query head g * group + i / per_head, query tile kb + i % per_head.
  const auto fetch = [&](int i, int buf) {
    const int h = g * group + i / per_head, q0 = (kb + i % per_head) * kTile;
    const int64_t hrow = (static_cast<int64_t>(bi) * nh + h) * t;
    load_tile_async<kTile, HD, kThreads>(qs + buf * TILE, base + static_cast<int64_t>(h) * HD,
                                         stride, q0, t);
    load_tile_async<kTile, HD, kThreads>(dos + buf * TILE, dobase + static_cast<int64_t>(h) * HD,
                                         ostride, q0, t);
    load_rows_async<kTile>(lse_s + buf * kTile, lse + hrow, q0, t);
    load_rows_async<kTile>(d_s + buf * kTile, dsum + hrow, q0, t);
  };
  load_tile_async<kTile, HD, kThreads>(ks, base + static_cast<int64_t>(nh + g) * HD, stride, k0, t);
  load_tile_async<kTile, HD, kThreads>(vs, base + static_cast<int64_t>(nh + nkv + g) * HD, stride,
                                       k0, t);
  fetch(0, 0);
  cp_async_commit();

  float dk[NO][4], dv[NO][4];
#pragma unroll
  for (int j = 0; j < NO; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[j][e] = dv[j][e] = 0.0f;

  for (int i = 0; i < steps; ++i) {
    const int buf = i & 1;
    cp_async_wait_all();
    __syncthreads();  // step i's tiles visible to all; every warp is done with step i - 1's
    if (i + 1 < steps) {
      fetch(i + 1, buf ^ 1);
      cp_async_commit();
    }
    const int q0 = (kb + i % per_head) * kTile;
    const bf16* qt = qs + buf * TILE;
    const bf16* dot = dos + buf * TILE;
    const float* lt = lse_s + buf * kTile;
    const float* dt = d_s + buf * kTile;

    // Masked: queries before the key (the diagonal tile) and query rows past t (the last tile;
    // their Q and dO rows are zero-filled, lse and D read as 0).
    const bool edge = q0 == k0 || q0 + kTile > t;
    // P^T, and dV += bf16(P^T) dO before dP^T exists: fewer accumulators live at once.
    float s[NS][4];
#pragma unroll
    for (int j = 0; j < NS; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    mma_nt<HD, NS, LD>(s, ks + warp * 16 * LD, qt, lane);  // S^T (keys x queries)
#pragma unroll
    for (int j = 0; j < NS; ++j) {
      const int c = j * 8 + 2 * tig;  // query columns c, c + 1 of the tile
      const float2 lv = *reinterpret_cast<const float2*>(lt + c);
      const float nl[2] = {-lv.x * kLog2e, -lv.y * kLog2e};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int q = q0 + c + (e & 1), key = key0 + (e >> 1) * 8;
        const float p = exp2f(fmaf(s[j][e], scale_log2, nl[e & 1]));
        s[j][e] = edge && (key > q || q >= t) ? 0.0f : p;
      }
    }
    {
      uint32_t pa[NS / 2][4];
      c_to_a<NS / 2>(pa, s);                      // bf16(P^T)
      mma_nn<NS / 2, NO, LD>(dv, pa, dot, lane);  // dV += P^T dO
    }

    float dp[NS][4];
#pragma unroll
    for (int j = 0; j < NS; ++j) dp[j][0] = dp[j][1] = dp[j][2] = dp[j][3] = 0.0f;
    mma_nt<HD, NS, LD>(dp, vs + warp * 16 * LD, dot, lane);  // dP^T
#pragma unroll
    for (int j = 0; j < NS; ++j) {
      const float2 dd = *reinterpret_cast<const float2*>(dt + j * 8 + 2 * tig);
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[j][e] = s[j][e] * (dp[j][e] - ((e & 1) ? dd.y : dd.x));
    }
    uint32_t da[NS / 2][4];
    c_to_a<NS / 2>(da, dp);                    // bf16(dS^T)
    mma_nn<NS / 2, NO, LD>(dk, da, qt, lane);  // dK += dS^T Q
  }

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = key0 + half * 8;
    if (key >= t) continue;
    float* row = dqkv + (static_cast<int64_t>(bi) * t + key) * stride + 2 * tig;
    float* dkr = row + static_cast<int64_t>(nh + g) * HD;
    float* dvr = row + static_cast<int64_t>(nh + nkv + g) * HD;
#pragma unroll
    for (int j = 0; j < NO; ++j) {
      store2(dkr + j * 8, dk[j][2 * half] * scale, dk[j][2 * half + 1] * scale);
      store2(dvr + j * 8, dv[j][2 * half], dv[j][2 * half + 1]);
    }
  }
}

template <int HD>
__global__ void __launch_bounds__(kThreads, kBwdBlocksPerSm<HD>)
    dq_kernel(float* __restrict__ dqkv, const bf16* __restrict__ qkv, const bf16* __restrict__ do16,
              const float* __restrict__ lse, const float* __restrict__ dsum, int t, int nh, int nkv,
              float scale, float scale_log2) {
  constexpr int LD = HD + 8, NS = kTile / 8, NO = HD / 8, TILE = kTile * LD;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* qs = reinterpret_cast<bf16*>(smem_raw);
  bf16* dos = qs + TILE;
  bf16* ks = dos + TILE;     // [2][TILE]
  bf16* vs = ks + 2 * TILE;  // [2][TILE]

  const int h = static_cast<int>(blockIdx.x), bi = static_cast<int>(blockIdx.y);
  const int qb = static_cast<int>(gridDim.z - 1 - blockIdx.z);  // most key tiles first
  const int g = h / (nh / nkv);
  const int64_t stride = static_cast<int64_t>(nh + 2 * nkv) * HD;
  const int64_t ostride = static_cast<int64_t>(nh) * HD;
  const bf16* base = qkv + static_cast<int64_t>(bi) * t * stride;
  const bf16* kg = base + static_cast<int64_t>(nh + g) * HD;
  const bf16* vg = base + static_cast<int64_t>(nh + nkv + g) * HD;
  const int q0 = qb * kTile;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int gid = lane >> 2, tig = lane & 3;
  const int row0 = q0 + warp * 16 + gid;  // this thread's rows: row0 (c0, c1) and row0 + 8

  load_tile_async<kTile, HD, kThreads>(qs, base + static_cast<int64_t>(h) * HD, stride, q0, t);
  load_tile_async<kTile, HD, kThreads>(
      dos, do16 + static_cast<int64_t>(bi) * t * ostride + static_cast<int64_t>(h) * HD, ostride,
      q0, t);
  load_tile_async<kTile, HD, kThreads>(ks, kg, stride, 0, t);
  load_tile_async<kTile, HD, kThreads>(vs, vg, stride, 0, t);
  cp_async_commit();

  // lse (as -lse log2(e)) and D of this thread's two rows; 0 past t (those rows are not written).
  float nl[2], dd[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + half * 8;
    const int64_t at = (static_cast<int64_t>(bi) * nh + h) * t + row;
    nl[half] = row < t ? -lse[at] * kLog2e : 0.0f;
    dd[half] = row < t ? dsum[at] : 0.0f;
  }

  float dq[NO][4];
#pragma unroll
  for (int j = 0; j < NO; ++j) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;

  for (int kb = 0; kb <= qb; ++kb) {
    const int buf = kb & 1, k0 = kb * kTile;
    cp_async_wait_all();
    __syncthreads();  // K(kb), V(kb) visible to all; every warp is done with K(kb-1), V(kb-1)
    if (kb < qb) {
      load_tile_async<kTile, HD, kThreads>(ks + (buf ^ 1) * TILE, kg, stride, k0 + kTile, t);
      load_tile_async<kTile, HD, kThreads>(vs + (buf ^ 1) * TILE, vg, stride, k0 + kTile, t);
      cp_async_commit();
    }
    const bf16* kt = ks + buf * TILE;

    float s[NS][4], dp[NS][4];
#pragma unroll
    for (int j = 0; j < NS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.0f;
    mma_nt<HD, NS, LD>(s, qs + warp * 16 * LD, kt, lane);                 // S
    mma_nt<HD, NS, LD>(dp, dos + warp * 16 * LD, vs + buf * TILE, lane);  // dP

    // The causal mask on the diagonal tile only (keys past t only fall there, past every real
    // row; rows past t are not written).
#pragma unroll
    for (int j = 0; j < NS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e >> 1, key = k0 + j * 8 + 2 * tig + (e & 1);
        float p = exp2f(fmaf(s[j][e], scale_log2, nl[half]));
        if (kb == qb && key > row0 + half * 8) p = 0.0f;
        dp[j][e] = p * (dp[j][e] - dd[half]);
      }
    uint32_t da[NS / 2][4];
    c_to_a<NS / 2>(da, dp);                    // bf16(dS)
    mma_nn<NS / 2, NO, LD>(dq, da, kt, lane);  // dQ += dS K
  }

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + half * 8;
    if (row >= t) continue;
    float* dqr = dqkv + (static_cast<int64_t>(bi) * t + row) * stride +
                 static_cast<int64_t>(h) * HD + 2 * tig;
#pragma unroll
    for (int j = 0; j < NO; ++j)
      store2(dqr + j * 8, dq[j][2 * half] * scale, dq[j][2 * half + 1] * scale);
  }
}

template <int HD>
void passes_hd(float* dqkv, const float* dsum, const bf16* do16, const bf16* qkv, const float* lse,
               int64_t b, int64_t t, int64_t nh, int64_t nkv, cudaStream_t stream) {
  const unsigned tiles = static_cast<unsigned>((t + kTile - 1) / kTile);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  const float scale_log2 = kLog2e * scale;
  const int ti = static_cast<int>(t), nhi = static_cast<int>(nh), nkvi = static_cast<int>(nkv);
  const size_t tile_bytes = sizeof(bf16) * kTile * (HD + 8);
  launch(dkv_kernel<HD>, dim3(static_cast<unsigned>(nkv), static_cast<unsigned>(b), tiles),
         6 * tile_bytes + 4 * kTile * sizeof(float), stream, dqkv, qkv, do16, lse, dsum, ti, nhi,
         nkvi, scale, scale_log2);
  launch(dq_kernel<HD>, dim3(static_cast<unsigned>(nh), static_cast<unsigned>(b), tiles),
         6 * tile_bytes, stream, dqkv, qkv, do16, lse, dsum, ti, nhi, nkvi, scale, scale_log2);
}

template <typename OutT>
void backward(float* dqkv, void* workspace, const float* dout, const uint16_t* qkv16,
              const OutT* out, const float* lse, int64_t b, int64_t t, int64_t nh, int64_t nkv,
              int64_t hd, cudaStream_t stream) {
  float* dsum = static_cast<float*>(workspace);
  bf16* do16 = reinterpret_cast<bf16*>(static_cast<char*>(workspace) +
                                       flash_attention_mma_backward_workspace(b, t, nh, nkv, hd) -
                                       2 * b * t * nh * hd);
  const int64_t warps = b * t * nh;
  const unsigned blocks = static_cast<unsigned>((warps * 32 + kPrepThreads - 1) / kPrepThreads);
  prep_kernel<OutT><<<blocks, kPrepThreads, 0, stream>>>(dsum, do16, dout, out, b * t,
                                                         static_cast<int>(t), static_cast<int>(nh),
                                                         static_cast<int>(hd));
  STRATA_CUDA_CHECK_LAUNCH();
  const auto* qkv = reinterpret_cast<const bf16*>(qkv16);
  if (hd == 64) {
    passes_hd<64>(dqkv, dsum, do16, qkv, lse, b, t, nh, nkv, stream);
  } else {
    passes_hd<128>(dqkv, dsum, do16, qkv, lse, b, t, nh, nkv, stream);
  }
}

// The tile grid's z (at most 65535) and the vector loads and stores' alignment.
bool usable(int64_t t, const void* dqkv, const void* workspace, const void* dout, const void* qkv16,
            const void* out, uintptr_t out_align) {
  return (t + kTile - 1) / kTile <= 65535 && aligned(dqkv, 8) && aligned(workspace, 16) &&
         aligned(dout, 8) && aligned(qkv16, 16) && aligned(out, out_align);
}

}  // namespace
}  // namespace mma

void flash_attention_mma_backward_bf16(float* dqkv, void* workspace, const float* dout,
                                       const uint16_t* qkv16, const float* out, const float* lse,
                                       int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                                       cudaStream_t stream) {
  mma::check_shape("flash_attention_backward", b, t, nh, nkv, hd);
  STRATA_CHECK(workspace != nullptr, "flash_attention_backward: null workspace (needs ",
               flash_attention_mma_backward_workspace(b, t, nh, nkv, hd), " bytes)");
  if (!mma::usable(t, dqkv, workspace, dout, qkv16, out, 8)) {
    flash_attention_backward_bf16(dqkv, workspace, dout, qkv16, out, lse, b, t, nh, nkv, hd,
                                  stream);
    return;
  }
  mma::backward(dqkv, workspace, dout, qkv16, out, lse, b, t, nh, nkv, hd, stream);
}

void flash_attention_mma_backward_bf16(float* dqkv, void* workspace, const float* dout,
                                       const uint16_t* qkv16, const uint16_t* out16,
                                       const float* lse, int64_t b, int64_t t, int64_t nh,
                                       int64_t nkv, int64_t hd, cudaStream_t stream) {
  mma::check_shape("flash_attention_backward", b, t, nh, nkv, hd);
  STRATA_CHECK(workspace != nullptr, "flash_attention_backward: null workspace (needs ",
               flash_attention_mma_backward_workspace(b, t, nh, nkv, hd), " bytes)");
  if (!mma::usable(t, dqkv, workspace, dout, qkv16, out16, 4)) {
    flash_attention_backward_bf16(dqkv, workspace, dout, qkv16, out16, lse, b, t, nh, nkv, hd,
                                  stream);
    return;
  }
  mma::backward(dqkv, workspace, dout, qkv16, reinterpret_cast<const mma::bf16*>(out16), lse, b, t,
                nh, nkv, hd, stream);
}

}  // namespace strata::cuda
