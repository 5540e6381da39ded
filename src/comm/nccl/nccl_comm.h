// NcclComm: the NCCL backend of Comm, for buffers in GPU memory. One NCCL communicator per process
// group, built beside the group's MPI communicator (MPI carries the NCCL unique id; NCCL carries
// the data). See docs/GPU.md for the design; the contract in short:
//
// Streams. Each NcclComm owns a non-blocking, high-priority communication stream. An operation
//   1. records an event on the caller's compute stream (set_compute_stream; default: stream 0, the
//      legacy default stream) and makes the communication stream wait for it, so the operation
//      sees everything the compute stream wrote before the call (e.g. the gradients of a bucket);
//   2. enqueues the NCCL call (ncclAllReduce, ncclReduceScatter, ncclAllGather, ncclBroadcast,
//      ncclSend, ncclRecv) between a start and a completion event on the communication stream;
//   3. returns an NcclWork at once; the host never blocks on the GPU to issue.
//
// Waiting. Work::wait() on an NcclWork is DEVICE-SIDE: it makes the compute stream (the one the
// operation was ordered after) wait for the completion event and returns at once; kernels the
// caller launches afterwards on that stream see the result, and the host keeps issuing work. This
// is what a training step wants (the next layer's kernels queue behind the all-gather without a
// host stall). wait_stream(s) does the same for any other stream. wait_host() is the blocking
// variant (host reads of the buffer, barrier(), the end of a step): it polls the completion event
// against the group's timeout. test() never blocks. Works of one group complete in issue order
// (one stream).
//
// Timeouts. wait_host(), barrier(), construction and NCCL calls still in progress wait at most the
// group's timeout (default 300 s, or the bootstrap MpiComm's). On expiry the NCCL communicator is
// aborted (ncclCommAbort frees the GPU from kernels waiting on a dead peer) and the process logs
// the MPI backend's line and ends with kCommTimeoutExit (124):
//   comm timeout: all_reduce on group 'dp' (world ranks 0,1) at step 17 did not complete within
//   2.0 s (4194304 bytes); a peer rank may have hung or died
// A device-side wait() has no timeout of its own: the next host wait (at the latest the step's
// end) reports a hang.
//
// Failures. An NCCL error (a bad call, or an asynchronous error such as a peer's network failure)
// throws strata::Error naming the operation and NCCL's reason; after an asynchronous error the
// communicator is aborted and every later operation on the group throws.
//
// Initialisation is non-blocking (ncclConfig_t::blocking = 0): ncclCommInitRankConfig and every
// NCCL call return at once, possibly with ncclInProgress, and NcclComm polls
// ncclCommGetAsyncError against the group's timeout. With blocking communicators, a peer that
// never arrives would hang the host inside ncclCommInitRank (or inside the first collective, when
// NCCL connects its peers lazily) with no timeout and no message.
//
// Arguments are checked before anything is issued, as in MpiComm: counts >= 0, peers/roots in the
// group, device (or managed) memory, no partial overlap; in place as in MpiComm
// (reduce_scatter(send == recv): recv holds every block and the result is its first recv_count
// elements; all_gather(recv + rank * n, recv, n)). NCCL has no tags: messages between two ranks
// match in issue order, and the tag appears only in messages. A send and a recv between the same
// two ranks must be issued in matching order on both (NCCL send/recv block on the device until
// the peer posts its side; both ranks sending first would deadlock) -- or use send_recv().
//
// Thread safety: operations may be issued from several threads (issue is serialised per group);
// every rank must still issue a group's collectives in the same order. Each operation makes the
// group's device current for its duration and restores the caller's.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"

