// Register-tiled micro-kernels shared by the attention kernels (naive and flash), for every
// Highway target: a C tile of up to kMr rows x kNv vectors accumulated in registers, from a
// broadcast A (any row and column strides) and a contiguous B panel, and a tile transpose for
// packing panels.
//
// The tile suits the target's register file: kMr x kNv accumulators + kNv B vectors + 1 broadcast
// must fit. AVX-512 and Arm have 32 vector registers: 6 x 4 (24 + 4 + 1); AVX2 has 16: 6 x 2
// (12 + 2 + 1), BLIS's Haswell shape. Vectors are capped at 16 floats, so that panels padded to a
// multiple of 16 are whole vectors on every target (SVE up to 512 bits uses all of them).
//
// The accumulators are named variables rather than an array: SVE's vector types are sizeless and
// cannot be array elements.

#if defined(STRATA_KERNELS_CPU_MICRO_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STRATA_KERNELS_CPU_MICRO_TILE_INL_H_
#undef STRATA_KERNELS_CPU_MICRO_TILE_INL_H_
#else
#define STRATA_KERNELS_CPU_MICRO_TILE_INL_H_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "kernels/cpu/vec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace strata::kernels::HWY_NAMESPACE {
namespace tiles {

using DT = hn::CappedTag<float, 16>;

constexpr int kMr = 6;  // micro-tile rows
#if HWY_TARGET == HWY_AVX2
constexpr int kNv = 2;  // micro-tile column vectors (16 columns)
#else
constexpr int kNv = 4;  // micro-tile column vectors (64 columns on AVX-512)
#endif

#undef STRATA_TILE_MASKED  // once per target: NEON's value differs from SVE's
#if HWY_ARCH_X86 || HWY_TARGET == HWY_SVE || HWY_TARGET == HWY_SVE2 || \
    HWY_TARGET == HWY_SVE_256 || HWY_TARGET == HWY_SVE2_128
#define STRATA_TILE_MASKED 1  // masked 32-bit loads and stores that touch only their lanes
#else
#define STRATA_TILE_MASKED 0
#endif

// C[MR, NV vectors] (+)= alpha * sum_p A(i, p) B(p, :), with A(i, p) = a[i*a_rs + p*a_cs]
// (broadcast) and B(p, :) = b[p*b_rs + 0 ..) (contiguous; the last vector holds last_n columns).
template <int MR, int NV>
HWY_NOINLINE void MicroTile(int64_t kdim, const float* HWY_RESTRICT a, int64_t a_rs, int64_t a_cs,
                            const float* HWY_RESTRICT b, int64_t b_rs, float* HWY_RESTRICT c,
                            int64_t ldc, size_t last_n, float alpha, bool accumulate) {
  static_assert(MR >= 1 && MR <= 6 && NV >= 1 && NV <= 4, "tile shape");
  const DT d;
  const size_t N = hn::Lanes(d);
#if STRATA_TILE_MASKED
  const auto mlast = hn::FirstN(d, last_n);
#define STRATA_LOAD_LAST(ptr) hn::MaskedLoad(mlast, d, ptr)
#define STRATA_STORE_LAST(v, ptr) hn::BlendedStore(v, mlast, d, ptr)
#else
#define STRATA_LOAD_LAST(ptr) LoadN(d, ptr, last_n)
#define STRATA_STORE_LAST(v, ptr) StoreN(v, d, ptr, last_n)
#endif
  const auto zero = hn::Zero(d);
  auto c00 = zero, c01 = zero, c02 = zero, c03 = zero;
  auto c10 = zero, c11 = zero, c12 = zero, c13 = zero;
  auto c20 = zero, c21 = zero, c22 = zero, c23 = zero;
  auto c30 = zero, c31 = zero, c32 = zero, c33 = zero;
  auto c40 = zero, c41 = zero, c42 = zero, c43 = zero;
  auto c50 = zero, c51 = zero, c52 = zero, c53 = zero;
  for (int64_t p = 0; p < kdim; ++p) {
    const float* bp = b + p * b_rs;
    const auto b0 = NV == 1 ? STRATA_LOAD_LAST(bp) : hn::LoadU(d, bp);
    const auto b1 = NV < 2 ? zero : NV == 2 ? STRATA_LOAD_LAST(bp + N) : hn::LoadU(d, bp + N);
    const auto b2 = NV < 3    ? zero
                    : NV == 3 ? STRATA_LOAD_LAST(bp + 2 * N)
                              : hn::LoadU(d, bp + 2 * N);
    const auto b3 = NV < 4 ? zero : STRATA_LOAD_LAST(bp + 3 * N);
    const float* ap = a + p * a_cs;
#define STRATA_TILE_ROW(i)                                       \
  if constexpr (MR > i) {                                        \
    const auto av = hn::Set(d, ap[i * a_rs]);                    \
    c##i##0 = hn::MulAdd(av, b0, c##i##0);                       \
    if constexpr (NV > 1) c##i##1 = hn::MulAdd(av, b1, c##i##1); \
    if constexpr (NV > 2) c##i##2 = hn::MulAdd(av, b2, c##i##2); \
    if constexpr (NV > 3) c##i##3 = hn::MulAdd(av, b3, c##i##3); \
  }
    STRATA_TILE_ROW(0)
    STRATA_TILE_ROW(1)
    STRATA_TILE_ROW(2)
    STRATA_TILE_ROW(3)
    STRATA_TILE_ROW(4)
    STRATA_TILE_ROW(5)
#undef STRATA_TILE_ROW
  }
  const auto al = hn::Set(d, alpha);
#define STRATA_TILE_STORE(i, v)                             \
  if constexpr (MR > i && NV > v) {                         \
    float* cv = c + i * ldc + v * N;                        \
    auto r = hn::Mul(c##i##v, al);                          \
    if (v == NV - 1) {                                      \
      if (accumulate) r = hn::Add(r, STRATA_LOAD_LAST(cv)); \
      STRATA_STORE_LAST(r, cv);                             \
    } else {                                                \
      if (accumulate) r = hn::Add(r, hn::LoadU(d, cv));     \
      hn::StoreU(r, d, cv);                                 \
    }                                                       \
  }
#define STRATA_TILE_STORE_ROW(i) \
  STRATA_TILE_STORE(i, 0) STRATA_TILE_STORE(i, 1) STRATA_TILE_STORE(i, 2) STRATA_TILE_STORE(i, 3)
  STRATA_TILE_STORE_ROW(0)
  STRATA_TILE_STORE_ROW(1)
  STRATA_TILE_STORE_ROW(2)
  STRATA_TILE_STORE_ROW(3)
  STRATA_TILE_STORE_ROW(4)
  STRATA_TILE_STORE_ROW(5)
#undef STRATA_TILE_STORE_ROW
#undef STRATA_TILE_STORE
#undef STRATA_LOAD_LAST
#undef STRATA_STORE_LAST
}

using MicroFn = void (*)(int64_t, const float*, int64_t, int64_t, const float*, int64_t, float*,
                         int64_t, size_t, float, bool);

template <int MR, int... NV>
constexpr std::array<MicroFn, sizeof...(NV)> RowOfKernels(std::integer_sequence<int, NV...>) {
  return {&MicroTile<MR, NV + 1>...};
}
template <int... MR>
constexpr std::array<std::array<MicroFn, kNv>, sizeof...(MR)> KernelTable(
    std::integer_sequence<int, MR...>) {
  return {RowOfKernels<MR + 1>(std::make_integer_sequence<int, kNv>())...};
}

// C[m, n] (+)= alpha * A B for m <= kMr rows and any n (columns in chunks of kNv vectors).
HWY_INLINE void row_tile(int64_t m, int64_t n, int64_t kdim, const float* a, int64_t a_rs,
                         int64_t a_cs, const float* b, int64_t b_rs, float* c, int64_t ldc,
                         float alpha, bool accumulate) {
  // kMicro[mr - 1][nv - 1]
  static constexpr auto kMicro = KernelTable(std::make_integer_sequence<int, kMr>());
  const int64_t lanes = int64_t(hn::Lanes(DT()));
  const int64_t width = lanes * kNv;
  for (int64_t j0 = 0; j0 < n; j0 += width) {
    const int64_t cols = std::min(width, n - j0);
    const int64_t nv = (cols + lanes - 1) / lanes;
    const size_t last = size_t(cols - (nv - 1) * lanes);
    kMicro[m - 1][nv - 1](kdim, a, a_rs, a_cs, b + j0, b_rs, c + j0, ldc, last, alpha, accumulate);
  }
}
// The same (the tile width differs per target, so every caller splits columns the same way).
HWY_INLINE void tile(int64_t m, int64_t n, int64_t kdim, const float* a, int64_t a_rs, int64_t a_cs,
                     const float* b, int64_t b_rs, float* c, int64_t ldc, float alpha,
                     bool accumulate) {
  row_tile(m, n, kdim, a, a_rs, a_cs, b, b_rs, c, ldc, alpha, accumulate);
}

// dst[c * ldd + r] (+)= src[r * lds + c] for c < cols, r < dst_len, where rows r >= rows read as
// zero: one square block (kT x kT) of a transpose, rows <= kT, cols <= kT, dst_len <= kT.
// AVX-512 and AVX2 transpose in registers (unpack 32-bit, unpack 64-bit, 128-bit lane shuffles:
// 64 shuffles for 256 elements, against ~2 scalar moves each); the portable form is the loop.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr int64_t kT = 16;
HWY_INLINE void TransposeBlock(const float* HWY_RESTRICT src, int64_t lds, int64_t rows,
                               int64_t cols, float* HWY_RESTRICT dst, int64_t ldd, int64_t dst_len,
                               bool accumulate) {
  const __mmask16 cm = __mmask16((1u << cols) - 1u), dm = __mmask16((1u << dst_len) - 1u);
  __m512 r[16], t[16], u[16], v[16];
  for (int64_t i = 0; i < 16; ++i)
    r[i] = i < rows ? _mm512_maskz_loadu_ps(cm, src + i * lds) : _mm512_setzero_ps();
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), e = _mm512_castps_pd(t[4 * i + 3]);
    u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, e));
    u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, e));
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
  for (int64_t c = 0; c < cols; ++c) {
    float* out = dst + c * ldd;
    const __m512 val = accumulate ? _mm512_add_ps(r[c], _mm512_maskz_loadu_ps(dm, out)) : r[c];
    _mm512_mask_storeu_ps(out, dm, val);
  }
}
#elif HWY_TARGET == HWY_AVX2
constexpr int64_t kT = 8;
HWY_INLINE void TransposeBlock(const float* HWY_RESTRICT src, int64_t lds, int64_t rows,
                               int64_t cols, float* HWY_RESTRICT dst, int64_t ldd, int64_t dst_len,
                               bool accumulate) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i cm = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(cols)), lane);
  const __m256i dm = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(dst_len)), lane);
  __m256 r[8], t[8], u[8];
  for (int64_t i = 0; i < 8; ++i)
    r[i] = i < rows ? _mm256_maskload_ps(src + i * lds, cm) : _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
    r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
  }
  for (int64_t c = 0; c < cols; ++c) {
    float* out = dst + c * ldd;
    const __m256 val = accumulate ? _mm256_add_ps(r[c], _mm256_maskload_ps(out, dm)) : r[c];
    _mm256_maskstore_ps(out, dm, val);
  }
}
#else
constexpr int64_t kT = 16;
HWY_INLINE void TransposeBlock(const float* HWY_RESTRICT src, int64_t lds, int64_t rows,
                               int64_t cols, float* HWY_RESTRICT dst, int64_t ldd, int64_t dst_len,
                               bool accumulate) {
  for (int64_t c = 0; c < cols; ++c) {
    float* out = dst + c * ldd;
    for (int64_t r = 0; r < dst_len; ++r) {
      const float v = r < rows ? src[r * lds + c] : 0.0f;
      out[r] = accumulate ? out[r] + v : v;
    }
  }
}
#endif

