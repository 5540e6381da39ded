// The CUDA backend's conformance to the Backend contract (kernels/backend.h): every method runs the
// same seeded inputs (odd sizes, so no dimension is a multiple of a tile or a block) through
// cpu_backend() and make_cuda_backend(0), and the outputs are compared: bit for bit where the CUDA
// kernel is exact (copies, gathers, scatters in the CPU's order, element-wise ops, conversions),
// else at the tolerances of the kernel tests beside this one (f32 ~1e-5 relative, bf16 / f16
// GEMMs 1e-2). Device buffers come from an Arena on the backend's memory(), so the DeviceMemory
// is exercised by every test. Each GPU test skips without a GPU; one test needs none.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "core/dtype.h"
#include "device_buffer.h"
#include "gemm_attention_util.h"
#include "gpu_test.h"
#include "kernels/backend.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.h"

namespace strata {
namespace {

using cuda::testing::all_close;
using cuda::testing::bitwise_equal;
using cuda::testing::random_floats;
using cuda::testing::random_tokens;
using Vec = std::vector<float>;
using U16 = std::vector<uint16_t>;
using I32 = std::vector<int32_t>;

// Per element: |got - want| <= rel * |want| + abs (softmax gradients are ~1/v each: a floor at the
// tensor's scale would hide errors in all of them).
::testing::AssertionResult rel_close(const Vec& got, const Vec& want, double rel, double abs) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - double(want[i]));
    if (!(err <= rel * std::abs(double(want[i])) + abs))
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got[i] << ", want " << want[i];
  }
  return ::testing::AssertionSuccess();
}

// Flash attention's check: absolute tolerance scaled to the tensor's magnitude, plus relative.
::testing::AssertionResult close_scaled(const Vec& got, const Vec& want, double tol) {
  return cuda::test::near_all(got, want, tol * std::max(1.0f, cuda::test::max_abs(want)), tol);
}

Vec widen_bf16(const U16& v) {
  return cuda::test::from_bf16(v);
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Tests start with REQUIRE_GPU(); without a GPU there is nothing to construct.
    if (cuda::device_count() > 0) {
      gpu_ = make_cuda_backend(0);
      arena_ = std::make_unique<Arena>(gpu_->memory());
    }
  }
  Backend& gpu() { return *gpu_; }
  static Backend& cpu() { return cpu_backend(); }

  // A device copy of host data (from the arena, so freed with the test).
  template <typename T>
  T* up(const std::vector<T>& host) {
    T* p = arena_->alloc<T>(MemCategory::workspace, std::max<int64_t>(int64_t(host.size()), 1),
                            "test buffer");
    gpu().copy_from_host(p, host.data(), host.size() * sizeof(T));
    return p;
  }
  template <typename T = float>
  T* zeros(int64_t count) {
    return arena_->alloc<T>(MemCategory::workspace, std::max<int64_t>(count, 1), "test buffer");
  }
  template <typename T>
  std::vector<T> down(const T* p, int64_t count) {
    std::vector<T> host(static_cast<size_t>(count));
    gpu().copy_to_host(host.data(), p, host.size() * sizeof(T));
    return host;
  }

  std::unique_ptr<Backend> gpu_;
  std::unique_ptr<Arena> arena_;  // declared after gpu_: destroyed before the backend
};

// ---- construction, memory -------------------------------------------------------------------

TEST(CudaBackendNoGpu, AMissingDeviceThrowsSayingSoAndNamingTheCount) {
  // Needs no GPU: without one, device 0 is missing; with some, the first index past them is.
  const int count = cuda::device_count();
  for (int device : {count, -1}) {
    try {
      make_cuda_backend(device);
      ADD_FAILURE() << "make_cuda_backend(" << device << ") did not throw";
    } catch (const std::exception& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("no usable CUDA device"), std::string::npos) << what;
      EXPECT_NE(what.find(cat("sees ", count, " CUDA device")), std::string::npos) << what;
    }
  }
}

TEST_F(CudaBackendTest, IsCudaWithAStreamAndNoNaiveAttention) {
  REQUIRE_GPU();
  EXPECT_EQ(gpu().kind(), Device::cuda);
  ASSERT_NE(CudaBackend::of(gpu()), nullptr);
  EXPECT_NE(CudaBackend::of(gpu())->stream(), nullptr);
  EXPECT_EQ(CudaBackend::of(gpu())->device(), 0);
  EXPECT_EQ(CudaBackend::of(cpu()), nullptr);
  EXPECT_EQ(cpu().memory(), nullptr);
  EXPECT_EQ(gpu().memory()->name(), "cuda:0");
  EXPECT_FALSE(gpu().supports_naive_attention());
  float* buf = zeros(16);
  for (int which = 0; which < 3; ++which) {
    try {
      if (which == 0) gpu().attention_forward(buf, buf, buf, {1, 1, 1, 1, 1});
      if (which == 1) gpu().attention_backward(buf, buf, buf, buf, buf, {1, 1, 1, 1, 1});
      if (which == 2) gpu().attention_backward_scratch({1, 1, 1, 1, 1});
      ADD_FAILURE() << "naive attention method " << which << " did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("flash"), std::string::npos) << e.what();
    }
  }
}

