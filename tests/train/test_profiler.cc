// [profile] in the step loop of one process: the window of steps is traced (layer forward and
// backward, data, optimizer, checkpoint, step spans) into rank_0.json and the merged trace.json;
// the steps outside the window record nothing; the metrics carry the time split and comm share.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/trace.h"
#include "train/small_run.h"
#include "train/trainer.h"

namespace strata {

namespace {

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

}  // namespace

TEST(Profiler, TracesTheWindowOfSteps) {
  const std::string dir = test_support::fresh_dir("profiler");
  RunConfig config = test_support::small_run_config(
      dir, {"profile.enabled=true", "profile.start_step=2", "profile.steps=2",
            "train.checkpoint_every=3", "train.async_checkpoint=true"});
  {
    Trainer trainer(config);
    trainer.run();
  }
  EXPECT_FALSE(trace::active());
  const std::filesystem::path tdir = std::filesystem::path(dir) / "trace";
  ASSERT_TRUE(std::filesystem::exists(tdir / "rank_0.json"));
  ASSERT_TRUE(std::filesystem::exists(tdir / "trace.json"));
  const nlohmann::json t = read_json(tdir / "trace.json");
  std::map<std::string, int> count;
  std::map<std::string, int> by_cat;
  for (const nlohmann::json& e : t.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    ++count[e.at("name").get<std::string>()];
    ++by_cat[e.at("cat").get<std::string>()];
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
  }
  // Steps 2 and 3 only: two step spans, and one forward and one backward span per layer each.
  EXPECT_EQ(count["step 2"], 1);
  EXPECT_EQ(count["step 3"], 1);
  EXPECT_EQ(count["step 1"] + count["step 4"], 0);
  EXPECT_EQ(count["fwd layer 0"], 2);
  EXPECT_EQ(count["fwd layer 1"], 2);
  EXPECT_EQ(count["bwd layer 0"], 2);
  EXPECT_EQ(count["bwd layer 1"], 2);
  EXPECT_EQ(count["data"], 2);
  EXPECT_EQ(count["optimizer"], 2);
  EXPECT_EQ(count["adamw"], 2);
  EXPECT_EQ(count["checkpoint save"], 1);  // step 3's save starts inside the window
  EXPECT_GE(by_cat["compute"], 8);
  EXPECT_EQ(t.at("otherData").at("dropped_events"), 0);
  const nlohmann::json rank0 = read_json(tdir / "rank_0.json");
  EXPECT_EQ(rank0.at("otherData").at("first_step"), 2);
  EXPECT_EQ(rank0.at("otherData").at("last_step"), 3);

  // Every step's metrics have the time split and the communication share.
  std::ifstream metrics(std::filesystem::path(dir) / "metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line); ++lines) {
    const nlohmann::json j = nlohmann::json::parse(line);
    for (const char* key :
         {"data_s", "compute_s", "comm_exposed_s", "bubble_s", "optimizer_s", "other_s"})
      EXPECT_TRUE(j.at("time").contains(key)) << key;
    EXPECT_LT(j.at("comm_share").get<double>(), 0.05);  // one process: nothing to communicate
  }
  EXPECT_EQ(lines, 6);
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(dir) / "environment.json"));
  trace::reset();
}

TEST(Profiler, OffByDefaultWritesNothing) {
  const std::string dir = test_support::fresh_dir("profiler_off");
  RunConfig config = test_support::small_run_config(dir, {"train.steps=2"});
  EXPECT_FALSE(config.profile.enabled);
  {
    Trainer trainer(config);
    trainer.run();
  }
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(dir) / "trace"));
  EXPECT_FALSE(trace::started());
}

TEST(Profiler, ConfigKeysAreChecked) {
  const std::string dir = test_support::fresh_dir("profiler_cfg");
  EXPECT_THROW(test_support::small_run_config(dir, {"profile.steps=0"}), Error);
  EXPECT_THROW(test_support::small_run_config(dir, {"profile.stpes=2"}), Error);
  const RunConfig c = test_support::small_run_config(dir, {"profile.start_step=5"});
  EXPECT_EQ(c.profile.start_step, 5);
  EXPECT_EQ(config_to_json(c).at("profile").at("start_step"), 5);
}

}  // namespace strata
