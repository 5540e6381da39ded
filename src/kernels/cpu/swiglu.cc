// SwiGLU (Llama MLP): gate_up[n, 2f] is the output of one fused gate|up projection; the gate is
// columns [0, f), up is [f, 2f). y = silu(gate) * up with silu(g) = g sigmoid(g).
// Compiled once per kernel level (Highway's foreach_target.h); kernels.h's functions dispatch.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/swiglu.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/vec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace strata::kernels::HWY_NAMESPACE {

void SwigluForward(float* y, const float* gate_up, int64_t n, int64_t f) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* gate = gate_up + i * 2 * f;
    const float* up = gate + f;
    float* yr = y + i * f;
    for (int64_t j = 0; j < f; j += N) {
      const size_t left = size_t(f - j);
      const VF g = LoadN(d, gate + j, left);
      const VF silu = hn::Mul(g, Sigmoid(d, g));
      StoreN(hn::Mul(silu, LoadN(d, up + j, left)), d, yr + j, left);
    }
  }
}

void SwigluBackward(float* dgate_up, const float* gate_up, const float* dy, int64_t n, int64_t f) {
  // d/dg = dy * up * s (1 + g (1 - s)), d/dup = dy * g * s, s = sigmoid(g).
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* gate = gate_up + i * 2 * f;
    const float* up = gate + f;
    const float* dyr = dy + i * f;
    float* dgate = dgate_up + i * 2 * f;
    float* dup = dgate + f;
    const VF one = hn::Set(d, 1.0f);
    for (int64_t j = 0; j < f; j += N) {
      const size_t left = size_t(f - j);
      const VF g = LoadN(d, gate + j, left);
      const VF u = LoadN(d, up + j, left);
      const VF dv = LoadN(d, dyr + j, left);
      const VF s = Sigmoid(d, g);
      const VF dsilu = hn::Mul(s, hn::MulAdd(g, hn::Sub(one, s), one));
      StoreN(hn::Mul(hn::Mul(dv, u), dsilu), d, dgate + j, left);
      StoreN(hn::Mul(hn::Mul(dv, g), s), d, dup + j, left);
    }
  }
}

}  // namespace strata::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/kernels.h"

namespace strata::kernels {

HWY_EXPORT(SwigluForward);
HWY_EXPORT(SwigluBackward);

void swiglu_forward(float* y, const float* gate_up, int64_t n, int64_t f) {
  STRATA_DISPATCH(SwigluForward)(y, gate_up, n, f);
}
void swiglu_backward(float* dgate_up, const float* gate_up, const float* dy, int64_t n, int64_t f) {
  STRATA_DISPATCH(SwigluBackward)(dgate_up, gate_up, dy, n, f);
}

}  // namespace strata::kernels
#endif  // HWY_ONCE
