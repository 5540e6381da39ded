// Rotary position embedding, Hugging Face Llama convention (rotate_half): in every q and k head,
// the pair (i, i + hd/2) is rotated by angle t * inv_freq[i], inv_freq from rope_spec.h (plain
// theta^(-2i/hd), or Llama 3's rescaling).
// Work is split over positions: the hd/2 cos/sin values of a position are computed once and
// applied to every batch row and head at that position. The backward is the same rotation by -angle
// (the rotation's transpose).
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/kernels.h"

namespace strata::kernels {

namespace {

constexpr int64_t kMaxHalf = 256;  // head_dim up to 512: cos/sin tables live on the stack

// The hd/2 cos/sin values of one position.
void rope_angles(float* cs, float* sn, const double* inv_freq, int64_t half, int64_t pos,
                 float sign) {
  for (int64_t i = 0; i < half; ++i) {
    // The angle reaches t * 1 = thousands of radians: form it and reduce it to [-pi, pi] in
    // double, then float sincosf on the reduced angle (4x cheaper than double sin + cos,
    // error ~1e-7).
    const double angle = double(pos) * inv_freq[i];
    const double reduced = angle - 6.283185307179586 * std::nearbyint(angle * 0.15915494309189535);
    sincosf(float(reduced) * sign, &sn[i], &cs[i]);
  }
}

void rotate_row(float* r, const float* cs, const float* sn, int64_t heads, int64_t hd) {
  const int64_t half = hd / 2;
  for (int64_t h = 0; h < heads; ++h) {  // q heads then k heads; v is left alone
    float* __restrict x1 = r + h * hd;
    float* __restrict x2 = x1 + half;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const float a = x1[i], c = x2[i];
      x1[i] = a * cs[i] - c * sn[i];
      x2[i] = c * cs[i] + a * sn[i];
    }
  }
}

void rope_rotate(float* qkv, const AttentionShape& s, const RopeSpec& rope, float sign,
                 const int32_t* positions) {
  const int64_t b = s.b, t = s.t, hd = s.head_dim;
  STRATA_CHECK(hd % 2 == 0 && hd / 2 <= kMaxHalf, "rope: head_dim ", hd,
               " must be even and at most ", 2 * kMaxHalf);
  const int64_t row = s.qkv_width(), half = hd / 2, heads = s.qk_heads();
  double inv_freq[kMaxHalf];
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = rope_inv_freq(rope, i, hd);
  }
  if (positions) {  // each row its own position: angles per row
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < b * t; ++i) {
      float cs[kMaxHalf], sn[kMaxHalf];
      rope_angles(cs, sn, inv_freq, half, positions[i], sign);
      rotate_row(qkv + i * row, cs, sn, heads, hd);
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t ti = 0; ti < t; ++ti) {
    float cs[kMaxHalf], sn[kMaxHalf];
    rope_angles(cs, sn, inv_freq, half, ti, sign);
    for (int64_t bi = 0; bi < b; ++bi) rotate_row(qkv + (bi * t + ti) * row, cs, sn, heads, hd);
  }
}

}  // namespace

void rope_forward(float* qkv, const AttentionShape& s, const RopeSpec& rope,
                  const int32_t* positions) {
  rope_rotate(qkv, s, rope, 1.0f, positions);
}

void rope_backward(float* dqkv, const AttentionShape& s, const RopeSpec& rope,
                   const int32_t* positions) {
  rope_rotate(dqkv, s, rope, -1.0f, positions);
}

}  // namespace strata::kernels
