// Naive references of the MoE kernels: each loop follows the maths of moe.h line by line; nothing
// here is parallel, blocked or fused.
#include "kernels/cpu/moe_reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace strata::kernels::ref {

namespace {

// The row's probabilities: softmax or sigmoid of its logits.
template <typename T>
void gate_probs(MoeGating gating, T* p, const T* l, int64_t e) {
  if (gating == MoeGating::sigmoid_bias) {
    for (int64_t j = 0; j < e; ++j) p[j] = T(1) / (T(1) + std::exp(-l[j]));
    return;
  }
  const T m = *std::max_element(l, l + e);
  T sum = 0;
  for (int64_t j = 0; j < e; ++j) sum += std::exp(l[j] - m);
  for (int64_t j = 0; j < e; ++j) p[j] = std::exp(l[j] - m) / sum;
}

// dlogits of the row from dL/dprobs, through softmax or sigmoid.
template <typename T>
void gate_backward(MoeGating gating, T* dl, const T* dp, const T* p, int64_t e) {
  if (gating == MoeGating::sigmoid_bias) {
    for (int64_t j = 0; j < e; ++j) dl[j] = dp[j] * p[j] * (T(1) - p[j]);
    return;
  }
  T dot = 0;
  for (int64_t j = 0; j < e; ++j) dot += dp[j] * p[j];
  for (int64_t j = 0; j < e; ++j) dl[j] = p[j] * (dp[j] - dot);
}

template <typename T>
T logsumexp(const T* l, int64_t e) {
  const T m = *std::max_element(l, l + e);
  T sum = 0;
  for (int64_t j = 0; j < e; ++j) sum += std::exp(l[j] - m);
  return m + std::log(sum);
}

}  // namespace

template <typename T>
void moe_route_forward(MoeGating gating, int32_t* expert_idx, T* weight, T* probs, const T* logits,
                       const T* bias, int64_t n, int64_t e, int64_t k, bool normalize, T scale) {
  for (int64_t t = 0; t < n; ++t) {
    T* p = probs + t * e;
    gate_probs(gating, p, logits + t * e, e);
    std::vector<T> score(p, p + e);
    if (gating == MoeGating::sigmoid_bias && bias)
      for (int64_t j = 0; j < e; ++j) score[j] += bias[j];
    // A stable sort by descending score: equal scores keep the lower expert first.
    std::vector<int32_t> order(static_cast<size_t>(e));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return score[a] > score[b]; });
    T chosen = 0;
    for (int64_t s = 0; s < k; ++s) chosen += p[order[s]];
    for (int64_t s = 0; s < k; ++s) {
      expert_idx[t * k + s] = order[s];
      weight[t * k + s] = scale * p[order[s]] / (normalize ? chosen : T(1));
    }
  }
}

template <typename T>
void moe_route_backward(MoeGating gating, T* dlogits, const T* dweight, const T* probs,
                        const int32_t* expert_idx, int64_t n, int64_t e, int64_t k, bool normalize,
                        T scale) {
  for (int64_t t = 0; t < n; ++t) {
    const T* p = probs + t * e;
    const int32_t* idx = expert_idx + t * k;
    const T* dw = dweight + t * k;
    // weight_s = scale * p_s / S with S = sum of the chosen p (S = 1 without normalize).
    T chosen = 0, dot = 0;
    for (int64_t s = 0; s < k; ++s) {
      chosen += p[idx[s]];
      dot += dw[s] * p[idx[s]];
    }
    std::vector<T> dp(static_cast<size_t>(e), T(0));
    for (int64_t s = 0; s < k; ++s) {
      dp[idx[s]] += normalize ? scale * (dw[s] / chosen - dot / (chosen * chosen)) : scale * dw[s];
    }
    gate_backward(gating, dlogits + t * e, dp.data(), p, e);
  }
}

namespace {

// q[t,x]: probs, normalised per token for sigmoid gating (softmax rows already sum to 1).
template <typename T>
std::vector<T> balance_probs(MoeGating gating, const T* probs, int64_t n, int64_t e) {
  std::vector<T> q(probs, probs + n * e);
  if (gating != MoeGating::sigmoid_bias) return q;
  for (int64_t t = 0; t < n; ++t) {
    T sum = 0;
    for (int64_t j = 0; j < e; ++j) sum += probs[t * e + j];
    for (int64_t j = 0; j < e; ++j) q[t * e + j] = probs[t * e + j] / sum;
  }
  return q;
}

}  // namespace

