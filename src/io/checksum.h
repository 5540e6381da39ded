// xxHash64 (https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md): a fast 64-bit
// non-cryptographic checksum for detecting corrupt or truncated files, not for security.
// Streaming, so multi-GB checkpoints are hashed as they are written or read.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::io {

class XxHash64 {
 public:
  explicit XxHash64(uint64_t seed = 0);
  void update(const void* data, size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // The digest of everything so far; the state is unchanged, so more updates may follow.
  uint64_t finish() const;

 private:
  uint64_t seed_;
  uint64_t acc_[4];
  uint64_t total_ = 0;
  unsigned char buf_[32];  // a partial 32-byte stripe
  size_t buffered_ = 0;
};

// One-shot form. There is deliberately no (pointer, size, seed = 0) overload: with one,
// xxhash64("abc", seed) would silently pick it and read `seed` bytes. Binary buffers go through
// XxHash64::update.
uint64_t xxhash64(std::string_view bytes, uint64_t seed = 0);

// 16 lowercase hex digits, most significant first (the form xxhsum prints).
std::string hex64(uint64_t value);

}  // namespace strata::io
