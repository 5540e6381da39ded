// The optimizer-offload tests' problem (test_offload.cc, test_host_offload.cc): segments with
// padding between them, out of order and crossing chunk boundaries, seeded params and gradients,
// and a bitwise comparison.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "optim/adamw.h"

namespace strata::testing {

// Bitwise comparison: EXPECT_EQ on floats would call -0 and 0 equal and NaN unequal.
inline ::testing::AssertionResult same_bits(const float* a, const float* b, int64_t count,
                                            const char* what) {
  for (int64_t i = 0; i < count; ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure()
             << what << " differs at " << i << ": " << a[i] << " vs " << b[i];
  }
  return ::testing::AssertionSuccess();
}

struct SegmentSpec {
  int64_t offset;
  int64_t count;
  bool weight_decay;
};

// Segments with gaps between their state offsets (padding), one crossing many chunk boundaries,
// an empty one, and given out of order (the optimizer sorts them).
inline const std::vector<SegmentSpec> kSpecs = {
    {2600, 2500, true}, {0, 700, true},    {717, 1500, false}, {2217, 3, false},
    {2230, 0, true},    {2240, 355, true}, {5200, 900, false},
};
constexpr int64_t kStateSize = 6150;  // 50 elements of padding at the end

inline OptimConfig test_config() {
  OptimConfig c;
  c.weight_decay = 0.1f;
  c.beta1 = 0.9f;
  c.beta2 = 0.95f;
  c.eps = 1e-8f;
  return c;
}

// Params and gradients for one optimizer, in their own buffers (one per segment, as a ZeRO shard
// would have them), with the same values for every Problem built from the same seed.
struct Problem {
  std::vector<std::vector<float>> params, grads;

  explicit Problem(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 0.5f);
    for (const SegmentSpec& s : kSpecs) {
      params.emplace_back(static_cast<size_t>(s.count));
      grads.emplace_back(static_cast<size_t>(s.count));
      for (float& x : params.back()) x = dist(rng);
    }
  }
  std::vector<OptimSegment> segments() {
    std::vector<OptimSegment> out;
    for (size_t i = 0; i < kSpecs.size(); ++i)
      out.push_back({params[i].data(), grads[i].data(), kSpecs[i].count, kSpecs[i].weight_decay,
                     kSpecs[i].offset});
    return out;
  }
  void fill_grads(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (auto& g : grads)
      for (float& x : g) x = dist(rng);
  }
  ::testing::AssertionResult same_params(const Problem& other) const {
    for (size_t i = 0; i < params.size(); ++i) {
      auto r = same_bits(params[i].data(), other.params[i].data(), kSpecs[i].count, "param");
      if (!r) return r << " (segment " << i << ")";
    }
    return ::testing::AssertionSuccess();
  }
};

inline float lr_at(int step) {
  return 1e-3f * static_cast<float>(step + 1) / 3.0f;
}

}  // namespace strata::testing
