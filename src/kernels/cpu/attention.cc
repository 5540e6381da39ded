// Causal self-attention, naive (probabilities materialised in probs[b, nh, t, t]), with grouped-
// query attention: query head h reads kv head h / (nh / nkv).
//
// Work split: forward runs one (batch, head) per task, backward one (batch, kv head) per task,
// so that the q heads sharing a kv head add their dk, dv contributions in a fixed order (no
// atomics, no dependence on the thread count). Inside a task every product is a small gemm on
// strided views of qkv / out / probs (leading dimension = row stride), called single-threaded
// from inside the parallel region. Rows are processed in blocks of kBlock queries and each
// block only touches keys 0..end of block, so the causal triangle costs about half of a full
// t x t product.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/gemm_backends.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec.h"

namespace strata::kernels {

namespace {

constexpr int64_t kBlock = 64;

// Single-threaded gemm for use inside a parallel region (oneDNN then runs on the calling thread).
void small_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  detail::gemm_dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// In place: p[0..len) = softmax(p[0..len)), p[len..end) = 0.
void softmax_row(float* p, int64_t len, int64_t end) {
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < len; j += 16) {
    const __mmask16 m = vec::tail_mask(j, len);
    mx = _mm512_mask_max_ps(mx, m, mx, vec::load(p + j, m));
  }
  const __m512 maxv = _mm512_set1_ps(vec::reduce_max(mx));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < len; j += 16) {
    const __mmask16 m = vec::tail_mask(j, len);
    const __m512 e = _mm512_maskz_mov_ps(m, vec::exp(_mm512_sub_ps(vec::load(p + j, m), maxv)));
    sum = _mm512_add_ps(sum, e);
    vec::store(p + j, e, m);
  }
  const float inv = 1.0f / vec::reduce_add(sum);
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) p[j] *= inv;
  std::fill(p + len, p + end, 0.0f);
}

void check_heads(int64_t nh, int64_t nkv, int64_t hd) {
  STRATA_CHECK(nh > 0 && nkv > 0 && nh % nkv == 0, "attention: n_head ", nh,
               " must be a multiple of n_kv_head ", nkv);
  STRATA_CHECK(hd > 0, "attention: head_dim must be positive");
}

}  // namespace

void attention_forward(float* out, float* probs, const float* qkv, int64_t b, int64_t t, int64_t nh,
                       int64_t nkv, int64_t hd) {
  check_heads(nh, nkv, hd);
  const int64_t row = (nh + 2 * nkv) * hd, ldo = nh * hd, group = nh / nkv;
  const float scale = 1.0f / std::sqrt(float(hd));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < b * nh; ++task) {
    const int64_t bi = task / nh, h = task % nh, kvh = h / group;
    const float* q = qkv + bi * t * row + h * hd;
    const float* k = qkv + bi * t * row + (nh + kvh) * hd;
    const float* v = qkv + bi * t * row + (nh + nkv + kvh) * hd;
    float* p = probs + task * t * t;
    float* o = out + bi * t * ldo + h * hd;
    for (int64_t r0 = 0; r0 < t; r0 += kBlock) {
      const int64_t r1 = std::min(t, r0 + kBlock);
      // Scores of queries r0..r1 against keys 0..r1 (the rest of the rows is masked anyway).
      small_gemm(false, true, r1 - r0, r1, hd, scale, q + r0 * row, row, k, row, 0.0f, p + r0 * t,
                 t);
      for (int64_t i = r0; i < r1; ++i) softmax_row(p + i * t, i + 1, t);
      // out rows r0..r1 = P[r0..r1, 0..r1] V[0..r1]
      small_gemm(false, false, r1 - r0, hd, r1, 1.0f, p + r0 * t, t, v, row, 0.0f, o + r0 * ldo,
                 ldo);
    }
  }
}

int64_t attention_backward_scratch(int64_t /*b*/, int64_t t, int64_t /*nh*/, int64_t /*nkv*/,
                                   int64_t /*hd*/) {
  // One t x t block of score gradients per thread.
  return int64_t(omp_get_max_threads()) * t * t;
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* probs, int64_t b, int64_t t, int64_t nh, int64_t nkv,
                        int64_t hd) {
  check_heads(nh, nkv, hd);
  const int64_t row = (nh + 2 * nkv) * hd, ldo = nh * hd, group = nh / nkv;
  const float scale = 1.0f / std::sqrt(float(hd));
  // The team size must match what attention_backward_scratch() sized the scratch for.
  const int nthreads = omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
  for (int64_t task = 0; task < b * nkv; ++task) {
    const int64_t bi = task / nkv, kvh = task % nkv;
    float* ds = scratch + int64_t(omp_get_thread_num()) * t * t;
    const float* k = qkv + bi * t * row + (nh + kvh) * hd;
    const float* v = qkv + bi * t * row + (nh + nkv + kvh) * hd;
    float* dk = dqkv + bi * t * row + (nh + kvh) * hd;
    float* dv = dqkv + bi * t * row + (nh + nkv + kvh) * hd;
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      const float* q = qkv + bi * t * row + h * hd;
      float* dq = dqkv + bi * t * row + h * hd;
      const float* p = probs + (bi * nh + h) * t * t;
      const float* dout_h = dout + bi * t * ldo + h * hd;
      const float beta = h == kvh * group ? 0.0f : 1.0f;  // first head of the group overwrites
      for (int64_t r0 = 0; r0 < t; r0 += kBlock) {
        const int64_t r1 = std::min(t, r0 + kBlock);
        // dP = dO V^T on the causal block, then the softmax backward in place:
        // dS = P * (dP - rowsum(P * dP)) * scale, zero above the diagonal.
        small_gemm(false, true, r1 - r0, r1, hd, 1.0f, dout_h + r0 * ldo, ldo, v, row, 0.0f,
                   ds + r0 * t, t);
        for (int64_t i = r0; i < r1; ++i) {
          const float* __restrict pr = p + i * t;
          float* __restrict dsr = ds + i * t;
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int64_t j = 0; j <= i; ++j) dot += pr[j] * dsr[j];
#pragma omp simd
          for (int64_t j = 0; j <= i; ++j) dsr[j] = pr[j] * (dsr[j] - dot) * scale;
          std::fill(dsr + i + 1, dsr + r1, 0.0f);
        }
        // dQ rows r0..r1 = dS[r0..r1, 0..r1] K[0..r1]
        small_gemm(false, false, r1 - r0, hd, r1, 1.0f, ds + r0 * t, t, k, row, 0.0f, dq + r0 * row,
                   row);
      }
      // dV[c0..c1] (+)= P[c0..t, c0..c1]^T dO[c0..t]; dK likewise with dS and Q. Rows above c0
      // of those columns are zero (causal), so they are skipped.
      for (int64_t c0 = 0; c0 < t; c0 += kBlock) {
        const int64_t c1 = std::min(t, c0 + kBlock);
        small_gemm(true, false, c1 - c0, hd, t - c0, 1.0f, p + c0 * t + c0, t, dout_h + c0 * ldo,
                   ldo, beta, dv + c0 * row, row);
        small_gemm(true, false, c1 - c0, hd, t - c0, 1.0f, ds + c0 * t + c0, t, q + c0 * row, row,
                   beta, dk + c0 * row, row);
      }
    }
  }
}

}  // namespace strata::kernels
