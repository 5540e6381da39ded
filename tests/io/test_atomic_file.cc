#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <filesystem>

#include "io/atomic_file.h"
#include "io/temp_dir.h"

namespace strata::io {

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Caps the size of any file this process writes, so that a write fails part-way with EFBIG just
// as it would on a full disk (and works as root, unlike a read-only directory). SIGXFSZ would
// otherwise kill the process, so it is ignored while the cap holds.
class FileSizeCap {
 public:
  explicit FileSizeCap(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit cap = saved_;
    cap.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &cap);
  }
  ~FileSizeCap() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_{};
  void (*old_handler_)(int) = nullptr;
};

}  // namespace

TEST(AtomicFile, WritesAndReadsBack) {
  TempDir dir;
  const std::string path = dir.file("a.bin");
  std::string bytes = "hello";
  bytes.push_back('\0');
  bytes += "world";
  write_file_atomic(path, bytes);
  EXPECT_EQ(read_file(path), bytes);
  EXPECT_EQ(dir.entry_count(), 1u);  // no temporary left behind
}

TEST(AtomicFile, OverwritesExistingFile) {
  TempDir dir;
  const std::string path = dir.file("a.txt");
  write_file_atomic(path, std::string("old contents"));
  write_file_atomic(path, std::string("new"));
  EXPECT_EQ(read_file(path), "new");
  EXPECT_EQ(dir.entry_count(), 1u);
}

TEST(AtomicFile, WritesEmptyAndLargeFiles) {
  TempDir dir;
  write_file_atomic(dir.file("empty"), std::string());
  EXPECT_EQ(read_file(dir.file("empty")), "");
  std::string big(3 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4093) big[i] = static_cast<char>(i);
  write_file_atomic(dir.file("big"), big.data(), big.size());
  EXPECT_EQ(read_file(dir.file("big")), big);
}

TEST(AtomicFile, NewFileGetsUmaskPermissionsNotMkstemps) {
  TempDir dir;
  const mode_t old_mask = ::umask(022);
  write_file_atomic(dir.file("f"), std::string("x"));
  ::umask(old_mask);
  struct stat st {};
  ASSERT_EQ(::stat(dir.file("f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST(AtomicFile, MissingDirectoryIsAnErrorNamingThePath) {
  TempDir dir;
  const std::string path = dir.file("no/such/dir/file.bin");
  const std::string msg = error_of([&] { write_file_atomic(path, std::string("x")); });
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "No such file or directory")) << msg;
  EXPECT_EQ(dir.entry_count(), 0u);
}

TEST(AtomicFile, FailedWriteLeavesOldFileIntactAndNoTemporary) {
  TempDir dir;
  const std::string path = dir.file("ckpt.bin");
  write_file_atomic(path, std::string("precious"));
  std::string msg;
  {
    FileSizeCap cap(4096);
    std::string big(1 << 20, 'y');
    msg = error_of([&] { write_file_atomic(path, big); });
  }
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "too large")) << msg;  // EFBIG's text: "File too large"
  EXPECT_EQ(read_file(path), "precious");
  EXPECT_EQ(dir.entry_count(), 1u);
}

TEST(AtomicFile, FailedRenameLeavesTargetAndNoTemporary) {
  TempDir dir;
  // A non-empty directory cannot be replaced by a file: the rename step fails.
  const std::string target = dir.file("target");
  make_dirs(target + "/inside");
  const std::string msg = error_of([&] { write_file_atomic(target, std::string("x")); });
  EXPECT_TRUE(contains(msg, target)) << msg;
  EXPECT_TRUE(std::filesystem::is_directory(target + "/inside"));
  EXPECT_EQ(dir.entry_count(), 1u);
}

TEST(AtomicFile, WriterWithoutCommitPublishesNothing) {
  TempDir dir;
  const std::string path = dir.file("partial");
  write_file_atomic(path, std::string("old"));
  {
    AtomicWriter w(path);
    w.write(std::string_view("half of the new"));
    EXPECT_EQ(w.bytes_written(), 15u);
  }  // e.g. an exception unwound past it
  EXPECT_EQ(read_file(path), "old");
  EXPECT_EQ(dir.entry_count(), 1u);
}

TEST(AtomicFile, StreamingWriterCommits) {
  TempDir dir;
  AtomicWriter w(dir.file("s"));
  w.write(std::string_view("ab"));
  w.write("cd", 2);
  w.commit();
  EXPECT_EQ(read_file(dir.file("s")), "abcd");
  EXPECT_FALSE(error_of([&] { w.write("x", 1); }).empty());  // finished writers refuse more
}

TEST(AtomicFile, ReadMissingFileNamesIt) {
  TempDir dir;
  const std::string path = dir.file("missing.txt");
  const std::string msg = error_of([&] { read_file(path); });
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "No such file or directory")) << msg;
}

TEST(AtomicFile, ReadDirectoryIsAnError) {
  TempDir dir;
  EXPECT_TRUE(contains(error_of([&] { read_file(dir.path()); }), "directory"));
}

TEST(AtomicFile, MakeDirsIsRecursiveAndIdempotent) {
  TempDir dir;
  const std::string deep = dir.file("a/b/c");
  make_dirs(deep);
  make_dirs(deep);
  EXPECT_TRUE(std::filesystem::is_directory(deep));
  fsync_dir(deep);
}

TEST(AtomicFile, MakeDirsThroughAFileNamesThePath) {
  TempDir dir;
  write_file_atomic(dir.file("plain"), std::string("x"));
  const std::string msg = error_of([&] { make_dirs(dir.file("plain/sub")); });
  EXPECT_TRUE(contains(msg, dir.file("plain/sub"))) << msg;
  const std::string msg2 = error_of([&] { make_dirs(dir.file("plain")); });
  EXPECT_TRUE(contains(msg2, "a file of that name exists")) << msg2;
}

TEST(AtomicFile, FsyncMissingDirNamesIt) {
  TempDir dir;
  const std::string msg = error_of([&] { fsync_dir(dir.file("nope")); });
  EXPECT_TRUE(contains(msg, dir.file("nope"))) << msg;
}

}  // namespace strata::io