namespace strata {

namespace nccl {
struct Group;
struct OpState;
}  // namespace nccl

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<nccl::Group> group, std::shared_ptr<nccl::OpState> op);

  // True once the completion event has fired (cudaEventQuery); throws if NCCL reported an
  // asynchronous error for the group.
  bool test() override;
  // Device-side: the compute stream the operation was issued after waits for it (no host block).
  void wait() override;
  // Device-side, for any stream of the comm's device.
  void wait_stream(cudaStream_t stream);
  // Host-side: blocks until completion or the group's timeout (abort, report, exit 124).
  void wait_host();
  // The completion event (recorded on the communication stream after the operation).
  cudaEvent_t event() const;

 private:
  std::shared_ptr<nccl::Group> group_;
  std::shared_ptr<nccl::OpState> op_;
};

// Blocks the host until `work` is complete: wait_host() for an NcclWork, wait() for any other.
void wait_host(const WorkHandle& work);

class NcclComm final : public Comm {
 public:
  struct Args;  // one operation's arguments (nccl_comm.cc)
  // Collective over `bootstrap` (a host Comm of the same ranks, e.g. an MpiComm of ProcessGroups):
  // its rank 0 creates the NCCL unique id, bootstrap.broadcast carries it to the others, and every
  // rank creates its NCCL communicator on `device`, which becomes (and stays) current on the
  // calling thread. First an all_reduce over bootstrap checks that every rank has its device, so a
  // rank without a GPU makes all of them throw instead of leaving them waiting. Same name, ranks
  // and world ranks as bootstrap; the timeout is bootstrap's when it is an MpiComm.
  NcclComm(Comm& bootstrap, int device);
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override;
  int size() const override;
  const std::string& name() const override;
  int world_rank_of(int group_rank) const override;

  WorkHandle all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) override;
  WorkHandle reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                            ReduceOp op) override;
  WorkHandle all_gather(const void* send, void* recv, int64_t send_count, DType dtype) override;
  WorkHandle all_to_all_v(const void* send, const int64_t* send_counts, void* recv,
                          const int64_t* recv_counts, DType dtype) override;
  WorkHandle broadcast(void* buf, int64_t count, DType dtype, int root) override;
  WorkHandle send(const void* buf, int64_t count, DType dtype, int peer, int tag) override;
  WorkHandle recv(void* buf, int64_t count, DType dtype, int peer, int tag) override;
  // Both directions with one peer as one NCCL group (ncclGroupStart/End): no ordering
  // constraint between the two ranks. Counted as one send and one recv.
  WorkHandle send_recv(const void* send_buf, void* recv_buf, int64_t count, DType dtype, int peer,
                       int tag);
  // An all_reduce of one element, then a host wait (with the timeout).
  void barrier() override;

  void set_step(int64_t step) override;
  void set_timeout(double seconds) override;
  double timeout() const;

  // The stream later operations are ordered after, and whose wait() waits for them.
  void set_compute_stream(cudaStream_t stream);
  cudaStream_t compute_stream() const;
  cudaStream_t comm_stream() const;
  int device() const;
  ncclComm_t handle() const;

  // calls and bytes count at issue (as MpiComm: all_reduce/broadcast the buffer, reduce_scatter
  // its whole input, all_gather its own block, send/recv the message); seconds are the GPU time
  // from the start to the completion event of each operation completed so far (collected when
  // stats() or a later operation finds them done); wait_seconds is host time blocked in
  // wait_host() and barrier() (device-side waits block no host).
  CommStats stats() const override;
  void reset_stats() override;

 private:
  WorkHandle issue(const Args& args);
  WorkHandle point_to_point(const char* what, CommOp kind, bool exchange, const void* send_buf,
                            void* recv_buf, int64_t count, DType dtype, int peer, int tag);
  void check_count(int64_t count, const char* what) const;
  void check_peer(int peer, const char* what) const;
  void check_device_buffer(const void* p, const char* what) const;

  std::shared_ptr<nccl::Group> group_;
};

// The device a rank of this node should use: its local rank (mpirun/srun) modulo the GPUs it can
// see. Throws when there is no GPU.
int local_device();

}  // namespace strata
