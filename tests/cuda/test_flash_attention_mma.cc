// The tensor-core bf16 flash attention (kernels/cuda/flash_attention_mma.h) against the CPU bf16
// kernels (kernels/cpu/flash_attention.h) and the scalar CUDA bf16 kernels: forward out and lse,
// backward dq, dk, dv, on fresh random inputs; head dims 64 and 128, t = 1 and t not a multiple
// of the 64-row tile, GQA, b > 1; bitwise run-to-run determinism; the scalar fallback for
// misaligned pointers.
//
// Tolerances. All three implementations round the same operands to bf16 (P before P V, dO, P
// before P^T dO, dS before the dK and dQ products) and accumulate in f32, so they differ only
// by f32 summation order, exp2f-vs-expf (a few ulp) and the rare bf16 rounding that this flips
// (one bf16 ulp, 2^-8 relative, on an element a hair from a rounding boundary). Hence:
//  * element-wise, as test_flash_attention.cc: |got - want| <= 2e-2 max(1, max|want|) + 2e-2
//    |want| (out, dqkv; lse, which involves no bf16 rounding, 1e-4) - a flipped P or dS moves an
//    element by far less;
//  * in aggregate, relative L2 error ||got - want|| / ||want||: 1e-3 against the scalar CUDA
//    kernel and for out against the CPU (expected ~1e-5). dqkv against the CPU gets 1e-2: the CPU
//    rounds dS * scale rather than dS, which for hd = 128 (scale = 1/sqrt(128), not a power of 2)
//    gives every dS term an independent ~2^-9 rounding difference, ~2e-3 relative on the
//    random-sign sums dK and dQ (2.3e-3 measured on these kernels under a host emulation of
//    ldmatrix/mma; ~1e-5 for hd = 64, where the scale is exact).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gemm_attention_util.h"
#include "gpu_test.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/flash_attention_mma.h"

namespace strata::cuda {
namespace {

using test::DevBuf;

struct Shape {
  int64_t b, t, nh, nkv, hd;
  size_t qkv() const { return static_cast<size_t>(b * t * (nh + 2 * nkv) * hd); }
  size_t out() const { return static_cast<size_t>(b * t * nh * hd); }
  size_t lse() const { return static_cast<size_t>(b * nh * t); }
};

std::string name(const Shape& s) {
  return cat("b=", s.b, " t=", s.t, " nh=", s.nh, " nkv=", s.nkv, " hd=", s.hd);
}

// t = 1 (one row, one key), t = 77 and 200 (partial last tiles), 128 (exact tiles), 513 and 1000
// (many tiles: the double buffers cycle), GQA groups of 2 and 4, b up to 3.
const Shape kShapes[] = {{2, 77, 8, 2, 64},  {2, 77, 8, 2, 128},  {1, 1, 4, 2, 64},
                         {2, 1, 2, 1, 128},  {3, 200, 4, 4, 64},  {1, 200, 8, 2, 128},
                         {1, 128, 2, 1, 64}, {1, 1000, 2, 2, 64}, {1, 513, 4, 1, 128}};

::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want,
                                 double tol) {
  return test::near_all(got, want, tol * std::max(1.0f, test::max_abs(want)), tol);
}

::testing::AssertionResult rel_l2(const std::vector<float>& got, const std::vector<float>& want,
                                  double tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    ref += static_cast<double>(want[i]) * want[i];
  }
  const double rel = std::sqrt(err) / std::max(std::sqrt(ref), 1e-30);
  if (rel <= tol) return ::testing::AssertionSuccess();  // NaN fails here
  return ::testing::AssertionFailure() << "relative L2 error " << rel << " > " << tol;
}

// One run of a bf16 flash attention forward + backward on the device.
struct Result {
  std::vector<float> out, lse, dqkv;
};

enum class Kernel { kMma, kScalar };

