#include <gtest/gtest.h>

#include <algorithm>

#include "alloc_counter.h"
#include "data/loader.h"
#include "data/shard.h"
#include "test_util.h"

namespace strata::data {
namespace {

using testing::allocation_count;
using testing::TempDir;

// Tokens 0, 1, 2, ... (token value == stream position) over three shards, one of them empty,
// so windows that straddle shard boundaries are checked too.
struct Corpus {
  TempDir dir;
  std::vector<std::string> paths;
  int64_t tokens;
  static constexpr int64_t kVocab = 1 << 20;

  explicit Corpus(int64_t n) : tokens(n) {
    const int64_t cut[4] = {0, n / 3, n / 3, n};  // shard 1 is empty
    for (int s = 0; s < 3; ++s) {
      std::vector<int32_t> t;
      for (int64_t i = cut[s]; i < cut[s + 1]; ++i) t.push_back(static_cast<int32_t>(i));
      paths.push_back(dir.file(shard_name("train", s)));
      write_shard(paths.back(), t, kVocab);
    }
  }
  DataLoader loader(int64_t batch, int64_t seq, uint64_t seed, int64_t rank = 0, int64_t world = 1,
                    bool shuffle = true) const {
    return DataLoader(paths, batch, seq, seed, rank, world, kVocab, shuffle);
  }
};

struct Batch {
  std::vector<int32_t> in, tg;
  bool operator==(const Batch&) const = default;
};

Batch next(Loader& l, int64_t batch, int64_t seq) {
  Batch b{std::vector<int32_t>(batch * seq), std::vector<int32_t>(batch * seq)};
  l.next(b.in.data(), b.tg.data());
  return b;
}

TEST(DataLoader, WindowsAndTargets) {
  const Corpus c(1000);
  DataLoader l = c.loader(4, 16, 1);
  EXPECT_EQ(l.tokens(), 1000);
  EXPECT_EQ(l.samples_per_epoch(), 999 / 16);
  for (int step = 0; step < 20; ++step) {
    const Batch b = next(l, 4, 16);
    for (int s = 0; s < 4; ++s) {
      const int32_t start = b.in[s * 16];
      EXPECT_EQ(start % 16, 0);  // windows at stride seq_len
      for (int t = 0; t < 16; ++t) {
        EXPECT_EQ(b.in[s * 16 + t], start + t);
        EXPECT_EQ(b.tg[s * 16 + t], start + t + 1);  // targets: inputs shifted by one
      }
    }
  }
}

TEST(DataLoader, EveryTokenOncePerEpoch) {
  const Corpus c(30 * 8 + 5);  // 30 samples of 8 plus a tail that is never an input
  for (int epoch = 0; epoch < 2; ++epoch) {
    DataLoader l = c.loader(5, 8, 3);
    l.restore({static_cast<uint64_t>(epoch), 0});
    std::vector<int> seen(c.tokens, 0);
    std::vector<int32_t> order;
    for (int step = 0; step < 6; ++step) {
      const Batch b = next(l, 5, 8);
      for (int32_t t : b.in) ++seen[t];
      for (int s = 0; s < 5; ++s) order.push_back(b.in[s * 8] / 8);
    }
    for (int64_t i = 0; i < c.tokens; ++i) ASSERT_EQ(seen[i], i < 240 ? 1 : 0) << "token " << i;
    EXPECT_EQ(l.state(), (LoaderState{static_cast<uint64_t>(epoch) + 1, 0}));
    std::vector<int32_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_NE(order, sorted) << "shuffle should not give sequential order";
  }
}

TEST(DataLoader, EpochsUseDifferentPermutations) {
  const Corpus c(64 * 4 + 1);
  DataLoader l = c.loader(64, 4, 9);
  const Batch e0 = next(l, 64, 4), e1 = next(l, 64, 4);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(l.state(), (LoaderState{2, 0}));
}

TEST(DataLoader, SequentialWithoutShuffle) {
  const Corpus c(500);
  DataLoader l = c.loader(3, 10, 1, 0, 1, false);
  for (int step = 0; step < 5; ++step) {
    const Batch b = next(l, 3, 10);
    for (int s = 0; s < 3; ++s) EXPECT_EQ(b.in[s * 10], (step * 3 + s) * 10);
  }
}

TEST(DataLoader, SameSeedSameBatchesDifferentSeedDifferent) {
  const Corpus c(5000);
  DataLoader a = c.loader(4, 32, 7), b = c.loader(4, 32, 7), d = c.loader(4, 32, 8);
  bool any_diff = false;
  for (int step = 0; step < 10; ++step) {
    const Batch ba = next(a, 4, 32);
    EXPECT_EQ(ba, next(b, 4, 32));
    any_diff |= ba != next(d, 4, 32);
  }
  EXPECT_TRUE(any_diff);
}

TEST(DataLoader, RestoreContinuesIdentically) {
  const Corpus c(46 * 16 + 1);
  DataLoader a = c.loader(4, 16, 5);
  for (int step = 0; step < 13; ++step) next(a, 4, 16);  // crosses an epoch end (46 samples)
  const LoaderState saved = a.state();
  EXPECT_EQ(saved.epoch, 1u);
  const nlohmann::json j = saved;
  DataLoader b = c.loader(4, 16, 5);
  b.restore(j.get<LoaderState>());
  EXPECT_EQ(b.position_string(), a.position_string());
  for (int step = 0; step < 20; ++step) ASSERT_EQ(next(a, 4, 16), next(b, 4, 16));
}

// World W with batch B sees exactly the global batches of one process with batch W*B, also
// across epoch ends (here the global batch does not divide the epoch).
TEST(DataLoader, DataParallelShardingMatchesSingleProcess) {
  const Corpus c(37 * 8 + 1);  // 37 samples
  DataLoader single = c.loader(6, 8, 11);
  DataLoader r0 = c.loader(3, 8, 11, 0, 2), r1 = c.loader(3, 8, 11, 1, 2);
  for (int step = 0; step < 20; ++step) {
    const Batch all = next(single, 6, 8), b0 = next(r0, 3, 8), b1 = next(r1, 3, 8);
    std::vector<int32_t> joined = b0.in;
    joined.insert(joined.end(), b1.in.begin(), b1.in.end());
    ASSERT_EQ(joined, all.in) << "step " << step;
    EXPECT_EQ(r0.state(), single.state());
    EXPECT_EQ(r1.state(), single.state());
  }
}

TEST(DataLoader, NextDoesNotAllocate) {
  if (allocation_count() < 0) GTEST_SKIP() << "allocations are not counted in this build (TSan)";
  const Corpus c(4000);
  DataLoader l = c.loader(8, 64, 1);
  std::vector<int32_t> in(8 * 64), tg(8 * 64);
  const int64_t before = allocation_count();
  for (int step = 0; step < 50; ++step) l.next(in.data(), tg.data());
  EXPECT_EQ(allocation_count() - before, 0);
  SyntheticLoader s(8, 64, 1, 0, 1, 1000);
  const int64_t before_s = allocation_count();
  for (int step = 0; step < 50; ++step) s.next(in.data(), tg.data());
  EXPECT_EQ(allocation_count() - before_s, 0);
}

TEST(DataLoader, PositionString) {
  const Corpus c(1000);
  DataLoader l = c.loader(2, 10, 1, 0, 1, false);
  next(l, 2, 10);
  EXPECT_EQ(l.position_string(), "epoch 0 sample 2 (train_000.bin token 20)");
  l.restore({0, 40});  // sample 40 starts at token 400, in the third shard (which starts at 333)
  EXPECT_EQ(l.position_string(), "epoch 0 sample 40 (train_002.bin token 67)");
}

TEST(DataLoader, Errors) {
  const Corpus c(100);
  EXPECT_THROW(c.loader(1, 100, 1), Error);       // needs 101 tokens
  EXPECT_THROW(c.loader(1, 10, 1, 2, 2), Error);  // rank outside world
  try {
    DataLoader(c.paths, 1, 10, 1, 0, 1, 50, true);  // tokens up to 99 with a vocabulary of 50
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train_002.bin"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nlohmann::json({{"epoch", -1}}).get<LoaderState>(), Error);
}

TEST(SyntheticLoader, DeterministicShardedAndInRange) {
  SyntheticLoader single(4, 16, 3, 0, 1, 100);
  SyntheticLoader r0(2, 16, 3, 0, 2, 100), r1(2, 16, 3, 1, 2, 100);
  SyntheticLoader other_seed(4, 16, 4, 0, 1, 100);
  for (int step = 0; step < 5; ++step) {
    const Batch all = next(single, 4, 16), b0 = next(r0, 2, 16), b1 = next(r1, 2, 16);
    std::vector<int32_t> joined = b0.in;
    joined.insert(joined.end(), b1.in.begin(), b1.in.end());
    EXPECT_EQ(joined, all.in);
    EXPECT_NE(next(other_seed, 4, 16), all);
    for (int s = 0; s < 4; ++s)
      for (int t = 0; t + 1 < 16; ++t) EXPECT_EQ(all.in[s * 16 + t + 1], all.tg[s * 16 + t]);
    for (int32_t t : all.in) ASSERT_TRUE(t >= 0 && t < 100);
  }
  SyntheticLoader resumed(4, 16, 3, 0, 1, 100);
  resumed.restore(single.state());
  EXPECT_EQ(resumed.position_string(), "synthetic sample 20");
  EXPECT_EQ(next(resumed, 4, 16), next(single, 4, 16));
}

TEST(SyntheticLoader, RoughlyUniform) {
  SyntheticLoader l(64, 64, 1, 0, 1, 8);
  std::vector<int64_t> hist(8, 0);
  for (int step = 0; step < 4; ++step)
    for (int32_t t : next(l, 64, 64).in) ++hist[t];
  for (int64_t h : hist) EXPECT_NEAR(static_cast<double>(h), 4 * 64 * 64 / 8.0, 300);
}

}  // namespace
}  // namespace strata::data
