// Low-precision kernels: the vectorised conversions are bit-identical to the scalar
// round-to-nearest-even ones (core/dtype.h) on every kind of value; the bf16 GEMM and the
// low-precision linear layers equal the double-precision reference run on the rounded inputs, up
// to f32 accumulation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/dtype.h"
#include "kernel_test_util.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/reference.h"

namespace strata::kernels {
namespace {

using namespace testing;

std::vector<float> edge_values() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          1e5f,
                          -1e5f,
                          6.1035156e-5f,
                          5.9604645e-8f,
                          2.9802322e-8f,
                          2.98023259e-8f,
                          1e-10f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::denorm_min(),
                          1.00390625f,
                          1.01171875f,
                          3.4028235e38f};
  std::mt19937 rng(5);
  for (int i = 0; i < 20000; ++i) {  // random bit patterns: every exponent, NaN payloads
    const uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    v.push_back(f);
  }
  return v;
}

TEST(Lowp, ConversionsAreBitExact) {
  const std::vector<float> v = edge_values();
  const int64_t n = static_cast<int64_t>(v.size());
  std::vector<uint16_t> b(v.size()), h(v.size());
  to_lowp(DType::bf16, b.data(), v.data(), n);
  to_lowp(DType::f16, h.data(), v.data(), n);
  std::vector<float> b32(v.size()), h32(v.size());
  from_lowp(DType::bf16, b32.data(), b.data(), n);
  from_lowp(DType::f16, h32.data(), h.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(b[i], f32_to_bf16(v[i])) << "bf16 of " << v[i] << " (element " << i << ")";
    ASSERT_EQ(h[i], f32_to_f16(v[i])) << "f16 of " << v[i] << " (element " << i << ")";
    const float wb = bf16_to_f32(b[i]), wh = f16_to_f32(h[i]);
    ASSERT_EQ(std::memcmp(&b32[i], &wb, 4), 0) << "bf16 -> f32 of element " << i;
    ASSERT_EQ(std::memcmp(&h32[i], &wh, 4), 0) << "f16 -> f32 of element " << i;
  }
  // Spot checks of the rounding itself.
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bffu);  // rounds down to the largest finite
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00u);  // ties to even: inf
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00u);
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80u);  // 1 + 2^-8: tie, to even
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82u);  // 1 + 3*2^-8: tie, to even (up)
}

std::vector<uint16_t> rounded(DType t, const Vec& x, DVec& as_double) {
  std::vector<uint16_t> out(x.size());
  to_lowp(t, out.data(), x.data(), static_cast<int64_t>(x.size()));
  Vec back(x.size());
  from_lowp(t, back.data(), out.data(), static_cast<int64_t>(x.size()));
  as_double = to_double(back);
  return out;
}

TEST(Lowp, LinearMatchesReferenceOnRoundedInputs) {
  const int64_t n = 37, in = 53, out = 29;
  for (DType t : {DType::bf16, DType::f16}) {
    Vec x = random_vec(n * in, 1), w = random_vec(out * in, 2), bias = random_vec(out, 3);
    Vec dy = random_vec(n * out, 4);
    DVec xd, wd, dyd;
    const auto xl = rounded(t, x, xd), wl = rounded(t, w, wd);
    rounded(t, dy, dyd);
    const int64_t capacity = 7 * out;  // several row blocks
    std::vector<float> scratch(static_cast<size_t>(lowp_f32_scratch(n, in, out, capacity)));
    std::vector<uint16_t> dy_lowp(static_cast<size_t>(capacity));
    Vec y(n * out);
    DVec want(n * out);
    linear_forward_lowp(t, y.data(), xl.data(), wl.data(), bias.data(), n, in, out, scratch.data());
    ref::linear_forward<double>(want.data(), xd.data(), wd.data(), to_double(bias).data(), n, in,
                                out);
    EXPECT_TRUE(close(y.data(), want.data(), n * out, 1e-5)) << dtype_name(t);

    Vec dx(n * in), dw = random_vec(out * in, 5), db = random_vec(out, 6);
    DVec wdx(n * in), wdw = to_double(dw), wdb = to_double(db);
    linear_backward_lowp(t, dx.data(), dw.data(), db.data(), dy.data(), dy_lowp.data(), capacity,
                         xl.data(), wl.data(), n, in, out, scratch.data());
    // dx and dw from the rounded dy; the bias gradient from the f32 dy.
    ref::linear_backward<double>(wdx.data(), wdw.data(), nullptr, dyd.data(), xd.data(), wd.data(),
                                 n, in, out);
    DVec unused(n * in), unused_dw(out * in, 0.0);
    ref::linear_backward<double>(unused.data(), unused_dw.data(), wdb.data(), to_double(dy).data(),
                                 xd.data(), wd.data(), n, in, out);
    EXPECT_TRUE(close(dx.data(), wdx.data(), n * in, 1e-5)) << dtype_name(t);
    EXPECT_TRUE(close(dw.data(), wdw.data(), out * in, 1e-5)) << dtype_name(t);
    EXPECT_TRUE(close(db.data(), wdb.data(), out, 1e-5)) << dtype_name(t);
  }
}

