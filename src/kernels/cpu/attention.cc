// Causal self-attention, naive (probabilities materialised in probs[b, nh, t, t]), with grouped-
// query attention: query head h reads kv head h / (nh / nkv).
//
// Work split: the forward runs one (batch, head) per task, the backward one (batch, kv head) per
// task, so that the q heads sharing a kv head add their dk, dv contributions in a fixed order (no
// atomics, no dependence on the thread count).
//
// The six products (S = Q K^T, O = P V; dP = dO V^T, dQ = dS K, dV = P^T dO, dK = dS^T Q) are
// small (head_dim 64, a causal triangle of keys) and strided (rows of qkv), which is where
// library GEMMs lose most: they repack both operands on every call. Here one register-tiled
// micro-kernel (6 rows x up to 64 columns on AVX-512, 16 on AVX2; micro_tile-inl.h) computes all
// six directly on the strided rows. Only Q K^T and dO V^T need the keys along the vector lanes; for
// those, 64-key panels of K^T / V^T are transposed into a small buffer, once per head, and all
// query rows are run against each panel. Every tile is trimmed to the causal triangle at 6-row
// granularity. Compiled once per kernel level (Highway's foreach_target.h); kernels.h's functions
// dispatch.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/micro_tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace strata::kernels::HWY_NAMESPACE {

namespace {

constexpr int64_t kBlock = 64;        // query rows per block; also the key-panel width
constexpr int64_t kMaxHeadDim = 256;  // the key panel (kBlock x head_dim) lives on the stack

using namespace tiles;

// S[i, j] = alpha * a_i . x_j for the rows i in [r0, r1) and the keys j <= i, written into
// s (row stride lds). a rows have stride lda, x (keys) rows stride ldx. Entries past the diagonal
// inside a tile get values too, up to the tile's last row (< i + kMr): the caller overwrites
// them. panel: kBlock * hd floats.
void causal_scores(float* s, int64_t lds, const float* a, int64_t lda, const float* x, int64_t ldx,
                   int64_t r0, int64_t r1, int64_t hd, float alpha, float* panel) {
  for (int64_t k0 = 0; k0 < r1; k0 += kBlock) {
    const int64_t kw = std::min(kBlock, r1 - k0);
    pack_transposed(panel, x, ldx, k0, kw, hd, kBlock);
    // Row tiles from the first one that reaches the panel (rows before k0 see none of its keys).
    for (int64_t i0 = r0 + std::max<int64_t>(0, k0 - r0) / kMr * kMr; i0 < r1; i0 += kMr) {
      const int64_t m = std::min<int64_t>(kMr, r1 - i0);
      const int64_t ncols = std::min(kw, i0 + m - k0);  // keys k0 .. the tile's last row
      tile(m, ncols, hd, a + i0 * lda, lda, 1, panel, kBlock, s + i0 * lds + k0, lds, alpha, false);
    }
  }
}

// In place: p[0..len) = softmax(p[0..len)), p[len..end) = 0.
void softmax_row(float* p, int64_t len, int64_t end) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const VF maxv = hn::Set(d, MaxN(d, p, len));
  VF sum = hn::Zero(d);
  for (int64_t j = 0; j < len; j += N) {
    const size_t left = size_t(len - j);
    VF e = Exp(d, hn::Sub(LoadN(d, p + j, left), maxv));
    if (left < size_t(N)) e = hn::IfThenElseZero(hn::FirstN(d, left), e);
    sum = hn::Add(sum, e);
    StoreN(e, d, p + j, left);
  }
  const float inv = 1.0f / ReduceSum(d, sum);
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) p[j] *= inv;
  std::fill(p + len, p + end, 0.0f);
}

void check_shapes(int64_t nh, int64_t nkv, int64_t hd) {
  STRATA_CHECK(nh > 0 && nkv > 0 && nh % nkv == 0, "attention: n_head ", nh,
               " must be a multiple of n_kv_head ", nkv);
  STRATA_CHECK(hd > 0 && hd <= kMaxHeadDim, "attention: head_dim ", hd, " must be in [1, ",
               kMaxHeadDim, "]");
}

}  // namespace

void AttentionForward(float* out, float* probs, const float* qkv, int64_t b, int64_t t, int64_t nh,
                      int64_t nkv, int64_t hd) {
  check_shapes(nh, nkv, hd);
  const int64_t row = (nh + 2 * nkv) * hd, ldo = nh * hd, group = nh / nkv;
  const float scale = 1.0f / std::sqrt(float(hd));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < b * nh; ++task) {
    const int64_t bi = task / nh, h = task % nh, kvh = h / group;
    const float* q = qkv + bi * t * row + h * hd;
    const float* k = qkv + bi * t * row + (nh + kvh) * hd;
    const float* v = qkv + bi * t * row + (nh + nkv + kvh) * hd;
    float* p = probs + task * t * t;
    float* o = out + bi * t * ldo + h * hd;
    HWY_ALIGN float panel[kBlock * kMaxHeadDim];
    // All scores first, key panel by key panel: each K^T panel is packed once per head.
    causal_scores(p, t, q, row, k, row, 0, t, hd, scale, panel);
    for (int64_t r0 = 0; r0 < t; r0 += kBlock) {
      const int64_t r1 = std::min(t, r0 + kBlock);
      for (int64_t i = r0; i < r1; ++i) softmax_row(p + i * t, i + 1, t);
      // O rows = P rows . V over the keys up to the tile's last row (P is zero beyond).
      for (int64_t i0 = r0; i0 < r1; i0 += kMr) {
        const int64_t m = std::min<int64_t>(kMr, r1 - i0);
        row_tile(m, hd, i0 + m, p + i0 * t, t, 1, v, row, o + i0 * ldo, ldo, 1.0f, false);
      }
    }
  }
}

