// Causal flash attention on the CPU (FlashAttention-2 scheme), f32.
//
// Forward: one task per (batch, head, block of kB query rows), largest (latest) query blocks
// first for the causal load balance. Key blocks of kB keys are visited up to the diagonal; each
// gives a kB x kB score tile S = Q K^T * scale (K^T packed into a small panel so that keys run
// along the vector lanes), masked inside the diagonal block, folded into a running row max m and
// row sum l (online softmax), and O += P V into a kB x hd accumulator tile. At the end
// O /= l and lse = m + log l.
//
// Backward, two deterministic passes (no float atomics, every output row written by one task):
//  1. dK, dV: one task per (batch, kv head, key block); inside, the query heads of the group and
//     the query blocks at or below the diagonal, in a fixed order. Recomputes
//     P = exp(S - lse), dP = dO V^T, dS = P (dP - D) scale with D = rowsum(dO o O), and
//     accumulates dV += P^T dO, dK += dS^T Q in per-thread tiles.
//  2. dQ: one task per (batch, head, query block), recomputing P and dS the same way over the
//     key blocks up to the diagonal, dQ += dS K.
// Pass 2 repeats the two score products of pass 1 (7 block products instead of 5) but keeps the
// scratch at a few tiles per thread and the result independent of thread count and scheduling.
//
// All block products go through one register-tiled micro-kernel (kMr rows x up to 64 columns,
// A broadcast along strided rows/columns, B contiguous rows): a bf16 variant needs only a
// micro-kernel and a panel packer for bf16 operands (e.g. vdpbf16ps on pairs along the
// reduction), the softmax bookkeeping stays in f32.
#include "kernels/cpu/flash_attention.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/micro_tile.h"
#include "kernels/cpu/vec.h"

namespace strata::kernels {

namespace {

constexpr int64_t kB = 64;  // backward: query rows per block = keys per block
// Forward blocks, by measurement at T = 2048 and 4096, hd = 64, 2 threads: (Br, Bc) = (64, 64),
// (128, 64) and (128, 128) within noise of each other; (32, 64) 1.9x slower; 64 x 64 kept (the
// S tile and the O accumulator, 32 KiB together, stay in L1).
constexpr int64_t kBr = 64;  // forward: query rows per block
constexpr int64_t kBc = 64;  // forward: keys per block (panel width)
constexpr int64_t kMaxHeadDim = 256;

using namespace tiles;

// s[r, 0..ncols) = alpha * a_r . panel[:, j] for the m rows of a starting at `a` (stride lda),
// with ncols trimmed to the causal triangle (row r sees key columns < r + 1 + diag_off) when
// `diag`. Columns left uncomputed are masked by the caller.
void block_scores(float* s, const float* a, int64_t lda, const float* panel, int64_t m,
                  int64_t width, int64_t hd, float alpha, bool diag, int64_t diag_off,
                  int64_t pw = kB) {
  for (int64_t r0 = 0; r0 < m; r0 += kMr) {
    const int64_t mm = std::min<int64_t>(kMr, m - r0);
    const int64_t ncols = diag ? std::min(width, r0 + mm + diag_off) : width;
    if (ncols <= 0) continue;
    row_tile(mm, ncols, hd, a + r0 * lda, lda, 1, panel, pw, s + r0 * pw, pw, alpha, false);
  }
}

void check_shapes(int64_t nh, int64_t nkv, int64_t hd) {
  STRATA_CHECK(nh > 0 && nkv > 0 && nh % nkv == 0, "flash_attention: n_head ", nh,
               " must be a multiple of n_kv_head ", nkv);
  STRATA_CHECK(hd > 0 && hd <= kMaxHeadDim, "flash_attention: head_dim ", hd, " must be in [1, ",
               kMaxHeadDim, "]");
}

inline float dot(const float* __restrict x, const float* __restrict y, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t d = 0; d < n; d += 16) {
    const __mmask16 m = vec::tail_mask(d, n);
    acc = _mm512_fmadd_ps(vec::load(x + d, m), vec::load(y + d, m), acc);
  }
  return vec::reduce_add(acc);
}

}  // namespace

