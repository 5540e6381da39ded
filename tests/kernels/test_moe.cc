// The MoE kernels (kernels/cpu/moe.h): each kernel against its naive reference run in double on
// the same float inputs; each reference backward against central finite differences in double
// (as test_finite_diff.cc: h = 1e-6, 1e-7 relative); a whole MoE FFN composed from the
// references (router, routing, plan, permute, gate_up GEMM, SwiGLU, down GEMM, combine, aux loss
// and z-loss) against finite differences; and results that do not depend on the thread count.
// Shapes have uneven expert loads, an expert without tokens, k = 1, 2 and e, capacity drops and
// sizes that are no multiple of a vector width.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/moe_reference.h"
#include "kernels/cpu/reference.h"

namespace strata::kernels {
namespace {

using namespace testing;
using IVec = std::vector<int32_t>;
using LVec = std::vector<int64_t>;

constexpr double kTol = 1e-5;  // relative, f32 kernels vs the double reference
constexpr double kFdTol = 1e-7;
constexpr MoeGating kSoftmax = MoeGating::softmax_topk;
constexpr MoeGating kSigmoid = MoeGating::sigmoid_bias;

const char* name(MoeGating g) {
  return g == kSoftmax ? "softmax_topk" : "sigmoid_bias";
}

::testing::AssertionResult near(double got, double want, double rel) {
  if (std::abs(got - want) <= rel * std::abs(want)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got << ", want " << want;
}

// close(), or for a gradient that is zero by construction (top-1 renormalised: the weight is
// the constant scale), every element within `zero_tol` of 0.
template <typename V>
::testing::AssertionResult close_or_zero(const V& got, const DVec& want, double rel,
                                         double zero_tol) {
  if (std::any_of(want.begin(), want.end(), [](double w) { return w != 0.0; }))
    return close(got, want, rel);
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(double(got[i])) <= zero_tol))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want 0";
  }
  return ::testing::AssertionSuccess();
}

// Expert choices with uneven loads: expert x's logits lean by 0.4 x, and when k < e the last
// expert is never chosen (an expert without tokens).
IVec uneven_choices(int64_t n, int64_t e, int64_t k, uint32_t seed) {
  DVec logits = random_dvec(n * e, seed);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t x = 0; x < e; ++x)
      logits[t * e + x] += x == e - 1 && k < e ? -100.0 : 0.4 * double(x);
  }
  IVec idx(n * k);
  DVec weight(n * k), probs(n * e);
  ref::moe_route_forward<double>(kSoftmax, idx.data(), weight.data(), probs.data(), logits.data(),
                                 nullptr, n, e, k, true, 1.0);
  return idx;
}

// The plan's arrays (moe.h), sized for n*k rows.
struct Plan {
  LVec offsets, tokens_per_expert;
  IVec row_token, row_slot, token_row;
  int64_t dropped = 0;
  int64_t rows() const { return offsets.back(); }
};

Plan make_plan(const IVec& idx, int64_t n, int64_t e, int64_t k, int64_t capacity,
               bool reference = true) {
  Plan p{LVec(e + 1), LVec(e), IVec(n * k), IVec(n * k), IVec(n * k)};
  auto plan = reference ? ref::moe_dispatch_plan : moe_dispatch_plan;
  p.dropped = plan(p.offsets.data(), p.row_token.data(), p.row_slot.data(), p.token_row.data(),
                   p.tokens_per_expert.data(), idx.data(), n, e, k, capacity);
  return p;
}

struct Shape {
  int64_t n, e, k, c, capacity;
};
std::ostream& operator<<(std::ostream& os, const Shape& s) {
  return os << "n=" << s.n << " e=" << s.e << " k=" << s.k << " c=" << s.c
            << " capacity=" << s.capacity;
}
// k = 1, 2, e - 1 and e; capacities that drop; one token.
const Shape kShapes[] = {{37, 6, 1, 19, 0}, {37, 6, 2, 19, 0}, {37, 6, 2, 19, 9},
                         {37, 5, 4, 19, 7}, {23, 4, 4, 19, 0}, {23, 4, 4, 19, 20},
                         {1, 3, 2, 5, 0}};

// ---- Routing ------------------------------------------------------------------------------------

struct RouteCase {
  MoeGating gating;
  bool normalize;
  int64_t k;
  float scale;
};
std::ostream& operator<<(std::ostream& os, const RouteCase& r) {
  return os << name(r.gating) << " normalize=" << r.normalize << " k=" << r.k
            << " scale=" << r.scale;
}
std::vector<RouteCase> route_cases(int64_t e) {
  std::vector<RouteCase> cases;
  for (MoeGating g : {kSoftmax, kSigmoid})
    for (bool normalize : {true, false})
      for (int64_t k : {int64_t{1}, int64_t{2}, e}) cases.push_back({g, normalize, k, 1.5f});
  return cases;
}

