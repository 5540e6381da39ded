// Mixture-of-Experts kernels (moe.h). Routing, the plan and the permutations are memory-bound
// loops over small rows (e experts) or row copies, so they are plain C++ under OpenMP rather than
// Highway kernels; the FLOPs are in the experts' GEMMs, which go to kernels::gemm once per expert.
#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/kernels.h"

namespace strata::kernels {

namespace {

// Reductions over tokens add fixed blocks of rows, then the blocks in order: the same sums at any
// thread count.
constexpr int64_t kRowBlock = 256;

int64_t row_blocks(int64_t n) {
  return (n + kRowBlock - 1) / kRowBlock;
}

// sum over t < n of row_value(t), in double.
template <typename F>
double sum_over_rows(int64_t n, const F& row_value) {
  std::vector<double> part(static_cast<size_t>(row_blocks(n)), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < row_blocks(n); ++b) {
    double s = 0.0;
    for (int64_t t = b * kRowBlock; t < std::min(n, (b + 1) * kRowBlock); ++t) s += row_value(t);
    part[b] = s;
  }
  double sum = 0.0;
  for (double s : part) sum += s;
  return sum;
}

void check_route_args(int64_t e, int64_t k) {
  STRATA_CHECK(e >= 1 && k >= 1 && k <= e, "moe routing: top-k ", k, " must be in [1, ", e,
               "] (the number of experts)");
}

// p = softmax(l) or sigmoid(l) over one row of e logits.
void gate_probs(MoeGating gating, float* p, const float* l, int64_t e) {
  if (gating == MoeGating::sigmoid_bias) {
    for (int64_t j = 0; j < e; ++j) p[j] = 1.0f / (1.0f + std::exp(-l[j]));
    return;
  }
  const float m = *std::max_element(l, l + e);
  float sum = 0.0f;
  for (int64_t j = 0; j < e; ++j) {
    p[j] = std::exp(l[j] - m);
    sum += p[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < e; ++j) p[j] *= inv;
}

// Inserts expert j with score s into a row's top list (idx, score: `count` entries sorted by
// descending score), keeping at most k. Experts arrive in increasing index, so an equal score
// never displaces an earlier one: ties go to the lower index, as the reference's stable sort.
void topk_insert(int32_t* idx, float* score, int64_t& count, int64_t k, int32_t j, float s) {
  if (count == k && !(s > score[k - 1])) return;
  int64_t pos = count < k ? count++ : k - 1;
  for (; pos > 0 && s > score[pos - 1]; --pos) {
    score[pos] = score[pos - 1];
    idx[pos] = idx[pos - 1];
  }
  score[pos] = s;
  idx[pos] = j;
}

float chosen_sum(const float* p, const int32_t* idx, int64_t k) {
  float sum = 0.0f;
  for (int64_t s = 0; s < k; ++s) sum += p[idx[s]];
  return sum;
}

}  // namespace

void moe_route_forward(MoeGating gating, int32_t* expert_idx, float* weight, float* probs,
                       const float* logits, const float* bias, int64_t n, int64_t e, int64_t k,
                       bool normalize, float scale) {
  check_route_args(e, k);
  const bool biased = gating == MoeGating::sigmoid_bias && bias != nullptr;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n; ++t) {
    float* p = probs + t * e;
    int32_t* idx = expert_idx + t * k;
    float* w = weight + t * k;
    gate_probs(gating, p, logits + t * e, e);
    // The weight row holds the chosen scores until the weights replace them.
    int64_t count = 0;
    for (int64_t j = 0; j < e; ++j)
      topk_insert(idx, w, count, k, int32_t(j), biased ? p[j] + bias[j] : p[j]);
    const float mul = normalize ? scale / chosen_sum(p, idx, k) : scale;
    for (int64_t s = 0; s < k; ++s) w[s] = p[idx[s]] * mul;
  }
}

void moe_route_backward(MoeGating gating, float* dlogits, const float* dweight, const float* probs,
                        const int32_t* expert_idx, int64_t n, int64_t e, int64_t k, bool normalize,
                        float scale) {
  check_route_args(e, k);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n; ++t) {
    const float* p = probs + t * e;
    const int32_t* idx = expert_idx + t * k;
    const float* dw = dweight + t * k;
    float* dl = dlogits + t * e;
    // weight_s = scale * p_s / S, S = the chosen probs' sum (1 without normalize):
    // dL/dp_s = scale / S * (dw_s - sum_r dw_r p_r / S).
    float mul = scale, shift = 0.0f;
    if (normalize) {
      const float sum = chosen_sum(p, idx, k);
      float dot = 0.0f;
      for (int64_t s = 0; s < k; ++s) dot += dw[s] * p[idx[s]];
      mul = scale / sum;
      shift = dot / sum;
    }
    if (gating == MoeGating::sigmoid_bias) {  // dl_j = dp_j p_j (1 - p_j), dp = 0 off the choice
      std::fill(dl, dl + e, 0.0f);
      for (int64_t s = 0; s < k; ++s) {
        const float pj = p[idx[s]];
        dl[idx[s]] = mul * (dw[s] - shift) * pj * (1.0f - pj);
      }
      continue;
    }
    // softmax: dl_j = p_j (dp_j - sum_m dp_m p_m), with dp non-zero on the chosen experts only.
    float dot = 0.0f;
    for (int64_t s = 0; s < k; ++s) dot += mul * (dw[s] - shift) * p[idx[s]];
    for (int64_t j = 0; j < e; ++j) dl[j] = -p[j] * dot;
    for (int64_t s = 0; s < k; ++s) dl[idx[s]] += p[idx[s]] * mul * (dw[s] - shift);
  }
}

