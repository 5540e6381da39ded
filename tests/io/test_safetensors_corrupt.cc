// Every way a safetensors file can be damaged must give an error that names the file and the
// problem, never a crash, a silent misread or a huge allocation.
#include <gtest/gtest.h>

#include <filesystem>

#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io/temp_dir.h"

namespace strata::io {

namespace {

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return s;
}

// A file with the given JSON header (padded like the reference) and `data_bytes` zero bytes.
std::string file_bytes(std::string header, size_t data_bytes) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return le64(header.size()) + header + std::string(data_bytes, '\0');
}

class SafetensorsCorrupt : public ::testing::Test {
 protected:
  // Opens `bytes` as a file and returns the error, checking that it names the file.
  std::string open_error(const std::string& bytes) {
    write_file_atomic(path_, bytes);
    std::string msg = error_of([&] { SafetensorsFile::open(path_); });
    EXPECT_NE(msg, "<no error>");
    EXPECT_NE(msg.find(path_), std::string::npos) << msg;
    return msg;
  }
  std::string header_error(const std::string& header, size_t data_bytes) {
    return open_error(file_bytes(header, data_bytes));
  }

  TempDir dir_;
  std::string path_ = dir_.file("broken.safetensors");
};

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

}  // namespace

TEST_F(SafetensorsCorrupt, ShorterThanTheLengthField) {
  EXPECT_HAS(open_error(""), "truncated");
  EXPECT_HAS(open_error("abc"), "truncated");
}

TEST_F(SafetensorsCorrupt, HeaderLengthBeyondFile) {
  EXPECT_HAS(open_error(le64(1000) + "{}"), "runs past the end of the file");
  // A length near 2^64 must not wrap around or allocate.
  EXPECT_HAS(open_error(le64(~uint64_t{0}) + "{}      "), "runs past the end of the file");
}

TEST_F(SafetensorsCorrupt, BadJson) {
  EXPECT_HAS(header_error(R"({"a": {"dtype": )", 0), "bad JSON");
  EXPECT_HAS(header_error("[1, 2]", 0), "not an object");
  EXPECT_HAS(header_error(R"({"a": 3})", 0), "not an object");
}

TEST_F(SafetensorsCorrupt, TruncatedData) {
  // A valid file cut short: the last tensor's offsets run past the data that is left.
  const std::string whole =
      file_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 16);
  EXPECT_HAS(open_error(whole.substr(0, whole.size() - 3)), "truncated");
}

TEST_F(SafetensorsCorrupt, OffsetsOutOfRange) {
  EXPECT_HAS(header_error(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", 16),
             "run past");
  EXPECT_HAS(header_error(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 16),
             "end before they begin");
  EXPECT_HAS(header_error(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[-1,15]}})", 16),
             "data_offsets");
  EXPECT_HAS(header_error(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", 16),
             "data_offsets");
}

TEST_F(SafetensorsCorrupt, OverlappingTensors) {
  EXPECT_HAS(header_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          12),
             "overlaps tensor 'a'");
}

TEST_F(SafetensorsCorrupt, GapsAndTrailingBytes) {
  EXPECT_HAS(header_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
             "belong to no tensor");
  EXPECT_HAS(header_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 12),
             "the last 8 of 12 data bytes belong to no tensor");
}

TEST_F(SafetensorsCorrupt, UnknownDtype) {
  EXPECT_HAS(header_error(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4),
             "unknown dtype 'F33'");
  EXPECT_HAS(header_error(R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4),
             "not a string");
}

TEST_F(SafetensorsCorrupt, ShapeDoesNotMatchByteRange) {
  const std::string msg =
      header_error(R"({"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,24]}})", 24);
  EXPECT_HAS(msg, "tensor 'a'");
  EXPECT_HAS(msg, "needs 12 bytes");
  EXPECT_HAS(header_error(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
             "non-negative");
  EXPECT_HAS(header_error(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,8]}})", 8),
             "non-negative");
  // A shape whose element count overflows 64 bits is rejected, not wrapped to a small size.
  EXPECT_HAS(header_error(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],)"
                          R"("data_offsets":[0,0]}})",
                          0),
             "too large");
}

TEST_F(SafetensorsCorrupt, DuplicateNames) {
  EXPECT_HAS(header_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                          8),
             "duplicate tensor name 'a'");
  EXPECT_HAS(
      header_error(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", 4),
      "duplicate key 'dtype'");
}

TEST_F(SafetensorsCorrupt, MissingFieldsAndBadMetadata) {
  EXPECT_HAS(header_error(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4), "missing 'dtype'");
  EXPECT_HAS(header_error(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4), "missing 'shape'");
  EXPECT_HAS(header_error(R"({"__metadata__":{"step":3}})", 0), "not a string");
  EXPECT_HAS(header_error(R"({"__metadata__":[]})", 0), "__metadata__");
}

// Found by fuzzing: nested brackets in the header overflowed the stack wherever the value was
// copied or printed (core/json.h).
TEST_F(SafetensorsCorrupt, DeeplyNestedHeader) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  EXPECT_HAS(
      header_error(R"({"a":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,0]}})", 0),
      "nests deeper than 128 levels");
}

// Found by fuzzing (tests/fuzz/safetensors/regress-number-out-of-range): a number too large for
// a double is nlohmann's out_of_range, not a parse_error, and escaped.
TEST_F(SafetensorsCorrupt, NumberOutOfRange) {
  EXPECT_HAS(header_error(R"({"a":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}})", 4),
             "bad JSON header");
}

TEST_F(SafetensorsCorrupt, ErrorsComeFromOpenNotLaterReads) {
  // A file that validates must read back; a directory is not a file.
  EXPECT_HAS(error_of([&] { SafetensorsFile::open(dir_.path()); }), "directory");
}

}  // namespace strata::io
