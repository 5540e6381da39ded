// Element-wise kernels on the GPU against the CPU kernels: GELU, SwiGLU, RoPE, the residual and
// bias adds, scaling and the bf16 conversions. Single IEEE operations (add, multiply, the bf16
// rounding) must agree bit for bit; transcendental ones (expf, sincosf) within 1e-5.
#include <gtest/gtest.h>

#include <cstring>

#include "core/dtype.h"
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
using Vec = std::vector<float>;
using U16 = std::vector<uint16_t>;

constexpr int64_t kCount = 100003;  // not a multiple of any block size

TEST(CudaGelu, ForwardAndBackwardMatchCpu) {
  REQUIRE_GPU();
  Stream stream;
  const Vec x = random_floats(kCount, 1, -8.0f, 8.0f), dy = random_floats(kCount, 2);
  Vec y(kCount), dx(kCount);
  kernels::gelu_forward(y.data(), x.data(), kCount);
  kernels::gelu_backward(dx.data(), x.data(), dy.data(), kCount);
  DeviceBuffer<float> gx(x), gy(kCount), gdy(dy), gdx(kCount);
  gelu_forward(gy.get(), gx.get(), kCount, stream.get());
  gelu_backward(gdx.get(), gx.get(), gdy.get(), kCount, stream.get());
  EXPECT_TRUE(all_close(gy.download(), y, 1e-5));
  EXPECT_TRUE(all_close(gdx.download(), dx, 1e-5));
  // dx may alias dy.
  gelu_backward(gdy.get(), gx.get(), gdy.get(), kCount, stream.get());
  EXPECT_TRUE(all_close(gdy.download(), dx, 1e-5));
}

TEST(CudaGelu, Bf16ForwardIsTheRoundedF32Forward) {
  REQUIRE_GPU();
  Stream stream;
  const Vec x = random_floats(kCount, 3, -8.0f, 8.0f);
  DeviceBuffer<float> gx(x), gy(kCount);
  DeviceBuffer<uint16_t> gy16(kCount);
  gelu_forward(gy.get(), gx.get(), kCount, stream.get());
  gelu_forward_bf16(gy16.get(), gx.get(), kCount, stream.get());
  const Vec y = gy.download();
  const U16 y16 = gy16.download();
  U16 want(kCount);
  for (int64_t i = 0; i < kCount; ++i) want[i] = f32_to_bf16(y[i]);
  EXPECT_TRUE(bitwise_equal(y16, want));
  // Against the CPU's bf16 forward: the f32 values may differ in the last bits, so the rounded
  // ones may differ by one bf16 step (never more).
  U16 cpu(kCount);
  kernels::gelu_forward_bf16(cpu.data(), x.data(), kCount);
  for (int64_t i = 0; i < kCount; ++i) {
    ASSERT_LE(std::abs(bf16_to_f32(y16[i]) - bf16_to_f32(cpu[i])),
              std::abs(bf16_to_f32(cpu[i])) * (1.0f / 128.0f) + 1e-30f)
        << "element " << i;
  }
}

TEST(CudaSwiGlu, ForwardAndBackwardMatchCpu) {
  REQUIRE_GPU();
  Stream stream;
  const int64_t n = 37, f = 771;
  const Vec gu = random_floats(n * 2 * f, 4, -6.0f, 6.0f), dy = random_floats(n * f, 5);
  Vec y(n * f), dgu(n * 2 * f);
  kernels::swiglu_forward(y.data(), gu.data(), n, f);
  kernels::swiglu_backward(dgu.data(), gu.data(), dy.data(), n, f);
  DeviceBuffer<float> ggu(gu), gy(n * f), gdy(dy), gdgu(n * 2 * f);
  swiglu_forward(gy.get(), ggu.get(), n, f, stream.get());
  swiglu_backward(gdgu.get(), ggu.get(), gdy.get(), n, f, stream.get());
  EXPECT_TRUE(all_close(gy.download(), y, 1e-5));
  EXPECT_TRUE(all_close(gdgu.download(), dgu, 1e-5));
}