template <typename T>
double moe_aux_loss_forward(MoeGating gating, const T* probs, const int64_t* tokens_per_expert,
                            int64_t n, int64_t e, int64_t k, T coeff) {
  const std::vector<T> q = balance_probs(gating, probs, n, e);
  double loss = 0;
  for (int64_t x = 0; x < e; ++x) {
    const double f = double(tokens_per_expert[x]) / double(n * k);
    double mean = 0;
    for (int64_t t = 0; t < n; ++t) mean += q[t * e + x];
    loss += f * mean / double(n);
  }
  return double(coeff) * double(e) * loss;
}

template <typename T>
void moe_aux_loss_backward(MoeGating gating, T* dlogits, const T* probs,
                           const int64_t* tokens_per_expert, int64_t n, int64_t e, int64_t k,
                           T coeff) {
  // dL/dq[t,x] = coeff * e * f_x / n, the same for every token.
  std::vector<T> g(static_cast<size_t>(e));
  for (int64_t x = 0; x < e; ++x) g[x] = coeff * T(e) * T(tokens_per_expert[x]) / T(n * k) / T(n);
  const std::vector<T> q = balance_probs(gating, probs, n, e);
  std::vector<T> dp(static_cast<size_t>(e)), dl(static_cast<size_t>(e));
  for (int64_t t = 0; t < n; ++t) {
    const T* p = probs + t * e;
    if (gating == MoeGating::sigmoid_bias) {  // through q = p / sum(p)
      T sum = 0, gq = 0;
      for (int64_t j = 0; j < e; ++j) {
        sum += p[j];
        gq += g[j] * q[t * e + j];
      }
      for (int64_t j = 0; j < e; ++j) dp[j] = (g[j] - gq) / sum;
    } else {
      dp = g;
    }
    gate_backward(gating, dl.data(), dp.data(), p, e);
    for (int64_t j = 0; j < e; ++j) dlogits[t * e + j] += dl[j];
  }
}

template <typename T>
double moe_z_loss_forward(const T* logits, int64_t n, int64_t e, T coeff) {
  double sum = 0;
  for (int64_t t = 0; t < n; ++t) {
    const double z = logsumexp(logits + t * e, e);
    sum += z * z;
  }
  return double(coeff) * sum / double(n);
}

template <typename T>
void moe_z_loss_backward(T* dlogits, const T* logits, int64_t n, int64_t e, T coeff) {
  // d(z^2)/dl_j = 2 z softmax_j.
  for (int64_t t = 0; t < n; ++t) {
    const T* l = logits + t * e;
    const T z = logsumexp(l, e);
    for (int64_t j = 0; j < e; ++j)
      dlogits[t * e + j] += coeff * T(2) * z * std::exp(l[j] - z) / T(n);
  }
}

template <typename T>
void moe_update_bias(T* bias, const int64_t* tokens_per_expert, int64_t e, T rate) {
  double mean = 0;
  for (int64_t x = 0; x < e; ++x) mean += double(tokens_per_expert[x]);
  mean /= double(e);
  for (int64_t x = 0; x < e; ++x) {
    const double load = double(tokens_per_expert[x]);
    bias[x] += rate * T(mean > load ? 1 : mean < load ? -1 : 0);
  }
}

int64_t moe_dispatch_plan(int64_t* offsets, int32_t* row_token, int32_t* row_slot,
                          int32_t* token_row, int64_t* tokens_per_expert, const int32_t* expert_idx,
                          int64_t n, int64_t e, int64_t k, int64_t capacity) {
  std::fill(token_row, token_row + n * k, -1);
  int64_t row = 0, dropped = 0;
  offsets[0] = 0;
  for (int64_t x = 0; x < e; ++x) {
    int64_t count = 0;
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t s = 0; s < k; ++s) {
        if (expert_idx[t * k + s] != x) continue;
        ++count;
        if (capacity > 0 && count > capacity) {
          ++dropped;
          continue;
        }
        row_token[row] = int32_t(t);
        if (row_slot) row_slot[row] = int32_t(s);
        token_row[t * k + s] = int32_t(row);
        ++row;
      }
    }
    tokens_per_expert[x] = count;
    offsets[x + 1] = row;
  }
  return dropped;
}

template <typename T>
void moe_permute_forward(T* xs, const T* x, const int32_t* row_token, int64_t rows, int64_t c) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < c; ++j) xs[r * c + j] = x[row_token[r] * c + j];
}

template <typename T>
void moe_permute_backward(T* dx, const T* dxs, const int32_t* token_row, int64_t n, int64_t k,
                          int64_t c) {
  std::fill(dx, dx + n * c, T(0));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t s = 0; s < k; ++s) {
      const int64_t r = token_row[t * k + s];
      if (r < 0) continue;
      for (int64_t j = 0; j < c; ++j) dx[t * c + j] += dxs[r * c + j];
    }
  }
}

