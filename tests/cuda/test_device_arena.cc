#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "gpu_test.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_arena.h"

namespace strata::cuda {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Downloads `count` bytes of device memory.
std::vector<uint8_t> bytes_at(const void* ptr, size_t count) {
  std::vector<uint8_t> host(count);
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  STRATA_CUDA_CHECK(cudaMemcpy(host.data(), ptr, count, cudaMemcpyDeviceToHost));
  return host;
}

TEST(DeviceArena, RoundsSmallSizesTo512BytesAndLargeOnesTo2MiB) {
  EXPECT_EQ(DeviceArena::round_size(0), 512u);
  EXPECT_EQ(DeviceArena::round_size(1), 512u);
  EXPECT_EQ(DeviceArena::round_size(512), 512u);
  EXPECT_EQ(DeviceArena::round_size(513), 1024u);
  EXPECT_EQ(DeviceArena::round_size((size_t{1} << 20) - 1), size_t{1} << 20);
  EXPECT_EQ(DeviceArena::round_size(size_t{1} << 20), size_t{2} << 20);
  EXPECT_EQ(DeviceArena::round_size((size_t{2} << 20) + 1), size_t{4} << 20);
}

// The limit is checked before any CUDA call, so this runs without a GPU too.
TEST(DeviceArena, LimitErrorNamesTheCategoryAndTheBytes) {
  DeviceArena arena;
  arena.set_limit(1000);
  EXPECT_EQ(arena.limit(), 1000);
  try {
    arena.alloc<float>(MemCategory::activations, 300, "ln1 output");
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "out of memory")) << what;
    EXPECT_TRUE(contains(what, "'activations'")) << what;
    EXPECT_TRUE(contains(what, "1200 bytes")) << what;
    EXPECT_TRUE(contains(what, "limit of 1000")) << what;
    EXPECT_TRUE(contains(what, "ln1 output")) << what;
  }
  EXPECT_EQ(arena.stats().total_current, 0);
}

TEST(DeviceArena, ReleasingAForeignPointerIsAnError) {
  DeviceArena arena;
  int x = 0;
  EXPECT_THROW(arena.release(&x), Error);
  arena.release(nullptr);  // a no-op, as free(nullptr)
}

TEST(DeviceArena, HandsAReleasedBlockBackZeroFilled) {
  REQUIRE_GPU();
  DeviceArena arena;
  float* a = arena.alloc<float>(MemCategory::params, 1000, "a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 256, 0u);
  const int64_t reserved = arena.reserved_bytes();
  EXPECT_EQ(reserved, 4096);  // 4000 bytes rounded to 512
  for (uint8_t b : bytes_at(a, 4000)) ASSERT_EQ(b, 0);
  STRATA_CUDA_CHECK(cudaMemset(a, 0xff, 4000));
  arena.release(a);
  EXPECT_EQ(arena.cached_bytes(), 4096);
  float* b = arena.alloc<float>(MemCategory::grads, 900, "b");  // 3600 -> 3584: within 25%
  EXPECT_EQ(b, a);
  EXPECT_EQ(arena.reserved_bytes(), reserved);
  EXPECT_EQ(arena.cached_bytes(), 0);
  for (uint8_t x : bytes_at(b, 3600)) ASSERT_EQ(x, 0);
  arena.release(b);
}

TEST(DeviceArena, DoesNotServeASmallRequestFromAMuchLargerBlock) {
  REQUIRE_GPU();
  DeviceArena arena;
  void* big = arena.allocate(MemCategory::workspace, size_t{4} << 20, "big");
  arena.release(big);
  void* small = arena.allocate(MemCategory::workspace, 1024, "small");
  EXPECT_NE(small, big);
  EXPECT_EQ(arena.cached_bytes(), int64_t{4} << 20);
  EXPECT_EQ(arena.reserved_bytes(), (int64_t{4} << 20) + 1024);
  arena.empty_cache();
  EXPECT_EQ(arena.cached_bytes(), 0);
  EXPECT_EQ(arena.reserved_bytes(), 1024);
  arena.release(small);
}

TEST(DeviceArena, AccountsBytesPerCategoryWithPeaks) {
  REQUIRE_GPU();
  DeviceArena arena;
  void* p = arena.allocate(MemCategory::params, 1000, "p");
  void* g = arena.allocate(MemCategory::grads, 3000, "g");
  void* g2 = arena.allocate(MemCategory::grads, 500, "g2");
  EXPECT_EQ(arena.current(MemCategory::params), 1000);
  EXPECT_EQ(arena.current(MemCategory::grads), 3500);
  EXPECT_EQ(arena.current(MemCategory::optimizer), 0);
  EXPECT_EQ(arena.stats().total_current, 4500);
  arena.release(g);
  EXPECT_EQ(arena.current(MemCategory::grads), 500);
  EXPECT_EQ(arena.peak(MemCategory::grads), 3500);
  EXPECT_EQ(arena.stats().total_current, 1500);
  EXPECT_EQ(arena.stats().total_peak, 4500);
  arena.release(p);
  arena.release(g2);
  EXPECT_EQ(arena.stats().total_current, 0);
  EXPECT_EQ(arena.reserved_bytes(), 1024 + 3072 + 512);  // all cached now
}

TEST(DeviceArena, CountsAllocationsAfterFreeze) {
  REQUIRE_GPU();
  DeviceArena arena;
  void* a = arena.allocate(MemCategory::activations, 100, "a");
  arena.freeze();
  EXPECT_EQ(arena.allocations_after_freeze(), 0);
  void* b = arena.allocate(MemCategory::activations, 100, "b");
  void* c = arena.allocate(MemCategory::activations, 100, "c");
  EXPECT_EQ(arena.allocations_after_freeze(), 2);
  arena.unfreeze();
  void* d = arena.allocate(MemCategory::activations, 100, "d");
  EXPECT_EQ(arena.allocations_after_freeze(), 2);
  for (void* ptr : {a, b, c, d}) arena.release(ptr);
}

TEST(DeviceArena, OutOfDeviceMemorySaysWhatItHolds) {
  REQUIRE_GPU();
  DeviceArena arena;
  void* p = arena.allocate(MemCategory::params, 1000, "p");
  try {
    arena.allocate(MemCategory::optimizer, size_t{1} << 50, "adam m");  // a petabyte
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "out of GPU memory")) << what;
    EXPECT_TRUE(contains(what, "adam m")) << what;
    EXPECT_TRUE(contains(what, "'optimizer'")) << what;
    EXPECT_TRUE(contains(what, "params 1000")) << what;
    EXPECT_TRUE(contains(what, "free of")) << what;
  }
  // The failure leaves the arena and the CUDA context usable.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  void* q = arena.allocate(MemCategory::params, 1000, "q");
  EXPECT_NE(q, nullptr);
  arena.release(p);
  arena.release(q);
}

TEST(DeviceArena, IsSafeToUseFromSeveralThreads) {
  REQUIRE_GPU();
  DeviceArena arena;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&arena, t] {
      for (int i = 0; i < 25; ++i) {
        void* ptr = arena.allocate(static_cast<MemCategory>(t), size_t(1000 + 512 * i), "x");
        arena.release(ptr);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(arena.stats().total_current, 0);
  EXPECT_GT(arena.peak(MemCategory::params), 0);
}

}  // namespace
}  // namespace strata::cuda