TEST(MoeVsReference, RouteForward) {
  const int64_t n = 37, e = 7;
  const Vec logits = random_vec(n * e, 1, -3.0f, 3.0f), bias = random_vec(e, 2, -0.3f, 0.3f);
  for (const RouteCase& rc : route_cases(e)) {
    for (bool with_bias : {true, false}) {
      const float* b = with_bias ? bias.data() : nullptr;
      IVec idx(n * rc.k), want_idx(n * rc.k);
      Vec weight(n * rc.k), probs(n * e);
      DVec want_weight(n * rc.k), want_probs(n * e);
      moe_route_forward(rc.gating, idx.data(), weight.data(), probs.data(), logits.data(), b, n, e,
                        rc.k, rc.normalize, rc.scale);
      ref::moe_route_forward<double>(rc.gating, want_idx.data(), want_weight.data(),
                                     want_probs.data(), to_double(logits).data(),
                                     with_bias ? to_double(bias).data() : nullptr, n, e, rc.k,
                                     rc.normalize, rc.scale);
      EXPECT_EQ(idx, want_idx) << rc << " bias " << with_bias;
      EXPECT_TRUE(close(probs, want_probs, kTol)) << rc << " bias " << with_bias;
      EXPECT_TRUE(close(weight, want_weight, kTol)) << rc << " bias " << with_bias;
    }
  }
}

TEST(MoeVsReference, RouteTiesGoToTheLowerExpertAndSlotsAreSortedByScore) {
  const int64_t n = 2, e = 5, k = 3;
  const Vec logits = {1, 3, 3, 0, 3,  // three equal maxima
                      2, 2, 2, 2, 2};
  const IVec want = {1, 2, 4, 0, 1, 2};
  for (MoeGating g : {kSoftmax, kSigmoid}) {
    IVec idx(n * k), ref_idx(n * k);
    Vec weight(n * k), probs(n * e), ref_weight(n * k), ref_probs(n * e);
    moe_route_forward(g, idx.data(), weight.data(), probs.data(), logits.data(), nullptr, n, e, k,
                      false, 1.0f);
    ref::moe_route_forward<float>(g, ref_idx.data(), ref_weight.data(), ref_probs.data(),
                                  logits.data(), nullptr, n, e, k, false, 1.0f);
    EXPECT_EQ(idx, want) << name(g);
    EXPECT_EQ(ref_idx, want) << name(g);
  }
  // Descending order of the slots, like torch.topk(sorted=True).
  const Vec mixed = {0.5f, -1.0f, 2.0f, 1.0f, 0.0f};
  IVec idx(k);
  Vec weight(k), probs(e);
  moe_route_forward(kSoftmax, idx.data(), weight.data(), probs.data(), mixed.data(), nullptr, 1, e,
                    k, false, 1.0f);
  EXPECT_EQ(idx, (IVec{2, 3, 0}));
  EXPECT_GT(weight[0], weight[1]);
  EXPECT_GT(weight[1], weight[2]);
}

