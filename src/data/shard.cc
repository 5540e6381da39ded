#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/error.h"
#include "data/file_util.h"

namespace strata::data {

static_assert(std::endian::native == std::endian::little,
              "shards are little-endian and read by mapping them directly");

void write_shard(const std::string& path, const int32_t* tokens, int64_t count,
                 int64_t vocab_size) {
  STRATA_CHECK(vocab_size > 0 && vocab_size <= (int64_t{1} << 31), "write_shard '", path,
               "': vocab_size ", vocab_size, " out of range");
  STRATA_CHECK(count >= 0 && count <= INT32_MAX, "write_shard '", path, "': ", count,
               " tokens do not fit the header's int32 count; write more, smaller shards");
  const int version = vocab_size <= 65536 ? 1 : 2;
  const size_t width = version == 1 ? 2 : 4;
  std::vector<unsigned char> buf(kShardHeaderBytes + static_cast<size_t>(count) * width, 0);
  const int32_t header[3] = {kShardMagic, version, static_cast<int32_t>(count)};
  std::memcpy(buf.data(), header, sizeof header);
  unsigned char* body = buf.data() + kShardHeaderBytes;
  for (int64_t i = 0; i < count; ++i) {
    const int32_t t = tokens[i];
    STRATA_CHECK(t >= 0 && t < vocab_size, "write_shard '", path, "': token ", i, " is ", t,
                 ", outside the vocabulary [0, ", vocab_size, ")");
    if (version == 1) {
      const auto v = static_cast<uint16_t>(t);
      std::memcpy(body + i * 2, &v, 2);
    } else {
      const auto v = static_cast<uint32_t>(t);
      std::memcpy(body + i * 4, &v, 4);
    }
  }
  write_file_atomic(path, buf.data(), buf.size());
}

Shard::Shard(const std::string& path, int64_t vocab_size) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("cannot open token shard '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot stat token shard '", path, "': ", std::strerror(err));
  }
  const auto file_bytes = static_cast<int64_t>(st.st_size);
  if (file_bytes < kShardHeaderBytes) {
    ::close(fd);
    fail(path, ": file is ", file_bytes, " bytes, shorter than the ", kShardHeaderBytes,
         "-byte shard header (byte offset ", file_bytes, " is the end); the file is truncated or ",
         "not a token shard; re-run the prepare step");
  }
  map_bytes_ = static_cast<size_t>(file_bytes);
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail("cannot map token shard '", path, "': ", std::strerror(err));
  }
  try {
    int32_t header[3];
    std::memcpy(header, map_, sizeof header);
    STRATA_CHECK(header[0] == kShardMagic, path, ": byte offset 0: magic number ", header[0],
                 " is not ", kShardMagic, "; this is not a token shard (a text file or a ",
                 "different format?); produce shards with the prepare step");
    STRATA_CHECK(header[1] == 1 || header[1] == 2, path, ": byte offset 4: version ", header[1],
                 " is not supported (1: uint16 tokens, 2: uint32 tokens); re-run the prepare step");
    version_ = header[1];
    STRATA_CHECK(header[2] >= 0, path, ": byte offset 8: token count ", header[2],
                 " is negative; the header is corrupt; re-run the prepare step");
    count_ = header[2];
    const int64_t width = version_ == 1 ? 2 : 4;
    const int64_t expected = kShardHeaderBytes + count_ * width;
    STRATA_CHECK(file_bytes == expected, path, ": the header (byte offset 8) says ", count_,
                 " tokens, so the file should be ", expected, " bytes, but it is ", file_bytes,
                 file_bytes < expected ? " (truncated: data ends at byte offset "
                                       : " (extra data from byte offset ",
                 std::min(file_bytes, expected), "); re-run the prepare step");
    tokens_ = static_cast<const unsigned char*>(map_) + kShardHeaderBytes;
    // A uint32 token >= 2^31 reads back negative through operator[] (int32) and would pass a
    // `< vocab_size` check; no vocabulary has that many ids (write_shard: vocab_size <= 2^31), so
    // such tokens are refused even when the caller skips the vocabulary check.
    constexpr int64_t kMaxVocab = int64_t{1} << 31;
    const int64_t limit = vocab_size > 0  ? std::min(vocab_size, kMaxVocab)
                          : version_ == 2 ? kMaxVocab
                                          : 0;
    if (limit > 0) {
      const auto token_at = [this](int64_t i) -> int64_t {
        return version_ == 1 ? reinterpret_cast<const uint16_t*>(tokens_)[i]
                             : reinterpret_cast<const uint32_t*>(tokens_)[i];
      };
      // Find the largest token in parallel; only on failure look for the first bad one.
      int64_t max_token = 0;
#pragma omp parallel for reduction(max : max_token)
      for (int64_t i = 0; i < count_; ++i) max_token = std::max<int64_t>(max_token, token_at(i));
      if (max_token >= limit) {
        int64_t i = 0;
        while (token_at(i) < limit) ++i;
        if (vocab_size <= 0 || vocab_size > kMaxVocab)
          fail(path, ": byte offset ", kShardHeaderBytes + i * width, " (token ", i, "): token id ",
               token_at(i), " is >= 2^31, more than any vocabulary; the shard is corrupt: re-run ",
               "the prepare step");
        fail(path, ": byte offset ", kShardHeaderBytes + i * width, " (token ", i, "): token id ",
             token_at(i), " is >= vocab_size ", vocab_size,
             "; the shard was made with a larger tokenizer: re-run the prepare step, or set ",
             "model.vocab_size to at least ", max_token + 1);
      }
    }
  } catch (...) {
    release();
    throw;
  }
}

