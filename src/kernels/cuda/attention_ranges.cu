// Attention with a key range per query row (attention_ranges.h): forward, log-sum-exp merge and
// backward, f32, a warp per row. Tiles of 32 keys (or queries): a lane computes one score with
// a whole dot product over the head dim (its row read from L1/L2, the warp's own row from shared
// memory), the warp then adds the tile into the output columns it owns (lane + 32 c), reading the
// tile's v (or dout, q) rows coalesced.
#include <cmath>

#include "core/error.h"
#include "kernels/cuda/attention_ranges.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {

namespace {

constexpr int kWarps = 4;                              // rows per block
constexpr int kCols = kRangeAttentionMaxHeadDim / 32;  // output columns per lane, at most

__device__ __forceinline__ float dot(const float* __restrict__ a, const float* __restrict__ b,
                                     int hd) {
  float acc = 0.f;
  for (int d = 0; d < hd; ++d) acc = fmaf(a[d], b[d], acc);
  return acc;
}

// Warp `w` of the block copies `hd` floats of `src` into its shared row.
__device__ __forceinline__ void load_row(float* dst, const float* __restrict__ src, int hd,
                                         int lane) {
  for (int d = lane; d < hd; d += 32) dst[d] = src[d];
  __syncwarp();
}

// acc[c] (column lane + 32 c of the head dim) += sum over the tile's rows t of w_t * rows[t],
// where lane t holds w_t and row t sits at rows + t * stride: a warp's product with a tile.
__device__ __forceinline__ void add_weighted_rows(float* acc, float w,
                                                  const float* __restrict__ rows, int64_t stride,
                                                  int tile, int hd, int lane) {
  for (int t = 0; t < tile; ++t) {
    const float wt = __shfl_sync(0xffffffffu, w, t);
    const float* r = rows + t * stride;
    for (int c = 0; c < kCols; ++c) {
      const int d = lane + 32 * c;
      if (d < hd) acc[c] = fmaf(wt, r[d], acc[c]);
    }
  }
}

// grid (ceil(tq / kWarps), nh, b): warp per query row (bb, i) and head h.
__global__ void forward_kernel(float* __restrict__ out, float* __restrict__ lse,
                               const float* __restrict__ q, int64_t q_stride,
                               const float* __restrict__ k, const float* __restrict__ v,
                               int64_t kv_stride, const int32_t* __restrict__ key_begin,
                               const int32_t* __restrict__ key_end, RangeAttentionShape s,
                               float scale) {
  __shared__ float q_rows[kWarps][kRangeAttentionMaxHeadDim];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t i = int64_t(blockIdx.x) * kWarps + warp, h = blockIdx.y, bb = blockIdx.z;
  if (i >= s.tq) return;
  const int hd = static_cast<int>(s.hd);
  const int64_t g = h / (s.nh / s.nkv), row = bb * s.tq + i;
  float* qs = q_rows[warp];
  load_row(qs, q + row * q_stride + h * hd, hd, lane);
  const int64_t begin = key_begin[row], end = key_end[row];
  const float* kb = k + bb * s.tk * kv_stride + g * hd;
  const float* vb = v + bb * s.tk * kv_stride + g * hd;
  float m = -INFINITY, l = 0.f, acc[kCols];
  for (int c = 0; c < kCols; ++c) acc[c] = 0.f;
  for (int64_t j0 = begin; j0 < end; j0 += 32) {
    const int64_t j = j0 + lane;
    const int tile = static_cast<int>(end - j0 < 32 ? end - j0 : 32);
    const float score = j < end ? dot(qs, kb + j * kv_stride, hd) * scale : -INFINITY;
    const float m_new = fmaxf(m, detail::warp_max(score));
    const float p = j < end ? expf(score - m_new) : 0.f;
    const float correction = m == -INFINITY ? 0.f : expf(m - m_new);
    l = l * correction + detail::warp_sum(p);
    for (int c = 0; c < kCols; ++c) acc[c] *= correction;
    add_weighted_rows(acc, p, vb + j0 * kv_stride, kv_stride, tile, hd, lane);
    m = m_new;
  }
  float* o = out + row * s.nh * hd + h * hd;
  const float inv = l > 0.f ? 1.f / l : 0.f;
  for (int c = 0; c < kCols; ++c) {
    const int d = lane + 32 * c;
    if (d < hd) o[d] = acc[c] * inv;
  }
  if (lane == 0) lse[(bb * s.nh + h) * s.tq + i] = l > 0.f ? m + logf(l) : -INFINITY;
}

// Thread per (row, head): kernels/cpu/attention_ranges.cc's merge, line by line.
__global__ void merge_kernel(float* __restrict__ out_acc, float* __restrict__ lse_acc,
                             const float* __restrict__ out_part, const float* __restrict__ lse_part,
                             RangeAttentionShape s) {
  const int64_t count = s.b * s.tq * s.nh;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < count;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t h = idx % s.nh, row = idx / s.nh, bi = row / s.tq, i = row % s.tq;
    const int64_t li = (bi * s.nh + h) * s.tq + i;
    const float la = lse_acc[li], lp = lse_part[li];
    if (lp == -INFINITY) continue;
    float* oa = out_acc + row * s.nh * s.hd + h * s.hd;
    const float* op = out_part + row * s.nh * s.hd + h * s.hd;
    if (la == -INFINITY) {
      for (int64_t c = 0; c < s.hd; ++c) oa[c] = op[c];
      lse_acc[li] = lp;
      continue;
    }
    const float mx = fmaxf(la, lp);
    const float wa = expf(la - mx), wp = expf(lp - mx), sum = wa + wp;
    const float ca = wa / sum, cp = wp / sum;
    for (int64_t c = 0; c < s.hd; ++c) oa[c] = ca * oa[c] + cp * op[c];
    lse_acc[li] = mx + logf(sum);
  }
}

