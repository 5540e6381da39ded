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
// All block products go through one register-tiled micro-kernel (micro_tile-inl.h: kMr rows x a
// few vectors, A broadcast along strided rows/columns, B contiguous rows).
//
// The same code, with In = uint16_t, is the portable bf16 kernel (flash_attention.h's _bf16
// functions below the avx512bf16 level, and the reference of the hand-tiled vdpbf16ps one): each
// block of q, k, v is widened to f32 (exactly) into a per-thread tile before it is used, and the
// operands FlashAttention-2 rounds to bf16 are rounded where it rounds them (P before O += P V and
// dV += P^T dO; dS before dK and dQ; dO once per query block), so that every product multiplies
// bf16 values; products and sums run in f32. Only the rounding of the sums differs from the
// vdpbf16ps kernel.
//
// Compiled once per kernel level (Highway's foreach_target.h); flash_attention.h's functions
// dispatch.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/flash_attention.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/micro_tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace strata::kernels::HWY_NAMESPACE {
namespace {

constexpr int64_t kB = 64;  // backward: query rows per block = keys per block
// Forward blocks, by measurement at T = 2048 and 4096, hd = 64, 2 threads: (Br, Bc) = (64, 64),
// (128, 64) and (128, 128) within noise of each other; (32, 64) 1.9x slower; 64 x 64 kept (the
// S tile and the O accumulator, 32 KiB together, stay in L1).
constexpr int64_t kBr = 64;  // forward: query rows per block
constexpr int64_t kBc = 64;  // forward: keys per block (panel width)
constexpr int64_t kMaxHeadDim = 256;

using namespace tiles;

int64_t round16(int64_t n) {
  return (n + 15) / 16 * 16;
}

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

float dot(const float* HWY_RESTRICT x, const float* HWY_RESTRICT y, int64_t n) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  VF acc = hn::Zero(d);
  for (int64_t i = 0; i < n; i += N) {
    const size_t left = size_t(n - i);
    acc = hn::MulAdd(LoadN(d, x + i, left), LoadN(d, y + i, left), acc);
  }
  return ReduceSum(d, acc);
}

// Rows [0, m) x [0, hd) of src (row stride ld) for the block products: f32 rows are used where
// they are (returns src, *ld_out = ld); bf16 rows are widened into `tile` (stride hd).
const float* block_rows(float* tile, const float* src, int64_t ld, int64_t m, int64_t hd,
                        int64_t* ld_out) {
  (void)tile;
  (void)m;
  (void)hd;
  *ld_out = ld;
  return src;
}
const float* block_rows(float* tile, const uint16_t* src, int64_t ld, int64_t m, int64_t hd,
                        int64_t* ld_out) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < hd; c += N)
      StoreN(LoadBf16(d, src + r * ld + c, size_t(hd - c)), d, tile + r * hd + c, size_t(hd - c));
  *ld_out = hd;
  return tile;
}

// x[0..n) rounded to bf16 values in place (kept as f32).
void round_bf16(float* x, int64_t n) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  for (int64_t i = 0; i < n; i += N) {
    const size_t left = size_t(n - i);
    StoreN(RoundBf16(d, LoadN(d, x + i, left)), d, x + i, left);
  }
}

// Online softmax of one score row: sr[0..valid) = exp(sr - m_new) (zero from `valid` to kBc),
// with the running max and sum of the row updated and the accumulator row rescaled by
// exp(m_old - m_new) when the max grows. Returns nothing; the sum is of the unrounded values.
void online_softmax_row(float* sr, int64_t valid, float* mrow, float* lrow, float* acc_row,
                        int64_t hd) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const float mold = *mrow, mnew = std::max(mold, MaxN(d, sr, valid));
  const VF mv = hn::Set(d, mnew);
  VF sum = hn::Zero(d);
  for (int64_t j = 0; j < kBc; j += N) {
    VF e = Exp(d, hn::Sub(hn::LoadU(d, sr + j), mv));
    e = j >= valid ? hn::Zero(d) : hn::IfThenElseZero(hn::FirstN(d, size_t(valid - j)), e);
    sum = hn::Add(sum, e);
    hn::StoreU(e, d, sr + j);
  }
  if (mnew > mold) {
    const float c = std::exp(mold - mnew);  // 0 on the first block (mold = -inf)
    *lrow *= c;
#pragma omp simd
    for (int64_t k = 0; k < hd; ++k) acc_row[k] *= c;
    *mrow = mnew;
  }
  *lrow += ReduceSum(d, sum);
}

