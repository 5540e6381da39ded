// Attention with an explicit key range per query row on the CPU (attention_ranges.h), f32: the
// causal flash kernel of flash_attention.cc with its diagonal replaced by arbitrary ranges.
//
// Tiles of kB query rows x kB keys, key tiles aligned to multiples of kB from key 0. For each
// pair of tiles the rows' ranges are clipped to the key tile once (RangeTile): the rows that see
// a key of the tile, and per micro-tile row group (kMr rows) the span of columns any of its rows
// sees. Key tiles no row of the query tile sees are skipped, and inside a visited tile only the
// group's column span is multiplied; that is what makes causal and document masks as cheap as the
// causal kernel (a query tile visits the key tiles from its earliest range start to its latest
// range end). Elements outside a row's own range are masked to probability zero lane by lane.
//
// Forward: one task per (item, head, query tile), latest query tiles first (with causal or
// document ranges they see the most keys). Online softmax per row over the visited key tiles;
// a row that never sees a key keeps m = -inf and gets out = 0, lse = -inf.
//
// Backward, two deterministic passes in one team (no float atomics, every gradient row owned by
// one task, every task's sums in a fixed order), as in flash_attention.cc:
//  1. dK, dV: one task per (item, kv head, key tile); the query tiles in order and, for each, the
//     query heads of the group in order. Recomputes P = exp(S - lse) and dS = P (dP - D) scale
//     with the caller's (final) lse and D = rowsum(dO o O), and sums dV += P^T dO, dK += dS^T Q
//     in per-thread tiles, then adds them to dk, dv.
//  2. dQ: one task per (item, head, query tile), the key tiles in order, dQ += dS K, added to dq.
// The gradients are added, not stored, so that a ring sums the contributions of its key blocks.
//
// Compiled once per kernel level (Highway's foreach_target.h); attention_ranges.h's functions
// dispatch.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention_ranges.cc"
#include "kernels/cpu/attention_ranges.h"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/micro_tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace strata::kernels::HWY_NAMESPACE {
namespace {

using namespace tiles;

// Query rows per tile = keys per tile, forward and backward: the causal kernel's measured choice
// (the S tile and the O accumulator, 32 KiB together at hd = 64, stay in L1).
constexpr int64_t kB = 64;
constexpr int64_t kGroups = (kB + kMr - 1) / kMr;  // micro-tile row groups of a query tile
constexpr int64_t kMaxHeadDim = 256;

int64_t round16(int64_t n) {
  return (n + 15) / 16 * 16;
}

void check_shapes(const RangeAttentionShape& s) {
  STRATA_CHECK(s.nh > 0 && s.nkv > 0 && s.nh % s.nkv == 0, "attention_ranges: n_head ", s.nh,
               " must be a multiple of n_kv_head ", s.nkv);
  STRATA_CHECK(s.hd > 0 && s.hd <= kMaxHeadDim, "attention_ranges: head_dim ", s.hd,
               " must be in [1, ", kMaxHeadDim, "]");
  STRATA_CHECK(s.b >= 0 && s.tq >= 0 && s.tk >= 0, "attention_ranges: negative size");
}

// The ranges of query rows [i0, i0 + m) (begin/end already offset to row i0) clipped to a span
// of keys: per row [jb, je) relative to `base` (empty rows jb = je = 0), the rows [rlo, rhi)
// with a key in the span, and per row group g the column span [gmin, gmax) its rows see.
struct RangeTile {
  int64_t jb[kB], je[kB];
  int64_t gmin[kGroups], gmax[kGroups];
  int64_t rlo, rhi;
  bool any() const { return rlo < rhi; }
};

// Clips the rows' ranges to the keys [lo, hi) (absolute), relative to lo.
void clip_ranges(RangeTile* rt, const int32_t* kbeg, const int32_t* kend, int64_t m, int64_t lo,
                 int64_t hi) {
  rt->rlo = m;
  rt->rhi = 0;
  for (int64_t g = 0; g < kGroups; ++g) {
    rt->gmin[g] = hi - lo;
    rt->gmax[g] = 0;
  }
  for (int64_t r = 0; r < m; ++r) {
    const int64_t b = std::max<int64_t>(kbeg[r], lo), e = std::min<int64_t>(kend[r], hi);
    if (b >= e) {
      rt->jb[r] = rt->je[r] = 0;
      continue;
    }
    rt->jb[r] = b - lo;
    rt->je[r] = e - lo;
    rt->rlo = std::min(rt->rlo, r);
    rt->rhi = r + 1;
    const int64_t g = r / kMr;
    rt->gmin[g] = std::min(rt->gmin[g], rt->jb[r]);
    rt->gmax[g] = std::max(rt->gmax[g], rt->je[r]);
  }
}

// The absolute key span [lo, hi) some row of the m rows sees (lo >= hi: none), keys < tk.
void row_span(const int32_t* kbeg, const int32_t* kend, int64_t m, int64_t tk, int64_t* lo,
              int64_t* hi) {
  *lo = tk;
  *hi = 0;
  for (int64_t r = 0; r < m; ++r) {
    const int64_t b = std::max<int64_t>(kbeg[r], 0), e = std::min<int64_t>(kend[r], tk);
    if (b >= e) continue;
    *lo = std::min(*lo, b);
    *hi = std::max(*hi, e);
  }
}

// s[r, gmin..gmax) = alpha * a_r . panel[:, j] for each row group's column span: the columns no
// row of the group sees are left as they are (masked later).
void tile_scores(float* s, const float* a, int64_t lda, const float* panel, const RangeTile& rt,
                 int64_t m, int64_t hd, float alpha) {
  for (int64_t r0 = 0, g = 0; r0 < m; r0 += kMr, ++g) {
    if (rt.gmin[g] >= rt.gmax[g]) continue;
    const int64_t mm = std::min<int64_t>(kMr, m - r0), c0 = rt.gmin[g];
    row_tile(mm, rt.gmax[g] - c0, hd, a + r0 * lda, lda, 1, panel + c0, kB, s + r0 * kB + c0, kB,
             alpha, false);
  }
}

// Lanes j .. j + N of a row whose range is [jb, je): jb <= lane < je.
HWY_INLINE auto range_mask(DF d, int64_t j, int64_t jb, int64_t je) {
  const int64_t n = int64_t(hn::Lanes(d));
  const auto below_end = hn::FirstN(d, size_t(std::clamp<int64_t>(je - j, 0, n)));
  const auto below_begin = hn::FirstN(d, size_t(std::clamp<int64_t>(jb - j, 0, n)));
  return hn::AndNot(below_begin, below_end);
}

// Online softmax of one score row over its range [jb, je) of the tile (non-empty):
// sr[0..kB) = exp(sr - m_new) inside the range and 0 outside, the running max and sum updated,
// and the accumulator row rescaled by exp(m_old - m_new) when the max grows.
void online_softmax_range(float* sr, int64_t jb, int64_t je, float* mrow, float* lrow,
                          float* acc_row, int64_t hd) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const float mold = *mrow, mnew = std::max(mold, MaxN(d, sr + jb, je - jb));
  const VF mv = hn::Set(d, mnew);
  VF sum = hn::Zero(d);
  for (int64_t j = 0; j < kB; j += N) {
    // Lanes outside the range may hold stale scores: select, never multiply, them away.
    const VF e =
        hn::IfThenElseZero(range_mask(d, j, jb, je), Exp(d, hn::Sub(hn::LoadU(d, sr + j), mv)));
    sum = hn::Add(sum, e);
    hn::StoreU(e, d, sr + j);
  }
  if (mnew > mold) {
    const float c = std::exp(mold - mnew);  // 0 on the first tile seen (mold = -inf)
    *lrow *= c;
#pragma omp simd
    for (int64_t k = 0; k < hd; ++k) acc_row[k] *= c;
    *mrow = mnew;
  }
  *lrow += ReduceSum(d, sum);
}

