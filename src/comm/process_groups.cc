#include "comm/process_groups.h"

#include "comm/mpi_runtime.h"
#include "comm/mpi_types.h"
#include "core/error.h"

namespace strata {

namespace {

// MPI_Comm_split of the world: ranks with the same color form a group, ordered by key.
std::unique_ptr<MpiComm> split(const MpiComm& world, int color, int key, const char* name) {
  MPI_Comm c = MPI_COMM_NULL;
  const int rc = MPI_Comm_split(world.handle(), color, key, &c);
  STRATA_CHECK(rc == MPI_SUCCESS, "comm: creating group '", name,
               "' (MPI_Comm_split) failed: ", comm::mpi_error_string(rc));
  return std::make_unique<MpiComm>(c, name);
}

}  // namespace

ProcessGroups ProcessGroups::create(const Layout& layout) {
  STRATA_CHECK(mpi_active(), "ProcessGroups::create: call mpi_init first");
  const int world_size = mpi_world_size();
  STRATA_CHECK(layout.world() == world_size, "parallel layout ", layout.describe(), " needs ",
               layout.world(), " ranks, but this job has ", world_size, " (launch with mpirun -np ",
               layout.world(), " or change parallel.*)");
  ProcessGroups g;
  g.layout_ = layout;
  g.world_ = MpiComm::dup_world("world");
  // Everyone has arrived (with the timeout) before the blocking splits below.
  g.world_->barrier();
  g.coord_ = layout.coord(g.world_->rank());
  const Layout::Coord c = g.coord_;
  // Color = the coordinates that stay fixed within the group; key = the one that varies.
  g.tp_ = split(*g.world_, c.pp * layout.dp + c.dp, c.tp, "tp");
  g.dp_ = split(*g.world_, c.pp * layout.tp + c.tp, c.dp, "dp");
  g.pp_ = split(*g.world_, c.dp * layout.tp + c.tp, c.pp, "pp");
  return g;
}

void ProcessGroups::route_through(Routes routes) {
  STRATA_CHECK(routes.world && routes.dp && routes.tp && routes.pp,
               "ProcessGroups::route_through: every group needs a route");
  routes_ = std::move(routes);
}

std::vector<Comm*> ProcessGroups::all_active() const {
  return {active(world_, routes_.world), active(dp_, routes_.dp), active(tp_, routes_.tp),
          active(pp_, routes_.pp)};
}

void ProcessGroups::set_step(int64_t step) {
  for (Comm* c : all_active()) c->set_step(step);
}

void ProcessGroups::set_timeout(double seconds) {
  for (Comm* c : all_active()) c->set_timeout(seconds);
}

CommStats ProcessGroups::stats() const {
  CommStats total;
  for (const Comm* c : all_active()) total += c->stats();
  return total;
}

void ProcessGroups::reset_stats() {
  for (Comm* c : all_active()) c->reset_stats();
}

}  // namespace strata
