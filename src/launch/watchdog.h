// Watchdog: decides, from the ranks' heartbeats, when a running job is hung. Pure logic over
// (time, heartbeats) so that it is tested without processes; the supervisor feeds it every second.
//
// Silence is measured with the supervisor's clock from when it saw a rank's file change, never by
// comparing the rank's clock with ours (nodes' clocks differ). Rules:
//   - before any rank has beaten: the job is hung when startup_timeout has passed;
//   - once the first beat appeared at t0: a rank is silent when its last change (or t0, for a rank
//     that has not beaten yet: that is its start-up grace) is older than heartbeat_timeout;
//   - a rank whose phase is "done" has finished and is never silent.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "launch/heartbeat.h"

namespace strata::launch {

struct WatchdogConfig {
  int ranks = 1;
  double heartbeat_timeout = 300;  // seconds; <= 0 disables the watchdog
  double startup_timeout = 600;    // seconds until the first heartbeat; <= 0: no limit
};

struct Silence {
  std::vector<int> ranks;  // the silent ranks, ascending
  std::string message;     // one line naming them, their last step and phase, and for how long
};

class Watchdog {
 public:
  explicit Watchdog(WatchdogConfig config);

  // `now`: seconds since the job attempt started (monotonic). `beats[r]`: rank r's heartbeat as
  // read now, or nothing. Returns the verdict when the job is hung.
  std::optional<Silence> check(double now, const std::vector<std::optional<Heartbeat>>& beats);

 private:
  struct RankState {
    std::optional<Heartbeat> last;  // as last seen
    double changed_at = -1;         // when it last changed; -1: never seen
  };
  WatchdogConfig config_;
  std::vector<RankState> state_;
  double first_beat_at_ = -1;
};

}  // namespace strata::launch
