// GELU, tanh approximation (GPT-2): gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715
// x^3). Computed as x * sigmoid(2u), since 0.5 (1 + tanh(u)) = sigmoid(2u): one vector exp and one
// division per vector instead of a tanh, and no cancellation in 1 + tanh(u) for x << 0.
// Compiled once per kernel level (Highway's foreach_target.h); kernels.h's functions dispatch.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/gelu.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>

#include "kernels/cpu/vec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace strata::kernels::HWY_NAMESPACE {
namespace {

constexpr float kTwoScale = 2.0f * 0.7978845608028654f;  // 2 sqrt(2/pi)
constexpr float kCube = 0.044715f;
constexpr int64_t kChunk = 4096;  // elements per parallel work item (a multiple of every width)

HWY_INLINE VF Gelu(DF d, VF x) {
  // 2u = 2 sqrt(2/pi) (x + c x^3) = x (2 sqrt(2/pi)) (1 + c x^2)
  const VF x2 = hn::Mul(x, x);
  const VF u2 = hn::Mul(hn::Mul(x, hn::Set(d, kTwoScale)),
                        hn::MulAdd(x2, hn::Set(d, kCube), hn::Set(d, 1.0f)));
  return hn::Mul(x, Sigmoid(d, u2));
}

}  // namespace

void GeluForward(float* y, const float* x, int64_t count) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const int64_t chunks = (count + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t end = std::min(count, (ch + 1) * kChunk);
    for (int64_t i = ch * kChunk; i < end; i += N)
      StoreN(Gelu(d, LoadN(d, x + i, size_t(end - i))), d, y + i, size_t(end - i));
  }
}

void GeluForwardBf16(uint16_t* y, const float* x, int64_t count) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const int64_t chunks = (count + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t end = std::min(count, (ch + 1) * kChunk);
    for (int64_t i = ch * kChunk; i < end; i += N)
      StoreBf16(d, Gelu(d, LoadN(d, x + i, size_t(end - i))), y + i, size_t(end - i));
  }
}

void GeluBackward(float* dx, const float* x, const float* dy, int64_t count) {
  // gelu'(x) = s + x s (1 - s) d(2u)/dx, s = sigmoid(2u), d(2u)/dx = 2 sqrt(2/pi)(1 + 3c x^2).
  // dx may alias dy: each vector of dy is read before the same vector of dx is written.
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const int64_t chunks = (count + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t end = std::min(count, (ch + 1) * kChunk);
    for (int64_t i = ch * kChunk; i < end; i += N) {
      const size_t n = size_t(end - i);
      const VF xv = LoadN(d, x + i, n);
      const VF x2 = hn::Mul(xv, xv);
      const VF k2 = hn::Set(d, kTwoScale);
      const VF u2 = hn::Mul(hn::Mul(xv, k2), hn::MulAdd(x2, hn::Set(d, kCube), hn::Set(d, 1.0f)));
      const VF s = Sigmoid(d, u2);
      const VF du2 = hn::Mul(k2, hn::MulAdd(x2, hn::Set(d, 3.0f * kCube), hn::Set(d, 1.0f)));
      const VF s1 = hn::Mul(s, hn::Sub(hn::Set(d, 1.0f), s));  // s (1 - s)
      const VF grad = hn::MulAdd(hn::Mul(xv, s1), du2, s);
      StoreN(hn::Mul(LoadN(d, dy + i, n), grad), d, dx + i, n);
    }
  }
}

}  // namespace strata::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/kernels.h"

namespace strata::kernels {

HWY_EXPORT(GeluForward);
HWY_EXPORT(GeluForwardBf16);
HWY_EXPORT(GeluBackward);

void gelu_forward(float* y, const float* x, int64_t count) {
  STRATA_DISPATCH(GeluForward)(y, x, count);
}
void gelu_forward_bf16(uint16_t* y, const float* x, int64_t count) {
  STRATA_DISPATCH(GeluForwardBf16)(y, x, count);
}
void gelu_backward(float* dx, const float* x, const float* dy, int64_t count) {
  STRATA_DISPATCH(GeluBackward)(dx, x, dy, count);
}

}  // namespace strata::kernels
#endif  // HWY_ONCE
