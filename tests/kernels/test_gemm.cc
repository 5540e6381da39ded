// GEMM: every backend, all four transpose combinations, alpha/beta, leading dimensions wider
// than the matrices (strided views), and C's padding left untouched.
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/cpu/gemm_backends.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/reference.h"

namespace strata::kernels {
namespace {

using namespace testing;
using GemmFn = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                        const float*, int64_t, float, float*, int64_t);

struct Case {
  bool ta, tb;
  float alpha, beta;
  int64_t pad;  // extra floats in every leading dimension
};

void check_gemm(GemmFn fn, const Case& cs) {
  const int64_t m = 37, n = 53, k = 29;
  const int64_t a_rows = cs.ta ? k : m, a_cols = cs.ta ? m : k;
  const int64_t b_rows = cs.tb ? n : k, b_cols = cs.tb ? k : n;
  const int64_t lda = a_cols + cs.pad, ldb = b_cols + cs.pad, ldc = n + cs.pad;
  Vec a = random_vec(a_rows * lda, 1), b = random_vec(b_rows * ldb, 2);
  Vec c = random_vec(m * ldc, 3);
  if (cs.beta == 0.0f) {
    // beta = 0 must overwrite C without reading it (BLAS semantics): garbage in, no NaN out.
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = std::numeric_limits<float>::quiet_NaN();
  }
  const Vec c0 = c;
  DVec want = to_double(c);
  const DVec ad = to_double(a), bd = to_double(b);
  ref::gemm<double>(cs.ta, cs.tb, m, n, k, cs.alpha, ad.data(), lda, bd.data(), ldb, cs.beta,
                    want.data(), ldc);
  fn(cs.ta, cs.tb, m, n, k, cs.alpha, a.data(), lda, b.data(), ldb, cs.beta, c.data(), ldc);
  for (int64_t i = 0; i < m; ++i) {
    EXPECT_TRUE(close(c.data() + i * ldc, want.data() + i * ldc, n, 2e-6)) << "row " << i;
    for (int64_t j = n; j < ldc; ++j) {
      EXPECT_EQ(c[i * ldc + j], c0[i * ldc + j]) << "padding of C was written at " << i << "," << j;
    }
  }
}

class GemmTest : public ::testing::TestWithParam<int> {};

GemmFn backend_fn(int which) {
  switch (which) {
    case 0:
      return gemm;
    case 1:
      return detail::gemm_dnnl_sgemm;
    default:
      return detail::gemm_dnnl_matmul;
  }
}

TEST_P(GemmTest, AllTransposesAlphaBetaAndStrides) {
  const GemmFn fn = backend_fn(GetParam());
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (const Case& cs : {Case{ta, tb, 1.0f, 0.0f, 0}, Case{ta, tb, 0.7f, 0.3f, 5},
                             Case{ta, tb, -1.5f, 1.0f, 16}, Case{ta, tb, 1.0f, 0.0f, 3}}) {
        SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb << " alpha=" << cs.alpha
                                          << " beta=" << cs.beta << " pad=" << cs.pad);
        check_gemm(fn, cs);
      }
    }
  }
}

TEST_P(GemmTest, EmptyInnerDimensionScalesC) {
  const GemmFn fn = backend_fn(GetParam());
  Vec c = {1.0f, 2.0f, 3.0f, 4.0f};
  fn(false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2);
  EXPECT_EQ(c, (Vec{0.5f, 1.0f, 1.5f, 2.0f}));
  fn(false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (Vec{0.0f, 0.0f, 0.0f, 0.0f}));
}

INSTANTIATE_TEST_SUITE_P(
    Backends, GemmTest, ::testing::Values(0, 1, 2), [](const ::testing::TestParamInfo<int>& p) {
      return std::string(p.param == 0 ? "Dispatch" : p.param == 1 ? "DnnlSgemm" : "DnnlMatmul");
    });

TEST(Gemm, LargerShapeAgainstReference) {
  // Large enough that the libraries take their blocked, multi-threaded paths.
  const int64_t m = 300, n = 257, k = 611;
  Vec a = random_vec(m * k, 4), b = random_vec(n * k, 5), c(m * n);
  DVec want(m * n);
  const DVec ad = to_double(a), bd = to_double(b);
  ref::gemm<double>(false, true, m, n, k, 1.0, ad.data(), k, bd.data(), k, 0.0, want.data(), n);
  gemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), n);
  EXPECT_TRUE(close(c, want, 1e-5));
}

TEST(Gemm, RejectsBadLeadingDimension) {
  Vec a(16), b(16), c(16);
  EXPECT_THROW(gemm(false, false, 4, 4, 4, 1.0f, a.data(), 3, b.data(), 4, 0.0f, c.data(), 4),
               Error);
}

TEST(Gemm, BackendNameIsKnown) {
  const std::string name = gemm_backend();
  EXPECT_TRUE(name == "onednn" || name == "openblas") << name;
}

}  // namespace
}  // namespace strata::kernels
