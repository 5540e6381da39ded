// ByteStream: the bytes of one corpus file, read front to back in chunks, decompressed on the fly
// when the file is gzip (zlib) or zstd (libzstd), so a corpus of any size streams through a
// buffer of fixed size. The compression is told by the file's first bytes (gzip 1f 8b, zstd
// 28 b5 2f fd), not only its name, so a misnamed file still reads.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace strata::data {

enum class Compression { none, gzip, zstd };

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Up to `capacity` bytes into `out`; 0 at the end of the data. A truncated or corrupt
  // compressed stream throws strata::Error naming the file and the uncompressed offset reached.
  virtual size_t read(char* out, size_t capacity) = 0;
};

// Opens `path`; throws naming the path and the OS reason when it cannot be read. A non-zero
// `offset` starts there (an uncompressed file only: a compressed stream cannot be entered midway).
std::unique_ptr<ByteStream> open_byte_stream(const std::string& path, int64_t offset = 0);

// What the file's first bytes say (none for a file shorter than a magic number).
Compression sniff_compression(const std::string& path);

}  // namespace strata::data
