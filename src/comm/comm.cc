#include "comm/comm.h"

#include <cstdio>

#include "core/error.h"
#include "core/log.h"

namespace strata {

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_reduce:
      return "all_reduce";
    case CommOp::reduce_scatter:
      return "reduce_scatter";
    case CommOp::all_gather:
      return "all_gather";
    case CommOp::broadcast:
      return "broadcast";
    case CommOp::send:
      return "send";
    case CommOp::recv:
      return "recv";
    case CommOp::all_to_all:
      return "all_to_all";
    case CommOp::barrier:
      return "barrier";
  }
  return "?";
}

int64_t CommStats::total_bytes() const {
  int64_t total = 0;
  for (const CommOpStats& s : ops) total += s.bytes;
  return total;
}

double CommStats::total_wait_seconds() const {
  double total = 0;
  for (const CommOpStats& s : ops) total += s.wait_seconds;
  return total;
}

CommStats& CommStats::operator+=(const CommStats& other) {
  for (int i = 0; i < kNumCommOps; ++i) {
    ops[i].calls += other.ops[i].calls;
    ops[i].bytes += other.ops[i].bytes;
    ops[i].seconds += other.ops[i].seconds;
    ops[i].wait_seconds += other.ops[i].wait_seconds;
  }
  return *this;
}

std::string CommStats::summary() const {
  std::string out;
  for (int i = 0; i < kNumCommOps; ++i) {
    const CommOpStats& s = ops[i];
    if (s.calls == 0) continue;
    char line[160];
    std::snprintf(line, sizeof line, "%s%s %lld calls %.1f MB %.3f s (wait %.3f s)",
                  out.empty() ? "" : ", ", comm_op_name(static_cast<CommOp>(i)),
                  static_cast<long long>(s.calls), static_cast<double>(s.bytes) / 1e6, s.seconds,
                  s.wait_seconds);
    out += line;
  }
  return out.empty() ? "no communication" : out;
}

namespace {
TimeoutHint& hint_slot() {
  static TimeoutHint hint;
  return hint;
}
}  // namespace

void set_timeout_hint(TimeoutHint hint) {
  hint_slot() = std::move(hint);
}

std::string timeout_hint(const std::vector<int>& group_world_ranks, const std::string& operation) {
  const TimeoutHint& hint = hint_slot();
  if (!hint) return "";
  try {
    return hint(group_world_ranks, operation);
  } catch (...) {
    return "";  // a hint must never stand in the way of the error itself
  }
}

void log_comm_timeout(const std::string& what, int64_t step, double timeout_seconds, int64_t bytes,
                      const std::string& behind, int peer_world_rank,
                      const std::vector<int>& group_world_ranks) {
  char within[32];
  std::snprintf(within, sizeof within, "%.1f", timeout_seconds);
  const std::string suspect =
      peer_world_rank >= 0 ? cat("peer world rank ", peer_world_rank, " may have hung or died")
                           : std::string("a peer rank may have hung or died");
  const std::string hint = timeout_hint(group_world_ranks, what);
  log::error("comm timeout: ", what, " at step ", step, " did not complete within ", within, " s",
             bytes >= 0 ? cat(" (", bytes, " bytes)") : std::string(), behind, "; ",
             hint.empty() ? suspect : hint);
}

}  // namespace strata
