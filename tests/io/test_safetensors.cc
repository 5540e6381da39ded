#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "io/atomic_file.h"
#include "io/checksum.h"
#include "io/safetensors.h"
#include "io/temp_dir.h"

namespace strata::io {

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

uint64_t header_length(const std::string& file_bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file_bytes[i]);
  return n;
}

}  // namespace

TEST(Safetensors, RoundTripsMixedDtypes) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  std::vector<uint16_t> h = {f32_to_bf16(1.0f), f32_to_bf16(-0.5f), f32_to_bf16(3.0f)};
  std::vector<int32_t> ids = {7, -1, 2147483647, 0};
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "42"}};
  // bf16 first in the caller's list: the writer still lays f32/i32 data out first (alignment).
  write_safetensors(path,
                    {{"h", DType::bf16, {3}, h.data()},
                     {"w", DType::f32, {2, 3}, w.data()},
                     {"ids", DType::i32, {4}, ids.data()}},
                    meta);

  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"h", "ids", "w"}));
  EXPECT_TRUE(f.has("w"));
  EXPECT_FALSE(f.has("x"));
  EXPECT_EQ(f.metadata(), meta);

  TensorInfo wi = f.info("w");
  EXPECT_EQ(wi.dtype, DType::f32);
  EXPECT_EQ(wi.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(wi.bytes, 24u);
  EXPECT_EQ(wi.numel(), 6);
  std::vector<float> w2(6);
  f.read_into("w", w2.data(), 24);
  EXPECT_EQ(std::memcmp(w2.data(), w.data(), 24), 0);

  EXPECT_EQ(f.info("h").dtype, DType::bf16);
  std::vector<uint16_t> h2(3);
  f.read_into("h", Tensor(h2.data(), DType::bf16, {3}));
  EXPECT_EQ(h2, h);

  std::vector<int32_t> ids2(4);
  f.read_into("ids", Tensor(ids2.data(), DType::i32, {4}));
  EXPECT_EQ(ids2, ids);

  // Layout as the reference writes it: the header pads to a multiple of 8, and 4-byte tensors
  // come before the 2-byte one so every tensor is aligned.
  const std::string bytes = read_file(path);
  const uint64_t n = header_length(bytes);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 24 + 16 + 6);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find("{\"__metadata__\""), 0u) << header;
  EXPECT_LT(header.find("\"w\""), header.find("\"h\""));
}

TEST(Safetensors, WriterReturnsTheFileChecksum) {
  TempDir dir;
  float x = 1.0f;
  const uint64_t sum = write_safetensors(dir.file("c"), {{"x", DType::f32, {1}, &x}});
  EXPECT_EQ(sum, xxhash64(read_file(dir.file("c"))));
}

TEST(Safetensors, EmptyMetadataIsOmitted) {
  TempDir dir;
  float x = 2.0f;
  write_safetensors(dir.file("a"), {{"x", DType::f32, {}, &x}});  // a scalar: shape []
  EXPECT_FALSE(contains(read_file(dir.file("a")), "__metadata__"));
  SafetensorsFile f = SafetensorsFile::open(dir.file("a"));
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_TRUE(f.info("x").shape.empty());
  float y = 0;
  f.read_into("x", Tensor(&y, DType::f32, {}));
  EXPECT_EQ(y, 2.0f);
}

TEST(Safetensors, ZeroSizeTensorsAndEmptyFiles) {
  TempDir dir;
  float a[2] = {1, 2};
  write_safetensors(dir.file("z"), {{"empty", DType::f32, {0, 5}, nullptr},
                                    {"a", DType::f32, {2}, a},
                                    {"empty2", DType::bf16, {3, 0}, nullptr}});
  SafetensorsFile f = SafetensorsFile::open(dir.file("z"));
  EXPECT_EQ(f.info("empty").bytes, 0u);
  EXPECT_EQ(f.info("empty").shape, (std::vector<int64_t>{0, 5}));
  f.read_into("empty", nullptr, 0);
  float b[2];
  f.read_into("a", b, sizeof b);
  EXPECT_EQ(b[1], 2.0f);

  write_safetensors(dir.file("none"), {});
  EXPECT_TRUE(SafetensorsFile::open(dir.file("none")).names().empty());
}

