// Naive reference of attention_ranges.h (attention with an explicit key range per query row):
// single-threaded loops over the full score row, written for obviousness, templated on the float
// type so that the tests compare the tiled f32 kernel against a double answer and check the
// backward against finite differences in double. Same layouts, strides and semantics as
// attention_ranges.h (empty range: out = 0, lse = -inf; the backward accumulates and takes the
// final out and lse).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace strata::kernels::ref {

template <typename T>
void attention_ranges_forward(T* out, T* lse, const T* q, int64_t ldq, const T* k, const T* v,
                              int64_t ldk, const int32_t* kbeg, const int32_t* kend, int64_t b,
                              int64_t tq, int64_t tk, int64_t nh, int64_t nkv, int64_t hd) {
  const int64_t group = nh / nkv;
  const T scale = T(1) / std::sqrt(T(hd));
  std::vector<T> p(static_cast<size_t>(std::max<int64_t>(tk, 1)));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t row = bi * tq + i;
        const int64_t j0 = std::max<int64_t>(kbeg[row], 0), j1 = std::min<int64_t>(kend[row], tk);
        const T* qi = q + row * ldq + h * hd;
        T* o = out + row * nh * hd + h * hd;
        T* l = lse + (bi * nh + h) * tq + i;
        std::fill(o, o + hd, T(0));
        if (j0 >= j1) {
          *l = -INFINITY;
          continue;
        }
        T mx = -INFINITY;
        for (int64_t j = j0; j < j1; ++j) {
          const T* kj = k + (bi * tk + j) * ldk + g * hd;
          T s = 0;
          for (int64_t d = 0; d < hd; ++d) s += qi[d] * kj[d];
          p[size_t(j)] = s * scale;
          mx = std::max(mx, p[size_t(j)]);
        }
        T sum = 0;
        for (int64_t j = j0; j < j1; ++j) sum += std::exp(p[size_t(j)] - mx);
        for (int64_t j = j0; j < j1; ++j) {
          const T pj = std::exp(p[size_t(j)] - mx) / sum;
          const T* vj = v + (bi * tk + j) * ldk + g * hd;
          for (int64_t d = 0; d < hd; ++d) o[d] += pj * vj[d];
        }
        *l = mx + std::log(sum);
      }
    }
  }
}

// dq += , dk += , dv += with P = exp(S scale - lse) and D_i = dout_i . out_i from the given
// (final) out and lse.
template <typename T>
void attention_ranges_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, int64_t ldq,
                               const T* k, const T* v, int64_t ldk, const T* out, const T* lse,
                               const int32_t* kbeg, const int32_t* kend, int64_t b, int64_t tq,
                               int64_t tk, int64_t nh, int64_t nkv, int64_t hd) {
  const int64_t group = nh / nkv;
  const T scale = T(1) / std::sqrt(T(hd));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t row = bi * tq + i;
        const int64_t j0 = std::max<int64_t>(kbeg[row], 0), j1 = std::min<int64_t>(kend[row], tk);
        const T* qi = q + row * ldq + h * hd;
        T* dqi = dq + row * ldq + h * hd;
        const T* dor = dout + row * nh * hd + h * hd;
        const T* o = out + row * nh * hd + h * hd;
        const T l = lse[(bi * nh + h) * tq + i];
        T dd = 0;  // D_i = dout_i . out_i
        for (int64_t d = 0; d < hd; ++d) dd += dor[d] * o[d];
        for (int64_t j = j0; j < j1; ++j) {
          const T* kj = k + (bi * tk + j) * ldk + g * hd;
          const T* vj = v + (bi * tk + j) * ldk + g * hd;
          T* dkj = dk + (bi * tk + j) * ldk + g * hd;
          T* dvj = dv + (bi * tk + j) * ldk + g * hd;
          T s = 0, dp = 0;
          for (int64_t d = 0; d < hd; ++d) {
            s += qi[d] * kj[d];
            dp += dor[d] * vj[d];
          }
          const T p = std::exp(s * scale - l);
          const T ds = p * (dp - dd) * scale;
          for (int64_t d = 0; d < hd; ++d) {
            dvj[d] += p * dor[d];
            dqi[d] += ds * kj[d];
            dkj[d] += ds * qi[d];
          }
        }
      }
    }
  }
}

}  // namespace strata::kernels::ref
