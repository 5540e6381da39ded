#include "train/train_device.h"

#include <algorithm>
#include <vector>

#include "core/clock.h"
#include "core/error.h"
#include "core/philox.h"
#include "kernels/cpu/kernels.h"

#ifdef STRATA_WITH_CUDA
#include "comm/mpi_runtime.h"
#include "comm/nccl/device_host_comm.h"
#include "comm/nccl/nccl_comm.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.h"
#endif

namespace strata {

namespace {

// The peak MFU divides by: the GEMM rate of the arithmetic the training precision runs at this
// kernel level. f32, f16 and bf16 below avx512bf16 multiply in f32 (the 16-bit operands widened,
// kernels::lowp_widens), so their peak is the f32 GEMM's; bf16 at avx512bf16 multiplies bf16
// (oneDNN's bf16 matmul, about twice the f32 rate), so its peak is that GEMM's. A training-sized
// product (about 2 GFLOP, ~10 ms): small ones under-report the peak, and MFU is this rate's
// fraction, so it must be the best the machine does.
double measure_cpu_gemm_flops(DType precision) {
  const int64_t n = 1024;
  const bool bf16 = precision == DType::bf16 && !kernels::lowp_widens(DType::bf16);
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  std::vector<uint16_t> a16, b16;
  if (bf16) {
    a16.resize(a.size());
    b16.resize(b.size());
    kernels::to_lowp(DType::bf16, a16.data(), a.data(), n * n);
    kernels::to_lowp(DType::bf16, b16.data(), b.data(), n * n);
  }
  auto product = [&] {
    if (bf16)
      kernels::gemm_bf16(false, true, n, n, n, 1.0f, a16.data(), n, b16.data(), n, 0.0f, c.data(),
                         n);
    else
      kernels::gemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  product();  // warm-up: the JIT kernel, first touch
  double best = 0;
  for (int rep = 0; rep < 8; ++rep) {
    const auto t0 = Clock::now();
    product();
    best = std::max(best, 2.0 * n * n * n / seconds_since(t0));
  }
  return best;
}

}  // namespace

TrainDevice::TrainDevice(const SystemConfig& system) {
  if (system.device == Device::cpu) {
    backend_ = &cpu_backend();
    description_ = "cpu";
    return;
  }
#ifdef STRATA_WITH_CUDA
  std::string why;
  const int visible = cuda::device_count(&why);
  STRATA_CHECK(visible > 0, "system.device = \"cuda\" but this process sees no GPU: ", why,
               "; run on a machine with an NVIDIA GPU, or set system.device = \"cpu\"");
  gpu_ = detect_rank_env().local_rank % visible;
  owned_ = make_cuda_backend(gpu_);
  backend_ = owned_.get();
  description_ = cat("cuda:", gpu_, " ", cuda::device_info(gpu_).summary());
#else
  fail(
      "system.device = \"cuda\" but this strata was built without the CUDA backend (CMake found "
      "no nvcc, or -DSTRATA_CUDA=OFF); rebuild on a machine with the CUDA toolkit, or set "
      "system.device = \"cpu\"");
#endif
}

TrainDevice::TrainDevice(Backend& backend) : backend_(&backend) {
  description_ = backend.memory() ? backend.memory()->name() : device_name(backend.kind());
}

TrainDevice::~TrainDevice() = default;

void TrainDevice::route(ProcessGroups& groups) {
  if (backend_->kind() != Device::cuda) return;
#ifdef STRATA_WITH_CUDA
  std::shared_ptr<DeviceRoutes> routes =
      make_device_routes(groups, gpu_, CudaBackend::of(*backend_)->stream());
  routes_ = routes;
#else
  (void)groups;
#endif
}

double TrainDevice::measure_peak_flops(DType precision) {
  if (backend_->kind() == Device::cpu) return measure_cpu_gemm_flops(precision);
  Backend& be = *backend_;
  DeviceMemory& mem = *be.memory();
  const int64_t n = 8192, nn = n * n;
  // Random values in [-1, 1): one host block of Philox draws, tiled over each matrix.
  const int64_t block = int64_t{1} << 20;
  std::vector<float> host(static_cast<size_t>(block));
  const CounterRng rng(0x9e3779b97f4a7c15ull, 0);
  for (int64_t i = 0; i < block; ++i)
    host[static_cast<size_t>(i)] = static_cast<float>(2.0 * rng.uniform(i) - 1.0);
  auto* a = static_cast<float*>(mem.allocate(static_cast<size_t>(nn) * sizeof(float), 256));
  auto* b = static_cast<float*>(mem.allocate(static_cast<size_t>(nn) * sizeof(float), 256));
  auto* c = static_cast<float*>(mem.allocate(static_cast<size_t>(nn) * sizeof(float), 256));
  for (int64_t off = 0; off < nn; off += block) {
    be.copy_from_host(a + off, host.data(), static_cast<size_t>(block) * sizeof(float));
    be.copy_from_host(b + off, host.data(), static_cast<size_t>(block) * sizeof(float));
  }
  const bool lowp = precision == DType::bf16 || precision == DType::f16;
  auto* a16 = reinterpret_cast<uint16_t*>(c);  // the f32 inputs converted into c's first half
  auto* b16 = a16 + nn;
  if (lowp) {
    be.to_lowp(DType::bf16, a16, a, nn);
    be.to_lowp(DType::bf16, b16, b, nn);
  }
  auto product = [&] {
    if (lowp)
      be.gemm(DType::bf16, false, true, n, n, n, 1.0f, a16, n, b16, n, 0.0f, a, n);
    else
      be.gemm(DType::f32, false, true, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
  };
  for (int i = 0; i < 3; ++i) product();  // warm-up: plan choice, clocks
  be.synchronize();
  const int reps = 10;
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) product();
  be.synchronize();
  const double rate =
      2.0 * static_cast<double>(nn) * static_cast<double>(n) * reps / seconds_since(t0);
  mem.free(c);
  mem.free(b);
  mem.free(a);
  return rate;
}

void TrainDevice::download(float* host, const float* device, int64_t count) {
  if (count > 0) backend_->copy_to_host(host, device, static_cast<size_t>(count) * sizeof(float));
}

void TrainDevice::upload(float* device, const float* host, int64_t count) {
  if (count > 0) backend_->copy_from_host(device, host, static_cast<size_t>(count) * sizeof(float));
}

const float* TrainDevice::host_view(const float* device, int64_t count,
                                    std::vector<float>& staging) {
  if (is_host() || !device) return device;
  staging.resize(static_cast<size_t>(count));
  download(staging.data(), device, count);
  return staging.data();
}

}  // namespace strata
