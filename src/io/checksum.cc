#include "io/checksum.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace strata::io {

namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ull;

// The spec reads input as little-endian words; memcpy keeps unaligned reads defined.
static_assert(std::endian::native == std::endian::little, "xxHash64 here assumes little-endian");
inline uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline uint64_t lane_round(uint64_t acc, uint64_t lane) {
  acc += lane * kP2;
  acc = std::rotl(acc, 31);
  return acc * kP1;
}

inline uint64_t merge(uint64_t acc, uint64_t val) {
  acc ^= lane_round(0, val);
  return acc * kP1 + kP4;
}

}  // namespace

XxHash64::XxHash64(uint64_t seed)
    : seed_(seed), acc_{seed + kP1 + kP2, seed + kP2, seed, seed - kP1}, buf_{} {}

void XxHash64::update(const void* data, size_t size) {
  if (size == 0) return;  // data may be null then, which memcpy must never see
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += size;
  if (buffered_ > 0) {  // complete the pending stripe first
    size_t take = std::min(size, sizeof buf_ - buffered_);
    std::memcpy(buf_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    size -= take;
    if (buffered_ < sizeof buf_) return;
    for (int i = 0; i < 4; ++i) acc_[i] = lane_round(acc_[i], read64(buf_ + 8 * i));
    buffered_ = 0;
  }
  for (; size >= 32; p += 32, size -= 32)
    for (int i = 0; i < 4; ++i) acc_[i] = lane_round(acc_[i], read64(p + 8 * i));
  std::memcpy(buf_, p, size);
  buffered_ = size;
}

uint64_t XxHash64::finish() const {
  uint64_t h;
  if (total_ >= 32) {
    h = std::rotl(acc_[0], 1) + std::rotl(acc_[1], 7) + std::rotl(acc_[2], 12) +
        std::rotl(acc_[3], 18);
    for (int i = 0; i < 4; ++i) h = merge(h, acc_[i]);
  } else {
    h = seed_ + kP5;  // inputs shorter than one stripe never used the accumulators
  }
  h += total_;
  const unsigned char* p = buf_;
  size_t n = buffered_;
  for (; n >= 8; p += 8, n -= 8) h = std::rotl(h ^ lane_round(0, read64(p)), 27) * kP1 + kP4;
  if (n >= 4) {
    h = std::rotl(h ^ (uint64_t{read32(p)} * kP1), 23) * kP2 + kP3;
    p += 4;
    n -= 4;
  }
  for (; n > 0; ++p, --n) h = std::rotl(h ^ (uint64_t{*p} * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

uint64_t xxhash64(std::string_view bytes, uint64_t seed) {
  XxHash64 hash(seed);
  hash.update(bytes);
  return hash.finish();
}

std::string hex64(uint64_t value) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4) out[static_cast<size_t>(i)] = kDigits[value & 15];
  return out;
}

}  // namespace strata::io
