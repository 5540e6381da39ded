// Fused softmax + cross-entropy over the vocabulary, rows in parallel. A row of V = 50304 logits
// is 200 KB and stays in L2 across the passes: (1) max, (2) exp(x - max) and its sum (written
// back in place when the gradient is wanted, so pass 3 needs no second exp), (3) gradient
// (softmax - onehot) * grad_scale. The sum of exps is accumulated in double: it adds up to 50k
// positive terms, and the loss is its log (see RowSumExp).
// Compiled once per kernel level (Highway's foreach_target.h); kernels.h's functions dispatch.
// Across levels the row sums differ by rounding only (their lanes are added in another order).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/cross_entropy.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/vec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace strata::kernels::HWY_NAMESPACE {
namespace {

float RowMax(const float* x, int64_t v) {
  return MaxN(DF(), x, v);
}

// Sum of exp(x - maxv) in double; if out is not null, exp(x - maxv) is stored there.
// Lanes accumulate 256 / Lanes terms (each <= 1) in float, then move to double: the conversions
// cost a fraction of what converting every step would, and the float partial sums lose nothing
// visible.
double RowSumExp(const float* x, float* out, int64_t v, float maxv) {
  const DF d;
  const hn::Rebind<double, hn::Half<DF>> dd;  // half the lanes, as doubles
  const int64_t N = int64_t(hn::Lanes(d));
  const VF mv = hn::Set(d, maxv);
  auto s0 = hn::Zero(dd), s1 = hn::Zero(dd);
  for (int64_t j0 = 0; j0 < v; j0 += 256) {
    const int64_t end = std::min(v, j0 + 256);
    VF acc = hn::Zero(d);
    for (int64_t j = j0; j < end; j += N) {
      const size_t left = size_t(end - j);
      VF e = Exp(d, hn::Sub(LoadN(d, x + j, left), mv));
      if (left < size_t(N)) e = hn::IfThenElseZero(hn::FirstN(d, left), e);
      if (out) StoreN(e, d, out + j, left);
      acc = hn::Add(acc, e);
    }
    s0 = hn::Add(s0, hn::PromoteTo(dd, hn::LowerHalf(hn::Half<DF>(), acc)));
    s1 = hn::Add(s1, hn::PromoteTo(dd, hn::UpperHalf(hn::Half<DF>(), acc)));
  }
  return hn::GetLane(hn::SumOfLanes(dd, hn::Add(s0, s1)));
}

// -log softmax(x)[target] with the row's max and sum of exps; `exps` (x itself, or null) receives
// exp(x - max). Returns the sum of exps.
double RowLoss(const float* x, float* exps, int64_t v, int32_t target, float* loss) {
  const float x_target = x[target];  // read before exps (possibly x) is written
  const float maxv = RowMax(x, v);
  const double sum = RowSumExp(x, exps, v, maxv);
  *loss = float(std::log(sum) + double(maxv) - double(x_target));
  return sum;
}

}  // namespace

// The loss of one row (target >= 0); the row is only read.
float CeRowLoss(const float* x, int64_t v, int32_t target) {
  float loss = 0.0f;
  RowLoss(x, nullptr, v, target, &loss);
  return loss;
}

// One row of cross_entropy_forward_backward: loss, then (softmax - onehot) * grad_scale over the
// row in place.
void CeRowF32(float* losses, float* logits, const int32_t* targets, int64_t i, int64_t v,
              float grad_scale) {
  float* x = logits + i * v;
  const int32_t target = targets[i];
  if (target < 0) {
    losses[i] = 0.0f;
    std::fill(x, x + v, 0.0f);
    return;
  }
  const double sum = RowLoss(x, x, v, target, &losses[i]);  // exp(x - max) kept in place
  const DF d;
  const int64_t N = int64_t(hn::Lanes(d));
  const VF kv = hn::Set(d, float(double(grad_scale) / sum));
  for (int64_t j = 0; j < v; j += N) {
    const size_t left = size_t(v - j);
    StoreN(hn::Mul(LoadN(d, x + j, left), kv), d, x + j, left);
  }
  x[target] -= grad_scale;
}