template <class In>
void forward(float* out, float* lse, const In* qkv, int64_t b, int64_t t, int64_t nh, int64_t nkv,
             int64_t hd) {
  constexpr bool kBf16 = std::is_same_v<In, uint16_t>;
  check_shapes(nh, nkv, hd);
  if (b <= 0 || t <= 0) return;
  const int64_t ld = (nh + 2 * nkv) * hd, ldo = nh * hd, group = nh / nkv;
  const int64_t nqb = (t + kBr - 1) / kBr, nbh = b * nh;
  const float scale = 1.0f / std::sqrt(float(hd));
#pragma omp parallel
  {
    // The bf16 kernel's widened q, k, v blocks follow the f32 tiles.
    std::vector<float> buf(
        size_t(hd * (kBc + kBr) + kBr * kBc + 2 * kBr + (kBf16 ? hd * (kBr + 2 * kBc) : 0)));
    float* panel = buf.data();      // K^T of one key block [hd][kB]
    float* acc = panel + kBc * hd;  // O accumulator [kBr][hd]
    float* s = acc + kBr * hd;      // scores / probabilities [kBr][kBc]
    float* mrow = s + kBr * kBc;    // running max
    float* lrow = mrow + kBr;       // running sum
    float* qw = lrow + kBr;         // bf16: Q block widened [kBr][hd]
    float* kw = qw + kBr * hd;      // bf16: K block widened [kBc][hd]
    float* vw = kw + kBc * hd;      // bf16: V block widened [kBc][hd]
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < nbh * nqb; ++task) {
      const int64_t qb = nqb - 1 - task / nbh;  // latest (most work) query blocks first
      const int64_t bi = task % nbh / nh, h = task % nh, kvh = h / group;
      const int64_t i0 = qb * kBr, m = std::min(kBr, t - i0);
      int64_t ldq = 0, ldk = 0, ldv = 0;
      const float* q = block_rows(qw, qkv + (bi * t + i0) * ld + h * hd, ld, m, hd, &ldq);
      const In* k = qkv + bi * t * ld + (nh + kvh) * hd;
      const In* v = qkv + bi * t * ld + (nh + nkv + kvh) * hd;
      std::fill(acc, acc + kBr * hd, 0.0f);
      std::fill(mrow, mrow + kBr, -INFINITY);
      std::fill(lrow, lrow + kBr, 0.0f);
      for (int64_t j0 = 0; j0 < i0 + m; j0 += kBc) {
        const int64_t w = std::min(kBc, t - j0);
        const bool diag = j0 + w > i0;  // the block reaches past the first row: mask
        const float* kb = block_rows(kw, k + j0 * ld, ld, w, hd, &ldk);
        const float* vb = block_rows(vw, v + j0 * ld, ld, w, hd, &ldv);
        pack_transposed(panel, kb, ldk, 0, w, hd, kBc);
        block_scores(s, q, ldq, panel, m, w, hd, scale, diag, i0 - j0 + 1, kBc);
        // Online softmax, row by row: P = exp(S - m_new) (zero past the diagonal), the
        // accumulator and running sum rescaled by exp(m_old - m_new) when the max grows.
        for (int64_t r = 0; r < m; ++r) {
          const int64_t valid = diag ? std::min(w, i0 + r - j0 + 1) : w;
          online_softmax_row(s + r * kBc, valid, mrow + r, lrow + r, acc + r * hd, hd);
        }
        if (kBf16) round_bf16(s, m * kBc);  // P -> bf16 for O += P V (the sums kept unrounded)
        // O += P V over the keys each row tile can see.
        for (int64_t r0 = 0; r0 < m; r0 += kMr) {
          const int64_t mm = std::min<int64_t>(kMr, m - r0);
          const int64_t kdim = diag ? std::min(w, i0 + r0 + mm - j0) : w;
          if (kdim <= 0) continue;
          row_tile(mm, hd, kdim, s + r0 * kBc, kBc, 1, vb, ldv, acc + r0 * hd, hd, 1.0f, true);
        }
      }
      float* o = out + (bi * t + i0) * ldo + h * hd;
      float* l = lse + (bi * nh + h) * t + i0;
      for (int64_t r = 0; r < m; ++r) {
        const float inv = 1.0f / lrow[r];
        const float* ar = acc + r * hd;
        float* orow = o + r * ldo;
#pragma omp simd
        for (int64_t c = 0; c < hd; ++c) orow[c] = ar[c] * inv;
        l[r] = mrow[r] + std::log(lrow[r]);
      }
    }
  }
}