void flash_attention_forward(float* out, float* lse, const float* qkv, int64_t b, int64_t t,
                             int64_t nh, int64_t nkv, int64_t hd) {
  check_shapes(nh, nkv, hd);
  if (b <= 0 || t <= 0) return;
  const int64_t ld = (nh + 2 * nkv) * hd, ldo = nh * hd, group = nh / nkv;
  const int64_t nqb = (t + kBr - 1) / kBr, nbh = b * nh;
  const float scale = 1.0f / std::sqrt(float(hd));
#pragma omp parallel
  {
    std::vector<float> buf(size_t(hd * (kBc + kBr) + kBr * kBc + 2 * kBr));
    float* panel = buf.data();      // K^T of one key block [hd][kB]
    float* acc = panel + kBc * hd;  // O accumulator [kBr][hd]
    float* s = acc + kBr * hd;      // scores / probabilities [kBr][kBc]
    float* mrow = s + kBr * kBc;    // running max
    float* lrow = mrow + kBr;       // running sum
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < nbh * nqb; ++task) {
      const int64_t qb = nqb - 1 - task / nbh;  // latest (most work) query blocks first
      const int64_t bi = task % nbh / nh, h = task % nh, kvh = h / group;
      const int64_t i0 = qb * kBr, m = std::min(kBr, t - i0);
      const float* q = qkv + (bi * t + i0) * ld + h * hd;
      const float* k = qkv + bi * t * ld + (nh + kvh) * hd;
      const float* v = qkv + bi * t * ld + (nh + nkv + kvh) * hd;
      std::fill(acc, acc + kBr * hd, 0.0f);
      std::fill(mrow, mrow + kBr, -INFINITY);
      std::fill(lrow, lrow + kBr, 0.0f);
      for (int64_t j0 = 0; j0 < i0 + m; j0 += kBc) {
        const int64_t w = std::min(kBc, t - j0);
        const bool diag = j0 + w > i0;  // the block reaches past the first row: mask
        pack_transposed(panel, k, ld, j0, w, hd, kBc);
        block_scores(s, q, ld, panel, m, w, hd, scale, diag, i0 - j0 + 1, kBc);
        // Online softmax, row by row: P = exp(S - m_new) (zero past the diagonal), the
        // accumulator and running sum rescaled by exp(m_old - m_new) when the max grows.
        for (int64_t r = 0; r < m; ++r) {
          const int64_t valid = diag ? std::min(w, i0 + r - j0 + 1) : w;
          float* sr = s + r * kBc;
          __m512 mx = _mm512_set1_ps(-INFINITY);
          for (int64_t j = 0; j < valid; j += 16) {
            const __mmask16 mk = vec::tail_mask(j, valid);
            mx = _mm512_mask_max_ps(mx, mk, mx, vec::load(sr + j, mk));
          }
          const float mold = mrow[r], mnew = std::max(mold, vec::reduce_max(mx));
          const __m512 mv = _mm512_set1_ps(mnew);
          __m512 sum = _mm512_setzero_ps();
          for (int64_t j = 0; j < kBc; j += 16) {
            const __mmask16 mk = j < valid ? vec::tail_mask(j, valid) : __mmask16(0);
            const __m512 e =
                _mm512_maskz_mov_ps(mk, vec::exp(_mm512_sub_ps(_mm512_loadu_ps(sr + j), mv)));
            sum = _mm512_add_ps(sum, e);
            _mm512_storeu_ps(sr + j, e);
          }
          if (mnew > mold) {
            const float c = std::exp(mold - mnew);  // 0 on the first block (mold = -inf)
            lrow[r] *= c;
            float* ar = acc + r * hd;
#pragma omp simd
            for (int64_t d = 0; d < hd; ++d) ar[d] *= c;
            mrow[r] = mnew;
          }
          lrow[r] += vec::reduce_add(sum);
        }
        // O += P V over the keys each row tile can see.
        for (int64_t r0 = 0; r0 < m; r0 += kMr) {
          const int64_t mm = std::min<int64_t>(kMr, m - r0);
          const int64_t kdim = diag ? std::min(w, i0 + r0 + mm - j0) : w;
          if (kdim <= 0) continue;
          row_tile(mm, hd, kdim, s + r0 * kBc, kBc, 1, v + j0 * ld, ld, acc + r0 * hd, hd, 1.0f,
                   true);
        }
      }
      float* o = out + (bi * t + i0) * ldo + h * hd;
      float* l = lse + (bi * nh + h) * t + i0;
      for (int64_t r = 0; r < m; ++r) {
        const float inv = 1.0f / lrow[r];
        const float* ar = acc + r * hd;
        float* orow = o + r * ldo;
#pragma omp simd
        for (int64_t d = 0; d < hd; ++d) orow[d] = ar[d] * inv;
        l[r] = mrow[r] + std::log(lrow[r]);
      }
    }
  }
}

