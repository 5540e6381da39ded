#include "core/log.h"

#include <chrono>
#include <ctime>
#include <mutex>

namespace strata::log {

namespace {
std::mutex g_mutex;  // guards everything below
Level g_level = Level::info;
int g_rank = -1;
FILE* g_file = nullptr;

const char* level_name(Level level) {
  switch (level) {
    case Level::debug:
      return "debug";
    case Level::info:
      return "info";
    case Level::warn:
      return "warn";
    case Level::error:
      return "error";
  }
  return "?";
}
}  // namespace

// Under the lock that write() holds: the trainer sets both while other threads (the progress
// engine, the checkpoint writer, the MLflow worker) may be writing a line (a data race found by
// ThreadSanitizer, tests/core/test_log.cc).
void set_level(Level level) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_level = level;
}
void set_rank(int rank) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_rank = rank;
}

void open_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_file) std::fclose(g_file);
  g_file = std::fopen(path.c_str(), "a");
  STRATA_CHECK(g_file != nullptr, "cannot open log file '", path, "' for appending");
}

void close_file() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_file) std::fclose(g_file);
  g_file = nullptr;
}

void write(Level level, const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const std::string prefix = g_rank >= 0 ? cat("[rank ", g_rank, "] ") : std::string();
  if (level >= g_level) {
    std::fprintf(stderr, "%s%s%s\n", prefix.c_str(),
                 level >= Level::warn ? cat(level_name(level), ": ").c_str() : "", line.c_str());
  }
  if (g_file) {
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", std::gmtime(&now));
    std::fprintf(g_file, "%s %s %s%s\n", stamp, level_name(level), prefix.c_str(), line.c_str());
    std::fflush(g_file);
  }
}

}  // namespace strata::log
