// The layout search and the out-of-memory diagnosis on the classic cases: a 130B model under pure
// data parallelism on 32 A100-80GB does not fit and a tensor x pipeline layout does; the 1T model
// of Narayanan et al. 2021 on 3072 GPUs is searched quickly; this machine's oom-demo config.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/clock.h"
#include "core/error.h"
#include "plan/layout_search.h"
#include "plan/oom_report.h"
#include "plan/plan_report.h"
#include "run/config.h"

namespace strata {
namespace {

RunConfig config_file(const std::string& name, const std::vector<std::string>& overrides = {}) {
  return load_config(std::string(STRATA_SOURCE_DIR) + "/configs/" + name, overrides);
}

const char* kA100 = "a100-80gb-x8-ib200";

// The MoE families compose with every parallelism: the search offers tensor, sequence and
// pipeline parallelism for them, and expert parallelism over the divisors of dp that divide the
// experts (dense models keep ep = 1).
TEST(LayoutSearch, MixtralIsSearchedOverExpertTensorAndPipelineLayouts) {
  const RunConfig config = config_file("mixtral-tiny.toml");
  SearchOptions options;
  options.gpus = 8;
  options.top = 100000;  // keep every layout that fits
  const SearchResult result = search_layouts(config, load_cluster_profile(kA100), options);
  ASSERT_FALSE(result.ranked.empty());
  bool tp = false, sp = false, pp = false;
  std::set<int64_t> eps;
  for (const PlannedLayout& l : result.ranked) {
    const ParallelConfig& p = l.config.parallel;
    EXPECT_EQ(p.dp % p.ep, 0) << l.describe();
    EXPECT_EQ(config.model.moe.experts % p.ep, 0) << l.describe();
    if (p.ep > 1) {
      EXPECT_NE(l.describe().find(cat(" ep ", p.ep)), std::string::npos);
    }
    tp |= p.tp > 1;
    sp |= p.sp;
    pp |= p.pp > 1;
    eps.insert(p.ep);
  }
  EXPECT_TRUE(tp && sp && pp);
  EXPECT_EQ(eps, (std::set<int64_t>{1, 2, 4, 8}));
  // A dense model is never given an ep.
  const SearchResult dense =
      search_layouts(config_file("llama-tiny.toml"), load_cluster_profile(kA100), options);
  for (const PlannedLayout& l : dense.ranked) EXPECT_EQ(l.config.parallel.ep, 1) << l.describe();
}

// What strata's engine cannot train yet (the MoE FFN outside f32 on the CPU) is refused by `strata
// train` but planned by `strata plan`: parse_config reports those limits instead of failing, and
// only those (an inconsistent config still fails).
TEST(LayoutSearch, EngineLimitsAreNotedNotFatalForThePlanner) {
  const std::string toml =
      "[model]\nfamily = \"mixtral\"\nn_kv_head = 2\nattention = \"flash\"\n[model.moe]\n"
      "experts = 4\n[train]\nprecision = \"bf16\"\n[system]\ndevice = \"cuda\"\n[data]\n"
      "source = \"synthetic\"\n";
  try {
    parse_config(toml, "moe.toml");
    FAIL() << "bf16 MoE on cuda was accepted for training";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trains in f32 only so far"), std::string::npos);
  }
  std::vector<std::string> limits;
  const RunConfig c = parse_config(toml, "moe.toml", {"parallel.ep=2"}, &limits);
  ASSERT_EQ(limits.size(), 2u);
  EXPECT_NE(limits[0].find("trains in f32 only so far"), std::string::npos) << limits[0];
  EXPECT_NE(limits[1].find("runs on the CPU only so far"), std::string::npos) << limits[1];
  const ClusterProfile h100 = load_cluster_profile("h100");
  const PlannedLayout l = evaluate_layout(c, 8, &h100, 0);
  EXPECT_TRUE(l.fits());
  EXPECT_GT(l.step.ep_comm_s, 0);
  // The planner's leniency covers the engine's limits only.
  std::vector<std::string> more;
  EXPECT_THROW(parse_config(toml, "moe.toml", {"parallel.ep=3"}, &more), Error);
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

// Context parallelism in the search: a Llama-3-8B-shaped model at 256K tokens per sequence on two
// nodes of H100 with 64 GiB per rank for the arena. Without cp the activations of a sequence do not
// fit even split 8 ways by tp + sp with full recomputation (cp stays inside dp, so a replica of 16
// ranks is tp 8 x cp 2 and the like); with cp they do, and the search picks it. The global batch
// of 2 sequences is kept: cp ranks read the same sequences, so there are dp / cp replicas.
TEST(LayoutSearch, LongSequencesPickContextParallelismWhenNothingElseFits) {
  const RunConfig config = parse_config(
      "[model]\nfamily = \"llama\"\nn_layer = 32\nn_head = 32\nn_kv_head = 8\nd_model = 4096\n"
      "d_ff = 14336\nvocab_size = 128256\nmax_seq_len = 262144\nattention = \"flash\"\n"
      "[train]\nbatch_size = 1\nseq_len = 262144\nprecision = \"bf16\"\n"
      "[data]\nsource = \"synthetic\"\n",
      "long-llama", {});
  const ClusterProfile cluster = load_cluster_profile("h100");
  SearchOptions options;
  options.gpus = 16;
  options.global_batch = 2;
  options.capacity = int64_t{64} << 30;
  options.top = 1000;  // every fitting layout
  const SearchResult result = search_layouts(config, cluster, options);
  ASSERT_FALSE(result.ranked.empty());
  std::set<int64_t> cps;
  for (const PlannedLayout& l : result.ranked) {
    EXPECT_GT(l.config.parallel.cp, 1) << l.describe();
    EXPECT_LE(l.memory.total, options.capacity) << l.describe();
    // Each replica still reads its share of the 2 sequences.
    EXPECT_EQ(config_global_batch(l.config, 16), 2) << l.describe();
    cps.insert(l.config.parallel.cp);
  }
  EXPECT_GE(cps.size(), 2u);  // cp 2 with tp 8 up to cp 16 without tp
  const PlannedLayout& best = result.ranked.front();
  EXPECT_NE(best.describe().find(" cp "), std::string::npos) << best.describe();
  // The best layout without cp, tp 8 + sp with full recomputation and ZeRO-3 over dp 2, is over
  // the budget mostly in activations; the same with cp 2 halves them and fits.
  RunConfig tp8 = config;
  tp8.parallel.tp = 8;
  tp8.parallel.sp = true;
  tp8.parallel.zero = 3;
  tp8.train.recompute = Recompute::full;
  tp8.train.grad_accum = 1;
  const PlannedLayout without = evaluate_layout(tp8, 16, &cluster, options.capacity);
  EXPECT_FALSE(without.fits()) << format_memory(without);
  RunConfig cp2 = tp8;
  cp2.parallel.cp = 2;
  cp2.train.grad_accum = 2;  // the replica's 2 sequences, one micro-batch each
  const PlannedLayout with = evaluate_layout(cp2, 16, &cluster, options.capacity);
  EXPECT_TRUE(with.fits()) << format_memory(with);
  EXPECT_EQ(config_global_batch(cp2, 16), 2);
  EXPECT_EQ(2 * with.memory.activation_bytes_per_layer, without.memory.activation_bytes_per_layer);
  EXPECT_GT(with.step.cp_comm_s, 0.0);
  EXPECT_NE(format_step(with.step).find("cp exchanges"), std::string::npos);
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