// panel[d * pw + j] = x[(j0 + j) * ld + d] for j < width, d < hd (zero for width <= j < pw, pw a
// multiple of 16): a slice of K or V transposed so that keys run along the vector lanes.
HWY_INLINE void pack_transposed(float* HWY_RESTRICT panel, const float* HWY_RESTRICT x, int64_t ld,
                                int64_t j0, int64_t width, int64_t hd, int64_t pw) {
  for (int64_t jb = 0; jb < pw; jb += kT) {
    for (int64_t db = 0; db < hd; db += kT) {
      TransposeBlock(x + (j0 + jb) * ld + db, ld, std::clamp<int64_t>(width - jb, 0, kT),
                     std::min(kT, hd - db), panel + db * pw + jb, pw, kT, false);
    }
  }
}

// y[j0 + j, d] (+)= panel[d * pw + j] for j < width, d < hd (y rows of stride ld): a transposed
// panel written back as rows.
HWY_INLINE void unpack_transposed(float* HWY_RESTRICT y, int64_t ld, int64_t j0, int64_t width,
                                  int64_t hd, const float* HWY_RESTRICT panel, int64_t pw,
                                  bool accumulate) {
  for (int64_t jb = 0; jb < width; jb += kT) {
    for (int64_t db = 0; db < hd; db += kT) {
      const int64_t dn = std::min(kT, hd - db);
      TransposeBlock(panel + db * pw + jb, pw, dn, std::min(kT, width - jb),
                     y + (j0 + jb) * ld + db, ld, dn, accumulate);
    }
  }
}

}  // namespace tiles
}  // namespace strata::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