// Floats of one thread's backward tiles (the bf16 kernel adds four widened blocks).
int64_t per_thread_scratch(int64_t hd, bool bf16) {
  const int64_t hdp = round16(hd);
  return 4 * kB * hdp + 2 * kB * kB + kB + (bf16 ? 4 * kB * hdp : 0);
}

struct BwdTiles {
  float* pk;   // K^T panel [hd][kB]
  float* pv;   // V^T panel [hd][kB]
  float* s;    // S, then P [kB][kB]
  float* dp;   // dP, then dS (scaled) [kB][kB]
  float* g1;   // dK or dQ accumulator [kB][hd]
  float* g2;   // dV accumulator [kB][hd]
  float* dd;   // D = rowsum(dO o O) [kB]
  float* qw;   // bf16: Q block widened [kB][hd]
  float* dow;  // bf16: dO block rounded to bf16 [kB][hd]
  float* kw;   // bf16: K block widened [kB][hd]
  float* vw;   // bf16: V block widened [kB][hd]
};

BwdTiles tiles_of(float* base, int64_t hd) {
  const int64_t hdp = round16(hd);
  BwdTiles tl{};
  tl.pk = base;
  tl.pv = tl.pk + kB * hdp;
  tl.s = tl.pv + kB * hdp;
  tl.dp = tl.s + kB * kB;
  tl.g1 = tl.dp + kB * kB;
  tl.g2 = tl.g1 + kB * hdp;
  tl.dd = tl.g2 + kB * hdp;
  tl.qw = tl.dd + kB;  // the bf16 tiles exist only in the bf16 kernel's scratch
  tl.dow = tl.qw + kB * hdp;
  tl.kw = tl.dow + kB * hdp;
  tl.vw = tl.kw + kB * hdp;
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
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const VF sc = hn::Set(d, scale);
  for (int64_t r = 0; r < m; ++r) {
    const int64_t valid = diag ? std::min(w, i0 + r - j0 + 1) : w;
    float* sr = tl.s + r * kB;
    float* dr = tl.dp + r * kB;
    const VF l = hn::Set(d, lse_rows[r]);
    const VF dv = hn::Set(d, tl.dd[r]);
    for (int64_t j = 0; j < kB; j += N) {
      if (j >= valid) {
        hn::StoreU(hn::Zero(d), d, sr + j);
        hn::StoreU(hn::Zero(d), d, dr + j);
        continue;
      }
      const size_t left = size_t(valid - j);
      const auto mk = hn::FirstN(d, left);
      const VF p = hn::IfThenElseZero(mk, Exp(d, hn::Sub(LoadN(d, sr + j, left), l)));
      const VF ds = hn::Mul(hn::Mul(p, hn::Sub(LoadN(d, dr + j, left), dv)), sc);
      hn::StoreU(p, d, sr + j);
      hn::StoreU(hn::IfThenElseZero(mk, ds), d, dr + j);
    }
  }
}

