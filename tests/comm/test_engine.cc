// The progress engine and point-to-point: send/recv rings, many operations in flight completing
// in issue order, several caller threads, every poll policy, stats, failures that carry MPI's
// error string, and argument errors that throw before anything is issued.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "comm/mpi_runtime.h"
#include "comm/nbc_tuning.h"
#include "comm/progress_engine.h"
#include "comm_test_util.h"
#include "core/error.h"

namespace strata::testing {
namespace {

TEST(PointToPoint, SendRecvRing) {
  MpiComm& comm = world();
  const int n = comm.size(), r = comm.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int64_t count : {1, 7, 100003}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      Buffer out(dtype, count), in(dtype, count);
      for (int64_t i = 0; i < count; ++i) out.set(i, input_value(r, i));
      // Receive first, then send: nonblocking, so the ring cannot deadlock whatever the order.
      WorkHandle rx = comm.recv(in.data(), count, dtype, prev, 5);
      WorkHandle tx = comm.send(out.data(), count, dtype, next, 5);
      wait_all({rx, tx});
      int64_t bad = 0;
      for (int64_t i = 0; i < count; ++i) bad += in.get(i) != in.round(input_value(prev, i));
      EXPECT_EQ(bad, 0) << "count " << count << " " << dtype_name(dtype);
    }
  }
}

TEST(PointToPoint, TagsKeepMessagesApart) {
  MpiComm& comm = world();
  const int n = comm.size(), r = comm.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  float out[3] = {1.0f + r, 10.0f + r, 100.0f + r}, in[3] = {};
  // Tags posted in opposite orders on the two sides.
  std::vector<WorkHandle> works;
  for (int t = 2; t >= 0; --t) works.push_back(comm.recv(&in[t], 1, DType::f32, prev, t));
  for (int t = 0; t < 3; ++t) works.push_back(comm.send(&out[t], 1, DType::f32, next, t));
  wait_all(works);
  EXPECT_EQ(in[0], 1.0f + prev);
  EXPECT_EQ(in[1], 10.0f + prev);
  EXPECT_EQ(in[2], 100.0f + prev);
}

TEST(Engine, ManyInFlightCompleteInIssueOrder) {
  MpiComm& comm = world();
  constexpr int kOps = 48;
  std::vector<Buffer> bufs;
  std::vector<int64_t> counts;
  for (int k = 0; k < kOps; ++k) {
    counts.push_back(k % 3 == 0 ? 65537 : 1 + k * 31);
    bufs.emplace_back(DType::f32, counts.back());
    for (int64_t i = 0; i < counts.back(); ++i) bufs.back().set(i, input_value(comm.rank(), i + k));
  }
  std::vector<WorkHandle> works;
  for (int k = 0; k < kOps; ++k)
    works.push_back(comm.all_reduce(bufs[k].data(), counts[k], DType::f32, ReduceOp::sum));
  // Watch completions: once op k is seen complete, every earlier op must be complete too (checked
  // latest first, so that a completion between two test() calls cannot look like a violation).
  int violations = 0;
  for (bool all = false; !all;) {
    all = true;
    bool later_done = false;
    for (int k = kOps - 1; k >= 0; --k) {
      const bool done = works[k]->test();
      if (!done && later_done) ++violations;
      later_done |= done;
      all &= done;
    }
  }
  EXPECT_EQ(violations, 0);
  for (int k = kOps - 1; k >= 0; --k) works[k]->wait();  // already complete; waits are idempotent
  for (int k = 0; k < kOps; ++k) {
    int64_t bad = 0;
    for (int64_t i = 0; i < counts[k]; ++i) {
      float want = 0;
      for (int r = 0; r < comm.size(); ++r) want += input_value(r, i + k);
      bad += bufs[k].get(i) != want;
    }
    EXPECT_EQ(bad, 0) << "op " << k;
  }
}

