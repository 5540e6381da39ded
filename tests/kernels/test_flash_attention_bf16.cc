// bf16 flash attention (flash_attention_forward_bf16 / _backward_bf16) against the f32 flash
// kernel run on the same bf16 values widened to f32: the two differ only by the bf16 roundings of
// P (forward), and of dO, P and dS (backward), each a relative error of at most 2^-9 per element
// (round to nearest even, 8 significant bits). Plus: the comparison rejects deliberately wrong
// inputs, bitwise determinism across thread counts, scratch independent of t.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "kernel_test_util.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/isa.h"

namespace strata::kernels {
namespace {

using testing::random_vec;
using testing::Vec;
using U16 = std::vector<uint16_t>;

struct Shape {
  int64_t b, t, nh, nkv, hd;
  int64_t ld() const { return (nh + 2 * nkv) * hd; }
};

std::string name(const Shape& s) {
  return "b=" + std::to_string(s.b) + " t=" + std::to_string(s.t) + " nh=" + std::to_string(s.nh) +
         " nkv=" + std::to_string(s.nkv) + " hd=" + std::to_string(s.hd);
}

// f32 -> bf16, round to nearest even (inputs are finite).
uint16_t to_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t h) {
  return std::bit_cast<float>(uint32_t(h) << 16);
}

struct Result {
  Vec out, lse, dqkv;
};

Result run_bf16(const Shape& s, const U16& qkv16, const Vec& dout) {
  Result r;
  r.out.assign(size_t(s.b * s.t * s.nh * s.hd), NAN);
  r.lse.assign(size_t(s.b * s.nh * s.t), NAN);
  r.dqkv.assign(qkv16.size(), NAN);  // overwritten entirely
  flash_attention_forward_bf16(r.out.data(), r.lse.data(), qkv16.data(), s.b, s.t, s.nh, s.nkv,
                               s.hd);
  Vec scratch(size_t(flash_attention_backward_bf16_scratch(s.b, s.t, s.nh, s.nkv, s.hd)), NAN);
  flash_attention_backward_bf16(r.dqkv.data(), scratch.data(), dout.data(), qkv16.data(),
                                r.out.data(), r.lse.data(), s.b, s.t, s.nh, s.nkv, s.hd);
  return r;
}

Result run_f32(const Shape& s, const Vec& qkv, const Vec& dout) {
  Result r;
  r.out.assign(size_t(s.b * s.t * s.nh * s.hd), 0.0f);
  r.lse.assign(size_t(s.b * s.nh * s.t), 0.0f);
  r.dqkv.assign(qkv.size(), 0.0f);
  flash_attention_forward(r.out.data(), r.lse.data(), qkv.data(), s.b, s.t, s.nh, s.nkv, s.hd);
  Vec scratch(size_t(flash_attention_backward_scratch(s.b, s.t, s.nh, s.nkv, s.hd)));
  flash_attention_backward(r.dqkv.data(), scratch.data(), dout.data(), qkv.data(), r.out.data(),
                           r.lse.data(), s.b, s.t, s.nh, s.nkv, s.hd);
  return r;
}

// The columns [c0, c1) of every row of a [rows, ld] tensor.
Vec columns(const Vec& x, int64_t ld, int64_t c0, int64_t c1) {
  Vec y;
  for (size_t r = 0; r < x.size() / size_t(ld); ++r) {
    y.insert(y.end(), x.begin() + int64_t(r) * ld + c0, x.begin() + int64_t(r) * ld + c1);
  }
  return y;
}

struct Errors {
  double max_err = 0, mean_err = 0, max_ref = 0, mean_ref = 0;
};

Errors errors(const Vec& got, const Vec& ref) {
  Errors e;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::abs(double(got[i]) - double(ref[i]));
    e.max_err = std::isnan(d) ? INFINITY : std::max(e.max_err, d);
    e.mean_err += d;
    e.max_ref = std::max(e.max_ref, std::abs(double(ref[i])));
    e.mean_ref += std::abs(double(ref[i]));
  }
  e.mean_err /= double(ref.size());
  e.mean_ref /= double(ref.size());
  return e;
}

// Tolerances from the roundings (u = 2^-9, the bf16 unit roundoff):
//  out = sum_j P_j v_j / l with only P rounded: |err| <= u * sum_j P_j |v_j| / l <= u max|v|
//    (a bound, not an estimate); checked against 2u max|v| for the f32 noise on top.
//  lse: the same f32 scores (bf16 x bf16 products are exact in f32), only the summation order
//    differs: 1e-5 relative.
//  dq, dk, dv: sums of products with one or two rounded factors (P or dS, and dO; dS also
//    inherits the rounding of dO inside dP), each term off by at most ~3u relative; cancellation
//    in dS = P (dP - D) makes a per-element bound depend on the data, so per tensor:
//    max err <= 2e-2 max|ref| (~10u), and mean err <= 4u mean|ref| so that a systematic error
//    of a few percent spread evenly does not hide under the max bound.
constexpr double kU = 1.0 / 512.0;
constexpr double kGradMax = 2e-2, kGradMean = 4 * kU;

