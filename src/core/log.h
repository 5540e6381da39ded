// Logging: rank-aware lines to stderr and, when opened, to the run's plain log file.
#pragma once
#include <cstdio>
#include <string>

#include "core/error.h"

namespace strata::log {

enum class Level { debug, info, warn, error };

void set_level(Level level);
void set_rank(int rank);  // lines are prefixed with [rank r] when the world is larger than 1
void open_file(const std::string& path);
void close_file();
void write(Level level, const std::string& line);

template <typename... Args>
void info(const Args&... args) {
  write(Level::info, cat(args...));
}
template <typename... Args>
void warn(const Args&... args) {
  write(Level::warn, cat(args...));
}
template <typename... Args>
void error(const Args&... args) {
  write(Level::error, cat(args...));
}
template <typename... Args>
void debug(const Args&... args) {
  write(Level::debug, cat(args...));
}

}  // namespace strata::log