TEST_F(CudaBackendTest, ArenaOnDeviceMemoryReadsBackZerosAligned) {
  REQUIRE_GPU();
  Arena arena(gpu().memory());
  for (int round = 0; round < 2; ++round) {  // the second round reuses freed device memory
    std::vector<float*> blocks;
    for (int64_t count : {int64_t{1}, int64_t{1001}, int64_t{3} << 19}) {  // 4 B .. 6 MiB
      float* p = arena.alloc<float>(MemCategory::activations, count, "block");
      const size_t align = size_t(count) * 4 >= (size_t{2} << 20) ? size_t{2} << 20 : 64;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u) << count;
      EXPECT_TRUE(bitwise_equal(down(p, count), Vec(size_t(count), 0.0f))) << count;
      gpu().fill(p, 3.5f, count);  // dirty it for the next round
      blocks.push_back(p);
    }
    gpu().synchronize();
    for (float* p : blocks) arena.release(p);
  }
  EXPECT_EQ(arena.current(MemCategory::activations), 0);
}

TEST_F(CudaBackendTest, MemoryCachesFreedBlocksAndHandsThemBackZeroed) {
  REQUIRE_GPU();
  DeviceMemory& mem = *gpu().memory();
  const size_t bytes = size_t{3} << 20;  // size class 4 MiB
  auto* a = static_cast<float*>(mem.allocate(bytes, 256));
  gpu().fill(a, 1.5f, static_cast<int64_t>(bytes / 4));
  mem.free(a);
  auto* b = static_cast<float*>(mem.allocate(bytes - 100, 256));  // the same class: reused
  EXPECT_EQ(b, a);
  EXPECT_TRUE(bitwise_equal(down(b, 1000), Vec(1000, 0.0f)));
  void* small = mem.allocate(512, 256);  // another class: not carved from the cached block
  EXPECT_NE(small, static_cast<void*>(a));
  mem.free(small);
  mem.free(b);
}

TEST_F(CudaBackendTest, OutOfMemoryNamesTheRequestAndTheFreeMemory) {
  REQUIRE_GPU();
  try {
    gpu().memory()->allocate(size_t{1} << 52, 256);  // 4 PiB
    ADD_FAILURE() << "a 4 PiB allocation succeeded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(size_t{1} << 52)), std::string::npos) << what;
    EXPECT_NE(what.find("MiB free of"), std::string::npos) << what;
  }
  // The failure is not sticky: the backend still works.
  float* p = up(Vec{1.0f, 2.0f});
  EXPECT_TRUE(bitwise_equal(down(p, 2), Vec{1.0f, 2.0f}));
}

TEST_F(CudaBackendTest, CopyZeroAndFillMatchTheCpuBitwise) {
  REQUIRE_GPU();
  constexpr int64_t kCount = 1237;
  const Vec x = random_floats(kCount, 1);
  float* a = up(x);
  float* b = zeros(kCount);
  gpu().copy(b, a, kCount * sizeof(float));
  gpu().zero(b + 100, 37 * sizeof(float));
  gpu().fill(b + 500, -2.25f, 301);
  Vec want = x;
  cpu().zero(want.data() + 100, 37 * sizeof(float));
  cpu().fill(want.data() + 500, -2.25f, 301);
  gpu().synchronize();
  EXPECT_TRUE(bitwise_equal(down(b, kCount), want));
  EXPECT_TRUE(bitwise_equal(down(a, kCount), x));  // the source is untouched
}

// ---- GEMM and linear layers -------------------------------------------------------------------

constexpr int64_t kM = 37, kN = 71, kK = 29;

TEST_F(CudaBackendTest, GemmF32AndBf16MatchTheCpuForEveryTranspose) {
  REQUIRE_GPU();
  uint32_t seed = 10;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      const int64_t lda = (ta ? kM : kK) + 3, ldb = (tb ? kK : kN) + 5, ldc = kN + 7;
      const Vec a = random_floats((ta ? kK : kM) * lda, ++seed);
      const Vec b = random_floats((tb ? kN : kK) * ldb, ++seed);
      const Vec c = random_floats(kM * ldc, ++seed);
      float* gc = up(c);
      gpu().gemm(DType::f32, ta, tb, kM, kN, kK, 0.75f, up(a), lda, up(b), ldb, 0.5f, gc, ldc);
      Vec want = c;
      cpu().gemm(DType::f32, ta, tb, kM, kN, kK, 0.75f, a.data(), lda, b.data(), ldb, 0.5f,
                 want.data(), ldc);
      EXPECT_TRUE(all_close(down(gc, kM * ldc), want, 1e-5));

      const U16 a16 = cuda::test::to_bf16(a), b16 = cuda::test::to_bf16(b);
      float* gc16 = up(c);
      gpu().gemm(DType::bf16, ta, tb, kM, kN, kK, 1.0f, up(a16), lda, up(b16), ldb, 1.0f, gc16,
                 ldc);
      Vec want16 = c;
      cpu().gemm(DType::bf16, ta, tb, kM, kN, kK, 1.0f, a16.data(), lda, b16.data(), ldb, 1.0f,
                 want16.data(), ldc);
      EXPECT_TRUE(all_close(down(gc16, kM * ldc), want16, 1e-2));
    }
  }
  // k = 0: C = beta * C (beta = 0 writes zeros), as on the CPU.
  for (float beta : {0.5f, 0.0f}) {
    const Vec c = random_floats(kM * kN, 3);
    float* gc = up(c);
    gpu().gemm(DType::f32, false, false, kM, kN, 0, 1.0f, gc, kN, gc, kN, beta, gc, kN);
    Vec want = c;
    cpu().gemm(DType::f32, false, false, kM, kN, 0, 1.0f, want.data(), kN, want.data(), kN, beta,
               want.data(), kN);
    EXPECT_TRUE(bitwise_equal(down(gc, kM * kN), want)) << "beta " << beta;
  }
}