// dd[r] = dout_r . out_r for the m rows starting at the given pointers.
void rows_d(float* dd, const float* dout, int64_t lddo, const float* out, int64_t ldo, int64_t m,
            int64_t hd) {
  for (int64_t r = 0; r < m; ++r) dd[r] = dot(dout + r * lddo, out + r * ldo, hd);
}

// The dO rows of one query block as the products read them: f32 in place, or (bf16) rounded to
// bf16 once into the tile (stride hd).
const float* dout_rows(const BwdTiles& tl, const float* dout, int64_t ldo, int64_t m, int64_t hd,
                       bool bf16, int64_t* ld_out) {
  if (!bf16) {
    *ld_out = ldo;
    return dout;
  }
  for (int64_t r = 0; r < m; ++r) {
    std::copy(dout + r * ldo, dout + r * ldo + hd, tl.dow + r * hd);
    round_bf16(tl.dow + r * hd, hd);
  }
  *ld_out = hd;
  return tl.dow;
}

void store_rows(float* dst, int64_t ld, const float* tile, int64_t m, int64_t hd) {
  for (int64_t r = 0; r < m; ++r) std::copy(tile + r * hd, tile + (r + 1) * hd, dst + r * ld);
}

template <class In>
void backward(float* dqkv, float* scratch, const float* dout, const In* qkv, const float* out,
              const float* lse, int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd) {
  constexpr bool kBf16 = std::is_same_v<In, uint16_t>;
  check_shapes(nh, nkv, hd);
  if (b <= 0 || t <= 0) return;
  const int64_t ld = (nh + 2 * nkv) * hd, ldo = nh * hd, group = nh / nkv;
  const int64_t nblk = (t + kB - 1) / kB;
  const float scale = 1.0f / std::sqrt(float(hd));
  // The team size must match what the scratch function sized the scratch for.
  const int nthreads = omp_get_max_threads();
  const int64_t per_thread = per_thread_scratch(hd, kBf16);

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
      const In* base = qkv + bi * t * ld;
      int64_t ldk = 0, ldv = 0, ldq = 0, lddo = 0;
      const float* kblk = block_rows(tl.kw, base + j0 * ld + (nh + kvh) * hd, ld, w, hd, &ldk);
      const float* vblk =
          block_rows(tl.vw, base + j0 * ld + (nh + nkv + kvh) * hd, ld, w, hd, &ldv);
      pack_transposed(tl.pk, kblk, ldk, 0, w, hd, kB);
      pack_transposed(tl.pv, vblk, ldv, 0, w, hd, kB);
      std::fill(tl.g1, tl.g1 + kB * hd, 0.0f);
      std::fill(tl.g2, tl.g2 + kB * hd, 0.0f);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int64_t qb = kb; qb < nblk; ++qb) {
          const int64_t i0 = qb * kB, m = std::min(kB, t - i0);
          const bool diag = qb == kb;
          const float* q = block_rows(tl.qw, base + i0 * ld + h * hd, ld, m, hd, &ldq);
          const float* dout_b =
              dout_rows(tl, dout + (bi * t + i0) * ldo + h * hd, ldo, m, hd, kBf16, &lddo);
          rows_d(tl.dd, dout_b, lddo, out + (bi * t + i0) * ldo + h * hd, ldo, m, hd);
          block_probs_and_ds(tl, q, ldq, dout_b, lddo, lse + (bi * nh + h) * t + i0, i0, m, j0, w,
                             hd, scale);
          if (kBf16) {  // P -> bf16 for dV, dS -> bf16 for dK
            round_bf16(tl.s, m * kB);
            round_bf16(tl.dp, m * kB);
          }
          // dV[j] += sum_r P[r, j] dO[r], dK[j] += sum_r dS[r, j] Q[r]; on the diagonal block
          // rows r < j have P = dS = 0 and are skipped.
          for (int64_t jr0 = 0; jr0 < w; jr0 += kMr) {
            const int64_t mm = std::min<int64_t>(kMr, w - jr0);
            const int64_t rs = diag ? jr0 : 0;
            row_tile(mm, hd, m - rs, tl.s + rs * kB + jr0, 1, kB, dout_b + rs * lddo, lddo,
                     tl.g2 + jr0 * hd, hd, 1.0f, true);
            row_tile(mm, hd, m - rs, tl.dp + rs * kB + jr0, 1, kB, q + rs * ldq, ldq,
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
      const In* base = qkv + bi * t * ld;
      int64_t ldk = 0, ldv = 0, ldq = 0, lddo = 0;
      const float* q = block_rows(tl.qw, base + i0 * ld + h * hd, ld, m, hd, &ldq);
      const In* k = base + (nh + kvh) * hd;
      const float* dout_b =
          dout_rows(tl, dout + (bi * t + i0) * ldo + h * hd, ldo, m, hd, kBf16, &lddo);
      rows_d(tl.dd, dout_b, lddo, out + (bi * t + i0) * ldo + h * hd, ldo, m, hd);
      std::fill(tl.g1, tl.g1 + kB * hd, 0.0f);
      for (int64_t kb = 0; kb <= qb; ++kb) {
        const int64_t j0 = kb * kB, w = std::min(kB, t - j0);
        const bool diag = kb == qb;
        const float* kblk = block_rows(tl.kw, k + j0 * ld, ld, w, hd, &ldk);
        const float* vblk =
            block_rows(tl.vw, base + j0 * ld + (nh + nkv + kvh) * hd, ld, w, hd, &ldv);
        pack_transposed(tl.pk, kblk, ldk, 0, w, hd, kB);
        pack_transposed(tl.pv, vblk, ldv, 0, w, hd, kB);
        block_probs_and_ds(tl, q, ldq, dout_b, lddo, lse + (bi * nh + h) * t + i0, i0, m, j0, w, hd,
                           scale);
        if (kBf16) round_bf16(tl.dp, m * kB);  // dS -> bf16 for dQ
        for (int64_t r0 = 0; r0 < m; r0 += kMr) {
          const int64_t mm = std::min<int64_t>(kMr, m - r0);
          const int64_t kdim = diag ? std::min(w, r0 + mm) : w;
          row_tile(mm, hd, kdim, tl.dp + r0 * kB, kB, 1, kblk, ldk, tl.g1 + r0 * hd, hd, 1.0f,
                   true);
        }
      }
      store_rows(dqkv + (bi * t + i0) * ld + h * hd, ld, tl.g1, m, hd);
    }
  }
}

}  // namespace

