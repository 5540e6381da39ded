// FlashAttention-2 style causal attention, scalar FP32 version (see flash_attention.h for the
// algorithm and the numerics). Tiles: 64 query rows x 64 keys; 256 threads as a 16 x 16 grid
// (ty = tid / 16, tx = tid % 16). A thread owns rows ty + 16 i (i < 4) and either key columns
// tx + 16 j (j < 4) of a score tile or head-dim columns tx + 16 j (j < HD / 16) of an output
// tile. The 16 threads of a row are 16 consecutive lanes of one warp, so row reductions are
// shuffles. Shared tiles have odd row strides (HD + 1, 65), which keeps the column walks free of
// bank conflicts.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/flash_attention.h"

namespace strata::cuda {
namespace {

constexpr int kTile = 64;      // query rows per tile = keys per tile
constexpr int kThreads = 256;  // 16 x 16
constexpr int kSLd = kTile + 1;

__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ void store(float* p, float x) {
  *p = x;
}
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) {
  *p = __float2bfloat16_rn(x);
}

// Rounds to bf16 (nearest even) and back where the bf16 path rounds an operand; identity for f32.
template <typename InT>
__device__ __forceinline__ float operand(float x) {
  if constexpr (std::is_same_v<InT, __nv_bfloat16>) {
    return __bfloat162float(__float2bfloat16_rn(x));
  } else {
    return x;
  }
}

// Reduction over the 16 lanes of a row (lanes differing in their low 4 bits).
__device__ __forceinline__ float row_max(float v) {
  for (int off = 8; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
__device__ __forceinline__ float row_sum(float v) {
  for (int off = 8; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// tile[r][d] (stride HD + 1) = src[(row0 + r) * stride + d] for rows < t, zero past t: zeros,
// not garbage, because masked probabilities are 0 and 0 * NaN would still be NaN. `Round`
// rounds the values to bf16 (the backward's dO in the bf16 path).
template <int HD, bool Round = false, typename T>
__device__ __forceinline__ void load_tile(float* tile, const T* src, int64_t stride, int row0,
                                          int t) {
  for (int idx = threadIdx.x; idx < kTile * HD; idx += kThreads) {
    const int r = idx / HD, d = idx % HD;
    float v = 0.0f;
    if (row0 + r < t) v = to_float(src[static_cast<int64_t>(row0 + r) * stride + d]);
    if constexpr (Round) v = __bfloat162float(__float2bfloat16_rn(v));
    tile[r * (HD + 1) + d] = v;
  }
}

// Loads lse and D of a query tile into shared memory (0 past t; those rows are masked anyway).
__device__ __forceinline__ void load_rows(float* lse_s, float* d_s, const float* lse,
                                          const float* dsum, int q0, int t) {
  if (threadIdx.x < kTile) {
    const int r = q0 + threadIdx.x;
    lse_s[threadIdx.x] = r < t ? lse[r] : 0.0f;
    d_s[threadIdx.x] = r < t ? dsum[r] : 0.0f;
  }
}

// ---- Forward ---------------------------------------------------------------------------------
template <int HD, typename InT, typename OutT>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(OutT* __restrict__ out, float* __restrict__ lse, const InT* __restrict__ qkv,
                   int t, int nh, int nkv, float scale) {
  constexpr int LD = HD + 1, NJ = HD / 16;
  extern __shared__ float smem[];
  float* qs = smem;
  float* ks = qs + kTile * LD;
  float* vs = ks + kTile * LD;
  float* ps = vs + kTile * LD;  // [64][kSLd]

  // The last query tiles have the most keys: launching them first evens out the tail.
  const int qb = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, bi = blockIdx.z, g = h / (nh / nkv);
  const int64_t stride = static_cast<int64_t>(nh + 2 * nkv) * HD;
  const InT* base = qkv + static_cast<int64_t>(bi) * t * stride;
  const int q0 = qb * kTile;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;

  load_tile<HD>(qs, base + static_cast<int64_t>(h) * HD, stride, q0, t);
  float m[4], l[4], o[4][NJ];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; ++j) o[i][j] = 0.0f;
  }

  for (int kb = 0; kb <= qb; ++kb) {
    const int k0 = kb * kTile;
    __syncthreads();  // the previous tile's ks, vs, ps are no longer read
    load_tile<HD>(ks, base + static_cast<int64_t>(nh + g) * HD, stride, k0, t);
    load_tile<HD>(vs, base + static_cast<int64_t>(nh + nkv + g) * HD, stride, k0, t);
    __syncthreads();

    float s[4][4] = {};
    for (int d = 0; d < HD; ++d) {
      float qv[4], kv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) qv[i] = qs[(ty + 16 * i) * LD + d];
#pragma unroll
      for (int j = 0; j < 4; ++j) kv[j] = ks[(tx + 16 * j) * LD + d];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
    }

    // Online softmax. Key 0 is in the first tile and visible to every row, so m is finite from
    // the first tile on and exp(m_old - m_new) never sees -inf - -inf.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int qpos = q0 + ty + 16 * i;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s[i][j] = k0 + tx + 16 * j > qpos ? -INFINITY : s[i][j] * scale;
        mx = fmaxf(mx, s[i][j]);
      }
      const float m_new = fmaxf(m[i], row_max(mx));
      const float corr = expf(m[i] - m_new);  // 0 on the first tile (m = -inf)
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float p = expf(s[i][j] - m_new);
        sum += p;  // the unrounded P, as FlashAttention-2 and the CPU kernel
        ps[(ty + 16 * i) * kSLd + tx + 16 * j] = operand<InT>(p);
      }
      l[i] = l[i] * corr + row_sum(sum);
      m[i] = m_new;
#pragma unroll
      for (int j = 0; j < NJ; ++j) o[i][j] *= corr;
    }
    __syncthreads();