TEST(Safetensors, ReadIntoChecksTheDestination) {
  TempDir dir;
  const std::string path = dir.file("r");
  float w[6] = {};
  write_safetensors(path, {{"w", DType::f32, {2, 3}, w}});
  SafetensorsFile f = SafetensorsFile::open(path);
  float dst[6];
  std::string msg = error_of([&] { f.read_into("w", dst, 20); });
  EXPECT_TRUE(contains(msg, path) && contains(msg, "24 bytes") && contains(msg, "20")) << msg;
  msg = error_of([&] { f.read_into("w", Tensor(dst, DType::i32, {2, 3})); });
  EXPECT_TRUE(contains(msg, "F32") && contains(msg, "I32")) << msg;
  msg = error_of([&] { f.read_into("w", Tensor(dst, DType::f32, {3, 2})); });
  EXPECT_TRUE(contains(msg, "[2, 3]") && contains(msg, "[3, 2]")) << msg;
  msg = error_of([&] { f.read_into("v", dst, 24); });
  EXPECT_TRUE(contains(msg, path) && contains(msg, "'v'")) << msg;
  msg = error_of([&] { f.info("v"); });
  EXPECT_TRUE(contains(msg, "no tensor named 'v'")) << msg;
}

TEST(Safetensors, WriterRejectsBadInput) {
  TempDir dir;
  const std::string path = dir.file("bad");
  float x = 0;
  auto msg = [&](std::vector<TensorRef> t) {
    return error_of([&] { write_safetensors(path, t); });
  };
  EXPECT_TRUE(contains(msg({{"a", DType::f32, {1}, &x}, {"a", DType::f32, {1}, &x}}), "twice"));
  EXPECT_TRUE(contains(msg({{"__metadata__", DType::f32, {1}, &x}}), "reserved"));
  EXPECT_TRUE(contains(msg({{"a", DType::f32, {-1}, &x}}), "negative"));
  EXPECT_TRUE(contains(msg({{"a", DType::f32, {4}, nullptr}}), "no data"));
  EXPECT_TRUE(contains(msg({{"", DType::f32, {1}, &x}}), "empty name"));
  EXPECT_EQ(dir.entry_count(), 0u);  // nothing was created for any of them
}

TEST(Safetensors, FailedOverwriteKeepsTheOldFile) {
  TempDir dir;
  const std::string path = dir.file("keep");
  float x = 3.0f;
  write_safetensors(path, {{"x", DType::f32, {1}, &x}});
  const std::string before = read_file(path);
  error_of([&] { write_safetensors(path, {{"y", DType::f32, {1}, nullptr}}); });
  EXPECT_EQ(read_file(path), before);
}

TEST(Safetensors, MissingFileNamesIt) {
  TempDir dir;
  const std::string msg = error_of([&] { SafetensorsFile::open(dir.file("nope.safetensors")); });
  EXPECT_TRUE(contains(msg, dir.file("nope.safetensors"))) << msg;
}

TEST(Safetensors, UnsupportedButValidDtypeFailsOnlyWhenUsed) {
  TempDir dir;
  const std::string path = dir.file("i64");
  std::string header = R"({"pos":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
                       R"("w":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(header.size() >> (8 * i));
  bytes += header + std::string(20, '\0');
  write_file_atomic(path, bytes);
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.dtype_name_of("pos"), "I64");
  EXPECT_EQ(f.info("w").bytes, 4u);
  const std::string msg = error_of([&] { f.info("pos"); });
  EXPECT_TRUE(contains(msg, path) && contains(msg, "I64")) << msg;
}

}  // namespace strata::io
