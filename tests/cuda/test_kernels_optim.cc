// AdamW and the sum of squares on the GPU against the CPU kernels.
#include <gtest/gtest.h>

#include "core/dtype.h"
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

TEST(CudaAdamW, ThreeStepsMatchCpu) {
  REQUIRE_GPU();
  Stream stream;
  const int64_t count = 100003;
  Vec p = random_floats(count, 1), m(count, 0.0f), v(count, 0.0f);
  DeviceBuffer<float> gp(p), gm(m), gv(v), gg(count);
  DeviceBuffer<uint16_t> gp16(count);
  for (int64_t step = 1; step <= 3; ++step) {
    const Vec g = random_floats(count, uint32_t(10 + step));
    gg.upload(g);
    kernels::adamw_update(p.data(), g.data(), m.data(), v.data(), count, 3e-4f, 0.9f, 0.95f, 1e-8f,
                          0.1f, 0.5f, step);
    // Every other step also refreshes the bf16 copy, which must be the rounded f32 result.
    adamw_update(gp.get(), gg.get(), gm.get(), gv.get(), count, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f,
                 0.5f, step, step % 2 ? gp16.get() : nullptr, stream.get());
    const Vec got_p = gp.download();
    EXPECT_TRUE(all_close(got_p, p, 1e-5)) << "step " << step;
    if (step % 2) {
      std::vector<uint16_t> want16(count);
      for (int64_t i = 0; i < count; ++i) want16[i] = f32_to_bf16(got_p[i]);
      EXPECT_TRUE(testing::bitwise_equal(gp16.download(), want16)) << "step " << step;
    }
    EXPECT_TRUE(all_close(gm.download(), m, 1e-5)) << "step " << step;
    EXPECT_TRUE(all_close(gv.download(), v, 1e-5)) << "step " << step;
  }
  EXPECT_THROW(adamw_update(gp.get(), gg.get(), gm.get(), gv.get(), count, 3e-4f, 0.9f, 0.95f,
                            1e-8f, 0.1f, 1.0f, 0, nullptr, stream.get()),
               Error);
}

TEST(CudaSumSquares, MatchesCpuAndRepeatsBitForBit) {
  REQUIRE_GPU();
  Stream stream;
  DeviceBuffer<double> scratch(sum_squares_scratch_doubles()), out(1);
  for (int64_t count : {int64_t{0}, int64_t{5}, int64_t{1000003}}) {
    const Vec x = random_floats(count, 20, -3.0f, 3.0f);
    const double want = kernels::sum_squares(x.data(), count);
    DeviceBuffer<float> gx(x);
    sum_squares(out.get(), scratch.get(), gx.get(), count, stream.get());
    const double got = out.download()[0];
    EXPECT_NEAR(got, want, 1e-12 * want) << "count " << count;
    sum_squares(out.get(), scratch.get(), gx.get(), count, stream.get());
    EXPECT_EQ(out.download()[0], got) << "count " << count;
  }
}

}  // namespace
}  // namespace strata::cuda
