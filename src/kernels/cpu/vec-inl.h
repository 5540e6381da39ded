// Vector helpers shared by the element-wise kernels, for every Highway target (included once per
// target from a foreach_target.h translation unit): a vectorised exp (the one transcendental the
// model needs: softmax, sigmoid, and GELU's tanh through sigmoid), bf16 rounding, and tails that
// load or store only the elements that exist.
// libm's expf does not vectorise under GCC without -ffast-math (which the build does not use),
// and a scalar exp costs ~10x the vector one per element: this is where vector code pays.
//
// Every operation here is lane-wise with one rounding per step (fused multiply-adds on every
// target), so an element's value is bitwise the same at every level; only sums across lanes
// (ReduceSum) depend on the vector width.

// Per-target include guard (Highway's convention: the header is included once per target).
#if defined(STRATA_KERNELS_CPU_VEC_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STRATA_KERNELS_CPU_VEC_INL_H_
#undef STRATA_KERNELS_CPU_VEC_INL_H_
#else
#define STRATA_KERNELS_CPU_VEC_INL_H_
#endif

#include <hwy/highway.h>

#include <cmath>
#include <cstdint>
#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace strata::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The float vectors of the element-wise kernels: the target's full width (8 lanes on AVX2, 16 on
// AVX-512, 4 on NEON, the hardware's on SVE).
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Loads n < Lanes(d) elements (the rest zero) / stores the first n lanes, touching no memory past
// them. x86 and SVE have masked loads and stores for 32-bit lanes; elsewhere (NEON, 16-bit lanes)
// the tail goes through a stack buffer, since a full-width access could cross into a page that
// is not mapped or race with the thread that owns the next element.
// The buffer holds the target's largest vector (HWY_MAX_BYTES: 256 on SVE), not MaxLanes(d):
// Highway 1.0's MaxLanes of a fractional SVE tag (Rebind<uint16_t, ScalableTag<float>>) is 32,
// below its 64 lanes at SVE's 2048 bits, and the Store overran the stack there.
template <class D>
HWY_INLINE hn::Vec<D> LoadN(D d, const hn::TFromD<D>* HWY_RESTRICT p, size_t n) {
  using T = hn::TFromD<D>;
  if (n >= hn::Lanes(d)) return hn::LoadU(d, p);
#if HWY_ARCH_X86 || HWY_TARGET == HWY_SVE || HWY_TARGET == HWY_SVE2 || \
    HWY_TARGET == HWY_SVE_256 || HWY_TARGET == HWY_SVE2_128
  if constexpr (sizeof(T) == 4) return hn::MaskedLoad(hn::FirstN(d, n), d, p);
#endif
  HWY_ALIGN T buf[HWY_MAX_BYTES / sizeof(T)] = {};
  std::memcpy(buf, p, n * sizeof(T));
  return hn::Load(d, buf);
}

template <class D>
HWY_INLINE void StoreN(hn::Vec<D> v, D d, hn::TFromD<D>* HWY_RESTRICT p, size_t n) {
  using T = hn::TFromD<D>;
  if (n >= hn::Lanes(d)) return hn::StoreU(v, d, p);
#if HWY_ARCH_X86 || HWY_TARGET == HWY_SVE || HWY_TARGET == HWY_SVE2 || \
    HWY_TARGET == HWY_SVE_256 || HWY_TARGET == HWY_SVE2_128
  if constexpr (sizeof(T) == 4) return hn::BlendedStore(v, hn::FirstN(d, n), d, p);
#endif
  HWY_ALIGN T buf[HWY_MAX_BYTES / sizeof(T)];
  hn::Store(v, d, buf);
  std::memcpy(p, buf, n * sizeof(T));
}

template <class D>
HWY_INLINE float ReduceSum(D d, hn::Vec<D> v) {
  return hn::GetLane(hn::SumOfLanes(d, v));
}
template <class D>
HWY_INLINE float ReduceMax(D d, hn::Vec<D> v) {
  return hn::GetLane(hn::MaxOfLanes(d, v));
}

