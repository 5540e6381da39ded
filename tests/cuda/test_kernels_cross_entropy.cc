// Fused softmax + cross-entropy on the GPU against the CPU kernels: GPT-2's vocabulary (50257,
// odd, not a multiple of the block), ignored rows, a vocabulary smaller than the block, and the
// device-side total.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "device_buffer.h"
#include "gpu_test.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

using testing::all_close;
using testing::bitwise_equal;
using testing::DeviceBuffer;
using testing::random_floats;
using testing::random_tokens;
using Vec = std::vector<float>;

// Per-element relative check (softmax entries are ~1/v: a floor at the tensor's scale would hide
// errors in all of them).
::testing::AssertionResult rel_close(const Vec& got, const Vec& want, double rel, double abs) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - double(want[i]));
    if (!(err <= rel * std::abs(double(want[i])) + abs))
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got[i] << ", want " << want[i];
  }
  return ::testing::AssertionSuccess();
}

void check(int64_t n, int64_t v, uint32_t seed) {
  Stream stream;
  const Vec logits = random_floats(n * v, seed, -6.0f, 6.0f);
  auto targets = random_tokens(n, int32_t(v), seed + 1);
  targets[3 % n] = -1;  // ignored rows
  if (n > 17) targets[17] = -100;
  int64_t valid = 0;
  for (int32_t t : targets) valid += t >= 0;
  const float grad_scale = 1.0f / float(valid);

  Vec losses(n), grads = logits, losses_fb(n);
  const double total =
      kernels::cross_entropy_forward(losses.data(), logits.data(), targets.data(), n, v);
  const double total_fb = kernels::cross_entropy_forward_backward(losses_fb.data(), grads.data(),
                                                                  targets.data(), n, v, grad_scale);

  DeviceBuffer<float> glogits(logits), glosses(n);
  DeviceBuffer<int32_t> gtargets(targets);
  DeviceBuffer<double> gtotal(1);
  cross_entropy_forward(glosses.get(), glogits.get(), gtargets.get(), n, v, stream.get());
  sum_losses(gtotal.get(), glosses.get(), gtargets.get(), n, stream.get());
  const Vec got_losses = glosses.download();
  EXPECT_TRUE(all_close(got_losses, losses, 1e-5)) << "n=" << n << " v=" << v;
  EXPECT_NEAR(gtotal.download()[0], total, 1e-5 * total);
  EXPECT_TRUE(bitwise_equal(glogits.download(), logits));  // the forward leaves logits alone

  cross_entropy_forward_backward(glosses.get(), glogits.get(), gtargets.get(), n, v, grad_scale,
                                 stream.get());
  sum_losses(gtotal.get(), glosses.get(), gtargets.get(), n, stream.get());
  EXPECT_TRUE(all_close(glosses.download(), losses_fb, 1e-5));
  EXPECT_NEAR(gtotal.download()[0], total_fb, 1e-5 * total_fb);
  const Vec got_grads = glogits.download();
  EXPECT_TRUE(rel_close(got_grads, grads, 1e-5, 1e-12)) << "n=" << n << " v=" << v;
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] >= 0) continue;
    EXPECT_EQ(got_losses[i], 0.0f);
    for (int64_t j = 0; j < v; ++j) ASSERT_EQ(got_grads[i * v + j], 0.0f);
  }
}

TEST(CudaCrossEntropy, Gpt2VocabularyMatchesCpu) {
  REQUIRE_GPU();
  check(37, 50257, 1);
}

TEST(CudaCrossEntropy, VocabularySmallerThanTheBlockMatchesCpu) {
  REQUIRE_GPU();
  check(5, 7, 2);
  check(40, 1000, 3);
}

TEST(CudaCrossEntropy, TargetOutsideTheVocabularyGivesANanLoss) {
  REQUIRE_GPU();
  Stream stream;
  const int64_t n = 2, v = 100;
  DeviceBuffer<float> glogits(random_floats(n * v, 4)), glosses(n);
  DeviceBuffer<int32_t> gtargets(std::vector<int32_t>{5, 100});
  cross_entropy_forward(glosses.get(), glogits.get(), gtargets.get(), n, v, stream.get());
  const Vec losses = glosses.download();
  EXPECT_TRUE(std::isfinite(losses[0]));
  EXPECT_TRUE(std::isnan(losses[1]));
}

}  // namespace
}  // namespace strata::cuda