Result run_gpu(Kernel kernel, const Shape& s, const std::vector<uint16_t>& qkv16,
               const std::vector<float>& dout) {
  DevBuf<uint16_t> dq16(qkv16);
  DevBuf<float> ddout(dout), out(s.out()), lse(s.lse()), dqkv(s.qkv());
  DevBuf<char> ws(
      static_cast<size_t>(flash_attention_mma_backward_workspace(s.b, s.t, s.nh, s.nkv, s.hd)));
  // NaN patterns: an element the kernels fail to write shows.
  STRATA_CUDA_CHECK(cudaMemset(out.get(), 0xff, s.out() * sizeof(float)));
  STRATA_CUDA_CHECK(cudaMemset(dqkv.get(), 0xff, s.qkv() * sizeof(float)));
  if (kernel == Kernel::kMma) {
    flash_attention_mma_forward_bf16(out.get(), lse.get(), dq16.get(), s.b, s.t, s.nh, s.nkv, s.hd,
                                     nullptr);
    flash_attention_mma_backward_bf16(dqkv.get(), ws.get(), ddout.get(), dq16.get(), out.get(),
                                      lse.get(), s.b, s.t, s.nh, s.nkv, s.hd, nullptr);
  } else {
    flash_attention_forward_bf16(out.get(), lse.get(), dq16.get(), s.b, s.t, s.nh, s.nkv, s.hd,
                                 nullptr);
    flash_attention_backward_bf16(dqkv.get(), ws.get(), ddout.get(), dq16.get(), out.get(),
                                  lse.get(), s.b, s.t, s.nh, s.nkv, s.hd, nullptr);
  }
  return {out.download(), lse.download(), dqkv.download()};
}

Result run_cpu(const Shape& s, const std::vector<uint16_t>& qkv16, const std::vector<float>& dout) {
  Result r{std::vector<float>(s.out()), std::vector<float>(s.lse()), std::vector<float>(s.qkv())};
  kernels::flash_attention_forward_bf16(r.out.data(), r.lse.data(), qkv16.data(), s.b, s.t, s.nh,
                                        s.nkv, s.hd);
  std::vector<float> scratch(static_cast<size_t>(
      kernels::flash_attention_backward_bf16_scratch(s.b, s.t, s.nh, s.nkv, s.hd)));
  kernels::flash_attention_backward_bf16(r.dqkv.data(), scratch.data(), dout.data(), qkv16.data(),
                                         r.out.data(), r.lse.data(), s.b, s.t, s.nh, s.nkv, s.hd);
  return r;
}

TEST(CudaFlashAttentionMma, RejectsUnsupportedHeadDimsAndSizesItsWorkspace) {
  // No GPU needed: the checks run before any device work.
  try {
    flash_attention_mma_forward_bf16(static_cast<float*>(nullptr), nullptr, nullptr, 1, 8, 2, 1, 96,
                                     nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("supported: 64, 128"), std::string::npos) << e.what();
  }
  // D (rounded up to 256 bytes), then dO in bf16; never less than the scalar fallback needs.
  EXPECT_EQ(flash_attention_mma_backward_workspace(2, 257, 4, 2, 64),
            (4 * 2 * 4 * 257 + 255) / 256 * 256 + 2 * 2 * 257 * 4 * 64);
  for (const Shape& s : kShapes)
    EXPECT_GE(flash_attention_mma_backward_workspace(s.b, s.t, s.nh, s.nkv, s.hd),
              flash_attention_backward_workspace(s.b, s.t, s.nh, s.nkv, s.hd));
}

TEST(CudaFlashAttentionMma, MatchesTheCpuBf16KernelAndTheScalarCudaKernel) {
  REQUIRE_GPU();
  uint32_t seed = 1000;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const auto qkv16 = test::to_bf16(test::normal(s.qkv(), ++seed));
    const auto dout = test::normal(s.out(), ++seed);
    const Result got = run_gpu(Kernel::kMma, s, qkv16, dout);
    const Result cpu = run_cpu(s, qkv16, dout);
    EXPECT_TRUE(close(got.out, cpu.out, 2e-2));
    EXPECT_TRUE(rel_l2(got.out, cpu.out, 1e-3));
    EXPECT_TRUE(close(got.lse, cpu.lse, 1e-4));
    EXPECT_TRUE(close(got.dqkv, cpu.dqkv, 2e-2));
    EXPECT_TRUE(rel_l2(got.dqkv, cpu.dqkv, 1e-2));

    const Result scalar = run_gpu(Kernel::kScalar, s, qkv16, dout);
    EXPECT_TRUE(close(got.out, scalar.out, 2e-2));
    EXPECT_TRUE(rel_l2(got.out, scalar.out, 1e-3));
    EXPECT_TRUE(close(got.lse, scalar.lse, 1e-4));
    EXPECT_TRUE(close(got.dqkv, scalar.dqkv, 2e-2));
    EXPECT_TRUE(rel_l2(got.dqkv, scalar.dqkv, 1e-3));
  }
}