TEST(Engine, WaitingOnTheLastImpliesAllEarlier) {
  MpiComm& comm = world();
  const int n = comm.size();
  const int64_t count = 30011;
  Buffer a(DType::f32, count), src(DType::f32, count), g(DType::f32, count * n),
      b(DType::bf16, count), rs(DType::f32, count * n), rso(DType::f32, count);
  for (int64_t i = 0; i < count; ++i) {
    a.set(i, input_value(comm.rank(), i));
    src.set(i, static_cast<float>(comm.rank()));
    b.set(i, input_value(comm.rank(), i));
  }
  for (int64_t i = 0; i < count * n; ++i) rs.set(i, 1.0f);
  std::vector<WorkHandle> w;
  w.push_back(comm.all_reduce(a.data(), count, DType::f32, ReduceOp::max));
  w.push_back(comm.all_gather(src.data(), g.data(), count, DType::f32));
  w.push_back(comm.reduce_scatter(rs.data(), rso.data(), count, DType::f32, ReduceOp::avg));
  w.push_back(comm.broadcast(b.data(), count, DType::bf16, n - 1));
  w.back()->wait();
  for (const WorkHandle& h : w) EXPECT_TRUE(h->test());
  for (int64_t i = 0; i < count; ++i) {
    float mx = -1e30f;
    for (int r = 0; r < n; ++r) mx = std::max(mx, input_value(r, i));
    if (a.get(i) != mx || rso.get(i) != 1.0f || b.get(i) != input_value(n - 1, i) ||
        g.get(count * (i % n) + i) != static_cast<float>(i % n)) {
      ADD_FAILURE() << "element " << i;
      break;
    }
  }
}

TEST(Engine, EveryPollPolicyGivesTheSameResults) {
  MpiComm& comm = world();
  auto& engine = comm::ProgressEngine::get();
  const comm::PollPolicy saved = engine.poll_policy();
  for (const char* text : {"spin", "yield", "sleep:200", "adaptive:10:100", "adaptive"}) {
    engine.set_poll_policy(comm::PollPolicy::parse(text));
    Buffer buf(DType::bf16, 10007);
    for (int64_t i = 0; i < 10007; ++i) buf.set(i, input_value(comm.rank(), i));
    for (int k = 0; k < 4; ++k) comm.barrier();
    comm.all_reduce(buf.data(), 10007, DType::bf16, ReduceOp::sum)->wait();
    int64_t bad = 0;
    for (int64_t i = 0; i < 10007; ++i) {
      float want = 0;
      for (int r = 0; r < comm.size(); ++r) want += input_value(r, i);
      bad += buf.get(i) != want;
    }
    EXPECT_EQ(bad, 0) << text;
  }
  engine.set_poll_policy(saved);
}

