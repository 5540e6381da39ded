// The layout search and the out-of-memory diagnosis on the classic cases: a 130B model under pure
// data parallelism on 32 A100-80GB does not fit and a tensor x pipeline layout does; the 1T model
// of Narayanan et al. 2021 on 3072 GPUs is searched quickly; this machine's oom-demo config.
#include <gtest/gtest.h>

#include <string>

#include "core/clock.h"
#include "plan/layout_search.h"
#include "plan/oom_report.h"
#include "run/config.h"

namespace strata {
namespace {

RunConfig config_file(const std::string& name, const std::vector<std::string>& overrides = {}) {
  return load_config(std::string(STRATA_SOURCE_DIR) + "/configs/" + name, overrides);
}

const char* kA100 = "a100-80gb-x8-ib200";

// The MoE family runs data parallel only so far: the search offers nothing else.
TEST(LayoutSearch, MixtralIsSearchedOverDataParallelLayoutsOnly) {
  const RunConfig config = config_file("mixtral-tiny.toml");
  SearchOptions options;
  options.gpus = 8;
  const SearchResult result = search_layouts(config, load_cluster_profile(kA100), options);
  ASSERT_FALSE(result.ranked.empty());
  for (const PlannedLayout& l : result.ranked) {
    EXPECT_EQ(l.config.parallel.tp, 1) << l.describe();
    EXPECT_EQ(l.config.parallel.pp, 1) << l.describe();
    EXPECT_FALSE(l.config.parallel.sp) << l.describe();
  }
}

TEST(LayoutSearch, PureDataParallel130BDoesNotFitAndTensorTimesPipelineDoes) {
  const RunConfig config = config_file("plan/gpt-130b.toml");
  EXPECT_GT(config.model.num_params(), 125e9);
  const ClusterProfile cluster = load_cluster_profile(kA100);
  const PlannedLayout given = evaluate_layout(config, 32, &cluster, 0);
  EXPECT_FALSE(given.fits());
  // Model states alone: bf16 weights, f32 gradients, master weights and two Adam moments per
  // parameter, all replicated by pure data parallelism: hundreds of GB.
  const int64_t states =
      given.memory.category(MemCategory::params) + given.memory.category(MemCategory::grads) +
      given.memory.category(MemCategory::master) + given.memory.category(MemCategory::optimizer);
  EXPECT_GT(states, 16 * config.model.num_params());
  EXPECT_GT(states, 3 * cluster.device.memory_bytes);

  SearchOptions options;
  options.gpus = 32;
  const SearchResult result = search_layouts(config, cluster, options);
  ASSERT_FALSE(result.ranked.empty()) << "no layout of 32 A100-80GB fits a 130B model";
  EXPECT_EQ(result.global_batch, 512);  // 1 sequence x 16 micro-batches x dp 32
  const PlannedLayout& best = result.ranked.front();
  EXPECT_TRUE(best.fits());
  EXPECT_GT(best.config.parallel.tp, 1);
  EXPECT_GT(best.config.parallel.pp, 1);
  for (const PlannedLayout& l : result.ranked) {
    EXPECT_TRUE(l.fits()) << l.describe();
    const ParallelConfig& p = l.config.parallel;
    EXPECT_EQ(p.tp * p.pp * p.dp, 32) << l.describe();
    EXPECT_EQ(l.config.train.batch_size * l.config.train.grad_accum * p.dp, 512) << l.describe();
    EXPECT_LE(l.step.tokens_per_s, best.step.tokens_per_s) << l.describe();
    EXPECT_GT(l.step.mfu, 0);
    EXPECT_LT(l.step.mfu, 1);
  }
  const std::string report = explain_oom(given, result);
  EXPECT_NE(report.find("does not fit"), std::string::npos) << report;
  EXPECT_NE(report.find("over by"), std::string::npos) << report;
  EXPECT_NE(report.find("optimizer"), std::string::npos) << report;
  EXPECT_NE(report.find("model states"), std::string::npos) << report;
  EXPECT_NE(report.find(best.describe()), std::string::npos) << report;
}

TEST(LayoutSearch, OneTrillionParametersOn3072GpusIsQuick) {
  const RunConfig config = config_file("plan/gpt-1t.toml");
  EXPECT_GT(config.model.num_params(), 0.95e12);
  const ClusterProfile cluster = load_cluster_profile(kA100);
  SearchOptions options;
  options.gpus = 3072;
  const Clock::time_point start = Clock::now();
  const SearchResult result = search_layouts(config, cluster, options);
  const double seconds = seconds_since(start);
  // The target is 2 s (docs/PLANNER.md measures it); a shared CI machine gets slack here.
  EXPECT_LT(seconds, 10.0);
  EXPECT_GT(result.enumerated, 1000);
  ASSERT_FALSE(result.ranked.empty());
  const PlannedLayout& best = result.ranked.front();
  EXPECT_GT(best.config.parallel.tp * best.config.parallel.pp, 8) << best.describe();
  EXPECT_EQ(result.global_batch, 3072);
  // docs/PLANNER.md: the best layout is the one Megatron-LM published for this model (tp 8,
  // pp 64, dp 6; 163 TFLOP/s per A100, 52% of peak), ZeRO-1, micro-batches of 1, predicted at 53%
  // MFU. The band is that prediction +-3 points: a change to the performance model that moves it
  // further must update the docs' claim.
  EXPECT_EQ(best.config.parallel.tp, 8) << best.describe();
  EXPECT_EQ(best.config.parallel.pp, 64) << best.describe();
  EXPECT_EQ(best.config.parallel.dp, 6) << best.describe();
  EXPECT_EQ(best.config.parallel.zero, 1) << best.describe();
  EXPECT_NE(best.describe().find("micro-batch 1 x 512"), std::string::npos) << best.describe();
  EXPECT_GT(best.step.mfu, 0.50) << best.describe();
  EXPECT_LT(best.step.mfu, 0.56) << best.describe();
}

TEST(LayoutSearch, OomDemoOnThisMachineFitsOnceSplitOrWithSmallerMicroBatches) {
  // configs/oom-demo.toml: 400 MB per rank; pure data parallelism over 4 ranks with ZeRO-1 ran out
  // of memory in the engine, tp 2 x pp 2 trained.
  const RunConfig dp = config_file("oom-demo.toml", {"parallel.dp=4", "parallel.zero=1"});
  const ClusterProfile cluster = load_cluster_profile("cpu-local");
  const PlannedLayout given = evaluate_layout(dp, 4, &cluster, 0);
  EXPECT_EQ(given.capacity, int64_t{400} << 20);
  EXPECT_FALSE(given.fits());
  const RunConfig split = config_file("oom-demo.toml", {"parallel.tp=2", "parallel.pp=2"});
  EXPECT_TRUE(evaluate_layout(split, 4, &cluster, 0).fits());
  SearchOptions options;
  options.gpus = 4;
  const SearchResult result = search_layouts(dp, cluster, options);
  ASSERT_FALSE(result.ranked.empty());
  for (const PlannedLayout& l : result.ranked) {
    EXPECT_TRUE(l.fits());
    EXPECT_LE(l.memory.total, int64_t{400} << 20);
  }
}

TEST(LayoutSearch, NothingFitsNamesTheSmallestFootprint) {
  const RunConfig config = config_file("plan/gpt-130b.toml");
  const ClusterProfile cluster = load_cluster_profile(kA100);
  SearchOptions options;
  options.gpus = 2;
  const SearchResult result = search_layouts(config, cluster, options);
  EXPECT_TRUE(result.ranked.empty());
  ASSERT_FALSE(result.closest.empty());
  const PlannedLayout given = evaluate_layout(config, 2, &cluster, 0);
  const std::string report = explain_oom(given, result);
  EXPECT_NE(report.find("no layout on 2 ranks fits"), std::string::npos) << report;
}

}  // namespace
}  // namespace strata