// One row of cross_entropy_forward_backward_bf16 (see below): the gradient written as bf16 over
// the row's own storage, element j at byte 2j, behind its f32 at byte 4j: each vector is loaded
// before its (lower) store, and never overwrites a vector not yet loaded.
void CeRowBf16(float* losses, float* logits, const int32_t* targets, int64_t i, int64_t v,
               float grad_scale) {
  float* x = logits + i * v;
  uint16_t* g = reinterpret_cast<uint16_t*>(logits) + i * v;
  const int32_t target = targets[i];
  if (target < 0) {
    losses[i] = 0.0f;
    std::fill(g, g + v, uint16_t{0});
    return;
  }
  const double sum = RowLoss(x, x, v, target, &losses[i]);  // exp(x - max) kept in place
  const DF d;
  const hn::RebindToSigned<DF> di;
  const int64_t N = int64_t(hn::Lanes(d));
  const VF kv = hn::Set(d, float(double(grad_scale) / sum));
  const VF gs = hn::Set(d, grad_scale);
  for (int64_t j = 0; j < v; j += N) {
    const size_t left = size_t(v - j);
    VF dv = hn::Mul(LoadN(d, x + j, left), kv);
    if (target >= j && target < j + N) {
      const auto at = hn::Eq(hn::Iota(di, int32_t(j)), hn::Set(di, target));
      dv = hn::IfThenElse(hn::RebindMask(d, at), hn::Sub(dv, gs), dv);
    }
    StoreBf16(d, dv, g + j, left);
  }
}

}  // namespace strata::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "core/error.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/kernels.h"

namespace strata::kernels {

HWY_EXPORT(CeRowLoss);
HWY_EXPORT(CeRowBf16);
HWY_EXPORT(CeRowF32);

namespace {

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
  auto* row_loss = &STRATA_DISPATCH(CeRowLoss);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    losses[i] = targets[i] < 0 ? 0.0f : row_loss(logits + i * v, v, targets[i]);
  return total_loss(losses, targets, n);
}

double cross_entropy_forward_backward(float* losses, float* logits, const int32_t* targets,
                                      int64_t n, int64_t v, float grad_scale) {
  check_targets(targets, n, v);
  auto* row_f32 = &STRATA_DISPATCH(CeRowF32);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) row_f32(losses, logits, targets, i, v, grad_scale);
  return total_loss(losses, targets, n);
}

// The bf16 form writes the gradient as bf16 over the logits' own storage (row i at element i * v
// of the uint16_t view). Row i's bf16 row lands on f32 elements [i v / 2, (i + 1) v / 2), i.e.
// inside rows <= i / 2: inside the row itself for row 0 (written behind the read position, so
// safe), and in rows already finished for every later row as long as rows [r0, r1) run only after
// all rows < r0 and r1 <= 2 r0. So rows go in blocks of doubling size: {0}, {1}, {2, 3},
// {4..7}, ..., each block in parallel. The f32 gradient and its separate rounding pass (read f32,
// write bf16: twice for a tied head) disappear.
double cross_entropy_forward_backward_bf16(float* losses, float* logits, const int32_t* targets,
                                           int64_t n, int64_t v, float grad_scale) {
  check_targets(targets, n, v);
  auto* row_bf16 = &STRATA_DISPATCH(CeRowBf16);
  for (int64_t r0 = 0; r0 < n;) {
    const int64_t r1 = std::min(n, r0 == 0 ? int64_t{1} : 2 * r0);
#pragma omp parallel for schedule(static)
    for (int64_t i = r0; i < r1; ++i) row_bf16(losses, logits, targets, i, v, grad_scale);
    r0 = r1;
  }
  return total_loss(losses, targets, n);
}

}  // namespace strata::kernels
#endif  // HWY_ONCE
