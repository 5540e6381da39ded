#include <gtest/gtest.h>

#include <cmath>

#include "core/arena.h"
#include "core/dtype.h"
#include "core/philox.h"

namespace strata {

TEST(Arena, AccountsPerCategoryAndPeak) {
  Arena arena;
  void* a = arena.allocate(MemCategory::params, 1000, "a");
  void* b = arena.allocate(MemCategory::activations, 3000, "b");
  EXPECT_EQ(arena.current(MemCategory::params), 1000);
  EXPECT_EQ(arena.current(MemCategory::activations), 3000);
  arena.release(b);
  EXPECT_EQ(arena.current(MemCategory::activations), 0);
  EXPECT_EQ(arena.peak(MemCategory::activations), 3000);
  EXPECT_EQ(arena.stats().total_peak, 4000);
  arena.release(a);
}

TEST(Arena, LimitNamesTheCategory) {
  Arena arena;
  arena.set_limit(4096);
  arena.allocate(MemCategory::params, 4000, "weights");
  try {
    arena.allocate(MemCategory::optimizer, 200, "adam moments");
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
  }
}

TEST(Arena, CountsAllocationsAfterFreeze) {
  Arena arena;
  arena.allocate(MemCategory::workspace, 64, "x");
  arena.freeze();
  EXPECT_EQ(arena.allocations_after_freeze(), 0);
  arena.allocate(MemCategory::workspace, 64, "y");
  EXPECT_EQ(arena.allocations_after_freeze(), 1);
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even one (1.0).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  // 1 + 3*2^-8 is halfway too; the even neighbour is 1 + 2^-6.
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(Philox, MatchesPublishedKnownAnswer) {
  // Random123 known-answer test for philox4x32_10 with counter and key all 0xffffffff... uses
  // zeros here: ctr = {0,0,0,0}, key = {0,0} -> {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}.
  const auto out = Philox::block({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(out[0], 0x6627e8d5u);
  EXPECT_EQ(out[1], 0xe169c58du);
  EXPECT_EQ(out[2], 0xbc57ac4cu);
  EXPECT_EQ(out[3], 0x9b00dbd8u);
}

TEST(Philox, NormalHasUnitMoments) {
  CounterRng rng(7, hash_name("w"));
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = rng.normal(i);
    s += x;
    s2 += x * x;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.01);
}

}  // namespace strata
