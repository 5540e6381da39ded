// Elapsed wall time on the monotonic clock, for the time splits the trainer and checkpoints report.
#pragma once
#include <chrono>

namespace strata {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace strata
