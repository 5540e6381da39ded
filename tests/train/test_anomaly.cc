// The detectors (train/anomaly.h) on their own, and in the step loop with injected faults:
// a NaN gradient skips the update and is logged with its data position, K in a row stop the
// run, a loss spike is found by its z-score and its update skipped on request.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "model/decoder.h"
#include "small_run.h"
#include "track/events.h"
#include "train/anomaly.h"
#include "train/diagnose.h"
#include "train/trainer.h"

namespace strata {
namespace {

TEST(LossSpikeDetector, QuietOnNoiseLoudOnAJump) {
  LossSpikeDetector d(20, 10, 6.0);
  for (int i = 0; i < 200; ++i)  // a slowly falling loss with +-1% noise
    EXPECT_FALSE(d.is_spike(5.0 - 0.005 * i + 0.05 * std::sin(i * 1.7))) << i;
  EXPECT_TRUE(d.is_spike(8.0));
  EXPECT_GT(d.last_zscore(), 6.0);
  EXPECT_FALSE(d.is_spike(4.0));  // the spike did not enter the window
  EXPECT_TRUE(d.is_spike(std::nan("")));
}

TEST(LossSpikeDetector, NothingDuringWarmup) {
  LossSpikeDetector d(20, 10, 3.0);
  for (double x : {10.0, 1.0, 50.0, 2.0, 7.0}) EXPECT_FALSE(d.is_spike(x));
}

TEST(Stragglers, NamedAgainstTheMedian) {
  EXPECT_EQ(stragglers({1.0f, 1.1f, 0.9f, 3.0f}, 2.0), std::vector<int>{3});
  EXPECT_TRUE(stragglers({1.0f, 1.1f, 0.9f, 1.5f}, 2.0).empty());
  EXPECT_TRUE(stragglers({1.0f, 9.0f}, 0.0).empty());  // off
}

TEST(SlowLinks, NamedAgainstTheMedianAbove10Ms) {
  EXPECT_EQ(slow_link_ranks({0.001f, 0.001f, 0.2f, 0.2f, 0.001f, 0.001f}, 2.0),
            (std::vector<int>{2, 3}));
  // A link twice as slow but by 2 ms is noise on an idle probe, not a fault.
  EXPECT_TRUE(slow_link_ranks({0.001f, 0.001f, 0.003f}, 2.0).empty());
}

TEST(CommSlowdownDetector, AJumpOnceTheWindowIsKnownThenTheNewNormal) {
  CommSlowdownDetector d(2.0, 20);
  EXPECT_FALSE(d.is_slowdown(0.5f));  // nothing known yet: never
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(d.is_slowdown(i % 2 ? 0.010f : 0.012f)) << i;
  EXPECT_FALSE(d.is_slowdown(0.025f));  // more than 2x, but by less than 20 ms
  EXPECT_TRUE(d.is_slowdown(0.4f));
  EXPECT_NEAR(d.median(), 0.011, 0.0015);
  int flagged = 0;  // a link that stays slow: flagged until it fills half the window
  for (int i = 0; i < 20; ++i) flagged += d.is_slowdown(0.4f);
  EXPECT_GT(flagged, 3);
  EXPECT_LT(flagged, 12);
  EXPECT_FALSE(d.is_slowdown(0.4f));
  CommSlowdownDetector off(0.0, 20);
  for (int i = 0; i < 10; ++i) off.is_slowdown(0.01f);
  EXPECT_FALSE(off.is_slowdown(5.0f));
}

TEST(Diagnose, ASlowLinkIsTheNetworkNotCompute) {
  const std::string dir = ::testing::TempDir() + "strata_diagnose_slow_link";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  append_event(dir, 0, "slow_link", 13,
               {{"ranks", {2, 3}},
                {"hosts", {"strata-7-h2"}},
                {"seconds", {0.21, 0.22}},
                {"median_s", 0.0008},
                {"kib", 256},
                {"compute_s", {0.05, 0.05}},
                {"median_compute_s", 0.05},
                {"trigger", "slowdown"}});
  const std::vector<Finding> f = diagnose_run(dir);
  const auto it =
      std::find_if(f.begin(), f.end(), [](const Finding& x) { return x.kind == "slow_link"; });
  ASSERT_NE(it, f.end());
  EXPECT_NE(it->summary.find("host strata-7-h2 (rank(s) 2, 3, from step 13"), std::string::npos)
      << it->summary;
  EXPECT_NE(it->summary.find("the network, not compute"), std::string::npos) << it->summary;
  std::filesystem::remove_all(dir);
}

TEST(Outliers, TheMinorityOrEveryoneOnATie) {
  EXPECT_EQ(outliers({7, 7, 9, 7}), std::vector<int>{2});
  EXPECT_TRUE(outliers({7, 7, 7}).empty());
  EXPECT_EQ(outliers({7, 9}), (std::vector<int>{0, 1}));
}

std::vector<nlohmann::json> events_of(const std::string& dir, const std::string& kind) {
  std::vector<nlohmann::json> out;
  for (const nlohmann::json& e : read_events(dir))
    if (e.at("kind") == kind) out.push_back(e);
  return out;
}

TEST(RouterCollapseDetector, OnceARunOfStepsReachesTheLimitAndAgainAfterRecovery) {
  RouterCollapseDetector d(0.5, 3, /*experts=*/8, /*top_k=*/2);
  ASSERT_TRUE(d.active());
  // Layer 0 balanced; layer 1: expert 5 in 70 of the 100 tokens (200 assignments, top-2).
  const std::vector<int64_t> balanced = {25, 25, 25, 25, 25, 25, 25, 25};
  const std::vector<int64_t> collapsed = {10, 10, 10, 10, 10, 70, 40, 40};
  EXPECT_TRUE(d.check({balanced, collapsed}).empty());
  EXPECT_TRUE(d.check({balanced, collapsed}).empty());
  const auto found = d.check({balanced, collapsed});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].layer, 1);
  EXPECT_EQ(found[0].expert, 5);
  EXPECT_DOUBLE_EQ(found[0].fraction, 0.7);
  EXPECT_TRUE(d.check({balanced, collapsed}).empty());  // the same collapse, reported once
  EXPECT_TRUE(d.check({balanced, balanced}).empty());   // recovered
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(d.check({balanced, collapsed}).empty());
  EXPECT_EQ(d.check({balanced, collapsed}).size(), 1u);  // a new collapse
  // A fraction at or below the fair share (2 of 4 experts: 0.5) would flag a balanced router.
  EXPECT_FALSE(RouterCollapseDetector(0.5, 3, 4, 2).active());
  EXPECT_FALSE(RouterCollapseDetector(0.9, 0, 8, 2).active());  // steps 0: off
  EXPECT_FALSE(RouterCollapseDetector(0.5, 3, 0, 2).active());  // a dense model
}