::testing::AssertionResult compare(const Shape& s, const Result& got, const Result& ref,
                                   double max_v, Errors* worst = nullptr) {
  const Errors eo = errors(got.out, ref.out);
  if (!(eo.max_err <= 2 * kU * max_v)) {
    return ::testing::AssertionFailure() << "out: max err " << eo.max_err << ", max|v| " << max_v;
  }
  for (size_t i = 0; i < ref.lse.size(); ++i) {
    if (!(std::abs(got.lse[i] - ref.lse[i]) <= 1e-5 * (1.0 + std::abs(ref.lse[i])))) {
      return ::testing::AssertionFailure()
             << "lse " << i << ": got " << got.lse[i] << ", want " << ref.lse[i];
    }
  }
  const int64_t ld = s.ld(), nq = s.nh * s.hd, nk = s.nkv * s.hd;
  const char* names[] = {"dq", "dk", "dv"};
  const int64_t c0[] = {0, nq, nq + nk}, c1[] = {nq, nq + nk, ld};
  for (int p = 0; p < 3; ++p) {
    const Errors e =
        errors(columns(got.dqkv, ld, c0[p], c1[p]), columns(ref.dqkv, ld, c0[p], c1[p]));
    if (worst != nullptr) {
      worst->max_err = std::max(worst->max_err, e.max_err / (e.max_ref + 1e-3));
      worst->mean_err = std::max(worst->mean_err, e.mean_err / (e.mean_ref + 1e-3));
    }
    // The floors: f32 noise where a gradient is ~0 by cancellation (dq at t = 1).
    if (!(e.max_err <= kGradMax * e.max_ref + 1e-5) ||
        !(e.mean_err <= kGradMean * e.mean_ref + 1e-6)) {
      return ::testing::AssertionFailure()
             << names[p] << ": max err " << e.max_err << " (max|ref| " << e.max_ref
             << "), mean err " << e.mean_err << " (mean|ref| " << e.mean_ref << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

struct Inputs {
  U16 qkv16;
  Vec qkv, dout;
  double max_v = 0;
};

Inputs make_inputs(const Shape& s, uint32_t seed) {
  Inputs in;
  const Vec x = random_vec(s.b * s.t * s.ld(), seed, -2.0f, 2.0f);
  for (float v : x) in.qkv16.push_back(to_bf16(v));
  for (uint16_t h : in.qkv16) in.qkv.push_back(from_bf16(h));
  in.dout = random_vec(s.b * s.t * s.nh * s.hd, seed + 1);
  for (size_t i = 0; i < in.qkv.size(); ++i) {
    if (int64_t(i) % s.ld() >= (s.nh + s.nkv) * s.hd) {
      in.max_v = std::max(in.max_v, double(std::abs(in.qkv[i])));
    }
  }
  return in;
}

TEST(FlashAttentionBf16, MatchesF32KernelOnTheSameBf16Inputs) {
  Errors worst;
  double worst_out = 0;
  for (int64_t t : {1, 7, 65, 130, 300}) {
    for (int64_t hd : {1, 15, 16, 64, 80}) {
      for (const auto& [nh, nkv] : {std::pair<int64_t, int64_t>{4, 2}, {3, 3}}) {
        const Shape s{2, t, nh, nkv, hd};
        SCOPED_TRACE(name(s));
        const Inputs in = make_inputs(s, uint32_t(7 + t + hd + nkv));
        const Result got = run_bf16(s, in.qkv16, in.dout);
        const Result ref = run_f32(s, in.qkv, in.dout);
        EXPECT_TRUE(compare(s, got, ref, in.max_v, &worst));
        worst_out = std::max(worst_out, errors(got.out, ref.out).max_err / in.max_v);
      }
    }
  }
  std::printf(
      "worst: out max err / max|v| %.3g; grads max err / max|ref| %.3g, mean err / "
      "mean|ref| %.3g\n",
      worst_out, worst.max_err, worst.mean_err);
}

// The comparison above must fail for a kernel that reads the wrong data or scales a gradient.
TEST(FlashAttentionBf16, ComparisonRejectsWrongResults) {
  const Shape s{2, 130, 4, 2, 64};
  const Inputs in = make_inputs(s, 3);
  const Result ref = run_f32(s, in.qkv, in.dout);
  ASSERT_TRUE(compare(s, run_bf16(s, in.qkv16, in.dout), ref, in.max_v));
  // k heads swapped.
  U16 swapped = in.qkv16;
  for (int64_t r = 0; r < s.b * s.t; ++r) {
    uint16_t* k = swapped.data() + r * s.ld() + s.nh * s.hd;
    std::swap_ranges(k, k + s.hd, k + s.hd);
  }
  EXPECT_FALSE(compare(s, run_bf16(s, swapped, in.dout), ref, in.max_v));
  // v heads swapped.
  swapped = in.qkv16;
  for (int64_t r = 0; r < s.b * s.t; ++r) {
    uint16_t* v = swapped.data() + r * s.ld() + (s.nh + s.nkv) * s.hd;
    std::swap_ranges(v, v + s.hd, v + s.hd);
  }
  EXPECT_FALSE(compare(s, run_bf16(s, swapped, in.dout), ref, in.max_v));
  // One value of q off (a single row of scores wrong).
  U16 one = in.qkv16;
  one[size_t(77 * s.ld() + 5)] = to_bf16(from_bf16(one[size_t(77 * s.ld() + 5)]) + 1.5f);
  EXPECT_FALSE(compare(s, run_bf16(s, one, in.dout), ref, in.max_v));
  // Gradients 2.5% too large everywhere (dout scaled): caught by the mean-error check.
  Vec scaled = in.dout;
  for (float& x : scaled) x *= 1.025f;
  EXPECT_FALSE(compare(s, run_bf16(s, in.qkv16, scaled), ref, in.max_v));
}

Result run_portable(const Shape& s, const U16& qkv16, const Vec& dout) {
  Result r;
  r.out.assign(size_t(s.b * s.t * s.nh * s.hd), NAN);
  r.lse.assign(size_t(s.b * s.nh * s.t), NAN);
  r.dqkv.assign(qkv16.size(), NAN);
  portable_flash_attention_forward_bf16(r.out.data(), r.lse.data(), qkv16.data(), s.b, s.t, s.nh,
                                        s.nkv, s.hd);
  Vec scratch(size_t(portable_flash_attention_backward_bf16_scratch(s.b, s.t, s.nh, s.nkv, s.hd)),
              NAN);
  portable_flash_attention_backward_bf16(r.dqkv.data(), scratch.data(), dout.data(), qkv16.data(),
                                         r.out.data(), r.lse.data(), s.b, s.t, s.nh, s.nkv, s.hd);
  return r;
}

// At the avx512bf16 level the dispatch runs the hand-tiled vdpbf16ps kernel; its reference is the
// portable bf16 kernel, which rounds the same operands to bf16 at the same points: the two may
// differ only by the rounding of f32 sums (vdpbf16ps adds pairs of products), far below the bf16
// rounding the test above allows for. At other levels the two are the same code.
TEST(FlashAttentionBf16, LevelKernelMatchesThePortableKernel) {
  std::printf("kernel level: %s\n", isa::describe(isa::active()).c_str());
  double worst_out = 0, worst_grad = 0;
  for (const Shape& s : {Shape{2, 130, 4, 2, 64}, Shape{1, 65, 3, 3, 15}, Shape{1, 300, 4, 1, 80},
                         Shape{1, 7, 2, 2, 128}}) {
    SCOPED_TRACE(name(s));
    const Inputs in = make_inputs(s, 11);
    const Result got = run_bf16(s, in.qkv16, in.dout);
    const Result ref = run_portable(s, in.qkv16, in.dout);
    const Errors eo = errors(got.out, ref.out), el = errors(got.lse, ref.lse);
    const Errors eg = errors(got.dqkv, ref.dqkv);
    worst_out = std::max(worst_out, eo.max_err / eo.max_ref);
    worst_grad = std::max(worst_grad, eg.max_err / eg.max_ref);
    EXPECT_LT(eo.max_err, 1e-4 * eo.max_ref);
    EXPECT_LT(el.max_err, 1e-4 * el.max_ref);
    EXPECT_LT(eg.max_err, 1e-4 * eg.max_ref);
    EXPECT_LT(eg.mean_err, 1e-4 * eg.mean_ref);
  }
  std::printf("vs portable: out max err / max|ref| %.3g, grads %.3g\n", worst_out, worst_grad);
}

TEST(FlashAttentionBf16, DeterministicAcrossThreadCounts) {
  const int saved = omp_get_max_threads();
  for (const Shape& s :
       {Shape{2, 300, 4, 2, 64}, Shape{1, 129, 3, 1, 15}, Shape{1, 257, 4, 4, 80}}) {
    SCOPED_TRACE(name(s));
    const Inputs in = make_inputs(s, 5);
    omp_set_num_threads(1);
    const Result one = run_bf16(s, in.qkv16, in.dout);
    omp_set_num_threads(2);
    const Result two = run_bf16(s, in.qkv16, in.dout);
    omp_set_num_threads(3);
    const Result three = run_bf16(s, in.qkv16, in.dout);
    for (const Result* r : {&two, &three}) {
      EXPECT_EQ(0, std::memcmp(one.out.data(), r->out.data(), one.out.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(one.lse.data(), r->lse.data(), one.lse.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(one.dqkv.data(), r->dqkv.data(), one.dqkv.size() * sizeof(float)));
    }
  }
  omp_set_num_threads(saved);
}

TEST(FlashAttentionBf16, BackwardScratchDoesNotGrowWithT) {
  const int64_t threads = omp_get_max_threads();
  for (int64_t hd : {1, 64, 256}) {
    const int64_t small = flash_attention_backward_bf16_scratch(1, 512, 12, 12, hd);
    const int64_t large = flash_attention_backward_bf16_scratch(1, 8192, 12, 12, hd);
    EXPECT_EQ(small, large);
    EXPECT_LT(large, threads * 16 * 64 * std::max<int64_t>(hd, 64));  // a few tiles per thread
  }
}

}  // namespace
}  // namespace strata::kernels