void FlashForward(float* out, float* lse, const float* qkv, int64_t b, int64_t t, int64_t nh,
                  int64_t nkv, int64_t hd) {
  forward(out, lse, qkv, b, t, nh, nkv, hd);
}
void FlashBackward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                   const float* out, const float* lse, int64_t b, int64_t t, int64_t nh,
                   int64_t nkv, int64_t hd) {
  backward(dqkv, scratch, dout, qkv, out, lse, b, t, nh, nkv, hd);
}
void FlashForwardBf16(float* out, float* lse, const uint16_t* qkv16, int64_t b, int64_t t,
                      int64_t nh, int64_t nkv, int64_t hd) {
  forward(out, lse, qkv16, b, t, nh, nkv, hd);
}
void FlashBackwardBf16(float* dqkv, float* scratch, const float* dout, const uint16_t* qkv16,
                       const float* out, const float* lse, int64_t b, int64_t t, int64_t nh,
                       int64_t nkv, int64_t hd) {
  backward(dqkv, scratch, dout, qkv16, out, lse, b, t, nh, nkv, hd);
}
int64_t FlashScratchPerThread(int64_t hd, bool bf16) {
  return per_thread_scratch(hd, bf16);
}

}  // namespace strata::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/flash_attention_avx512bf16.h"