    for (int c = 0; c < kTile; ++c) {
      float pv[4], vv[NJ];
#pragma unroll
      for (int i = 0; i < 4; ++i) pv[i] = ps[(ty + 16 * i) * kSLd + c];
#pragma unroll
      for (int j = 0; j < NJ; ++j) vv[j] = vs[c * LD + tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < NJ; ++j) o[i][j] = fmaf(pv[i], vv[j], o[i][j]);
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = q0 + ty + 16 * i;
    if (r >= t) continue;
    const float inv = 1.0f / l[i];
    OutT* orow = out + (static_cast<int64_t>(bi) * t + r) * nh * HD + static_cast<int64_t>(h) * HD;
#pragma unroll
    for (int j = 0; j < NJ; ++j) store(orow + tx + 16 * j, o[i][j] * inv);
    if (tx == 0) lse[(static_cast<int64_t>(bi) * nh + h) * t + r] = m[i] + logf(l[i]);
  }
}

// ---- Backward ----------------------------------------------------------------------------------
// D[bi, h, r] = sum_d dO[r, d] O[r, d], one warp per (row, head); dO rounded to bf16 in the bf16
// path so that D matches the dO that dP = dO V^T uses (then sum_j dS_ij stays ~0).
template <bool RoundDo, typename OutT>
__global__ void __launch_bounds__(kThreads)
    dsum_kernel(float* __restrict__ dsum, const float* __restrict__ dout,
                const OutT* __restrict__ out, int64_t rows, int t, int nh, int hd) {
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= rows * nh) return;
  const int64_t row = w / nh;
  const int h = static_cast<int>(w % nh);
  const int64_t off = row * nh * hd + static_cast<int64_t>(h) * hd;
  float acc = 0.0f;
  for (int d = lane; d < hd; d += 32) {
    float g = dout[off + d];
    if constexpr (RoundDo) g = __bfloat162float(__float2bfloat16_rn(g));
    acc = fmaf(g, to_float(out[off + d]), acc);
  }
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) {
    const int64_t bi = row / t, r = row % t;
    dsum[(bi * nh + h) * t + r] = acc;
  }
}