TEST_F(CudaBackendTest, LinearF32MatchesTheCpu) {
  REQUIRE_GPU();
  constexpr int64_t n = 37, in = 53, out = 29;
  const Vec x = random_floats(n * in, 21), w = random_floats(out * in, 22);
  const Vec bias = random_floats(out, 23), dy = random_floats(n * out, 24);
  const Vec dw0 = random_floats(out * in, 25), db0 = random_floats(out, 26);
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "bias " << with_bias);
    float* gy = zeros(n * out);
    gpu().linear_forward(DType::f32, gy, up(x), up(w), with_bias ? up(bias) : nullptr, {n, in, out},
                         {});
    Vec y(n * out);
    cpu().linear_forward(DType::f32, y.data(), x.data(), w.data(),
                         with_bias ? bias.data() : nullptr, {n, in, out}, {});
    EXPECT_TRUE(all_close(down(gy, n * out), y, 1e-5));

    // dw and dbias accumulate onto what is there; dx is overwritten (or skipped when null).
    float *gdx = up(random_floats(n * in, 27)), *gdw = up(dw0), *gdb = up(db0);
    gpu().linear_backward(DType::f32, gdx, gdw, with_bias ? gdb : nullptr, up(dy), up(x), up(w),
                          {n, in, out}, {});
    Vec dx(n * in), dw = dw0, db = db0;
    cpu().linear_backward(DType::f32, dx.data(), dw.data(), with_bias ? db.data() : nullptr,
                          dy.data(), x.data(), w.data(), {n, in, out}, {});
    EXPECT_TRUE(all_close(down(gdx, n * in), dx, 1e-5));
    EXPECT_TRUE(all_close(down(gdw, out * in), dw, 1e-5));
    EXPECT_TRUE(all_close(down(gdb, out), db, 1e-5));
    gpu().linear_backward(DType::f32, nullptr, gdw, nullptr, up(dy), up(x), up(w), {n, in, out},
                          {});
    cpu().linear_backward(DType::f32, nullptr, dw.data(), nullptr, dy.data(), x.data(), w.data(),
                          {n, in, out}, {});
    EXPECT_TRUE(all_close(down(gdw, out * in), dw, 1e-5));
  }
}

TEST_F(CudaBackendTest, LinearLowpMatchesTheCpuInBf16AndF16) {
  REQUIRE_GPU();
  constexpr int64_t n = 37, out = 29;
  constexpr int64_t capacity = 3 * out + 5;  // 3 rows per dy block: 13 blocks, the last of 1 row
  // in = 56 keeps every block's x and dx rows 16-byte aligned; in = 53 gives 2-byte aligned
  // sub-views, which GemmLt must plan for (a failure there alone is about alignment).
  for (const auto& [t, in] :
       {std::pair{DType::bf16, int64_t{56}}, std::pair{DType::f16, int64_t{56}},
        std::pair{DType::bf16, int64_t{53}}, std::pair{DType::f16, int64_t{53}}}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(t) << " in=" << in);
    const Vec xf = random_floats(n * in, 31), wf = random_floats(out * in, 32);
    const Vec bias = random_floats(out, 33), dy = random_floats(n * out, 34);
    const Vec dw0 = random_floats(out * in, 35), db0 = random_floats(out, 36);
    U16 x(xf.size()), w(wf.size());
    cpu().to_lowp(t, x.data(), xf.data(), int64_t(xf.size()));
    cpu().to_lowp(t, w.data(), wf.data(), int64_t(wf.size()));
    // The CPU widens f16 operands into this; the GPU multiplies f16 directly (no scratch).
    Vec scratch(static_cast<size_t>(kernels::lowp_f32_scratch(n, in, out, capacity)));

    float* gy = zeros(n * out);
    gpu().linear_forward(t, gy, up(x), up(w), up(bias), {n, in, out}, {});
    Vec y(n * out);
    cpu().linear_forward(t, y.data(), x.data(), w.data(), bias.data(), {n, in, out},
                         {nullptr, 0, scratch.data()});
    EXPECT_TRUE(all_close(down(gy, n * out), y, 1e-2));

    float *gdx = zeros(n * in), *gdw = up(dw0), *gdb = up(db0);
    uint16_t* gdy_lowp = zeros<uint16_t>(capacity);
    gpu().linear_backward(t, gdx, gdw, gdb, up(dy), up(x), up(w), {n, in, out},
                          {gdy_lowp, capacity, nullptr});
    Vec dx(n * in), dw = dw0, db = db0;
    U16 dy_lowp(capacity);
    cpu().linear_backward(t, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                          {n, in, out}, {dy_lowp.data(), capacity, scratch.data()});
    EXPECT_TRUE(all_close(down(gdx, n * in), dx, 1e-2));
    EXPECT_TRUE(all_close(down(gdw, out * in), dw, 1e-2));
    EXPECT_TRUE(all_close(down(gdb, out), db, 1e-5));  // from the f32 dy on both
  }
}