TEST(CudaFlashAttentionMma, Bf16OutputIsTheF32OutputRoundedAndItsBackwardMatches) {
  REQUIRE_GPU();
  for (const Shape& s : {Shape{2, 77, 8, 2, 64}, Shape{1, 200, 4, 2, 128}}) {
    SCOPED_TRACE(name(s));
    const auto qkv16 = test::to_bf16(test::normal(s.qkv(), 2001));
    const auto dout = test::normal(s.out(), 2002);
    const Result f32 = run_gpu(Kernel::kMma, s, qkv16, dout);
    DevBuf<uint16_t> dq16(qkv16), out16(s.out());
    DevBuf<float> ddout(dout), lse(s.lse()), dqkv(s.qkv());
    DevBuf<char> ws(
        static_cast<size_t>(flash_attention_mma_backward_workspace(s.b, s.t, s.nh, s.nkv, s.hd)));
    flash_attention_mma_forward_bf16(out16.get(), lse.get(), dq16.get(), s.b, s.t, s.nh, s.nkv,
                                     s.hd, nullptr);
    // The same arithmetic up to the store, which rounds: bitwise the f32 result rounded.
    const std::vector<float> got16 = test::from_bf16(out16.download());
    const std::vector<float> want16 = test::round_bf16(f32.out);
    EXPECT_EQ(0, std::memcmp(got16.data(), want16.data(), got16.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(lse.download().data(), f32.lse.data(), s.lse() * sizeof(float)));

    flash_attention_mma_backward_bf16(dqkv.get(), ws.get(), ddout.get(), dq16.get(), out16.get(),
                                      lse.get(), s.b, s.t, s.nh, s.nkv, s.hd, nullptr);
    // The CPU backward given the same (rounded) out: only D changes with the rounding.
    std::vector<float> want(s.qkv()),
        scratch(static_cast<size_t>(
            kernels::flash_attention_backward_bf16_scratch(s.b, s.t, s.nh, s.nkv, s.hd)));
    kernels::flash_attention_backward_bf16(want.data(), scratch.data(), dout.data(), qkv16.data(),
                                           got16.data(), f32.lse.data(), s.b, s.t, s.nh, s.nkv,
                                           s.hd);
    const std::vector<float> got = dqkv.download();
    EXPECT_TRUE(close(got, want, 2e-2));
    EXPECT_TRUE(rel_l2(got, want, 1e-2));
  }
}

TEST(CudaFlashAttentionMma, IsBitwiseReproducible) {
  REQUIRE_GPU();
  for (const Shape& s : {Shape{2, 200, 8, 2, 64}, Shape{1, 513, 4, 1, 128}}) {
    SCOPED_TRACE(name(s));
    const auto qkv16 = test::to_bf16(test::normal(s.qkv(), 3001));
    const auto dout = test::normal(s.out(), 3002);
    const Result first = run_gpu(Kernel::kMma, s, qkv16, dout);
    const Result second = run_gpu(Kernel::kMma, s, qkv16, dout);  // fresh buffers, NaN-filled
    EXPECT_EQ(0, std::memcmp(first.out.data(), second.out.data(), s.out() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(first.lse.data(), second.lse.data(), s.lse() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(first.dqkv.data(), second.dqkv.data(), s.qkv() * sizeof(float)));
  }
}

TEST(CudaFlashAttentionMma, MisalignedPointersTakeTheScalarKernel) {
  REQUIRE_GPU();
  // qkv one bf16 (2 bytes) into its buffer: not 16-byte aligned, so the mma entry points hand
  // the call to the scalar kernels; results are theirs, bit for bit.
  const Shape s{1, 77, 4, 2, 64};
  const auto qkv16 = test::to_bf16(test::normal(s.qkv(), 4001));
  const auto dout = test::normal(s.out(), 4002);
  std::vector<uint16_t> shifted(qkv16.size() + 1, 0);
  std::copy(qkv16.begin(), qkv16.end(), shifted.begin() + 1);
  DevBuf<uint16_t> dq16(shifted);
  DevBuf<float> ddout(dout), out(s.out()), lse(s.lse()), dqkv(s.qkv());
  DevBuf<char> ws(
      static_cast<size_t>(flash_attention_mma_backward_workspace(s.b, s.t, s.nh, s.nkv, s.hd)));
  flash_attention_mma_forward_bf16(out.get(), lse.get(), dq16.get() + 1, s.b, s.t, s.nh, s.nkv,
                                   s.hd, nullptr);
  flash_attention_mma_backward_bf16(dqkv.get(), ws.get(), ddout.get(), dq16.get() + 1, out.get(),
                                    lse.get(), s.b, s.t, s.nh, s.nkv, s.hd, nullptr);
  const Result scalar = run_gpu(Kernel::kScalar, s, qkv16, dout);
  EXPECT_EQ(0, std::memcmp(out.download().data(), scalar.out.data(), s.out() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dqkv.download().data(), scalar.dqkv.data(), s.qkv() * sizeof(float)));
}

}  // namespace
}  // namespace strata::cuda
