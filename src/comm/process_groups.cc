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
  std::unique_ptr<MpiComm> world = MpiComm::dup_world("world");
  // Everyone has arrived (with the timeout) before the blocking splits below.
  world->barrier();
  g.coord_ = layout.coord(world->rank());
  const Layout::Coord c = g.coord_;
  // Color = the coordinates that stay fixed within the group; key = the one that varies.
  std::unique_ptr<MpiComm> tp = split(*world, c.pp * layout.dp + c.dp, c.tp, "tp");
  std::unique_ptr<MpiComm> dp = split(*world, c.pp * layout.tp + c.tp, c.dp, "dp");
  std::unique_ptr<MpiComm> pp = split(*world, c.dp * layout.tp + c.tp, c.pp, "pp");
  // Within dp: ep groups of adjacent dp ranks, edp groups of equal dp % ep.
  const int ep_rank = c.dp % layout.ep, edp_rank = c.dp / layout.ep;
  const int fixed = c.pp * layout.tp + c.tp;
  g.ep_ = split(*world, fixed * layout.edp() + edp_rank, ep_rank, "ep");
  g.edp_ = split(*world, fixed * layout.ep + ep_rank, edp_rank, "edp");
  // Within dp: cp groups of adjacent dp ranks (the data replica dp / cp fixed).
  std::unique_ptr<MpiComm> cp =
      split(*world, fixed * layout.replicas() + c.dp / layout.cp, c.dp % layout.cp, "cp");
  g.mpi_ = {world.get(), dp.get(), tp.get(), pp.get(), cp.get()};
  g.cp_ = std::move(cp);
  g.world_ = std::move(world);
  g.dp_ = std::move(dp);
  g.tp_ = std::move(tp);
  g.pp_ = std::move(pp);
  return g;
}

ProcessGroups ProcessGroups::single() {
  ProcessGroups g;
  g.world_ = std::make_unique<SelfComm>("world");
  g.dp_ = std::make_unique<SelfComm>("dp");
  g.tp_ = std::make_unique<SelfComm>("tp");
  g.pp_ = std::make_unique<SelfComm>("pp");
  g.ep_ = std::make_unique<SelfComm>("ep");
  g.edp_ = std::make_unique<SelfComm>("edp");
  g.cp_ = std::make_unique<SelfComm>("cp");
  return g;  // Layout{} is tp = pp = dp = 1, zero 0; the coordinate is (0, 0, 0)
}

MpiComm& ProcessGroups::mpi(MpiComm* c) {
  STRATA_CHECK(c != nullptr,
               "ProcessGroups: the groups of a process that runs alone have no MPI communicator");
  return *c;
}

void ProcessGroups::route_through(Routes routes) {
  STRATA_CHECK(routes.world && routes.dp && routes.tp && routes.pp && routes.cp,
               "ProcessGroups::route_through: every group needs a route");
  routes_ = std::move(routes);
}

std::vector<Comm*> ProcessGroups::all_active() const {
  return {active(world_, routes_.world),
          active(dp_, routes_.dp),
          active(tp_, routes_.tp),
          active(pp_, routes_.pp),
          ep_.get(),
          edp_.get(),
          active(cp_, routes_.cp)};
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
