// ProcessGroups: the communicators of a Layout, as Megatron-core's parallel_state builds them.
// Every rank belongs to exactly one group of each kind:
//   tp: the ranks that differ only in tp (adjacent world ranks): tensor-parallel collectives,
//   dp: the ranks that differ only in dp: gradient all-reduce / ZeRO reduce-scatter,
//   pp: the ranks that differ only in pp: pipeline send/recv of activations,
//   world: all ranks (a duplicate of MPI_COMM_WORLD, so that its messages never mix with others).
// Group rank = the coordinate along the group's axis, so group rank r of dp is data replica r.
#pragma once
#include <cstdint>
#include <memory>

#include "comm/layout.h"
#include "comm/mpi_comm.h"

namespace strata {

class ProcessGroups {
 public:
  // Collective over MPI_COMM_WORLD (mpi_init first); the world size must equal layout.world().
  static ProcessGroups create(const Layout& layout);

  Comm& world() { return *world_; }
  Comm& dp() { return *dp_; }
  Comm& tp() { return *tp_; }
  Comm& pp() { return *pp_; }
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
  std::unique_ptr<MpiComm> world_, dp_, tp_, pp_;
};

}  // namespace strata
