// End-to-end behaviour of the step loop: exact resume, no allocation in the steady state,
// learning on real text, and clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "model/decoder.h"
#include "run/config.h"
#include "small_run.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  return test_support::fresh_dir("trainer_" + name);
}

RunConfig small_config(const std::string& family, const std::string& run_dir) {
  std::vector<std::string> sets = {"model.family=" + family};
  const bool moe = family == "mixtral" || family == "qwen3_moe";
  if (family == "llama" || moe) sets.push_back("model.n_kv_head=2");
  if (moe) sets.push_back("model.moe.experts=4");
  return test_support::small_run_config(run_dir, sets);
}

class TrainerFamilies : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainerFamilies, ResumeIsBitwiseExact) {
  const std::string family = GetParam();
  const std::string dir_a = temp_dir(family + "_a"), dir_b = temp_dir(family + "_b");
  std::vector<double> straight;
  std::vector<float> params_a;
  {
    RunConfig c = small_config(family, dir_a);
    c.train.grad_accum = 2;
    Trainer t(c);
    for (int i = 0; i < 6; ++i) straight.push_back(t.train_step().loss);
    params_a.assign(t.model().params().data(),
                    t.model().params().data() + t.model().params().size());
  }
  {
    RunConfig c = small_config(family, dir_b);
    c.train.grad_accum = 2;
    Trainer t(c);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(t.train_step().loss, straight[i]);
    t.save();
  }
  RunConfig c = small_config(family, dir_b);
  c.train.grad_accum = 2;
  Trainer resumed(c);
  ASSERT_EQ(resumed.step(), 3);
  for (int i = 3; i < 6; ++i) EXPECT_EQ(resumed.train_step().loss, straight[i]) << "step " << i;
  const ParamStore& p = resumed.model().params();
  for (int64_t i = 0; i < p.size(); ++i) ASSERT_EQ(p.data()[i], params_a[i]) << "element " << i;
}

TEST_P(TrainerFamilies, StepLoopMakesNoArenaAllocation) {
  RunConfig c = small_config(GetParam(), temp_dir(GetParam() + "_alloc"));
  c.train.steps = 4;
  c.train.eval_every = 2;
  Trainer t(c);
  t.run();
  EXPECT_EQ(t.arena().allocations_after_freeze(), 0);
  const std::string metrics = c.run.dir + "/metrics.jsonl";
  std::ifstream in(metrics);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu", "mem"})
      EXPECT_TRUE(j.contains(key)) << key << " missing in " << line;
    EXPECT_TRUE(j["mem"].contains("params") && j["mem"].contains("activations"));
    if (j["step"] == 2) {
      EXPECT_TRUE(j.contains("val_loss"));
    }
    if (GetParam() == "mixtral" || GetParam() == "qwen3_moe") {  // the routers' record, per step
      EXPECT_GT(j["moe"]["aux_loss"].get<double>(), 0.0) << line;
      EXPECT_EQ(j["moe"]["tokens_per_expert"].size(), 2u) << line;
      // Per layer: tokens per expert as min / mean / max (4 experts, top 2: mean n * 2 / 4).
      const nlohmann::json& layer = j["moe"]["layers"]["1"];
      EXPECT_LE(layer["tokens_min"].get<int64_t>(), layer["tokens_mean"].get<double>()) << line;
      EXPECT_GE(layer["tokens_max"].get<int64_t>(), layer["tokens_mean"].get<double>()) << line;
      EXPECT_GT(layer["aux_loss"].get<double>(), 0.0) << line;
    }
    ++lines;
  }
  EXPECT_EQ(lines, 4);
  EXPECT_TRUE(latest_checkpoint(c.run.dir + "/ckpt").has_value());
}

INSTANTIATE_TEST_SUITE_P(Families, TrainerFamilies,
                         ::testing::Values("gpt2", "llama", "mixtral", "qwen3_moe"));

