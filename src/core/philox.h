// Counter-based RNG (Philox4x32-10, Salmon et al. 2011). A value depends only on (key, counter),
// never on call order or thread, so a parameter initialised from (seed, global name, global
// element index) is identical whatever the layout that owns its slice (DESIGN invariant 1).
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace strata {

struct Philox {
  static std::array<uint32_t, 4> block(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
    constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
    constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
    for (int round = 0; round < 10; ++round) {
      const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
      const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
      ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
             static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
      key[0] += kW0;
      key[1] += kW1;
    }
    return ctr;
  }
};

// 64-bit FNV-1a: turns a parameter's global name into a stream id.
constexpr uint64_t hash_name(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

// Random numbers for element `index` of stream `stream` under `seed`.
class CounterRng {
 public:
  CounterRng(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}

  // Four uniform 32-bit words for counter `index`.
  std::array<uint32_t, 4> bits(uint64_t index) const {
    return Philox::block({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                          static_cast<uint32_t>(stream_), static_cast<uint32_t>(stream_ >> 32)},
                         {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
  }
  // Uniform in (0, 1).
  double uniform(uint64_t index) const { return to_unit(bits(index)[0]); }
  // Standard normal (Box-Muller on two words of the same counter).
  double normal(uint64_t index) const {
    const auto b = bits(index);
    const double u1 = to_unit(b[0]), u2 = to_unit(b[1]);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  static double to_unit(uint32_t x) {
    return (static_cast<double>(x) + 0.5) * (1.0 / 4294967296.0);
  }
  uint64_t seed_, stream_;
};

}  // namespace strata