template <typename T>
void moe_grouped_linear_forward(T* ys, const T* xs, const T* w, const int64_t* offsets, int64_t e,
                                int64_t in, int64_t out) {
  for (int64_t x = 0; x < e; ++x) {
    const T* wx = w + x * out * in;
    for (int64_t r = offsets[x]; r < offsets[x + 1]; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        T acc = 0;
        for (int64_t p = 0; p < in; ++p) acc += xs[r * in + p] * wx[o * in + p];
        ys[r * out + o] = acc;
      }
    }
  }
}

template <typename T>
void moe_grouped_linear_backward(T* dxs, T* dw, const T* dys, const T* xs, const T* w,
                                 const int64_t* offsets, int64_t e, int64_t in, int64_t out) {
  for (int64_t x = 0; x < e; ++x) {
    const T* wx = w + x * out * in;
    for (int64_t r = offsets[x]; r < offsets[x + 1]; ++r) {
      for (int64_t p = 0; dxs && p < in; ++p) {
        T acc = 0;
        for (int64_t o = 0; o < out; ++o) acc += dys[r * out + o] * wx[o * in + p];
        dxs[r * in + p] = acc;
      }
    }
    for (int64_t o = 0; dw && o < out; ++o) {
      for (int64_t p = 0; p < in; ++p) {
        T acc = 0;
        for (int64_t r = offsets[x]; r < offsets[x + 1]; ++r)
          acc += dys[r * out + o] * xs[r * in + p];
        dw[(x * out + o) * in + p] += acc;
      }
    }
  }
}

template <typename T>
void moe_combine_forward(T* y, const T* ys, const T* weight, const int32_t* token_row, int64_t n,
                         int64_t k, int64_t c) {
  std::fill(y, y + n * c, T(0));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t s = 0; s < k; ++s) {
      const int64_t r = token_row[t * k + s];
      if (r < 0) continue;
      for (int64_t j = 0; j < c; ++j) y[t * c + j] += weight[t * k + s] * ys[r * c + j];
    }
  }
}

template <typename T>
void moe_combine_backward(T* dys, T* dweight, const T* dy, const T* ys, const T* weight,
                          const int32_t* token_row, int64_t n, int64_t k, int64_t c) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t s = 0; s < k; ++s) {
      const int64_t r = token_row[t * k + s];
      dweight[t * k + s] = 0;
      if (r < 0) continue;
      for (int64_t j = 0; j < c; ++j) {
        dys[r * c + j] = weight[t * k + s] * dy[t * c + j];
        dweight[t * k + s] += dy[t * c + j] * ys[r * c + j];
      }
    }
  }
}

// clang-format off
#define STRATA_MOE_REF_INSTANTIATE(T)                                                              \
  template void moe_route_forward<T>(MoeGating, int32_t*, T*, T*, const T*, const T*, int64_t,     \
                                     int64_t, int64_t, bool, T);                                   \
  template void moe_route_backward<T>(MoeGating, T*, const T*, const T*, const int32_t*, int64_t,  \
                                      int64_t, int64_t, bool, T);                                  \
  template double moe_aux_loss_forward<T>(MoeGating, const T*, const int64_t*, int64_t, int64_t,   \
                                          int64_t, T);                                             \
  template void moe_aux_loss_backward<T>(MoeGating, T*, const T*, const int64_t*, int64_t, int64_t,\
                                         int64_t, T);                                              \
  template double moe_z_loss_forward<T>(const T*, int64_t, int64_t, T);                            \
  template void moe_z_loss_backward<T>(T*, const T*, int64_t, int64_t, T);                         \
  template void moe_update_bias<T>(T*, const int64_t*, int64_t, T);                                \
  template void moe_permute_forward<T>(T*, const T*, const int32_t*, int64_t, int64_t);            \
  template void moe_permute_backward<T>(T*, const T*, const int32_t*, int64_t, int64_t, int64_t);  \
  template void moe_grouped_linear_forward<T>(T*, const T*, const T*, const int64_t*, int64_t,     \
                                              int64_t, int64_t);                                   \
  template void moe_grouped_linear_backward<T>(T*, T*, const T*, const T*, const T*,               \
                                               const int64_t*, int64_t, int64_t, int64_t);         \
  template void moe_combine_forward<T>(T*, const T*, const T*, const int32_t*, int64_t, int64_t,   \
                                       int64_t);                                                   \
  template void moe_combine_backward<T>(T*, T*, const T*, const T*, const T*, const int32_t*,      \
                                        int64_t, int64_t, int64_t);
// clang-format on

STRATA_MOE_REF_INSTANTIATE(float)
STRATA_MOE_REF_INSTANTIATE(double)
#undef STRATA_MOE_REF_INSTANTIATE

}  // namespace strata::kernels::ref
