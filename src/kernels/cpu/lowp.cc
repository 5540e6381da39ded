// Low-precision storage with f32 accumulation: the conversions (round-to-nearest-even, bit-exact
// with core/dtype.h, done with integer arithmetic so that denormals and NaN behave exactly like
// the scalar reference) and linear layers whose inputs are bf16 or f16.
//
// bf16: GEMMs run on oneDNN's bf16 matmul (gemm.cc) where the CPU has bf16 dot products (the
// avx512bf16 level). Below it, and for f16 on every CPU (none has an f16 GEMM that oneDNN 2.7
// runs), the 16-bit operands are widened into f32 scratch and the f32 GEMM runs: the numerics are
// the 16-bit format's (every operand is a bf16 or f16 value, f16 overflow is inf), the speed is
// f32's. oneDNN's bf16 matmul without the hardware is a reference loop (a few GFLOP/s), which is
// what no CPU should run silently.
// The conversions are compiled once per kernel level (Highway's foreach_target.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/lowp.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>

#include "kernels/cpu/vec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace strata::kernels::HWY_NAMESPACE {

// The conversions split the elements into chunks of whole vectors, one per thread's share.
void ToBf16(uint16_t* out, const float* in, int64_t count) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i += N)
    StoreBf16(d, LoadN(d, in + i, size_t(count - i)), out + i, size_t(count - i));
}

void FromBf16(float* out, const uint16_t* in, int64_t count) {
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i += N)
    StoreN(LoadBf16(d, in + i, size_t(count - i)), d, out + i, size_t(count - i));
}

// f16 <-> f32 with the hardware conversions (F16C on x86, fcvt on Arm): round to nearest even,
// overflow to inf, NaN kept.
void ToF16(uint16_t* out, const float* in, int64_t count) {
  const DF d;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t N = int64_t(hn::Lanes(d));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i += N) {
    const size_t left = size_t(count - i);
    StoreN(hn::DemoteTo(dh, LoadN(d, in + i, left)), dh, reinterpret_cast<hwy::float16_t*>(out + i),
           left);
  }
}

void FromF16(float* out, const uint16_t* in, int64_t count) {
  const DF d;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t N = int64_t(hn::Lanes(d));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i += N) {
    const size_t left = size_t(count - i);
    StoreN(hn::PromoteTo(d, LoadN(dh, reinterpret_cast<const hwy::float16_t*>(in + i), left)), d,
           out + i, left);
  }
}

}  // namespace strata::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "core/error.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/kernels.h"

namespace strata::kernels {

HWY_EXPORT(ToBf16);
HWY_EXPORT(FromBf16);
HWY_EXPORT(ToF16);
HWY_EXPORT(FromF16);

namespace {

void to_bf16(uint16_t* out, const float* in, int64_t count) {
  STRATA_DISPATCH(ToBf16)(out, in, count);
}
void from_bf16(float* out, const uint16_t* in, int64_t count) {
  STRATA_DISPATCH(FromBf16)(out, in, count);
}
void to_f16(uint16_t* out, const float* in, int64_t count) {
  STRATA_DISPATCH(ToF16)(out, in, count);
}
void from_f16(float* out, const uint16_t* in, int64_t count) {
  STRATA_DISPATCH(FromF16)(out, in, count);
}

void check_lowp(DType t) {
  STRATA_CHECK(t == DType::bf16 || t == DType::f16, "low-precision kernel: dtype ", dtype_name(t),
               " is not bf16 or f16");
}

// op(A) * op(B) for operands of type t: bf16 directly where the CPU multiplies bf16; otherwise
// (f16 always) widened into scratch first.
void gemm_lowp(DType t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
               int64_t a_elems, int64_t lda, const uint16_t* b, int64_t b_elems, int64_t ldb,
               float beta, float* c, int64_t ldc, float* scratch) {
  if (!lowp_widens(t)) {
    gemm_bf16(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  STRATA_CHECK(scratch != nullptr, dtype_name(t), " linear: no f32 scratch given");
  float* a32 = scratch;
  float* b32 = scratch + a_elems;
  from_lowp(t, a32, a, a_elems);
  from_lowp(t, b32, b, b_elems);
  gemm(ta, tb, m, n, k, 1.0f, a32, lda, b32, ldb, beta, c, ldc);
}

}  // namespace

void to_lowp(DType t, uint16_t* out, const float* in, int64_t count) {
  check_lowp(t);
  t == DType::bf16 ? to_bf16(out, in, count) : to_f16(out, in, count);
}

void from_lowp(DType t, float* out, const uint16_t* in, int64_t count) {
  check_lowp(t);
  t == DType::bf16 ? from_bf16(out, in, count) : from_f16(out, in, count);
}

void linear_forward_lowp(DType t, float* y, const uint16_t* x, const uint16_t* w, const float* bias,
                         int64_t n, int64_t in, int64_t out, float* f32_scratch) {
  check_lowp(t);
  float beta = 0.0f;
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) std::copy(bias, bias + out, y + i * out);
    beta = 1.0f;
  }
  gemm_lowp(t, false, true, n, out, in, x, n * in, in, w, out * in, in, beta, y, out, f32_scratch);
}

void linear_backward_lowp(DType t, float* dx, float* dw, float* dbias, const float* dy,
                          uint16_t* dy_lowp, int64_t capacity, const uint16_t* x, const uint16_t* w,
                          int64_t n, int64_t in, int64_t out, float* f32_scratch) {
  check_lowp(t);
  STRATA_CHECK(capacity >= out, "linear_backward_lowp: a dy block of ", capacity,
               " elements cannot hold one row of ", out);
  if (dbias) {
    // Column sums in f32 from the f32 dy (the bias gradient does not need the rounding).
    const int64_t blocks = (out + 127) / 128;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t j0 = blk * 128, width = std::min<int64_t>(128, out - j0);
      float acc[128] = {};
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < width; ++j) acc[j] += dy[i * out + j0 + j];
      for (int64_t j = 0; j < width; ++j) dbias[j0 + j] += acc[j];
    }
  }
  const int64_t rows = std::min(n, capacity / out);
  for (int64_t r0 = 0; r0 < n; r0 += rows) {
    const int64_t r = std::min(rows, n - r0);
    to_lowp(t, dy_lowp, dy + r0 * out, r * out);
    if (dx)  // dx[r, in] = dy[r, out] * w[out, in]
      gemm_lowp(t, false, false, r, in, out, dy_lowp, r * out, out, w, out * in, in, 0.0f,
                dx + r0 * in, in, f32_scratch);
    if (dw)  // dw[out, in] += dy^T[out, r] * x[r, in]
      gemm_lowp(t, true, false, out, in, r, dy_lowp, r * out, out, x + r0 * in, r * in, in, 1.0f,
                dw, in, f32_scratch);
  }
}

bool lowp_widens(DType t) {
  return t == DType::f16 || !isa::native_bf16();
}

int64_t lowp_f32_scratch(int64_t n, int64_t in, int64_t out, int64_t capacity) {
  // The larger of: forward x[n, in] + w[out, in]; backward dy block + w or x block.
  return std::max(n * in + out * in, capacity + std::max(out * in, n * in));
}

}  // namespace strata::kernels
#endif  // HWY_ONCE