void forward(float* out, float* lse, const float* q, int64_t ldq, const float* k, const float* v,
             int64_t ldk, const int32_t* kbeg, const int32_t* kend, const RangeAttentionShape& sh) {
  check_shapes(sh);
  const int64_t b = sh.b, tq = sh.tq, tk = sh.tk, nh = sh.nh, nkv = sh.nkv, hd = sh.hd;
  if (b <= 0 || tq <= 0) return;
  const int64_t ldo = nh * hd, group = nh / nkv;
  const int64_t nqb = (tq + kB - 1) / kB, nbh = b * nh;
  const float scale = 1.0f / std::sqrt(float(hd));
#pragma omp parallel
  {
    std::vector<float> buf(size_t(hd * 2 * kB + kB * kB + 2 * kB));
    float* panel = buf.data();     // K^T of one key tile [hd][kB]
    float* acc = panel + kB * hd;  // O accumulator [kB][hd]
    float* s = acc + kB * hd;      // scores / probabilities [kB][kB]
    float* mrow = s + kB * kB;     // running max
    float* lrow = mrow + kB;       // running sum
    RangeTile rt;
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < nbh * nqb; ++task) {
      const int64_t qb = nqb - 1 - task / nbh;  // latest (usually most work) query tiles first
      const int64_t bi = task % nbh / nh, h = task % nh, kvh = h / group;
      const int64_t i0 = qb * kB, m = std::min(kB, tq - i0);
      const int32_t* rb = kbeg + bi * tq + i0;
      const int32_t* re = kend + bi * tq + i0;
      const float* qt = q + (bi * tq + i0) * ldq + h * hd;
      const float* kh = k + bi * tk * ldk + kvh * hd;
      const float* vh = v + bi * tk * ldk + kvh * hd;
      std::fill(acc, acc + kB * hd, 0.0f);
      std::fill(mrow, mrow + kB, -INFINITY);
      std::fill(lrow, lrow + kB, 0.0f);
      int64_t lo = 0, hi = 0;
      row_span(rb, re, m, tk, &lo, &hi);
      for (int64_t j0 = lo / kB * kB; j0 < hi; j0 += kB) {
        const int64_t w = std::min(kB, tk - j0);
        clip_ranges(&rt, rb, re, m, j0, j0 + w);
        if (!rt.any()) continue;  // a gap between the ranges of the tile's rows
        pack_transposed(panel, kh + j0 * ldk, ldk, 0, w, hd, kB);
        tile_scores(s, qt, ldq, panel, rt, m, hd, scale);
        // Every row, not only [rlo, rhi): the P V product below reads whole row groups.
        for (int64_t r = 0; r < m; ++r) {
          if (rt.jb[r] < rt.je[r]) {
            online_softmax_range(s + r * kB, rt.jb[r], rt.je[r], mrow + r, lrow + r, acc + r * hd,
                                 hd);
          } else {  // sees nothing here, but its group's span may cover columns: P = 0
            std::fill(s + r * kB, s + (r + 1) * kB, 0.0f);
          }
        }
        // O += P V over each group's column span (rows outside [rlo, rhi) have empty spans).
        for (int64_t r0 = 0, g = 0; r0 < m; r0 += kMr, ++g) {
          if (rt.gmin[g] >= rt.gmax[g]) continue;
          const int64_t mm = std::min<int64_t>(kMr, m - r0), c0 = rt.gmin[g];
          row_tile(mm, hd, rt.gmax[g] - c0, s + r0 * kB + c0, kB, 1, vh + (j0 + c0) * ldk, ldk,
                   acc + r0 * hd, hd, 1.0f, true);
        }
      }
      float* o = out + (bi * tq + i0) * ldo + h * hd;
      float* l = lse + (bi * nh + h) * tq + i0;
      for (int64_t r = 0; r < m; ++r) {
        float* orow = o + r * ldo;
        if (mrow[r] == -INFINITY) {  // no key seen: the identity of the merge
          std::fill(orow, orow + hd, 0.0f);
          l[r] = -INFINITY;
          continue;
        }
        const float inv = 1.0f / lrow[r];
        const float* ar = acc + r * hd;
#pragma omp simd
        for (int64_t c = 0; c < hd; ++c) orow[c] = ar[c] * inv;
        l[r] = mrow[r] + std::log(lrow[r]);
      }
    }
  }
}

