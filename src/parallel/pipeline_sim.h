// Event-driven simulator of pipeline schedules (pipeline_schedule.h): proves a schedule is correct
// and deadlock-free, and measures its bubble and activation memory before it meets a cluster.
//
// Each rank executes its list strictly in order. forward/backward take t_forward/t_backward (per
// chunk). Buffered mode: a send never blocks; a recv completes t_comm after the matching send was
// issued. Rendezvous mode (unbuffered transfers): a send also waits until the receiver has posted
// the matching recv, and both complete t_comm after the later of the two.
//
// Checked (a failure is a line in `violations`): forward(mb, g) only after forward(mb, g-1)'s
// output arrived (received on another rank, or computed earlier on this one); backward(mb, g) only
// after its own forward(mb, g) and the gradient of backward(mb, g+1); a send only after the
// compute producing it; peers are the adjacent global stage on another rank; every forward and
// backward of every (mb, global stage) exactly once; every send received exactly once.
#pragma once
#include <string>
#include <vector>

#include "parallel/pipeline_schedule.h"

namespace strata {

struct SimResult {
  double makespan = 0;
  std::vector<double> busy_per_stage;  // compute time per pp rank
  double bubble_fraction = 0;          // (makespan - busy) / makespan, averaged over ranks
  // Max over ranks of the (micro-batch, chunk) pairs whose forward is done and backward is not.
  int max_in_flight_per_stage = 0;
  bool deadlock = false;                // no rank can progress while actions remain
  std::string deadlock_detail;          // one line per blocked rank: what it waits on
  std::vector<std::string> violations;  // dependency and matching errors (see above)

  bool ok() const { return !deadlock && violations.empty(); }
};

SimResult simulate(const std::vector<std::vector<PipelineAction>>& per_rank, int p, int m, int v,
                   double t_forward, double t_backward, double t_comm = 0, bool rendezvous = false);

}  // namespace strata
