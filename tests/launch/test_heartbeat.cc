// Heartbeat files: the exact format the trainer writes and the supervisor reads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "io/atomic_file.h"
#include "io/temp_dir.h"
#include "launch/heartbeat.h"

namespace strata::launch {
namespace {

TEST(Heartbeat, PathIsZeroPadded) {
  EXPECT_EQ(heartbeat_path("runs/x", 7), "runs/x/heartbeat/rank_007.json");
  EXPECT_EQ(heartbeat_path("runs/x", 1234), "runs/x/heartbeat/rank_1234.json");
}

TEST(Heartbeat, ExactFormat) {
  Heartbeat b;
  b.rank = 1;
  b.step = 42;
  b.time = 1764400000.125;
  b.phase = "step";
  b.pid = 12345;
  b.host = "node7";
  EXPECT_EQ(format_heartbeat(b),
            "{\"rank\":1,\"step\":42,\"time\":1764400000.125,\"phase\":\"step\",\"pid\":12345,"
            "\"host\":\"node7\"}\n");
  const auto back = parse_heartbeat(format_heartbeat(b));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->rank, 1);
  EXPECT_EQ(back->step, 42);
  EXPECT_EQ(back->time, 1764400000.125);
  EXPECT_EQ(back->phase, "step");
  EXPECT_EQ(back->pid, 12345);
  EXPECT_EQ(back->host, "node7");
}

TEST(Heartbeat, WriteThenRead) {
  io::TempDir dir;
  const std::string run = dir.file("run");  // created by the first write
  EXPECT_FALSE(read_heartbeat(run, 3));
  const double before = static_cast<double>(std::time(nullptr)) - 1;
  write_heartbeat(run, 3, 17, "eval");
  const auto beat = read_heartbeat(run, 3);
  ASSERT_TRUE(beat);
  EXPECT_EQ(beat->rank, 3);
  EXPECT_EQ(beat->step, 17);
  EXPECT_EQ(beat->phase, "eval");
  EXPECT_EQ(beat->pid, ::getpid());
  EXPECT_FALSE(beat->host.empty());
  EXPECT_GE(beat->time, before);
  EXPECT_LE(beat->time, static_cast<double>(std::time(nullptr)) + 1);

  write_heartbeat(run, 3, 18, "step");  // replaces, leaves no temporary behind
  EXPECT_EQ(read_heartbeat(run, 3)->step, 18);
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(heartbeat_dir(run)))
    ++files;
  EXPECT_EQ(files, 1u);
}

TEST(Heartbeat, MalformedFilesAreNoHeartbeat) {
  EXPECT_FALSE(parse_heartbeat(""));
  EXPECT_FALSE(parse_heartbeat("{\"rank\":1"));
  EXPECT_FALSE(parse_heartbeat("[1,2]"));
  EXPECT_FALSE(parse_heartbeat("{\"rank\":\"1\",\"step\":1,\"time\":1}"));
  EXPECT_TRUE(parse_heartbeat("{\"rank\":1,\"step\":1,\"time\":1}"));  // phase etc. optional
  io::TempDir dir;
  io::make_dirs(heartbeat_dir(dir.path()));
  io::write_file_atomic(heartbeat_path(dir.path(), 0), "not json");
  EXPECT_FALSE(read_heartbeat(dir.path(), 0));
}

TEST(Heartbeat, ClearRemovesOnlyRankFiles) {
  io::TempDir dir;
  write_heartbeat(dir.path(), 0, 1, "step");
  write_heartbeat(dir.path(), 1, 1, "step");
  io::write_file_atomic(heartbeat_dir(dir.path()) + "/README", "keep");
  clear_heartbeats(dir.path());
  EXPECT_FALSE(read_heartbeat(dir.path(), 0));
  EXPECT_FALSE(read_heartbeat(dir.path(), 1));
  EXPECT_TRUE(std::filesystem::exists(heartbeat_dir(dir.path()) + "/README"));
  clear_heartbeats(dir.file("missing"));  // no directory: nothing to do
}

TEST(Heartbeat, UnwritableDirectoryIsAnError) {
  io::TempDir dir;
  io::write_file_atomic(dir.file("file"), "x");
  EXPECT_THROW(write_heartbeat(dir.file("file"), 0, 1, "step"), Error);
}

}  // namespace
}  // namespace strata::launch