namespace {

// Floats of one thread's backward tiles.
int64_t per_thread_scratch(int64_t hd) {
  const int64_t hdp = (hd + 15) / 16 * 16;
  return 4 * kB * hdp + 2 * kB * kB + kB;
}

struct BwdTiles {
  float* pk;  // K^T panel [hd][kB]
  float* pv;  // V^T panel [hd][kB]
  float* s;   // S, then P [kB][kB]
  float* dp;  // dP, then dS (scaled) [kB][kB]
  float* g1;  // dK or dQ accumulator [kB][hd]
  float* g2;  // dV accumulator [kB][hd]
  float* dd;  // D = rowsum(dO o O) [kB]
};

BwdTiles tiles_of(float* base, int64_t hd) {
  const int64_t hdp = (hd + 15) / 16 * 16;
  BwdTiles tl{};
  tl.pk = base;
  tl.pv = tl.pk + kB * hdp;
  tl.s = tl.pv + kB * hdp;
  tl.dp = tl.s + kB * kB;
  tl.g1 = tl.dp + kB * kB;
  tl.g2 = tl.g1 + kB * hdp;
  tl.dd = tl.g2 + kB * hdp;
  return tl;
}

// For the query rows [i0, i0 + m) against the keys [j0, j0 + w) whose K^T, V^T panels are in
// tl.pk, tl.pv: tl.s = P (zero outside the causal triangle and past w), tl.dp = dS * scale
// (same zeros). q, dout point at row i0; lse_rows at lse of row i0; tl.dd holds D of the rows.
void block_probs_and_ds(const BwdTiles& tl, const float* q, int64_t ld, const float* dout,
                        int64_t ldo, const float* lse_rows, int64_t i0, int64_t m, int64_t j0,
                        int64_t w, int64_t hd, float scale) {
  const bool diag = j0 + w > i0;
  block_scores(tl.s, q, ld, tl.pk, m, w, hd, scale, diag, i0 - j0 + 1);
  block_scores(tl.dp, dout, ldo, tl.pv, m, w, hd, 1.0f, diag, i0 - j0 + 1);
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < m; ++r) {
    const int64_t valid = diag ? std::min(w, i0 + r - j0 + 1) : w;
    float* sr = tl.s + r * kB;
    float* dr = tl.dp + r * kB;
    const __m512 l = _mm512_set1_ps(lse_rows[r]);
    const __m512 dv = _mm512_set1_ps(tl.dd[r]);
    for (int64_t j = 0; j < kB; j += 16) {
      const __mmask16 mk = j < valid ? vec::tail_mask(j, valid) : __mmask16(0);
      const __m512 p = _mm512_maskz_mov_ps(mk, vec::exp(_mm512_sub_ps(vec::load(sr + j, mk), l)));
      const __m512 ds =
          _mm512_mul_ps(_mm512_mul_ps(p, _mm512_sub_ps(vec::load(dr + j, mk), dv)), sc);
      _mm512_storeu_ps(sr + j, p);
      _mm512_storeu_ps(dr + j, _mm512_maskz_mov_ps(mk, ds));
    }
  }
}

// dd[r] = dout_r . out_r for the m rows starting at the given pointers.
void rows_d(float* dd, const float* dout, const float* out, int64_t ldo, int64_t m, int64_t hd) {
  for (int64_t r = 0; r < m; ++r) dd[r] = dot(dout + r * ldo, out + r * ldo, hd);
}

void store_rows(float* dst, int64_t ld, const float* tile, int64_t m, int64_t hd) {
  for (int64_t r = 0; r < m; ++r) std::copy(tile + r * hd, tile + (r + 1) * hd, dst + r * ld);
}

}  // namespace

int64_t flash_attention_backward_scratch(int64_t /*b*/, int64_t /*t*/, int64_t /*nh*/,
                                         int64_t /*nkv*/, int64_t hd, int threads) {
  return int64_t(threads > 0 ? threads : omp_get_max_threads()) * per_thread_scratch(hd);
}

