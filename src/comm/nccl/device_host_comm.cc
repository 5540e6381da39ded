#include "comm/nccl/device_host_comm.h"

#include <cuda_runtime.h>

#include "core/error.h"

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

}  // namespace

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

WorkHandle DeviceHostComm::broadcast(void* buf, int64_t count, DType dtype, int root) {
  return route("broadcast", buf).broadcast(buf, count, dtype, root);
}

WorkHandle DeviceHostComm::send(const void* buf, int64_t count, DType dtype, int peer, int tag) {
  return route("send", buf).send(buf, count, dtype, peer, tag);
}

WorkHandle DeviceHostComm::recv(void* buf, int64_t count, DType dtype, int peer, int tag) {
  return route("recv", buf).recv(buf, count, dtype, peer, tag);
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
  groups.route_through(std::move(r));
  return routes;
}

}  // namespace strata