// S = Q K^T and dP = dO V^T for one (query tile, key tile) pair, then P = exp(S * scale - lse)
// and dS = P (dP - D), masked (causal, rows past t) and rounded as the bf16 path needs; written
// to ps / dss ([64][kSLd], row = query, column = key; ps may be null when only dS is needed).
// Shared by the dK/dV pass and the dQ pass so that both see bit-identical P and dS.
template <int HD, typename InT>
__device__ __forceinline__ void probs_and_ds(float* ps, float* dss, const float* qs,
                                             const float* dos, const float* ks, const float* vs,
                                             const float* lse_s, const float* d_s, int q0, int k0,
                                             int t, float scale) {
  constexpr int LD = HD + 1;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  float s[4][4] = {}, dp[4][4] = {};
  for (int d = 0; d < HD; ++d) {
    float qv[4], dov[4], kv[4], vv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      qv[i] = qs[(ty + 16 * i) * LD + d];
      dov[i] = dos[(ty + 16 * i) * LD + d];
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      kv[j] = ks[(tx + 16 * j) * LD + d];
      vv[j] = vs[(tx + 16 * j) * LD + d];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
        dp[i][j] = fmaf(dov[i], vv[j], dp[i][j]);
      }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty + 16 * i, qpos = q0 + r;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = tx + 16 * j;
      const bool visible = qpos < t && k0 + c <= qpos;
      const float p = visible ? expf(s[i][j] * scale - lse_s[r]) : 0.0f;
      const float ds = p * (dp[i][j] - d_s[r]);
      if (ps) ps[r * kSLd + c] = operand<InT>(p);
      dss[r * kSLd + c] = operand<InT>(ds);
    }
  }
}

// One block per (key tile, kv head, batch): dK and dV of the tile's keys, summed over the query
// heads of the group and the query tiles from the diagonal on, in a fixed order.
template <int HD, typename InT>
__global__ void __launch_bounds__(kThreads)
    dkv_kernel(float* __restrict__ dqkv, const float* __restrict__ dout,
               const InT* __restrict__ qkv, const float* __restrict__ lse,
               const float* __restrict__ dsum, int t, int nh, int nkv, float scale) {
  constexpr int LD = HD + 1, NJ = HD / 16;
  constexpr bool kRound = std::is_same_v<InT, __nv_bfloat16>;
  extern __shared__ float smem[];
  float* ks = smem;
  float* vs = ks + kTile * LD;
  float* qs = vs + kTile * LD;
  float* dos = qs + kTile * LD;
  float* ps = dos + kTile * LD;
  float* dss = ps + kTile * kSLd;
  float* lse_s = dss + kTile * kSLd;
  float* d_s = lse_s + kTile;

  const int kb = blockIdx.x;  // the first key tiles see the most query tiles: launched first
  const int g = blockIdx.y, bi = blockIdx.z, group = nh / nkv;
  const int64_t stride = static_cast<int64_t>(nh + 2 * nkv) * HD;
  const int64_t ostride = static_cast<int64_t>(nh) * HD;
  const InT* base = qkv + static_cast<int64_t>(bi) * t * stride;
  const float* dobase = dout + static_cast<int64_t>(bi) * t * ostride;
  const int k0 = kb * kTile, nqt = (t + kTile - 1) / kTile;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;

  load_tile<HD>(ks, base + static_cast<int64_t>(nh + g) * HD, stride, k0, t);
  load_tile<HD>(vs, base + static_cast<int64_t>(nh + nkv + g) * HD, stride, k0, t);
  float dk[4][NJ] = {}, dv[4][NJ] = {};

  for (int h = g * group; h < (g + 1) * group; ++h) {
    const float* lse_h = lse + (static_cast<int64_t>(bi) * nh + h) * t;
    const float* dsum_h = dsum + (static_cast<int64_t>(bi) * nh + h) * t;
    for (int qb = kb; qb < nqt; ++qb) {
      const int q0 = qb * kTile;
      __syncthreads();  // the previous tile's qs, dos, ps, dss are no longer read
      load_tile<HD>(qs, base + static_cast<int64_t>(h) * HD, stride, q0, t);
      load_tile<HD, kRound>(dos, dobase + static_cast<int64_t>(h) * HD, ostride, q0, t);
      load_rows(lse_s, d_s, lse_h, dsum_h, q0, t);
      __syncthreads();
      probs_and_ds<HD, InT>(ps, dss, qs, dos, ks, vs, lse_s, d_s, q0, k0, t, scale);
      __syncthreads();
      // dV[c] += sum_r P[r][c] dO[r]; dK[c] += sum_r dS[r][c] Q[r] (rows c = ty + 16 i).
      for (int r = 0; r < kTile; ++r) {
        float pv[4], dsv[4], dov[NJ], qv[NJ];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          pv[i] = ps[r * kSLd + ty + 16 * i];
          dsv[i] = dss[r * kSLd + ty + 16 * i];
        }
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          dov[j] = dos[r * LD + tx + 16 * j];
          qv[j] = qs[r * LD + tx + 16 * j];
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < NJ; ++j) {
            dv[i][j] = fmaf(pv[i], dov[j], dv[i][j]);
            dk[i][j] = fmaf(dsv[i], qv[j], dk[i][j]);
          }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int key = k0 + ty + 16 * i;
    if (key >= t) continue;
    float* row = dqkv + (static_cast<int64_t>(bi) * t + key) * stride;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      row[static_cast<int64_t>(nh + g) * HD + tx + 16 * j] = dk[i][j] * scale;
      row[static_cast<int64_t>(nh + nkv + g) * HD + tx + 16 * j] = dv[i][j];
    }
  }
}

