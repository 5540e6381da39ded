// What the prepare's stages know of every document, kept on disk and streamed (prepare_stages.h):
// a unit's documents as its scan judged them, one fixed-size row each in document order, read
// back in that order by the plan and the encode stage; and the plan's duplicates of a unit. So the
// stages' memory does not grow with the unit or the corpus.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>

#include "data/dedup.h"
#include "data/filters.h"
#include "io/atomic_file.h"

namespace strata::data {

// Fixed-size records appended through a buffer; commit() makes the file appear whole, or not at
// all (io::AtomicWriter).
class StreamWriter {
 public:
  explicit StreamWriter(const std::string& path) : out_(path) {}
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put_bytes(&v, sizeof v);
  }
  void put_bytes(const void* data, size_t size);
  void commit();

 private:
  io::AtomicWriter out_;
  std::string buffer_;
};

// Reads a StreamWriter's file back in order.
class StreamReader {
 public:
  explicit StreamReader(const std::string& path);
  ~StreamReader();
  StreamReader(const StreamReader&) = delete;
  StreamReader& operator=(const StreamReader&) = delete;
  // Reads `size` bytes; false at the end of the file, an error in the middle of a record.
  bool read(void* data, size_t size);
  template <class T>
  bool get(T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    return read(&v, sizeof v);
  }
  void skip(size_t size);

 private:
  std::string path_;
  FILE* file_;
};

struct DocRow {
  int64_t bytes = 0;  // every document's size
  // The documents the filters kept:
  double draw = 0;  // split_draw
  double hash = 0;  // sample_hash (when a tokenizer is trained)
  DocKey key;       // --dedup exact or minhash
  Verdict verdict = Verdict::kept;
  uint8_t has_bands = 0;    // --dedup minhash: 0 for a document without words
  uint8_t padding[6] = {};  // written as zeros, not as whatever the stack held
};

// Rows, each kept document's followed by its `bands` band keys (--dedup minhash; 0s when it has
// none).
class DocRowWriter {
 public:
  DocRowWriter(const std::string& path, int bands) : out_(path), bands_(size_t(bands)) {}
  void add(const DocRow& row, const uint64_t* band_keys);
  void commit() { out_.commit(); }

 private:
  StreamWriter out_;
  size_t bands_;
};

class DocRowReader {
 public:
  DocRowReader(const std::string& path, int bands) : in_(path), bands_(size_t(bands)) {}
  // The next row (and, for a kept document with bands, its band keys into band_keys, which may be
  // null to skip them); false at the end.
  bool next(DocRow& row, uint64_t* band_keys = nullptr);

 private:
  StreamReader in_;
  size_t bands_;
};

}  // namespace strata::data
