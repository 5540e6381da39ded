#include "launch/watchdog.h"

#include <cstdio>

#include "core/error.h"

namespace strata::launch {

namespace {

bool same(const Heartbeat& a, const Heartbeat& b) {
  return a.step == b.step && a.time == b.time && a.phase == b.phase && a.pid == b.pid;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

}  // namespace

Watchdog::Watchdog(WatchdogConfig config) : config_(config), state_(config.ranks) {}

std::optional<Silence> Watchdog::check(double now,
                                       const std::vector<std::optional<Heartbeat>>& beats) {
  if (config_.heartbeat_timeout <= 0) return std::nullopt;
  for (int r = 0; r < config_.ranks; ++r) {
    const std::optional<Heartbeat>& beat =
        r < static_cast<int>(beats.size()) ? beats[r] : std::nullopt;
    RankState& s = state_[r];
    if (!beat) continue;  // a file that vanished keeps its last state
    if (!s.last || !same(*s.last, *beat)) {
      s.last = beat;
      s.changed_at = now;
      if (first_beat_at_ < 0) first_beat_at_ = now;
    }
  }

  Silence silence;
  if (first_beat_at_ < 0) {
    if (config_.startup_timeout > 0 && now > config_.startup_timeout) {
      for (int r = 0; r < config_.ranks; ++r) silence.ranks.push_back(r);
      silence.message =
          cat("no rank wrote a heartbeat within ", seconds_text(config_.startup_timeout),
              " of the start (startup timeout)");
      return silence;
    }
    return std::nullopt;
  }

  std::string details;
  for (int r = 0; r < config_.ranks; ++r) {
    const RankState& s = state_[r];
    if (s.last && s.last->phase == kPhaseDone) continue;
    const double since = s.changed_at >= 0 ? s.changed_at : first_beat_at_;
    if (now - since <= config_.heartbeat_timeout) continue;
    silence.ranks.push_back(r);
    if (!details.empty()) details += "; ";
    if (s.last) {
      details += cat("rank ", r, " silent for ", seconds_text(now - since),
                     " (last heartbeat: step ", s.last->step, ", phase \"", s.last->phase, "\"");
      if (!s.last->host.empty()) details += cat(", pid ", s.last->pid, " on ", s.last->host);
      details += ")";
    } else {
      details += cat("rank ", r, " never wrote a heartbeat (", seconds_text(now - since),
                     " after the first rank did)");
    }
  }
  if (silence.ranks.empty()) return std::nullopt;
  silence.message = cat(details, "; heartbeat timeout ", seconds_text(config_.heartbeat_timeout));
  return silence;
}

}  // namespace strata::launch
