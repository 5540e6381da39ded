#include "comm/mpi_work.h"

#include <cstdio>
#include <cstdlib>

#include "comm/mpi_types.h"
#include "comm/nbc_tuning.h"
#include "comm/progress_engine.h"
#include "core/error.h"
#include "core/log.h"
#include "core/trace.h"

namespace strata::comm {

namespace {
// Span names of a caller blocked in wait(), per CommOp (string literals: the tracer keeps
// pointers).
const char* const kWaitNames[kNumCommOps] = {
    "wait all_reduce", "wait reduce_scatter", "wait all_gather", "wait broadcast",
    "wait send",       "wait recv",           "wait barrier",    "wait all_to_all"};
}  // namespace

PendingOp::PendingOp(std::shared_ptr<GroupState> group, const OpArgs& args)
    : group_(std::move(group)), args_(args), submitted_(Clock::now()) {}

bool PendingOp::test() {
  if (!done()) return false;
  rethrow_failure();
  return true;
}

void PendingOp::wait() {
  if (!done()) {
    TraceSpan span(kWaitNames[static_cast<int>(args_.kind)], "comm_wait");
    span.arg("group", group_->name).arg("bytes", args_.bytes);
    const Clock::time_point start = Clock::now();
    const double timeout = group_->timeout_seconds.load();
    if (!ProgressEngine::get().wait_done(*this,
                                         start + std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(timeout))))
      timeout_exit(timeout);
    group_->count_wait(args_.kind, std::chrono::duration<double>(Clock::now() - start).count());
  }
  rethrow_failure();
}

void PendingOp::rethrow_failure() const {
  if (!error_.empty()) fail("comm: ", describe(), " failed: ", error_);
}

int PendingOp::issue(MPI_Request* request) {
  const MPI_Comm comm = group_->comm;
  const MPI_Datatype type = mpi_datatype(args_.dtype);
  const void* send = args_.send ? args_.send : MPI_IN_PLACE;
  switch (args_.kind) {
    case CommOp::all_reduce:
      tune_iallreduce(args_.bytes, args_.count, group_->size);
      return MPI_Iallreduce(MPI_IN_PLACE, args_.recv, args_.count, type,
                            mpi_reduce_op(args_.dtype, args_.op), comm, request);
    case CommOp::reduce_scatter:
      return MPI_Ireduce_scatter_block(send, args_.recv, args_.count, type,
                                       mpi_reduce_op(args_.dtype, args_.op), comm, request);
    case CommOp::all_gather:
      return MPI_Iallgather(send, args_.count, type, args_.recv, args_.count, type, comm, request);
    case CommOp::broadcast:
      return MPI_Ibcast(args_.recv, args_.count, type, args_.peer, comm, request);
    case CommOp::send:
      return MPI_Isend(args_.send, args_.count, type, args_.peer, args_.tag, comm, request);
    case CommOp::recv:
      return MPI_Irecv(args_.recv, args_.count, type, args_.peer, args_.tag, comm, request);
    case CommOp::barrier:
      return MPI_Ibarrier(comm, request);
    case CommOp::all_to_all:
      return MPI_Ialltoallv(args_.send, args_.send_counts.data(), args_.send_displs.data(), type,
                            args_.recv, args_.recv_counts.data(), args_.recv_displs.data(), type,
                            comm, request);
  }
  return MPI_ERR_OTHER;
}

void PendingOp::on_mpi_complete(int mpi_error) {
  if (mpi_error != MPI_SUCCESS) {
    error_ = mpi_error_string(mpi_error);
  } else if (args_.op == ReduceOp::avg &&
             (args_.kind == CommOp::all_reduce || args_.kind == CommOp::reduce_scatter)) {
    // Scaled here, on the communication thread, so that the caller sees the final average.
    divide_in_place(args_.recv, args_.count, args_.dtype, group_->size);
  }
  mpi_done_.store(true, std::memory_order_release);
}

void PendingOp::retire() {
  const Clock::time_point now = Clock::now();
  group_->count_completion(args_.kind, std::chrono::duration<double>(now - submitted_).count());
  if (trace::active()) trace_completion(now);
  done_.store(true, std::memory_order_release);
}

// The profiler's record of the operation: from the caller's submit to its completion, on the
// progress engine's thread, with what was moved and where.
void PendingOp::trace_completion(Clock::time_point end) const {
  trace::Event* e = trace::begin_at(comm_op_name(args_.kind), "comm", trace::to_ns(submitted_));
  if (!e) return;
  trace::set_arg(e, "bytes", args_.bytes);
  trace::set_arg(e, "group", group_->name.c_str());
  trace::set_arg(e, "dtype", dtype_name(args_.dtype).data());
  if (args_.peer >= 0)
    trace::set_arg(e, args_.kind == CommOp::broadcast ? "root" : "peer",
                   group_->world_ranks[static_cast<size_t>(args_.peer)]);
  trace::finish(e, trace::to_ns(end));
}

std::string PendingOp::describe() const {
  const char* name = comm_op_name(args_.kind);
  std::string what = name;
  if (args_.kind == CommOp::send || args_.kind == CommOp::recv) {
    what = cat(name, args_.kind == CommOp::send ? " to" : " from", " world rank ",
               group_->world_ranks[static_cast<size_t>(args_.peer)], " (tag ", args_.tag, ")");
  } else if (args_.kind == CommOp::broadcast) {
    what = cat(name, " from world rank ", group_->world_ranks[static_cast<size_t>(args_.peer)]);
  }
  return cat(what, " on group '", group_->name, "' (world ranks ", group_->world_ranks_text, ")");
}

void PendingOp::timeout_exit(double timeout_seconds) const {
  const bool p2p = args_.kind == CommOp::send || args_.kind == CommOp::recv;
  std::string behind;
  if (mpi_done()) {
    // MPI finished this one; an earlier operation of the group has not (completion is in order).
    const std::string earlier = ProgressEngine::get().earliest_pending(*this);
    if (!earlier.empty()) behind = cat(" (it waits behind ", earlier, ")");
  }
  log_comm_timeout(describe(), group_->step.load(), timeout_seconds, args_.bytes, behind,
                   p2p ? group_->world_ranks[static_cast<size_t>(args_.peer)] : -1,
                   group_->world_ranks);
  // Not MPI_Finalize (it would wait for the peer) and not exit() (static destructors could block
  // on the communication thread): flush and end here, with a status the supervisor recognises.
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(kCommTimeoutExit);
}

}  // namespace strata::comm
