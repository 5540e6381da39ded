// TrainDevice: where a trainer's model, gradients and optimizer state live (system.device). It
// owns the Backend the model runs on (kernels/backend.h) and, for a job of several ranks on GPUs,
// the NCCL communicators its process groups route device buffers through; the model, parallel and
// optimizer code is the same on every device.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/process_groups.h"
#include "core/dtype.h"
#include "kernels/backend.h"
#include "run/config.h"

namespace strata {

class TrainDevice {
 public:
  // "cpu": the shared CPU backend. "cuda": this rank's GPU (local rank modulo the visible GPUs);
  // throws strata::Error saying what to do when this build has no CUDA backend or no GPU is seen.
  explicit TrainDevice(const SystemConfig& system);
  // A backend the caller owns (tests: a CPU backend whose memory the host cannot touch).
  explicit TrainDevice(Backend& backend);
  ~TrainDevice();
  TrainDevice(const TrainDevice&) = delete;
  TrainDevice& operator=(const TrainDevice&) = delete;

  Backend& backend() { return *backend_; }
  // True when the model's buffers are plain host memory (the CPU backend's arena).
  bool is_host() const { return backend_->memory() == nullptr; }
  // "cpu", or "cuda:0 NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)".
  const std::string& description() const { return description_; }

  // Routes the device buffers of every group of `groups` through NCCL on this rank's GPU (host
  // buffers stay on MPI). Nothing on the CPU. Collective; call before any code holds a group.
  void route(ProcessGroups& groups);

  // The matrix rate MFU is measured against, FLOP/s: the CPU's f32 GEMM with the current thread
  // count, or the GPU's GEMM at `precision` (bf16/f16 on tensor cores, f32 on FP32 units) on an
  // 8192^3 product of random values (zeros would flatter the rate).
  double measure_peak_flops(DType precision);

  // Copies between this device's memory and the host (plain copies on the CPU).
  void download(float* host, const float* device, int64_t count);
  void upload(float* device, const float* host, int64_t count);
  // `device` on the host: the pointer itself on the CPU, else a copy in `staging`.
  const float* host_view(const float* device, int64_t count, std::vector<float>& staging);

 private:
  std::unique_ptr<Backend> owned_;
  Backend* backend_ = nullptr;
  std::string description_;
  int gpu_ = -1;
  std::shared_ptr<void> routes_;  // the NCCL groups behind the installed routes
};

}  // namespace strata