namespace {

// 1 / (the row's sum) for sigmoid gating, whose balance loss normalises each token's probs; 1
// for softmax, whose rows already sum to 1.
float balance_norm(MoeGating gating, const float* p, int64_t e) {
  if (gating != MoeGating::sigmoid_bias) return 1.0f;
  float sum = 0.0f;
  for (int64_t j = 0; j < e; ++j) sum += p[j];
  return 1.0f / sum;
}

}  // namespace

double moe_aux_loss_forward(MoeGating gating, const float* probs, const int64_t* tokens_per_expert,
                            int64_t n, int64_t e, int64_t k, float coeff) {
  if (n == 0) return 0.0;
  // sum_x f_x P_x = sum_t sum_x f_x q[t,x] / n: one pass over the rows.
  std::vector<double> f(static_cast<size_t>(e));
  for (int64_t x = 0; x < e; ++x) f[x] = double(tokens_per_expert[x]) / double(n * k);
  const double sum = sum_over_rows(n, [&](int64_t t) {
    const float* p = probs + t * e;
    const double inv = balance_norm(gating, p, e);
    double s = 0.0;
    for (int64_t x = 0; x < e; ++x) s += f[x] * p[x];
    return s * inv;
  });
  return double(coeff) * double(e) * sum / double(n);
}

void moe_aux_loss_backward(MoeGating gating, float* dlogits, const float* probs,
                           const int64_t* tokens_per_expert, int64_t n, int64_t e, int64_t k,
                           float coeff) {
  if (n == 0) return;
  // dL/dq[t,x] = g_x = coeff * e * f_x / n for every token.
  std::vector<float> g(static_cast<size_t>(e));
  for (int64_t x = 0; x < e; ++x)
    g[x] =
        float(double(coeff) * double(e) * double(tokens_per_expert[x]) / double(n * k) / double(n));
  const bool sigmoid = gating == MoeGating::sigmoid_bias;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n; ++t) {
    const float* p = probs + t * e;
    float* dl = dlogits + t * e;
    const float inv = balance_norm(gating, p, e);
    float gp = 0.0f;  // sum_x g_x q_x
    for (int64_t x = 0; x < e; ++x) gp += g[x] * p[x];
    gp *= inv;
    // Softmax: dl_j = p_j (g_j - gp). Sigmoid through q = p / sum(p): dp_j = (g_j - gp) / sum,
    // dl_j = dp_j p_j (1 - p_j).
    for (int64_t j = 0; j < e; ++j)
      dl[j] += sigmoid ? (g[j] - gp) * inv * p[j] * (1.0f - p[j]) : p[j] * (g[j] - gp);
  }
}

