// The offloads in the step loop. optim.offload = "nvme": master weights and Adam moments in files
// train bitwise like the in-memory optimizer, keep only chunk buffers resident (arena accounting),
// and checkpoint and resume through the files. optim.offload = "cpu": the state in host memory and
// the update on the host, bitwise like AdamW (with gradient accumulation, f32 and bf16), none of
// it in the model's arena, resuming exactly. train.activation_offload: bitwise the same losses
// with fewer device activations.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "model/decoder.h"
#include "optim/adamw.h"
#include "optim/host_offload.h"
#include "run/config.h"
#include "small_run.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

RunConfig config(const std::string& name, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"train.steps=8", "optim.offload_chunk_mb=0.05"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return test_support::small_run_config(test_support::fresh_dir("offload_" + name), sets);
}

struct RunResult {
  std::vector<double> losses;
  std::vector<float> params;
};

RunResult train(const RunConfig& c, int64_t until = -1) {
  Trainer t(c);
  RunResult r;
  while (t.step() < (until < 0 ? c.train.steps : until)) r.losses.push_back(t.train_step().loss);
  r.params.assign(t.model().params().data(), t.model().params().data() + t.model().params().size());
  if (until >= 0) t.save();
  return r;
}

TEST(OffloadTraining, BitwiseLikeInMemoryAndSmallResidentState) {
  for (const char* precision : {"f32", "bf16"}) {
    const std::string p = precision;
    const RunResult want = train(config("mem_" + p, {"train.precision=" + p}));
    const RunResult got =
        train(config("nvme_" + p, {"train.precision=" + p, "optim.offload=nvme"}));
    EXPECT_EQ(got.losses, want.losses) << p;
    EXPECT_EQ(std::memcmp(got.params.data(), want.params.data(), got.params.size() * 4), 0) << p;
  }
  Trainer mem(config("arena_mem"));
  Trainer nvme(config("arena_nvme", {"optim.offload=nvme"}));
  const int64_t in_memory = mem.arena().current(MemCategory::optimizer);
  const int64_t offloaded =
      nvme.arena().current(MemCategory::optimizer) + nvme.arena().current(MemCategory::master);
  EXPECT_LT(offloaded, in_memory / 2)
      << "resident optimizer state: " << offloaded << " vs " << in_memory;
}

TEST(OffloadTraining, ResumesBitwiseFromACheckpoint) {
  const RunResult whole = train(config("whole", {"optim.offload=nvme"}));
  const RunConfig part = config("part", {"optim.offload=nvme"});
  train(part, 4);   // 4 steps, then a checkpoint
  Trainer t(part);  // resumes: master and moments written back into the files
  ASSERT_EQ(t.step(), 4);
  std::vector<double> losses;
  while (t.step() < part.train.steps) losses.push_back(t.train_step().loss);
  for (size_t i = 0; i < losses.size(); ++i) EXPECT_EQ(losses[i], whole.losses[4 + i]);
  EXPECT_EQ(std::memcmp(t.model().params().data(), whole.params.data(), whole.params.size() * 4),
            0);
}

TEST(HostOffloadTraining, BitwiseLikeAdamWWithTheStateOffTheArena) {
  for (const char* precision : {"f32", "bf16"}) {
    const std::string p = precision;
    const std::vector<std::string> sets = {"train.precision=" + p, "train.grad_accum=2"};
    const RunResult want = train(config("adamw_" + p, sets));
    std::vector<std::string> cpu = sets;
    cpu.push_back("optim.offload=cpu");
    const RunResult got = train(config("cpu_" + p, cpu));
    EXPECT_EQ(got.losses, want.losses) << p;
    EXPECT_EQ(std::memcmp(got.params.data(), want.params.data(), got.params.size() * 4), 0) << p;
  }
  Trainer mem(config("arena_adamw"));
  Trainer host(config("arena_cpu", {"optim.offload=cpu"}));
  EXPECT_GT(mem.arena().current(MemCategory::optimizer), 0);
  EXPECT_EQ(host.arena().current(MemCategory::optimizer), 0);
  EXPECT_EQ(host.arena().current(MemCategory::master), 0);
  EXPECT_EQ(host.arena().stats().total_current + mem.arena().current(MemCategory::optimizer),
            mem.arena().stats().total_current);
}

TEST(HostOffloadTraining, ResumesBitwiseFromACheckpoint) {
  const RunResult whole = train(config("cpu_whole", {"optim.offload=cpu"}));
  const RunConfig part = config("cpu_part", {"optim.offload=cpu"});
  train(part, 4);
  Trainer t(part);  // resumes: master and moments written back into host memory
  ASSERT_EQ(t.step(), 4);
  std::vector<double> losses;
  while (t.step() < part.train.steps) losses.push_back(t.train_step().loss);
  for (size_t i = 0; i < losses.size(); ++i) EXPECT_EQ(losses[i], whole.losses[4 + i]);
  EXPECT_EQ(std::memcmp(t.model().params().data(), whole.params.data(), whole.params.size() * 4),
            0);
}

TEST(ActivationOffloadTraining, BitwiseTheSameLossesWithFewerDeviceActivations) {
  const std::vector<std::string> sets = {"model.n_layer=4", "train.precision=bf16"};
  const RunResult want = train(config("acts_keep", sets));
  std::vector<std::string> off = sets;
  off.push_back("train.activation_offload=true");
  off.push_back("optim.offload=cpu");  // both offloads together
  const RunResult got = train(config("acts_off", off));
  EXPECT_EQ(got.losses, want.losses);
  EXPECT_EQ(std::memcmp(got.params.data(), want.params.data(), got.params.size() * 4), 0);
  Trainer keep(config("acts_arena_keep", sets));
  Trainer moved(config("acts_arena_off", off));
  EXPECT_LT(moved.arena().current(MemCategory::activations),
            keep.arena().current(MemCategory::activations));
  ASSERT_NE(moved.model().activation_offload(), nullptr);
  EXPECT_EQ(moved.model().activation_offload()->offloaded_layers(), 2);
}

}  // namespace
}  // namespace strata