void Shard::release() {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  tokens_ = nullptr;
}

Shard::~Shard() {
  release();
}

Shard::Shard(Shard&& other) noexcept {
  *this = std::move(other);
}

Shard& Shard::operator=(Shard&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    version_ = other.version_;
    count_ = other.count_;
  }
  return *this;
}

void Shard::copy(int64_t begin, int64_t n, int32_t* out) const {
  // Nothing to copy: `out` may be null (an empty vector's data()), and memcpy's pointers must not
  // be, even for 0 bytes (UBSan, fuzz_shard on an empty version-2 shard).
  if (n <= 0) return;
  if (version_ == 1) {
    const auto* src = reinterpret_cast<const uint16_t*>(tokens_) + begin;
    for (int64_t i = 0; i < n; ++i) out[i] = src[i];
  } else {
    std::memcpy(out, reinterpret_cast<const uint32_t*>(tokens_) + begin,
                static_cast<size_t>(n) * 4);
  }
}

std::vector<int32_t> read_shard(const std::string& path, int64_t vocab_size) {
  const Shard shard(path, vocab_size);
  std::vector<int32_t> tokens(shard.size());
  shard.copy(0, shard.size(), tokens.data());
  return tokens;
}

std::string shard_name(const std::string& split, int64_t index) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%03lld", static_cast<long long>(index));
  return cat(split, "_", digits, ".bin");
}

std::vector<std::string> list_shards(const std::string& dir, const std::string& split) {
  namespace fs = std::filesystem;
  std::vector<std::string> paths;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return paths;
  const std::string prefix = split + "_";
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > prefix.size() + 4 && name.starts_with(prefix) && name.ends_with(".bin") &&
        std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end() - 4,
                    [](char c) { return c >= '0' && c <= '9'; }))
      paths.push_back(entry.path().string());
  }
  // Numeric order: shorter names first, so train_1000.bin follows train_999.bin.
  std::sort(paths.begin(), paths.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  return paths;
}

std::vector<std::string> find_shards(const std::string& dir, const std::string& split) {
  std::error_code ec;
  STRATA_CHECK(std::filesystem::is_directory(dir, ec), "data folder '", dir,
               "' does not exist; run the prepare step (data.source = \"text\") or point "
               "data.dir at prepared shards");
  std::vector<std::string> paths = list_shards(dir, split);
  STRATA_CHECK(!paths.empty(), "no ", split, "_*.bin shards in '", dir, "'; run the prepare ",
               "step (data.source = \"text\") or point data.dir at prepared shards");
  return paths;
}

}  // namespace strata::data
