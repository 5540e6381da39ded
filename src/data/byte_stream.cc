#include "data/byte_stream.h"

#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace strata::data {

namespace {

constexpr size_t kInputChunk = size_t{1} << 20;  // compressed bytes read from the file at a time

// The file itself, with stdio's buffering off (we read in large chunks ourselves).
class File {
 public:
  explicit File(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "rb")) {
    if (!f_) fail("cannot open corpus file '", path, "': ", std::strerror(errno));
    std::setvbuf(f_, nullptr, _IONBF, 0);
  }
  ~File() {
    if (f_) std::fclose(f_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  size_t read(void* out, size_t n) {
    const size_t got = std::fread(out, 1, n, f_);
    if (got < n && std::ferror(f_))
      fail("cannot read corpus file '", path_, "' at byte ", bytes_, ": ", std::strerror(errno));
    bytes_ += static_cast<int64_t>(got);
    return got;
  }
  const std::string& path() const { return path_; }
  void seek(int64_t offset) {
    if (::fseeko(f_, static_cast<off_t>(offset), SEEK_SET) != 0)
      fail("cannot seek to byte ", offset, " of corpus file '", path_, "': ", std::strerror(errno));
    bytes_ = offset;
  }

 private:
  std::string path_;
  FILE* f_;
  int64_t bytes_ = 0;
};

class PlainStream final : public ByteStream {
 public:
  PlainStream(const std::string& path, int64_t offset) : file_(path) {
    if (offset > 0) file_.seek(offset);
  }
  size_t read(char* out, size_t capacity) override { return file_.read(out, capacity); }

 private:
  File file_;
};

// gzip, including files of several concatenated members (what `cat a.gz b.gz` and pigz make).
class GzipStream final : public ByteStream {
 public:
  explicit GzipStream(const std::string& path) : file_(path), in_(kInputChunk) {
    std::memset(&z_, 0, sizeof z_);
    // 15 + 32: a zlib or gzip header, detected automatically.
    STRATA_CHECK(inflateInit2(&z_, 15 + 32) == Z_OK, "zlib: inflateInit2 failed for '", path, "'");
  }
  ~GzipStream() override { inflateEnd(&z_); }
  size_t read(char* out, size_t capacity) override {
    z_.next_out = reinterpret_cast<Bytef*>(out);
    z_.avail_out = static_cast<uInt>(std::min<size_t>(capacity, UINT32_MAX));
    while (z_.avail_out > 0 && !done_) {
      if (z_.avail_in == 0) {
        z_.avail_in = static_cast<uInt>(file_.read(in_.data(), in_.size()));
        z_.next_in = reinterpret_cast<Bytef*>(in_.data());
        if (z_.avail_in == 0) {
          // The file ended: fine between members, a truncation inside one.
          STRATA_CHECK(!in_member_, "corpus file '", file_.path(), "' is a truncated gzip stream (",
                       out_total_ + produced(out),
                       " bytes decompressed before it ended); re-download or recompress it");
          done_ = true;
          break;
        }
      }
      in_member_ = true;
      const int rc = inflate(&z_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        in_member_ = false;
        STRATA_CHECK(inflateReset(&z_) == Z_OK, "zlib: inflateReset failed for '", file_.path(),
                     "'");
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        fail("corpus file '", file_.path(),
             "' is not a valid gzip stream (zlib: ", z_.msg ? z_.msg : zError(rc), ", after ",
             out_total_ + produced(out), " decompressed bytes)");
      }
    }
    const size_t n = produced(out);
    out_total_ += static_cast<int64_t>(n);
    return n;
  }

 private:
  size_t produced(const char* out) const {
    return static_cast<size_t>(reinterpret_cast<const char*>(z_.next_out) - out);
  }
  File file_;
  std::vector<char> in_;
  z_stream z_;
  bool in_member_ = false, done_ = false;
  int64_t out_total_ = 0;
};

// zstd, any number of frames.
class ZstdStream final : public ByteStream {
 public:
  explicit ZstdStream(const std::string& path)
      : file_(path), in_(ZSTD_DStreamInSize()), dctx_(ZSTD_createDCtx()) {
    STRATA_CHECK(dctx_ != nullptr, "zstd: cannot create a decompression context for '", path, "'");
  }
  ~ZstdStream() override { ZSTD_freeDCtx(dctx_); }
  size_t read(char* out, size_t capacity) override {
    ZSTD_outBuffer o{out, capacity, 0};
    while (o.pos < o.size && !done_) {
      if (input_.pos == input_.size) {
        input_ = {in_.data(), file_.read(in_.data(), in_.size()), 0};
        if (input_.size == 0) {
          STRATA_CHECK(frame_done_, "corpus file '", file_.path(), "' is a truncated zstd stream (",
                       out_total_ + static_cast<int64_t>(o.pos),
                       " bytes decompressed before it ended); re-download or recompress it");
          done_ = true;
          break;
        }
      }
      const size_t rc = ZSTD_decompressStream(dctx_, &o, &input_);
      if (ZSTD_isError(rc))
        fail("corpus file '", file_.path(),
             "' is not a valid zstd stream (zstd: ", ZSTD_getErrorName(rc), ", after ",
             out_total_ + static_cast<int64_t>(o.pos), " decompressed bytes)");
      frame_done_ = rc == 0;  // 0: a frame is complete and flushed
    }
    out_total_ += static_cast<int64_t>(o.pos);
    return o.pos;
  }

 private:
  File file_;
  std::vector<char> in_;
  ZSTD_DCtx* dctx_;
  ZSTD_inBuffer input_{nullptr, 0, 0};
  bool frame_done_ = true, done_ = false;
  int64_t out_total_ = 0;
};

}  // namespace

Compression sniff_compression(const std::string& path) {
  File f(path);
  unsigned char m[4] = {0, 0, 0, 0};
  const size_t n = f.read(m, sizeof m);
  if (n >= 2 && m[0] == 0x1f && m[1] == 0x8b) return Compression::gzip;
  if (n >= 4 && m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd)
    return Compression::zstd;
  return Compression::none;
}

std::unique_ptr<ByteStream> open_byte_stream(const std::string& path, int64_t offset) {
  const Compression compression = sniff_compression(path);
  STRATA_CHECK(offset == 0 || compression == Compression::none, "corpus file '", path,
               "' is compressed: it can only be read from its start, not from byte ", offset);
  switch (compression) {
    case Compression::gzip:
      return std::make_unique<GzipStream>(path);
    case Compression::zstd:
      return std::make_unique<ZstdStream>(path);
    case Compression::none:
      break;
  }
  return std::make_unique<PlainStream>(path, offset);
}

}  // namespace strata::data