TEST_F(CudaBackendTest, LowpConversionsAreTheCpusBitForBit) {
  REQUIRE_GPU();
  // Every magnitude f16 and bf16 have (and beyond), both signs, plus the corners: zeros,
  // infinities, NaNs with payloads, f16's largest finite value and the first that overflows,
  // f16 subnormals, f32 subnormals, and exact ties.
  Vec x = random_floats(4001, 41);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(x[i], int(i % 80) - 40);
  for (uint32_t bits :
       {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffc12345u,
        0x7fa00001u, 0x00000001u, 0x807fffffu, 0x477fe000u, 0x477ff000u, 0x477fefffu, 0x33800000u,
        0x33000000u, 0x3f808000u, 0x3f818000u, 0x3f800800u, 0x3f801800u}) {
    float f;
    std::memcpy(&f, &bits, 4);
    x.push_back(f);
  }
  const int64_t count = int64_t(x.size());
  U16 all(65536);  // every bit pattern, for the widening
  for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
  for (DType t : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    uint16_t* g16 = zeros<uint16_t>(count);
    gpu().to_lowp(t, g16, up(x), count);
    U16 want16(x.size());
    cpu().to_lowp(t, want16.data(), x.data(), count);
    EXPECT_TRUE(bitwise_equal(down(g16, count), want16));

    float* g32 = zeros(65536);
    gpu().from_lowp(t, g32, up(all), 65536);
    Vec want32(65536);
    cpu().from_lowp(t, want32.data(), all.data(), 65536);
    EXPECT_TRUE(bitwise_equal(down(g32, 65536), want32));
  }
}

// ---- embeddings ---------------------------------------------------------------------------------

TEST_F(CudaBackendTest, EmbeddingsAndPositionsMatchTheCpuBitwise) {
  REQUIRE_GPU();
  constexpr int64_t b = 3, t = 13, c = 67, vocab = 50, n = b * t;
  const I32 tokens = random_tokens(n, vocab, 51);  // 39 tokens of 50: repeats
  const Vec wte = random_floats(vocab * c, 52), wpe = random_floats(t * c, 53);
  const Vec dout = random_floats(n * c, 54);
  for (bool with_wpe : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "wpe " << with_wpe);
    float* gout = zeros(n * c);
    gpu().embedding_forward(gout, up(tokens), up(wte), with_wpe ? up(wpe) : nullptr, b, t, c);
    Vec out(n * c);
    cpu().embedding_forward(out.data(), tokens.data(), wte.data(), with_wpe ? wpe.data() : nullptr,
                            b, t, c);
    EXPECT_TRUE(bitwise_equal(down(gout, n * c), out));

    Vec dwte = random_floats(vocab * c, 55), dwpe = random_floats(t * c, 56);
    float *gdwte = up(dwte), *gdwpe = up(dwpe);
    gpu().embedding_backward(gdwte, with_wpe ? gdwpe : nullptr, up(dout), up(tokens), b, t, c);
    cpu().embedding_backward(dwte.data(), with_wpe ? dwpe.data() : nullptr, dout.data(),
                             tokens.data(), b, t, c);
    EXPECT_TRUE(bitwise_equal(down(gdwte, vocab * c), dwte));
    EXPECT_TRUE(bitwise_equal(down(gdwpe, t * c), dwpe));
  }

  // A rank holding vocabulary rows [20, 37): tokens outside give zero rows and no gradient.
  constexpr int64_t begin = 20, rows = 17;
  const Vec wte_rows(wte.begin() + begin * c, wte.begin() + (begin + rows) * c);
  float* gout = up(random_floats(n * c, 57));
  gpu().embedding_range_forward(gout, up(tokens), up(wte_rows), begin, rows, n, c);
  Vec out(n * c);
  cpu().embedding_range_forward(out.data(), tokens.data(), wte_rows.data(), begin, rows, n, c);
  EXPECT_TRUE(bitwise_equal(down(gout, n * c), out));
  Vec drows = random_floats(rows * c, 58);
  float* gdrows = up(drows);
  gpu().embedding_range_backward(gdrows, up(dout), up(tokens), begin, rows, n, c);
  cpu().embedding_range_backward(drows.data(), dout.data(), tokens.data(), begin, rows, n, c);
  EXPECT_TRUE(bitwise_equal(down(gdrows, rows * c), drows));

  // Rows [5, 5 + 29) of sequences of length 11: the positions wrap around, twice.
  constexpr int64_t first = 5, m = 29, tp = 11;
  const Vec pos = random_floats(tp * c, 59);
  Vec acts = random_floats(m * c, 60);
  float* gacts = up(acts);
  gpu().positions_add_forward(gacts, up(pos), first, m, tp, c, nullptr);
  cpu().positions_add_forward(acts.data(), pos.data(), first, m, tp, c, nullptr);
  EXPECT_TRUE(bitwise_equal(down(gacts, m * c), acts));
  Vec dpos = random_floats(tp * c, 61);
  float* gdpos = up(dpos);
  gpu().positions_add_backward(gdpos, up(dout), first, m, tp, c, nullptr);
  cpu().positions_add_backward(dpos.data(), dout.data(), first, m, tp, c, nullptr);
  EXPECT_TRUE(bitwise_equal(down(gdpos, tp * c), dpos));
}

