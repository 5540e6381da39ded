// Token (+ learned position) embedding. Forward gathers rows; backward scatters them back, which
// is where determinism needs care: two rows with the same token add into the same dwte row, so
// the work is split over channel slices (every thread sees every token, in order, and owns its
// columns) instead of over tokens (which would need float atomics or per-thread copies).
#include <omp.h>

#include <algorithm>

#include "kernels/cpu/kernels.h"

namespace strata::kernels {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t b, int64_t t, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < b * t; ++i) {
    float* __restrict o = out + i * c;
    const float* __restrict e = wte + static_cast<int64_t>(tokens[i]) * c;
    if (wpe) {
      const float* __restrict p = wpe + (i % t) * c;
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) o[j] = e[j] + p[j];
    } else {
      std::copy(e, e + c, o);
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t b, int64_t t, int64_t c) {
  // One slice per thread (a multiple of 16 floats): each thread walks the token list once and
  // touches one contiguous run of every dwte row it visits. The slicing only decides who adds
  // which column, never the order of the additions, so results do not depend on it.
  const int64_t threads = omp_get_max_threads();
  const int64_t width16 = ((c + threads - 1) / threads + 15) / 16 * 16;
  const int64_t slice = std::max<int64_t>(width16, 16);
  const int64_t slices = (c + slice - 1) / slice;
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t j0 = s * slice, width = std::min(slice, c - j0);
    for (int64_t i = 0; i < b * t; ++i) {
      float* __restrict dst = dwte + static_cast<int64_t>(tokens[i]) * c + j0;
      const float* __restrict src = dout + i * c + j0;
#pragma omp simd
      for (int64_t j = 0; j < width; ++j) dst[j] += src[j];
    }
    if (dwpe) {
      for (int64_t ti = 0; ti < t; ++ti) {
        float* __restrict dst = dwpe + ti * c + j0;
        for (int64_t bi = 0; bi < b; ++bi) {
          const float* __restrict src = dout + (bi * t + ti) * c + j0;
#pragma omp simd
          for (int64_t j = 0; j < width; ++j) dst[j] += src[j];
        }
      }
    }
  }
}

}  // namespace strata::kernels
