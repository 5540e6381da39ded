// Causal flash attention on the CPU with bf16 operands (FlashAttention-2 bf16 numerics).
//
// Same blocks, task decomposition, order of operations and determinism as flash_attention.cc
// (read that first); only the block products change: every one is a bf16 x bf16 product on
// vdpbf16ps (tiles::micro_tile_bf16), accumulated in f32. q, k, v arrive as bf16; the operands
// computed on the way are rounded to bf16 (nearest even) where FlashAttention-2 rounds them:
//  forward   S = Q K^T (f32), online softmax in f32, P -> bf16, O += P V (f32 accumulator);
//  backward  dO -> bf16 once per query block, S and dP = dO V^T in f32, P and dS in f32 as in the
//            f32 kernel, then P -> bf16 for dV += P^T dO, dS -> bf16 for dK += dS^T Q and
//            dQ += dS K.
// Softmax bookkeeping (max, exp, row sums, lse, D = rowsum(bf16(dO) o O)) stays f32.
//
// vdpbf16ps reduces over pairs, so each operand is packed with the reduction dimension in pairs
// (micro_tile_bf16.h): Q and dO rows as pairs along hd against K, V pair-transposed panels for
// S and dP; P, dS rows as pairs along keys against V, K packed as pairs of key rows for O and dQ;
// P, dS packed as pairs of query rows, read transposed (A strides 1 and kB), against dO, Q packed
// as pairs of query rows for dV and dK. An odd length pads its last pair with a zero.
//
// This is the avx512bf16 level's kernel (flash_attention_avx512bf16.h): the build compiles it for
// every x86-64 CPU, with AVX-512 and bf16 enabled for this file's own code only (the pragma below;
// the standard library's templates it uses stay at the baseline, so no AVX-512 instruction can
// leak into code that other CPUs run), and it is called only when isa::native_bf16(). It stays
// hand-written because vdpbf16ps has no portable spelling in Highway 1.0; flash_attention.cc's
// portable bf16 kernel is its fallback and its reference in the tests.
#include "kernels/cpu/flash_attention_avx512bf16.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"

#if STRATA_HAVE_AVX512BF16_KERNELS  // the whole file: x86-64 only

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_ps()
// (GCC bug 105593); the warning points into the header, so silence it for the header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")
#define STRATA_AVX512BF16_REGION 1
#include "kernels/cpu/micro_tile_bf16.h"
#include "kernels/cpu/vec.h"

namespace strata::kernels::avx512bf16 {

namespace {

using namespace tiles;

// Blocks as in flash_attention.cc (the forward and backward block sizes coincide there).
constexpr int64_t kB = 64;   // backward: query rows per block = keys per block
constexpr int64_t kBr = 64;  // forward: query rows per block
constexpr int64_t kBc = 64;  // forward: keys per block
constexpr int64_t kMaxHeadDim = 256;

void check_shapes(int64_t nh, int64_t nkv, int64_t hd) {
  STRATA_CHECK(nh > 0 && nkv > 0 && nh % nkv == 0, "flash_attention_bf16: n_head ", nh,
               " must be a multiple of n_kv_head ", nkv);
  STRATA_CHECK(hd > 0 && hd <= kMaxHeadDim, "flash_attention_bf16: head_dim ", hd,
               " must be in [1, ", kMaxHeadDim, "]");
}

int64_t words_of(int64_t hd) {
  return (hd + 1) / 2;  // 32-bit words of hd bf16 (pairs, the last padded)
}
int64_t round16(int64_t n) {
  return (n + 15) / 16 * 16;
}

// s[r, 0..ncols) = alpha * a_r . panel[:, j] for m rows of pairs a (stride lda words, hp pairs)
// against the pair-transposed panel (width pw), ncols trimmed to the causal triangle as in
// flash_attention.cc's block_scores.
void block_scores(float* s, const uint32_t* a, int64_t lda, const uint32_t* panel, int64_t m,
                  int64_t width, int64_t hp, float alpha, bool diag, int64_t diag_off, int64_t pw) {
  for (int64_t r0 = 0; r0 < m; r0 += kMrBf16) {
    const int64_t mm = std::min<int64_t>(kMrBf16, m - r0);
    const int64_t ncols = diag ? std::min(width, r0 + mm + diag_off) : width;
    if (ncols <= 0) continue;
    row_tile_bf16(mm, ncols, hp, a + r0 * lda, lda, 1, panel, pw, s + r0 * pw, pw, alpha, false);
  }
}

// One thread's forward tiles.
struct FwdTiles {
  std::vector<uint32_t> words;
  std::vector<float> floats;
  uint32_t* pk;  // K pair-transposed [hp][kBc]
  uint32_t* pv;  // V as pairs of key rows [kBc/2][hdp]
  uint32_t* qt;  // Q rows as pairs along hd [kBr][hp]
  uint32_t* pp;  // P rows as pairs along keys [kBr][kBc/2]
  float* acc;    // O accumulator [kBr][hd]
  float* s;      // scores / probabilities [kBr][kBc]
  float* mrow;   // running max [kBr]
  float* lrow;   // running sum [kBr]

