// DeviceHostComm: one process group as the trainer sees it on GPUs. Each operation goes to the
// group's NCCL communicator when its buffers are GPU memory (gradients, parameters, activations)
// and to the group's MPI communicator when they are host memory (losses, norms, step times,
// checkpoint gathers), so that model and parallel code written against Comm runs unchanged on
// either device. ProcessGroups::route_through installs one per group (make_device_routes).
//
// Both communicators carry the same ranks; an operation is issued on one of them only, so every
// rank must pass the same kind of buffer (the callers do: the kind follows from the code path,
// never from the rank). Mixing kinds in one operation (a host send buffer and a device receive
// buffer) is an error. barrier() is the NCCL one: it also waits for this rank's queued GPU work.
//
// Point-to-point transfers of GPU buffers (pipeline activations and gradients, the tied
// embedding's gradient) are staged through host memory over MPI, not sent with NCCL: an NCCL send
// holds its stream until the peer's receive runs, so the pipeline executor's order of sends and
// receives (free with MPI's non-blocking operations, and with tags) could deadlock on one NCCL
// stream. A send copies the buffer to the host after the compute stream's queued work and sends
// it; a receive lands on the host and is copied to the device, on the compute stream, when it is
// waited for. Correct for every schedule; the price is two PCIe copies per transfer and a host
// wait for the compute stream at each.
#pragma once
#include <memory>

#include "comm/comm.h"
#include "comm/nccl/nccl_groups.h"
#include "comm/process_groups.h"

namespace strata {

class DeviceHostComm : public Comm {
 public:
  // `host` and `device` must be the same group (same size and rank); both outlive this object.
  DeviceHostComm(Comm& host, NcclComm& device);

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  const std::string& name() const override { return host_.name(); }
  int world_rank_of(int group_rank) const override { return host_.world_rank_of(group_rank); }

  WorkHandle all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) override;
  WorkHandle reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                            ReduceOp op) override;
  WorkHandle all_gather(const void* send, void* recv, int64_t send_count, DType dtype) override;
  WorkHandle all_to_all_v(const void* send, const int64_t* send_counts, void* recv,
                          const int64_t* recv_counts, DType dtype) override;
  WorkHandle broadcast(void* buf, int64_t count, DType dtype, int root) override;
  WorkHandle send(const void* buf, int64_t count, DType dtype, int peer, int tag) override;
  WorkHandle recv(void* buf, int64_t count, DType dtype, int peer, int tag) override;
  void barrier() override { device_.barrier(); }

  void set_step(int64_t step) override;
  void set_timeout(double seconds) override;
  CommStats stats() const override;  // both communicators, summed
  void reset_stats() override;

 private:
  // The communicator for an operation on these buffers (null entries are ignored).
  Comm& route(const char* what, const void* a, const void* b = nullptr);

  Comm& host_;
  NcclComm& device_;
};

// A send or receive of a GPU buffer through host memory over `host` (see above), ordered after
// and before the work of `stream`. Exposed for the tests.
WorkHandle staged_send(Comm& host, cudaStream_t stream, const void* device_buf, int64_t count,
                       DType dtype, int peer, int tag);
WorkHandle staged_recv(Comm& host, cudaStream_t stream, void* device_buf, int64_t count,
                       DType dtype, int peer, int tag);

// The NCCL groups of a job on GPUs and the routes built on them, kept alive together.
struct DeviceRoutes {
  NcclGroups nccl;
};

// Builds NCCL twins of every group of `groups` on `device` (collective), orders them after
// `compute_stream` (the CUDA backend's), and installs a DeviceHostComm for each group. The
// returned object must outlive every use of the groups.
std::unique_ptr<DeviceRoutes> make_device_routes(ProcessGroups& groups, int device,
                                                 cudaStream_t compute_stream);

}  // namespace strata
