// The link probe (comm/link_probe.h): its round-robin schedule meets every pair of ranks exactly
// once with each rank busy in at most one exchange a round; the scores name the ranks whose
// exchanges with most peers are slow; and the probe itself runs over the world communicator.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <utility>

#include "comm/link_probe.h"
#include "comm_test_util.h"

namespace strata {
namespace {

TEST(LinkProbe, TournamentMeetsEveryPairOnce) {
  for (int n = 1; n <= 13; ++n) {
    std::set<std::pair<int, int>> met;
    for (int round = 0; round < probe_rounds(n); ++round) {
      int busy = 0;
      for (int r = 0; r < n; ++r) {
        const int p = probe_partner(r, n, round);
        if (p < 0) continue;
        ++busy;
        ASSERT_NE(p, r) << "n " << n << " round " << round;
        ASSERT_EQ(probe_partner(p, n, round), r) << "n " << n << " round " << round;
        if (r < p) {
          EXPECT_TRUE(met.insert({r, p}).second) << "n " << n << ": pair met twice";
        }
      }
      EXPECT_EQ(busy, n % 2 == 0 ? n : n - 1) << "n " << n << " round " << round;
    }
    EXPECT_EQ(static_cast<int>(met.size()), n * (n - 1) / 2) << "n " << n;
  }
}

TEST(LinkProbe, ScoresSingleOutTheRanksBehindASlowLink) {
  // Three hosts of two ranks; host 1's (ranks 2, 3) link is slow: every exchange crossing it
  // takes 0.2 s, the others 1 ms, inside a host 0.1 ms.
  const int n = 6;
  std::vector<float> m(n * n, 0.0f);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const bool same_host = i / 2 == j / 2, crosses = (i / 2 == 1) != (j / 2 == 1);
      m[static_cast<size_t>(i * n + j)] = same_host ? 1e-4f : crosses ? 0.2f : 1e-3f;
    }
  const std::vector<float> s = link_scores(m, n);
  for (int i = 0; i < n; ++i) EXPECT_FLOAT_EQ(s[static_cast<size_t>(i)], i / 2 == 1 ? 0.2f : 1e-3f);
  EXPECT_THROW(link_scores(m, 5), Error);
}

TEST(LinkProbe, TimesAnExchangeWithEveryPeer) {
  MpiComm& world = testing::world();
  const std::vector<float> s = probe_links(world, 64 * 1024);
  ASSERT_EQ(static_cast<int>(s.size()), world.size());
  for (int p = 0; p < world.size(); ++p) {
    if (p == world.rank()) {
      EXPECT_EQ(s[static_cast<size_t>(p)], 0.0f);
    } else {
      EXPECT_GT(s[static_cast<size_t>(p)], 0.0f) << "peer " << p;
      EXPECT_LT(s[static_cast<size_t>(p)], 10.0f) << "peer " << p;
    }
  }
}

}  // namespace
}  // namespace strata