// In the step loop: a mixtral run with a threshold just above the fair share finds an imbalanced
// router at once, logs it in events.jsonl and metrics, and `strata diagnose` explains it.
TEST(AnomalyInTraining, CollapsedRouterIsFoundAndDiagnosed) {
  const std::string dir = test_support::fresh_dir("anomaly_router");
  Trainer t(test_support::small_run_config(
      dir, {"model.family=mixtral", "model.moe.experts=4", "model.moe.top_k=1",
            "anomaly.router_collapse_fraction=0.26", "anomaly.router_collapse_steps=2"}));
  const StepResult first = t.train_step();
  EXPECT_TRUE(first.router_collapsed.empty());  // one step is not a run of two
  const StepResult second = t.train_step();
  EXPECT_FALSE(second.router_collapsed.empty());
  const auto ev = events_of(dir, "router_collapse");
  ASSERT_EQ(ev.size(), second.router_collapsed.size());
  EXPECT_EQ(ev[0].at("step"), 2);
  EXPECT_GT(ev[0].at("fraction").get<double>(), 0.26);
  const std::vector<Finding> findings = diagnose_run(dir);
  const auto it = std::find_if(findings.begin(), findings.end(),
                               [](const Finding& f) { return f.kind == "router_collapse"; });
  ASSERT_NE(it, findings.end());
  EXPECT_NE(it->summary.find("model.moe.aux_loss_coeff"), std::string::npos) << it->summary;
}