TEST(Trainer, LearnsRealText) {
  // A short run on real English text must bring validation loss well below where it started.
  const std::string dir = temp_dir("text");
  RunConfig c = small_config("gpt2", dir + "/run");
  c.model.vocab_size = 512;
  c.data.source = DataSource::text;
  c.data.text = {std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/kjv_excerpt.txt"};
  c.data.dir = dir + "/data";
  c.data.filters.min_doc_chars = 32;
  c.train.steps = 100;
  c.train.eval_batches = 4;
  c.optim.lr = 1e-2f;
  c.optim.warmup_steps = 5;
  Trainer t(c);
  const double before = t.evaluate();
  for (int i = 0; i < 100; ++i) t.train_step();
  const double after = t.evaluate();
  EXPECT_NEAR(before, std::log(512.0), 0.5);
  // Well below the start, and below what token frequencies alone explain.
  EXPECT_LT(after, before - 1.2) << "before " << before << " after " << after;
  EXPECT_LT(after, t.unigram_baseline()) << "unigram baseline " << t.unigram_baseline();
}

TEST(Trainer, MixtralLearnsRealText) {
  // The MoE family trains: 30 steps on real text bring validation loss clearly down, with the
  // balancing loss in the objective and every expert of each layer in use.
  const std::string dir = temp_dir("mixtral_text");
  RunConfig c = small_config("mixtral", dir + "/run");
  c.data.source = DataSource::text;
  c.data.text = {std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/kjv_excerpt.txt"};
  c.data.dir = dir + "/data";
  c.data.filters.min_doc_chars = 32;
  c.train.steps = 30;
  c.train.eval_batches = 4;
  c.optim.lr = 1e-2f;
  c.optim.warmup_steps = 5;
  Trainer t(c);
  const double before = t.evaluate();
  StepResult last;
  for (int i = 0; i < 30; ++i) last = t.train_step();
  const double after = t.evaluate();
  EXPECT_LT(after, before - 1.0) << "before " << before << " after " << after;
  EXPECT_GT(last.moe_aux_loss, 0.0);
  ASSERT_EQ(last.moe_tokens_per_expert.size(), 2u);
  for (const std::vector<int64_t>& layer : last.moe_tokens_per_expert)
    for (int64_t x : layer) EXPECT_GT(x, 0) << "an expert without tokens";
}

// DeepSeek-V3's auxiliary-loss-free balancing: after each step every router bias moves by
// bias_update_rate * sign(mean load - load) over the step's micro-batches, and only the update
// moves it (no gradient reaches it); the routing then reads it.
TEST(Trainer, RouterBiasFollowsTheStepsLoad) {
  RunConfig c = small_config("mixtral", temp_dir("router_bias") + "/run");
  c.model.moe.gating = kernels::MoeGating::sigmoid_bias;
  c.model.moe.bias_update_rate = 0.01f;
  c.model.moe.aux_loss_coeff = 0;
  c.train.grad_accum = 2;
  Trainer t(c);
  const ParamStore& p = t.model().params();
  const int64_t e = c.model.moe.experts;
  std::vector<double> want(static_cast<size_t>(2 * e), 0.0);
  for (int step = 0; step < 3; ++step) {
    const StepResult r = t.train_step();
    ASSERT_EQ(r.moe_tokens_per_expert.size(), 2u);
    for (int layer = 0; layer < 2; ++layer) {
      const std::vector<int64_t>& load = r.moe_tokens_per_expert[layer];
      int64_t total = 0;
      for (int64_t x : load) total += x;
      // Both micro-batches' assignments: the step's load.
      EXPECT_EQ(total, 2 * c.train.batch_size * c.train.seq_len * c.model.moe.top_k);
      const double mean = static_cast<double>(total) / static_cast<double>(e);
      const float* bias = p.param(p.index_of(cat("layers.", layer, ".moe.router.bias")));
      for (int64_t x = 0; x < e; ++x) {
        double& w = want[static_cast<size_t>(layer * e + x)];
        w += mean > load[x] ? 0.01 : mean < load[x] ? -0.01 : 0.0;
        EXPECT_NEAR(bias[x], w, 1e-6)
            << "step " << step + 1 << " layer " << layer << " expert " << x;
      }
    }
  }
  double moved = 0;
  for (double w : want) moved += std::abs(w);
  EXPECT_GT(moved, 0.0);
}

}  // namespace
}  // namespace strata
