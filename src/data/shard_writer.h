// ShardWriter: writes one split's token shards (shard.h's format) as the tokens stream in, so a
// prepare never holds a split in memory. Tokens go to <split>_NNN.bin through a crash-safe writer
// (a temporary file renamed into place once complete), each shard at most max_tokens long; the
// header's token count is written when the shard closes. Each shard's XXH3 (of its token bytes,
// after the header) is computed on the way and recorded in the manifest (manifest.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/manifest.h"

namespace strata::io {
class AtomicWriter;
class Xxh3Hash;
}  // namespace strata::io

namespace strata::data {

class ShardWriter {
 public:
  // The first shard written is <split>_<first_index>.bin (a prepare's workers write a split's
  // shards apart).
  ShardWriter(std::string dir, std::string split, int64_t vocab_size, int64_t max_tokens,
              int64_t first_index = 0);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Each token must be in [0, vocab_size).
  void append(const int32_t* tokens, int64_t count);
  // Closes the last shard, removes any other <split>_*.bin an earlier run left (unless told not
  // to: other writers' shards), and returns the shards written (none when no token came: a split
  // without tokens has no shards).
  std::vector<ShardEntry> finish(bool remove_others = true);
  int64_t tokens() const { return total_; }

 private:
  void open_shard();
  void close_shard();

  std::string dir_, split_;
  int64_t vocab_size_, max_tokens_, first_index_;
  int width_;  // bytes per token: 2 (version 1) or 4 (version 2)
  std::unique_ptr<io::AtomicWriter> out_;
  std::unique_ptr<io::Xxh3Hash> hash_;
  std::vector<unsigned char> buf_;  // tokens of the open shard not yet written
  int64_t in_shard_ = 0, total_ = 0;
  std::vector<ShardEntry> done_;
};

}  // namespace strata::data
