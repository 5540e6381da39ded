// Helpers for the tests that run real jobs of fake ranks under mpirun.
#pragma once
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "io/atomic_file.h"
#include "io/temp_dir.h"
#include "launch/launch_options.h"

namespace strata::launch::testing {

// Sets environment variables for one test and restores them afterwards.
class ScopedEnv {
 public:
  ScopedEnv() = default;
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second.first)
        ::setenv(it->first.c_str(), it->second.second.c_str(), 1);
      else
        ::unsetenv(it->first.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  void set(const std::string& name, const std::string& value) {
    const char* old = std::getenv(name.c_str());
    saved_.push_back({name, {old != nullptr, old ? old : ""}});
    ::setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  std::vector<std::pair<std::string, std::pair<bool, std::string>>> saved_;
};

// Options for N fake ranks writing into `run_dir`, with timeouts short enough for tests.
inline LaunchOptions fake_job(int ranks, const std::string& run_dir) {
  LaunchOptions o;
  o.ranks = ranks;
  o.program = STRATA_FAKE_RANK;
  o.args = {run_dir};
  o.run_dir = run_dir;
  // Long enough that a loaded machine never makes a healthy rank look hung; the hang tests
  // shorten it.
  o.heartbeat_timeout = 10;
  o.startup_timeout = 10;
  o.kill_grace = 2;
  o.restart_delay = 0.2;
  return o;
}

// What `pgrep -af` finds of this job's processes (fake ranks, and mpirun, whose command line
// names them), waiting up to `seconds` for processes that were just killed to go. The bracket
// keeps the pattern from matching the shell that runs pgrep.
inline std::string leftover_processes(const std::string& run_dir, double seconds = 3) {
  const std::string cmd = "pgrep -af 'fake_ran[k] " + run_dir + "'";
  const auto start = std::chrono::steady_clock::now();
  std::string out;
  do {
    out.clear();
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[512];
      while (std::fgets(buf, sizeof buf, p)) out += buf;
      ::pclose(p);
    }
    if (out.empty()) return out;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (std::chrono::steady_clock::now() - start < std::chrono::duration<double>(seconds));
  return out;
}

inline std::string file_or_empty(const std::string& path) {
  try {
    return io::read_file(path);
  } catch (const Error&) {
    return "";
  }
}

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace strata::launch::testing
