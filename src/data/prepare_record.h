// The binary records a prepare's stages leave in its work folder (prepare_work.h): flat fields and
// vectors of trivially copyable values, written and read by the same build on machines of one
// byte order (the work folder is scratch, never an interchange format). A record opens with a
// magic number and a format version, so a folder left by another version reads as stale, not as
// garbage.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/error.h"

namespace strata::data {

inline constexpr uint64_t kPrepareRecordMagic = 0x3230445250525453ull;  // "STRPRD02"

class RecordWriter {
 public:
  RecordWriter() { put(kPrepareRecordMagic); }
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  template <class T>
  void put_vector(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<uint64_t>(v.size());
    if (!v.empty()) bytes_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    bytes_.append(s);
  }
  void put_strings(const std::vector<std::string>& v) {
    put<uint64_t>(v.size());
    for (const std::string& s : v) put_string(s);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

class RecordReader {
 public:
  // `bytes` is a whole record read from `path` (named in errors).
  RecordReader(std::string bytes, std::string path)
      : bytes_(std::move(bytes)), path_(std::move(path)) {
    STRATA_CHECK(get<uint64_t>() == kPrepareRecordMagic, "prepare: '", path_,
                 "' is not a record of this version of strata; remove the folder's .prepare "
                 "subfolder and run the prepare again");
  }
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  template <class T>
  std::vector<T> get_vector() {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto n = get<uint64_t>();
    STRATA_CHECK(n <= (bytes_.size() - pos_) / sizeof(T), "prepare: record '", path_,
                 "' is truncated; remove the folder's .prepare subfolder and run again");
    std::vector<T> v(n);
    if (n > 0) std::memcpy(v.data(), take(n * sizeof(T)), n * sizeof(T));
    return v;
  }
  std::string get_string() {
    const auto n = get<uint64_t>();
    return std::string(take(n), n);
  }
  std::vector<std::string> get_strings() {
    std::vector<std::string> v(get<uint64_t>());
    for (std::string& s : v) s = get_string();
    return v;
  }
  bool at_end() const { return pos_ == bytes_.size(); }

 private:
  const char* take(size_t n) {
    STRATA_CHECK(n <= bytes_.size() - pos_, "prepare: record '", path_,
                 "' is truncated; remove the folder's .prepare subfolder and run again");
    const char* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  std::string bytes_, path_;
  size_t pos_ = 0;
};

}  // namespace strata::data
