// bf16 counterparts of micro_tile.h for the bf16 flash attention: a register-tiled micro-kernel on
// vdpbf16ps, which multiplies PAIRS of bf16 (two adjacent halves of a 32-bit lane) and adds both
// products to an f32 accumulator, and the packers that put operands in that pair layout.
//
// Every operand is a matrix of 32-bit words, each word one pair of the reduction dimension (low
// half the even index, high half the odd one; an odd length is padded with a zero half):
//  - "pairs along columns": x[r][c/2] for a row-major source (Q rows along hd, P rows along keys);
//  - "pair-transposed": panel[c/2][r], the same words transposed so that rows run along the lanes
//    (K and V as the B operand of S = Q K^T and dP = dO V^T);
//  - "pairs of rows" (VNNI): y[r/2][c] = (x[r][c], x[r+1][c]) (V, dO, Q, K as the B operand when
//    the reduction runs over rows, and P, dS as an A operand read transposed).
// bf16 values are uint16_t bit patterns; f32 -> bf16 rounds to nearest even (vcvtne2ps2bf16).
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "kernels/cpu/micro_tile.h"  // transpose16
#include "kernels/cpu/vec.h"         // AVX-512 only: see vec.h

namespace strata::kernels::tiles {

constexpr int kMrBf16 = 6;  // micro-tile rows (24 accumulators + 4 B vectors + 1 broadcast)
constexpr int kNvBf16 = 4;  // micro-tile 16-float column vectors (64 columns)

// C[MR, 16*NV] (+)= alpha * sum_p A(i, p) . B(p, :) over kpairs pairs p, with A(i, p) =
// a[i*a_rs + p*a_cs] (a word, broadcast) and B(p, :) = b[p*b_rs + 0 .. 16*NV) (contiguous words;
// the last vector masked by `last`). Same semantics as tiles::micro_tile.
template <int MR, int NV>
void micro_tile_bf16(int64_t kpairs, const uint32_t* a, int64_t a_rs, int64_t a_cs,
                     const uint32_t* b, int64_t b_rs, float* c, int64_t ldc, __mmask16 last,
                     float alpha, bool accumulate) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < kpairs; ++p) {
    const uint32_t* bp = b + p * b_rs;
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV - 1; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(bp + 16 * v);
    bv[NV - 1] = (__m512bh)_mm512_maskz_loadu_epi32(last, bp + 16 * (NV - 1));
    const uint32_t* ap = a + p * a_cs;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(ap[i * a_rs]));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], av, bv[v]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    float* cr = c + i * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = v == NV - 1 ? last : __mmask16(0xFFFF);
      __m512 r = _mm512_mul_ps(acc[i][v], al);
      if (accumulate) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m, cr + 16 * v));
      _mm512_mask_storeu_ps(cr + 16 * v, m, r);
    }
  }
}

using MicroBf16Fn = void (*)(int64_t, const uint32_t*, int64_t, int64_t, const uint32_t*, int64_t,
                             float*, int64_t, __mmask16, float, bool);

template <int MR, int... NV>
constexpr std::array<MicroBf16Fn, sizeof...(NV)> row_of_bf16_kernels(
    std::integer_sequence<int, NV...>) {
  return {&micro_tile_bf16<MR, NV + 1>...};
}
template <int... MR>
constexpr std::array<std::array<MicroBf16Fn, kNvBf16>, sizeof...(MR)> bf16_kernel_table(
    std::integer_sequence<int, MR...>) {
  return {row_of_bf16_kernels<MR + 1>(std::make_integer_sequence<int, kNvBf16>())...};
}
// kMicroBf16[mr - 1][nv - 1]
constexpr auto kMicroBf16 = bf16_kernel_table(std::make_integer_sequence<int, kMrBf16>());

// C[m, n] (+)= alpha * A B for m <= kMrBf16 rows, any n (columns in chunks of 64), kpairs pairs.
inline void row_tile_bf16(int64_t m, int64_t n, int64_t kpairs, const uint32_t* a, int64_t a_rs,
                          int64_t a_cs, const uint32_t* b, int64_t b_rs, float* c, int64_t ldc,
                          float alpha, bool accumulate) {
  for (int64_t j0 = 0; j0 < n; j0 += 16 * kNvBf16) {
    const int64_t nn = std::min<int64_t>(16 * kNvBf16, n - j0);
    const int64_t nv = (nn + 15) / 16;
    const __mmask16 last = vec::tail_mask(16 * (nv - 1), nn);
    kMicroBf16[m - 1][nv - 1](kpairs, a, a_rs, a_cs, b + j0, b_rs, c + j0, ldc, last, alpha,
                              accumulate);
  }
}

// Mask of the 16-bit lanes of a 32-wide step that starts at i in a loop over [0, n).
inline __mmask32 tail_mask32(int64_t i, int64_t n) {
  const int64_t left = n - i;
  return left >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << left) - 1u);
}