TEST(MoeVsReference, SigmoidBiasChoosesButDoesNotWeigh) {
  const Vec logits = {2.0f, 0.0f, -1.0f}, bias = {0.0f, 0.0f, 5.0f};
  IVec idx(1);
  Vec weight(1), probs(3);
  moe_route_forward(kSigmoid, idx.data(), weight.data(), probs.data(), logits.data(), bias.data(),
                    1, 3, 1, false, 2.5f);
  EXPECT_EQ(idx[0], 2);
  EXPECT_NEAR(weight[0], 2.5 / (1.0 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(probs[0], 1.0 / (1.0 + std::exp(-2.0)), 1e-6);
  // Normalised over k = 1, the weight is the scale whatever the prob.
  moe_route_forward(kSigmoid, idx.data(), weight.data(), probs.data(), logits.data(), bias.data(),
                    1, 3, 1, true, 2.5f);
  EXPECT_FLOAT_EQ(weight[0], 2.5f);
}

TEST(MoeVsReference, RouteRejectsTopKAboveExperts) {
  IVec idx(4);
  Vec weight(4), probs(3), logits(3);
  EXPECT_THROW(moe_route_forward(kSoftmax, idx.data(), weight.data(), probs.data(), logits.data(),
                                 nullptr, 1, 3, 4, true, 1.0f),
               Error);
}

TEST(MoeVsReference, RouteBackward) {
  const int64_t n = 37, e = 7;
  const Vec logits = random_vec(n * e, 1, -3.0f, 3.0f), bias = random_vec(e, 2, -0.3f, 0.3f);
  for (const RouteCase& rc : route_cases(e)) {
    IVec idx(n * rc.k);
    Vec weight(n * rc.k), probs(n * e);
    moe_route_forward(rc.gating, idx.data(), weight.data(), probs.data(), logits.data(),
                      bias.data(), n, e, rc.k, rc.normalize, rc.scale);
    const Vec dweight = random_vec(n * rc.k, 3);
    Vec dlogits = random_vec(n * e, 4);  // overwritten
    DVec want(n * e);
    moe_route_backward(rc.gating, dlogits.data(), dweight.data(), probs.data(), idx.data(), n, e,
                       rc.k, rc.normalize, rc.scale);
    ref::moe_route_backward<double>(rc.gating, want.data(), to_double(dweight).data(),
                                    to_double(probs).data(), idx.data(), n, e, rc.k, rc.normalize,
                                    rc.scale);
    EXPECT_TRUE(close_or_zero(dlogits, want, kTol, 1e-6)) << rc;
  }
}

// ---- Balancing losses ---------------------------------------------------------------------------

// A backward that adds into its output: run again on its own gradient, it doubles it (exactly: x +
// x is exact in float).
void expect_accumulates(const Vec& grad, const std::function<void(float*)>& backward) {
  Vec twice = grad;
  backward(twice.data());
  for (size_t i = 0; i < grad.size(); ++i) ASSERT_EQ(twice[i], 2.0f * grad[i]) << "element " << i;
}

TEST(MoeVsReference, AuxLossAndZLoss) {
  const int64_t n = 300, e = 7, k = 2;  // more tokens than one block of the kernels' sums (256)
  const Vec logits = random_vec(n * e, 1, -3.0f, 3.0f);
  const float coeff = 0.37f;
  for (MoeGating g : {kSoftmax, kSigmoid}) {
    IVec idx(n * k);
    Vec weight(n * k), probs(n * e);
    moe_route_forward(g, idx.data(), weight.data(), probs.data(), logits.data(), nullptr, n, e, k,
                      true, 1.0f);
    const Plan plan = make_plan(idx, n, e, k, 0);
    const double got =
        moe_aux_loss_forward(g, probs.data(), plan.tokens_per_expert.data(), n, e, k, coeff);
    const double want = ref::moe_aux_loss_forward<double>(
        g, to_double(probs).data(), plan.tokens_per_expert.data(), n, e, k, coeff);
    EXPECT_TRUE(near(got, want, kTol)) << name(g);
    // Even loads (f = 1/e) and equal probs p: coeff * e * p for softmax (p = 1/e in a real softmax
    // row, giving coeff), coeff for sigmoid, whose probs are normalised per token first.
    const LVec even(e, 2);  // e tokens, k = 2
    const Vec equal(e * e, 0.25f);
    EXPECT_TRUE(near(moe_aux_loss_forward(g, equal.data(), even.data(), e, e, 2, coeff),
                     g == kSoftmax ? coeff * e * 0.25 : coeff, 1e-6))
        << name(g);

    Vec dlogits(n * e, 0.0f);
    DVec wdlogits(n * e, 0.0);
    moe_aux_loss_backward(g, dlogits.data(), probs.data(), plan.tokens_per_expert.data(), n, e, k,
                          coeff);
    ref::moe_aux_loss_backward<double>(g, wdlogits.data(), to_double(probs).data(),
                                       plan.tokens_per_expert.data(), n, e, k, coeff);
    EXPECT_TRUE(close(dlogits, wdlogits, kTol)) << name(g);
    expect_accumulates(dlogits, [&](float* d) {
      moe_aux_loss_backward(g, d, probs.data(), plan.tokens_per_expert.data(), n, e, k, coeff);
    });
  }

  const double z = moe_z_loss_forward(logits.data(), n, e, coeff);
  EXPECT_TRUE(
      near(z, ref::moe_z_loss_forward<double>(to_double(logits).data(), n, e, coeff), kTol));
  Vec dlogits(n * e, 0.0f);
  DVec wdlogits(n * e, 0.0);
  moe_z_loss_backward(dlogits.data(), logits.data(), n, e, coeff);
  ref::moe_z_loss_backward<double>(wdlogits.data(), to_double(logits).data(), n, e, coeff);
  EXPECT_TRUE(close(dlogits, wdlogits, kTol));
  expect_accumulates(dlogits,
                     [&](float* d) { moe_z_loss_backward(d, logits.data(), n, e, coeff); });
}

TEST(MoeVsReference, UpdateBias) {
  // Mean load 4: underloaded experts go up, overloaded down, those at the mean stay.
  const LVec load = {5, 3, 4, 4, 0, 8};
  Vec bias = {0.5f, 0.5f, 0.5f, -0.5f, 0.0f, 0.0f};
  Vec want = bias;
  moe_update_bias(bias.data(), load.data(), 6, 0.25f);
  ref::moe_update_bias<float>(want.data(), load.data(), 6, 0.25f);
  EXPECT_EQ(bias, want);
  EXPECT_EQ(bias, (Vec{0.25f, 0.75f, 0.5f, -0.5f, 0.25f, -0.25f}));
  // A mean that is no integer: 7 / 3.
  const LVec odd = {2, 3, 2};
  Vec b2(3, 0.0f), w2(3, 0.0f);
  moe_update_bias(b2.data(), odd.data(), 3, 1.0f);
  ref::moe_update_bias<float>(w2.data(), odd.data(), 3, 1.0f);
  EXPECT_EQ(b2, w2);
  EXPECT_EQ(b2, (Vec{1.0f, -1.0f, 1.0f}));
}

// ---- Dispatch plan ------------------------------------------------------------------------------

TEST(MoeVsReference, DispatchPlan) {
  for (const Shape& s : kShapes) {
    const IVec idx = uneven_choices(s.n, s.e, s.k, 1);
    const Plan got = make_plan(idx, s.n, s.e, s.k, s.capacity, false);
    const Plan want = make_plan(idx, s.n, s.e, s.k, s.capacity, true);
    EXPECT_EQ(got.offsets, want.offsets) << s;
    EXPECT_EQ(got.tokens_per_expert, want.tokens_per_expert) << s;
    EXPECT_EQ(got.token_row, want.token_row) << s;
    EXPECT_EQ(got.dropped, want.dropped) << s;
    const int64_t rows = got.rows();
    EXPECT_EQ(IVec(got.row_token.begin(), got.row_token.begin() + rows),
              IVec(want.row_token.begin(), want.row_token.begin() + rows))
        << s;
    EXPECT_EQ(IVec(got.row_slot.begin(), got.row_slot.begin() + rows),
              IVec(want.row_slot.begin(), want.row_slot.begin() + rows))
        << s;
    // The invariants, on the kernel's plan.
    EXPECT_EQ(rows + got.dropped, s.n * s.k) << s;
    int64_t total = 0;
    for (int64_t x = 0; x < s.e; ++x) {
      total += got.tokens_per_expert[x];
      const int64_t kept = got.offsets[x + 1] - got.offsets[x];
      EXPECT_EQ(kept, s.capacity > 0 ? std::min(got.tokens_per_expert[x], s.capacity)
                                     : got.tokens_per_expert[x])
          << s;
      for (int64_t r = got.offsets[x] + 1; r < got.offsets[x + 1]; ++r)
        EXPECT_LT(got.row_token[r - 1], got.row_token[r]) << s << " expert " << x;
    }
    EXPECT_EQ(total, s.n * s.k) << s;
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_EQ(got.token_row[got.row_token[r] * s.k + got.row_slot[r]], r) << s;
  }
}

TEST(MoeVsReference, DispatchPlanShapesCoverTheCases) {
  // The shapes above include an expert without tokens, uneven loads and capacity drops.
  bool empty_expert = false, drops = false;
  for (const Shape& s : kShapes) {
    const Plan p = make_plan(uneven_choices(s.n, s.e, s.k, 1), s.n, s.e, s.k, s.capacity, false);
    for (int64_t x = 0; x < s.e; ++x) empty_expert |= p.tokens_per_expert[x] == 0 && s.n > 1;
    drops |= p.dropped > 0;
  }
  EXPECT_TRUE(empty_expert);
  EXPECT_TRUE(drops);
}

TEST(MoeVsReference, DispatchPlanRejectsABadExpert) {
  const IVec idx = {0, 3};
  LVec offsets(4), tpe(3);
  IVec row_token(2), token_row(2);
  EXPECT_THROW(moe_dispatch_plan(offsets.data(), row_token.data(), nullptr, token_row.data(),
                                 tpe.data(), idx.data(), 1, 3, 2, 0),
               Error);
}

// ---- Permute, grouped linear, combine -----------------------------------------------------------

TEST(MoeVsReference, Permute) {
  for (const Shape& s : kShapes) {
    const Plan plan = make_plan(uneven_choices(s.n, s.e, s.k, 1), s.n, s.e, s.k, s.capacity);
    const int64_t rows = plan.rows();
    const Vec x = random_vec(s.n * s.c, 2), dxs = random_vec(rows * s.c, 3);
    Vec xs(rows * s.c), dx = random_vec(s.n * s.c, 4);  // dx overwritten
    DVec want_xs(rows * s.c), want_dx(s.n * s.c);
    moe_permute_forward(xs.data(), x.data(), plan.row_token.data(), rows, s.c);
    ref::moe_permute_forward<double>(want_xs.data(), to_double(x).data(), plan.row_token.data(),
                                     rows, s.c);
    EXPECT_TRUE(close(xs, want_xs, 0.0)) << s;  // a copy
    moe_permute_backward(dx.data(), dxs.data(), plan.token_row.data(), s.n, s.k, s.c);
    ref::moe_permute_backward<double>(want_dx.data(), to_double(dxs).data(), plan.token_row.data(),
                                      s.n, s.k, s.c);
    EXPECT_TRUE(close(dx, want_dx, kTol)) << s;
  }
}

TEST(MoeVsReference, GroupedLinear) {
  // Beside kShapes, many rows per expert (the libraries' blocked paths).
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back({300, 3, 2, 19, 0});
  const int64_t out = 13;
  for (const Shape& s : shapes) {
    const int64_t in = s.c;
    const Plan plan = make_plan(uneven_choices(s.n, s.e, s.k, 1), s.n, s.e, s.k, s.capacity);
    const int64_t rows = plan.rows();
    const Vec xs = random_vec(rows * in, 2), w = random_vec(s.e * out * in, 3),
              dys = random_vec(rows * out, 4);
    const DVec xs_d = to_double(xs), w_d = to_double(w), dys_d = to_double(dys);
    Vec ys(rows * out);
    DVec want_ys(rows * out);
    moe_grouped_linear_forward(ys.data(), xs.data(), w.data(), plan.offsets.data(), s.e, in, out);
    ref::moe_grouped_linear_forward<double>(want_ys.data(), xs_d.data(), w_d.data(),
                                            plan.offsets.data(), s.e, in, out);
    EXPECT_TRUE(close(ys, want_ys, kTol)) << s;

    Vec dxs = random_vec(rows * in, 5), dw = random_vec(s.e * out * in, 6);  // dw accumulates
    DVec want_dxs(rows * in), want_dw = to_double(dw);
    const Vec dw0 = dw;
    moe_grouped_linear_backward(dxs.data(), dw.data(), dys.data(), xs.data(), w.data(),
                                plan.offsets.data(), s.e, in, out);
    ref::moe_grouped_linear_backward<double>(want_dxs.data(), want_dw.data(), dys_d.data(),
                                             xs_d.data(), w_d.data(), plan.offsets.data(), s.e, in,
                                             out);
    EXPECT_TRUE(close(dxs, want_dxs, kTol)) << s;
    EXPECT_TRUE(close(dw, want_dw, kTol)) << s;
    // Either gradient may be skipped.
    Vec dw2 = dw0, dxs2(rows * in);
    moe_grouped_linear_backward(nullptr, dw2.data(), dys.data(), xs.data(), w.data(),
                                plan.offsets.data(), s.e, in, out);
    EXPECT_EQ(dw2, dw) << s;
    moe_grouped_linear_backward(dxs2.data(), nullptr, dys.data(), xs.data(), w.data(),
                                plan.offsets.data(), s.e, in, out);
    EXPECT_EQ(dxs2, dxs) << s;
  }
}

TEST(MoeVsReference, Combine) {
  for (const Shape& s : kShapes) {
    const Plan plan = make_plan(uneven_choices(s.n, s.e, s.k, 1), s.n, s.e, s.k, s.capacity);
    const int64_t rows = plan.rows();
    const Vec ys = random_vec(rows * s.c, 2), weight = random_vec(s.n * s.k, 3, 0.0f, 1.0f),
              dy = random_vec(s.n * s.c, 4);
    Vec y = random_vec(s.n * s.c, 5);  // overwritten
    DVec want_y(s.n * s.c);
    moe_combine_forward(y.data(), ys.data(), weight.data(), plan.token_row.data(), s.n, s.k, s.c);
    ref::moe_combine_forward<double>(want_y.data(), to_double(ys).data(), to_double(weight).data(),
                                     plan.token_row.data(), s.n, s.k, s.c);
    EXPECT_TRUE(close(y, want_y, kTol)) << s;

    Vec dys = random_vec(rows * s.c, 6), dweight = random_vec(s.n * s.k, 7);  // overwritten
    DVec want_dys(rows * s.c), want_dweight(s.n * s.k);
    moe_combine_backward(dys.data(), dweight.data(), dy.data(), ys.data(), weight.data(),
                         plan.token_row.data(), s.n, s.k, s.c);
    ref::moe_combine_backward<double>(want_dys.data(), want_dweight.data(), to_double(dy).data(),
                                      to_double(ys).data(), to_double(weight).data(),
                                      plan.token_row.data(), s.n, s.k, s.c);
    EXPECT_TRUE(close(dys, want_dys, kTol)) << s;
    EXPECT_TRUE(close(dweight, want_dweight, kTol)) << s;
    for (int64_t a = 0; a < s.n * s.k; ++a) {
      if (plan.token_row[a] < 0) {
        EXPECT_EQ(dweight[a], 0.0f) << s;
      }
    }
  }
}

// ---- Finite differences of the reference backwards ----------------------------------------------

TEST(MoeFiniteDiff, Route) {
  const int64_t n = 4, e = 5;
  const DVec bias = random_dvec(e, 2, -0.3, 0.3);
  for (const RouteCase& rc : route_cases(e)) {
    DVec logits = random_dvec(n * e, 1, -2.0, 2.0);
    const DVec r = random_dvec(n * rc.k, 3);
    IVec idx(n * rc.k);
    DVec weight(n * rc.k), probs(n * e);
    auto loss = [&] {
      ref::moe_route_forward<double>(rc.gating, idx.data(), weight.data(), probs.data(),
                                     logits.data(), bias.data(), n, e, rc.k, rc.normalize,
                                     rc.scale);
      return dot(weight, r);
    };
    loss();
    DVec dlogits(n * e);
    ref::moe_route_backward<double>(rc.gating, dlogits.data(), r.data(), probs.data(), idx.data(),
                                    n, e, rc.k, rc.normalize, rc.scale);
    const DVec numeric = numeric_grad(logits, loss);
    // Top-1 renormalised: the weight is the scale whatever the logits, no gradient at all.
    if (rc.normalize && rc.k == 1) {
      EXPECT_TRUE(close_or_zero(dlogits, DVec(n * e, 0.0), kFdTol, 1e-12)) << rc;
      EXPECT_TRUE(close_or_zero(numeric, DVec(n * e, 0.0), kFdTol, 1e-8)) << rc;
      continue;
    }
    EXPECT_TRUE(close(dlogits, numeric, kFdTol)) << rc;
  }
}

TEST(MoeFiniteDiff, AuxLossAndZLoss) {
  const int64_t n = 5, e = 6, k = 2;
  for (MoeGating g : {kSoftmax, kSigmoid}) {
    DVec logits = random_dvec(n * e, 1, -2.0, 2.0);
    IVec idx(n * k);
    DVec weight(n * k), probs(n * e);
    auto route = [&] {
      ref::moe_route_forward<double>(g, idx.data(), weight.data(), probs.data(), logits.data(),
                                     nullptr, n, e, k, true, 1.0);
    };
    route();
    const LVec load = make_plan(idx, n, e, k, 0).tokens_per_expert;  // f: a constant
    auto aux = [&] {
      route();
      return ref::moe_aux_loss_forward<double>(g, probs.data(), load.data(), n, e, k, 0.7);
    };
    route();
    DVec daux(n * e, 0.0);
    ref::moe_aux_loss_backward<double>(g, daux.data(), probs.data(), load.data(), n, e, k, 0.7);
    EXPECT_TRUE(close(daux, numeric_grad(logits, aux), kFdTol)) << name(g);
  }
  DVec logits = random_dvec(n * e, 2, -2.0, 2.0);
  auto z = [&] { return ref::moe_z_loss_forward<double>(logits.data(), n, e, 0.3); };
  DVec dz(n * e, 0.0);
  ref::moe_z_loss_backward<double>(dz.data(), logits.data(), n, e, 0.3);
  EXPECT_TRUE(close(dz, numeric_grad(logits, z), kFdTol));
}

TEST(MoeFiniteDiff, PermuteGroupedLinearCombine) {
  const Shape s{9, 4, 2, 5, 4};  // drops; expert 3 without tokens
  const int64_t out = 3;
  const Plan plan = make_plan(uneven_choices(s.n, s.e, s.k, 1), s.n, s.e, s.k, s.capacity);
  ASSERT_GT(plan.dropped, 0);
  const int64_t rows = plan.rows();
  {
    DVec x = random_dvec(s.n * s.c, 1);
    const DVec r = random_dvec(rows * s.c, 2);
    auto loss = [&] {
      DVec xs(rows * s.c);
      ref::moe_permute_forward<double>(xs.data(), x.data(), plan.row_token.data(), rows, s.c);
      return dot(xs, r);
    };
    DVec dx(s.n * s.c);
    ref::moe_permute_backward<double>(dx.data(), r.data(), plan.token_row.data(), s.n, s.k, s.c);
    EXPECT_TRUE(close(dx, numeric_grad(x, loss), kFdTol));
  }
  {
    DVec xs = random_dvec(rows * s.c, 3), w = random_dvec(s.e * out * s.c, 4);
    const DVec r = random_dvec(rows * out, 5);
    auto loss = [&] {
      DVec ys(rows * out);
      ref::moe_grouped_linear_forward<double>(ys.data(), xs.data(), w.data(), plan.offsets.data(),
                                              s.e, s.c, out);
      return dot(ys, r);
    };
    DVec dxs(rows * s.c), dw(s.e * out * s.c, 0.0);
    ref::moe_grouped_linear_backward<double>(dxs.data(), dw.data(), r.data(), xs.data(), w.data(),
                                             plan.offsets.data(), s.e, s.c, out);
    EXPECT_TRUE(close(dxs, numeric_grad(xs, loss), kFdTol));
    EXPECT_TRUE(close(dw, numeric_grad(w, loss), kFdTol));
  }
  {
    DVec ys = random_dvec(rows * s.c, 6), weight = random_dvec(s.n * s.k, 7);
    const DVec r = random_dvec(s.n * s.c, 8);
    auto loss = [&] {
      DVec y(s.n * s.c);
      ref::moe_combine_forward<double>(y.data(), ys.data(), weight.data(), plan.token_row.data(),
                                       s.n, s.k, s.c);
      return dot(y, r);
    };
    DVec dys(rows * s.c), dweight(s.n * s.k);
    ref::moe_combine_backward<double>(dys.data(), dweight.data(), r.data(), ys.data(),
                                      weight.data(), plan.token_row.data(), s.n, s.k, s.c);
    EXPECT_TRUE(close(dys, numeric_grad(ys, loss), kFdTol));
    EXPECT_TRUE(close(dweight, numeric_grad(weight, loss), kFdTol));
  }
}

// ---- A whole MoE FFN from the references --------------------------------------------------------

struct FfnConfig {
  MoeGating gating;
  bool normalize;
  double scale;
  int64_t e, k, capacity;
  double aux_coeff, z_coeff;
};
std::ostream& operator<<(std::ostream& os, const FfnConfig& f) {
  return os << name(f.gating) << " normalize=" << f.normalize << " scale=" << f.scale
            << " e=" << f.e << " k=" << f.k << " capacity=" << f.capacity;
}

// y = combine(down(swiglu(gate_up(permute(x))))) with the router linear -> route -> plan in front;
// loss = <y, r> + aux loss + z-loss. Parameters: x[n,c] (the input), router[e,c], bias[e]
// (sigmoid_bias only; no gradient), w1[e,2f,c], w2[e,c,f].
struct Ffn {
  FfnConfig cfg;
  int64_t n = 7, c = 6, f = 5;
  DVec x, router, bias, w1, w2, r;
  // The forward's activations, kept for the backward.
  DVec logits, probs, weight, xs, gate_up, h, ys, y;
  IVec idx;
  Plan plan;

  explicit Ffn(const FfnConfig& config) : cfg(config) {
    const int64_t e = cfg.e;
    x = random_dvec(n * c, 1, 0.2, 1.0);
    router = random_dvec(e * c, 2);
    if (cfg.k < e)  // the last expert's logits far below the others': it gets no token
      for (int64_t j = 0; j < c; ++j) router[(e - 1) * c + j] = -2.0 - 0.1 * double(j);
    bias = random_dvec(e, 3, -0.1, 0.1);
    w1 = random_dvec(e * 2 * f * c, 4);
    w2 = random_dvec(e * c * f, 5);
    r = random_dvec(n * c, 6);
  }

  double loss() {
    const int64_t e = cfg.e, k = cfg.k;
    logits.assign(n * e, 0.0);
    ref::linear_forward<double>(logits.data(), x.data(), router.data(), nullptr, n, c, e);
    idx.assign(n * k, 0);
    weight.assign(n * k, 0.0);
    probs.assign(n * e, 0.0);
    ref::moe_route_forward<double>(cfg.gating, idx.data(), weight.data(), probs.data(),
                                   logits.data(), bias.data(), n, e, k, cfg.normalize, cfg.scale);
    plan = make_plan(idx, n, e, k, cfg.capacity);
    const int64_t rows = plan.rows();
    xs.assign(rows * c, 0.0);
    ref::moe_permute_forward<double>(xs.data(), x.data(), plan.row_token.data(), rows, c);
    gate_up.assign(rows * 2 * f, 0.0);
    ref::moe_grouped_linear_forward<double>(gate_up.data(), xs.data(), w1.data(),
                                            plan.offsets.data(), e, c, 2 * f);
    h.assign(rows * f, 0.0);
    ref::swiglu_forward<double>(h.data(), gate_up.data(), rows, f);
    ys.assign(rows * c, 0.0);
    ref::moe_grouped_linear_forward<double>(ys.data(), h.data(), w2.data(), plan.offsets.data(), e,
                                            f, c);
    y.assign(n * c, 0.0);
    ref::moe_combine_forward<double>(y.data(), ys.data(), weight.data(), plan.token_row.data(), n,
                                     k, c);
    return dot(y, r) +
           ref::moe_aux_loss_forward<double>(
               cfg.gating, probs.data(), plan.tokens_per_expert.data(), n, e, k, cfg.aux_coeff) +
           ref::moe_z_loss_forward<double>(logits.data(), n, e, cfg.z_coeff);
  }

  struct Grads {
    DVec x, router, w1, w2;
  };
  // After loss(): the gradients of every parameter, by the reference backwards.
  Grads backward() const {
    const int64_t e = cfg.e, k = cfg.k, rows = plan.rows();
    Grads g{DVec(n * c), DVec(e * c, 0.0), DVec(e * 2 * f * c, 0.0), DVec(e * c * f, 0.0)};
    DVec dys(rows * c), dweight(n * k), dh(rows * f), dgate_up(rows * 2 * f), dxs(rows * c);
    ref::moe_combine_backward<double>(dys.data(), dweight.data(), r.data(), ys.data(),
                                      weight.data(), plan.token_row.data(), n, k, c);
    ref::moe_grouped_linear_backward<double>(dh.data(), g.w2.data(), dys.data(), h.data(),
                                             w2.data(), plan.offsets.data(), e, f, c);
    ref::swiglu_backward<double>(dgate_up.data(), gate_up.data(), dh.data(), rows, f);
    ref::moe_grouped_linear_backward<double>(dxs.data(), g.w1.data(), dgate_up.data(), xs.data(),
                                             w1.data(), plan.offsets.data(), e, c, 2 * f);
    ref::moe_permute_backward<double>(g.x.data(), dxs.data(), plan.token_row.data(), n, k, c);
    DVec dlogits(n * e), dx_router(n * c);
    ref::moe_route_backward<double>(cfg.gating, dlogits.data(), dweight.data(), probs.data(),
                                    idx.data(), n, e, k, cfg.normalize, cfg.scale);
    ref::moe_aux_loss_backward<double>(cfg.gating, dlogits.data(), probs.data(),
                                       plan.tokens_per_expert.data(), n, e, k, cfg.aux_coeff);
    ref::moe_z_loss_backward<double>(dlogits.data(), logits.data(), n, e, cfg.z_coeff);
    ref::linear_backward<double>(dx_router.data(), g.router.data(), nullptr, dlogits.data(),
                                 x.data(), router.data(), n, c, e);
    for (int64_t i = 0; i < n * c; ++i) g.x[i] += dx_router[i];
    return g;
  }
};

TEST(MoeFiniteDiff, WholeFfn) {
  const FfnConfig configs[] = {
      {kSoftmax, true, 1.0, 4, 2, 0, 0.1, 0.05},   // Mixtral: top-2 of softmax, renormalised
      {kSoftmax, false, 1.0, 4, 1, 2, 0.1, 0.05},  // Switch: top-1, capacity 2 drops tokens
      {kSoftmax, false, 1.0, 3, 3, 0, 0.1, 0.05},  // k = e
      {kSoftmax, false, 1.0, 4, 2, 0, 0.1, 0.05},  // Qwen3-MoE without norm_topk_prob
      {kSigmoid, true, 2.5, 5, 2, 3, 0.1, 0.05},   // DeepSeek-V3, with capacity drops
  };
  for (const FfnConfig& cfg : configs) {
    Ffn ffn(cfg);
    const double l0 = ffn.loss();
    const Ffn::Grads g = ffn.backward();
    if (cfg.k < cfg.e) {
      EXPECT_EQ(ffn.plan.tokens_per_expert[cfg.e - 1], 0) << cfg;
    }
    if (cfg.capacity > 0) {
      EXPECT_GT(ffn.plan.dropped, 0) << cfg;
    }
    auto loss = [&] { return ffn.loss(); };
    EXPECT_TRUE(close(g.x, numeric_grad(ffn.x, loss), kFdTol)) << cfg;
    EXPECT_TRUE(close(g.router, numeric_grad(ffn.router, loss), kFdTol)) << cfg;
    EXPECT_TRUE(close(g.w1, numeric_grad(ffn.w1, loss), kFdTol)) << cfg;
    EXPECT_TRUE(close(g.w2, numeric_grad(ffn.w2, loss), kFdTol)) << cfg;
    // The bias only chooses: the loss does not move with it.
    const DVec dbias = numeric_grad(ffn.bias, loss);
    EXPECT_EQ(dbias, DVec(cfg.e, 0.0)) << cfg;
    EXPECT_EQ(ffn.loss(), l0) << cfg;  // the parameters restored
  }
}

// ---- The kernels at 1, 2 and 3 threads ----------------------------------------------------------

// The router's logits, from the dense linear layer: computed once, at one thread, since a threaded
// GEMM of this small shape is not bitwise the same at every thread count at the avx2 level (not an
// MoE kernel; GemmTest covers the GEMM).
Vec router_logits(int64_t n, int64_t e, int64_t c) {
  const Vec x = random_vec(n * c, 1), router = random_vec(e * c, 2);
  Vec logits(n * e);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  linear_forward(logits.data(), x.data(), router.data(), nullptr, n, c, e);
  omp_set_num_threads(saved);
  return logits;
}

// Every output and gradient of the kernels on one MoE FFN pass (no SwiGLU: not an MoE kernel).
std::vector<Vec> kernel_pass(int64_t e, int64_t capacity, const Vec& logits) {
  const int64_t n = 300, k = 2, c = 24, hidden = 10;  // n: two blocks of the loss sums
  const Vec x = random_vec(n * c, 1), bias = random_vec(e, 3), w1 = random_vec(e * hidden * c, 4),
            w2 = random_vec(e * c * hidden, 5), dy = random_vec(n * c, 6);
  Vec weight(n * k), probs(n * e);
  IVec idx(n * k);
  moe_route_forward(kSigmoid, idx.data(), weight.data(), probs.data(), logits.data(), bias.data(),
                    n, e, k, true, 2.5f);
  const Plan plan = make_plan(idx, n, e, k, capacity, false);
  const int64_t rows = plan.rows();
  Vec xs(rows * c), h(rows * hidden), ys(rows * c), y(n * c);
  moe_permute_forward(xs.data(), x.data(), plan.row_token.data(), rows, c);
  moe_grouped_linear_forward(h.data(), xs.data(), w1.data(), plan.offsets.data(), e, c, hidden);
  moe_grouped_linear_forward(ys.data(), h.data(), w2.data(), plan.offsets.data(), e, hidden, c);
  moe_combine_forward(y.data(), ys.data(), weight.data(), plan.token_row.data(), n, k, c);
  Vec dys(rows * c), dweight(n * k), dh(rows * hidden), dxs(rows * c), dx(n * c), dlogits(n * e);
  Vec dw1(w1.size(), 0.0f), dw2(w2.size(), 0.0f);
  moe_combine_backward(dys.data(), dweight.data(), dy.data(), ys.data(), weight.data(),
                       plan.token_row.data(), n, k, c);
  moe_grouped_linear_backward(dh.data(), dw2.data(), dys.data(), h.data(), w2.data(),
                              plan.offsets.data(), e, hidden, c);
  moe_grouped_linear_backward(dxs.data(), dw1.data(), dh.data(), xs.data(), w1.data(),
                              plan.offsets.data(), e, c, hidden);
  moe_permute_backward(dx.data(), dxs.data(), plan.token_row.data(), n, k, c);
  moe_route_backward(kSigmoid, dlogits.data(), dweight.data(), probs.data(), idx.data(), n, e, k,
                     true, 2.5f);
  moe_aux_loss_backward(kSigmoid, dlogits.data(), probs.data(), plan.tokens_per_expert.data(), n, e,
                        k, 0.01f);
  moe_z_loss_backward(dlogits.data(), logits.data(), n, e, 0.001f);
  const Vec losses = {float(moe_aux_loss_forward(kSigmoid, probs.data(),
                                                 plan.tokens_per_expert.data(), n, e, k, 0.01f)),
                      float(moe_z_loss_forward(logits.data(), n, e, 0.001f))};
  return {weight, probs, y, dys, dweight, dh, dxs, dx, dlogits, dw1, dw2, losses};
}

TEST(MoeProperties, ResultsDoNotDependOnThreadCount) {
  const int saved = omp_get_max_threads();
  // e = 6: ~100 rows per expert; e = 40: ~15, several experts with the same number of rows (the
  // same GEMM shape). Capacity 80 drops rows at e = 6.
  for (int64_t e : {int64_t{6}, int64_t{40}}) {
    for (int64_t capacity : {int64_t{0}, int64_t{80}}) {
      const Vec logits = router_logits(300, e, 24);
      omp_set_num_threads(1);
      const std::vector<Vec> one = kernel_pass(e, capacity, logits);
      for (int threads : {2, 3}) {
        omp_set_num_threads(threads);
        const std::vector<Vec> more = kernel_pass(e, capacity, logits);
        for (size_t i = 0; i < one.size(); ++i)
          EXPECT_EQ(more[i], one[i]) << "output " << i << ", e " << e << ", capacity " << capacity
                                     << ", " << threads << " threads";
      }
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace strata::kernels
