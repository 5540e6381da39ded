// optim.offload = "nvme": the step loop with master weights and Adam moments in files trains
// bitwise like the in-memory optimizer, keeps only chunk buffers resident (arena accounting),
// and checkpoints and resumes through the files.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "train/config.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

RunConfig config(const std::string& name, const std::vector<std::string>& extra = {}) {
  const fs::path dir = fs::temp_directory_path() / ("strata_test_offload_" + name);
  fs::remove_all(dir);
  std::vector<std::string> sets = {"run.dir=" + dir.string()};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return parse_config(R"(
[model]
n_layer = 2
n_head = 4
d_model = 64
vocab_size = 512
max_seq_len = 32
[train]
steps = 8
batch_size = 4
seq_len = 32
eval_every = 0
eval_batches = 2
[optim]
lr = 3e-3
warmup_steps = 2
offload_chunk_mb = 0.05
[data]
source = "synthetic"
)",
                      "test", sets);
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
