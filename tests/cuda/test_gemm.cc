// GemmLt (cuBLASLt) against the CPU kernels: every transpose pair with padded strides, f32 and
// bf16 operands, f32 and bf16 outputs, the bias / GELU / bias-gradient epilogues, the plan cache,
// and the linear layers. Odd sizes (37 x 771 x 129) so no dimension is a multiple of a tile.
#include <gtest/gtest.h>

#include <vector>

#include "gemm_attention_util.h"
#include "gpu_test.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/gemm.h"

namespace strata::cuda {
namespace {

using test::DevBuf;
using test::near_all;

constexpr int64_t kM = 37, kN = 771, kK = 129;

struct Problem {
  bool ta, tb;
  int64_t lda, ldb, ldc;
  std::vector<float> a, b, c;
};

// op(A)[M,K], op(B)[K,N] as stored with padded row strides, and a random C for beta.
Problem make_problem(bool ta, bool tb, uint32_t seed) {
  Problem p{ta, tb, (ta ? kM : kK) + 3, (tb ? kK : kN) + 5, kN + 7, {}, {}, {}};
  p.a = test::uniform(static_cast<size_t>((ta ? kK : kM) * p.lda), seed);
  p.b = test::uniform(static_cast<size_t>((tb ? kN : kK) * p.ldb), seed + 1);
  p.c = test::uniform(static_cast<size_t>(kM * p.ldc), seed + 2);
  return p;
}

TEST(CudaGemm, F32AllTransposesMatchTheCpu) {
  REQUIRE_GPU();
  GemmLt lt;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      Problem p = make_problem(ta, tb, 11);
      DevBuf<float> a(p.a), b(p.b), c(p.c);
      lt.gemm_f32(ta, tb, kM, kN, kK, 0.75f, a.get(), p.lda, b.get(), p.ldb, 0.5f, c.get(), p.ldc,
                  nullptr);
      std::vector<float> want = p.c;
      kernels::gemm(ta, tb, kM, kN, kK, 0.75f, p.a.data(), p.lda, p.b.data(), p.ldb, 0.5f,
                    want.data(), p.ldc);
      EXPECT_TRUE(near_all(c.download(), want, 1e-4, 1e-4));
    }
  }
}

TEST(CudaGemm, F32WithTf32AllowedIsCloseAndOffByDefault) {
  REQUIRE_GPU();
  EXPECT_FALSE(GemmLt().options().allow_tf32);
  GemmLt::Options opt;
  opt.allow_tf32 = true;
  GemmLt lt(opt);
  Problem p = make_problem(false, true, 21);
  DevBuf<float> a(p.a), b(p.b), c(p.c);
  lt.gemm_f32(false, true, kM, kN, kK, 1.0f, a.get(), p.lda, b.get(), p.ldb, 0.0f, c.get(), p.ldc,
              nullptr);
  std::vector<float> want = p.c;
  kernels::gemm(false, true, kM, kN, kK, 1.0f, p.a.data(), p.lda, p.b.data(), p.ldb, 0.0f,
                want.data(), p.ldc);
  // TF32 keeps 10 mantissa bits: ~1e-3 relative per product, averaging out over k.
  EXPECT_TRUE(near_all(c.download(), want, 2e-2, 1e-2));
}

