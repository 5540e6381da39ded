// One communication operation: its arguments, the MPI call that starts it (made on the progress
// engine's thread), what happens after MPI completes it (avg's scaling), and the Work handle the
// caller waits on, with the timeout that turns a hung peer into a clear error and an exit.
#pragma once
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/group_state.h"

namespace strata::comm {

struct OpArgs {
  CommOp kind = CommOp::barrier;
  const void* send = nullptr;  // reduce_scatter, all_gather, send; nullptr: in place
  void* recv = nullptr;        // all_reduce, broadcast, recv: the buffer; else the output
  int count = 0;               // the element count MPI takes (per rank block for the collectives)
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  int peer = -1;  // broadcast: root; send/recv: peer (group ranks)
  int tag = 0;
  int64_t bytes = 0;  // for stats and messages
  // all_to_all: per rank, in elements (MPI's int counts and displacements), alive until the
  // operation completes.
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
};

class PendingOp final : public Work {
 public:
  using Clock = std::chrono::steady_clock;

  PendingOp(std::shared_ptr<GroupState> group, const OpArgs& args);

  bool test() override;
  void wait() override;

  // Progress engine side (its thread only, except where noted).
  int issue(MPI_Request* request);      // the MPI_I* call; returns its error code
  void on_mpi_complete(int mpi_error);  // avg scaling, or the failure's message
  void retire();                        // under the engine's lock: visible to waiters
  bool mpi_done() const { return mpi_done_.load(std::memory_order_acquire); }  // any thread
  bool done() const { return done_.load(std::memory_order_acquire); }          // any thread
  const GroupState* group() const { return group_.get(); }
  const OpArgs& args() const { return args_; }
  // "all_reduce on group 'dp' (world ranks 0,1)", "recv from world rank 1 on group 'pp' (...)".
  std::string describe() const;

 private:
  [[noreturn]] void timeout_exit(double timeout_seconds) const;
  void trace_completion(Clock::time_point end) const;
  void rethrow_failure() const;

  std::shared_ptr<GroupState> group_;
  OpArgs args_;
  Clock::time_point submitted_;
  std::atomic<bool> mpi_done_{false};
  std::atomic<bool> done_{false};
  std::string error_;  // written before done_ is released
};

}  // namespace strata::comm
