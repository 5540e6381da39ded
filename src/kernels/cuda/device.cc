#include "kernels/cuda/device.h"

#include <cstdio>

#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {

int device_count(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so that later calls do not see it
    if (why) *why = cat("no usable CUDA device: ", cudaGetErrorString(err));
    return 0;
  }
  if (count == 0 && why) *why = "no CUDA device in this machine";
  return count;
}

std::string DeviceInfo::summary() const {
  char mem[32];
  std::snprintf(mem, sizeof(mem), "%.1f GiB", static_cast<double>(memory_bytes) / (1 << 30));
  return cat(name, " (sm_", sm_major, sm_minor, ", ", sm_count, " SMs, ", mem, ")");
}

DeviceInfo device_info(int device) {
  cudaDeviceProp prop{};
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceInfo info;
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info.shared_memory_per_block_optin = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  return info;
}

Stream::Stream() {
  STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}
Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);
}
void Stream::synchronize() const {
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Event::Event(bool timing) {
  STRATA_CUDA_CHECK(
      cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}
void Event::record(cudaStream_t stream) {
  STRATA_CUDA_CHECK(cudaEventRecord(event_, stream));
}
void Event::wait_on(cudaStream_t stream) const {
  STRATA_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}
void Event::synchronize() const {
  STRATA_CUDA_CHECK(cudaEventSynchronize(event_));
}
float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

}  // namespace strata::cuda