// One block per (query tile, head, batch): dQ = scale * sum over key tiles of dS K, recomputing
// S and dP (the deterministic alternative to atomically adding dQ from the dK/dV pass).
template <int HD, typename InT>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(float* __restrict__ dqkv, const float* __restrict__ dout, const InT* __restrict__ qkv,
              const float* __restrict__ lse, const float* __restrict__ dsum, int t, int nh, int nkv,
              float scale) {
  constexpr int LD = HD + 1, NJ = HD / 16;
  constexpr bool kRound = std::is_same_v<InT, __nv_bfloat16>;
  extern __shared__ float smem[];
  float* qs = smem;
  float* dos = qs + kTile * LD;
  float* ks = dos + kTile * LD;
  float* vs = ks + kTile * LD;
  float* dss = vs + kTile * LD;
  float* lse_s = dss + kTile * kSLd;
  float* d_s = lse_s + kTile;

  const int qb = gridDim.x - 1 - blockIdx.x;  // most key tiles first
  const int h = blockIdx.y, bi = blockIdx.z, g = h / (nh / nkv);
  const int64_t stride = static_cast<int64_t>(nh + 2 * nkv) * HD;
  const int64_t ostride = static_cast<int64_t>(nh) * HD;
  const InT* base = qkv + static_cast<int64_t>(bi) * t * stride;
  const int q0 = qb * kTile;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;

  load_tile<HD>(qs, base + static_cast<int64_t>(h) * HD, stride, q0, t);
  load_tile<HD, kRound>(dos, dout + static_cast<int64_t>(bi) * t * ostride + h * HD, ostride, q0,
                        t);
  load_rows(lse_s, d_s, lse + (static_cast<int64_t>(bi) * nh + h) * t,
            dsum + (static_cast<int64_t>(bi) * nh + h) * t, q0, t);
  float dq[4][NJ] = {};

  for (int kb = 0; kb <= qb; ++kb) {
    const int k0 = kb * kTile;
    __syncthreads();  // the previous tile's ks, dss are no longer read
    load_tile<HD>(ks, base + static_cast<int64_t>(nh + g) * HD, stride, k0, t);
    load_tile<HD>(vs, base + static_cast<int64_t>(nh + nkv + g) * HD, stride, k0, t);
    __syncthreads();
    probs_and_ds<HD, InT>(nullptr, dss, qs, dos, ks, vs, lse_s, d_s, q0, k0, t, scale);
    __syncthreads();
    for (int c = 0; c < kTile; ++c) {
      float dsv[4], kv[NJ];
#pragma unroll
      for (int i = 0; i < 4; ++i) dsv[i] = dss[(ty + 16 * i) * kSLd + c];
#pragma unroll
      for (int j = 0; j < NJ; ++j) kv[j] = ks[c * LD + tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < NJ; ++j) dq[i][j] = fmaf(dsv[i], kv[j], dq[i][j]);
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = q0 + ty + 16 * i;
    if (r >= t) continue;
    float* row = dqkv + (static_cast<int64_t>(bi) * t + r) * stride + static_cast<int64_t>(h) * HD;
#pragma unroll
    for (int j = 0; j < NJ; ++j) row[tx + 16 * j] = dq[i][j] * scale;
  }
}

// ---- Host side ---------------------------------------------------------------------------------
void check_shape(const char* what, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd) {
  STRATA_CHECK(b > 0 && t > 0 && nh > 0 && nkv > 0, what, ": sizes must be positive (b=", b,
               " t=", t, " nh=", nh, " nkv=", nkv, ")");
  STRATA_CHECK(nh % nkv == 0, what, ": n_head ", nh, " is not a multiple of n_kv_head ", nkv);
  STRATA_CHECK(flash_attention_supports(hd), what, ": head_dim ", hd,
               " is not supported on the GPU (supported: 64, 128)");
  STRATA_CHECK(b <= 65535 && nh <= 65535 && t <= (int64_t{1} << 30) &&
                   b * t * (nh + 2 * nkv) * hd < (int64_t{1} << 62),
               what, ": sizes too large (b=", b, " t=", t, " nh=", nh, ")");
}

template <typename Kernel>
void launch(Kernel kernel, dim3 grid, size_t smem, cudaStream_t stream, auto... args) {
  // Above 48 KiB of dynamic shared memory needs the opt-in, per kernel (cheap; set every time so
  // that it holds on whichever device is current).
  STRATA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)));
  kernel<<<grid, kThreads, smem, stream>>>(args...);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <int HD, typename InT, typename OutT>
