// The step loop on the GPU (system.device = "cuda") against the same run on the CPU: losses of
// every step within the precision's noise, exact resume on the GPU, and the run's artefacts
// (checkpoint, metrics) as on the CPU. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu_test.h"
#include "train/small_run.h"
#include "train/trainer.h"

namespace strata {
namespace {

RunConfig run_config(const std::string& device, const std::string& precision,
                     const std::string& dir) {
  return test_support::small_run_config(
      dir, {"system.device=" + device, "train.precision=" + precision, "model.attention=flash",
            "train.grad_accum=2"});
}

std::vector<double> losses(const std::string& device, const std::string& precision, int steps) {
  Trainer t(run_config(device, precision, test_support::fresh_dir("cuda_trainer_" + device)));
  std::vector<double> out;
  for (int i = 0; i < steps; ++i) out.push_back(t.train_step().loss);
  return out;
}

TEST(CudaTrainer, F32LossCurveMatchesTheCpu) {
  REQUIRE_GPU();
  const std::vector<double> cpu = losses("cpu", "f32", 6), gpu = losses("cuda", "f32", 6);
  // FP32 GEMMs on both (no TF32): differences are summation order only.
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-4 * cpu[i]) << i;
}

TEST(CudaTrainer, Bf16LossCurveMatchesTheCpuWithinBf16Noise) {
  REQUIRE_GPU();
  const std::vector<double> cpu = losses("cpu", "bf16", 6), gpu = losses("cuda", "bf16", 6);
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 2e-2 * cpu[i]) << i;
}

TEST(CudaTrainer, ResumeOnTheGpuIsExact) {
  REQUIRE_GPU();
  const std::string straight_dir = test_support::fresh_dir("cuda_trainer_straight");
  const std::string dir = test_support::fresh_dir("cuda_trainer_resume");
  std::vector<double> straight;
  std::vector<float> params;
  {
    Trainer t(run_config("cuda", "bf16", straight_dir));
    for (int i = 0; i < 6; ++i) straight.push_back(t.train_step().loss);
    params = t.global_params();
  }
  {
    Trainer t(run_config("cuda", "bf16", dir));
    for (int i = 0; i < 3; ++i) t.train_step();
    t.save();
  }
  Trainer resumed(run_config("cuda", "bf16", dir));
  ASSERT_EQ(resumed.step(), 3);
  // The GPU kernels are deterministic (no atomics; fixed cuBLASLt plans), so the resumed run
  // repeats the straight one bit for bit.
  for (int i = 3; i < 6; ++i) EXPECT_EQ(resumed.train_step().loss, straight[i]) << "step " << i;
  EXPECT_EQ(resumed.global_params(), params);
}

// Document masking on the GPU (ContextAttention over the CUDA range kernels, positions
// restarting per document on the device): the CPU run's losses, both position schemes (gpt2's
// learned positions, llama's RoPE). eos_id 3 in a vocabulary of 16: several documents a sequence.
std::vector<double> masked_losses(const std::string& device, const std::string& family,
                                  const std::string& precision) {
  RunConfig c = test_support::small_run_config(
      test_support::fresh_dir("cuda_trainer_docs_" + device),
      {"system.device=" + device, "train.precision=" + precision, "model.attention=flash",
       "model.family=" + family, "model.vocab_size=16", "data.document_mask=true",
       "data.eos_id=3"});
  Trainer t(c);
  std::vector<double> out;
  for (int i = 0; i < 6; ++i) out.push_back(t.train_step().loss);
  return out;
}

TEST(CudaTrainer, DocumentMaskLossCurveMatchesTheCpu) {
  REQUIRE_GPU();
  for (const char* family : {"gpt2", "llama"}) {
    SCOPED_TRACE(family);
    const auto cpu = masked_losses("cpu", family, "f32"),
               gpu = masked_losses("cuda", family, "f32");
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-4 * cpu[i]) << i;
    const auto cpu16 = masked_losses("cpu", family, "bf16");
    const auto gpu16 = masked_losses("cuda", family, "bf16");
    for (size_t i = 0; i < cpu16.size(); ++i) EXPECT_NEAR(gpu16[i], cpu16[i], 2e-2 * cpu16[i]) << i;
  }
}

TEST(CudaTrainer, RunWritesMetricsAndACheckpoint) {
  REQUIRE_GPU();
  RunConfig c = run_config("cuda", "bf16", test_support::fresh_dir("cuda_trainer_run"));
  c.train.steps = 4;
  c.train.eval_every = 2;
  Trainer t(c);
  EXPECT_TRUE(std::isfinite(t.run()));
  EXPECT_EQ(t.arena().allocations_after_freeze(), 0);
}

}  // namespace
}  // namespace strata