namespace strata::kernels {

HWY_EXPORT(FlashForward);
HWY_EXPORT(FlashBackward);
HWY_EXPORT(FlashForwardBf16);
HWY_EXPORT(FlashBackwardBf16);
HWY_EXPORT(FlashScratchPerThread);

namespace {
int threads_or_max(int threads) {
  return threads > 0 ? threads : omp_get_max_threads();
}
}  // namespace

void flash_attention_forward(float* out, float* lse, const float* qkv, int64_t b, int64_t t,
                             int64_t nh, int64_t nkv, int64_t hd) {
  STRATA_DISPATCH(FlashForward)(out, lse, qkv, b, t, nh, nkv, hd);
}

int64_t flash_attention_backward_scratch(int64_t /*b*/, int64_t /*t*/, int64_t /*nh*/,
                                         int64_t /*nkv*/, int64_t hd, int threads) {
  return int64_t(threads_or_max(threads)) * STRATA_DISPATCH(FlashScratchPerThread)(hd, false);
}

void flash_attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                              const float* out, const float* lse, int64_t b, int64_t t, int64_t nh,
                              int64_t nkv, int64_t hd) {
  STRATA_DISPATCH(FlashBackward)(dqkv, scratch, dout, qkv, out, lse, b, t, nh, nkv, hd);
}

// bf16: the hand-tiled vdpbf16ps kernel at the avx512bf16 level, the portable one elsewhere.
void flash_attention_forward_bf16(float* out, float* lse, const uint16_t* qkv16, int64_t b,
                                  int64_t t, int64_t nh, int64_t nkv, int64_t hd) {
#if STRATA_HAVE_AVX512BF16_KERNELS
  if (isa::native_bf16()) return avx512bf16::flash_forward(out, lse, qkv16, b, t, nh, nkv, hd);
#endif
  STRATA_DISPATCH(FlashForwardBf16)(out, lse, qkv16, b, t, nh, nkv, hd);
}

int64_t flash_attention_backward_bf16_scratch(int64_t b, int64_t t, int64_t nh, int64_t nkv,
                                              int64_t hd, int threads) {
#if STRATA_HAVE_AVX512BF16_KERNELS
  if (isa::native_bf16()) return avx512bf16::flash_backward_scratch(b, t, nh, nkv, hd, threads);
#endif
  return portable_flash_attention_backward_bf16_scratch(b, t, nh, nkv, hd, threads);
}

void flash_attention_backward_bf16(float* dqkv, float* scratch, const float* dout,
                                   const uint16_t* qkv16, const float* out, const float* lse,
                                   int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hd) {
#if STRATA_HAVE_AVX512BF16_KERNELS
  if (isa::native_bf16())
    return avx512bf16::flash_backward(dqkv, scratch, dout, qkv16, out, lse, b, t, nh, nkv, hd);
#endif
  STRATA_DISPATCH(FlashBackwardBf16)(dqkv, scratch, dout, qkv16, out, lse, b, t, nh, nkv, hd);
}

void portable_flash_attention_forward_bf16(float* out, float* lse, const uint16_t* qkv16, int64_t b,
                                           int64_t t, int64_t nh, int64_t nkv, int64_t hd) {
  STRATA_DISPATCH(FlashForwardBf16)(out, lse, qkv16, b, t, nh, nkv, hd);
}
int64_t portable_flash_attention_backward_bf16_scratch(int64_t /*b*/, int64_t /*t*/, int64_t /*nh*/,
                                                       int64_t /*nkv*/, int64_t hd, int threads) {
  return int64_t(threads_or_max(threads)) * STRATA_DISPATCH(FlashScratchPerThread)(hd, true);
}
void portable_flash_attention_backward_bf16(float* dqkv, float* scratch, const float* dout,
                                            const uint16_t* qkv16, const float* out,
                                            const float* lse, int64_t b, int64_t t, int64_t nh,
                                            int64_t nkv, int64_t hd) {
  STRATA_DISPATCH(FlashBackwardBf16)(dqkv, scratch, dout, qkv16, out, lse, b, t, nh, nkv, hd);
}

}  // namespace strata::kernels
#endif  // HWY_ONCE
