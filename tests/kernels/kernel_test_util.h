// Helpers for the kernel tests: deterministic random buffers, float <-> double copies, and a
// closeness check scaled by the magnitude of the expected tensor.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace strata::kernels::testing {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

inline Vec random_vec(int64_t count, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Vec v(static_cast<size_t>(count));
  for (auto& x : v) x = dist(rng);
  return v;
}

inline DVec random_dvec(int64_t count, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  DVec v(static_cast<size_t>(count));
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

inline DVec to_double(const Vec& v) {
  return DVec(v.begin(), v.end());
}

// Every |got - want| <= rel * (|want_i| + max|want|): relative per element, with an absolute
// floor at the scale of the whole tensor (for elements that are near zero by cancellation).
inline ::testing::AssertionResult close(const float* got, const double* want, int64_t count,
                                        double rel) {
  double scale = 0.0;
  for (int64_t i = 0; i < count; ++i) scale = std::max(scale, std::abs(want[i]));
  for (int64_t i = 0; i < count; ++i) {
    const double err = std::abs(double(got[i]) - want[i]);
    if (!(err <= rel * (std::abs(want[i]) + scale))) {  // also catches NaN
      return ::testing::AssertionFailure()
             << "element " << i << " of " << count << ": got " << got[i] << ", want " << want[i]
             << " (err " << err << ", scale " << scale << ", rel " << rel << ")";
    }
  }
  return ::testing::AssertionSuccess();
}
inline ::testing::AssertionResult close(const Vec& got, const DVec& want, double rel) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size mismatch";
  return close(got.data(), want.data(), int64_t(got.size()), rel);
}
inline ::testing::AssertionResult close(const DVec& got, const DVec& want, double rel) {
  double scale = 0.0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    if (!(err <= rel * (std::abs(want[i]) + scale))) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want "
                                           << want[i] << " (err " << err << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

inline double dot(const DVec& a, const DVec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of loss() with respect to every element of x (perturbed in place, then
// restored), step h: in double, with h = 1e-6, truncation ~1e-12 and rounding ~1e-10 relative.
inline DVec numeric_grad(DVec& x, const std::function<double()>& loss, double h = 1e-6) {
  DVec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double lp = loss();
    x[i] = saved - h;
    const double lm = loss();
    x[i] = saved;
    g[i] = (lp - lm) / (2.0 * h);
  }
  return g;
}

}  // namespace strata::kernels::testing
