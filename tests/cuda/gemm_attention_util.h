// Small helpers for test_gemm.cc and test_flash_attention.cc: a device buffer that frees itself,
// seeded random host data, bf16 rounding, and a tolerance check that names the worst element.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/cuda_check.h"

namespace strata::cuda::test {

template <typename T>
class DevBuf {
 public:
  explicit DevBuf(size_t count) : count_(count) {
    STRATA_CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(count, 1) * sizeof(T)));
  }
  explicit DevBuf(const std::vector<T>& host) : DevBuf(host.size()) { upload(host); }
  ~DevBuf() { cudaFree(ptr_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  T* get() const { return ptr_; }
  void upload(const std::vector<T>& host) {
    STRATA_CUDA_CHECK(
        cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  // Synchronising copy back (cudaMemcpy waits for the work queued before it).
  std::vector<T> download() const {
    STRATA_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(count_);
    STRATA_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

inline std::vector<float> uniform(size_t count, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<float> normal(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

inline std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(v[i]);
  return out;
}

// The values exactly as bf16 represents them (what a bf16 operand means).
inline std::vector<float> round_bf16(const std::vector<float>& v) {
  return from_bf16(to_bf16(v));
}

// Every element within atol + rtol * |expected|; on failure the message names the worst one.
inline ::testing::AssertionResult near_all(const std::vector<float>& got,
                                           const std::vector<float>& want, double atol,
                                           double rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  size_t worst = 0, bad = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double excess = err - (atol + rtol * std::fabs(static_cast<double>(want[i])));
    if (!(excess <= 0.0)) ++bad;  // NaN counts as bad
    if (!(excess <= worst_excess)) worst_excess = excess, worst = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements out of tolerance (atol " << atol << ", rtol "
         << rtol << "); worst at " << worst << ": got " << got[worst] << ", want " << want[worst];
}

inline float max_abs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

}  // namespace strata::cuda::test
