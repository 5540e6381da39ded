// The CUDA device: whether there is one, what it is, and RAII wrappers for the streams and events
// the backend runs on (one compute stream, one communication stream per process group).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace strata::cuda {

// Number of GPUs this process can use. 0 when there is none, no driver, or the runtime cannot
// start; then `why` (if given) says which, in words fit for a test's skip message.
int device_count(std::string* why = nullptr);

struct DeviceInfo {
  std::string name;  // "NVIDIA H200"
  int sm_major = 0, sm_minor = 0;
  int sm_count = 0;
  int64_t memory_bytes = 0;
  int64_t shared_memory_per_block_optin = 0;
  std::string summary() const;  // "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)"
};
DeviceInfo device_info(int device);

// A non-blocking stream (it does not synchronise with the legacy default stream).
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

// An event without timing (cheap) for ordering streams, or with timing for measurements.
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream);
  // Makes `stream` wait (on the device, without blocking the host) for this event.
  void wait_on(cudaStream_t stream) const;
  void synchronize() const;
  // Milliseconds from `start` to this event (both recorded with timing).
  float elapsed_ms_since(const Event& start) const;

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace strata::cuda