TEST(CudaGemm, Bf16AllTransposesMatchTheCpuInF32AndBf16Outputs) {
  REQUIRE_GPU();
  GemmLt lt;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      Problem p = make_problem(ta, tb, 31);
      const std::vector<uint16_t> a16 = test::to_bf16(p.a), b16 = test::to_bf16(p.b);
      DevBuf<uint16_t> a(a16), b(b16);
      DevBuf<float> c(p.c);
      lt.gemm_bf16(ta, tb, kM, kN, kK, 0.75f, a.get(), p.lda, b.get(), p.ldb, 0.5f, c.get(), p.ldc,
                   nullptr);
      std::vector<float> want = p.c;
      kernels::gemm_bf16(ta, tb, kM, kN, kK, 0.75f, a16.data(), p.lda, b16.data(), p.ldb, 0.5f,
                         want.data(), p.ldc);
      // bf16 x bf16 products are exact in f32: only the summation order differs.
      EXPECT_TRUE(near_all(c.download(), want, 1e-4, 1e-4));

      // C in bf16 (beta = 0): the f32 answer rounded once.
      DevBuf<uint16_t> c16(static_cast<size_t>(kM * p.ldc));
      GemmArgs g;
      g.trans_a = ta, g.trans_b = tb, g.m = kM, g.n = kN, g.k = kK;
      g.a = a.get(), g.lda = p.lda, g.b = b.get(), g.ldb = p.ldb, g.c = c16.get(), g.ldc = p.ldc;
      g.ab_type = DType::bf16, g.c_type = DType::bf16;
      lt.gemm(g, nullptr);
      std::vector<float> want0(static_cast<size_t>(kM * p.ldc), 0.0f);
      kernels::gemm_bf16(ta, tb, kM, kN, kK, 1.0f, a16.data(), p.lda, b16.data(), p.ldb, 0.0f,
                         want0.data(), p.ldc);
      std::vector<float> got = test::from_bf16(c16.download());
      for (int64_t i = 0; i < kM; ++i)  // only the N columns of each row were written
        for (int64_t j = kN; j < p.ldc; ++j) got[i * p.ldc + j] = want0[i * p.ldc + j];
      EXPECT_TRUE(near_all(got, want0, 1e-2, 1e-2));
    }
  }
}

TEST(CudaGemm, BiasEpilogueAddsTheBiasPerColumn) {
  REQUIRE_GPU();
  GemmLt lt;
  Problem p = make_problem(false, true, 41);
  const std::vector<float> bias = test::uniform(kN, 45);
  DevBuf<float> a(p.a), b(p.b), c(p.c), dbias(bias);
  GemmArgs g;
  g.trans_b = true, g.m = kM, g.n = kN, g.k = kK;
  g.a = a.get(), g.lda = p.lda, g.b = b.get(), g.ldb = p.ldb, g.c = c.get(), g.ldc = p.ldc;
  g.epilogue = Epilogue::bias, g.bias = dbias.get();
  lt.gemm(g, nullptr);
  std::vector<float> want = p.c;
  kernels::gemm(false, true, kM, kN, kK, 1.0f, p.a.data(), p.lda, p.b.data(), p.ldb, 0.0f,
                want.data(), p.ldc);
  for (int64_t i = 0; i < kM; ++i)
    for (int64_t j = 0; j < kN; ++j) want[i * p.ldc + j] += bias[j];
  EXPECT_TRUE(near_all(c.download(), want, 1e-4, 1e-4));
}

// bf16 operands, f32 output and aux: aux = x w^T + bias, C = gelu(aux) (tanh form).
TEST(CudaGemm, GeluAuxBiasEpilogueMatchesTheCpuGelu) {
  REQUIRE_GPU();
  GemmLt lt;
  Problem p = make_problem(false, true, 51);
  const std::vector<uint16_t> a16 = test::to_bf16(p.a), b16 = test::to_bf16(p.b);
  const std::vector<float> bias = test::uniform(kN, 55);
  const int64_t ldaux = 776;  // >= N and a multiple of 8, as cuBLASLt requires
  DevBuf<uint16_t> a(a16), b(b16);
  DevBuf<float> c(p.c), dbias(bias), aux(static_cast<size_t>(kM * ldaux));
  GemmArgs g;
  g.trans_b = true, g.m = kM, g.n = kN, g.k = kK;
  g.a = a.get(), g.lda = p.lda, g.b = b.get(), g.ldb = p.ldb, g.c = c.get(), g.ldc = p.ldc;
  g.ab_type = DType::bf16;
  g.epilogue = Epilogue::gelu_aux_bias, g.bias = dbias.get(), g.aux = aux.get(), g.ldaux = ldaux;
  lt.gemm(g, nullptr);

  std::vector<float> pre(static_cast<size_t>(kM * kN));
  kernels::gemm_bf16(false, true, kM, kN, kK, 1.0f, a16.data(), p.lda, b16.data(), p.ldb, 0.0f,
                     pre.data(), kN);
  for (int64_t i = 0; i < kM; ++i)
    for (int64_t j = 0; j < kN; ++j) pre[i * kN + j] += bias[j];
  std::vector<float> act(pre.size());
  kernels::gelu_forward(act.data(), pre.data(), static_cast<int64_t>(pre.size()));

  const std::vector<float> got_c = c.download(), got_aux = aux.download();
  std::vector<float> c_rows(pre.size()), aux_rows(pre.size());
  for (int64_t i = 0; i < kM; ++i)
    for (int64_t j = 0; j < kN; ++j) {
      c_rows[i * kN + j] = got_c[i * p.ldc + j];
      aux_rows[i * kN + j] = got_aux[i * ldaux + j];
    }
  EXPECT_TRUE(near_all(aux_rows, pre, 1e-4, 1e-4));
  EXPECT_TRUE(near_all(c_rows, act, 2e-4, 2e-4));
}