// ---- norms, activations, RoPE ------------------------------------------------------------------

TEST_F(CudaBackendTest, NormsMatchTheCpu) {
  REQUIRE_GPU();
  constexpr int64_t c = 771;
  for (int64_t n : {37, 301}) {  // the second, larger shape grows the backend's scratch
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const Vec x = random_floats(n * c, 71, -3.0f, 3.0f), w = random_floats(c, 72);
    const Vec bias = random_floats(c, 73), dy = random_floats(n * c, 74);
    const Vec dx0 = random_floats(n * c, 75), dw0 = random_floats(c, 76),
              db0 = random_floats(c, 77);
    float *gy = zeros(n * c), *gmean = zeros(n), *grstd = zeros(n);
    gpu().layernorm_forward(gy, gmean, grstd, up(x), up(w), up(bias), n, c, 1e-5f);
    Vec y(n * c), mean(n), rstd(n);
    cpu().layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), n,
                            c, 1e-5f);
    EXPECT_TRUE(all_close(down(gy, n * c), y, 1e-5));
    EXPECT_TRUE(all_close(down(gmean, n), mean, 1e-5));
    EXPECT_TRUE(all_close(down(grstd, n), rstd, 1e-5));
    // dx accumulates (the residual stream's gradient), dw and dbias too.
    float *gdx = up(dx0), *gdw = up(dw0), *gdb = up(db0);
    gpu().layernorm_backward(gdx, gdw, gdb, up(dy), up(x), up(w), up(mean), up(rstd), n, c);
    Vec dx = dx0, dw = dw0, db = db0;
    cpu().layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                             mean.data(), rstd.data(), n, c);
    EXPECT_TRUE(all_close(down(gdx, n * c), dx, 1e-5));
    EXPECT_TRUE(all_close(down(gdw, c), dw, 1e-4));
    EXPECT_TRUE(all_close(down(gdb, c), db, 1e-4));

    gpu().rmsnorm_forward(gy, grstd, up(x), up(w), n, c, 1e-6f);
    cpu().rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), n, c, 1e-6f);
    EXPECT_TRUE(all_close(down(gy, n * c), y, 1e-5));
    EXPECT_TRUE(all_close(down(grstd, n), rstd, 1e-5));
    gdx = up(dx0), gdw = up(dw0), dx = dx0, dw = dw0;
    gpu().rmsnorm_backward(gdx, gdw, up(dy), up(x), up(w), up(rstd), n, c);
    cpu().rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), n, c);
    EXPECT_TRUE(all_close(down(gdx, n * c), dx, 1e-5));
    EXPECT_TRUE(all_close(down(gdw, c), dw, 1e-4));
  }
}

