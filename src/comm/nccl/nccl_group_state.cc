#include "comm/nccl/nccl_group_state.h"

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "comm/nccl/nccl_check.h"
#include "core/log.h"
#include "kernels/cuda/cuda_check.h"

namespace strata::nccl {

const char* const kWaitNames[kNumCommOps] = {
    "wait all_reduce", "wait reduce_scatter", "wait all_gather", "wait broadcast",
    "wait send",       "wait recv",           "wait barrier",    "wait all_to_all"};

Clock::time_point deadline_after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void pause_poll(Clock::time_point since) {
  if (Clock::now() - since < std::chrono::milliseconds(1))
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(50));
}

DeviceGuard::DeviceGuard(int device) {
  STRATA_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) STRATA_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int now = previous_;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
}

std::string Group::describe(const OpState& op) const {
  const char* kind = comm_op_name(op.kind);
  std::string what = kind;
  if (op.exchange) {
    what = cat("send/recv with world rank ", world_rank(op.peer), " (tag ", op.tag, ")");
  } else if (op.kind == CommOp::send || op.kind == CommOp::recv) {
    what = cat(kind, op.kind == CommOp::send ? " to" : " from", " world rank ", world_rank(op.peer),
               " (tag ", op.tag, ")");
  } else if (op.kind == CommOp::broadcast) {
    what = cat(kind, " from world rank ", world_rank(op.peer));
  }
  return cat(what, " on group '", name, "' (world ranks ", world_ranks_text, ")");
}

void Group::harvest() {
  while (!in_flight.empty()) {
    const OpState& op = *in_flight.front();
    // Not ready: later ones are not either (one stream). An error is left for test()/wait_host()
    // to report; the stats just stop there.
    if (cudaEventQuery(op.done) != cudaSuccess) break;
    float ms = 0;
    if (cudaEventElapsedTime(&ms, op.start, op.done) == cudaSuccess) {
      const double seconds = static_cast<double>(ms) / 1e3;
      if (op.exchange) {  // one GPU interval for both halves
        stats.ops[static_cast<int>(CommOp::send)].seconds += seconds / 2;
        stats.ops[static_cast<int>(CommOp::recv)].seconds += seconds / 2;
      } else {
        stats.ops[static_cast<int>(op.kind)].seconds += seconds;
      }
    }
    in_flight.pop_front();
  }
}

void Group::throw_if_aborted(const std::string& what) const {
  if (aborted.load())
    fail("comm: ", what, " failed: the NCCL communicator of group '", name,
         "' was aborted after an earlier failure (", failure, ")");
}

void Group::fail_and_abort(const std::string& what, const std::string& reason) {
  // After an asynchronous error NCCL requires an abort: its kernels may wait forever otherwise.
  // `failure` is written before `aborted` is released: readers without the mutex see it whole.
  if (!aborted.load()) {
    failure = reason;
    aborted.store(true);
    if (comm) ncclCommAbort(comm);
  }
  fail("comm: ", what, " failed: ", reason);
}

bool Group::poll_async(const std::string& what) {
  throw_if_aborted(what);
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
  if (r != ncclSuccess) fail_and_abort(what, cat("ncclCommGetAsyncError: ", describe_result(r)));
  if (state == ncclInProgress) return false;
  if (state != ncclSuccess) fail_and_abort(what, describe_result(state, comm));
  return true;
}

void Group::settle(ncclResult_t r, const char* call, const std::string& what, int64_t bytes,
                   int peer_world_rank, Clock::time_point deadline) {
  if (r == ncclSuccess) return;
  if (r != ncclInProgress) {
    // A synchronous error (a bad argument): the communicator may still be fine; if NCCL also
    // flags it asynchronously, poll_async aborts it.
    const std::string reason = cat(call, ": ", describe_result(r, comm));
    if (comm) poll_async(what);
    fail("comm: ", what, " failed: ", reason);
  }
  const Clock::time_point start = Clock::now();
  while (!poll_async(what)) {
    if (Clock::now() > deadline) timeout_exit(what, bytes, peer_world_rank, behind(nullptr));
    pause_poll(start);
  }
}

std::string Group::behind(const OpState* op) const {
  // The earliest unfinished operation is where the group is stuck (one stream: in order).
  for (const std::shared_ptr<OpState>& earlier : in_flight) {
    if (earlier.get() == op) break;
    if (cudaEventQuery(earlier->done) == cudaErrorNotReady)
      return cat(" (it waits behind an earlier ", comm_op_name(earlier->kind), " of ",
                 earlier->bytes, " bytes on the same group)");
  }
  return "";
}

void Group::timeout_exit(const std::string& what, int64_t bytes, int peer_world_rank,
                         const std::string& behind_text) const {
  // The MPI backend's line (docs/COMM.md), so that the supervisor and `strata diagnose` read both.
  log_comm_timeout(what, step.load(), timeout_seconds.load(), bytes, behind_text, peer_world_rank,
                   world_ranks);
  std::fflush(stdout);
  std::fflush(stderr);
  // Abort the communicator so that no NCCL kernel keeps the GPU spinning on a dead peer after
  // this process is gone; a watchdog ends the process should the abort itself hang.
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    std::_Exit(kCommTimeoutExit);
  }).detach();
  if (comm) ncclCommAbort(comm);
  std::_Exit(kCommTimeoutExit);
}

Group::~Group() {
  // Never throws: this can run at exit, after a failure, or after the CUDA runtime is gone.
  if (!comm && !stream && !ready && !scratch) return;  // construction failed before any of them
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  if (previous != device) cudaSetDevice(device);
  if (comm && !aborted.load()) {
    // Finalize flushes the operations still queued and (non-blocking) answers ncclInProgress
    // until they are done; bounded by the timeout, past which the communicator is aborted.
    bool clean = false;
    const ncclResult_t r = ncclCommFinalize(comm);
    if (r == ncclSuccess || r == ncclInProgress) {
      const Clock::time_point start = Clock::now();
      const Clock::time_point deadline = deadline_after(timeout_seconds.load());
      for (;;) {
        ncclResult_t state = ncclSuccess;
        if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) break;
        if (state == ncclSuccess) {
          clean = true;
          break;
        }
        if (state != ncclInProgress || Clock::now() > deadline) break;
        pause_poll(start);
      }
    }
    if (clean) {
      ncclCommDestroy(comm);
    } else {
      log::warn("comm: NCCL communicator of group '", name,
                "' did not finalize cleanly; aborting it");
      ncclCommAbort(comm);
    }
  }
  if (scratch) cudaFree(scratch);
  if (ready) cudaEventDestroy(ready);
  if (stream) cudaStreamDestroy(stream);
  if (previous >= 0 && previous != device) cudaSetDevice(previous);
}

}  // namespace strata::nccl