void flash_attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                              const float* out, const float* lse, int64_t b, int64_t t, int64_t nh,
                              int64_t nkv, int64_t hd) {
  check_shapes(nh, nkv, hd);
  if (b <= 0 || t <= 0) return;
  const int64_t ld = (nh + 2 * nkv) * hd, ldo = nh * hd, group = nh / nkv;
  const int64_t nblk = (t + kB - 1) / kB;
  const float scale = 1.0f / std::sqrt(float(hd));
  // The team size must match what flash_attention_backward_scratch() sized the scratch for.
  const int nthreads = omp_get_max_threads();
  const int64_t per_thread = per_thread_scratch(hd);

  const int64_t nbh = b * nh;
  // The passes are independent (pass 2 reads only the inputs): one team, no barrier between.
#pragma omp parallel num_threads(nthreads)
  {
    const BwdTiles tl = tiles_of(scratch + int64_t(omp_get_thread_num()) * per_thread, hd);
    // Pass 1: dK, dV per (batch, kv head, key block); earliest key blocks (most work) first.
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t task = 0; task < nblk * b * nkv; ++task) {
      const int64_t kb = task / (b * nkv), bi = task % (b * nkv) / nkv, kvh = task % nkv;
      const int64_t j0 = kb * kB, w = std::min(kB, t - j0);
      const float* base = qkv + bi * t * ld;
      pack_transposed(tl.pk, base + (nh + kvh) * hd, ld, j0, w, hd, kB);
      pack_transposed(tl.pv, base + (nh + nkv + kvh) * hd, ld, j0, w, hd, kB);
      std::fill(tl.g1, tl.g1 + kB * hd, 0.0f);
      std::fill(tl.g2, tl.g2 + kB * hd, 0.0f);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int64_t qb = kb; qb < nblk; ++qb) {
          const int64_t i0 = qb * kB, m = std::min(kB, t - i0);
          const bool diag = qb == kb;
          const float* q = base + i0 * ld + h * hd;
          const float* dout_b = dout + (bi * t + i0) * ldo + h * hd;
          rows_d(tl.dd, dout_b, out + (bi * t + i0) * ldo + h * hd, ldo, m, hd);
          block_probs_and_ds(tl, q, ld, dout_b, ldo, lse + (bi * nh + h) * t + i0, i0, m, j0, w, hd,
                             scale);
          // dV[j] += sum_r P[r, j] dO[r], dK[j] += sum_r dS[r, j] Q[r]; on the diagonal block
          // rows r < j have P = dS = 0 and are skipped.
          for (int64_t jr0 = 0; jr0 < w; jr0 += kMr) {
            const int64_t mm = std::min<int64_t>(kMr, w - jr0);
            const int64_t rs = diag ? jr0 : 0;
            row_tile(mm, hd, m - rs, tl.s + rs * kB + jr0, 1, kB, dout_b + rs * ldo, ldo,
                     tl.g2 + jr0 * hd, hd, 1.0f, true);
            row_tile(mm, hd, m - rs, tl.dp + rs * kB + jr0, 1, kB, q + rs * ld, ld,
                     tl.g1 + jr0 * hd, hd, 1.0f, true);
          }
        }
      }
      float* drow = dqkv + (bi * t + j0) * ld;
      store_rows(drow + (nh + kvh) * hd, ld, tl.g1, w, hd);
      store_rows(drow + (nh + nkv + kvh) * hd, ld, tl.g2, w, hd);
    }

    // Pass 2: dQ per (batch, head, query block); latest query blocks (most work) first.
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < nblk * nbh; ++task) {
      const int64_t qb = nblk - 1 - task / nbh;
      const int64_t bi = task % nbh / nh, h = task % nh, kvh = h / group;
      const int64_t i0 = qb * kB, m = std::min(kB, t - i0);
      const float* base = qkv + bi * t * ld;
      const float* q = base + i0 * ld + h * hd;
      const float* k = base + (nh + kvh) * hd;
      const float* dout_b = dout + (bi * t + i0) * ldo + h * hd;
      rows_d(tl.dd, dout_b, out + (bi * t + i0) * ldo + h * hd, ldo, m, hd);
      std::fill(tl.g1, tl.g1 + kB * hd, 0.0f);
      for (int64_t kb = 0; kb <= qb; ++kb) {
        const int64_t j0 = kb * kB, w = std::min(kB, t - j0);
        const bool diag = kb == qb;
        pack_transposed(tl.pk, k, ld, j0, w, hd, kB);
        pack_transposed(tl.pv, base + (nh + nkv + kvh) * hd, ld, j0, w, hd, kB);
        block_probs_and_ds(tl, q, ld, dout_b, ldo, lse + (bi * nh + h) * t + i0, i0, m, j0, w, hd,
                           scale);
        for (int64_t r0 = 0; r0 < m; r0 += kMr) {
          const int64_t mm = std::min<int64_t>(kMr, m - r0);
          const int64_t kdim = diag ? std::min(w, r0 + mm) : w;
          row_tile(mm, hd, kdim, tl.dp + r0 * kB, kB, 1, k + j0 * ld, ld, tl.g1 + r0 * hd, hd, 1.0f,
                   true);
        }
      }
      store_rows(dqkv + (bi * t + i0) * ld + h * hd, ld, tl.g1, m, hd);
    }
  }
}

}  // namespace strata::kernels
