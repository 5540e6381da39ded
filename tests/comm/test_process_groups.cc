// Process groups of every layout the world size allows: each group holds the right world ranks
// in Megatron order, and its collectives really run over those ranks. The four layouts of a world
// of 4 are also checked against memberships written out by hand.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "comm/mpi_runtime.h"
#include "comm/process_groups.h"
#include "comm_test_util.h"
#include "core/error.h"

namespace strata::testing {
namespace {

// The world ranks of this rank's group along one axis, in group-rank order, from the layout.
std::vector<int> expected_members(const Layout& l, Layout::Coord me, char axis) {
  std::vector<int> ranks;
  const int n = axis == 't' ? l.tp : axis == 'd' ? l.dp : l.pp;
  for (int i = 0; i < n; ++i) {
    Layout::Coord c = me;
    (axis == 't' ? c.tp : axis == 'd' ? c.dp : c.pp) = i;
    ranks.push_back(l.rank_of(c));
  }
  return ranks;
}

std::vector<int> members(Comm& c) {
  std::vector<int> ranks;
  for (int r = 0; r < c.size(); ++r) ranks.push_back(c.world_rank_of(r));
  return ranks;
}

// An all_reduce of the world rank over the group: checks the communicator, not just the map.
int sum_of_world_ranks(Comm& c) {
  int32_t v = mpi_world_rank();
  c.all_reduce(&v, 1, DType::i32, ReduceOp::sum)->wait();
  return v;
}

void check_groups(ProcessGroups& g) {
  const Layout& l = g.layout();
  const int me = mpi_world_rank();
  EXPECT_EQ(g.coord(), l.coord(me));
  EXPECT_EQ(g.world().name(), "world");
  EXPECT_EQ(g.tp().name(), "tp");
  EXPECT_EQ(g.dp().name(), "dp");
  EXPECT_EQ(g.pp().name(), "pp");
  EXPECT_EQ(g.world().size(), l.world());
  EXPECT_EQ(g.world().rank(), me);
  struct Axis {
    Comm& comm;
    char axis;
    int coord;
  };
  for (const Axis& a : {Axis{g.tp(), 't', g.coord().tp}, Axis{g.dp(), 'd', g.coord().dp},
                        Axis{g.pp(), 'p', g.coord().pp}}) {
    const std::vector<int> want = expected_members(l, g.coord(), a.axis);
    EXPECT_EQ(members(a.comm), want) << l.describe() << " group " << a.comm.name();
    EXPECT_EQ(a.comm.rank(), a.coord) << l.describe() << " group " << a.comm.name();
    int want_sum = 0;
    for (int r : want) want_sum += r;
    EXPECT_EQ(sum_of_world_ranks(a.comm), want_sum) << l.describe() << " " << a.comm.name();
  }
}

TEST(ProcessGroups, EveryLayoutOfThisWorld) {
  const int world = mpi_world_size();
  for (int tp = 1; tp <= world; ++tp) {
    for (int pp = 1; pp <= world; ++pp) {
      if (world % (tp * pp)) continue;
      ProcessGroups g = ProcessGroups::create(resolve_layout(tp, pp, 0, 0, world));
      EXPECT_TRUE(g.has_mpi());
      check_groups(g);
    }
  }
}

TEST(ProcessGroups, WorldOfFourByHand) {
  if (mpi_world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const int me = mpi_world_rank();
  struct Case {
    int tp, pp, dp;
    // Groups as lists of world ranks; this rank's group is the one that contains it.
    std::vector<std::vector<int>> tp_groups, dp_groups, pp_groups;
  };
  const std::vector<Case> cases = {
      {2, 1, 2, {{0, 1}, {2, 3}}, {{0, 2}, {1, 3}}, {{0}, {1}, {2}, {3}}},
      {1, 2, 2, {{0}, {1}, {2}, {3}}, {{0, 1}, {2, 3}}, {{0, 2}, {1, 3}}},
      {2, 2, 1, {{0, 1}, {2, 3}}, {{0}, {1}, {2}, {3}}, {{0, 2}, {1, 3}}},
      {1, 1, 4, {{0}, {1}, {2}, {3}}, {{0, 1, 2, 3}}, {{0}, {1}, {2}, {3}}},
  };
  auto mine = [&](const std::vector<std::vector<int>>& groups) {
    for (const auto& grp : groups)
      for (int r : grp)
        if (r == me) return grp;
    return std::vector<int>{};
  };
  for (const Case& c : cases) {
    ProcessGroups g = ProcessGroups::create(resolve_layout(c.tp, c.pp, c.dp, 1, 4));
    const std::string what = g.layout().describe();
    EXPECT_EQ(members(g.tp()), mine(c.tp_groups)) << what;
    EXPECT_EQ(members(g.dp()), mine(c.dp_groups)) << what;
    EXPECT_EQ(members(g.pp()), mine(c.pp_groups)) << what;
    EXPECT_EQ(g.layout().zero, 1);
  }
}

// Expert parallelism, carved out of dp: the ep group is ep adjacent dp ranks, the edp group the
// dp ranks of equal dp % ep; written out for a world of 4 (tp 1 and 2).
TEST(ProcessGroups, ExpertGroupsInsideDataParallelism) {
  if (mpi_world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const int me = mpi_world_rank();
  struct Case {
    int tp, ep;
    std::vector<std::vector<int>> ep_groups, edp_groups;
  };
  const std::vector<Case> cases = {
      {1, 1, {{0}, {1}, {2}, {3}}, {{0, 1, 2, 3}}},
      {1, 2, {{0, 1}, {2, 3}}, {{0, 2}, {1, 3}}},
      {1, 4, {{0, 1, 2, 3}}, {{0}, {1}, {2}, {3}}},
      {2, 2, {{0, 2}, {1, 3}}, {{0}, {1}, {2}, {3}}},
  };
  for (const Case& c : cases) {
    ProcessGroups g = ProcessGroups::create(resolve_layout(c.tp, 1, 0, 0, 4, c.ep));
    const std::string what = g.layout().describe();
    for (const auto& [comm, groups] :
         {std::pair<Comm*, const std::vector<std::vector<int>>*>{&g.ep(), &c.ep_groups},
          {&g.edp(), &c.edp_groups}}) {
      std::vector<int> want;
      for (const auto& grp : *groups)
        for (int r : grp)
          if (r == me) want = grp;
      EXPECT_EQ(members(*comm), want) << what << " " << comm->name();
      int want_sum = 0;
      for (int r : want) want_sum += r;
      EXPECT_EQ(sum_of_world_ranks(*comm), want_sum) << what << " " << comm->name();
    }
    EXPECT_EQ(g.ep().rank(), g.coord().dp % c.ep) << what;
    EXPECT_EQ(g.edp().rank(), g.coord().dp / c.ep) << what;
  }
}

// cp groups: cp adjacent dp ranks (stride tp in world ranks), group rank = dp % cp.
TEST(ProcessGroups, ContextGroupsInsideDataParallelism) {
  if (mpi_world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const int me = mpi_world_rank();
  struct Case {
    int tp, cp;
    std::vector<std::vector<int>> cp_groups;
  };
  const std::vector<Case> cases = {
      {1, 2, {{0, 1}, {2, 3}}},
      {1, 4, {{0, 1, 2, 3}}},
      {2, 2, {{0, 2}, {1, 3}}},
  };
  for (const Case& c : cases) {
    ProcessGroups g = ProcessGroups::create(resolve_layout(c.tp, 1, 0, 0, 4, 1, c.cp));
    const std::string what = g.layout().describe();
    std::vector<int> want;
    for (const auto& grp : c.cp_groups)
      for (int r : grp)
        if (r == me) want = grp;
    EXPECT_EQ(members(g.cp()), want) << what;
    int want_sum = 0;
    for (int r : want) want_sum += r;
    EXPECT_EQ(sum_of_world_ranks(g.cp()), want_sum) << what;
    EXPECT_EQ(g.cp().rank(), g.coord().dp % c.cp) << what;
  }
}

TEST(ProcessGroups, StepAndTimeoutReachEveryGroup) {
  const int world = mpi_world_size();
  ProcessGroups g = ProcessGroups::create(resolve_layout(1, 1, 0, 0, world));
  g.set_timeout(12.5);
  g.set_step(7);
  for (Comm* c : {&g.world(), &g.dp(), &g.tp(), &g.pp()})
    EXPECT_EQ(dynamic_cast<MpiComm&>(*c).timeout(), 12.5) << c->name();
  float x = 1;
  g.dp().all_reduce(&x, 1, DType::f32, ReduceOp::sum)->wait();
  EXPECT_EQ(x, static_cast<float>(world));
  EXPECT_EQ(g.stats()[CommOp::all_reduce].calls, 1);
}

TEST(ProcessGroups, WrongWorldSizeIsAClearError) {
  const int world = mpi_world_size();
  Layout l;
  l.dp = world + 1;
  try {
    ProcessGroups::create(l);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(cat("this job has ", world)), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata::testing
