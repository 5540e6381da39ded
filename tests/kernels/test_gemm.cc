// GEMM: every backend, all four transpose combinations, alpha/beta, leading dimensions wider
// than the matrices (strided views), and C's padding left untouched.
#include <omp.h>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/cpu/gemm_backends.h"
#include "kernels/cpu/isa.h"
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
    case 2:
      return detail::gemm_dnnl_matmul;
    case 3:
      return detail::gemm_openblas;
    default:
      return detail::gemm_dnnl_sgemm_tiled;
  }
}

// OpenBLAS is one of the project's dependencies (scripts/install_deps.sh): missing, its tests
// fail rather than skip, so that the backend the auto choice takes on AMD and aarch64 is tested.
TEST(Gemm, OpenBlasIsInstalled) {
  const detail::OpenBlas& ob = detail::openblas();
  ASSERT_NE(ob.sgemm, nullptr) << ob.why_not;
  EXPECT_FALSE(ob.core.empty());
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

std::string backend_name(const ::testing::TestParamInfo<int>& p) {
  static const char* const kNames[] = {"Dispatch", "DnnlSgemm", "DnnlMatmul", "OpenBlas",
                                       "DnnlTiled"};
  return kNames[p.param];
}

INSTANTIATE_TEST_SUITE_P(Backends, GemmTest, ::testing::Values(0, 1, 2, 3, 4), backend_name);

// Within one kernel level a run is bitwise the same at every thread count (kernels.h); for the
// GEMM that holds when a library splits M and N across threads but never K. Every backend, every
// transpose, a shape large enough to take the libraries' threaded, blocked paths. The tiled
// backends hold it by construction at every count. oneDNN's own threading holds it at 1-4 threads
// on AVX-512, but at the avx2 level and on aarch64 (its reference GEMM) only at 1 and 2: from 3
// threads it splits the inner dimension (measured on a Sapphire Rapids capped at AVX2, and under
// qemu-aarch64; docs/ARCHITECTURE.md). gemm() takes the tiled OpenBLAS on aarch64.
TEST_P(GemmTest, ResultDoesNotDependOnThreadCount) {
  const GemmFn fn = backend_fn(GetParam());
  const bool tiled = fn == detail::gemm_openblas || fn == detail::gemm_dnnl_sgemm_tiled ||
                     (fn == gemm && gemm_backend() == "openblas");
  const isa::Level level = isa::active();
  const bool onednn_avx512 = level == isa::Level::avx512 || level == isa::Level::avx512bf16;
  const std::vector<int> more_threads =
      tiled || onednn_avx512 ? std::vector<int>{2, 3, 4} : std::vector<int>{2};
  const int64_t m = 389, n = 2101, k = 131;  // 2 x 2 tiles of the tiled backends
  const Vec a = random_vec(m * k, 11), b = random_vec(k * n, 12);
  const int saved = omp_get_max_threads();
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      auto run = [&](int threads) {
        omp_set_num_threads(threads);
        Vec c(m * n, 0.25f);
        fn(ta, tb, m, n, k, 0.5f, a.data(), ta ? m : k, b.data(), tb ? k : n, 1.0f, c.data(), n);
        return c;
      };
      const Vec one = run(1);
      for (int threads : more_threads)
        EXPECT_EQ(run(threads), one)
            << "ta=" << ta << " tb=" << tb << ": " << threads << " threads";
    }
  }
  omp_set_num_threads(saved);
}

// One shape from several threads at once (experts side by side, ranks as threads in a test): the
// matmul path shares one cached primitive between them, which must not share its scratchpad.
TEST(Gemm, OneShapeFromManyThreadsAtOnce) {
  const int64_t m = 24, n = 16, k = 96;  // x w^T with k >= 2n: oneDNN's matmul primitive
  constexpr int kThreads = 4, kRounds = 60;
  std::vector<Vec> a, b, want;
  for (int t = 0; t < kThreads; ++t) {
    a.push_back(random_vec(m * k, 100 + t));
    b.push_back(random_vec(n * k, 200 + t));
    Vec c(m * n);
    detail::gemm_dnnl_matmul(false, true, m, n, k, 1.0f, a[t].data(), k, b[t].data(), k, 0.0f,
                             c.data(), n);
    want.push_back(c);
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Vec c(m * n);
      for (int r = 0; r < kRounds; ++r) {
        detail::gemm_dnnl_matmul(false, true, m, n, k, 1.0f, a[t].data(), k, b[t].data(), k, 0.0f,
                                 c.data(), n);
        wrong[t] += c != want[t];
      }
    });
  for (std::thread& t : threads) t.join();
  omp_set_num_threads(saved);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

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