TEST_F(CudaBackendTest, ActivationsAndRopeMatchTheCpu) {
  REQUIRE_GPU();
  constexpr int64_t count = 4099;
  const Vec x = random_floats(count, 81, -6.0f, 6.0f), dy = random_floats(count, 82);
  float* gy = zeros(count);
  gpu().gelu_forward(DType::f32, gy, up(x), count);
  Vec y(count);
  cpu().gelu_forward(DType::f32, y.data(), x.data(), count);
  EXPECT_TRUE(all_close(down(gy, count), y, 1e-5));
  uint16_t* gy16 = zeros<uint16_t>(count);
  gpu().gelu_forward(DType::bf16, gy16, up(x), count);
  U16 y16(count);
  cpu().gelu_forward(DType::bf16, y16.data(), x.data(), count);
  // The f32 values may differ in their last bits, so the bf16 ones by one step (2^-8 relative).
  EXPECT_TRUE(all_close(widen_bf16(down(gy16, count)), widen_bf16(y16), 1e-2));
  float* gdx = zeros(count);
  gpu().gelu_backward(gdx, up(x), up(dy), count);
  Vec dx(count);
  cpu().gelu_backward(dx.data(), x.data(), dy.data(), count);
  EXPECT_TRUE(all_close(down(gdx, count), dx, 1e-5));

  constexpr int64_t n = 37, f = 111;
  const Vec gu = random_floats(n * 2 * f, 83, -4.0f, 4.0f), dys = random_floats(n * f, 84);
  float* gys = zeros(n * f);
  gpu().swiglu_forward(gys, up(gu), n, f);
  Vec ys(n * f);
  cpu().swiglu_forward(ys.data(), gu.data(), n, f);
  EXPECT_TRUE(all_close(down(gys, n * f), ys, 1e-5));
  float* gdgu = zeros(n * 2 * f);
  gpu().swiglu_backward(gdgu, up(gu), up(dys), n, f);
  Vec dgu(n * 2 * f);
  cpu().swiglu_backward(dgu.data(), gu.data(), dys.data(), n, f);
  EXPECT_TRUE(all_close(down(gdgu, n * 2 * f), dgu, 1e-5));

  constexpr int64_t b = 2, t = 13, nh = 4, nkv = 2, hd = 64;
  constexpr int64_t width = (nh + 2 * nkv) * hd;
  Vec qkv = random_floats(b * t * width, 85);
  float* gqkv = up(qkv);
  gpu().rope_forward(gqkv, {b, t, nh, nkv, hd}, RopeSpec{}, nullptr);
  cpu().rope_forward(qkv.data(), {b, t, nh, nkv, hd}, RopeSpec{}, nullptr);
  EXPECT_TRUE(all_close(down(gqkv, b * t * width), qkv, 1e-5));
  const RopeSpec llama3{.theta = 500000.0, .scaling = RopeScaling::llama3};
  gpu().rope_backward(gqkv, {b, t, nh, nkv, hd}, llama3, nullptr);
  cpu().rope_backward(qkv.data(), {b, t, nh, nkv, hd}, llama3, nullptr);
  EXPECT_TRUE(all_close(down(gqkv, b * t * width), qkv, 1e-5));

  // Qwen3's per-head norms of q and k: forward in place, kept inputs, and the backward.
  const AttentionShape hs{b, t, nh, nkv, hd};
  const int64_t kept = hs.rows() * hs.qk_heads();
  const Vec wq = random_floats(hd, 86), wk = random_floats(hd, 87),
            dqkv = random_floats(b * t * width, 88);
  float* gpre = zeros(kept * hd);
  float* grstd = zeros(kept);
  gpu().head_rmsnorm_forward(gqkv, gpre, grstd, up(wq), up(wk), hs, 1e-6f);
  Vec pre(kept * hd), rstd(kept);
  cpu().head_rmsnorm_forward(qkv.data(), pre.data(), rstd.data(), wq.data(), wk.data(), hs, 1e-6f);
  EXPECT_TRUE(all_close(down(gqkv, b * t * width), qkv, 1e-5));
  EXPECT_TRUE(all_close(down(grstd, kept), rstd, 1e-5));
  float* gd = up(dqkv);
  float* gdwq = zeros(hd);
  float* gdwk = zeros(hd);
  gpu().head_rmsnorm_backward(gd, gdwq, gdwk, gpre, grstd, up(wq), up(wk), hs);
  Vec d = dqkv, dwq(hd, 0.0f), dwk(hd, 0.0f);
  cpu().head_rmsnorm_backward(d.data(), dwq.data(), dwk.data(), pre.data(), rstd.data(), wq.data(),
                              wk.data(), hs);
  EXPECT_TRUE(all_close(down(gd, b * t * width), d, 1e-4));
  EXPECT_TRUE(all_close(down(gdwq, hd), dwq, 1e-4));
  EXPECT_TRUE(all_close(down(gdwk, hd), dwk, 1e-4));
}

// ---- attention ----------------------------------------------------------------------------------

TEST_F(CudaBackendTest, FlashAttentionMatchesTheCpuInF32AndBf16) {
  REQUIRE_GPU();
  constexpr int64_t b = 2, t = 37, nh = 4, nkv = 2, hd = 64;
  constexpr int64_t nqkv = b * t * (nh + 2 * nkv) * hd, nout = b * t * nh * hd, nlse = b * nh * t;
  const Vec qkv = cuda::test::normal(nqkv, 91), dout = cuda::test::normal(nout, 92);
  const U16 qkv16 = cuda::test::to_bf16(qkv);
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f32");
    float *gout = zeros(nout), *glse = zeros(nlse), *gdqkv = zeros(nqkv);
    Vec out(nout), lse(nlse), dqkv(nqkv);
    const DType qt = bf16 ? DType::bf16 : DType::f32;
    const int64_t gscratch = gpu().flash_attention_backward_scratch(qt, {b, t, nh, nkv, hd});
    const int64_t cscratch = cpu().flash_attention_backward_scratch(qt, {b, t, nh, nkv, hd});
    EXPECT_GE(gscratch, b * nh * t);  // the kernels' D = rowsum(dO o O), one float per row
    float* gs = zeros(gscratch);
    Vec scratch(static_cast<size_t>(cscratch));
    if (bf16) {
      uint16_t* gq = up(qkv16);
      gpu().flash_attention_forward(qt, gout, glse, gq, {b, t, nh, nkv, hd});
      gpu().flash_attention_backward(qt, gdqkv, gs, up(dout), gq, gout, glse, {b, t, nh, nkv, hd});
      cpu().flash_attention_forward(qt, out.data(), lse.data(), qkv16.data(), {b, t, nh, nkv, hd});
      cpu().flash_attention_backward(qt, dqkv.data(), scratch.data(), dout.data(), qkv16.data(),
                                     out.data(), lse.data(), {b, t, nh, nkv, hd});
    } else {
      float* gq = up(qkv);
      gpu().flash_attention_forward(qt, gout, glse, gq, {b, t, nh, nkv, hd});
      gpu().flash_attention_backward(qt, gdqkv, gs, up(dout), gq, gout, glse, {b, t, nh, nkv, hd});
      cpu().flash_attention_forward(qt, out.data(), lse.data(), qkv.data(), {b, t, nh, nkv, hd});
      cpu().flash_attention_backward(qt, dqkv.data(), scratch.data(), dout.data(), qkv.data(),
                                     out.data(), lse.data(), {b, t, nh, nkv, hd});
    }
    // test_flash_attention.cc's tolerances: bf16 values a hair from a rounding boundary may round
    // differently on the two sides.
    const double tol = bf16 ? 2e-2 : 1e-4;
    EXPECT_TRUE(close_scaled(down(gout, nout), out, tol));
    EXPECT_TRUE(close_scaled(down(glse, nlse), lse, 1e-4));
    EXPECT_TRUE(close_scaled(down(gdqkv, nqkv), dqkv, tol));
  }
}