  explicit FwdTiles(int64_t hd) {
    const int64_t hp = words_of(hd), hdp = round16(hd);
    words.resize(size_t(hp * kBc + kBc / 2 * hdp + kBr * hp + kBr * kBc / 2));
    floats.resize(size_t(kBr * hd + kBr * kBc + 2 * kBr));
    pk = words.data();
    pv = pk + hp * kBc;
    qt = pv + kBc / 2 * hdp;
    pp = qt + kBr * hp;
    acc = floats.data();
    s = acc + kBr * hd;
    mrow = s + kBr * kBc;
    lrow = mrow + kBr;
  }
};

}  // namespace

void flash_forward(float* out, float* lse, const uint16_t* qkv16, int64_t b, int64_t t, int64_t nh,
                   int64_t nkv, int64_t hd) {
  check_shapes(nh, nkv, hd);
  if (b <= 0 || t <= 0) return;
  const int64_t ld = (nh + 2 * nkv) * hd, ldo = nh * hd, group = nh / nkv;
  const int64_t nqb = (t + kBr - 1) / kBr, nbh = b * nh;
  const int64_t hp = words_of(hd), hdp = round16(hd);
  const float scale = 1.0f / std::sqrt(float(hd));
#pragma omp parallel
  {
    FwdTiles tl(hd);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < nbh * nqb; ++task) {
      const int64_t qb = nqb - 1 - task / nbh;  // latest (most work) query blocks first
      const int64_t bi = task % nbh / nh, h = task % nh, kvh = h / group;
      const int64_t i0 = qb * kBr, m = std::min(kBr, t - i0);
      const uint16_t* k = qkv16 + bi * t * ld + (nh + kvh) * hd;
      const uint16_t* v = qkv16 + bi * t * ld + (nh + nkv + kvh) * hd;
      load_row_pairs(tl.qt, hp, qkv16 + (bi * t + i0) * ld + h * hd, ld, m, hd);
      std::fill(tl.acc, tl.acc + kBr * hd, 0.0f);
      std::fill(tl.mrow, tl.mrow + kBr, -INFINITY);
      std::fill(tl.lrow, tl.lrow + kBr, 0.0f);
      for (int64_t j0 = 0; j0 < i0 + m; j0 += kBc) {
        const int64_t w = std::min(kBc, t - j0);
        const bool diag = j0 + w > i0;  // the block reaches past the first row: mask
        pack_pair_transposed(tl.pk, k, ld, j0, w, hd, kBc);
        block_scores(tl.s, tl.qt, hp, tl.pk, m, w, hp, scale, diag, i0 - j0 + 1, kBc);
        // Online softmax in f32, exactly as in flash_attention.cc.
        for (int64_t r = 0; r < m; ++r) {
          const int64_t valid = diag ? std::min(w, i0 + r - j0 + 1) : w;
          float* sr = tl.s + r * kBc;
          __m512 mx = _mm512_set1_ps(-INFINITY);
          for (int64_t j = 0; j < valid; j += 16) {
            const __mmask16 mk = vec::tail_mask(j, valid);
            mx = _mm512_mask_max_ps(mx, mk, mx, vec::load(sr + j, mk));
          }
          const float mold = tl.mrow[r], mnew = std::max(mold, vec::reduce_max(mx));
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
            tl.lrow[r] *= c;
            float* ar = tl.acc + r * hd;
#pragma omp simd
            for (int64_t d = 0; d < hd; ++d) ar[d] *= c;
            tl.mrow[r] = mnew;
          }
          tl.lrow[r] += vec::reduce_add(sum);  // the unrounded P, as FlashAttention-2
        }
        // O += P V with P rounded to bf16 (zero past the diagonal and past w, so an odd key
        // count pads its last pair with zeros).
        round_row_pairs(tl.pp, kBc / 2, tl.s, kBc, m, kBc);
        pack_row_pairs(tl.pv, hdp, v + j0 * ld, ld, w, hd);
        for (int64_t r0 = 0; r0 < m; r0 += kMrBf16) {
          const int64_t mm = std::min<int64_t>(kMrBf16, m - r0);
          const int64_t kdim = diag ? std::min(w, i0 + r0 + mm - j0) : w;
          if (kdim <= 0) continue;
          row_tile_bf16(mm, hd, (kdim + 1) / 2, tl.pp + r0 * (kBc / 2), kBc / 2, 1, tl.pv, hdp,
                        tl.acc + r0 * hd, hd, 1.0f, true);
        }
      }
      float* o = out + (bi * t + i0) * ldo + h * hd;
      float* l = lse + (bi * nh + h) * t + i0;
      for (int64_t r = 0; r < m; ++r) {
        const float inv = 1.0f / tl.lrow[r];
        const float* ar = tl.acc + r * hd;
        float* orow = o + r * ldo;
#pragma omp simd
        for (int64_t d = 0; d < hd; ++d) orow[d] = ar[d] * inv;
        l[r] = tl.mrow[r] + std::log(tl.lrow[r]);
      }
    }
  }
}