// Floats of one thread's backward tiles.
int64_t per_thread_scratch(int64_t hd) {
  return 4 * kB * round16(hd) + 2 * kB * kB + kB;
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
  const int64_t hdp = round16(hd);
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

// For the query rows of rt against the key tile whose K^T, V^T panels are in tl.pk, tl.pv:
// tl.s = P, tl.dp = dS * scale on all m rows (zero outside each row's range: the products read
// whole row groups, and rows that see no key of the tile are all zero).
// q, dout point at the tile's first row; lse_rows at its lse; tl.dd holds D of the rows.
void tile_probs_and_ds(const BwdTiles& tl, const RangeTile& rt, const float* q, int64_t ldq,
                       const float* dout, int64_t ldo, const float* lse_rows, int64_t m, int64_t hd,
                       float scale) {
  tile_scores(tl.s, q, ldq, tl.pk, rt, m, hd, scale);
  tile_scores(tl.dp, dout, ldo, tl.pv, rt, m, hd, 1.0f);
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const VF sc = hn::Set(d, scale);
  for (int64_t r = 0; r < m; ++r) {
    const int64_t jb = rt.jb[r], je = rt.je[r];
    float* sr = tl.s + r * kB;
    float* dr = tl.dp + r * kB;
    // A row that sees no key here may have lse = -inf (and, in pass 1, a stale D): its lanes
    // are all masked, so the clamped exp of +inf or a NaN never survives the selects.
    const VF l = hn::Set(d, lse_rows[r]);
    const VF dv = hn::Set(d, tl.dd[r]);
    for (int64_t j = 0; j < kB; j += N) {
      const auto mk = range_mask(d, j, jb, je);
      const VF p = hn::IfThenElseZero(mk, Exp(d, hn::Sub(hn::LoadU(d, sr + j), l)));
      const VF ds = hn::Mul(hn::Mul(p, hn::Sub(hn::LoadU(d, dr + j), dv)), sc);
      hn::StoreU(p, d, sr + j);
      hn::StoreU(hn::IfThenElseZero(mk, ds), d, dr + j);  // stale dP lanes may be inf or NaN
    }
  }
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

// dst rows (stride ld) += tile rows (stride hd), m rows of hd.
void add_rows(float* dst, int64_t ld, const float* tile, int64_t m, int64_t hd) {
  for (int64_t r = 0; r < m; ++r) {
    float* out = dst + r * ld;
    const float* in = tile + r * hd;
#pragma omp simd
    for (int64_t c = 0; c < hd; ++c) out[c] += in[c];
  }
}

void backward(float* dq, float* dk, float* dv, float* scratch, const float* dout, const float* q,
              int64_t ldq, const float* k, const float* v, int64_t ldk, const float* out,
              const float* lse, const int32_t* kbeg, const int32_t* kend,
              const RangeAttentionShape& sh) {
  check_shapes(sh);
  const int64_t b = sh.b, tq = sh.tq, tk = sh.tk, nh = sh.nh, nkv = sh.nkv, hd = sh.hd;
  if (b <= 0 || tq <= 0 || tk <= 0) return;
  const int64_t ldo = nh * hd, group = nh / nkv;
  const int64_t nqb = (tq + kB - 1) / kB, nkb = (tk + kB - 1) / kB, nbh = b * nh;
  const float scale = 1.0f / std::sqrt(float(hd));
  // The team size must match what the scratch function sized the scratch for.
  const int nthreads = omp_get_max_threads();
  const int64_t per_thread = per_thread_scratch(hd);
  // The passes are independent (pass 1 writes only dk, dv; pass 2 only dq; both read only the
  // inputs): one team, no barrier between.
#pragma omp parallel num_threads(nthreads)
  {
    const BwdTiles tl = tiles_of(scratch + int64_t(omp_get_thread_num()) * per_thread, hd);
    RangeTile rt;
    // Pass 1: dK, dV per (item, kv head, key tile); earliest key tiles (causal: most work) first.
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t task = 0; task < nkb * b * nkv; ++task) {
      const int64_t kb = task / (b * nkv), bi = task % (b * nkv) / nkv, kvh = task % nkv;
      const int64_t j0 = kb * kB, w = std::min(kB, tk - j0);
      const float* kt = k + (bi * tk + j0) * ldk + kvh * hd;
      const float* vt = v + (bi * tk + j0) * ldk + kvh * hd;
      pack_transposed(tl.pk, kt, ldk, 0, w, hd, kB);
      pack_transposed(tl.pv, vt, ldk, 0, w, hd, kB);
      std::fill(tl.g1, tl.g1 + kB * hd, 0.0f);
      std::fill(tl.g2, tl.g2 + kB * hd, 0.0f);
      for (int64_t qb = 0; qb < nqb; ++qb) {
        const int64_t i0 = qb * kB, m = std::min(kB, tq - i0);
        clip_ranges(&rt, kbeg + bi * tq + i0, kend + bi * tq + i0, m, j0, j0 + w);
        if (!rt.any()) continue;
        // Per key group of kMr keys, the rows that see one of them: dV, dK sum over those only.
        int64_t klo[kGroups], khi[kGroups];
        for (int64_t jr0 = 0, g = 0; jr0 < w; jr0 += kMr, ++g) {
          const int64_t jr1 = std::min<int64_t>(jr0 + kMr, w);
          klo[g] = rt.rhi;
          khi[g] = rt.rlo;
          for (int64_t r = rt.rlo; r < rt.rhi; ++r) {
            if (rt.jb[r] < jr1 && rt.je[r] > jr0 && rt.jb[r] < rt.je[r]) {
              klo[g] = std::min(klo[g], r);
              khi[g] = r + 1;
            }
          }
        }
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
          const float* qt = q + (bi * tq + i0) * ldq + h * hd;
          const float* dot_rows = dout + (bi * tq + i0) * ldo + h * hd;
          const float* out_rows = out + (bi * tq + i0) * ldo + h * hd;
          for (int64_t r = rt.rlo; r < rt.rhi; ++r)
            tl.dd[r] = dot(dot_rows + r * ldo, out_rows + r * ldo, hd);
          tile_probs_and_ds(tl, rt, qt, ldq, dot_rows, ldo, lse + (bi * nh + h) * tq + i0, m, hd,
                            scale);
          // dV[j] += sum_r P[r, j] dO[r], dK[j] += sum_r dS[r, j] Q[r].
          for (int64_t jr0 = 0, g = 0; jr0 < w; jr0 += kMr, ++g) {
            if (klo[g] >= khi[g]) continue;
            const int64_t mm = std::min<int64_t>(kMr, w - jr0), r0 = klo[g], nr = khi[g] - klo[g];
            row_tile(mm, hd, nr, tl.s + r0 * kB + jr0, 1, kB, dot_rows + r0 * ldo, ldo,
                     tl.g2 + jr0 * hd, hd, 1.0f, true);
            row_tile(mm, hd, nr, tl.dp + r0 * kB + jr0, 1, kB, qt + r0 * ldq, ldq, tl.g1 + jr0 * hd,
                     hd, 1.0f, true);
          }
        }
      }
      add_rows(dk + (bi * tk + j0) * ldk + kvh * hd, ldk, tl.g1, w, hd);
      add_rows(dv + (bi * tk + j0) * ldk + kvh * hd, ldk, tl.g2, w, hd);
    }

    // Pass 2: dQ per (item, head, query tile); latest query tiles (causal: most work) first.
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < nqb * nbh; ++task) {
      const int64_t qb = nqb - 1 - task / nbh;
      const int64_t bi = task % nbh / nh, h = task % nh, kvh = h / group;
      const int64_t i0 = qb * kB, m = std::min(kB, tq - i0);
      const int32_t* rb = kbeg + bi * tq + i0;
      const int32_t* re = kend + bi * tq + i0;
      const float* qt = q + (bi * tq + i0) * ldq + h * hd;
      const float* dot_rows = dout + (bi * tq + i0) * ldo + h * hd;
      const float* out_rows = out + (bi * tq + i0) * ldo + h * hd;
      int64_t lo = 0, hi = 0;
      row_span(rb, re, m, tk, &lo, &hi);
      if (lo >= hi) continue;  // no row sees a key of this block: dq gets nothing
      for (int64_t r = 0; r < m; ++r) tl.dd[r] = dot(dot_rows + r * ldo, out_rows + r * ldo, hd);
      std::fill(tl.g1, tl.g1 + kB * hd, 0.0f);
      for (int64_t j0 = lo / kB * kB; j0 < hi; j0 += kB) {
        const int64_t w = std::min(kB, tk - j0);
        clip_ranges(&rt, rb, re, m, j0, j0 + w);
        if (!rt.any()) continue;
        const float* kt = k + (bi * tk + j0) * ldk + kvh * hd;
        pack_transposed(tl.pk, kt, ldk, 0, w, hd, kB);
        pack_transposed(tl.pv, v + (bi * tk + j0) * ldk + kvh * hd, ldk, 0, w, hd, kB);
        tile_probs_and_ds(tl, rt, qt, ldq, dot_rows, ldo, lse + (bi * nh + h) * tq + i0, m, hd,
                          scale);
        for (int64_t r0 = 0, g = 0; r0 < m; r0 += kMr, ++g) {
          if (rt.gmin[g] >= rt.gmax[g]) continue;
          const int64_t mm = std::min<int64_t>(kMr, m - r0), c0 = rt.gmin[g];
          row_tile(mm, hd, rt.gmax[g] - c0, tl.dp + r0 * kB + c0, kB, 1, kt + c0 * ldk, ldk,
                   tl.g1 + r0 * hd, hd, 1.0f, true);
        }
      }
      add_rows(dq + (bi * tq + i0) * ldq + h * hd, ldq, tl.g1, m, hd);
    }
  }
}

}  // namespace

