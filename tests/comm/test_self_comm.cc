// SelfComm and ProcessGroups::single: the groups of a process that runs alone. Every collective
// over one rank is the identity, without MPI (these run in every rank of the comm job, each on
// its own).
#include <gtest/gtest.h>

#include <vector>

#include "comm/process_groups.h"
#include "comm/self_comm.h"
#include "core/error.h"

namespace strata {
namespace {

TEST(SelfComm, CollectivesOverOneRankAreTheIdentity) {
  SelfComm c("dp");
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.name(), "dp");
  EXPECT_EQ(c.world_rank_of(0), 0);
  std::vector<float> buf = {1.5f, -2.0f, 3.25f};
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
    WorkHandle w = c.all_reduce(buf.data(), 3, DType::f32, op);
    ASSERT_TRUE(w && w->test());
    w->wait();
    EXPECT_EQ(buf, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  }
  c.broadcast(buf.data(), 3, DType::f32, 0)->wait();
  EXPECT_EQ(buf, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  // reduce_scatter and all_gather: the one block is copied to distinct buffers, kept in place.
  std::vector<float> out(3, 0.0f);
  c.reduce_scatter(buf.data(), out.data(), 3, DType::f32, ReduceOp::avg)->wait();
  EXPECT_EQ(out, buf);
  std::vector<uint16_t> half = {1, 2, 3, 4}, half_out(4, 0);
  c.all_gather(half.data(), half_out.data(), 4, DType::bf16)->wait();
  EXPECT_EQ(half_out, half);
  c.all_gather(buf.data(), buf.data(), 3, DType::f32)->wait();
  EXPECT_EQ(buf, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  const int64_t three = 3;
  std::vector<float> a2a(3, 0.0f);
  c.all_to_all_v(buf.data(), &three, a2a.data(), &three, DType::f32)->wait();
  EXPECT_EQ(a2a, buf);
  const int64_t two = 2;
  EXPECT_THROW(c.all_to_all_v(buf.data(), &three, a2a.data(), &two, DType::f32), Error);
  c.barrier();
  EXPECT_EQ(c.stats().total_bytes(), 0);  // nothing travels
}

TEST(SelfComm, PeersThatDoNotExistAreErrors) {
  SelfComm c("pp");
  float x = 0;
  EXPECT_THROW(c.send(&x, 1, DType::f32, 1, 0), Error);
  EXPECT_THROW(c.recv(&x, 1, DType::f32, 0, 0), Error);
  EXPECT_THROW(c.broadcast(&x, 1, DType::f32, 1), Error);
  EXPECT_THROW(c.world_rank_of(1), Error);
}

TEST(ProcessGroups, SingleIsAOneRankLayoutWithoutMpi) {
  ProcessGroups g = ProcessGroups::single();
  EXPECT_EQ(g.layout().world(), 1);
  EXPECT_EQ(g.layout().zero, 0);
  EXPECT_FALSE(g.has_mpi());
  EXPECT_THROW(g.mpi_world(), Error);
  for (Comm* c : {&g.world(), &g.dp(), &g.tp(), &g.pp()}) {
    EXPECT_EQ(c->size(), 1);
    EXPECT_EQ(c->rank(), 0);
  }
  EXPECT_EQ(g.dp().name(), "dp");
  EXPECT_EQ(g.coord(), (Layout::Coord{0, 0, 0}));
  g.set_step(3);
  g.set_timeout(1.0);
  EXPECT_EQ(g.stats().total_bytes(), 0);
}

}  // namespace
}  // namespace strata
