// The offloads of the step loop with copies that really run beside it (ThreadedCopyBackend,
// tests/model/threaded_copy_backend.h): the optimizer state on the host (optim.offload = "cpu":
// gradients download and new parameters upload in chunks), activations to the host and back
// (train.activation_offload), gradient accumulation, a checkpoint and a resume; bitwise the run on
// the CPU backend, whose queue copies at once. A host buffer used before its download was waited
// for, or a device buffer overwritten while a copy still reads it, gives other numbers here, and
// under ThreadSanitizer (scripts/test_tsan.sh) a reported data race.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/threaded_copy_backend.h"
#include "small_run.h"
#include "train/trainer.h"

namespace strata {
namespace {

TEST(AsynchronousCopies, OffloadedRunsAreBitwiseTheCpuRun) {
  for (const char* p : {"f32", "bf16"}) {
    const std::string precision = p;
    const std::vector<std::string> sets = {"model.n_layer=4",
                                           "train.precision=" + precision,
                                           "train.grad_accum=2",
                                           "optim.offload=cpu",
                                           "optim.offload_chunk_mb=0.01",
                                           "train.activation_offload=true",
                                           "train.async_checkpoint=true"};
    std::vector<double> cpu_losses;
    std::vector<float> cpu_params;
    {
      Trainer t(test_support::small_run_config(
          test_support::fresh_dir("async_copies_cpu_" + precision), sets));
      for (int i = 0; i < 6; ++i) cpu_losses.push_back(t.train_step().loss);
      cpu_params = t.global_params();
    }
    const std::string dir = test_support::fresh_dir("async_copies_threaded_" + precision);
    testing::ThreadedCopyBackend device;
    {
      Trainer t(test_support::small_run_config(dir, sets), nullptr, &device);
      ASSERT_NE(t.model().activation_offload(), nullptr) << precision;
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(t.train_step().loss, cpu_losses[i]) << precision << ", step " << i;
      t.save();
    }
    Trainer resumed(test_support::small_run_config(dir, sets), nullptr, &device);
    ASSERT_EQ(resumed.step(), 3) << precision;
    for (int i = 3; i < 6; ++i)
      EXPECT_EQ(resumed.train_step().loss, cpu_losses[i]) << precision << ", step " << i;
    EXPECT_EQ(resumed.global_params(), cpu_params) << precision;
  }
}

}  // namespace
}  // namespace strata