TEST(Lowp, Bf16GemmTransposes) {
  const int64_t m = 19, n = 23, k = 41;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Vec a = random_vec(m * k, 7), b = random_vec(k * n, 8), c = random_vec(m * n, 9);
      DVec ad, bd;
      const auto al = rounded(DType::bf16, a, ad), bl = rounded(DType::bf16, b, bd);
      DVec want = to_double(c);
      ref::gemm<double>(ta, tb, m, n, k, 0.5, ad.data(), ta ? m : k, bd.data(), tb ? k : n, 1.0,
                        want.data(), n);
      gemm_bf16(ta, tb, m, n, k, 0.5f, al.data(), ta ? m : k, bl.data(), tb ? k : n, 1.0f, c.data(),
                n);
      EXPECT_TRUE(close(c.data(), want.data(), m * n, 1e-5)) << ta << tb;
    }
}

// A dimension as long as a vocabulary is cut into chunks (m, n or the accumulated k, the longest
// first): the product must not change beyond f32 reassociation, with and without beta, for every
// transpose, including a remainder chunk and leading dimensions wider than the matrix.
TEST(Lowp, Bf16GemmSplitsLongDimensions) {
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape s : {Shape{16500, 3, 5}, Shape{4, 20011, 3}, Shape{3, 5, 17000}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const int64_t lda = (ta ? s.m : s.k) + 3, ldb = (tb ? s.k : s.n) + 1, ldc = s.n + 2;
        Vec a = random_vec((ta ? s.k : s.m) * lda, 11), b = random_vec((tb ? s.n : s.k) * ldb, 12);
        Vec c = random_vec(s.m * ldc, 13);
        DVec ad, bd;
        const auto al = rounded(DType::bf16, a, ad), bl = rounded(DType::bf16, b, bd);
        DVec want = to_double(c);
        ref::gemm<double>(ta, tb, s.m, s.n, s.k, 0.5, ad.data(), lda, bd.data(), ldb, 0.75,
                          want.data(), ldc);
        gemm_bf16(ta, tb, s.m, s.n, s.k, 0.5f, al.data(), lda, bl.data(), ldb, 0.75f, c.data(),
                  ldc);
        EXPECT_TRUE(close(c.data(), want.data(), s.m * ldc, 1e-5))
            << s.m << "x" << s.n << "x" << s.k << " " << ta << tb;
      }
}

// The bf16 cross-entropy writes over its own logits in doubling row blocks: its gradient must be
// exactly the f32 kernel's rounded to bf16, and its losses exactly the f32 kernel's, for row
// counts that end inside a block and with ignored rows.
TEST(Lowp, Bf16CrossEntropyIsTheF32GradientRounded) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t n : {1, 2, 3, 37, 64}) {
    for (int64_t v : {5, 16, 1000}) {
      std::vector<float> logits(static_cast<size_t>(n * v));
      for (float& x : logits) x = normal(rng);
      std::vector<int32_t> targets(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        targets[i] = i % 7 == 3 ? -1 : static_cast<int32_t>((i * 31 + 5) % v);
      std::vector<float> ref = logits, lref(static_cast<size_t>(n)), lgot(lref.size());
      const double want =
          cross_entropy_forward_backward(lref.data(), ref.data(), targets.data(), n, v, 0.125f);
      std::vector<float> got = logits;
      const double have = cross_entropy_forward_backward_bf16(lgot.data(), got.data(),
                                                              targets.data(), n, v, 0.125f);
      EXPECT_EQ(have, want) << "n " << n << " v " << v;
      EXPECT_EQ(lgot, lref);
      const uint16_t* g = reinterpret_cast<const uint16_t*>(got.data());
      for (int64_t i = 0; i < n * v; ++i)
        ASSERT_EQ(g[i], f32_to_bf16(ref[static_cast<size_t>(i)]))
            << "n " << n << " v " << v << " element " << i;
    }
  }
}

TEST(Lowp, Bf16GeluIsTheF32GeluRounded) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (int64_t count : {1, 15, 17, 4096, 5000}) {
    std::vector<float> x(static_cast<size_t>(count)), y(x.size());
    for (float& v : x) v = normal(rng);
    gelu_forward(y.data(), x.data(), count);
    std::vector<uint16_t> got(x.size());
    gelu_forward_bf16(got.data(), x.data(), count);
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(got[static_cast<size_t>(i)], f32_to_bf16(y[static_cast<size_t>(i)])) << i;
  }
}

}  // namespace
}  // namespace strata::kernels