// sum of p[0..n): two accumulators (one would be bound by the adds' latency), a zero-filled
// tail, lanes added once at the end.
template <class D>
HWY_INLINE float RowSum(D d, const float* HWY_RESTRICT p, int64_t n) {
  const int64_t lanes = int64_t(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t j = 0;
  for (; j + 2 * lanes <= n; j += 2 * lanes) {
    s0 = hn::Add(s0, hn::LoadU(d, p + j));
    s1 = hn::Add(s1, hn::LoadU(d, p + j + lanes));
  }
  for (; j < n; j += lanes) s0 = hn::Add(s0, LoadN(d, p + j, size_t(n - j)));
  return ReduceSum(d, hn::Add(s0, s1));
}

// sum of (p[j] - mu)^2 over p[0..n) (mu = 0: the sum of squares), two accumulators like RowSum;
// the tail's missing lanes are masked out (they would add mu^2).
template <class D>
HWY_INLINE float RowSumSquaredDiff(D d, const float* HWY_RESTRICT p, int64_t n, float mu) {
  const int64_t lanes = int64_t(hn::Lanes(d));
  const auto muv = hn::Set(d, mu);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t j = 0;
  for (; j + 2 * lanes <= n; j += 2 * lanes) {
    const auto a = hn::Sub(hn::LoadU(d, p + j), muv), b = hn::Sub(hn::LoadU(d, p + j + lanes), muv);
    s0 = hn::MulAdd(a, a, s0);
    s1 = hn::MulAdd(b, b, s1);
  }
  for (; j < n; j += lanes) {
    const size_t left = size_t(n - j);
    const auto a = hn::IfThenElseZero(hn::FirstN(d, left), hn::Sub(LoadN(d, p + j, left), muv));
    s0 = hn::MulAdd(a, a, s0);
  }
  return ReduceSum(d, hn::Add(s0, s1));
}

// max of p[0..n) (-inf for n = 0), whole vectors and a masked tail.
template <class D>
HWY_INLINE float MaxN(D d, const float* HWY_RESTRICT p, int64_t n) {
  const int64_t lanes = int64_t(hn::Lanes(d));
  auto mx = hn::Set(d, -INFINITY);
  for (int64_t j = 0; j < n; j += lanes) {
    const size_t left = size_t(n - j);
    const auto x = LoadN(d, p + j, left);
    mx = left < size_t(lanes) ? hn::IfThenElse(hn::FirstN(d, left), hn::Max(mx, x), mx)
                              : hn::Max(mx, x);
  }
  return ReduceMax(d, mx);
}

// exp(x) with ~1 ulp error (Cephes expf polynomial): x = n ln2 + r, |r| <= ln2/2,
// exp(x) = 2^n * P(r). The clamp keeps r finite for huge |x| (exp(-104) is 0 in float, exp(89) is
// inf). 2^n is applied as 2^(n/2) * 2^(n - n/2): both halves are normal floats for every n the
// clamp allows, the first product is exact, and the second rounds once, into the subnormals or
// to inf where the result goes there (what AVX-512's scalef does in one instruction).
template <class D>
HWY_INLINE hn::Vec<D> Exp(D d, hn::Vec<D> x) {
  const hn::RebindToSigned<D> di;
  x = hn::Max(hn::Min(x, hn::Set(d, 89.0f)), hn::Set(d, -104.0f));
  const auto n = hn::Round(hn::Mul(x, hn::Set(d, 1.44269504088896341f)));
  // ln2 split in two so that n * ln2_hi is exact (Cody-Waite).
  auto r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x);
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
  auto p = hn::Set(d, 1.9875691500e-4f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 5.0000001201e-1f));
  p = hn::MulAdd(p, hn::Mul(r, r), hn::Add(r, hn::Set(d, 1.0f)));
  const auto ni = hn::ConvertTo(di, n);
  const auto n1 = hn::ShiftRight<1>(ni);  // floor(n / 2)
  const auto n2 = hn::Sub(ni, n1);
  const auto bias = hn::Set(di, 127);
  const auto s1 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n1, bias)));
  const auto s2 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n2, bias)));
  return hn::Mul(hn::Mul(p, s1), s2);
}

// sigmoid(x) = 1 / (1 + exp(-x)); saturates cleanly to 0 and 1.
template <class D>
HWY_INLINE hn::Vec<D> Sigmoid(D d, hn::Vec<D> x) {
  const auto one = hn::Set(d, 1.0f);
  return hn::Div(one, hn::Add(one, Exp(d, hn::Neg(x))));
}

// f32 -> bf16 bit patterns, round to nearest even, NaN kept quiet (bit-exact with core/dtype.h's
// scalar f32_to_bf16): the 32-bit results, one per lane (the caller narrows them).
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> Bf16Bits(D /*d*/, hn::Vec<D> x) {
  const hn::RebindToUnsigned<D> du;
  const auto u = hn::BitCast(du, x);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const auto r = hn::ShiftRight<16>(hn::Add(hn::Add(u, hn::Set(du, 0x7fffu)), lsb));
  const auto is_nan =
      hn::Gt(hn::BitCast(hn::RebindToSigned<D>(), hn::And(u, hn::Set(du, 0x7fffffffu))),
             hn::Set(hn::RebindToSigned<D>(), 0x7f800000));
  const auto quiet = hn::Or(hn::ShiftRight<16>(u), hn::Set(du, 0x40u));
  return hn::IfThenElse(hn::RebindMask(du, is_nan), quiet, r);
}

// x rounded to the nearest bf16 value, kept as f32 (the low 16 bits zero).
template <class D>
HWY_INLINE hn::Vec<D> RoundBf16(D d, hn::Vec<D> x) {
  return hn::BitCast(d, hn::ShiftLeft<16>(Bf16Bits(d, x)));
}

// Stores n (any count) f32 lanes as bf16 bit patterns at p.
template <class D>
HWY_INLINE void StoreBf16(D d, hn::Vec<D> x, uint16_t* HWY_RESTRICT p, size_t n) {
  const hn::Rebind<uint16_t, D> d16;
  const hn::RebindToSigned<D> di;
  // The 32-bit values are at most 0xffff: the saturating narrowing keeps them as they are.
  const auto h = hn::DemoteTo(d16, hn::BitCast(di, Bf16Bits(d, x)));
  StoreN(h, d16, p, n);
}

// Loads n (any count) bf16 bit patterns at p as f32 lanes (exact).
template <class D>
HWY_INLINE hn::Vec<D> LoadBf16(D d, const uint16_t* HWY_RESTRICT p, size_t n) {
  const hn::Rebind<uint16_t, D> d16;
  const hn::RebindToUnsigned<D> du;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, LoadN(d16, p, n))));
}

}  // namespace strata::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
