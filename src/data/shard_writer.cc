#include "data/shard_writer.h"

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "data/shard.h"
#include "io/atomic_file.h"
#include "io/checksum.h"

namespace strata::data {

namespace {
constexpr size_t kBufferTokens = size_t{1} << 20;  // tokens converted per write
}  // namespace

ShardWriter::ShardWriter(std::string dir, std::string split, int64_t vocab_size, int64_t max_tokens,
                         int64_t first_index)
    : dir_(std::move(dir)),
      split_(std::move(split)),
      vocab_size_(vocab_size),
      max_tokens_(max_tokens),
      first_index_(first_index),
      width_(vocab_size <= 65536 ? 2 : 4) {
  STRATA_CHECK(vocab_size > 0 && vocab_size <= (int64_t{1} << 31), "ShardWriter '", split_,
               "': vocab_size ", vocab_size, " out of range");
  STRATA_CHECK(max_tokens > 0 && max_tokens <= INT32_MAX, "ShardWriter '", split_, "': max_tokens ",
               max_tokens, " must be in [1, 2^31)");
  buf_.reserve(kBufferTokens * static_cast<size_t>(width_));
}

ShardWriter::~ShardWriter() = default;  // an unfinished shard's temporary file is removed

void ShardWriter::open_shard() {
  const std::string name = shard_name(split_, first_index_ + static_cast<int64_t>(done_.size()));
  out_ = std::make_unique<io::AtomicWriter>((std::filesystem::path(dir_) / name).string());
  hash_ = std::make_unique<io::Xxh3Hash>();
  const std::vector<unsigned char> header(kShardHeaderBytes, 0);  // the count comes at close
  out_->write(header.data(), header.size());
  in_shard_ = 0;
}

void ShardWriter::close_shard() {
  if (!buf_.empty()) {
    out_->write(buf_.data(), buf_.size());
    hash_->update(buf_.data(), buf_.size());
    buf_.clear();
  }
  const int32_t header[3] = {kShardMagic, width_ == 2 ? 1 : 2, static_cast<int32_t>(in_shard_)};
  out_->write_at(0, header, sizeof header);
  const std::string file = std::filesystem::path(out_->path()).filename().string();
  out_->commit();
  done_.push_back({file, in_shard_, hash_->finish()});
  out_.reset();
  hash_.reset();
}

void ShardWriter::append(const int32_t* tokens, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const int32_t t = tokens[i];
    STRATA_CHECK(t >= 0 && t < vocab_size_, "ShardWriter '", split_, "': token ", total_, " is ", t,
                 ", outside the vocabulary [0, ", vocab_size_, ")");
    if (!out_) open_shard();
    unsigned char bytes[4];
    const auto v = static_cast<uint32_t>(t);
    std::memcpy(bytes, &v, 4);  // little-endian (shard.cc asserts the host is)
    buf_.insert(buf_.end(), bytes, bytes + width_);
    ++in_shard_;
    ++total_;
    if (buf_.size() >= kBufferTokens * static_cast<size_t>(width_)) {
      out_->write(buf_.data(), buf_.size());
      hash_->update(buf_.data(), buf_.size());
      buf_.clear();
    }
    if (in_shard_ == max_tokens_) close_shard();
  }
}

std::vector<ShardEntry> ShardWriter::finish(bool remove_others) {
  if (out_) close_shard();
  if (!remove_others) return done_;
  // A loader without a manifest globs <split>_*.bin, so shards of a larger earlier run must go.
  for (const std::string& path : list_shards(dir_, split_)) {
    const std::string name = std::filesystem::path(path).filename().string();
    bool ours = false;
    for (const ShardEntry& e : done_) ours = ours || e.file == name;
    if (!ours) std::filesystem::remove(path);
  }
  return done_;
}

}  // namespace strata::data