void AttentionBackward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                       const float* probs, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                       int64_t hd) {
  check_shapes(nh, nkv, hd);
  const int64_t row = (nh + 2 * nkv) * hd, ldo = nh * hd, group = nh / nkv;
  const float scale = 1.0f / std::sqrt(float(hd));
  // The team size must match what attention_backward_scratch() sized the scratch for.
  const int nthreads = omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
  for (int64_t task = 0; task < b * nkv; ++task) {
    const int64_t bi = task / nkv, kvh = task % nkv;
    float* ds = scratch + int64_t(omp_get_thread_num()) * (t * t + 2 * kBlock * hd);
    float* panel = ds + t * t;            // V^T slices for dP = dO V^T
    float* grad_t = panel + kBlock * hd;  // dV^T / dK^T of one key block
    const float* k = qkv + bi * t * row + (nh + kvh) * hd;
    const float* v = qkv + bi * t * row + (nh + nkv + kvh) * hd;
    float* dk = dqkv + bi * t * row + (nh + kvh) * hd;
    float* dv = dqkv + bi * t * row + (nh + nkv + kvh) * hd;
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      const float* q = qkv + bi * t * row + h * hd;
      float* dq = dqkv + bi * t * row + h * hd;
      const float* p = probs + (bi * nh + h) * t * t;
      const float* dout_h = dout + bi * t * ldo + h * hd;
      const bool accumulate = h != kvh * group;  // the group's first head overwrites dk, dv
      // dP = dO V^T for the whole causal triangle (each V^T panel packed once), then per block
      // of rows the softmax backward in place: dS = P * (dP - rowsum(P * dP)) * scale, zero
      // past the diagonal up to the block's end (as far as the products below read).
      causal_scores(ds, t, dout_h, ldo, v, row, 0, t, hd, 1.0f, panel);
      for (int64_t r0 = 0; r0 < t; r0 += kBlock) {
        const int64_t r1 = std::min(t, r0 + kBlock);
        for (int64_t i = r0; i < r1; ++i) {
          const float* __restrict pr = p + i * t;
          float* __restrict dsr = ds + i * t;
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int64_t j = 0; j <= i; ++j) dot += pr[j] * dsr[j];
#pragma omp simd
          for (int64_t j = 0; j <= i; ++j) dsr[j] = pr[j] * (dsr[j] - dot) * scale;
          // Up to r1 for the tiles below; kMr further for what causal_scores left past it.
          std::fill(dsr + i + 1, dsr + std::min(t, r1 + kMr), 0.0f);
        }
        // dQ rows = dS rows . K over the keys up to the tile's last row.
        for (int64_t i0 = r0; i0 < r1; i0 += kMr) {
          const int64_t m = std::min<int64_t>(kMr, r1 - i0);
          row_tile(m, hd, i0 + m, ds + i0 * t, t, 1, k, row, dq + i0 * row, row, 1.0f, false);
        }
      }
      // For each block of 64 keys j: dV^T[d, j] = sum_{i >= c0} dO[i, d] P[i, j] and
      // dK^T[d, j] = sum_{i >= c0} Q[i, d] dS[i, j], computed transposed so that both operands
      // are read along their rows (P and dS rows as vectors, dO and Q as broadcasts), then
      // transposed back into the dv / dk rows. P and dS are zero above the diagonal.
      for (int64_t c0 = 0; c0 < t; c0 += kBlock) {
        const int64_t width = std::min(kBlock, t - c0);
        for (int pass = 0; pass < 2; ++pass) {
          const float* a = pass == 0 ? dout_h : q;
          const int64_t lda = pass == 0 ? ldo : row;
          const float* bm = pass == 0 ? p : ds;
          for (int64_t d0 = 0; d0 < hd; d0 += kMr) {
            const int64_t m = std::min<int64_t>(kMr, hd - d0);
            tile(m, width, t - c0, a + c0 * lda + d0, 1, lda, bm + c0 * t + c0, t,
                 grad_t + d0 * kBlock, kBlock, 1.0f, false);
          }
          unpack_transposed(pass == 0 ? dv : dk, row, c0, width, hd, grad_t, kBlock, accumulate);
        }
      }
    }
  }
}

}  // namespace strata::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/kernels.h"

namespace strata::kernels {

namespace {
constexpr int64_t kBlock = 64;  // the key-panel width (as in the per-level code)
}  // namespace

HWY_EXPORT(AttentionForward);
HWY_EXPORT(AttentionBackward);

void attention_forward(float* out, float* probs, const float* qkv, int64_t b, int64_t t, int64_t nh,
                       int64_t nkv, int64_t hd) {
  STRATA_DISPATCH(AttentionForward)(out, probs, qkv, b, t, nh, nkv, hd);
}

int64_t attention_backward_scratch(int64_t /*b*/, int64_t t, int64_t /*nh*/, int64_t /*nkv*/,
                                   int64_t hd, int threads) {
  // Per thread: the t x t score gradients of one head and two kBlock x hd panels.
  return int64_t(threads > 0 ? threads : omp_get_max_threads()) * (t * t + 2 * kBlock * hd);
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* probs, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                        int64_t hd) {
  STRATA_DISPATCH(AttentionBackward)(dqkv, scratch, dout, qkv, probs, b, t, nh, nkv, hd);
}

}  // namespace strata::kernels
#endif  // HWY_ONCE
