#include "comm/nccl/device_host_comm.h"

#include <cuda_runtime.h>

#include <vector>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"

namespace strata {

namespace {

// GPU memory (device or managed) as NCCL can move it; anything else is host memory for MPI.
bool on_gpu(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // plain host memory may report an error on old drivers: not sticky
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

// A transfer staged through a host buffer: the MPI operation on it, and for a receive the copy to
// the device once it has arrived.
class StagedWork final : public Work {
 public:
  StagedWork(std::vector<char> host, void* device_dst, cudaStream_t stream)
      : host_(std::move(host)), device_dst_(device_dst), stream_(stream) {}
  void start(WorkHandle mpi) { mpi_ = std::move(mpi); }
  char* host() { return host_.data(); }

  bool test() override {
    if (!mpi_->test()) return false;
    finish();
    return true;
  }
  void wait() override {
    mpi_->wait();
    finish();
  }

 private:
  void finish() {
    if (done_) return;
    done_ = true;
    if (!device_dst_) return;
    // On the compute stream: earlier kernels may still read the old contents of the buffer.
    // The synchronise keeps the host buffer alive until the copy has read it.
    STRATA_CUDA_CHECK(
        cudaMemcpyAsync(device_dst_, host_.data(), host_.size(), cudaMemcpyHostToDevice, stream_));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  std::vector<char> host_;
  void* device_dst_ = nullptr;  // receives only
  cudaStream_t stream_;
  WorkHandle mpi_;
  bool done_ = false;
};

}  // namespace

WorkHandle staged_send(Comm& host, cudaStream_t stream, const void* device_buf, int64_t count,
                       DType dtype, int peer, int tag) {
  STRATA_CHECK(count >= 0, "comm: send on group '", host.name(), "': negative count ", count);
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
  auto work = std::make_shared<StagedWork>(std::vector<char>(bytes), nullptr, stream);
  // After the kernels that wrote the buffer (the compute stream's queued work).
  STRATA_CUDA_CHECK(
      cudaMemcpyAsync(work->host(), device_buf, bytes, cudaMemcpyDeviceToHost, stream));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  work->start(host.send(work->host(), count, dtype, peer, tag));
  return work;
}

WorkHandle staged_recv(Comm& host, cudaStream_t stream, void* device_buf, int64_t count,
                       DType dtype, int peer, int tag) {
  STRATA_CHECK(count >= 0, "comm: recv on group '", host.name(), "': negative count ", count);
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
  auto work = std::make_shared<StagedWork>(std::vector<char>(bytes), device_buf, stream);
  work->start(host.recv(work->host(), count, dtype, peer, tag));
  return work;
}

DeviceHostComm::DeviceHostComm(Comm& host, NcclComm& device) : host_(host), device_(device) {
  STRATA_CHECK(host.size() == device.size() && host.rank() == device.rank(),
               "DeviceHostComm: the MPI group '", host.name(), "' (rank ", host.rank(), " of ",
               host.size(), ") and the NCCL group '", device.name(), "' (rank ", device.rank(),
               " of ", device.size(), ") are not the same group");
}

Comm& DeviceHostComm::route(const char* what, const void* a, const void* b) {
  const bool gpu_a = a && on_gpu(a);
  if (b) {
    const bool gpu_b = on_gpu(b);
    STRATA_CHECK(!a || gpu_a == gpu_b, "comm: ", what, " on group '", name(),
                 "': one buffer is GPU memory and the other host memory; pass both on one side");
    if (!a) return gpu_b ? static_cast<Comm&>(device_) : host_;
  }
  return gpu_a ? static_cast<Comm&>(device_) : host_;
}

WorkHandle DeviceHostComm::all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) {
  return route("all_reduce", buf).all_reduce(buf, count, dtype, op);
}

WorkHandle DeviceHostComm::reduce_scatter(const void* send, void* recv, int64_t recv_count,
                                          DType dtype, ReduceOp op) {
  return route("reduce_scatter", send, recv).reduce_scatter(send, recv, recv_count, dtype, op);
}

WorkHandle DeviceHostComm::all_gather(const void* send, void* recv, int64_t send_count,
                                      DType dtype) {
  return route("all_gather", send, recv).all_gather(send, recv, send_count, dtype);
}

WorkHandle DeviceHostComm::all_to_all_v(const void* send, const int64_t* send_counts, void* recv,
                                        const int64_t* recv_counts, DType dtype) {
  return route("all_to_all_v", send, recv)
      .all_to_all_v(send, send_counts, recv, recv_counts, dtype);
}

WorkHandle DeviceHostComm::broadcast(void* buf, int64_t count, DType dtype, int root) {
  return route("broadcast", buf).broadcast(buf, count, dtype, root);
}

WorkHandle DeviceHostComm::send(const void* buf, int64_t count, DType dtype, int peer, int tag) {
  if (buf && on_gpu(buf))
    return staged_send(host_, device_.compute_stream(), buf, count, dtype, peer, tag);
  return host_.send(buf, count, dtype, peer, tag);
}

WorkHandle DeviceHostComm::recv(void* buf, int64_t count, DType dtype, int peer, int tag) {
  if (buf && on_gpu(buf))
    return staged_recv(host_, device_.compute_stream(), buf, count, dtype, peer, tag);
  return host_.recv(buf, count, dtype, peer, tag);
}

void DeviceHostComm::set_step(int64_t step) {
  host_.set_step(step);
  device_.set_step(step);
}

void DeviceHostComm::set_timeout(double seconds) {
  host_.set_timeout(seconds);
  device_.set_timeout(seconds);
}

CommStats DeviceHostComm::stats() const {
  CommStats total = host_.stats();
  total += device_.stats();
  return total;
}

void DeviceHostComm::reset_stats() {
  host_.reset_stats();
  device_.reset_stats();
}

std::unique_ptr<DeviceRoutes> make_device_routes(ProcessGroups& groups, int device,
                                                 cudaStream_t compute_stream) {
  auto routes = std::make_unique<DeviceRoutes>();
  routes->nccl = make_nccl_groups(groups, device);
  routes->nccl.set_compute_stream(compute_stream);
  NcclGroups& n = routes->nccl;
  ProcessGroups::Routes r;
  r.world = std::make_unique<DeviceHostComm>(groups.mpi_world(), *n.world);
  r.dp = std::make_unique<DeviceHostComm>(groups.mpi_dp(), *n.dp);
  r.tp = std::make_unique<DeviceHostComm>(groups.mpi_tp(), *n.tp);
  r.pp = std::make_unique<DeviceHostComm>(groups.mpi_pp(), *n.pp);
  r.cp = std::make_unique<DeviceHostComm>(groups.mpi_cp(), *n.cp);
  groups.route_through(std::move(r));
  return routes;
}

}  // namespace strata
