// The step loop on a device whose memory the host cannot touch (tests/model/guarded_backend.h): a
// trainer that reads or writes a device buffer behind the backend's back (a checkpoint, a resume,
// a fault injection, a replica checksum) crashes here as it would misbehave on a GPU. The run must
// also match the plain CPU run bitwise: the same kernels run in the same order.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "model/guarded_backend.h"
#include "small_run.h"
#include "train/trainer.h"

namespace strata {
namespace {

using Case = std::tuple<std::string, std::string>;  // family, precision

RunConfig device_config(const Case& c, const std::string& dir) {
  std::vector<std::string> sets = {"model.family=" + std::get<0>(c),
                                   "train.precision=" + std::get<1>(c), "model.attention=flash",
                                   "train.grad_accum=2"};
  if (std::get<0>(c) == "llama") sets.push_back("model.n_kv_head=2");
  return test_support::small_run_config(dir, sets);
}

class TrainerOnDevice : public ::testing::TestWithParam<Case> {};

TEST_P(TrainerOnDevice, StepsCheckpointsAndResumesThroughTheBackendOnly) {
  const std::string tag = std::get<0>(GetParam()) + "_" + std::get<1>(GetParam());
  std::vector<double> cpu_losses;
  std::vector<float> cpu_params;
  {
    Trainer t(device_config(GetParam(), test_support::fresh_dir("device_cpu_" + tag)));
    for (int i = 0; i < 6; ++i) cpu_losses.push_back(t.train_step().loss);
    cpu_params = t.global_params();
  }
  const std::string dir = test_support::fresh_dir("device_guarded_" + tag);
  testing::GuardedBackend device;
  {
    Trainer t(device_config(GetParam(), dir), nullptr, &device);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(t.train_step().loss, cpu_losses[i]) << "step " << i;
    t.save();
  }
  Trainer resumed(device_config(GetParam(), dir), nullptr, &device);
  ASSERT_EQ(resumed.step(), 3);
  for (int i = 3; i < 6; ++i) EXPECT_EQ(resumed.train_step().loss, cpu_losses[i]) << "step " << i;
  EXPECT_TRUE(std::isfinite(resumed.evaluate()));
  EXPECT_EQ(resumed.global_params(), cpu_params);
  EXPECT_TRUE(device.guarded_memory().locked());
}

TEST(TrainerOnDevice, FaultInjectionAndReplicaChecksReachDeviceBuffersThroughTheBackend) {
  const std::string dir = test_support::fresh_dir("device_faults");
  RunConfig c = test_support::small_run_config(
      dir, {"model.attention=flash", "fault.nan_rank=0", "fault.nan_step=2", "fault.nan_steps=1",
            "fault.diverge_rank=0", "fault.diverge_step=3"});
  testing::GuardedBackend device;
  Trainer t(c, nullptr, &device);
  EXPECT_FALSE(t.train_step().nonfinite);
  EXPECT_TRUE(t.train_step().nonfinite);  // the injected NaN gradient: the update is skipped
  EXPECT_FALSE(t.train_step().nonfinite);
  // The perturbed first parameter (diverge_step 3) is visible through the backend.
  const std::vector<float> after = t.global_params();
  EXPECT_TRUE(std::isfinite(after[0]));
}

INSTANTIATE_TEST_SUITE_P(Cases, TrainerOnDevice,
                         ::testing::Combine(::testing::Values("gpt2", "llama"),
                                            ::testing::Values("f32", "bf16")),
                         [](const auto& param_info) {
                           return std::get<0>(param_info.param) + "_" +
                                  std::get<1>(param_info.param);
                         });

}  // namespace
}  // namespace strata
