#include <gtest/gtest.h>

#include "gpu_test.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device.h"

namespace strata::cuda {
namespace {

TEST(CudaDevice, CountsWithoutThrowingAndSaysWhyWhenThereIsNone) {
  std::string why;
  const int n = device_count(&why);
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_FALSE(why.empty());
  }
}

TEST(CudaDevice, DescribesTheDevice) {
  REQUIRE_GPU();
  const DeviceInfo info = device_info(0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.memory_bytes, 0);
  std::printf("device 0: %s\n", info.summary().c_str());
}

TEST(CudaDevice, EventsTimeAStream) {
  REQUIRE_GPU();
  Stream stream;
  Event start(true), stop(true);
  void* buf = nullptr;
  STRATA_CUDA_CHECK(cudaMalloc(&buf, 1 << 20));
  start.record(stream.get());
  STRATA_CUDA_CHECK(cudaMemsetAsync(buf, 0, 1 << 20, stream.get()));
  stop.record(stream.get());
  stop.synchronize();
  EXPECT_GE(stop.elapsed_ms_since(start), 0.0f);
  STRATA_CUDA_CHECK(cudaFree(buf));
}

TEST(CudaCheck, NamesTheCallAndTheError) {
  try {
    STRATA_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaErrorInvalidValue"), std::string::npos) << what;
    EXPECT_NE(what.find("test_device.cc"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace strata::cuda