// dq: warp per query row and head, as the forward; P from the final lse, D = dout . out.
__global__ void backward_dq_kernel(float* __restrict__ dq, const float* __restrict__ dout,
                                   const float* __restrict__ q, int64_t q_stride,
                                   const float* __restrict__ k, const float* __restrict__ v,
                                   int64_t kv_stride, const float* __restrict__ out,
                                   const float* __restrict__ lse,
                                   const int32_t* __restrict__ key_begin,
                                   const int32_t* __restrict__ key_end, RangeAttentionShape s,
                                   float scale) {
  __shared__ float q_rows[kWarps][kRangeAttentionMaxHeadDim];
  __shared__ float do_rows[kWarps][kRangeAttentionMaxHeadDim];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t i = int64_t(blockIdx.x) * kWarps + warp, h = blockIdx.y, bb = blockIdx.z;
  if (i >= s.tq) return;
  const int hd = static_cast<int>(s.hd);
  const int64_t g = h / (s.nh / s.nkv), row = bb * s.tq + i;
  const int64_t begin = key_begin[row], end = key_end[row];
  if (begin >= end) return;  // sees no key of this block: no gradient from it
  float* qs = q_rows[warp];
  float* dos = do_rows[warp];
  load_row(qs, q + row * q_stride + h * hd, hd, lane);
  load_row(dos, dout + row * s.nh * hd + h * hd, hd, lane);
  const float* o = out + row * s.nh * hd + h * hd;
  float dd = 0.f;
  for (int d = lane; d < hd; d += 32) dd = fmaf(dos[d], o[d], dd);
  const float D = detail::warp_sum(dd);
  const float L = lse[(bb * s.nh + h) * s.tq + i];
  const float* kb = k + bb * s.tk * kv_stride + g * hd;
  const float* vb = v + bb * s.tk * kv_stride + g * hd;
  float acc[kCols];
  for (int c = 0; c < kCols; ++c) acc[c] = 0.f;
  for (int64_t j0 = begin; j0 < end; j0 += 32) {
    const int64_t j = j0 + lane;
    const int tile = static_cast<int>(end - j0 < 32 ? end - j0 : 32);
    float ds = 0.f;
    if (j < end) {
      const float p = expf(dot(qs, kb + j * kv_stride, hd) * scale - L);
      ds = p * (dot(dos, vb + j * kv_stride, hd) - D);
    }
    add_weighted_rows(acc, ds, kb + j0 * kv_stride, kv_stride, tile, hd, lane);
  }
  float* dqr = dq + row * q_stride + h * hd;
  for (int c = 0; c < kCols; ++c) {
    const int d = lane + 32 * c;
    if (d < hd) dqr[d] += acc[c] * scale;
  }
}

