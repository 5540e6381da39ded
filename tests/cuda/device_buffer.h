// Helpers for the CUDA kernel tests: an RAII device buffer with upload and download, seeded random
// inputs, and closeness checks against the CPU kernels.
// Kernels run on a non-blocking Stream, which does not wait for the legacy stream that cudaMemcpy
// uses (nor the legacy stream for it): upload and download synchronise the whole device on both
// sides, so a test never reads a buffer before its kernels have finished, or the other way round.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace strata::cuda::testing {

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(int64_t count) : count_(count) {
    STRATA_CUDA_CHECK(cudaMalloc(&ptr_, bytes()));
    STRATA_CUDA_CHECK(cudaMemset(ptr_, 0, bytes()));
    STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(int64_t(host.size())) {
    upload(host);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  int64_t size() const { return count_; }

  void upload(const std::vector<T>& host) {
    EXPECT_EQ(int64_t(host.size()), count_);
    STRATA_CUDA_CHECK(cudaDeviceSynchronize());
    STRATA_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
    STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<T> download() const {
    std::vector<T> host(static_cast<size_t>(count_));
    STRATA_CUDA_CHECK(cudaDeviceSynchronize());
    STRATA_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    STRATA_CUDA_CHECK(cudaDeviceSynchronize());
    return host;
  }

 private:
  size_t bytes() const { return static_cast<size_t>(std::max<int64_t>(count_, 1)) * sizeof(T); }
  T* ptr_ = nullptr;
  int64_t count_ = 0;
};

inline std::vector<float> random_floats(int64_t count, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<int32_t> random_tokens(int64_t count, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> v(static_cast<size_t>(count));
  for (auto& x : v) x = dist(rng);
  return v;
}

// Every |got - want| <= rel * (|want_i| + max|want|): relative per element, with an absolute floor
// at the scale of the whole tensor (for elements near zero by cancellation). NaN fails.
inline ::testing::AssertionResult all_close(const std::vector<float>& got,
                                            const std::vector<float>& want, double rel) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  double scale = 0.0;
  for (float w : want) scale = std::max(scale, std::abs(double(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - double(want[i]));
    if (!(err <= rel * (std::abs(double(want[i])) + scale))) {
      return ::testing::AssertionFailure()
             << "element " << i << " of " << got.size() << ": got " << got[i] << ", want "
             << want[i] << " (err " << err << ", scale " << scale << ", rel " << rel << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Bit-for-bit equality (so that -0 vs +0 and NaN payloads count).
template <typename T>
::testing::AssertionResult bitwise_equal(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      return ::testing::AssertionFailure() << "element " << i << " of " << got.size()
                                           << " differs: got " << got[i] << ", want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace strata::cuda::testing