void forward_hd(OutT* out, float* lse, const InT* qkv, int64_t b, int64_t t, int64_t nh,
                int64_t nkv, cudaStream_t stream) {
  const size_t smem = sizeof(float) * (3 * kTile * (HD + 1) + kTile * kSLd);
  const dim3 grid(static_cast<unsigned>((t + kTile - 1) / kTile), static_cast<unsigned>(nh),
                  static_cast<unsigned>(b));
  launch(forward_kernel<HD, InT, OutT>, grid, smem, stream, out, lse, qkv, static_cast<int>(t),
         static_cast<int>(nh), static_cast<int>(nkv), 1.0f / std::sqrt(static_cast<float>(HD)));
}

template <typename InT, typename OutT>
void forward_any(OutT* out, float* lse, const InT* qkv, int64_t b, int64_t t, int64_t nh,
                 int64_t nkv, int64_t hd, cudaStream_t stream) {
  check_shape("flash_attention_forward", b, t, nh, nkv, hd);
  if (hd == 64) {
    forward_hd<64>(out, lse, qkv, b, t, nh, nkv, stream);
  } else {
    forward_hd<128>(out, lse, qkv, b, t, nh, nkv, stream);
  }
}

template <int HD, typename InT>
void backward_hd(float* dqkv, const float* dsum, const float* dout, const InT* qkv,
                 const float* lse, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                 cudaStream_t stream) {
  const unsigned tiles = static_cast<unsigned>((t + kTile - 1) / kTile);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  const int ti = static_cast<int>(t), nhi = static_cast<int>(nh), nkvi = static_cast<int>(nkv);
  const size_t dkv_smem = sizeof(float) * (4 * kTile * (HD + 1) + 2 * kTile * kSLd + 2 * kTile);
  launch(dkv_kernel<HD, InT>, dim3(tiles, static_cast<unsigned>(nkv), static_cast<unsigned>(b)),
         dkv_smem, stream, dqkv, dout, qkv, lse, dsum, ti, nhi, nkvi, scale);
  const size_t dq_smem = sizeof(float) * (4 * kTile * (HD + 1) + kTile * kSLd + 2 * kTile);
  launch(dq_kernel<HD, InT>, dim3(tiles, static_cast<unsigned>(nh), static_cast<unsigned>(b)),
         dq_smem, stream, dqkv, dout, qkv, lse, dsum, ti, nhi, nkvi, scale);
}

