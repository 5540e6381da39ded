// LayerNorm and RMSNorm on the GPU against the CPU kernels, on shapes that are not multiples of
// the block size, and with n large enough that dw/dbias are summed over several row chunks.
#include <gtest/gtest.h>

#include "device_buffer.h"
#include "gpu_test.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/kernels.h"

namespace strata::cuda {
namespace {

using testing::all_close;
using testing::DeviceBuffer;
using testing::random_floats;
using Vec = std::vector<float>;

constexpr float kEps = 1e-5f;

TEST(CudaLayerNorm, ForwardMatchesCpu) {
  REQUIRE_GPU();
  Stream stream;
  for (auto [n, c] : {std::pair<int64_t, int64_t>{37, 771}, {5, 4100}, {300, 33}}) {
    const Vec x = random_floats(n * c, 1, -2.0f, 3.0f);
    const Vec w = random_floats(c, 2, 0.5f, 1.5f), b = random_floats(c, 3);
    Vec y(n * c), mean(n), rstd(n);
    kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), n,
                               c, kEps);
    DeviceBuffer<float> dx(x), dw(w), db(b), dy(n * c), dmean(n), drstd(n);
    layernorm_forward(dy.get(), dmean.get(), drstd.get(), dx.get(), dw.get(), db.get(), n, c, kEps,
                      stream.get());
    EXPECT_TRUE(all_close(dy.download(), y, 1e-5)) << "n=" << n << " c=" << c;
    EXPECT_TRUE(all_close(dmean.download(), mean, 1e-5));
    EXPECT_TRUE(all_close(drstd.download(), rstd, 1e-5));
  }
}

TEST(CudaLayerNorm, BackwardAccumulatesLikeCpuAndRepeatsBitForBit) {
  REQUIRE_GPU();
  Stream stream;
  for (auto [n, c] : {std::pair<int64_t, int64_t>{37, 771}, {1000, 257}}) {
    const Vec x = random_floats(n * c, 11, -2.0f, 3.0f), dyv = random_floats(n * c, 12);
    const Vec w = random_floats(c, 13, 0.5f, 1.5f), b = random_floats(c, 14);
    Vec y(n * c), mean(n), rstd(n);
    kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), n,
                               c, kEps);
    const Vec dx0 = random_floats(n * c, 15), dw0 = random_floats(c, 16),
              db0 = random_floats(c, 17);
    Vec dx = dx0, dw = dw0, db = db0;
    kernels::layernorm_backward(dx.data(), dw.data(), db.data(), dyv.data(), x.data(), w.data(),
                                mean.data(), rstd.data(), n, c);

    DeviceBuffer<float> gx(x), gdy(dyv), gw(w), gmean(mean), grstd(rstd);
    DeviceBuffer<float> scratch(layernorm_backward_scratch_floats(n, c));
    Vec first_dx, first_dw, first_db;
    for (int run = 0; run < 2; ++run) {
      DeviceBuffer<float> gdx(dx0), gdw(dw0), gdb(db0);
      layernorm_backward(gdx.get(), gdw.get(), gdb.get(), scratch.get(), gdy.get(), gx.get(),
                         gw.get(), gmean.get(), grstd.get(), n, c, stream.get());
      const Vec got_dx = gdx.download(), got_dw = gdw.download(), got_db = gdb.download();
      EXPECT_TRUE(all_close(got_dx, dx, 1e-5)) << "n=" << n << " c=" << c;
      EXPECT_TRUE(all_close(got_dw, dw, 1e-4)) << "n=" << n << " c=" << c;
      EXPECT_TRUE(all_close(got_db, db, 1e-4)) << "n=" << n << " c=" << c;
      if (run == 0) {
        first_dx = got_dx;
        first_dw = got_dw;
        first_db = got_db;
      } else {
        EXPECT_TRUE(testing::bitwise_equal(got_dx, first_dx));
        EXPECT_TRUE(testing::bitwise_equal(got_dw, first_dw));
        EXPECT_TRUE(testing::bitwise_equal(got_db, first_db));
      }
    }
  }
}

TEST(CudaLayerNorm, ScratchHoldsTwoPartialsPerChunkOfRows) {
  EXPECT_EQ(layernorm_backward_scratch_floats(37, 771), 2 * 2 * 771);  // chunks of 32 rows
  EXPECT_EQ(layernorm_backward_scratch_floats(0, 771), 0);
  EXPECT_EQ(rmsnorm_backward_scratch_floats(1000, 10), 32 * 10);
  // Large n: at most 1024 chunks, whatever n is.
  EXPECT_LE(rmsnorm_backward_scratch_floats(int64_t{1} << 24, 1), 1024);
}

TEST(CudaRmsNorm, ForwardMatchesCpu) {
  REQUIRE_GPU();
  Stream stream;
  for (auto [n, c] : {std::pair<int64_t, int64_t>{37, 771}, {5, 4100}, {300, 33}}) {
    const Vec x = random_floats(n * c, 21, -2.0f, 3.0f), w = random_floats(c, 22, 0.5f, 1.5f);
    Vec y(n * c), rstd(n);
    kernels::rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), n, c, kEps);
    DeviceBuffer<float> gx(x), gw(w), gy(n * c), grstd(n);
    rmsnorm_forward(gy.get(), grstd.get(), gx.get(), gw.get(), n, c, kEps, stream.get());
    EXPECT_TRUE(all_close(gy.download(), y, 1e-5)) << "n=" << n << " c=" << c;
    EXPECT_TRUE(all_close(grstd.download(), rstd, 1e-5));
  }
}

TEST(CudaRmsNorm, BackwardAccumulatesLikeCpuAndRepeatsBitForBit) {
  REQUIRE_GPU();
  Stream stream;
  for (auto [n, c] : {std::pair<int64_t, int64_t>{37, 771}, {1000, 257}}) {
    const Vec x = random_floats(n * c, 31, -2.0f, 3.0f), dyv = random_floats(n * c, 32);
    const Vec w = random_floats(c, 33, 0.5f, 1.5f);
    Vec y(n * c), rstd(n);
    kernels::rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), n, c, kEps);
    const Vec dx0 = random_floats(n * c, 34), dw0 = random_floats(c, 35);
    Vec dx = dx0, dw = dw0;
    kernels::rmsnorm_backward(dx.data(), dw.data(), dyv.data(), x.data(), w.data(), rstd.data(), n,
                              c);

    DeviceBuffer<float> gx(x), gdy(dyv), gw(w), grstd(rstd);
    DeviceBuffer<float> scratch(rmsnorm_backward_scratch_floats(n, c));
    Vec first_dx, first_dw;
    for (int run = 0; run < 2; ++run) {
      DeviceBuffer<float> gdx(dx0), gdw(dw0);
      rmsnorm_backward(gdx.get(), gdw.get(), scratch.get(), gdy.get(), gx.get(), gw.get(),
                       grstd.get(), n, c, stream.get());
      const Vec got_dx = gdx.download(), got_dw = gdw.download();
      EXPECT_TRUE(all_close(got_dx, dx, 1e-5)) << "n=" << n << " c=" << c;
      EXPECT_TRUE(all_close(got_dw, dw, 1e-4)) << "n=" << n << " c=" << c;
      if (run == 0) {
        first_dx = got_dx;
        first_dw = got_dw;
      } else {
        EXPECT_TRUE(testing::bitwise_equal(got_dx, first_dx));
        EXPECT_TRUE(testing::bitwise_equal(got_dw, first_dw));
      }
    }
  }
}

}  // namespace
}  // namespace strata::cuda
