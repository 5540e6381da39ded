// SwiGLU (Llama MLP): gate_up[n, 2f] is the output of one fused gate|up projection; the gate is
// columns [0, f), up is [f, 2f). y = silu(gate) * up with silu(g) = g sigmoid(g).
#include <algorithm>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec.h"

namespace strata::kernels {

void swiglu_forward(float* y, const float* gate_up, int64_t n, int64_t f) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* gate = gate_up + i * 2 * f;
    const float* up = gate + f;
    float* yr = y + i * f;
    for (int64_t j = 0; j < f; j += 16) {
      const __mmask16 m = vec::tail_mask(j, f);
      const __m512 g = vec::load(gate + j, m);
      const __m512 silu = _mm512_mul_ps(g, vec::sigmoid(g));
      vec::store(yr + j, _mm512_mul_ps(silu, vec::load(up + j, m)), m);
    }
  }
}

void swiglu_backward(float* dgate_up, const float* gate_up, const float* dy, int64_t n, int64_t f) {
  // d/dg = dy * up * s (1 + g (1 - s)), d/dup = dy * g * s, s = sigmoid(g).
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* gate = gate_up + i * 2 * f;
    const float* up = gate + f;
    const float* dyr = dy + i * f;
    float* dgate = dgate_up + i * 2 * f;
    float* dup = dgate + f;
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t j = 0; j < f; j += 16) {
      const __mmask16 m = vec::tail_mask(j, f);
      const __m512 g = vec::load(gate + j, m);
      const __m512 u = vec::load(up + j, m);
      const __m512 d = vec::load(dyr + j, m);
      const __m512 s = vec::sigmoid(g);
      const __m512 dsilu = _mm512_mul_ps(s, _mm512_fmadd_ps(g, _mm512_sub_ps(one, s), one));
      vec::store(dgate + j, _mm512_mul_ps(_mm512_mul_ps(d, u), dsilu), m);
      vec::store(dup + j, _mm512_mul_ps(_mm512_mul_ps(d, g), s), m);
    }
  }
}

}  // namespace strata::kernels
