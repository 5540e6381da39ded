// Fast 64-bit non-cryptographic checksums for detecting corrupt or truncated files, not for
// security, from libxxhash (Debian libxxhash-dev; https://github.com/Cyan4973/xxHash):
//   XXH64  (XxHash64) the digest every checkpoint before format v3 records, the registry's file
//          manifests and the form `xxhsum` prints by default;
//   XXH3   (Xxh3Hash) the 64-bit XXH3 digest new checkpoints record for their slices, about 3x
//          XXH64's speed from cache on AVX2 (the library chooses SSE2/AVX2/AVX-512 at run time).
// Both stream, so multi-GB checkpoints are hashed as they are written or read.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

struct XXH64_state_s;
struct XXH3_state_s;

namespace strata::io {

class XxHash64 {
 public:
  explicit XxHash64(uint64_t seed = 0);
  // Copies continue independently from the same point; a moved-from hash may only be assigned
  // to or destroyed.
  XxHash64(const XxHash64& other);
  XxHash64& operator=(const XxHash64& other);
  XxHash64(XxHash64&&) noexcept = default;
  XxHash64& operator=(XxHash64&&) noexcept = default;
  ~XxHash64() = default;

  void update(const void* data, size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // The digest of everything so far; the state is unchanged, so more updates may follow.
  uint64_t finish() const;

 private:
  struct Free {
    void operator()(XXH64_state_s* s) const;
  };
  std::unique_ptr<XXH64_state_s, Free> state_;
};

// XXH3 64-bit (seed 0, the default secret), with XxHash64's interface.
class Xxh3Hash {
 public:
  Xxh3Hash();
  Xxh3Hash(const Xxh3Hash& other);
  Xxh3Hash& operator=(const Xxh3Hash& other);
  Xxh3Hash(Xxh3Hash&&) noexcept = default;
  Xxh3Hash& operator=(Xxh3Hash&&) noexcept = default;
  ~Xxh3Hash() = default;

  void update(const void* data, size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  uint64_t finish() const;

 private:
  struct Free {
    void operator()(XXH3_state_s* s) const;
  };
  std::unique_ptr<XXH3_state_s, Free> state_;
};

// One-shot forms. There is deliberately no (pointer, size, seed = 0) overload: with one,
// xxhash64("abc", seed) would silently pick it and read `seed` bytes. Binary buffers go through
// XxHash64::update or checksum() below.
uint64_t xxhash64(std::string_view bytes, uint64_t seed = 0);
uint64_t xxh3_64(std::string_view bytes);

// The algorithm a recorded digest was made with. Its name is also the JSON key the digest is
// stored under ("xxh64": "<hex>", "xxh3": "<hex>").
enum class Checksum { xxh64, xxh3 };
const char* checksum_name(Checksum algorithm);
uint64_t checksum(Checksum algorithm, const void* data, size_t size);

// The digest a JSON object records under one of those keys: {"xxh3": "<hex>"} (checkpoint
// format v3) or {"xxh64": "<hex>"} (format v2, which knew no other). Throws naming the object
// when it has neither key, both, or a value that is not 16 hex digits.
struct RecordedChecksum {
  Checksum algorithm;
  uint64_t value;
};
RecordedChecksum recorded_checksum(const nlohmann::json& object);

// 16 lowercase hex digits, most significant first (the form xxhsum prints).
std::string hex64(uint64_t value);

}  // namespace strata::io
