// The watchdog's rules on made-up timelines (seconds since the job attempt started).
#include <gtest/gtest.h>

#include "launch/watchdog.h"

namespace strata::launch {
namespace {

using Beats = std::vector<std::optional<Heartbeat>>;

Heartbeat beat(int rank, int64_t step, std::string phase = "step") {
  Heartbeat b;
  b.rank = rank;
  b.step = step;
  b.time = 1000.0 + static_cast<double>(step);
  b.phase = std::move(phase);
  b.pid = 100 + rank;
  b.host = "vm";
  return b;
}

Watchdog make(int ranks, double timeout, double startup) {
  WatchdogConfig c;
  c.ranks = ranks;
  c.heartbeat_timeout = timeout;
  c.startup_timeout = startup;
  return Watchdog(c);
}

TEST(Watchdog, QuietUntilTheStartupTimeout) {
  Watchdog w = make(2, 5, 30);
  EXPECT_FALSE(w.check(10, {std::nullopt, std::nullopt}));
  EXPECT_FALSE(w.check(29, {std::nullopt, std::nullopt}));
  const auto s = w.check(31, {std::nullopt, std::nullopt});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->ranks, (std::vector<int>{0, 1}));
  EXPECT_NE(s->message.find("no rank wrote a heartbeat within 30.0 s"), std::string::npos);
}

TEST(Watchdog, HealthyRanksAreNeverSilent) {
  Watchdog w = make(2, 5, 30);
  for (int t = 1; t < 100; ++t) EXPECT_FALSE(w.check(t, {beat(0, t), beat(1, t)}));
}

TEST(Watchdog, NamesTheRankThatStopped) {
  Watchdog w = make(3, 5, 30);
  for (int t = 1; t <= 10; ++t) EXPECT_FALSE(w.check(t, {beat(0, t), beat(1, t), beat(2, t)}));
  // Rank 1 stops at step 10; its file stays as it was.
  for (int t = 11; t <= 15; ++t) EXPECT_FALSE(w.check(t, {beat(0, t), beat(1, 10), beat(2, t)}));
  const auto s = w.check(16, {beat(0, 16), beat(1, 10), beat(2, 16)});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->ranks, std::vector<int>{1});
  EXPECT_EQ(s->message,
            "rank 1 silent for 6.0 s (last heartbeat: step 10, phase \"step\", pid 101 on vm); "
            "heartbeat timeout 5.0 s");
}

TEST(Watchdog, ARankThatNeverBeatsGetsTheTimeoutFromTheFirstBeat) {
  Watchdog w = make(2, 5, 600);
  EXPECT_FALSE(w.check(100, {beat(0, 1), std::nullopt}));  // first beat at 100 s: the grace starts
  EXPECT_FALSE(w.check(105, {beat(0, 6), std::nullopt}));
  const auto s = w.check(106, {beat(0, 7), std::nullopt});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->ranks, std::vector<int>{1});
  EXPECT_NE(s->message.find("rank 1 never wrote a heartbeat"), std::string::npos);
}

TEST(Watchdog, FinishedRanksAreNotSilent) {
  Watchdog w = make(2, 5, 30);
  EXPECT_FALSE(w.check(1, {beat(0, 1), beat(1, 1)}));
  EXPECT_FALSE(w.check(2, {beat(0, 2, kPhaseDone), beat(1, 2)}));
  for (int t = 3; t < 50; ++t) EXPECT_FALSE(w.check(t, {beat(0, 2, kPhaseDone), beat(1, t)}));
}

TEST(Watchdog, DisabledByAZeroTimeout) {
  Watchdog w = make(1, 0, 1);
  EXPECT_FALSE(w.check(1000, {std::nullopt}));
}

}  // namespace
}  // namespace strata::launch
