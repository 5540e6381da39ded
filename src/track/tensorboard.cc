#include "track/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace strata::tb {

namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// Little-endian fixed-width integers, whatever the host's byte order.
void put_fixed32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_fixed64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Protocol buffer wire format: a key is (field number << 3) | wire type; varints carry 7 bits a
// byte, low bits first, the high bit set on every byte but the last; int64 is its two's
// complement as uint64 (a negative step takes 10 bytes, as protobuf writes it).
enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, uint32_t field, Wire wire) {
  put_varint(out, (field << 3) | wire);
}
void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}
void put_double(std::string& out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed64);
  put_fixed64(out, bits);
}
void put_float(std::string& out, uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed32);
  put_fixed32(out, bits);
}

// Event fields (event.proto) and Summary / Summary.Value fields (summary.proto).
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1, kValueTag = 1, kValueSimpleValue = 2;

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_double(e, kEventWallTime, wall_time);
  put_key(e, kEventStep, kVarint);
  put_varint(e, static_cast<uint64_t>(step));
  return e;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  uint32_t c = 0xffffffffu;
  for (unsigned char byte : data) c = kCrc32cTable[(c ^ byte) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view payload) {
  std::string length;
  put_fixed64(length, payload.size());
  std::string out = length;
  put_fixed32(out, masked_crc32c(length));
  out.append(payload);
  put_fixed32(out, masked_crc32c(payload));
  return out;
}

std::string file_version_event(double wall_time) {
  std::string e = event_header(wall_time, 0);
  put_bytes(e, kEventFileVersion, "brain.Event:2");
  return e;
}

std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;
  put_bytes(v, kValueTag, tag);
  put_float(v, kValueSimpleValue, value);
  std::string summary;
  put_bytes(summary, kSummaryValue, v);
  std::string e = event_header(wall_time, step);
  put_bytes(e, kEventSummary, summary);
  return e;
}

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace strata::tb

namespace strata {

namespace fs = std::filesystem;

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  STRATA_CHECK(!ec, "cannot create the TensorBoard directory '", dir, "': ", ec.message(),
               " (track.tensorboard = false turns TensorBoard files off)");
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  const double now = tb::wall_time_now();
  const std::string base =
      (fs::path(dir) / cat("events.out.tfevents.", static_cast<int64_t>(now), ".", host)).string();
  path_ = base;
  for (int n = 1; fs::exists(path_); ++n) path_ = cat(base, ".", n);
  file_ = std::fopen(path_.c_str(), "wb");
  STRATA_CHECK(file_ != nullptr, "cannot open TensorBoard event file '", path_,
               "' for writing: ", std::strerror(errno));
  write_record(tb::file_version_event(now));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::write_record(std::string_view event) {
  const std::string record = tb::tfrecord(event);
  std::fwrite(record.data(), 1, record.size(), file_);
}

void TensorBoardWriter::add_scalar(std::string_view tag, int64_t step, float value) {
  write_record(tb::scalar_event(tb::wall_time_now(), step, tag, value));
}

void TensorBoardWriter::add_tree(const nlohmann::json& node, const std::string& prefix,
                                 int64_t step) {
  for (const auto& [name, value] : node.items()) {
    if (prefix.empty() && name == "step") continue;  // the x axis, not a scalar
    const std::string tag = prefix.empty() ? name : prefix + "/" + name;
    if (value.is_object())
      add_tree(value, tag, step);
    else if (value.is_number())
      add_scalar(tag, step, value.get<float>());
  }
}

void TensorBoardWriter::add_json_scalars(const nlohmann::json& record, int64_t step) {
  if (record.is_object()) add_tree(record, "", step);
}

void TensorBoardWriter::flush() {
  std::fflush(file_);
}

}  // namespace strata
