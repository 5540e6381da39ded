// Fused softmax + cross-entropy over the vocabulary, rows in parallel. A row of V = 50304 logits
// is 200 KB and stays in L2 across the passes: (1) max, (2) exp(x - max) and its sum (written
// back in place when the gradient is wanted, so pass 3 needs no second exp), (3) gradient
// (softmax - onehot) * grad_scale. The sum of exps is accumulated in double: it adds up to 50k
// positive terms, and the loss is its log (see row_sum_exp).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vec.h"

namespace strata::kernels {

namespace {

float row_max(const float* x, int64_t v) {
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < v; j += 16) {
    const __mmask16 m = vec::tail_mask(j, v);
    mx = _mm512_mask_max_ps(mx, m, mx, vec::load(x + j, m));
  }
  return vec::reduce_max(mx);
}

// Sum of exp(x - maxv) in double; if out is not null, exp(x - maxv) is stored there.
// Lanes accumulate 16 terms (each <= 1) in float, then move to double: the conversions cost
// 1/16 of what converting every step would, and the float partial sums lose nothing visible.
double row_sum_exp(const float* x, float* out, int64_t v, float maxv) {
  const __m512 mv = _mm512_set1_ps(maxv);
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  for (int64_t j0 = 0; j0 < v; j0 += 256) {
    const int64_t end = std::min(v, j0 + 256);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = j0; j < end; j += 16) {
      const __mmask16 m = vec::tail_mask(j, end);
      const __m512 e = _mm512_maskz_mov_ps(m, vec::exp(_mm512_sub_ps(vec::load(x + j, m), mv)));
      if (out) vec::store(out + j, e, m);
      acc = _mm512_add_ps(acc, e);
    }
    s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(acc)));
    s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(acc, 1)));
  }
  // _mm512_reduce_add_pd's order, spelled out (GCC 12 warns falsely inside the intrinsic).
  alignas(64) double t[8];
  _mm512_store_pd(t, _mm512_add_pd(s0, s1));
  return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
}

void check_targets(const int32_t* targets, int64_t n, int64_t v) {
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; ++i) {
    if (targets[i] >= v) bad = i;
  }
  STRATA_CHECK(bad < 0, "cross_entropy: target ", bad < 0 ? 0 : targets[bad], " at row ", bad,
               " is outside the vocabulary of ", v);
}

// Sum of the per-row losses in row order, so the total does not depend on the thread count.
double total_loss(const float* losses, const int32_t* targets, int64_t n) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] >= 0) total += double(losses[i]);
  }
  return total;
}

}  // namespace

double cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t n,
                             int64_t v) {
  check_targets(targets, n, v);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] < 0) {
      losses[i] = 0.0f;
      continue;
    }
    const float* x = logits + i * v;
    const float maxv = row_max(x, v);
    const double sum = row_sum_exp(x, nullptr, v, maxv);
    losses[i] = float(std::log(sum) + double(maxv) - double(x[targets[i]]));
  }
  return total_loss(losses, targets, n);
}

double cross_entropy_forward_backward(float* losses, float* logits, const int32_t* targets,
                                      int64_t n, int64_t v, float grad_scale) {
  check_targets(targets, n, v);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float* x = logits + i * v;
    const int32_t target = targets[i];
    if (target < 0) {
      losses[i] = 0.0f;
      std::fill(x, x + v, 0.0f);
      continue;
    }
    const float maxv = row_max(x, v);
    const float x_target = x[target];  // read before pass 2 overwrites the row
    const double sum = row_sum_exp(x, x, v, maxv);
    losses[i] = float(std::log(sum) + double(maxv) - double(x_target));
    const float k = float(double(grad_scale) / sum);
#pragma omp simd
    for (int64_t j = 0; j < v; ++j) x[j] *= k;
    x[target] -= grad_scale;
  }
  return total_loss(losses, targets, n);
}

// The bf16 form writes the gradient as bf16 over the logits' own storage (row i at element i * v
// of the uint16_t view). Row i's bf16 row lands on f32 elements [i v / 2, (i + 1) v / 2), i.e.
// inside rows <= i / 2: inside the row itself for row 0 (written behind the read position, so
// safe), and in rows already finished for every later row as long as rows [r0, r1) run only after
// all rows < r0 and r1 <= 2 r0. So rows go in blocks of doubling size: {0}, {1}, {2, 3},
// {4..7}, ..., each block in parallel. The f32 gradient and its separate rounding pass (read f32,
// write bf16: twice for a tied head) disappear.
namespace {
// One row of cross_entropy_forward_backward_bf16.
void ce_row_bf16(float* losses, float* logits, const int32_t* targets, int64_t i, int64_t v,
                 float grad_scale) {
  float* x = logits + i * v;
  uint16_t* g = reinterpret_cast<uint16_t*>(logits) + i * v;
  const int32_t target = targets[i];
  if (target < 0) {
    losses[i] = 0.0f;
    std::fill(g, g + v, uint16_t{0});
    return;
  }
  const float maxv = row_max(x, v);
  const float x_target = x[target];
  const double sum = row_sum_exp(x, x, v, maxv);  // exp(x - max) kept in place
  losses[i] = float(std::log(sum) + double(maxv) - double(x_target));
  const __m512 kv = _mm512_set1_ps(float(double(grad_scale) / sum));
  // Element j's bf16 goes to byte 2j, behind its f32 at byte 4j: each chunk is loaded before
  // its (lower) store, and never overwrites a chunk not yet loaded.
  for (int64_t j = 0; j < v; j += 16) {
    const __mmask16 m = vec::tail_mask(j, v);
    __m512 d = _mm512_mul_ps(vec::load(x + j, m), kv);
    if (target >= j && target < j + 16)
      d = _mm512_mask_sub_ps(d, __mmask16(1u << (target - j)), d, _mm512_set1_ps(grad_scale));
    _mm256_mask_storeu_epi16(g + j, m, vec::to_bf16(d));
  }
}
}  // namespace

double cross_entropy_forward_backward_bf16(float* losses, float* logits, const int32_t* targets,
                                           int64_t n, int64_t v, float grad_scale) {
  check_targets(targets, n, v);
  for (int64_t r0 = 0; r0 < n;) {
    const int64_t r1 = std::min(n, r0 == 0 ? int64_t{1} : 2 * r0);
#pragma omp parallel for schedule(static)
    for (int64_t i = r0; i < r1; ++i) ce_row_bf16(losses, logits, targets, i, v, grad_scale);
    r0 = r1;
  }
  return total_loss(losses, targets, n);
}

}  // namespace strata::kernels
