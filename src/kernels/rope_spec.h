// RoPE's frequencies: plain (Llama 2, Qwen: inv_freq[i] = theta^(-2i/hd)), or rescaled as Llama
// 3.1 and later do it (transformers' rope_type "llama3"). Shared by the CPU and CUDA kernels and
// the references, so that every backend forms the same frequency for a pair, in double.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/enum_names.h"

#if defined(__CUDACC__)
#define STRATA_HOST_DEVICE __host__ __device__
#else
#define STRATA_HOST_DEVICE
#endif

namespace strata {

enum class RopeScaling { none, llama3 };
template <>
struct EnumNames<RopeScaling> {
  static constexpr std::string_view names[] = {"none", "llama3"};  // model.rope_scaling
};

struct RopeSpec {
  double theta = 10000.0;
  RopeScaling scaling = RopeScaling::none;
  // llama3: wavelengths longer than original_max_positions / low_freq_factor are slowed by
  // `factor`, shorter than original_max_positions / high_freq_factor kept, and those between
  // interpolated smoothly (transformers' _compute_llama3_parameters).
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_positions = 8192.0;
};

// The rotation frequency of pair i (of hd / 2) in a head of width hd.
STRATA_HOST_DEVICE inline double rope_inv_freq(const RopeSpec& r, int64_t i, int64_t hd) {
  const double inv_freq = pow(r.theta, -2.0 * double(i) / double(hd));
  if (r.scaling == RopeScaling::none) return inv_freq;
  const double wavelen = 2.0 * 3.14159265358979323846 / inv_freq;
  const double low_freq_wavelen = r.original_max_positions / r.low_freq_factor;
  const double high_freq_wavelen = r.original_max_positions / r.high_freq_factor;
  if (wavelen < high_freq_wavelen) return inv_freq;            // high frequencies: unchanged
  if (wavelen > low_freq_wavelen) return inv_freq / r.factor;  // low frequencies: slowed
  const double smooth = (r.original_max_positions / wavelen - r.low_freq_factor) /
                        (r.high_freq_factor - r.low_freq_factor);
  return (1.0 - smooth) * inv_freq / r.factor + smooth * inv_freq;
}

}  // namespace strata
