// Damaged checkpoints: a corrupted, truncated or missing slice file is found by its checksum (or
// its size), the resume says which file and falls back to the previous committed checkpoint; a
// save that cannot be written leaves the last good checkpoint as it was. Plus the async save's
// accounting and keep_last.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "small_run.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// Trains 4 steps saving every 2 (committed: step 2 and step 4); returns the run directory.
std::string run_with_two_checkpoints(const std::string& name, bool async) {
  const std::string dir = test_support::fresh_dir("ckpt_faults_" + name);
  RunConfig c = test_support::small_run_config(
      dir, {"train.steps=4", "train.checkpoint_every=2",
            std::string("train.async_checkpoint=") + (async ? "true" : "false")});
  Trainer t(c);
  t.run();
  return dir;
}

std::string slice_file(const std::string& run_dir, int step) {
  char name[64];
  std::snprintf(name, sizeof name, "ckpt/step_%08d/rank_00000.safetensors", step);
  return (fs::path(run_dir) / name).string();
}

int64_t resumed_step(const std::string& run_dir) {
  RunConfig c = test_support::small_run_config(run_dir, {"train.steps=4", "run.resume=auto"});
  Trainer t(c);
  return t.step();
}

TEST(CheckpointFaults, BothSavesCommitAndResumeTakesTheLatest) {
  for (bool async : {true, false}) {
    const std::string dir = run_with_two_checkpoints(async ? "async" : "sync", async);
    const std::vector<std::string> committed = committed_checkpoints(dir + "/ckpt");
    ASSERT_EQ(committed.size(), 2u);
    EXPECT_EQ(fs::path(committed[0]).filename(), "step_00000004");
    EXPECT_EQ(resumed_step(dir), 4);
    // No temporary directory is left behind.
    for (const auto& e : fs::directory_iterator(dir + "/ckpt"))
      EXPECT_NE(e.path().filename().string()[0], '.') << e.path();
  }
}

TEST(CheckpointFaults, CorruptedSliceFallsBackToThePreviousCheckpoint) {
  const std::string dir = run_with_two_checkpoints("corrupt", true);
  const std::string file = slice_file(dir, 4);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(file) - 100));
    const char byte = 0x5a;
    f.write(&byte, 1);  // a flipped byte inside the last tensor's data
  }
  testing::internal::CaptureStderr();
  EXPECT_EQ(resumed_step(dir), 2);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("rank_00000.safetensors"), std::string::npos) << log;
  EXPECT_NE(log.find("does not match its checksum"), std::string::npos) << log;
  EXPECT_NE(log.find("falling back to"), std::string::npos) << log;
}

TEST(CheckpointFaults, TruncatedOrMissingSliceFallsBack) {
  for (bool truncate : {true, false}) {
    const std::string dir = run_with_two_checkpoints(truncate ? "truncated" : "missing", true);
    const std::string file = slice_file(dir, 4);
    if (truncate)
      fs::resize_file(file, fs::file_size(file) / 2);
    else
      fs::remove(file);
    testing::internal::CaptureStderr();
    EXPECT_EQ(resumed_step(dir), 2);
    const std::string log = testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find("rank_00000.safetensors"), std::string::npos) << log;
  }
}

TEST(CheckpointFaults, EveryCheckpointDamagedIsOneClearError) {
  const std::string dir = run_with_two_checkpoints("all_bad", true);
  fs::remove(slice_file(dir, 4));
  fs::remove(slice_file(dir, 2));
  testing::internal::CaptureStderr();
  try {
    resumed_step(dir);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no usable checkpoint"), std::string::npos) << e.what();
  }
  testing::internal::GetCapturedStderr();
}

// A save that fails half way (its temporary directory replaced by a file after the slices are
// written, so the commit cannot read them back, as a failing disk would) is abandoned: the
// committed checkpoints and `latest` are untouched and the run resumes from the last good one.
TEST(CheckpointFaults, FailedSaveKeepsTheLastGoodCheckpoint) {
  const std::string dir = run_with_two_checkpoints("failed_save", false);
  const std::string latest_before = *latest_checkpoint(dir + "/ckpt");
  RunConfig c = test_support::small_run_config(
      dir, {"train.steps=6", "run.resume=auto", "train.async_checkpoint=false"});
  Trainer t(c);
  ASSERT_EQ(t.step(), 4);
  t.train_step();
  const std::string tmp = checkpoint_tmp_dir(dir + "/ckpt", 5);
  testing::internal::CaptureStderr();
  t.begin_save();
  fs::remove_all(tmp);
  { std::ofstream(tmp) << "not a directory"; }
  EXPECT_EQ(t.poll_checkpoint(true), "");
  testing::internal::GetCapturedStderr();
  EXPECT_FALSE(fs::exists(tmp));  // abandoned
  EXPECT_FALSE(fs::exists(dir + "/ckpt/step_00000005"));
  EXPECT_EQ(*latest_checkpoint(dir + "/ckpt"), latest_before);
  EXPECT_EQ(resumed_step(dir), 4);
}

}  // namespace
}  // namespace strata
