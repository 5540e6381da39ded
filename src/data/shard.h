// Token shards: the tokenized corpus on disk, in llm.c's format so its tools read them too.
//
//   bytes 0..1023   header: 256 little-endian int32
//                     [0] = 20240520 (magic)
//                     [1] = version: 1 = tokens are uint16, 2 = tokens are uint32
//                     [2] = number of tokens N
//                     [3..255] = 0
//   bytes 1024..    N tokens, little-endian, 2 bytes each (version 1) or 4 (version 2)
//
// A prepared data folder holds train_000.bin, train_001.bin, ... and val_000.bin, ...; the
// loader reads the shards of a split as one concatenated token stream.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::data {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int64_t kShardHeaderBytes = 256 * 4;

// Writes tokens (each in [0, vocab_size)) atomically, as version 1 when vocab_size <= 65536
// and version 2 otherwise.
void write_shard(const std::string& path, const int32_t* tokens, int64_t count, int64_t vocab_size);
inline void write_shard(const std::string& path, const std::vector<int32_t>& tokens,
                        int64_t vocab_size) {
  write_shard(path, tokens.data(), static_cast<int64_t>(tokens.size()), vocab_size);
}

// A read-only, memory-mapped shard, validated when opened: magic, version, file size against
// the header's count, and every token < vocab_size (when vocab_size <= 0: only < 2^31, so that
// operator[] never returns a negative id). A problem
// throws strata::Error naming the file, the byte offset, the value and what to do.
class Shard {
 public:
  Shard(const std::string& path, int64_t vocab_size);
  ~Shard();
  Shard(Shard&& other) noexcept;
  Shard& operator=(Shard&& other) noexcept;
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  const std::string& path() const { return path_; }
  int version() const { return version_; }
  int64_t size() const { return count_; }  // tokens
  int32_t operator[](int64_t i) const {
    return version_ == 1 ? reinterpret_cast<const uint16_t*>(tokens_)[i]
                         : static_cast<int32_t>(reinterpret_cast<const uint32_t*>(tokens_)[i]);
  }
  // The token bytes as stored after the header (little-endian, 2 or 4 bytes each).
  const unsigned char* bytes() const { return tokens_; }
  int64_t byte_size() const { return count_ * (version_ == 1 ? 2 : 4); }
  // Copies tokens [begin, begin + n) as int32.
  void copy(int64_t begin, int64_t n, int32_t* out) const;

 private:
  void release();

  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;
  int version_ = 0;
  int64_t count_ = 0;
};

// Reads a whole shard (tests and tools).
std::vector<int32_t> read_shard(const std::string& path, int64_t vocab_size);

// The shards of one split ("train", "val") in dir, in numeric order: dir/<split>_000.bin, ...
// list_shards returns none when there are none (or no dir); find_shards throws, with a hint to run
// the prepare step.
std::vector<std::string> list_shards(const std::string& dir, const std::string& split);
std::vector<std::string> find_shards(const std::string& dir, const std::string& split);

// The name of shard `index` of a split: shard_name("train", 3) == "train_003.bin".
std::string shard_name(const std::string& split, int64_t index);

}  // namespace strata::data