// ---- loss ---------------------------------------------------------------------------------------

TEST_F(CudaBackendTest, CrossEntropyMatchesTheCpuWithF32AndBf16Gradients) {
  REQUIRE_GPU();
  struct Case {
    int64_t n, v;
    bool row0_ignored;
  };
  // n = 37 runs the bf16 form in blocks {0}, {1}, {2,3}, ..., {16..31}, {32..36}; v = 1001 is
  // two chunks of the row-0 pass; v = 130 is less than a block of threads.
  for (const Case& cs : {Case{37, 1001, false}, Case{37, 1001, true}, Case{5, 130, false}}) {
    const int64_t n = cs.n, v = cs.v;
    SCOPED_TRACE(::testing::Message() << "n=" << n << " v=" << v << " row0 " << cs.row0_ignored);
    const Vec logits = random_floats(n * v, 101, -6.0f, 6.0f);
    I32 targets = random_tokens(n, int32_t(v), 102);
    for (int64_t i = 0; i < n; ++i) {  // ignored rows (a loop: GCC's null-dereference warning)
      if (i == 3 || (i == 0 && cs.row0_ignored)) targets[size_t(i)] = i == 3 ? -1 : -100;
    }
    const float grad_scale = 1.0f / float(n);
    int32_t* gt = up(targets);

    float* glosses = zeros(n);
    const double gtotal = gpu().cross_entropy_forward(glosses, up(logits), gt, n, v);
    Vec losses(n);
    const double total =
        cpu().cross_entropy_forward(losses.data(), logits.data(), targets.data(), n, v);
    EXPECT_TRUE(all_close(down(glosses, n), losses, 1e-5));
    EXPECT_NEAR(gtotal, total, 1e-5 * std::abs(total));

    float* glog = up(logits);
    const double gtotal_fb =
        gpu().cross_entropy_forward_backward(DType::f32, glosses, glog, gt, n, v, grad_scale);
    Vec grads = logits;
    const double total_fb = cpu().cross_entropy_forward_backward(
        DType::f32, losses.data(), grads.data(), targets.data(), n, v, grad_scale);
    EXPECT_TRUE(all_close(down(glosses, n), losses, 1e-5));
    EXPECT_NEAR(gtotal_fb, total_fb, 1e-5 * std::abs(total_fb));
    EXPECT_TRUE(rel_close(down(glog, n * v), grads, 1e-5, 1e-12));

    // bf16 gradient over the logits' own storage: compare the uint16_t views' first n * v.
    float* glog16 = up(logits);
    const double gtotal16 =
        gpu().cross_entropy_forward_backward(DType::bf16, glosses, glog16, gt, n, v, grad_scale);
    Vec store = logits;
    const double total16 = cpu().cross_entropy_forward_backward(
        DType::bf16, losses.data(), store.data(), targets.data(), n, v, grad_scale);
    EXPECT_TRUE(all_close(down(glosses, n), losses, 1e-5));
    EXPECT_NEAR(gtotal16, total16, 1e-5 * std::abs(total16));
    const Vec got_store = down(glog16, n * v);
    U16 got16(n * v), want16(n * v);
    std::memcpy(got16.data(), got_store.data(), got16.size() * 2);
    std::memcpy(want16.data(), store.data(), want16.size() * 2);
    // One bf16 step (2^-8 relative) apart at most: a value a hair from a rounding boundary.
    EXPECT_TRUE(rel_close(widen_bf16(got16), widen_bf16(want16), 1e-2, 1e-12));
    for (int64_t i = 0; i < n; ++i) {
      if (targets[i] >= 0) continue;
      for (int64_t j = 0; j < v; ++j) ASSERT_EQ(got16[i * v + j], 0) << "ignored row " << i;
    }
  }
  // No rows: a zero total.
  EXPECT_EQ(gpu().cross_entropy_forward(zeros(1), zeros(1), zeros<int32_t>(1), 0, 7), 0.0);
}

