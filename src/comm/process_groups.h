// ProcessGroups: the communicators of a Layout, as Megatron-core's parallel_state builds them.
// Every rank belongs to exactly one group of each kind:
//   tp: the ranks that differ only in tp (adjacent world ranks): tensor-parallel collectives,
//   dp: the ranks that differ only in dp: gradient all-reduce / ZeRO reduce-scatter,
//   pp: the ranks that differ only in pp: pipeline send/recv of activations,
//   ep: the ep adjacent dp ranks of one expert-parallel group (Layout: ep carved out of dp): the
//       token exchange of a Mixture-of-Experts layer (all-to-all),
//   edp: the dp ranks of equal ep rank, which hold the same experts: their gradient reduction
//       and ZeRO sharding (with ep = 1, the same ranks as dp),
//   cp: the cp adjacent dp ranks of one context-parallel group (Layout: cp carved out of dp): the
//       ring's send/recv of key/value blocks, or Ulysses' all-to-all,
//   world: all ranks (a duplicate of MPI_COMM_WORLD, so that its messages never mix with others).
// Group rank = the coordinate along the group's axis, so group rank r of dp is data replica r.
// A process that runs alone has the groups of a one-rank layout (single()): every group is a
// SelfComm, so the trainer and the parallel layers take one path whatever the world size.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/layout.h"
#include "comm/mpi_comm.h"
#include "comm/self_comm.h"

namespace strata {

class ProcessGroups {
 public:
  // Collective over MPI_COMM_WORLD (mpi_init first); the world size must equal layout.world().
  static ProcessGroups create(const Layout& layout);
  // One process without MPI: the layout tp = pp = dp = 1, zero 0, and every group a SelfComm.
  static ProcessGroups single();

  // The groups' communicators: the MPI ones, or the routes installed by route_through.
  Comm& world() { return *active(world_, routes_.world); }
  Comm& dp() { return *active(dp_, routes_.dp); }
  Comm& tp() { return *active(tp_, routes_.tp); }
  Comm& pp() { return *active(pp_, routes_.pp); }
  Comm& ep() { return *ep_; }
  Comm& edp() { return *edp_; }
  Comm& cp() { return *active(cp_, routes_.cp); }
  // The groups are MPI communicators (create), not a lone process's (single).
  bool has_mpi() const { return mpi_.world != nullptr; }
  // The MPI communicators themselves (what a route wraps, whatever is installed); has_mpi() only.
  MpiComm& mpi_world() { return mpi(mpi_.world); }
  MpiComm& mpi_dp() { return mpi(mpi_.dp); }
  MpiComm& mpi_tp() { return mpi(mpi_.tp); }
  MpiComm& mpi_pp() { return mpi(mpi_.pp); }
  MpiComm& mpi_cp() { return mpi(mpi_.cp); }
  // Communicators of the same groups that take over from the MPI ones for every caller, e.g.
  // comm/nccl's DeviceHostComm (GPU buffers over NCCL, host buffers over the MPI group). A job on
  // GPUs installs them once, before any model or parallel code holds a group.
  struct Routes {
    std::unique_ptr<Comm> world, dp, tp, pp, cp;
  };
  void route_through(Routes routes);
  const Layout& layout() const { return layout_; }
  Layout::Coord coord() const { return coord_; }

  // Forwarded to every group.
  void set_step(int64_t step);
  void set_timeout(double seconds);
  // The stats of all groups, summed.
  CommStats stats() const;
  void reset_stats();

 private:
  ProcessGroups() = default;
  Layout layout_;
  Layout::Coord coord_;
  std::vector<Comm*> all_active() const;
  static Comm* active(const std::unique_ptr<Comm>& own, const std::unique_ptr<Comm>& route) {
    return route ? route.get() : own.get();
  }
  static MpiComm& mpi(MpiComm* c);

  std::unique_ptr<Comm> world_, dp_, tp_, pp_;  // MpiComm (create) or SelfComm (single)
  // The expert groups (MoE runs on the CPU only, so they have no routes).
  std::unique_ptr<Comm> ep_, edp_;
  std::unique_ptr<Comm> cp_;  // context parallelism (routed on GPUs like the four above)
  struct {
    MpiComm *world = nullptr, *dp = nullptr, *tp = nullptr, *pp = nullptr, *cp = nullptr;
  } mpi_;          // the same objects as MPI communicators; null for single()
  Routes routes_;  // null entries: the group's own communicator serves
};

}  // namespace strata
