// Comm: collective and point-to-point communication within one process group. The MPI backend
// (CPU, multi-node) implements it today; an NCCL backend joins it for GPUs.
//
// Every operation is asynchronous: it returns a Work handle at once, and a background progress
// engine (a communication thread: Open MPI makes no progress on its own) moves it forward while
// the caller computes. Every wait has a timeout; when it fires, the error names the operation, the
// group, the peer ranks (as world ranks), the training step and the bytes, and the process ends
// with a non-zero exit status so that the supervisor can restart the job.
//
// Buffers are raw pointers with an element count and a dtype; all_reduce works in place.
// The caller keeps buffers alive and untouched until the Work completes.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace strata {

enum class ReduceOp : uint8_t { sum, avg, max };

enum class CommOp : uint8_t {
  all_reduce,
  reduce_scatter,
  all_gather,
  broadcast,
  send,
  recv,
  barrier,
  all_to_all
};
constexpr int kNumCommOps = 8;
const char* comm_op_name(CommOp op);

// Exit status of a process that a communication timeout ended (the same as coreutils' timeout),
// so that a supervisor can tell a hung or dead peer from a crash.
constexpr int kCommTimeoutExit = 124;

// Who is to blame for a timeout is known above the comm layer (the trainer's heartbeats): when
// an operation times out, this hook (if set) is called with the world ranks of its group and the
// operation's description, and what it returns is appended to the error line ("; world rank 1
// did not reach it ..."). Called on the timing-out thread just before the process ends.
using TimeoutHint = std::function<std::string(const std::vector<int>& group_world_ranks,
                                              const std::string& operation)>;
void set_timeout_hint(TimeoutHint hint);
std::string timeout_hint(const std::vector<int>& group_world_ranks, const std::string& operation);

// Logs the one-line timeout error every backend prints (docs/COMM.md), which the supervisor and
// `strata diagnose` read: "comm timeout: <what> at step S did not complete within T s (B bytes)
// <behind>; <hint, or who may have hung>". bytes < 0 leaves the size out; peer_world_rank < 0
// blames "a peer rank". The caller then ends the process with kCommTimeoutExit.
void log_comm_timeout(const std::string& what, int64_t step, double timeout_seconds, int64_t bytes,
                      const std::string& behind, int peer_world_rank,
                      const std::vector<int>& group_world_ranks);

// Counted per operation kind, for metrics and the profiler.
struct CommOpStats {
  int64_t calls = 0;
  // Bytes this rank contributed (send side): all_reduce and broadcast their buffer,
  // reduce_scatter its whole input, all_gather its own block, send and recv the message.
  int64_t bytes = 0;
  double seconds = 0;       // from issue to completion, as the progress engine saw it
  double wait_seconds = 0;  // time callers spent blocked in wait(): exposed communication
};
struct CommStats {
  std::array<CommOpStats, kNumCommOps> ops{};
  const CommOpStats& operator[](CommOp op) const { return ops[static_cast<int>(op)]; }
  int64_t total_bytes() const;
  double total_wait_seconds() const;
  // Sums another set in (e.g. the stats of every group of a process).
  CommStats& operator+=(const CommStats& other);
  // One line for logs: "all_reduce 12 calls 48.0 MB 0.031 s (wait 0.004 s), ..." (used kinds).
  std::string summary() const;
};

class Work {
 public:
  virtual ~Work() = default;
  // True when the operation has completed (never blocks). Works of one group complete in issue
  // order: once a Work completes, every Work its group issued earlier has completed too.
  // An operation that failed (an MPI error) throws strata::Error with MPI's error string, from
  // test() and wait() alike.
  virtual bool test() = 0;
  // Blocks until completion or the group's timeout; on timeout, reports and ends the process
  // with kCommTimeoutExit (see above). Safe to call more than once.
  virtual void wait() = 0;
};
using WorkHandle = std::shared_ptr<Work>;

class Comm {
 public:
  virtual ~Comm() = default;

  virtual int rank() const = 0;                 // rank within this group
  virtual int size() const = 0;                 // ranks in this group
  virtual const std::string& name() const = 0;  // "world", "dp", "tp", "pp", ...
  virtual int world_rank_of(int group_rank) const = 0;

  // In place: buf holds count elements on every rank; afterwards the reduction over ranks.
  virtual WorkHandle all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) = 0;
  // send holds size() * recv_count elements; rank r receives the reduction of block r.
  virtual WorkHandle reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                                    ReduceOp op) = 0;
  // recv receives size() * send_count elements: block r is rank r's send buffer. send may alias
  // recv's own block (in place).
  virtual WorkHandle all_gather(const void* send, void* recv, int64_t send_count, DType dtype) = 0;
  virtual WorkHandle broadcast(void* buf, int64_t count, DType dtype, int root) = 0;
  virtual WorkHandle send(const void* buf, int64_t count, DType dtype, int peer, int tag) = 0;
  virtual WorkHandle recv(void* buf, int64_t count, DType dtype, int peer, int tag) = 0;
  virtual void barrier() = 0;  // blocking, with the timeout
  // Variable-size all-to-all (expert parallelism's token exchange): rank r sends send_counts[p]
  // elements to each rank p, taken from send in rank order (block p starts after blocks 0..p-1),
  // and receives recv_counts[p] elements from each p into recv, likewise in rank order. Both
  // count arrays have size() entries and must agree across ranks (recv_counts[p] here is
  // send_counts[rank()] on p); they are read before this returns. send and recv must not overlap.
  virtual WorkHandle all_to_all_v(const void* send, const int64_t* send_counts, void* recv,
                                  const int64_t* recv_counts, DType dtype) = 0;

  // Context for timeout messages, and the timeout itself (seconds; applies to later waits).
  virtual void set_step(int64_t step) = 0;
  virtual void set_timeout(double seconds) = 0;

  virtual CommStats stats() const = 0;
  virtual void reset_stats() = 0;
};

// Convenience: issue and wait.
inline void wait_all(const std::vector<WorkHandle>& works) {
  for (const WorkHandle& w : works)
    if (w) w->wait();
}

}  // namespace strata