TEST(AnomalyInTraining, NanGradientSkipsTheUpdateAndIsLogged) {
  const std::string dir = test_support::fresh_dir("anomaly_nan");
  Trainer t(test_support::small_run_config(dir, {"fault.nan_step=3"}));
  for (int i = 1; i <= 4; ++i) {
    const std::vector<float> before(t.model().params().data(),
                                    t.model().params().data() + t.model().params().size());
    const StepResult r = t.train_step();
    EXPECT_EQ(r.nonfinite, i == 3) << "step " << i;
    EXPECT_EQ(r.skipped, i == 3) << "step " << i;
    if (i == 3) {  // the parameters did not move
      for (size_t k = 0; k < before.size(); ++k) ASSERT_EQ(t.model().params().data()[k], before[k]);
    }
  }
  const auto ev = events_of(dir, "nonfinite");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].at("step"), 3);
  EXPECT_FALSE(ev[0].at("data_position").get<std::string>().empty());
}

TEST(AnomalyInTraining, ConsecutiveNanStepsStopTheRun) {
  const std::string dir = test_support::fresh_dir("anomaly_nan_abort");
  Trainer t(test_support::small_run_config(
      dir, {"fault.nan_step=2", "fault.nan_steps=10", "anomaly.max_nonfinite=3"}));
  try {
    t.run();
    ADD_FAILURE() << "expected the run to stop";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 consecutive steps (2 to 4)"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(events_of(dir, "nonfinite").size(), 3u);
  EXPECT_EQ(events_of(dir, "nonfinite_abort").size(), 1u);
}

TEST(AnomalyInTraining, LossSpikeIsFoundAndItsUpdateSkipped) {
  const std::string dir = test_support::fresh_dir("anomaly_spike");
  Trainer t(test_support::small_run_config(
      dir, {"train.steps=30", "fault.spike_step=26", "anomaly.spike_warmup=10",
            "anomaly.spike_window=20", "anomaly.spike_action=skip"}));
  for (int i = 1; i <= 30; ++i) {
    const StepResult r = t.train_step();
    EXPECT_EQ(r.loss_spike, i == 26) << "step " << i << " z " << r.loss_zscore;
    EXPECT_EQ(r.skipped, i == 26) << "step " << i;
  }
  const auto ev = events_of(dir, "loss_spike");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].at("step"), 26);
  EXPECT_EQ(ev[0].at("action"), "skip");
}

// spike_action = "rollback": back to the last committed checkpoint (step 20), the steps in
// between are retrained exactly, and the offending batch is skipped when its step comes again.
TEST(AnomalyInTraining, LossSpikeRollsBackAndSkipsTheBatch) {
  const std::string dir = test_support::fresh_dir("anomaly_rollback");
  Trainer t(test_support::small_run_config(
      dir, {"train.steps=30", "train.checkpoint_every=10", "fault.spike_step=26",
            "anomaly.spike_warmup=10", "anomaly.spike_window=20", "anomaly.spike_action=rollback",
            "train.async_checkpoint=false"}));
  std::vector<double> first;
  StepResult r;
  for (int i = 1; i <= 26; ++i) {
    r = t.train_step();
    first.push_back(r.loss);
    if (r.step % 10 == 0) t.save();
  }
  ASSERT_TRUE(r.loss_spike);
  ASSERT_TRUE(r.rolled_back);
  ASSERT_EQ(t.step(), 20);
  for (int i = 21; i <= 25; ++i) EXPECT_EQ(t.train_step().loss, first[i - 1]) << "step " << i;
  r = t.train_step();
  EXPECT_EQ(r.step, 26);
  EXPECT_TRUE(r.skipped_batch);
  EXPECT_FALSE(r.loss_spike);
  EXPECT_NE(r.loss, first[25] / 10);  // another batch
  ASSERT_EQ(events_of(dir, "rollback").size(), 1u);
}

}  // namespace
}  // namespace strata