void RangesForward(float* out, float* lse, const float* q, int64_t ldq, const float* k,
                   const float* v, int64_t ldk, const int32_t* kbeg, const int32_t* kend,
                   const RangeAttentionShape& s) {
  forward(out, lse, q, ldq, k, v, ldk, kbeg, kend, s);
}
void RangesBackward(float* dq, float* dk, float* dv, float* scratch, const float* dout,
                    const float* q, int64_t ldq, const float* k, const float* v, int64_t ldk,
                    const float* out, const float* lse, const int32_t* kbeg, const int32_t* kend,
                    const RangeAttentionShape& s) {
  backward(dq, dk, dv, scratch, dout, q, ldq, k, v, ldk, out, lse, kbeg, kend, s);
}
int64_t RangesScratchPerThread(int64_t hd) {
  return per_thread_scratch(hd);
}

}  // namespace strata::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/dispatch.h"

namespace strata::kernels {

HWY_EXPORT(RangesForward);
HWY_EXPORT(RangesBackward);
HWY_EXPORT(RangesScratchPerThread);

void attention_ranges_forward(float* out, float* lse, const float* q, int64_t q_stride,
                              const float* k, const float* v, int64_t kv_stride,
                              const int32_t* key_begin, const int32_t* key_end,
                              const RangeAttentionShape& s) {
  STRATA_DISPATCH(RangesForward)(out, lse, q, q_stride, k, v, kv_stride, key_begin, key_end, s);
}

int64_t attention_ranges_backward_scratch(int64_t hd, int threads) {
  const int64_t n = threads > 0 ? threads : omp_get_max_threads();
  return n * STRATA_DISPATCH(RangesScratchPerThread)(hd);
}

void attention_ranges_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout,
                               const float* q, int64_t q_stride, const float* k, const float* v,
                               int64_t kv_stride, const float* out, const float* lse,
                               const int32_t* key_begin, const int32_t* key_end,
                               const RangeAttentionShape& s) {
  STRATA_DISPATCH(RangesBackward)
  (dq, dk, dv, scratch, dout, q, q_stride, k, v, kv_stride, out, lse, key_begin, key_end, s);
}

