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
  return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
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

}  // namespace strata::kernels