template <typename InT, typename OutT>
void backward_any(float* dqkv, void* workspace, const float* dout, const InT* qkv, const OutT* out,
                  const float* lse, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                  cudaStream_t stream) {
  check_shape("flash_attention_backward", b, t, nh, nkv, hd);
  STRATA_CHECK(workspace != nullptr, "flash_attention_backward: null workspace (needs ",
               flash_attention_backward_workspace(b, t, nh, nkv, hd), " bytes)");
  float* dsum = static_cast<float*>(workspace);
  constexpr bool kRound = std::is_same_v<InT, __nv_bfloat16>;
  const int64_t warps = b * t * nh;
  const unsigned blocks = static_cast<unsigned>((warps * 32 + kThreads - 1) / kThreads);
  dsum_kernel<kRound, OutT><<<blocks, kThreads, 0, stream>>>(
      dsum, dout, out, b * t, static_cast<int>(t), static_cast<int>(nh), static_cast<int>(hd));
  STRATA_CUDA_CHECK_LAUNCH();
  if (hd == 64) {
    backward_hd<64>(dqkv, dsum, dout, qkv, lse, b, t, nh, nkv, stream);
  } else {
    backward_hd<128>(dqkv, dsum, dout, qkv, lse, b, t, nh, nkv, stream);
  }
}

const __nv_bfloat16* as_bf16(const uint16_t* p) {
  return reinterpret_cast<const __nv_bfloat16*>(p);
}

}  // namespace

bool flash_attention_supports(int64_t hd) {
  return hd == 64 || hd == 128;
}

int64_t flash_attention_forward_workspace(int64_t, int64_t, int64_t, int64_t, int64_t) {
  return 0;
}

int64_t flash_attention_backward_workspace(int64_t b, int64_t t, int64_t nh, int64_t, int64_t) {
  return static_cast<int64_t>(sizeof(float)) * b * nh * t;
}

void flash_attention_forward(float* out, float* lse, const float* qkv, int64_t b, int64_t t,
                             int64_t nh, int64_t nkv, int64_t hd, cudaStream_t stream) {
  forward_any(out, lse, qkv, b, t, nh, nkv, hd, stream);
}

void flash_attention_forward_bf16(float* out, float* lse, const uint16_t* qkv16, int64_t b,
                                  int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                                  cudaStream_t stream) {
  forward_any(out, lse, as_bf16(qkv16), b, t, nh, nkv, hd, stream);
}

void flash_attention_forward_bf16(uint16_t* out16, float* lse, const uint16_t* qkv16, int64_t b,
                                  int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                                  cudaStream_t stream) {
  forward_any(reinterpret_cast<__nv_bfloat16*>(out16), lse, as_bf16(qkv16), b, t, nh, nkv, hd,
              stream);
}

void flash_attention_backward(float* dqkv, void* workspace, const float* dout, const float* qkv,
                              const float* out, const float* lse, int64_t b, int64_t t, int64_t nh,
                              int64_t nkv, int64_t hd, cudaStream_t stream) {
  backward_any(dqkv, workspace, dout, qkv, out, lse, b, t, nh, nkv, hd, stream);
}

void flash_attention_backward_bf16(float* dqkv, void* workspace, const float* dout,
                                   const uint16_t* qkv16, const float* out, const float* lse,
                                   int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                                   cudaStream_t stream) {
  backward_any(dqkv, workspace, dout, as_bf16(qkv16), out, lse, b, t, nh, nkv, hd, stream);
}

void flash_attention_backward_bf16(float* dqkv, void* workspace, const float* dout,
                                   const uint16_t* qkv16, const uint16_t* out16, const float* lse,
                                   int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd,
                                   cudaStream_t stream) {
  backward_any(dqkv, workspace, dout, as_bf16(qkv16), as_bf16(out16), lse, b, t, nh, nkv, hd,
               stream);
}

}  // namespace strata::cuda
