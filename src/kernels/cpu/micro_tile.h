// Register-tiled micro-kernels shared by the attention kernels (naive and flash): a C tile of up to
// kMr rows x 64 columns accumulated in AVX-512 registers, from a broadcast A (any row and column
// strides) and a contiguous B panel, plus an in-register 16 x 16 transpose for packing panels.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "kernels/cpu/vec.h"  // <immintrin.h>, with GCC 12's false warning silenced

namespace strata::kernels::tiles {

constexpr int kMr = 6;  // micro-tile rows
constexpr int kNv = 4;  // micro-tile 16-float column vectors (64 columns)

// C[MR, 16*NV] (+)= alpha * sum_p A(i, p) B(p, :), with A(i, p) = a[i*a_rs + p*a_cs] (broadcast)
// and B(p, :) = b[p*b_rs + 0 .. 16*NV) (contiguous; the last vector masked by `last`).
template <int MR, int NV>
void micro_tile(int64_t kdim, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                int64_t b_rs, float* c, int64_t ldc, __mmask16 last, float alpha, bool accumulate) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < kdim; ++p) {
    const float* bp = b + p * b_rs;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV - 1; ++v) bv[v] = _mm512_loadu_ps(bp + 16 * v);
    bv[NV - 1] = _mm512_maskz_loadu_ps(last, bp + 16 * (NV - 1));
    const float* ap = a + p * a_cs;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(ap[i * a_rs]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
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

using MicroFn = void (*)(int64_t, const float*, int64_t, int64_t, const float*, int64_t, float*,
                         int64_t, __mmask16, float, bool);

template <int MR, int... NV>
constexpr std::array<MicroFn, sizeof...(NV)> row_of_kernels(std::integer_sequence<int, NV...>) {
  return {&micro_tile<MR, NV + 1>...};
}
template <int... MR>
constexpr std::array<std::array<MicroFn, kNv>, sizeof...(MR)> kernel_table(
    std::integer_sequence<int, MR...>) {
  return {row_of_kernels<MR + 1>(std::make_integer_sequence<int, kNv>())...};
}
// kMicro[mr - 1][nv - 1]
constexpr auto kMicro = kernel_table(std::make_integer_sequence<int, kMr>());

// C[m, n] (+)= alpha * A B for m <= kMr rows and n <= 64 columns (any n: split by the caller).
inline void tile(int64_t m, int64_t n, int64_t kdim, const float* a, int64_t a_rs, int64_t a_cs,
                 const float* b, int64_t b_rs, float* c, int64_t ldc, float alpha,
                 bool accumulate) {
  const int64_t nv = (n + 15) / 16;
  const __mmask16 last = vec::tail_mask(16 * (nv - 1), n);
  kMicro[m - 1][nv - 1](kdim, a, a_rs, a_cs, b, b_rs, c, ldc, last, alpha, accumulate);
}

// C[m, n] (+)= alpha * A B for m <= kMr rows and any n (columns in chunks of 64).
inline void row_tile(int64_t m, int64_t n, int64_t kdim, const float* a, int64_t a_rs, int64_t a_cs,
                     const float* b, int64_t b_rs, float* c, int64_t ldc, float alpha,
                     bool accumulate) {
  for (int64_t j0 = 0; j0 < n; j0 += 16 * kNv) {
    tile(m, std::min<int64_t>(16 * kNv, n - j0), kdim, a, a_rs, a_cs, b + j0, b_rs, c + j0, ldc,
         alpha, accumulate);
  }
}

// In-register transpose of a 16 x 16 block (unpack 32-bit, unpack 64-bit, two 128-bit lane
// shuffles): 64 shuffles for 256 elements, against ~2 scalar moves each.
inline void transpose16(__m512 r[16]) {
  __m512 t[16], u[16], v[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      v[8 * i + j] = _mm512_shuffle_f32x4(u[8 * i + j], u[8 * i + 4 + j], 0x88);
      v[8 * i + 4 + j] = _mm512_shuffle_f32x4(u[8 * i + j], u[8 * i + 4 + j], 0xdd);
    }
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(v[j], v[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(v[j], v[8 + j], 0xdd);
  }
}

// panel[d * pw + j] = x[(j0 + j) * ld + d] for j < width, d < hd (zero for width <= j < pw, pw a
// multiple of 16): a slice of K or V transposed so that keys run along the vector lanes.
inline void pack_transposed(float* __restrict panel, const float* __restrict x, int64_t ld,
                            int64_t j0, int64_t width, int64_t hd, int64_t pw) {
  for (int64_t jb = 0; jb < pw; jb += 16) {
    for (int64_t db = 0; db < hd; db += 16) {
      const __mmask16 cols = vec::tail_mask(db, hd);
      __m512 r[16];
      for (int64_t j = 0; j < 16; ++j) {
        r[j] = jb + j < width ? _mm512_maskz_loadu_ps(cols, x + (j0 + jb + j) * ld + db)
                              : _mm512_setzero_ps();
      }
      transpose16(r);
      for (int64_t d = 0; d < std::min<int64_t>(16, hd - db); ++d) {
        _mm512_storeu_ps(panel + (db + d) * pw + jb, r[d]);
      }
    }
  }
}

}  // namespace strata::kernels::tiles