// Element-wise in (row, head) and cheap next to the attention itself: plain loops, one row per
// iteration (each element written by one iteration: deterministic).
void attention_ranges_merge(float* out_acc, float* lse_acc, const float* out_part,
                            const float* lse_part, int64_t b, int64_t tq, int64_t nh, int64_t hd) {
  const int64_t ldo = nh * hd;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < b * tq; ++row) {
    const int64_t bi = row / tq, i = row % tq;
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t li = (bi * nh + h) * tq + i;
      const float la = lse_acc[li], lp = lse_part[li];
      if (lp == -INFINITY) continue;  // the part saw no key: nothing to add
      float* oa = out_acc + row * ldo + h * hd;
      const float* op = out_part + row * ldo + h * hd;
      if (la == -INFINITY) {  // nothing accumulated yet: take the part as it is
        std::copy(op, op + hd, oa);
        lse_acc[li] = lp;
        continue;
      }
      // Weights relative to the larger lse: one of them is exactly 1, neither overflows.
      const float mx = std::max(la, lp);
      const float wa = std::exp(la - mx), wp = std::exp(lp - mx), sum = wa + wp;
      const float ca = wa / sum, cp = wp / sum;
#pragma omp simd
      for (int64_t c = 0; c < hd; ++c) oa[c] = ca * oa[c] + cp * op[c];
      lse_acc[li] = mx + std::log(sum);
    }
  }
}

}  // namespace strata::kernels
#endif  // HWY_ONCE