namespace {

// One thread's backward tiles, carved out of the caller's float scratch (the bf16 tiles as
// 32-bit words of the same size as a float).
struct BwdTiles {
  uint32_t* pk;   // K pair-transposed [hp][kB]
  uint32_t* pv;   // V pair-transposed [hp][kB]
  uint32_t* kv;   // pass 2: K as pairs of key rows [kB/2][hdp]
  uint32_t* qt;   // Q rows as pairs along hd [kB][hp]
  uint32_t* dot;  // dO rows as pairs along hd [kB][hp]
  uint32_t* qv;   // pass 1: Q as pairs of query rows [kB/2][hdp]
  uint32_t* dov;  // pass 1: dO as pairs of query rows [kB/2][hdp]
  uint32_t* pp;   // pass 1: P as pairs of query rows [kB/2][kB]
  uint32_t* dsp;  // dS: pass 1 as pairs of query rows [kB/2][kB], pass 2 along keys [kB][kB/2]
  float* s;       // S, then P [kB][kB]
  float* dp;      // dP, then dS (scaled) [kB][kB]
  float* g1;      // dK or dQ accumulator [kB][hd]
  float* g2;      // dV accumulator [kB][hd]
  float* dd;      // D = rowsum(dO o O) [kB]
};

// Carves the tiles from base (or, with base null, only counts them): returns the floats used.
int64_t carve(BwdTiles* tl, float* base, int64_t hd) {
  const int64_t hp = words_of(hd), hdp = round16(hd);
  int64_t used = 0;
  auto words = [&](uint32_t** p, int64_t n) {
    if (base != nullptr) *p = reinterpret_cast<uint32_t*>(base + used);
    used += n;
  };
  auto floats = [&](float** p, int64_t n) {
    if (base != nullptr) *p = base + used;
    used += n;
  };
  words(&tl->pk, hp * kB);
  words(&tl->pv, hp * kB);
  words(&tl->kv, kB / 2 * hdp);
  words(&tl->qt, kB * hp);
  words(&tl->dot, kB * hp);
  words(&tl->qv, kB / 2 * hdp);
  words(&tl->dov, kB / 2 * hdp);
  words(&tl->pp, kB / 2 * kB);
  words(&tl->dsp, kB / 2 * kB);
  floats(&tl->s, kB * kB);
  floats(&tl->dp, kB * kB);
  floats(&tl->g1, kB * hd);
  floats(&tl->g2, kB * hd);
  floats(&tl->dd, kB);
  return used;
}

int64_t per_thread_scratch(int64_t hd) {
  BwdTiles tl{};
  return carve(&tl, nullptr, hd);
}

// For the query rows [i0, i0 + m) (tl.qt, tl.dot loaded) against the keys [j0, j0 + w) (tl.pk,
// tl.pv packed): tl.s = P, tl.dp = dS * scale, in f32, zero outside the causal triangle and past
// w, exactly as flash_attention.cc's block_probs_and_ds.
void block_probs_and_ds(const BwdTiles& tl, const float* lse_rows, int64_t i0, int64_t m,
                        int64_t j0, int64_t w, int64_t hd, float scale) {
  const int64_t hp = words_of(hd);
  const bool diag = j0 + w > i0;
  block_scores(tl.s, tl.qt, hp, tl.pk, m, w, hp, scale, diag, i0 - j0 + 1, kB);
  block_scores(tl.dp, tl.dot, hp, tl.pv, m, w, hp, 1.0f, diag, i0 - j0 + 1, kB);
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

// Per query block (m rows): Q rows into tl.qt; dO rows rounded to bf16 into tl.dot; and
// D = rowsum(bf16(dO) o O) in f32. D takes the rounded dO, as dP = bf16(dO) V^T does (and as
// FlashAttention-2, whose dO is bf16): then sum_j dS_ij = P_i . (dP_i - D_i) stays ~0 (softmax's
// shift invariance), where an f32-dO D would leave a 2^-9 relative residue (dq, exactly 0 at
// t = 1, would come out ~2^-9 |dO| |v|). Each row of q, dO and O is read from memory once here
// and the later packs read these tiles: pass 1 streams the query rows of a whole head per key
// block, and by profile these loads miss the caches (prefetching them did not measurably help).
void load_query_block(const BwdTiles& tl, const uint16_t* q, int64_t ld, const float* dout,
                      const float* out, int64_t ldo, int64_t m, int64_t hd) {
  const int64_t hp = words_of(hd);
  load_row_pairs(tl.qt, hp, q, ld, m, hd);
  // A row of pairs along hd is the bf16 row itself, padded to 2 * hp elements.
  uint16_t* dot16 = reinterpret_cast<uint16_t*>(tl.dot);
  for (int64_t r = 0; r < m; ++r) {
    const float* dr = dout + r * ldo;
    const float* orow = out + r * ldo;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; d += 16) {
      const __mmask16 mk = vec::tail_mask(d, hd);
      const __m256i h = (__m256i)_mm512_cvtneps_pbh(vec::load(dr + d, mk));
      _mm256_mask_storeu_epi16(dot16 + r * 2 * hp + d, vec::tail_mask(d, 2 * hp), h);
      const __m512 x = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      acc = _mm512_fmadd_ps(x, vec::load(orow + d, mk), acc);
    }
    tl.dd[r] = vec::reduce_add(acc);
  }
}

void store_rows(float* dst, int64_t ld, const float* tile, int64_t m, int64_t hd) {
  for (int64_t r = 0; r < m; ++r) std::copy(tile + r * hd, tile + (r + 1) * hd, dst + r * ld);
}

}  // namespace

