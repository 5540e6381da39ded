// POSIX file-descriptor plumbing shared by the io layer: an owning fd, loops that finish short
// reads and writes (the kernel may return fewer bytes than asked, and at most ~2 GiB per call),
// and errno as text for messages.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace strata::io {

std::string errno_text(int err);

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset() noexcept;

 private:
  int fd_ = -1;
};

// Writes all `size` bytes; returns 0 or the errno of the failing write.
int write_all(int fd, const void* data, size_t size);

// Reads exactly `size` bytes at `offset`; returns 0, the errno of a failing read, or -1 when the
// file ends first.
int pread_exact(int fd, void* dst, size_t size, uint64_t offset);

// Writes all `size` bytes at `offset`; returns 0 or the errno of the failing write (a write that
// makes no progress counts as ENOSPC, which is what it means on a full disk).
int pwrite_all(int fd, const void* data, size_t size, uint64_t offset);

}  // namespace strata::io