// dk, dv: warp per key row and kv head, over every query head of its group and every query row
// that sees the key (tiles of 32 query rows, skipped when none of them does).
__global__ void backward_dkv_kernel(float* __restrict__ dk, float* __restrict__ dv,
                                    const float* __restrict__ dout, const float* __restrict__ q,
                                    int64_t q_stride, const float* __restrict__ k,
                                    const float* __restrict__ v, int64_t kv_stride,
                                    const float* __restrict__ out, const float* __restrict__ lse,
                                    const int32_t* __restrict__ key_begin,
                                    const int32_t* __restrict__ key_end, RangeAttentionShape s,
                                    float scale) {
  __shared__ float k_rows[kWarps][kRangeAttentionMaxHeadDim];
  __shared__ float v_rows[kWarps][kRangeAttentionMaxHeadDim];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t j = int64_t(blockIdx.x) * kWarps + warp, g = blockIdx.y, bb = blockIdx.z;
  if (j >= s.tk) return;
  const int hd = static_cast<int>(s.hd);
  const int64_t group = s.nh / s.nkv;
  float* ks = k_rows[warp];
  float* vs = v_rows[warp];
  load_row(ks, k + (bb * s.tk + j) * kv_stride + g * hd, hd, lane);
  load_row(vs, v + (bb * s.tk + j) * kv_stride + g * hd, hd, lane);
  float dk_acc[kCols], dv_acc[kCols];
  for (int c = 0; c < kCols; ++c) dk_acc[c] = dv_acc[c] = 0.f;
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t i0 = 0; i0 < s.tq; i0 += 32) {
      const int64_t i = i0 + lane, row = bb * s.tq + i;
      const bool sees = i < s.tq && key_begin[row] <= j && j < key_end[row];
      if (__ballot_sync(0xffffffffu, sees) == 0) continue;
      float p = 0.f, ds = 0.f;
      if (sees) {
        const float* qr = q + row * q_stride + h * hd;
        const float* dor = dout + row * s.nh * hd + h * hd;
        const float* o = out + row * s.nh * hd + h * hd;
        p = expf(dot(qr, ks, hd) * scale - lse[(bb * s.nh + h) * s.tq + i]);
        ds = p * (dot(dor, vs, hd) - dot(dor, o, hd));
      }
      const int tile = static_cast<int>(s.tq - i0 < 32 ? s.tq - i0 : 32);
      for (int t = 0; t < tile; ++t) {
        const float pt = __shfl_sync(0xffffffffu, p, t);
        const float dst = __shfl_sync(0xffffffffu, ds, t);
        if (pt == 0.f && dst == 0.f) continue;  // not seen (or no weight): adds nothing
        const int64_t rt = bb * s.tq + i0 + t;
        const float* qr = q + rt * q_stride + h * hd;
        const float* dor = dout + rt * s.nh * hd + h * hd;
        for (int c = 0; c < kCols; ++c) {
          const int d = lane + 32 * c;
          if (d < hd) {
            dv_acc[c] = fmaf(pt, dor[d], dv_acc[c]);
            dk_acc[c] = fmaf(dst, qr[d], dk_acc[c]);
          }
        }
      }
    }
  }
  float* dkr = dk + (bb * s.tk + j) * kv_stride + g * hd;
  float* dvr = dv + (bb * s.tk + j) * kv_stride + g * hd;
  for (int c = 0; c < kCols; ++c) {
    const int d = lane + 32 * c;
    if (d < hd) {
      dkr[d] += dk_acc[c] * scale;
      dvr[d] += dv_acc[c];
    }
  }
}

void check_shape(const RangeAttentionShape& s, const char* what) {
  STRATA_CHECK(s.b >= 0 && s.tq >= 0 && s.tk >= 0 && s.nh > 0 && s.nkv > 0 && s.nh % s.nkv == 0,
               what, ": bad shape b=", s.b, " tq=", s.tq, " tk=", s.tk, " nh=", s.nh,
               " nkv=", s.nkv);
  STRATA_CHECK(s.hd > 0 && s.hd <= kRangeAttentionMaxHeadDim, what, ": head_dim ", s.hd,
               " is outside the supported 1..", kRangeAttentionMaxHeadDim);
}

dim3 row_grid(int64_t rows, int64_t heads, int64_t b) {
  return dim3(static_cast<unsigned>((rows + kWarps - 1) / kWarps), static_cast<unsigned>(heads),
              static_cast<unsigned>(b));
}

}  // namespace

void attention_ranges_forward(float* out, float* lse, const float* q, int64_t q_stride,
                              const float* k, const float* v, int64_t kv_stride,
                              const int32_t* key_begin, const int32_t* key_end,
                              const RangeAttentionShape& s, cudaStream_t stream) {
  check_shape(s, "attention_ranges_forward");
  if (s.b * s.tq == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
  forward_kernel<<<row_grid(s.tq, s.nh, s.b), kWarps * 32, 0, stream>>>(
      out, lse, q, q_stride, k, v, kv_stride, key_begin, key_end, s, scale);
  STRATA_CUDA_CHECK_LAUNCH();
}

void attention_ranges_merge(float* out_acc, float* lse_acc, const float* out_part,
                            const float* lse_part, const RangeAttentionShape& s,
                            cudaStream_t stream) {
  check_shape(s, "attention_ranges_merge");
  const int64_t count = s.b * s.tq * s.nh;
  if (count == 0) return;
  merge_kernel<<<detail::grid_for(count), detail::kThreads, 0, stream>>>(out_acc, lse_acc, out_part,
                                                                         lse_part, s);
  STRATA_CUDA_CHECK_LAUNCH();
}

void attention_ranges_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                               int64_t q_stride, const float* k, const float* v, int64_t kv_stride,
                               const float* out, const float* lse, const int32_t* key_begin,
                               const int32_t* key_end, const RangeAttentionShape& s,
                               cudaStream_t stream) {
  check_shape(s, "attention_ranges_backward");
  if (s.b * s.tq == 0 || s.tk == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
  // dk, dv first, then dq: the two write disjoint buffers (dq may share a fused qkv buffer with
  // dk and dv, at other columns), so the order only fixes the schedule.
  backward_dkv_kernel<<<row_grid(s.tk, s.nkv, s.b), kWarps * 32, 0, stream>>>(
      dk, dv, dout, q, q_stride, k, v, kv_stride, out, lse, key_begin, key_end, s, scale);
  STRATA_CUDA_CHECK_LAUNCH();
  backward_dq_kernel<<<row_grid(s.tq, s.nh, s.b), kWarps * 32, 0, stream>>>(
      dq, dout, q, q_stride, k, v, kv_stride, out, lse, key_begin, key_end, s, scale);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
