// Element-wise kernels (residual adds, gradient scaling): memory-bound, so just contiguous
// parallel chunks that the compiler vectorises.
#include "kernels/cpu/kernels.h"

namespace strata::kernels {

void add(float* out, const float* a, const float* b, int64_t count) {
  // out may alias a or b: each element is read before it is written, lane by lane.
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

void add_inplace(float* __restrict y, const float* __restrict x, int64_t count) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < count; ++i) y[i] += x[i];
}

void add_bias(float* __restrict y, const float* __restrict bias, int64_t n, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float* __restrict row = y + i * c;
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) row[j] += bias[j];
  }
}

void scale_inplace(float* y, float s, int64_t count) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < count; ++i) y[i] *= s;
}

}  // namespace strata::kernels
