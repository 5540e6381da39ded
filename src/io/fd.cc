#include "io/fd.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

namespace strata::io {

namespace {
// Linux transfers at most 0x7ffff000 bytes per read/write call; asking for less keeps the loop
// honest on every platform.
constexpr size_t kMaxChunk = size_t{1} << 30;
}  // namespace

std::string errno_text(int err) {
  return std::generic_category().message(err);
}

void UniqueFd::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, std::min(size, kMaxChunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;  // no progress and no error: treat as an I/O failure, never spin
    p += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

int pread_exact(int fd, void* dst, size_t size, uint64_t offset) {
  char* p = static_cast<char*>(dst);
  while (size > 0) {
    ssize_t n = ::pread(fd, p, std::min(size, kMaxChunk), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return -1;
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return 0;
}

int pwrite_all(int fd, const void* data, size_t size, uint64_t offset) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, p, std::min(size, kMaxChunk), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return ENOSPC;
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return 0;
}

}  // namespace strata::io
