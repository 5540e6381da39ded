// GELU, tanh approximation (GPT-2): gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715
// x^3). Computed as x * sigmoid(2u), since 0.5 (1 + tanh(u)) = sigmoid(2u): one vector exp and one
// division per 16 elements instead of a tanh, and no cancellation in 1 + tanh(u) for x << 0.
#include <algorithm>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec.h"

namespace strata::kernels {

namespace {
constexpr float kTwoScale = 2.0f * 0.7978845608028654f;  // 2 sqrt(2/pi)
constexpr float kCube = 0.044715f;
constexpr int64_t kChunk = 4096;  // elements per parallel work item (multiple of 16)
}  // namespace

namespace {
inline __m512 gelu(__m512 xv) {
  const __m512 x2 = _mm512_mul_ps(xv, xv);
  // 2u = 2 sqrt(2/pi) (x + c x^3) = x (2 sqrt(2/pi)) (1 + c x^2)
  const __m512 u2 = _mm512_mul_ps(_mm512_mul_ps(xv, _mm512_set1_ps(kTwoScale)),
                                  _mm512_fmadd_ps(x2, _mm512_set1_ps(kCube), _mm512_set1_ps(1.0f)));
  return _mm512_mul_ps(xv, vec::sigmoid(u2));
}
}  // namespace

void gelu_forward(float* y, const float* x, int64_t count) {
  const int64_t chunks = (count + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t end = std::min(count, (ch + 1) * kChunk);
    for (int64_t i = ch * kChunk; i < end; i += 16) {
      const __mmask16 m = vec::tail_mask(i, end);
      vec::store(y + i, gelu(vec::load(x + i, m)), m);
    }
  }
}

void gelu_forward_bf16(uint16_t* y, const float* x, int64_t count) {
  const int64_t chunks = (count + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t end = std::min(count, (ch + 1) * kChunk);
    for (int64_t i = ch * kChunk; i < end; i += 16) {
      const __mmask16 m = vec::tail_mask(i, end);
      _mm256_mask_storeu_epi16(y + i, m, vec::to_bf16(gelu(vec::load(x + i, m))));
    }
  }
}

void gelu_backward(float* dx, const float* x, const float* dy, int64_t count) {
  // gelu'(x) = s + x s (1 - s) d(2u)/dx, s = sigmoid(2u), d(2u)/dx = 2 sqrt(2/pi)(1 + 3c x^2).
  // dx may alias dy: each lane reads dy before writing dx, element by element.
  const int64_t chunks = (count + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t end = std::min(count, (ch + 1) * kChunk);
    for (int64_t i = ch * kChunk; i < end; i += 16) {
      const __mmask16 m = vec::tail_mask(i, end);
      const __m512 xv = vec::load(x + i, m);
      const __m512 x2 = _mm512_mul_ps(xv, xv);
      const __m512 k2 = _mm512_set1_ps(kTwoScale);
      const __m512 u2 = _mm512_mul_ps(
          _mm512_mul_ps(xv, k2), _mm512_fmadd_ps(x2, _mm512_set1_ps(kCube), _mm512_set1_ps(1.0f)));
      const __m512 s = vec::sigmoid(u2);
      const __m512 du2 = _mm512_mul_ps(
          k2, _mm512_fmadd_ps(x2, _mm512_set1_ps(3.0f * kCube), _mm512_set1_ps(1.0f)));
      const __m512 s1 = _mm512_mul_ps(s, _mm512_sub_ps(_mm512_set1_ps(1.0f), s));  // s (1 - s)
      const __m512 grad = _mm512_fmadd_ps(_mm512_mul_ps(xv, s1), du2, s);
      vec::store(dx + i, _mm512_mul_ps(vec::load(dy + i, m), grad), m);
    }
  }
}

}  // namespace strata::kernels
