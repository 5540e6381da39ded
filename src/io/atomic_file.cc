#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "io/fd.h"

namespace strata::io {

namespace {

std::string parent_dir(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// Unique within the process (counter) and across processes (pid), so concurrent writers of the
// same target never share a temporary; O_EXCL catches anything left over from a crash.
std::string temp_name(const std::string& path, int attempt) {
  static std::atomic<uint64_t> counter{0};
  std::filesystem::path p(path);
  std::string name =
      cat(".", p.filename().string(), ".tmp-", ::getpid(), "-", counter++, "-", attempt);
  return (p.parent_path() / name).string();
}

}  // namespace

AtomicWriter::AtomicWriter(std::string path) : path_(std::move(path)) {
  STRATA_CHECK(!path_.empty(), "write_file_atomic: empty path");
  for (int attempt = 0; attempt < 16; ++attempt) {
    temp_path_ = temp_name(path_, attempt);
    // 0666 before the umask, like any newly created file; mkstemp would force 0600.
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    if (errno != EEXIST) break;
  }
  const int err = errno;
  fail("cannot write '", path_, "': cannot create a temporary file in '", parent_dir(path_),
       "': ", errno_text(err));
}

AtomicWriter::~AtomicWriter() {
  abandon();
}

void AtomicWriter::abandon() noexcept {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  ::unlink(temp_path_.c_str());
}

void AtomicWriter::write(const void* data, size_t size) {
  STRATA_CHECK(fd_ >= 0, "cannot write '", path_, "': the writer was already committed or failed");
  if (int err = write_all(fd_, data, size)) {
    abandon();
    fail("cannot write '", path_, "': ", errno_text(err), " (after ", written_,
         " bytes; any existing file is unchanged)");
  }
  written_ += size;
}

void AtomicWriter::write_at(size_t offset, const void* data, size_t size) {
  STRATA_CHECK(fd_ >= 0, "cannot write '", path_, "': the writer was already committed or failed");
  STRATA_CHECK(offset + size <= written_, "cannot write '", path_, "': bytes ", offset, "..",
               offset + size, " were not written yet (", written_, " so far)");
  if (int err = pwrite_all(fd_, data, size, offset)) {
    abandon();
    fail("cannot write '", path_, "': ", errno_text(err), " (at byte ", offset,
         "; any existing file is unchanged)");
  }
}

void AtomicWriter::commit() {
  STRATA_CHECK(fd_ >= 0, "cannot write '", path_, "': the writer was already committed or failed");
  // Data must be on disk before the rename makes it visible, or a crash could publish a file of
  // zeros under the final name.
  if (::fsync(fd_) != 0) {
    const int err = errno;
    abandon();
    fail("cannot write '", path_, "': fsync failed: ", errno_text(err));
  }
  // close() can report deferred write errors (NFS, quotas), so its result counts too.
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp_path_.c_str());
    fail("cannot write '", path_, "': close failed: ", errno_text(err));
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_path_.c_str());
    fail("cannot write '", path_, "': rename from '", temp_path_, "' failed: ", errno_text(err));
  }
  fsync_dir(parent_dir(path_));
}

void write_file_atomic(const std::string& path, const void* data, size_t size) {
  AtomicWriter writer(path);
  writer.write(data, size);
  writer.commit();
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, bytes.data(), bytes.size());
}

std::string read_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    fail("cannot read '", path, "': ", errno_text(err));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    const int err = errno;
    fail("cannot read '", path, "': ", errno_text(err));
  }
  STRATA_CHECK(!S_ISDIR(st.st_mode), "cannot read '", path, "': it is a directory");
  std::string out;
  // Sized from fstat for the common case, but read until EOF: /proc files and pipes report 0.
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      fail("cannot read '", path, "': ", errno_text(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

void fsync_dir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    fail("cannot sync directory '", dir, "': ", errno_text(err));
  }
  // Some filesystems (certain FUSE and network mounts) cannot fsync a directory and say EINVAL;
  // there is nothing more durable to ask of them, so that is not an error.
  if (::fsync(fd.get()) != 0 && errno != EINVAL) {
    const int err = errno;
    fail("cannot sync directory '", dir, "': ", errno_text(err));
  }
}

void make_dirs(const std::string& dir) {
  STRATA_CHECK(!dir.empty(), "make_dirs: empty path");
  std::error_code ec;
  // Checked first because create_directories reports this case as a bare "Not a directory".
  STRATA_CHECK(!std::filesystem::exists(dir, ec) || std::filesystem::is_directory(dir, ec),
               "cannot create directory '", dir, "': a file of that name exists");
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("cannot create directory '", dir, "': ", ec.message());
}

}  // namespace strata::io
