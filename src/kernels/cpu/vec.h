// AVX-512 helpers of the hand-written avx512bf16 kernel (flash_attention_avx512bf16.cc, its only
// user): the same exp, bf16 rounding and masked tails as vec-inl.h, in AVX-512 intrinsics.
// Every other kernel uses vec-inl.h (Highway, every level).
// Its functions get AVX-512 only from the target pragma around its one include; the build itself
// needs no instruction set beyond the x86-64-v3 baseline.
#pragma once
#include <cstdint>

namespace strata::kernels::vec {

// Mask of the lanes of a 16-wide step that starts at i in a loop over [0, n).
inline __mmask16 tail_mask(int64_t i, int64_t n) {
  const int64_t left = n - i;
  return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1u);
}
inline __m512 load(const float* p, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, p);
}
inline void store(float* p, __m512 v, __mmask16 m) {
  _mm512_mask_storeu_ps(p, m, v);
}

// exp(x) with ~1 ulp error (Cephes expf polynomial): x = n ln2 + r, |r| <= ln2/2,
// exp(x) = 2^n * P(r). scalef applies 2^n and saturates to 0 / inf without integer tricks;
// the clamp keeps r finite for huge |x| (exp(-104) is 0 in float, exp(89) is inf).
inline __m512 exp(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(89.0f)), _mm512_set1_ps(-104.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln2 split in two so that n * ln2_hi is exact (Cody-Waite).
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// sigmoid(x) = 1 / (1 + exp(-x)); saturates cleanly to 0 and 1.
inline __m512 sigmoid(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

// f32 -> bf16 bit patterns, round to nearest even, NaN kept quiet (bit-exact with
// core/dtype.h's scalar f32_to_bf16).
inline __m256i to_bf16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

inline float reduce_max(__m512 v) {
  return _mm512_reduce_max_ps(v);
}
inline float reduce_add(__m512 v) {
  return _mm512_reduce_add_ps(v);
}

}  // namespace strata::kernels::vec
