#include "data/sample_order.h"

namespace strata::data {

namespace {
constexpr int kRounds = 6;
}

SampleOrder::SampleOrder(uint64_t seed, uint64_t epoch, uint64_t n, bool shuffle)
    : n_(n), shuffle_(shuffle), key_(mix64(mix64(seed ^ 0x5EEDDA7A0ull) + epoch)) {
  while ((uint64_t{1} << (2 * half_bits_)) < n_) ++half_bits_;
}

uint64_t SampleOrder::round_key(int round) const {
  return mix64(key_ + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(round + 1));
}

uint64_t SampleOrder::operator()(uint64_t i) const {
  if (!shuffle_) return i;
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  uint64_t x = i;
  do {  // cycle-walk: the domain is < 4n, so this repeats fewer than 4 times on average
    uint64_t left = x >> half_bits_, right = x & mask;
    for (int r = 0; r < kRounds; ++r) {
      const uint64_t f = mix64(right ^ round_key(r)) & mask;
      const uint64_t next_right = left ^ f;
      left = right;
      right = next_right;
    }
    x = (left << half_bits_) | right;
  } while (x >= n_);
  return x;
}

}  // namespace strata::data
