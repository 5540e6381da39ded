// The log from several threads: the trainer sets the rank and the level while the progress
// engine's thread, the checkpoint writer or the MLflow worker may be writing a line. Under
// ThreadSanitizer (scripts/test_tsan.sh) this test is what shows that those settings are read
// and written under the log's lock.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/log.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

TEST(Log, RankAndLevelChangeWhileAnotherThreadWrites) {
  const fs::path path = fs::temp_directory_path() / cat("strata_log_", ::getpid(), ".log");
  fs::remove(path);
  log::open_file(path.string());
  constexpr int kLines = 200;
  std::atomic<bool> started{false};
  // Debug lines: below every level set here, so they go to the file only (none on stderr).
  std::thread writer([&] {
    started.store(true);
    for (int i = 0; i < kLines; ++i) log::debug("line ", i);
  });
  while (!started.load()) std::this_thread::yield();
  for (int i = 0; i < kLines; ++i) {
    log::set_rank(i % 2);
    log::set_level(i % 2 ? log::Level::warn : log::Level::info);
  }
  writer.join();
  log::close_file();
  log::set_rank(-1);
  log::set_level(log::Level::info);

  std::ifstream f(path);
  int lines = 0;
  for (std::string line; std::getline(f, line); ++lines)
    EXPECT_NE(line.find("debug"), std::string::npos) << line;
  EXPECT_EQ(lines, kLines);
  fs::remove(path);
}

}  // namespace

}  // namespace strata