namespace {

// logsumexp of one row, the exps in float, their sum in double.
double row_logsumexp(const float* l, int64_t e) {
  const float m = *std::max_element(l, l + e);
  double sum = 0.0;
  for (int64_t j = 0; j < e; ++j) sum += std::exp(l[j] - m);
  return double(m) + std::log(sum);
}

}  // namespace

double moe_z_loss_forward(const float* logits, int64_t n, int64_t e, float coeff) {
  if (n == 0) return 0.0;
  const double sum = sum_over_rows(n, [&](int64_t t) {
    const double z = row_logsumexp(logits + t * e, e);
    return z * z;
  });
  return double(coeff) * sum / double(n);
}

void moe_z_loss_backward(float* dlogits, const float* logits, int64_t n, int64_t e, float coeff) {
  if (n == 0) return;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n; ++t) {
    const float* l = logits + t * e;
    const double z = row_logsumexp(l, e);
    // d(z^2)/dl_j = 2 z softmax_j.
    const float mul = float(2.0 * double(coeff) * z / double(n));
    const float zf = float(z);
    for (int64_t j = 0; j < e; ++j) dlogits[t * e + j] += mul * std::exp(l[j] - zf);
  }
}

void moe_update_bias(float* bias, const int64_t* tokens_per_expert, int64_t e, float rate) {
  int64_t total = 0;
  for (int64_t x = 0; x < e; ++x) total += tokens_per_expert[x];
  // sign(mean - load) = sign(total - e * load), exactly in integers.
  for (int64_t x = 0; x < e; ++x) {
    const int64_t diff = total - e * tokens_per_expert[x];
    bias[x] += rate * float((diff > 0) - (diff < 0));
  }
}

int64_t moe_dispatch_plan(int64_t* offsets, int32_t* row_token, int32_t* row_slot,
                          int32_t* token_row, int64_t* tokens_per_expert, const int32_t* expert_idx,
                          int64_t n, int64_t e, int64_t k, int64_t capacity) {
  // Serial: O(n k) integer work, against the permutation's O(n k c) copies, and a serial counting
  // sort is stable (rows of an expert in token order) by construction.
  const int64_t assignments = n * k;
  STRATA_CHECK(assignments <= std::numeric_limits<int32_t>::max(), "moe_dispatch_plan: ", n,
               " tokens x top-", k, " overflow the int32 row indices");
  std::fill(tokens_per_expert, tokens_per_expert + e, 0);
  for (int64_t a = 0; a < assignments; ++a) {
    const int32_t x = expert_idx[a];
    STRATA_CHECK(x >= 0 && x < e, "moe_dispatch_plan: token ", a / k, " slot ", a % k,
                 " routes to expert ", x, ", not in [0, ", e, ")");
    ++tokens_per_expert[x];
  }
  offsets[0] = 0;
  for (int64_t x = 0; x < e; ++x) {
    const int64_t kept =
        capacity > 0 ? std::min(tokens_per_expert[x], capacity) : tokens_per_expert[x];
    offsets[x + 1] = offsets[x] + kept;
  }
  std::vector<int64_t> next(offsets, offsets + e);  // each expert's next free row
  int64_t dropped = 0;
  for (int64_t a = 0; a < assignments; ++a) {
    const int32_t x = expert_idx[a];
    if (next[x] == offsets[x + 1]) {  // the expert is full: a later token is dropped
      token_row[a] = -1;
      ++dropped;
      continue;
    }
    const int64_t r = next[x]++;
    row_token[r] = int32_t(a / k);
    if (row_slot) row_slot[r] = int32_t(a % k);
    token_row[a] = int32_t(r);
  }
  return dropped;
}

void moe_permute_forward(float* xs, const float* x, const int32_t* row_token, int64_t rows,
                         int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = x + int64_t(row_token[r]) * c;
    std::copy(src, src + c, xs + r * c);
  }
}

void moe_permute_backward(float* dx, const float* dxs, const int32_t* token_row, int64_t n,
                          int64_t k, int64_t c) {
  // Over tokens, each gathering its own rows in slot order: no two threads write one row.
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n; ++t) {
    float* __restrict d = dx + t * c;
    std::fill(d, d + c, 0.0f);
    for (int64_t s = 0; s < k; ++s) {
      const int64_t r = token_row[t * k + s];
      if (r < 0) continue;
      const float* __restrict src = dxs + r * c;
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) d[j] += src[j];
    }
  }
}

