#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "data/file_util.h"
#include "data/shard.h"
#include "test_util.h"

namespace strata::data {
namespace {

using testing::TempDir;

std::vector<int32_t> ramp(int64_t n, int64_t modulo) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7919) % modulo);
  return t;
}

TEST(Shard, RoundTripVersion1) {
  TempDir dir;
  const auto tokens = ramp(10000, 65536);
  write_shard(dir.file("a.bin"), tokens, 65536);
  const Shard shard(dir.file("a.bin"), 65536);
  EXPECT_EQ(shard.version(), 1);
  EXPECT_EQ(shard.size(), 10000);
  EXPECT_EQ(read_shard(dir.file("a.bin"), 65536), tokens);
  EXPECT_EQ(std::filesystem::file_size(dir.file("a.bin")), 1024u + 2 * 10000);
}

TEST(Shard, RoundTripVersion2) {
  TempDir dir;
  const auto tokens = ramp(5000, 200000);
  write_shard(dir.file("b.bin"), tokens, 200000);
  const Shard shard(dir.file("b.bin"), 200000);
  EXPECT_EQ(shard.version(), 2);
  EXPECT_EQ(read_shard(dir.file("b.bin"), 200000), tokens);
  EXPECT_EQ(std::filesystem::file_size(dir.file("b.bin")), 1024u + 4 * 5000);
  int32_t part[3];
  shard.copy(10, 3, part);
  EXPECT_EQ(part[2], tokens[12]);
}

TEST(Shard, HeaderIsLlmcFormat) {
  TempDir dir;
  write_shard(dir.file("c.bin"), {1, 2, 3}, 100);
  const std::string bytes = read_file(dir.file("c.bin"));
  int32_t header[256];
  std::memcpy(header, bytes.data(), sizeof header);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 3);
  for (int i = 3; i < 256; ++i) EXPECT_EQ(header[i], 0);
}

TEST(Shard, EmptyShardIsValid) {
  TempDir dir;
  write_shard(dir.file("e.bin"), std::vector<int32_t>{}, 100);
  EXPECT_EQ(Shard(dir.file("e.bin"), 100).size(), 0);
  // Version 2 copies with memcpy, which must not see the null data() of an empty vector (found by
  // fuzzing under UBSan: tests/fuzz/shard/regress-empty-v2-copy).
  write_shard(dir.file("e2.bin"), std::vector<int32_t>{}, 100000);
  EXPECT_TRUE(read_shard(dir.file("e2.bin"), 100000).empty());
}

TEST(Shard, WriteRejectsOutOfVocabTokens) {
  TempDir dir;
  EXPECT_THROW(write_shard(dir.file("x.bin"), {1, 100}, 100), Error);
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.bin")));
}

// Every corruption must name the file, the byte offset and the remedy.
void expect_error(const std::string& path, int64_t vocab, const std::vector<std::string>& needles) {
  try {
    Shard shard(path, vocab);
    FAIL() << "expected an error opening " << path;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("byte offset"), std::string::npos) << what;
    for (const auto& n : needles) EXPECT_NE(what.find(n), std::string::npos) << n << ": " << what;
  }
}

void patch(const std::string& path, size_t offset, int32_t value) {
  std::string bytes = read_file(path);
  std::memcpy(bytes.data() + offset, &value, 4);
  write_file_atomic(path, bytes);
}

TEST(Shard, BadMagic) {
  TempDir dir;
  const std::string path = dir.file("bad_magic.bin");
  write_shard(path, ramp(100, 50), 50);
  patch(path, 0, 12345);
  expect_error(path, 50, {"byte offset 0", "12345", "20240520", "prepare"});
}

TEST(Shard, BadVersion) {
  TempDir dir;
  const std::string path = dir.file("bad_version.bin");
  write_shard(path, ramp(100, 50), 50);
  patch(path, 4, 7);
  expect_error(path, 50, {"byte offset 4", "version 7"});
}

TEST(Shard, Truncated) {
  TempDir dir;
  const std::string path = dir.file("truncated.bin");
  write_shard(path, ramp(100, 50), 50);
  std::filesystem::resize_file(path, 1024 + 150);
  expect_error(path, 50, {"truncated", "byte offset 1174", "100 tokens", "prepare"});
}

TEST(Shard, ExtraBytes) {
  TempDir dir;
  const std::string path = dir.file("long.bin");
  write_shard(path, ramp(100, 50), 50);
  std::filesystem::resize_file(path, 1024 + 210);
  expect_error(path, 50, {"byte offset 1224"});
}

TEST(Shard, ShorterThanHeader) {
  TempDir dir;
  const std::string path = dir.file("tiny.bin");
  write_file_atomic(path, std::string("hello"));
  expect_error(path, 50, {"byte offset 5", "header"});
}

TEST(Shard, TokenOutsideVocab) {
  TempDir dir;
  const std::string path = dir.file("vocab.bin");
  auto tokens = ramp(100, 50);
  tokens[37] = 60;
  tokens[80] = 70;
  write_shard(path, tokens, 100);
  // Reading with a vocabulary of 50: the first bad token is #37 at byte 1024 + 2 * 37.
  expect_error(path, 50, {"byte offset 1098", "token id 60", ">= vocab_size 50", "at least 71"});
  EXPECT_NO_THROW(Shard(path, 71));
}

// Found by fuzzing (tests/fuzz/shard/regress-negative-uint32-token): a uint32 token >= 2^31 read
// back as a negative int32 and passed the `< vocab_size` check.
TEST(Shard, Uint32TokenAbove2To31IsRefused) {
  TempDir dir;
  const std::string path = dir.file("neg.bin");
  write_shard(path, ramp(10, 100000), 100000);  // version 2: uint32 tokens
  patch(path, 1024 + 4 * 3, -1);                // token 3 = 0xffffffff
  expect_error(path, 100000, {"byte offset 1036", "token id 4294967295", ">= vocab_size"});
  expect_error(path, 0, {"byte offset 1036", "2^31"});  // even without a vocabulary check
}

TEST(Shard, MissingFile) {
  TempDir dir;
  try {
    Shard(dir.file("nope.bin"), 10);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope.bin"), std::string::npos);
  }
}

TEST(Shard, FindShardsSortsNumerically) {
  TempDir dir;
  for (const char* name : {"train_001.bin", "train_000.bin", "train_1000.bin", "val_000.bin",
                           "train_abc.bin", "train_002.bin.tmp"})
    write_file_atomic(dir.file(name), std::string("x"));
  const auto paths = find_shards(dir.path(), "train");
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_EQ(base_name(paths[0]), "train_000.bin");
  EXPECT_EQ(base_name(paths[1]), "train_001.bin");
  EXPECT_EQ(base_name(paths[2]), "train_1000.bin");
  EXPECT_THROW(find_shards(dir.path(), "test"), Error);
  EXPECT_THROW(find_shards(dir.file("missing"), "train"), Error);
  EXPECT_EQ(shard_name("val", 12), "val_012.bin");
}

}  // namespace
}  // namespace strata::data