TEST(Engine, LargeAllReducesUseTheTunedAlgorithm) {
  // Open MPI: the libnbc algorithm variable is found and writable (see nbc_tuning.h); the
  // correctness of both algorithms is covered by the Reduce tests (1000003 elements are large).
#if defined(OPEN_MPI) && OPEN_MPI
  if (std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm"))
    GTEST_SKIP() << "the user chose the algorithm";
  EXPECT_TRUE(comm::nbc_tuning_active());
#else
  GTEST_SKIP() << "not Open MPI";
#endif
}

TEST(Engine, CallerThreadsOnSeparateGroups) {
  // Two groups, each used by its own thread: per-group order is all that must match across ranks.
  std::unique_ptr<MpiComm> a = MpiComm::dup_world("a"), b = MpiComm::dup_world("b");
  auto worker = [](MpiComm& comm, float scale, int64_t* bad) {
    for (int k = 0; k < 20; ++k) {
      std::vector<float> buf(5003);
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = scale * input_value(comm.rank(), k + i);
      comm.all_reduce(buf.data(), 5003, DType::f32, ReduceOp::sum)->wait();
      for (size_t i = 0; i < buf.size(); ++i) {
        float want = 0;
        for (int r = 0; r < comm.size(); ++r) want += scale * input_value(r, k + i);
        *bad += buf[i] != want;
      }
    }
  };
  int64_t bad_a = 0, bad_b = 0;
  std::thread ta(worker, std::ref(*a), 1.0f, &bad_a), tb(worker, std::ref(*b), 2.0f, &bad_b);
  ta.join();
  tb.join();
  EXPECT_EQ(bad_a, 0);
  EXPECT_EQ(bad_b, 0);
}

TEST(Engine, StatsCountCallsBytesAndTime) {
  std::unique_ptr<MpiComm> comm = MpiComm::dup_world("stats");
  std::vector<float> buf(1000, 1.0f), gathered(1000 * comm->size());
  comm->all_reduce(buf.data(), 1000, DType::f32, ReduceOp::sum)->wait();
  comm->all_reduce(buf.data(), 500, DType::f32, ReduceOp::sum)->wait();
  comm->all_gather(buf.data(), gathered.data(), 1000, DType::f32)->wait();
  comm->barrier();
  const CommStats s = comm->stats();
  EXPECT_EQ(s[CommOp::all_reduce].calls, 2);
  EXPECT_EQ(s[CommOp::all_reduce].bytes, 6000);
  EXPECT_GT(s[CommOp::all_reduce].seconds, 0.0);
  EXPECT_GE(s[CommOp::all_reduce].wait_seconds, 0.0);
  EXPECT_EQ(s[CommOp::all_gather].calls, 1);
  EXPECT_EQ(s[CommOp::all_gather].bytes, 4000);
  EXPECT_EQ(s[CommOp::barrier].calls, 1);
  EXPECT_EQ(s.total_bytes(), 10000);
  EXPECT_NE(s.summary().find("all_reduce 2 calls"), std::string::npos) << s.summary();
  comm->reset_stats();
  EXPECT_EQ(comm->stats().total_bytes(), 0);
}

TEST(Engine, FailedOperationReportsMpiError) {
  // A receive shorter than the message: MPI reports truncation and the Work carries it.
  // (Open MPI's self transport does not report truncation, so this needs a real peer.)
  MpiComm& comm = world();
  if (comm.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int r = comm.rank();
  if (r > 1) {
    comm.barrier();
    return;
  }
  const int peer = 1 - r;
  std::vector<float> out(10, 1.0f), in(5);
  WorkHandle rx = comm.recv(in.data(), 5, DType::f32, peer, 9);
  WorkHandle tx = comm.send(out.data(), 10, DType::f32, peer, 9);
  tx->wait();
  try {
    rx->wait();
    ADD_FAILURE() << "a truncated receive completed without an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("MPI_ERR_TRUNCATE"), std::string::npos) << what;
    EXPECT_NE(what.find("recv from world rank"), std::string::npos) << what;
    EXPECT_NE(what.find("group 'world'"), std::string::npos) << what;
  }
  EXPECT_THROW(rx->test(), Error);  // test() reports the failure too
  comm.barrier();                   // the group still works afterwards
}

TEST(Engine, BadArgumentsThrowBeforeIssuing) {
  std::unique_ptr<MpiComm> owned = MpiComm::dup_world("args");
  MpiComm& comm = *owned;
  const int n = comm.size();
  std::vector<float> buf(16 * n);
  EXPECT_THROW(comm.broadcast(buf.data(), 1, DType::f32, n), Error);
  EXPECT_THROW(comm.send(buf.data(), 1, DType::f32, -1, 0), Error);
  EXPECT_THROW(comm.recv(buf.data(), 1, DType::f32, 0, -3), Error);
  EXPECT_THROW(comm.all_reduce(buf.data(), -1, DType::f32, ReduceOp::sum), Error);
  EXPECT_THROW(comm.all_reduce(buf.data(), 4, DType::i32, ReduceOp::avg), Error);
  EXPECT_THROW(comm.all_reduce(nullptr, 4, DType::f32, ReduceOp::sum), Error);
  if (n > 1) {  // send overlapping recv but not at this rank's block
    EXPECT_THROW(comm.all_gather(buf.data() + 1 + 4 * comm.rank(), buf.data(), 4, DType::f32),
                 Error);
  }
  EXPECT_THROW(comm.set_timeout(0), Error);
  EXPECT_THROW(comm.world_rank_of(n), Error);
  comm.barrier();
  const CommStats s = comm.stats();
  EXPECT_EQ(s[CommOp::broadcast].calls + s[CommOp::send].calls + s[CommOp::recv].calls, 0)
      << "rejected operations must not be counted";
}

}  // namespace
}  // namespace strata::testing