namespace {

// The experts' products as work items (expert, block of kBlock columns of the output), fixed by
// the shapes alone, each one single-threaded gemm call: inside the OpenMP region oneDNN and the
// tiled OpenBLAS run on the calling thread (gemm.cc), so every element is summed in the same
// order whatever the thread count (a threaded gemm is not: at the avx2 level oneDNN splits a
// small product's inner dimension differently at 2 threads), and small experts run side by side
// instead of each being a product too small to share. gemm is safe to call from several threads
// at once (Gemm.OneShapeFromManyThreadsAtOnce).
constexpr int64_t kBlock = 512;

template <typename F>
void for_each_expert_block(const int64_t* offsets, int64_t e, int64_t width, const F& fn) {
  const int64_t blocks = (width + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < e * blocks; ++item) {
    const int64_t x = item / blocks, j0 = (item % blocks) * kBlock;
    const int64_t rows = offsets[x + 1] - offsets[x];
    if (rows > 0) fn(x, offsets[x], rows, j0, std::min(kBlock, width - j0));
  }
}

}  // namespace

void moe_grouped_linear_forward(float* ys, const float* xs, const float* w, const int64_t* offsets,
                                int64_t e, int64_t in, int64_t out) {
  // ys[:, j0:j0+nj] = xs w[x][j0:j0+nj, :]^T
  for_each_expert_block(offsets, e, out,
                        [&](int64_t x, int64_t r0, int64_t m, int64_t j0, int64_t nj) {
                          gemm(false, true, m, nj, in, 1.0f, xs + r0 * in, in,
                               w + (x * out + j0) * in, in, 0.0f, ys + r0 * out + j0, out);
                        });
}

void moe_grouped_linear_backward(float* dxs, float* dw, const float* dys, const float* xs,
                                 const float* w, const int64_t* offsets, int64_t e, int64_t in,
                                 int64_t out) {
  if (dxs)  // dxs[:, i0:i0+ni] = dys w[x][:, i0:i0+ni]
    for_each_expert_block(offsets, e, in,
                          [&](int64_t x, int64_t r0, int64_t m, int64_t i0, int64_t ni) {
                            gemm(false, false, m, ni, out, 1.0f, dys + r0 * out, out,
                                 w + x * out * in + i0, in, 0.0f, dxs + r0 * in + i0, in);
                          });
  if (dw)  // dw[x][j0:j0+nj, :] += dys[:, j0:j0+nj]^T xs
    for_each_expert_block(offsets, e, out,
                          [&](int64_t x, int64_t r0, int64_t m, int64_t j0, int64_t nj) {
                            gemm(true, false, nj, in, m, 1.0f, dys + r0 * out + j0, out,
                                 xs + r0 * in, in, 1.0f, dw + (x * out + j0) * in, in);
                          });
}

void moe_combine_forward(float* y, const float* ys, const float* weight, const int32_t* token_row,
                         int64_t n, int64_t k, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n; ++t) {
    float* __restrict yt = y + t * c;
    std::fill(yt, yt + c, 0.0f);
    for (int64_t s = 0; s < k; ++s) {
      const int64_t r = token_row[t * k + s];
      if (r < 0) continue;
      const float wt = weight[t * k + s];
      const float* __restrict src = ys + r * c;
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) yt[j] += wt * src[j];
    }
  }
}

void moe_combine_backward(float* dys, float* dweight, const float* dy, const float* ys,
                          const float* weight, const int32_t* token_row, int64_t n, int64_t k,
                          int64_t c) {
  // Over tokens: every kept (token, slot) owns one row of dys, so the writes never overlap.
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n; ++t) {
    const float* __restrict g = dy + t * c;
    for (int64_t s = 0; s < k; ++s) {
      const int64_t r = token_row[t * k + s];
      if (r < 0) {
        dweight[t * k + s] = 0.0f;
        continue;
      }
      const float wt = weight[t * k + s];
      const float* __restrict src = ys + r * c;
      float* __restrict d = dys + r * c;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < c; ++j) {
        d[j] = wt * g[j];
        dot += g[j] * src[j];
      }
      dweight[t * k + s] = dot;
    }
  }
}

}  // namespace strata::kernels
