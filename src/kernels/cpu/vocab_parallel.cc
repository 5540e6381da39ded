// Kernels of tensor parallelism's vocabulary split: the embedding lookup and its scatter-back
// restricted to a block of vocabulary rows, learned positions for a block of rows (sequence
// parallelism), and the three local steps of vocabulary-parallel cross-entropy. Determinism as in
// embedding.cc: scatters are split over channel slices, never over rows.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/kernels.h"

namespace strata::kernels {

namespace {
// Column slices (multiples of 16 floats) for deterministic scatter-adds: one per thread.
int64_t slice_width(int64_t c) {
  const int64_t threads = omp_get_max_threads();
  return std::max<int64_t>(((c + threads - 1) / threads + 15) / 16 * 16, 16);
}
}  // namespace

void embedding_range_forward(float* out, const int32_t* tokens, const float* wte_rows,
                             int64_t vocab_begin, int64_t vocab_count, int64_t n, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_begin;
    float* o = out + i * c;
    if (row >= 0 && row < vocab_count)
      std::copy(wte_rows + row * c, wte_rows + (row + 1) * c, o);
    else
      std::fill(o, o + c, 0.0f);
  }
}

void embedding_range_backward(float* dwte_rows, const float* dout, const int32_t* tokens,
                              int64_t vocab_begin, int64_t vocab_count, int64_t n, int64_t c) {
  const int64_t slice = slice_width(c), slices = (c + slice - 1) / slice;
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t j0 = s * slice, width = std::min(slice, c - j0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_begin;
      if (row < 0 || row >= vocab_count) continue;
      float* __restrict dst = dwte_rows + row * c + j0;
      const float* __restrict src = dout + i * c + j0;
#pragma omp simd
      for (int64_t j = 0; j < width; ++j) dst[j] += src[j];
    }
  }
}

void positions_add_forward(float* out, const float* wpe, int64_t first_row, int64_t n, int64_t t,
                           int64_t c, const int32_t* positions) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float* __restrict o = out + i * c;
    const int64_t pos = positions ? positions[first_row + i] : (first_row + i) % t;
    const float* __restrict p = wpe + pos * c;
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) o[j] += p[j];
  }
}

void positions_add_backward(float* dwpe, const float* dout, int64_t first_row, int64_t n, int64_t t,
                            int64_t c, const int32_t* positions) {
  const int64_t slice = slice_width(c), slices = (c + slice - 1) / slice;
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t j0 = s * slice, width = std::min(slice, c - j0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = positions ? positions[first_row + i] : (first_row + i) % t;
      float* __restrict dst = dwpe + pos * c + j0;
      const float* __restrict src = dout + i * c + j0;
#pragma omp simd
      for (int64_t j = 0; j < width; ++j) dst[j] += src[j];
    }
  }
}

void vocab_parallel_ce_max(float* row_max, const float* logits, int64_t n, int64_t v_local) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* x = logits + i * v_local;
    row_max[i] = *std::max_element(x, x + v_local);
  }
}

void vocab_parallel_ce_sums(float* sum_exp, float* target_logit, const float* logits,
                            const float* row_max, const int32_t* targets, int64_t n,
                            int64_t v_local, int64_t vocab_begin) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* x = logits + i * v_local;
    double s = 0.0;  // up to v_local positive terms: accumulate in double (cross_entropy.cc)
    for (int64_t j = 0; j < v_local; ++j) s += std::exp(static_cast<double>(x[j] - row_max[i]));
    sum_exp[i] = static_cast<float>(s);
    const int64_t local = static_cast<int64_t>(targets[i]) - vocab_begin;
    target_logit[i] = targets[i] >= 0 && local >= 0 && local < v_local ? x[local] : 0.0f;
  }
}

double vocab_parallel_ce_finish(float* losses, float* logits, const float* row_max,
                                const float* sum_exp, const float* target_logit,
                                const int32_t* targets, int64_t n, int64_t v_local,
                                int64_t vocab_begin, bool backward, float grad_scale) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float* x = logits + i * v_local;
    if (targets[i] < 0) {
      losses[i] = 0.0f;
      if (backward) std::fill(x, x + v_local, 0.0f);
      continue;
    }
    losses[i] = static_cast<float>(std::log(static_cast<double>(sum_exp[i])) + row_max[i] -
                                   target_logit[i]);
    if (!backward) continue;
    const float inv = grad_scale / sum_exp[i];
    for (int64_t j = 0; j < v_local; ++j) x[j] = std::exp(x[j] - row_max[i]) * inv;
    const int64_t local = static_cast<int64_t>(targets[i]) - vocab_begin;
    if (local >= 0 && local < v_local) x[local] -= grad_scale;
  }
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i)
    if (targets[i] >= 0) total += static_cast<double>(losses[i]);
  return total;
}

}  // namespace strata::kernels
