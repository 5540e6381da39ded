// Low-precision storage with f32 accumulation: the conversions (round-to-nearest-even, bit-exact
// with core/dtype.h, done with integer arithmetic so that denormals and NaN behave exactly like
// the scalar reference) and linear layers whose inputs are bf16 or f16.
//
// bf16: GEMMs run on oneDNN's bf16 matmul (gemm.cc). f16: this CPU (Zen 4) has no f16 GEMM, so
// the f16 operands are widened into f32 scratch and the f32 GEMM runs; the numerics are f16's
// (every operand is an f16 value, overflow is inf), which is what fp16 training with loss scaling
// needs to be tested on a CPU; the speed is f32's.
#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec.h"

namespace strata::kernels {

namespace {

void to_bf16(uint16_t* out, const float* in, int64_t count) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 m = vec::tail_mask(i, count);
    _mm256_mask_storeu_epi16(out + i, m, vec::to_bf16(vec::load(in + i, m)));
  }
}

void from_bf16(float* out, const uint16_t* in, int64_t count) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 m = vec::tail_mask(i, count);
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, in + i));
    vec::store(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)), m);
  }
}

void to_f16(uint16_t* out, const float* in, int64_t count) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 m = vec::tail_mask(i, count);
    const __m256i h =
        _mm512_cvtps_ph(vec::load(in + i, m), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_epi16(out + i, m, h);
  }
}

void from_f16(float* out, const uint16_t* in, int64_t count) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 m = vec::tail_mask(i, count);
    vec::store(out + i, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, in + i)), m);
  }
}

void check_lowp(DType t) {
  STRATA_CHECK(t == DType::bf16 || t == DType::f16, "low-precision kernel: dtype ", dtype_name(t),
               " is not bf16 or f16");
}

// op(A) * op(B) for operands of type t: bf16 directly; f16 widened into scratch first.
void gemm_lowp(DType t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
               int64_t a_elems, int64_t lda, const uint16_t* b, int64_t b_elems, int64_t ldb,
               float beta, float* c, int64_t ldc, float* scratch) {
  if (t == DType::bf16) {
    gemm_bf16(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  STRATA_CHECK(scratch != nullptr, "f16 linear: no f32 scratch given");
  float* a32 = scratch;
  float* b32 = scratch + a_elems;
  from_f16(a32, a, a_elems);
  from_f16(b32, b, b_elems);
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

int64_t lowp_f32_scratch(int64_t n, int64_t in, int64_t out, int64_t capacity) {
  // The larger of: forward x[n, in] + w[out, in]; backward dy block + w or x block.
  return std::max(n * in + out * in, capacity + std::max(out * in, n * in));
}

}  // namespace strata::kernels
