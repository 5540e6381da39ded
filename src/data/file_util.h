// Small file helpers for the data layer: whole-file reads and atomic writes. (The io layer has
// its own; the data layer keeps these few lines private so it builds on core alone.)
#pragma once
#include <cstddef>
#include <string>

namespace strata::data {

// Reads the whole file; throws strata::Error naming the path and the OS reason.
std::string read_file(const std::string& path);

// Writes `size` bytes to `path` through a temporary file in the same folder and a rename, so a
// reader (or a crash) never sees a half-written file.
void write_file_atomic(const std::string& path, const void* data, size_t size);
inline void write_file_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, text.data(), text.size());
}

// The final path component: "dir/train_000.bin" -> "train_000.bin".
std::string base_name(const std::string& path);

}  // namespace strata::data
