// TensorBoard event files: CRC-32C against published vectors, TFRecord framing, and the Event
// protocol buffer decoded by hand. tests/track/check_tensorboard.py reads a real run's file with
// the tensorboard Python package.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "track/metrics.h"
#include "track/tensorboard.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

uint64_t le(const std::string& s, size_t at, int width) {
  uint64_t v = 0;
  for (int i = width - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// A minimal protocol buffer reader: the fields of one message, by number, as raw values
// (varint and fixed as integers, length-delimited as bytes).
struct Field {
  int wire = 0;
  uint64_t number = 0;
  std::string bytes;
};

uint64_t read_varint(const std::string& s, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    EXPECT_LT(at, s.size());
    const auto b = static_cast<unsigned char>(s[at++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
}

std::multimap<uint32_t, Field> decode(const std::string& s) {
  std::multimap<uint32_t, Field> fields;
  size_t at = 0;
  while (at < s.size()) {
    const uint64_t key = read_varint(s, at);
    Field f;
    f.wire = static_cast<int>(key & 7);
    if (f.wire == 0) {
      f.number = read_varint(s, at);
    } else if (f.wire == 1) {
      f.number = le(s, at, 8);
      at += 8;
    } else if (f.wire == 5) {
      f.number = le(s, at, 4);
      at += 4;
    } else if (f.wire == 2) {
      const uint64_t n = read_varint(s, at);
      f.bytes = s.substr(at, n);
      at += n;
    } else {
      ADD_FAILURE() << "unexpected wire type " << f.wire;
      break;
    }
    fields.emplace(static_cast<uint32_t>(key >> 3), f);
  }
  EXPECT_EQ(at, s.size());
  return fields;
}

double as_double(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}
float as_float(uint64_t bits) {
  const auto b = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

TEST(TensorBoard, Crc32cKnownVectors) {
  // The check value of CRC-32C and the iSCSI test vectors (RFC 3720, B.4).
  EXPECT_EQ(tb::crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(tb::crc32c(""), 0u);
  EXPECT_EQ(tb::crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(tb::crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(tb::crc32c(ascending), 0x46DD794Eu);
  // Masked: rotate right by 15, add 0xa282ead8 (computed by hand for 0xE3069283).
  EXPECT_EQ(tb::masked_crc32c("123456789"), 0xC78AB0E5u);
}

TEST(TensorBoard, RecordFraming) {
  const std::string payload = "hello, event";
  const std::string r = tb::tfrecord(payload);
  ASSERT_EQ(r.size(), 8 + 4 + payload.size() + 4);
  EXPECT_EQ(le(r, 0, 8), payload.size());
  EXPECT_EQ(le(r, 8, 4), tb::masked_crc32c(r.substr(0, 8)));
  EXPECT_EQ(r.substr(12, payload.size()), payload);
  EXPECT_EQ(le(r, 12 + payload.size(), 4), tb::masked_crc32c(payload));
  // An empty record still has both checksums.
  EXPECT_EQ(tb::tfrecord("").size(), 16u);
}

TEST(TensorBoard, ScalarEventBytes) {
  const std::string e = tb::scalar_event(1.5, 7, "loss", 2.0f);
  // wall_time: field 1, fixed64 (key 0x09), 1.5 little-endian.
  const std::string wall = bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f});
  // step: field 2, varint (key 0x10).
  const std::string step = bytes({0x10, 0x07});
  // Summary.Value { tag (0x0a) "loss", simple_value (0x15, fixed32) 2.0f }
  const std::string value = bytes({0x0a, 0x04}) + "loss" + bytes({0x15, 0, 0, 0, 0x40});
  const std::string summary = bytes({0x0a, static_cast<int>(value.size())}) + value;
  // summary: field 5, length-delimited (key 0x2a).
  const std::string expected =
      wall + step + bytes({0x2a, static_cast<int>(summary.size())}) + summary;
  EXPECT_EQ(e, expected);
}

TEST(TensorBoard, EventsDecode) {
  const auto fields = decode(tb::scalar_event(1700000000.25, 300, "mem/params", 0.125f));
  ASSERT_EQ(fields.count(1), 1u);
  EXPECT_EQ(as_double(fields.find(1)->second.number), 1700000000.25);
  ASSERT_EQ(fields.count(2), 1u);
  EXPECT_EQ(fields.find(2)->second.number, 300u);
  ASSERT_EQ(fields.count(5), 1u);
  const auto summary = decode(fields.find(5)->second.bytes);
  ASSERT_EQ(summary.count(1), 1u);
  const auto value = decode(summary.find(1)->second.bytes);
  EXPECT_EQ(value.find(1)->second.bytes, "mem/params");
  EXPECT_EQ(value.find(2)->second.wire, 5);
  EXPECT_EQ(as_float(value.find(2)->second.number), 0.125f);

  // A negative step is a 10-byte varint (two's complement), as protobuf encodes int64.
  const auto negative = decode(tb::scalar_event(0, -1, "x", 1));
  EXPECT_EQ(static_cast<int64_t>(negative.find(2)->second.number), -1);

  const auto version = decode(tb::file_version_event(12.5));
  ASSERT_EQ(version.count(3), 1u);
  EXPECT_EQ(version.find(3)->second.bytes, "brain.Event:2");
  EXPECT_EQ(as_double(version.find(1)->second.number), 12.5);
}

// Reads every record of an event file, checking both checksums of each.
std::vector<std::string> read_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  std::vector<std::string> records;
  size_t at = 0;
  while (at < s.size()) {
    EXPECT_LE(at + 12, s.size());
    const uint64_t n = le(s, at, 8);
    EXPECT_EQ(le(s, at + 8, 4), tb::masked_crc32c(s.substr(at, 8)));
    const std::string data = s.substr(at + 12, n);
    EXPECT_EQ(le(s, at + 12 + n, 4), tb::masked_crc32c(data));
    records.push_back(data);
    at += 12 + n + 4;
  }
  return records;
}

TEST(TensorBoard, WriterWritesNumericLeavesOfJson) {
  const fs::path dir = fs::temp_directory_path() / "strata_test_tensorboard";
  fs::remove_all(dir);
  std::string path;
  {
    TensorBoardWriter w(dir.string());
    path = w.path();
    EXPECT_NE(fs::path(path).filename().string().find("events.out.tfevents."), std::string::npos);
    const nlohmann::json record = {
        {"step", 3},       {"loss", 2.5},          {"mem", {{"params", 4096}}}, {"skipped", true},
        {"schedule", "x"}, {"stragglers", {1, 2}}, {"val_loss", nullptr}};
    w.add_json_scalars(record, 3);
    w.flush();
  }
  const std::vector<std::string> records = read_records(path);
  ASSERT_EQ(records.size(), 3u);  // file_version, loss, mem/params
  EXPECT_EQ(decode(records[0]).find(3)->second.bytes, "brain.Event:2");
  std::map<std::string, float> scalars;
  for (size_t i = 1; i < records.size(); ++i) {
    const auto event = decode(records[i]);
    EXPECT_EQ(event.find(2)->second.number, 3u);
    const auto value = decode(decode(event.find(5)->second.bytes).find(1)->second.bytes);
    scalars[value.find(1)->second.bytes] = as_float(value.find(2)->second.number);
  }
  EXPECT_EQ(scalars, (std::map<std::string, float>{{"loss", 2.5f}, {"mem/params", 4096.0f}}));

  // A second writer in the same second gets its own file.
  TensorBoardWriter again(dir.string());
  EXPECT_NE(again.path(), path);
  fs::remove_all(dir);
}

TEST(TensorBoard, RunDirOutputsWriteBoth) {
  const fs::path dir = fs::temp_directory_path() / "strata_test_metrics_sink";
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    MetricsSink sink;
    add_run_dir_outputs(sink, dir.string(), /*tensorboard=*/true);
    ASSERT_EQ(sink.outputs(), 2u);
    sink.write({{"step", 1}, {"loss", 3.0}});
    sink.write({{"step", 2}, {"loss", 2.0}});
    ASSERT_TRUE(fs::is_directory(dir / "tensorboard"));
    const fs::path events = fs::directory_iterator(dir / "tensorboard")->path();
    EXPECT_EQ(read_records(events.string()).size(), 3u);  // file_version and two scalars
  }
  EXPECT_TRUE(fs::exists(dir / "metrics.jsonl"));
  EXPECT_TRUE(fs::exists(dir / "environment.json"));
  fs::create_directories(dir / "off");
  {
    MetricsSink off;
    add_run_dir_outputs(off, (dir / "off").string(), /*tensorboard=*/false);
    EXPECT_EQ(off.outputs(), 1u);
  }
  EXPECT_FALSE(fs::exists(dir / "off" / "tensorboard"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata
