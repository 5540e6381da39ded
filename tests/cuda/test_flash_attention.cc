// The GPU flash attention against the CPU kernels (kernels/cpu/flash_attention.h) and the naive
// reference (kernels/cpu/reference.h, in double): forward out and lse, backward dqkv, f32 and
// bf16, head dims 64 and 128, MHA and GQA, t = 257 so the last tile is partial.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "gemm_attention_util.h"
#include "gpu_test.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/reference.h"
#include "kernels/cuda/flash_attention.h"

namespace strata::cuda {
namespace {

using test::DevBuf;
using test::near_all;

struct Shape {
  int64_t b, t, nh, nkv, hd;
  size_t qkv() const { return static_cast<size_t>(b * t * (nh + 2 * nkv) * hd); }
  size_t out() const { return static_cast<size_t>(b * t * nh * hd); }
  size_t lse() const { return static_cast<size_t>(b * nh * t); }
};

std::string name(const Shape& s) {
  return cat("b=", s.b, " t=", s.t, " nh=", s.nh, " nkv=", s.nkv, " hd=", s.hd);
}

const Shape kShapes[] = {
    {2, 257, 4, 2, 64}, {2, 257, 4, 2, 128}, {1, 130, 2, 2, 64}, {1, 5, 1, 1, 128}};

// Absolute tolerance scaled to the tensor's magnitude (gradients are small), plus a relative one.
::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want,
                                 double tol) {
  return near_all(got, want, tol * std::max(1.0f, test::max_abs(want)), tol);
}

TEST(CudaFlashAttention, RejectsUnsupportedHeadDimsNamingTheSupportedOnes) {
  // No GPU needed: the shape check runs before any device work.
  EXPECT_TRUE(flash_attention_supports(64));
  EXPECT_FALSE(flash_attention_supports(96));
  try {
    flash_attention_forward(nullptr, nullptr, nullptr, 1, 8, 2, 1, 96, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("supported: 64, 128"), std::string::npos) << e.what();
  }
  EXPECT_EQ(flash_attention_backward_workspace(2, 257, 4, 2, 64), 4 * 2 * 4 * 257);
}

TEST(CudaFlashAttention, F32MatchesTheCpuKernelAndTheNaiveReference) {
  REQUIRE_GPU();
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const auto qkv = test::normal(s.qkv(), 101);
    const auto dout = test::normal(s.out(), 102);
    DevBuf<float> dqkv_in(qkv), ddout(dout), out(s.out()), lse(s.lse()), dqkv(s.qkv());
    DevBuf<char> ws(
        static_cast<size_t>(flash_attention_backward_workspace(s.b, s.t, s.nh, s.nkv, s.hd)));
    flash_attention_forward(out.get(), lse.get(), dqkv_in.get(), s.b, s.t, s.nh, s.nkv, s.hd,
                            nullptr);
    flash_attention_backward(dqkv.get(), ws.get(), ddout.get(), dqkv_in.get(), out.get(), lse.get(),
                             s.b, s.t, s.nh, s.nkv, s.hd, nullptr);

    std::vector<float> want_out(s.out()), want_lse(s.lse()), want_dqkv(s.qkv());
    kernels::flash_attention_forward(want_out.data(), want_lse.data(), qkv.data(), s.b, s.t, s.nh,
                                     s.nkv, s.hd);
    std::vector<float> scratch(static_cast<size_t>(
        kernels::flash_attention_backward_scratch(s.b, s.t, s.nh, s.nkv, s.hd)));
    kernels::flash_attention_backward(want_dqkv.data(), scratch.data(), dout.data(), qkv.data(),
                                      want_out.data(), want_lse.data(), s.b, s.t, s.nh, s.nkv,
                                      s.hd);
    const std::vector<float> got_out = out.download(), got_dqkv = dqkv.download();
    EXPECT_TRUE(close(got_out, want_out, 1e-4));
    EXPECT_TRUE(close(lse.download(), want_lse, 1e-4));
    EXPECT_TRUE(close(got_dqkv, want_dqkv, 1e-4));

    // The naive reference in double (materialised probabilities).
    const std::vector<double> qkv_d(qkv.begin(), qkv.end()), dout_d(dout.begin(), dout.end());
    std::vector<double> out_d(s.out()), probs(static_cast<size_t>(s.b * s.nh * s.t * s.t)),
        dqkv_d(s.qkv());
    kernels::ref::attention_forward(out_d.data(), probs.data(), qkv_d.data(), s.b, s.t, s.nh, s.nkv,
                                    s.hd);
    kernels::ref::attention_backward(dqkv_d.data(), dout_d.data(), qkv_d.data(), probs.data(), s.b,
                                     s.t, s.nh, s.nkv, s.hd);
    EXPECT_TRUE(close(got_out, std::vector<float>(out_d.begin(), out_d.end()), 1e-4));
    EXPECT_TRUE(close(got_dqkv, std::vector<float>(dqkv_d.begin(), dqkv_d.end()), 1e-4));
  }
}

TEST(CudaFlashAttention, Bf16MatchesTheCpuBf16Kernel) {
  REQUIRE_GPU();
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const auto qkv16 = test::to_bf16(test::normal(s.qkv(), 201));
    const auto dout = test::normal(s.out(), 202);
    DevBuf<uint16_t> dqkv16(qkv16);
    DevBuf<float> ddout(dout), out(s.out()), lse(s.lse()), dqkv(s.qkv());
    DevBuf<char> ws(
        static_cast<size_t>(flash_attention_backward_workspace(s.b, s.t, s.nh, s.nkv, s.hd)));
    flash_attention_forward_bf16(out.get(), lse.get(), dqkv16.get(), s.b, s.t, s.nh, s.nkv, s.hd,
                                 nullptr);
    flash_attention_backward_bf16(dqkv.get(), ws.get(), ddout.get(), dqkv16.get(), out.get(),
                                  lse.get(), s.b, s.t, s.nh, s.nkv, s.hd, nullptr);

    std::vector<float> want_out(s.out()), want_lse(s.lse()), want_dqkv(s.qkv());
    kernels::flash_attention_forward_bf16(want_out.data(), want_lse.data(), qkv16.data(), s.b, s.t,
                                          s.nh, s.nkv, s.hd);
    std::vector<float> scratch(static_cast<size_t>(
        kernels::flash_attention_backward_bf16_scratch(s.b, s.t, s.nh, s.nkv, s.hd)));
    kernels::flash_attention_backward_bf16(want_dqkv.data(), scratch.data(), dout.data(),
                                           qkv16.data(), want_out.data(), want_lse.data(), s.b, s.t,
                                           s.nh, s.nkv, s.hd);
    // Both round P, dS and dO to bf16, but a value a hair from a rounding boundary may round
    // differently (different exp implementations): bf16-level tolerances.
    EXPECT_TRUE(close(out.download(), want_out, 2e-2));
    EXPECT_TRUE(close(lse.download(), want_lse, 1e-4));
    EXPECT_TRUE(close(dqkv.download(), want_dqkv, 2e-2));

    // bf16 output: the f32 output rounded once; its backward matches as well.
    DevBuf<uint16_t> out16(s.out());
    flash_attention_forward_bf16(out16.get(), lse.get(), dqkv16.get(), s.b, s.t, s.nh, s.nkv, s.hd,
                                 nullptr);
    EXPECT_TRUE(close(test::from_bf16(out16.download()), want_out, 2e-2));
    flash_attention_backward_bf16(dqkv.get(), ws.get(), ddout.get(), dqkv16.get(), out16.get(),
                                  lse.get(), s.b, s.t, s.nh, s.nkv, s.hd, nullptr);
    EXPECT_TRUE(close(dqkv.download(), want_dqkv, 3e-2));
  }
}

TEST(CudaFlashAttention, BackwardIsBitwiseReproducible) {
  REQUIRE_GPU();
  const Shape s{2, 257, 4, 2, 64};
  const auto qkv = test::normal(s.qkv(), 301);
  const auto dout = test::normal(s.out(), 302);
  DevBuf<float> dqkv_in(qkv), ddout(dout), out(s.out()), lse(s.lse()), dqkv(s.qkv());
  DevBuf<char> ws(
      static_cast<size_t>(flash_attention_backward_workspace(s.b, s.t, s.nh, s.nkv, s.hd)));
  flash_attention_forward(out.get(), lse.get(), dqkv_in.get(), s.b, s.t, s.nh, s.nkv, s.hd,
                          nullptr);
  flash_attention_backward(dqkv.get(), ws.get(), ddout.get(), dqkv_in.get(), out.get(), lse.get(),
                           s.b, s.t, s.nh, s.nkv, s.hd, nullptr);
  const std::vector<float> first = dqkv.download();
  STRATA_CUDA_CHECK(cudaMemset(dqkv.get(), 0xff, s.qkv() * sizeof(float)));  // NaN pattern
  flash_attention_backward(dqkv.get(), ws.get(), ddout.get(), dqkv_in.get(), out.get(), lse.get(),
                           s.b, s.t, s.nh, s.nkv, s.hd, nullptr);
  const std::vector<float> second = dqkv.download();
  EXPECT_EQ(0, std::memcmp(first.data(), second.data(), first.size() * sizeof(float)));
}

}  // namespace
}  // namespace strata::cuda