TEST(CudaRope, ForwardAndBackwardMatchCpuAndLeaveVAlone) {
  REQUIRE_GPU();
  Stream stream;
  struct Shape {
    int64_t b, t, nh, nkv, hd;
    float theta;
  };
  for (const Shape s : {Shape{2, 517, 4, 2, 64, 10000.0f}, Shape{1, 2100, 3, 1, 128, 500000.0f},
                        Shape{3, 7, 2, 2, 6, 10000.0f}}) {
    const int64_t row = (s.nh + 2 * s.nkv) * s.hd, count = s.b * s.t * row;
    const Vec qkv = random_floats(count, 6);
    Vec fwd = qkv, bwd = qkv;
    const AttentionShape shape{s.b, s.t, s.nh, s.nkv, s.hd};
    // Llama 3's rescaled frequencies on the long shape, plain RoPE on the others.
    const RopeSpec rope{.theta = s.theta,
                        .scaling = s.t > 2000 ? RopeScaling::llama3 : RopeScaling::none};
    kernels::rope_forward(fwd.data(), shape, rope);
    kernels::rope_backward(bwd.data(), shape, rope);
    DeviceBuffer<float> gf(qkv), gb(qkv);
    rope_forward(gf.get(), shape, rope, nullptr, stream.get());
    rope_backward(gb.get(), shape, rope, nullptr, stream.get());
    const Vec got_f = gf.download(), got_b = gb.download();
    EXPECT_TRUE(all_close(got_f, fwd, 1e-5)) << "t=" << s.t << " hd=" << s.hd;
    EXPECT_TRUE(all_close(got_b, bwd, 1e-5)) << "t=" << s.t << " hd=" << s.hd;
    // The v heads are untouched.
    const int64_t v0 = (s.nh + s.nkv) * s.hd;
    for (int64_t r = 0; r < s.b * s.t; ++r) {
      ASSERT_EQ(std::memcmp(&got_f[r * row + v0], &qkv[r * row + v0], s.nkv * s.hd * 4), 0);
    }
  }
  EXPECT_THROW(rope_forward(nullptr, {1, 1, 1, 1, 5}, RopeSpec{}, nullptr, stream.get()), Error);
}

TEST(CudaElementwise, AddsAndScalesBitForBitLikeCpu) {
  REQUIRE_GPU();
  Stream stream;
  const Vec a = random_floats(kCount, 7), b = random_floats(kCount, 8);
  DeviceBuffer<float> ga(a), gb(b), gout(kCount);

  Vec want(kCount);
  kernels::add(want.data(), a.data(), b.data(), kCount);
  add(gout.get(), ga.get(), gb.get(), kCount, stream.get());
  EXPECT_TRUE(bitwise_equal(gout.download(), want));
  add(ga.get(), ga.get(), gb.get(), kCount, stream.get());  // out aliases a
  EXPECT_TRUE(bitwise_equal(ga.download(), want));

  ga.upload(a);
  add_inplace(ga.get(), gb.get(), kCount, stream.get());
  EXPECT_TRUE(bitwise_equal(ga.download(), want));

  Vec scaled = a;
  kernels::scale_inplace(scaled.data(), 0.3f, kCount);
  ga.upload(a);
  scale_inplace(ga.get(), 0.3f, kCount, stream.get());
  EXPECT_TRUE(bitwise_equal(ga.download(), scaled));

  const int64_t n = 37, c = 771;
  const Vec y0 = random_floats(n * c, 9), bias = random_floats(c, 10);
  Vec y = y0;
  kernels::add_bias(y.data(), bias.data(), n, c);
  DeviceBuffer<float> gy(y0), gbias(bias);
  add_bias(gy.get(), gbias.get(), n, c, stream.get());
  EXPECT_TRUE(bitwise_equal(gy.download(), y));
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(CudaBf16, ConversionsAreBitIdenticalToTheScalarOnes) {
  REQUIRE_GPU();
  Stream stream;
  // Special values first: zeros, infinities, NaNs (quiet, signalling, negative, with payloads),
  // subnormals, the largest finite float (rounds to inf), exact ties in both parities.
  Vec in;
  for (uint32_t u : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                     0xffffffffu, 0x7fbfffffu, 0xffc12345u, 0x00000001u, 0x807fffffu, 0x00400000u,
                     0x7f7fffffu, 0xff7fffffu, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3f807fffu})
    in.push_back(from_bits(u));
  std::mt19937 rng(11);
  while (in.size() < size_t(kCount)) in.push_back(from_bits(rng()));  // every kind of bits
  const int64_t count = int64_t(in.size());
  U16 want(count);
  for (int64_t i = 0; i < count; ++i) want[i] = f32_to_bf16(in[i]);
  DeviceBuffer<float> gin(in);
  DeviceBuffer<uint16_t> gout(count);
  to_bf16(gout.get(), gin.get(), count, stream.get());
  EXPECT_TRUE(bitwise_equal(gout.download(), want));

  U16 all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = uint16_t(h);
  Vec back(65536);
  for (uint32_t h = 0; h < 65536; ++h) back[h] = bf16_to_f32(uint16_t(h));
  DeviceBuffer<uint16_t> gall(all);
  DeviceBuffer<float> gback(65536);
  from_bf16(gback.get(), gall.get(), 65536, stream.get());
  const Vec got = gback.download();
  for (uint32_t h = 0; h < 65536; ++h) ASSERT_EQ(bits(got[h]), bits(back[h])) << "bf16 " << h;
}

}  // namespace
}  // namespace strata::cuda
