// The comm tests' main: every rank runs the same tests in the same order (their collectives must
// match), rank 0 prints the usual report, other ranks print only their failures, and the exit
// status counts every rank's failures (an all-reduce of the failure flag).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <memory>

#include "comm/mpi_comm.h"
#include "comm/mpi_runtime.h"
#include "comm_test_util.h"

namespace strata::testing {

namespace {
std::unique_ptr<MpiComm> g_world;

// Prints failed assertions, prefixed with the rank (for ranks other than 0).
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] FAILED at %s:%d\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};
}  // namespace

MpiComm& world() {
  return *g_world;
}

}  // namespace strata::testing

int main(int argc, char** argv) {
  strata::mpi_init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = strata::mpi_world_rank();
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new strata::testing::FailurePrinter(rank));
  }
  strata::testing::g_world = strata::MpiComm::dup_world("world");
  // A hung collective fails the run well within ctest's TIMEOUT instead of after 300 s.
  strata::testing::g_world->set_timeout(30);

  const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int failed_ranks = 0;
  MPI_Allreduce(&failed, &failed_ranks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("comm tests on %d rank(s): %s\n", strata::mpi_world_size(),
                failed_ranks ? "FAILED" : "passed on every rank");
  if (rank == 0 && failed_ranks)
    std::printf("%d rank(s) had failures (see [rank r] lines above)\n", failed_ranks);
  strata::testing::g_world.reset();
  strata::mpi_finalize();
  return failed_ranks ? 1 : 0;
}