// dw = dy^T x with dbias[out] = column sums of dy (bias_grad_a), and C = A B with dbias[N] =
// column sums of B (bias_grad_b); both overwrite dbias.
TEST(CudaGemm, BiasGradientEpiloguesSumOverK) {
  REQUIRE_GPU();
  GemmLt lt;
  const std::vector<float> dy = test::uniform(static_cast<size_t>(kK * kM), 61);  // [k, m]
  const std::vector<float> x = test::uniform(static_cast<size_t>(kK * kN), 62);   // [k, n]
  DevBuf<float> ddy(dy), dx(x), c(static_cast<size_t>(kM * kN)), db(kM), db2(kN);
  GemmArgs g;
  g.trans_a = true, g.m = kM, g.n = kN, g.k = kK;
  g.a = ddy.get(), g.lda = kM, g.b = dx.get(), g.ldb = kN, g.c = c.get(), g.ldc = kN;
  g.epilogue = Epilogue::bias_grad_a, g.bias_grad = db.get();
  lt.gemm(g, nullptr);
  std::vector<float> want(static_cast<size_t>(kM * kN));
  kernels::gemm(true, false, kM, kN, kK, 1.0f, dy.data(), kM, x.data(), kN, 0.0f, want.data(), kN);
  EXPECT_TRUE(near_all(c.download(), want, 1e-4, 1e-4));
  std::vector<float> want_a(kM, 0.0f), want_b(kN, 0.0f);
  for (int64_t k = 0; k < kK; ++k) {
    for (int64_t i = 0; i < kM; ++i) want_a[i] += dy[k * kM + i];
    for (int64_t j = 0; j < kN; ++j) want_b[j] += x[k * kN + j];
  }
  EXPECT_TRUE(near_all(db.download(), want_a, 1e-4, 1e-4));

  g.epilogue = Epilogue::bias_grad_b, g.bias_grad = db2.get();
  lt.gemm(g, nullptr);
  EXPECT_TRUE(near_all(db2.download(), want_b, 1e-4, 1e-4));
}