TEST_F(CudaBackendTest, VocabParallelCrossEntropyMatchesTheCpu) {
  REQUIRE_GPU();
  // This rank holds vocabulary [1000, 1517); targets fall inside, outside, and are ignored.
  constexpr int64_t n = 37, v = 517, begin = 1000;
  const Vec logits = random_floats(n * v, 111, -6.0f, 6.0f);
  I32 targets = random_tokens(n, 700, 112);
  for (auto& tg : targets) tg += 900;
  targets[4] = -1;
  targets[9] = -100;
  int32_t* gt = up(targets);
  float* glog = up(logits);

  float* gmax = zeros(n);
  gpu().vocab_parallel_ce_max(gmax, glog, n, v);
  Vec row_max(n);
  cpu().vocab_parallel_ce_max(row_max.data(), logits.data(), n, v);
  EXPECT_TRUE(bitwise_equal(down(gmax, n), row_max));

  // Each step gets the CPU's inputs, so it is compared on its own.
  float *gsum = zeros(n), *gtl = zeros(n);
  gpu().vocab_parallel_ce_sums(gsum, gtl, glog, up(row_max), gt, n, v, begin);
  Vec sum_exp(n), target_logit(n);
  cpu().vocab_parallel_ce_sums(sum_exp.data(), target_logit.data(), logits.data(), row_max.data(),
                               targets.data(), n, v, begin);
  EXPECT_TRUE(all_close(down(gsum, n), sum_exp, 1e-6));  // double sums in another order
  EXPECT_TRUE(bitwise_equal(down(gtl, n), target_logit));

  for (bool backward : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "backward " << backward);
    float *glosses = zeros(n), *gl = up(logits);
    const double gtotal = gpu().vocab_parallel_ce_finish(
        glosses, gl, up(row_max), up(sum_exp), up(target_logit), gt, n, v, begin, backward, 0.125f);
    Vec losses(n), grads = logits;
    const double total = cpu().vocab_parallel_ce_finish(
        losses.data(), grads.data(), row_max.data(), sum_exp.data(), target_logit.data(),
        targets.data(), n, v, begin, backward, 0.125f);
    EXPECT_TRUE(all_close(down(glosses, n), losses, 1e-6));
    EXPECT_NEAR(gtotal, total, 1e-6 * std::abs(total));
    if (backward) {
      EXPECT_TRUE(rel_close(down(gl, n * v), grads, 1e-5, 1e-12));
    } else {
      EXPECT_TRUE(bitwise_equal(down(gl, n * v), logits));  // untouched without the gradient
    }
  }
}

// ---- element-wise and optimizer
// -------------------------------------------------------------------

TEST_F(CudaBackendTest, ElementwiseOpsMatchTheCpuBitwise) {
  REQUIRE_GPU();
  constexpr int64_t n = 37, c = 111, count = n * c;
  const Vec a = random_floats(count, 121), b = random_floats(count, 122),
            bias = random_floats(c, 123);
  float *ga = up(a), *gb = up(b), *gout = zeros(count);
  Vec out(count), y = a;
  gpu().add(gout, ga, gb, count);
  cpu().add(out.data(), a.data(), b.data(), count);
  EXPECT_TRUE(bitwise_equal(down(gout, count), out));
  gpu().add_inplace(ga, gb, count);
  cpu().add_inplace(y.data(), b.data(), count);
  EXPECT_TRUE(bitwise_equal(down(ga, count), y));
  gpu().scale_inplace(ga, -0.3f, count);
  cpu().scale_inplace(y.data(), -0.3f, count);
  EXPECT_TRUE(bitwise_equal(down(ga, count), y));
  gpu().add_bias(ga, up(bias), n, c);
  cpu().add_bias(y.data(), bias.data(), n, c);
  EXPECT_TRUE(bitwise_equal(down(ga, count), y));
}

TEST_F(CudaBackendTest, AdamwAndSumSquaresMatchTheCpu) {
  REQUIRE_GPU();
  constexpr int64_t count = 10007;
  Vec p = random_floats(count, 131), m(count, 0.0f), v(count, 0.0f);
  float *gp = up(p), *gm = up(m), *gv = up(v);
  uint16_t* gp16 = zeros<uint16_t>(count);
  for (int64_t step = 1; step <= 3; ++step) {
    const Vec g = random_floats(count, 140 + uint32_t(step));
    gpu().adamw_update(gp, up(g), gm, gv, count, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, step, gp16);
    cpu().adamw_update(p.data(), g.data(), m.data(), v.data(), count, 1e-3f, 0.9f, 0.95f, 1e-8f,
                       0.1f, 0.5f, step, nullptr);
    const Vec got_p = down(gp, count);
    EXPECT_TRUE(all_close(got_p, p, 1e-5)) << "step " << step;
    EXPECT_TRUE(all_close(down(gm, count), m, 1e-5)) << "step " << step;
    EXPECT_TRUE(all_close(down(gv, count), v, 1e-5)) << "step " << step;
    // The bf16 working copy is the updated parameters rounded (bit for bit).
    EXPECT_TRUE(bitwise_equal(down(gp16, count), cuda::test::to_bf16(got_p))) << "step " << step;
  }
  const Vec x = random_floats(count, 150, -3.0f, 3.0f);
  const double want = cpu().sum_squares(x.data(), count);
  EXPECT_NEAR(gpu().sum_squares(up(x), count), want, 1e-10 * want);
  EXPECT_EQ(gpu().sum_squares(up(x), 0), 0.0);
}

}  // namespace
}  // namespace strata
