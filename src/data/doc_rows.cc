#include "data/doc_rows.h"

#include <vector>

#include "core/error.h"

namespace strata::data {

static_assert(std::is_trivially_copyable_v<DocRow>);

namespace {
constexpr size_t kBufferBytes = size_t{1} << 20;
}

void StreamWriter::put_bytes(const void* data, size_t size) {
  buffer_.append(static_cast<const char*>(data), size);
  if (buffer_.size() >= kBufferBytes) {
    out_.write(buffer_);
    buffer_.clear();
  }
}

void StreamWriter::commit() {
  out_.write(buffer_);
  buffer_.clear();
  out_.commit();
}

StreamReader::StreamReader(const std::string& path)
    : path_(path), file_(std::fopen(path.c_str(), "rb")) {
  STRATA_CHECK(file_ != nullptr, "prepare: cannot open '", path_,
               "'; remove the folder's .prepare subfolder and run again");
  std::setvbuf(file_, nullptr, _IOFBF, kBufferBytes);
}

StreamReader::~StreamReader() {
  std::fclose(file_);
}

bool StreamReader::read(void* data, size_t size) {
  const size_t got = std::fread(data, 1, size, file_);
  if (got == 0 && std::feof(file_)) return false;
  STRATA_CHECK(got == size, "prepare: '", path_,
               "' is truncated; remove the folder's .prepare subfolder and run again");
  return true;
}

void StreamReader::skip(size_t size) {
  STRATA_CHECK(std::fseek(file_, static_cast<long>(size), SEEK_CUR) == 0,
               "prepare: cannot seek in '", path_, "'");
}

void DocRowWriter::add(const DocRow& row, const uint64_t* band_keys) {
  out_.put(row);
  if (row.verdict != Verdict::kept || bands_ == 0) return;
  if (band_keys != nullptr) {
    out_.put_bytes(band_keys, bands_ * sizeof(uint64_t));
  } else {
    static const std::vector<uint64_t> zeros(64, 0);
    for (size_t left = bands_; left > 0;) {
      const size_t n = std::min(left, zeros.size());
      out_.put_bytes(zeros.data(), n * sizeof(uint64_t));
      left -= n;
    }
  }
}

bool DocRowReader::next(DocRow& row, uint64_t* band_keys) {
  if (!in_.get(row)) return false;
  if (row.verdict != Verdict::kept || bands_ == 0) return true;
  if (band_keys == nullptr)
    in_.skip(bands_ * sizeof(uint64_t));
  else
    STRATA_CHECK(in_.read(band_keys, bands_ * sizeof(uint64_t)),
                 "prepare: a docs file ends inside a row");
  return true;
}

}  // namespace strata::data