TEST(CudaGemm, RepeatedShapesReuseTheirPlanWithoutHeuristicQueries) {
  REQUIRE_GPU();
  GemmLt lt;
  Problem p = make_problem(true, false, 71);
  DevBuf<float> a(p.a), b(p.b), c(p.c);
  for (int step = 0; step < 3; ++step)
    lt.gemm_f32(true, false, kM, kN, kK, 1.0f, a.get(), p.lda, b.get(), p.ldb, 0.0f, c.get(), p.ldc,
                nullptr);
  EXPECT_EQ(lt.plans(), 1);
  EXPECT_EQ(lt.heuristic_queries(), 1);
  lt.gemm_f32(false, false, kM, kN, kK, 1.0f, a.get(), kK, b.get(), p.ldb, 0.0f, c.get(), p.ldc,
              nullptr);
  EXPECT_EQ(lt.plans(), 2);
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST(CudaGemm, RejectsBadArgumentsWithAClearError) {
  REQUIRE_GPU();
  GemmLt lt;
  DevBuf<float> a(16), b(16), c(16);
  try {
    lt.gemm_f32(false, false, 4, 4, 4, 1.0f, a.get(), 2, b.get(), 4, 0.0f, c.get(), 4, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lda too small"), std::string::npos) << e.what();
  }
}

// ---- Linear layers ------------------------------------------------------------------------------
constexpr int64_t kRows = 37, kIn = 129, kOut = 771;

TEST(CudaLinear, F32ForwardAndBackwardMatchTheCpu) {
  REQUIRE_GPU();
  GemmLt lt;
  const auto x = test::uniform(kRows * kIn, 81), w = test::uniform(kOut * kIn, 82);
  const auto bias = test::uniform(kOut, 83), dy = test::uniform(kRows * kOut, 84);
  auto dw = test::uniform(kOut * kIn, 85), dbias = test::uniform(kOut, 86);  // accumulated into
  DevBuf<float> dx_(x), dw_(w), dbias_(bias), ddy(dy), y(kRows * kOut), gx(kRows * kIn), gw(dw),
      gb(dbias);
  linear_forward(lt, y.get(), dx_.get(), dw_.get(), dbias_.get(), kRows, kIn, kOut, nullptr);
  linear_backward(lt, gx.get(), gw.get(), gb.get(), ddy.get(), dx_.get(), dw_.get(), kRows, kIn,
                  kOut, nullptr);
  std::vector<float> want_y(kRows * kOut), want_dx(kRows * kIn);
  kernels::linear_forward(want_y.data(), x.data(), w.data(), bias.data(), kRows, kIn, kOut);
  kernels::linear_backward(want_dx.data(), dw.data(), dbias.data(), dy.data(), x.data(), w.data(),
                           kRows, kIn, kOut);
  EXPECT_TRUE(near_all(y.download(), want_y, 1e-4, 1e-4));
  EXPECT_TRUE(near_all(gx.download(), want_dx, 1e-4, 1e-4));
  EXPECT_TRUE(near_all(gw.download(), dw, 1e-4, 1e-4));
  EXPECT_TRUE(near_all(gb.download(), dbias, 1e-4, 1e-4));
}

// bf16 operands: the CPU f32 kernels on the bf16 values are the exact answer up to summation
// order (bf16 products are exact in f32).
TEST(CudaLinear, Bf16ForwardAndBackwardMatchTheCpuOnTheRoundedValues) {
  REQUIRE_GPU();
  GemmLt lt;
  const auto x = test::round_bf16(test::uniform(kRows * kIn, 91));
  const auto w = test::round_bf16(test::uniform(kOut * kIn, 92));
  const auto dy = test::round_bf16(test::uniform(kRows * kOut, 93));
  const auto bias = test::uniform(kOut, 94);
  auto dw = test::uniform(kOut * kIn, 95), dbias = test::uniform(kOut, 96);
  DevBuf<uint16_t> x16(test::to_bf16(x)), w16(test::to_bf16(w)), dy16(test::to_bf16(dy));
  DevBuf<float> dbias_(bias), y(kRows * kOut), gx(kRows * kIn), gw(dw), gb(dbias);
  linear_forward_bf16(lt, y.get(), x16.get(), w16.get(), dbias_.get(), kRows, kIn, kOut, nullptr);
  linear_backward_bf16(lt, gx.get(), gw.get(), gb.get(), dy16.get(), x16.get(), w16.get(), kRows,
                       kIn, kOut, nullptr);
  std::vector<float> want_y(kRows * kOut), want_dx(kRows * kIn);
  kernels::linear_forward(want_y.data(), x.data(), w.data(), bias.data(), kRows, kIn, kOut);
  kernels::linear_backward(want_dx.data(), dw.data(), dbias.data(), dy.data(), x.data(), w.data(),
                           kRows, kIn, kOut);
  EXPECT_TRUE(near_all(y.download(), want_y, 1e-4, 1e-4));
  EXPECT_TRUE(near_all(gx.download(), want_dx, 1e-4, 1e-4));
  EXPECT_TRUE(near_all(gw.download(), dw, 1e-4, 1e-4));
  EXPECT_TRUE(near_all(gb.download(), dbias, 1e-4, 1e-4));
}

}  // namespace
}  // namespace strata::cuda