// Pairs along columns from bf16 rows: dst[r * ldd + c/2] for r < rows, c < cols (x row stride ld
// in bf16 elements); an odd cols gets a zero high half in its last word.
inline void load_row_pairs(uint32_t* __restrict dst, int64_t ldd, const uint16_t* __restrict x,
                           int64_t ld, int64_t rows, int64_t cols) {
  const int64_t words = (cols + 1) / 2;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; c += 32) {
      const __m512i v = _mm512_maskz_loadu_epi16(tail_mask32(c, cols), x + r * ld + c);
      _mm512_mask_storeu_epi32(dst + r * ldd + c / 2, vec::tail_mask(c / 2, words), v);
    }
  }
}

// Pairs along columns from f32 rows, rounded to bf16: dst[r * ldd + c/2] for r < rows, c < cols.
inline void round_row_pairs(uint32_t* __restrict dst, int64_t ldd, const float* __restrict x,
                            int64_t ld, int64_t rows, int64_t cols) {
  const int64_t words = (cols + 1) / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld;
    for (int64_t c = 0; c < cols; c += 32) {
      const __m512 lo = vec::load(xr + c, vec::tail_mask(c, cols));
      const __m512 hi = c + 16 < cols ? vec::load(xr + c + 16, vec::tail_mask(c + 16, cols))
                                      : _mm512_setzero_ps();
      // The second operand lands in the low half: columns c .. c+31 in order.
      const __m512i v = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
      _mm512_mask_storeu_epi32(dst + r * ldd + c / 2, vec::tail_mask(c / 2, words), v);
    }
  }
}

// Pair-transposed panel from bf16 rows: panel[(c/2) * pw + j] = pair c/2 of row j0 + j, for
// j < width and c < hd (zero for width <= j < pw; pw a multiple of 16). A 16 x 16 transpose of
// 32-bit words, as pack_transposed does for f32.
inline void pack_pair_transposed(uint32_t* __restrict panel, const uint16_t* __restrict x,
                                 int64_t ld, int64_t j0, int64_t width, int64_t hd, int64_t pw) {
  const int64_t words = (hd + 1) / 2;
  for (int64_t jb = 0; jb < pw; jb += 16) {
    for (int64_t c = 0; c < hd; c += 32) {
      const __mmask32 cols = tail_mask32(c, hd);
      __m512 r[16];
      for (int64_t j = 0; j < 16; ++j) {
        r[j] = jb + j < width
                   ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(cols, x + (j0 + jb + j) * ld + c))
                   : _mm512_setzero_ps();
      }
      transpose16(r);
      for (int64_t d = 0; d < std::min<int64_t>(16, words - c / 2); ++d) {
        _mm512_storeu_si512(panel + (c / 2 + d) * pw + jb, _mm512_castps_si512(r[d]));
      }
    }
  }
}

// Interleaves the 16 bf16 of a (low) and b into 16 words (a[k], b[k]).
inline __m512i interleave16(__m256i a, __m256i b) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1));
}

// Pairs of rows (VNNI) from bf16 rows: dst[(r/2) * ldd + c] = (x[r][c], x[r+1][c]) for r < rows
// (even r), c < cols; x[rows][c] reads as zero when rows is odd.
inline void pack_row_pairs(uint32_t* __restrict dst, int64_t ldd, const uint16_t* __restrict x,
                           int64_t ld, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r += 2) {
    for (int64_t c = 0; c < cols; c += 16) {
      const __mmask16 m = vec::tail_mask(c, cols);
      const __m256i a = _mm256_maskz_loadu_epi16(m, x + r * ld + c);
      const __m256i b =
          r + 1 < rows ? _mm256_maskz_loadu_epi16(m, x + (r + 1) * ld + c) : _mm256_setzero_si256();
      _mm512_mask_storeu_epi32(dst + r / 2 * ldd + c, m, interleave16(a, b));
    }
  }
}

// Pairs of rows (VNNI) from f32 rows, rounded to bf16: as pack_row_pairs.
inline void round_pack_row_pairs(uint32_t* __restrict dst, int64_t ldd, const float* __restrict x,
                                 int64_t ld, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r += 2) {
    for (int64_t c = 0; c < cols; c += 16) {
      const __mmask16 m = vec::tail_mask(c, cols);
      const __m256i a = (__m256i)_mm512_cvtneps_pbh(vec::load(x + r * ld + c, m));
      const __m256i b = r + 1 < rows
                            ? (__m256i)_mm512_cvtneps_pbh(vec::load(x + (r + 1) * ld + c, m))
                            : _mm256_setzero_si256();
      _mm512_mask_storeu_epi32(dst + r / 2 * ldd + c, m, interleave16(a, b));
    }
  }
}

}  // namespace strata::kernels::tiles
