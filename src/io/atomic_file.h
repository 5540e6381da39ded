// Crash-safe file writes: a reader (or a resumed run) sees either the old file or the complete new
// one, never a torn mix. The bytes go to a temporary file in the target's directory (rename is
// only atomic within one filesystem), which is fsynced, renamed over the target, and then the
// directory is fsynced so that the rename itself survives a power loss.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace strata::io {

// Streams bytes into a temporary sibling of `path`; commit() publishes them. A writer destroyed
// without commit() (an exception, a failed write) removes the temporary and leaves any existing
// file at `path` untouched. Used directly for payloads too large to build in memory first.
class AtomicWriter {
 public:
  explicit AtomicWriter(std::string path);
  ~AtomicWriter();
  AtomicWriter(const AtomicWriter&) = delete;
  AtomicWriter& operator=(const AtomicWriter&) = delete;

  void write(const void* data, size_t size);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // Overwrites bytes already written (a header whose counts are known only at the end).
  void write_at(size_t offset, const void* data, size_t size);
  // fsync, rename over the target, fsync the directory. The writer is finished afterwards.
  void commit();

  const std::string& path() const { return path_; }
  size_t bytes_written() const { return written_; }

 private:
  void abandon() noexcept;

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  size_t written_ = 0;
};

void write_file_atomic(const std::string& path, std::string_view bytes);
void write_file_atomic(const std::string& path, const void* data, size_t size);

// The whole file; a missing or unreadable file is an error naming the path and the reason.
std::string read_file(const std::string& path);

// Makes a rename or a newly created entry in `dir` durable.
void fsync_dir(const std::string& dir);

// mkdir -p: creates `dir` and any missing parents; existing directories are fine.
void make_dirs(const std::string& dir);

}  // namespace strata::io