int64_t flash_backward_scratch(int64_t /*b*/, int64_t /*t*/, int64_t /*nh*/, int64_t /*nkv*/,
                               int64_t hd, int threads) {
  return int64_t(threads > 0 ? threads : omp_get_max_threads()) * per_thread_scratch(hd);
}

void flash_backward(float* dqkv, float* scratch, const float* dout, const uint16_t* qkv16,
                    const float* out, const float* lse, int64_t b, int64_t t, int64_t nh,
                    int64_t nkv, int64_t hd) {
  check_shapes(nh, nkv, hd);
  if (b <= 0 || t <= 0) return;
  const int64_t ld = (nh + 2 * nkv) * hd, ldo = nh * hd, group = nh / nkv;
  const int64_t nblk = (t + kB - 1) / kB, nbh = b * nh;
  const int64_t hp = words_of(hd), hdp = round16(hd);
  const float scale = 1.0f / std::sqrt(float(hd));
  // The team size must match what flash_attention_backward_bf16_scratch() sized the scratch for.
  const int nthreads = omp_get_max_threads();
  const int64_t per_thread = per_thread_scratch(hd);

#pragma omp parallel num_threads(nthreads)
  {
    BwdTiles tl{};
    carve(&tl, scratch + int64_t(omp_get_thread_num()) * per_thread, hd);
    // Pass 1: dK, dV per (batch, kv head, key block); earliest key blocks (most work) first.
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t task = 0; task < nblk * b * nkv; ++task) {
      const int64_t kb = task / (b * nkv), bi = task % (b * nkv) / nkv, kvh = task % nkv;
      const int64_t j0 = kb * kB, w = std::min(kB, t - j0);
      const uint16_t* base = qkv16 + bi * t * ld;
      pack_pair_transposed(tl.pk, base + (nh + kvh) * hd, ld, j0, w, hd, kB);
      pack_pair_transposed(tl.pv, base + (nh + nkv + kvh) * hd, ld, j0, w, hd, kB);
      std::fill(tl.g1, tl.g1 + kB * hd, 0.0f);
      std::fill(tl.g2, tl.g2 + kB * hd, 0.0f);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int64_t qb = kb; qb < nblk; ++qb) {
          const int64_t i0 = qb * kB, m = std::min(kB, t - i0);
          const bool diag = qb == kb;
          const uint16_t* q = base + i0 * ld + h * hd;
          const float* dout_b = dout + (bi * t + i0) * ldo + h * hd;
          load_query_block(tl, q, ld, dout_b, out + (bi * t + i0) * ldo + h * hd, ldo, m, hd);
          block_probs_and_ds(tl, lse + (bi * nh + h) * t + i0, i0, m, j0, w, hd, scale);
          // dV[j] += sum_r P[r, j] dO[r], dK[j] += sum_r dS[r, j] Q[r], the sums over pairs of
          // query rows (an odd m pads with a zero row on both sides).
          pack_row_pairs(tl.qv, hdp, reinterpret_cast<const uint16_t*>(tl.qt), 2 * hp, m, hd);
          pack_row_pairs(tl.dov, hdp, reinterpret_cast<const uint16_t*>(tl.dot), 2 * hp, m, hd);
          round_pack_row_pairs(tl.pp, kB, tl.s, kB, m, kB);
          round_pack_row_pairs(tl.dsp, kB, tl.dp, kB, m, kB);
          const int64_t npairs = (m + 1) / 2;
          for (int64_t jr0 = 0; jr0 < w; jr0 += kMrBf16) {
            const int64_t mm = std::min<int64_t>(kMrBf16, w - jr0);
            // On the diagonal block, rows r < jr0 have P = dS = 0 for these keys: skipped,
            // from the pair that holds row jr0.
            const int64_t ps = diag ? jr0 / 2 : 0;
            row_tile_bf16(mm, hd, npairs - ps, tl.pp + ps * kB + jr0, 1, kB, tl.dov + ps * hdp, hdp,
                          tl.g2 + jr0 * hd, hd, 1.0f, true);
            row_tile_bf16(mm, hd, npairs - ps, tl.dsp + ps * kB + jr0, 1, kB, tl.qv + ps * hdp, hdp,
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
      const uint16_t* base = qkv16 + bi * t * ld;
      const uint16_t* k = base + (nh + kvh) * hd;
      const float* dout_b = dout + (bi * t + i0) * ldo + h * hd;
      load_query_block(tl, base + i0 * ld + h * hd, ld, dout_b, out + (bi * t + i0) * ldo + h * hd,
                       ldo, m, hd);
      std::fill(tl.g1, tl.g1 + kB * hd, 0.0f);
      for (int64_t kb = 0; kb <= qb; ++kb) {
        const int64_t j0 = kb * kB, w = std::min(kB, t - j0);
        const bool diag = kb == qb;
        pack_pair_transposed(tl.pk, k, ld, j0, w, hd, kB);
        pack_pair_transposed(tl.pv, base + (nh + nkv + kvh) * hd, ld, j0, w, hd, kB);
        block_probs_and_ds(tl, lse + (bi * nh + h) * t + i0, i0, m, j0, w, hd, scale);
        // dQ += dS K over pairs of keys (dS zero past the diagonal and past w).
        round_row_pairs(tl.dsp, kB / 2, tl.dp, kB, m, kB);
        pack_row_pairs(tl.kv, hdp, k + j0 * ld, ld, w, hd);
        for (int64_t r0 = 0; r0 < m; r0 += kMrBf16) {
          const int64_t mm = std::min<int64_t>(kMrBf16, m - r0);
          const int64_t kdim = diag ? std::min(w, r0 + mm) : w;
          row_tile_bf16(mm, hd, (kdim + 1) / 2, tl.dsp + r0 * (kB / 2), kB / 2, 1, tl.kv, hdp,
                        tl.g1 + r0 * hd, hd, 1.0f, true);
        }
      }
      store_rows(dqkv + (bi * t + i0) * ld + h * hd, ld, tl.g1, m, hd);
    }
  }
}

}  // namespace strata::kernels::avx512bf16

#undef STRATA_AVX512BF16_REGION
#pragma GCC pop_options

#endif  // STRATA_HAVE_AVX512BF16_KERNELS
