// Mixed precision in the step loop: bf16 and fp16 train like f32 (same losses up to 16-bit
// rounding), keep f32 master weights in checkpoints and resume bitwise; fp16's dynamic loss scale
// skips the steps whose gradients overflow, leaves the parameters untouched on them, backs off,
// and counts them in the metrics.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "small_run.h"
#include "train/config.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

RunConfig config(const std::string& precision, const std::string& name,
                 const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"train.precision=" + precision, "train.steps=12"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return test_support::small_run_config(test_support::fresh_dir("mp_" + name), sets);
}

std::vector<double> losses(const RunConfig& c) {
  Trainer t(c);
  std::vector<double> out;
  while (t.step() < c.train.steps) out.push_back(t.train_step().loss);
  return out;
}

TEST(MixedPrecision, Bf16AndFp16TrainLikeF32) {
  for (const char* family : {"gpt2", "llama"}) {
    const std::string f = family;
    const auto want = losses(config("f32", "f32_" + f, {"model.family=" + f}));
    for (const char* precision : {"bf16", "fp16"}) {
      const auto got =
          losses(config(precision, std::string(precision) + "_" + f, {"model.family=" + f}));
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)  // 16-bit GEMM inputs: ~3 significant digits
        EXPECT_NEAR(got[i], want[i], 2e-3 * want[i]) << precision << " " << f << " step " << i + 1;
    }
  }
}

TEST(MixedPrecision, MemoryAccountingShowsTheSplit) {
  Trainer f32(config("f32", "mem_f32"));
  Trainer bf16(config("bf16", "mem_bf16"));
  const Arena& a = f32.arena();
  const Arena& b = bf16.arena();
  // f32 master weights (the ParamStore buffer) and a 16-bit working copy; optimizer state f32.
  EXPECT_EQ(b.current(MemCategory::master), a.current(MemCategory::params));
  EXPECT_EQ(b.current(MemCategory::params), a.current(MemCategory::params) / 2);
  EXPECT_EQ(b.current(MemCategory::optimizer), a.current(MemCategory::optimizer));
  EXPECT_EQ(b.current(MemCategory::grads), a.current(MemCategory::grads));
  // The GEMM inputs kept for backward (two norms, attention output, MLP activation per layer,
  // the final norm) and q, k, v are 16-bit.
  const int64_t n = 4 * 32, c = 64, f = 256, layers = 2;
  const int64_t halved = layers * (n * c + n * c + n * c + n * f + 3 * n * c) + n * c;
  EXPECT_EQ(a.current(MemCategory::activations) - b.current(MemCategory::activations), 2 * halved);
}

TEST(MixedPrecision, Fp16OverflowSkipsStepsAndBacksOff) {
  // A scale of 2^40 overflows f16 at once: the first overflow is absorbed by the hysteresis of
  // 2, then every overflow halves the scale until the gradients fit.
  RunConfig c = config("fp16", "overflow",
                       {"fp16.initial_scale_power=40", "fp16.hysteresis=2", "train.steps=30"});
  Trainer t(c);
  std::vector<float> before(t.model().params().data(),
                            t.model().params().data() + t.model().params().size());
  const StepResult first = t.train_step();
  EXPECT_TRUE(first.skipped);
  EXPECT_EQ(first.loss_scale, std::ldexp(1.0, 40));
  EXPECT_EQ(std::memcmp(before.data(), t.model().params().data(), before.size() * sizeof(float)), 0)
      << "a skipped step must not change the parameters";
  double last_scale = first.loss_scale;
  int skipped = 1, clean = 0;
  while (t.step() < c.train.steps) {
    const StepResult r = t.train_step();
    EXPECT_LE(r.loss_scale, last_scale * 1.0000001);  // never grows within 30 steps (window 1000)
    last_scale = r.loss_scale;
    skipped += r.skipped;
    clean += !r.skipped;
    EXPECT_TRUE(std::isfinite(r.loss));
  }
  EXPECT_GT(skipped, 2);
  EXPECT_GT(clean, 5);
  EXPECT_LT(last_scale, std::ldexp(1.0, 40));
}

TEST(MixedPrecision, SkippedStepsAndLossScaleAreInTheMetrics) {
  RunConfig c = config("fp16", "metrics", {"fp16.initial_scale_power=40", "train.steps=8"});
  {
    Trainer t(c);
    t.run();
  }
  std::ifstream in(fs::path(c.run.dir) / "metrics.jsonl");
  std::string line;
  int64_t lines = 0, skipped = 0;
  nlohmann::json last;
  while (std::getline(in, line)) {
    last = nlohmann::json::parse(line);
    ++lines;
    skipped += last.value("skipped", false) ? 1 : 0;
    EXPECT_TRUE(last.contains("loss_scale"));
  }
  EXPECT_EQ(lines, 8);
  EXPECT_GT(skipped, 0);
  EXPECT_EQ(last["skipped_steps"].get<int64_t>(), skipped);
}

TEST(MixedPrecision, Bf16ResumeIsBitwiseAndCheckpointsHoldF32Masters) {
  const RunConfig whole = config("bf16", "resume_whole", {"train.checkpoint_every=4"});
  std::vector<double> want;
  std::vector<float> want_params;
  {
    Trainer t(whole);
    while (t.step() < whole.train.steps) want.push_back(t.train_step().loss);
    want_params.assign(t.model().params().data(),
                       t.model().params().data() + t.model().params().size());
  }
  RunConfig part = config("bf16", "resume_part", {"train.checkpoint_every=4"});
  {
    Trainer t(part);
    while (t.step() < 4) t.train_step();
    t.save();
  }
  Trainer t(part);  // resumes from step 4
  ASSERT_EQ(t.step(), 4);
  std::vector<double> got;
  while (t.step() < part.train.steps) got.push_back(t.train_step().loss);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[4 + i]) << "step " << 5 + i;
  EXPECT_EQ(std::memcmp(want_params.data(), t.model().params().data(),
                        want_params.size() * sizeof(float)),
            0);
}

}  // namespace
}  // namespace strata
