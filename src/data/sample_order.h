// The order in which a loader visits samples: a pseudo-random permutation of [0, n) that is a
// pure function of (seed, epoch, n). It is a Feistel network on the smallest power of four
// >= n with cycle-walking (values >= n are fed through again), so any index's sample is computed
// in O(1) with no table and no dependence on the standard library's shuffle or distributions:
// every build, machine and world size sees the same order.
#pragma once
#include <cstdint>

namespace strata::data {

class SampleOrder {
 public:
  SampleOrder() = default;
  SampleOrder(uint64_t seed, uint64_t epoch, uint64_t n, bool shuffle);
  uint64_t operator()(uint64_t i) const;  // the sample visited i-th, i in [0, n)

 private:
  uint64_t round_key(int round) const;
  uint64_t n_ = 0;
  bool shuffle_ = false;
  int half_bits_ = 1;
  uint64_t key_ = 0;
};

// splitmix64's finalizer: a fast, well-mixed 64-bit hash.
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace strata::data
