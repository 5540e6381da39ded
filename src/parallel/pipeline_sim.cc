#include "parallel/pipeline_sim.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/error.h"

namespace strata {

namespace {

// One point-to-point message: (is gradient, micro-batch, from global stage, to global stage).
using Key = std::tuple<int, int, int, int>;

struct Transfer {
  int sends = 0, recvs = 0;
  bool issued = false;  // buffered: the send has run
  double issue_time = 0;
  bool posted = false;  // rendezvous: the receiver waits at the recv
  double post_time = 0;
  bool delivered = false;  // rendezvous: the send completed; the data is there
  double delivered_time = 0;
};

struct RankState {
  size_t pc = 0;
  double clock = 0;
  double busy = 0;
  int in_flight = 0;
};

}  // namespace

SimResult simulate(const std::vector<std::vector<PipelineAction>>& per_rank, int p, int m, int v,
                   double t_forward, double t_backward, double t_comm, bool rendezvous) {
  STRATA_CHECK(p >= 1 && m >= 1 && v >= 1, "simulate: p, m, v must be >= 1 (got ", p, ", ", m, ", ",
               v, ")");
  STRATA_CHECK(static_cast<int>(per_rank.size()) == p, "simulate: ", per_rank.size(),
               " rank schedules for p = ", p);
  const int G = p * v;
  SimResult result;
  std::vector<RankState> ranks(p);
  std::vector<std::vector<int>> fwd_done(G, std::vector<int>(m, 0));
  std::vector<std::vector<int>> bwd_done(G, std::vector<int>(m, 0));
  std::map<Key, Transfer> transfers;
  const auto violation = [&](int rank, size_t pc, const PipelineAction& a, const std::string& why) {
    result.violations.push_back(cat("rank ", rank, " action ", pc, " (", to_string(a), "): ", why));
  };
  const auto received = [&](const Key& key) {
    auto it = transfers.find(key);
    return it != transfers.end() && it->second.recvs > 0;
  };

  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      RankState& r = ranks[s];
      const auto& list = per_rank[s];
      while (r.pc < list.size()) {
        const PipelineAction& a = list[r.pc];
        if (a.micro_batch < 0 || a.micro_batch >= m || a.chunk < 0 || a.chunk >= v) {
          violation(s, r.pc, a, cat("micro-batch or chunk out of range (m=", m, ", v=", v, ")"));
          ++r.pc;
          progress = true;
          continue;
        }
        const int mb = a.micro_batch, g = global_stage(s, a.chunk, p);
        const bool activation =
            a.kind == ActionKind::send_activation || a.kind == ActionKind::recv_activation;
        // Blocking actions `break` out of the loop; everything else advances pc.
        if (a.kind == ActionKind::forward) {
          if (g > 0 && !(p == 1 ? fwd_done[g - 1][mb] > 0 : received({0, mb, g - 1, g})))
            violation(s, r.pc, a, cat("input from stage ", g - 1, " has not arrived"));
          if (fwd_done[g][mb]++ > 0) violation(s, r.pc, a, "forward runs twice");
          r.clock += t_forward;
          r.busy += t_forward;
          result.max_in_flight_per_stage = std::max(result.max_in_flight_per_stage, ++r.in_flight);
        } else if (a.kind == ActionKind::backward) {
          if (fwd_done[g][mb] == 0) violation(s, r.pc, a, "its forward has not run");
          if (g < G - 1 && !(p == 1 ? bwd_done[g + 1][mb] > 0 : received({1, mb, g + 1, g})))
            violation(s, r.pc, a, cat("gradient from stage ", g + 1, " has not arrived"));
          if (bwd_done[g][mb]++ > 0) violation(s, r.pc, a, "backward runs twice");
          r.clock += t_backward;
          r.busy += t_backward;
          --r.in_flight;
        } else if (a.kind == ActionKind::send_activation || a.kind == ActionKind::send_grad) {
          const int to = activation ? g + 1 : g - 1;
          if (a.peer_stage != to || to < 0 || to >= G || to % p == s) {
            violation(s, r.pc, a, cat("peer must be stage ", to, " on another rank"));
            ++r.pc;
            progress = true;
            continue;
          }
          if ((activation ? fwd_done : bwd_done)[g][mb] == 0)
            violation(s, r.pc, a, "sends before the compute producing it");
          Transfer& t = transfers[{activation ? 0 : 1, mb, g, to}];
          if (t.sends > 0) {
            violation(s, r.pc, a, "sent twice");
          } else if (!rendezvous) {
            t.issued = true;
            t.issue_time = r.clock;
            ++t.sends;
          } else if (t.posted) {
            t.delivered = true;
            t.delivered_time = std::max(r.clock, t.post_time) + t_comm;
            r.clock = t.delivered_time;
            ++t.sends;
          } else {
            break;  // unbuffered: wait for the receiver to post
          }
        } else {  // recv_activation, recv_grad
          const int from = activation ? g - 1 : g + 1;
          if (a.peer_stage != from || from < 0 || from >= G || from % p == s) {
            violation(s, r.pc, a, cat("peer must be stage ", from, " on another rank"));
            ++r.pc;
            progress = true;
            continue;
          }
          Transfer& t = transfers[{activation ? 0 : 1, mb, from, g}];
          if (t.recvs > 0) {
            violation(s, r.pc, a, "received twice");
          } else if (!rendezvous && t.issued) {
            r.clock = std::max(r.clock, t.issue_time + t_comm);
            ++t.recvs;
          } else if (rendezvous && t.delivered) {
            r.clock = std::max(r.clock, t.delivered_time);
            ++t.recvs;
          } else {
            if (!t.posted) {
              t.posted = true;
              t.post_time = r.clock;
              progress = true;  // a blocked sender may now complete
            }
            break;
          }
        }
        ++r.pc;
        progress = true;
      }
    }
  }

  for (int s = 0; s < p; ++s) {
    const RankState& r = ranks[s];
    if (r.pc < per_rank[s].size()) {
      result.deadlock = true;
      result.deadlock_detail += cat("rank ", s, " blocked at action ", r.pc, " (",
                                    to_string(per_rank[s][r.pc]), ") at t=", r.clock, "\n");
    }
  }
  if (!result.deadlock) {  // completeness only means something for a run that finished
    for (int g = 0; g < G; ++g)
      for (int mb = 0; mb < m; ++mb) {
        if (fwd_done[g][mb] == 0)
          result.violations.push_back(cat("forward mb=", mb, " stage ", g, " never runs"));
        if (bwd_done[g][mb] == 0)
          result.violations.push_back(cat("backward mb=", mb, " stage ", g, " never runs"));
      }
    for (const auto& [key, t] : transfers)
      if (t.sends > 0 && t.recvs == 0)
        result.violations.push_back(cat(std::get<0>(key) ? "gradient" : "activation",
                                        " mb=", std::get<1>(key), " from stage ", std::get<2>(key),
                                        " to stage ", std::get<3>(key), " is never received"));
  }
  for (const RankState& r : ranks) {
    result.makespan = std::max(result.makespan, r.clock);
    result.busy_per_stage.push_back(r.busy);
  }
  if (result.makespan > 0) {
    double idle = 0;
    for (const RankState& r : ranks) idle += (result.makespan - r.busy) / result.makespan;
    result.bubble_fraction = idle / p;
  }
  return result;
}

}  // namespace strata
