// Damaged checkpoints: a corrupted, truncated or missing slice file is found by its checksum (or
// its size), the resume says which file and falls back to the previous committed checkpoint; a
// save that cannot be written leaves the last good checkpoint as it was. Plus the async save's
// accounting and keep_last, and the slice checksums of both formats (v3: XXH3, v2: XXH64).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "io/atomic_file.h"
#include "io/checksum.h"
#include "io/safetensors.h"
#include "small_run.h"
#include "track/checkpoint_digest.h"
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

std::string step_dir(const std::string& run_dir, int step) {
  return fs::path(slice_file(run_dir, step)).parent_path().string();
}

nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(io::read_file(path));
}

// The bytes of one slice, as its rank file stores them.
std::string slice_bytes(const std::string& ckpt, const nlohmann::json& slice) {
  const io::SafetensorsFile f =
      io::SafetensorsFile::open(ckpt + "/" + slice.at("file").get<std::string>());
  const std::string key = slice.at("key").get<std::string>();
  std::string bytes(f.info(key).bytes, '\0');
  f.read_into(key, bytes.data(), bytes.size());
  return bytes;
}

// Turns a checkpoint written now (format v3, XXH3) into what strata wrote before v3: format v2
// in index.json and state.json, and each slice's XXH64 under "xxh64" instead of its "xxh3".
// (The rank files' own slice lists keep their xxh3 entries: only the commit reads them.)
void rewrite_as_v2(const std::string& ckpt) {
  nlohmann::json index = read_json(ckpt + "/index.json");
  for (nlohmann::json& s : index["slices"]) {
    s.erase("xxh3");
    s["xxh64"] = io::hex64(io::xxhash64(slice_bytes(ckpt, s)));
  }
  index["format"] = "strata-checkpoint-v2";
  io::write_file_atomic(ckpt + "/index.json", index.dump(1));
  nlohmann::json state = read_json(ckpt + "/state.json");
  state["format"] = "strata-checkpoint-v2";
  io::write_file_atomic(ckpt + "/state.json", state.dump(2));
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

// A checkpoint written now records format v3 and each slice's XXH3 (index.json and the rank
// file's own list), which are the XXH3 of the stored bytes, and both checkers accept it.
TEST(CheckpointFaults, NewCheckpointsRecordXxh3AndVerify) {
  const std::string dir = run_with_two_checkpoints("xxh3", false);
  const std::string ckpt = step_dir(dir, 4);
  const nlohmann::json index = read_json(ckpt + "/index.json");
  EXPECT_EQ(index["format"], "strata-checkpoint-v3");
  EXPECT_EQ(read_json(ckpt + "/state.json")["format"], "strata-checkpoint-v3");
  ASSERT_FALSE(index["slices"].empty());
  for (const nlohmann::json& s : index["slices"]) {
    ASSERT_TRUE(s.contains("xxh3")) << s.dump();
    EXPECT_FALSE(s.contains("xxh64")) << s.dump();
    EXPECT_EQ(s["xxh3"], io::hex64(io::xxh3_64(slice_bytes(ckpt, s)))) << s.dump();
  }
  for (const SliceEntry& e : read_slice_file_entries(slice_file(dir, 4)))
    EXPECT_EQ(e.checksum_algorithm, io::Checksum::xxh3) << e.key;
  EXPECT_NO_THROW(registry::verify_slices(ckpt));
  EXPECT_EQ(resumed_step(dir), 4);
}

// A checkpoint in the format before v3 (XXH64 digests) still loads and still verifies; a flipped
// byte in it is still found (by its XXH64), the resume falls back to the previous one, and the
// run's next save is format v3 again.
TEST(CheckpointFaults, OldXxh64CheckpointLoadsAndCorruptionIsFound) {
  const std::string dir = run_with_two_checkpoints("xxh64", false);
  rewrite_as_v2(step_dir(dir, 2));
  rewrite_as_v2(step_dir(dir, 4));
  const std::string hash_v2 = registry::content_hash(step_dir(dir, 4));
  EXPECT_NO_THROW(registry::verify_slices(step_dir(dir, 4)));
  EXPECT_EQ(resumed_step(dir), 4);

  const std::string file = slice_file(dir, 4);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(fs::file_size(file) - 100));
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5a);  // surely a different byte
    f.seekp(static_cast<std::streamoff>(fs::file_size(file) - 100));
    f.write(&byte, 1);
  }
  try {
    registry::verify_slices(step_dir(dir, 4));
    ADD_FAILURE() << "verify_slices accepted a corrupted v2 checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("xxh64 expected"), std::string::npos) << e.what();
  }
  testing::internal::CaptureStderr();
  {
    RunConfig c =
        test_support::small_run_config(dir, {"train.steps=4", "train.checkpoint_every=2",
                                             "run.resume=auto", "train.async_checkpoint=false"});
    Trainer t(c);
    EXPECT_EQ(t.step(), 2);  // step 4 is damaged: the v2 checkpoint of step 2
    t.run();                 // saves step 4 again
  }
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("rank_00000.safetensors"), std::string::npos) << log;
  EXPECT_NE(log.find("does not match its checksum"), std::string::npos) << log;
  EXPECT_NE(log.find("falling back to"), std::string::npos) << log;
  const nlohmann::json index = read_json(step_dir(dir, 4) + "/index.json");
  EXPECT_EQ(index["format"], "strata-checkpoint-v3");
  for (const nlohmann::json& s : index["slices"]) EXPECT_TRUE(s.contains("xxh3")) << s.dump();
  EXPECT_NE(registry::content_hash(step_dir(dir, 4)), hash_v2);
  EXPECT_EQ(resumed_step(dir), 4);
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
