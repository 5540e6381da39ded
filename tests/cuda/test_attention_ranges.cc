// The GPU range attention (kernels/cuda/attention_ranges.h) against the CPU kernels
// (kernels/cpu/attention_ranges.h): forward out and lse, the log-sum-exp merge, and the
// accumulating backward, on the operands context parallelism gives them: q rows of a fused qkv
// buffer (strided), a key block of another length (a ring step) in its own packed k|v buffer,
// ranges from document starts (some rows seeing no key of the block), MHA and GQA, head dims 16
// (the test models'), 64 and 128, and lengths that leave partial tiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "gemm_attention_util.h"
#include "gpu_test.h"
#include "kernels/cpu/attention_ranges.h"
#include "kernels/cuda/attention_ranges.h"

namespace strata::cuda {
namespace {

using test::DevBuf;
using test::near_all;

struct Case {
  int64_t b, tq, tk, nh, nkv, hd;
};

std::string name(const Case& c) {
  return cat("b=", c.b, " tq=", c.tq, " tk=", c.tk, " nh=", c.nh, " nkv=", c.nkv, " hd=", c.hd);
}

const Case kCases[] = {{2, 37, 37, 4, 2, 16}, {1, 70, 45, 2, 2, 64}, {2, 33, 64, 4, 1, 128}};

// Key ranges [begin, end) of each query row against a block of tk keys: documents starting every
// few rows, causal within them (clamped to the block), and every 5th row seeing nothing.
struct Ranges {
  std::vector<int32_t> begin, end;
};
Ranges make_ranges(const Case& c) {
  std::mt19937 rng(7);
  const size_t n = static_cast<size_t>(c.b * c.tq);
  Ranges out{std::vector<int32_t>(n), std::vector<int32_t>(n)};
  std::vector<int32_t>& begin = out.begin;
  std::vector<int32_t>& end = out.end;
  for (int64_t bb = 0; bb < c.b; ++bb) {
    int64_t doc = 0;
    for (int64_t i = 0; i < c.tq; ++i) {
      if (rng() % 9 == 0) doc = std::min<int64_t>(i, c.tk);
      const size_t r = static_cast<size_t>(bb * c.tq + i);
      begin[r] = static_cast<int32_t>(std::min(doc, c.tk));
      end[r] = static_cast<int32_t>(std::min<int64_t>(i + 1 + (c.tk - c.tq > 0 ? 8 : 0), c.tk));
      if (i % 5 == 4) end[r] = begin[r];  // no key of this block
    }
  }
  return out;
}

::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want,
                                 double tol) {
  return near_all(got, want, tol * std::max(1.0f, test::max_abs(want)), tol);
}

// lse of rows without keys is -infinity on both sides; near_all would see inf - inf = nan.
std::vector<float> finite(std::vector<float> v) {
  for (float& x : v)
    if (std::isinf(x)) x = -1e30f;
  return v;
}

TEST(CudaAttentionRanges, RejectsHeadDimsAboveTheSupportedMaximum) {
  try {
    attention_ranges_forward(nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0, nullptr, nullptr,
                             {1, 1, 1, 1, 1, 512}, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1..256"), std::string::npos) << e.what();
  }
}

TEST(CudaAttentionRanges, ForwardMergeAndBackwardMatchTheCpuKernels) {
  REQUIRE_GPU();
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    const RangeAttentionShape s{c.b, c.tq, c.tk, c.nh, c.nkv, c.hd};
    const int64_t qw = (c.nh + 2 * c.nkv) * c.hd, kvw = 2 * c.nkv * c.hd;
    const auto qkv = test::normal(static_cast<size_t>(c.b * c.tq * qw), 11);
    const auto kv = test::normal(static_cast<size_t>(c.b * c.tk * kvw), 12);
    const auto [begin, end] = make_ranges(c);
    const size_t on = static_cast<size_t>(c.b * c.tq * c.nh * c.hd);
    const size_t ln = static_cast<size_t>(c.b * c.nh * c.tq);
    const float* q = qkv.data();
    const float* k = kv.data();
    const float* v = kv.data() + c.nkv * c.hd;

    // Forward.
    std::vector<float> out(on), lse(ln);
    kernels::attention_ranges_forward(out.data(), lse.data(), q, qw, k, v, kvw, begin.data(),
                                      end.data(), s);
    DevBuf<float> gqkv(qkv), gkv(kv), gout(on), glse(ln);
    DevBuf<int32_t> gbegin(begin), gend(end);
    attention_ranges_forward(gout.get(), glse.get(), gqkv.get(), qw, gkv.get(),
                             gkv.get() + c.nkv * c.hd, kvw, gbegin.get(), gend.get(), s, nullptr);
    EXPECT_TRUE(close(gout.download(), out, 1e-5));
    EXPECT_TRUE(close(finite(glse.download()), finite(lse), 1e-5));

    // Merge with a second partial result (another block: the same keys seen whole).
    std::vector<int32_t> all_begin(begin.size(), 0),
        all_end(end.size(), static_cast<int32_t>(c.tk));
    std::vector<float> out2(on), lse2(ln);
    kernels::attention_ranges_forward(out2.data(), lse2.data(), q, qw, k, v, kvw, all_begin.data(),
                                      all_end.data(), s);
    DevBuf<float> gout2(out2), glse2(lse2);
    kernels::attention_ranges_merge(out.data(), lse.data(), out2.data(), lse2.data(), c.b, c.tq,
                                    c.nh, c.hd);
    attention_ranges_merge(gout.get(), glse.get(), gout2.get(), glse2.get(), s, nullptr);
    EXPECT_TRUE(close(gout.download(), out, 1e-5));
    EXPECT_TRUE(close(glse.download(), lse, 1e-5));

    // Backward of the first block against the merged out and lse, accumulating into gradients
    // that already hold values (a ring adds each block's share).
    const auto dout = test::normal(on, 13);
    auto dqkv = test::normal(qkv.size(), 14);
    auto dkv = test::normal(kv.size(), 15);
    DevBuf<float> gdqkv(dqkv), gdkv(dkv), gdout(dout);
    std::vector<float> scratch(
        static_cast<size_t>(kernels::attention_ranges_backward_scratch(c.hd)));
    kernels::attention_ranges_backward(dqkv.data(), dkv.data(), dkv.data() + c.nkv * c.hd,
                                       scratch.data(), dout.data(), q, qw, k, v, kvw, out.data(),
                                       lse.data(), begin.data(), end.data(), s);
    attention_ranges_backward(gdqkv.get(), gdkv.get(), gdkv.get() + c.nkv * c.hd, gdout.get(),
                              gqkv.get(), qw, gkv.get(), gkv.get() + c.nkv * c.hd, kvw, gout.get(),
                              glse.get(), gbegin.get(), gend.get(), s, nullptr);
    EXPECT_TRUE(close(gdqkv.download(), dqkv, 2e-5));
    EXPECT_TRUE(close(gdkv.download(), dkv, 2e-5));
  }
}

}  // namespace
}  // namespace strata::cuda
