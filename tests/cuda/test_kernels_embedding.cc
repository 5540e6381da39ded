// Embedding on the GPU against the CPU kernels. Both directions are plain copies and additions
// done in the same order (the backward adds each token's row in token order), so they must agree
// bit for bit, repeated tokens included.
#include <gtest/gtest.h>

#include "device_buffer.h"
#include "gpu_test.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

using testing::bitwise_equal;
using testing::DeviceBuffer;
using testing::random_floats;
using testing::random_tokens;
using Vec = std::vector<float>;

struct Shape {
  int64_t b, t, c;
  int32_t vocab;
};

TEST(CudaEmbedding, ForwardMatchesCpuBitForBit) {
  REQUIRE_GPU();
  Stream stream;
  const Shape s{3, 37, 771, 50};
  const int64_t n = s.b * s.t;
  const auto tokens = random_tokens(n, s.vocab, 1);
  const Vec wte = random_floats(int64_t(s.vocab) * s.c, 2), wpe = random_floats(s.t * s.c, 3);
  DeviceBuffer<int32_t> gtok(tokens);
  DeviceBuffer<float> gwte(wte), gwpe(wpe), gout(n * s.c);
  for (bool with_wpe : {true, false}) {
    Vec out(n * s.c);
    kernels::embedding_forward(out.data(), tokens.data(), wte.data(),
                               with_wpe ? wpe.data() : nullptr, s.b, s.t, s.c);
    embedding_forward(gout.get(), gtok.get(), gwte.get(), with_wpe ? gwpe.get() : nullptr, s.b, s.t,
                      s.c, stream.get());
    EXPECT_TRUE(bitwise_equal(gout.download(), out)) << "with wpe: " << with_wpe;
  }
}

TEST(CudaEmbedding, BackwardAccumulatesInTokenOrderLikeCpu) {
  REQUIRE_GPU();
  Stream stream;
  // A small vocabulary repeats tokens within a tile; 4 x 1100 rows span several token tiles.
  for (const Shape s : {Shape{3, 37, 771, 50}, Shape{4, 1100, 100, 1000}}) {
    const int64_t n = s.b * s.t;
    const auto tokens = random_tokens(n, s.vocab, 4);
    const Vec dout = random_floats(n * s.c, 5);
    const Vec dwte0 = random_floats(int64_t(s.vocab) * s.c, 6), dwpe0 = random_floats(s.t * s.c, 7);
    Vec dwte = dwte0, dwpe = dwpe0;
    kernels::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), s.b, s.t,
                                s.c);
    DeviceBuffer<int32_t> gtok(tokens);
    DeviceBuffer<float> gdout(dout), gdwte(dwte0), gdwpe(dwpe0);
    embedding_backward(gdwte.get(), gdwpe.get(), gdout.get(), gtok.get(), s.b, s.t, s.c,
                       stream.get());
    EXPECT_TRUE(bitwise_equal(gdwte.download(), dwte)) << "n=" << n << " c=" << s.c;
    EXPECT_TRUE(bitwise_equal(gdwpe.download(), dwpe)) << "n=" << n << " c=" << s.c;

    // Without dwpe, dwte alone.
    Vec dwte_only = dwte0;
    kernels::embedding_backward(dwte_only.data(), nullptr, dout.data(), tokens.data(), s.b, s.t,
                                s.c);
    gdwte.upload(dwte0);
    embedding_backward(gdwte.get(), nullptr, gdout.get(), gtok.get(), s.b, s.t, s.c, stream.get());
    EXPECT_TRUE(bitwise_equal(gdwte.download(), dwte_only));
  }
}

}  // namespace
}  // namespace strata::cuda
