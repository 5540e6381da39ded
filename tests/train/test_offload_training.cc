// optim.offload = "nvme": the step loop with master weights and Adam moments in files trains
// bitwise like the in-memory optimizer, keeps only chunk buffers resident (arena accounting),
// and checkpoints and resumes through the files.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "small_run.h"
#include "train/config.h"
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

}  // namespace
}  // namespace strata
