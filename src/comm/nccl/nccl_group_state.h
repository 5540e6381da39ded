// The internals NcclComm and its works share (not a public header): one operation's events and
// description, and the group state that outlives the NcclComm while works are in flight: the NCCL
// communicator, the communication stream, the timeout, the stats, and the polling of NCCL's
// asynchronous state (non-blocking communicators) against the timeout.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/group_state.h"  // kDefaultCommTimeoutSeconds: the same default as the MPI groups

namespace strata::nccl {

using Clock = std::chrono::steady_clock;

// Span names of a caller blocked in wait_host(), per CommOp (literals: the tracer keeps pointers);
// the same names as the MPI backend's, so that a profile reads the same on both.
extern const char* const kWaitNames[kNumCommOps];

Clock::time_point deadline_after(double seconds);

// Polls a waiting host thread: back to back for the first millisecond (small operations finish
// within microseconds), then every 50 us (a long wait should not burn a core the data loader or
// the MPI progress thread could use).
void pause_poll(Clock::time_point since);

// Makes `device` current for the scope and restores the caller's device: NcclComm may be used from
// any thread, and must not change which device the caller's own kernels go to (in the usual
// one-device-per-rank case the devices already match and nothing is switched).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

struct OpState {
  CommOp kind = CommOp::barrier;
  int64_t bytes = 0;
  int peer = -1;  // group rank: broadcast root, send/recv peer
  int tag = 0;
  bool exchange = false;  // send_recv: a send and a recv as one NCCL group
  cudaStream_t compute = nullptr;
  cudaEvent_t start = nullptr;  // timing events: the stats' seconds
  cudaEvent_t done = nullptr;
  OpState() = default;
  OpState(const OpState&) = delete;
  OpState& operator=(const OpState&) = delete;
  ~OpState() {
    // Destroying a recorded event is fine even before it fires (CUDA releases it afterwards).
    if (start) cudaEventDestroy(start);
    if (done) cudaEventDestroy(done);
  }
};

// What a group shares with its in-flight works (they may outlive the NcclComm).
struct Group {
  Group() = default;
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  ~Group();

  ncclComm_t comm = nullptr;
  int device = 0;
  cudaStream_t stream = nullptr;  // the communication stream
  cudaEvent_t ready = nullptr;    // recorded on the compute stream before each operation
  void* scratch = nullptr;        // barrier()'s one-element all_reduce
  std::string name;
  int rank = 0;
  int size = 1;
  std::vector<int> world_ranks;
  std::string world_ranks_text;
  std::atomic<int64_t> step{0};
  std::atomic<double> timeout_seconds{comm::kDefaultCommTimeoutSeconds};
  std::atomic<cudaStream_t> compute{nullptr};

  // Serialises issue (one order on the stream), and guards what follows.
  std::mutex mutex;
  CommStats stats;
  std::deque<std::shared_ptr<OpState>> in_flight;  // issue order; completed ones harvested
  std::atomic<bool> aborted{false};
  std::string failure;  // why it was aborted

  std::string describe(const OpState& op) const;
  int world_rank(int group_rank) const { return world_ranks[static_cast<size_t>(group_rank)]; }

  // The following need `mutex` held.
  void harvest();
  void throw_if_aborted(const std::string& what) const;
  // Checks NCCL's asynchronous state: ncclInProgress -> false, success -> true, an error ->
  // aborts the communicator and throws naming `what`.
  bool poll_async(const std::string& what);
  [[noreturn]] void fail_and_abort(const std::string& what, const std::string& reason);
  // Waits until NCCL has finished the call that returned `r` (non-blocking communicators may
  // answer ncclInProgress), or reports the timeout for `what`.
  void settle(ncclResult_t r, const char* call, const std::string& what, int64_t bytes,
              int peer_world_rank, Clock::time_point deadline);
  std::string behind(const OpState* op) const;
  [[noreturn]] void timeout_exit(const std::string& what, int64_t bytes, int peer_world_rank,
                                 const std::string& behind_text) const;
};

}  // namespace strata::nccl
