// TensorBoard event files, written by strata's own code (no TensorFlow, no protobuf library):
// RUN_DIR/tensorboard/events.out.tfevents.<unix time>.<host>, a TFRecord file of `Event` protocol
// buffers that `tensorboard --logdir RUN_DIR` shows as scalar charts.
//
// TFRecord framing, per record:   uint64 length | uint32 masked_crc32c(length bytes)
//                                 | data | uint32 masked_crc32c(data), all little-endian
// masked_crc32c(x) = rotate_right(crc32c(x), 15) + 0xa282ead8 (crc32c: Castagnoli polynomial).
// The protocol buffers (tensorflow/core/util/event.proto, framework/summary.proto), hand-encoded:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }     Value { string tag = 1; float simple_value = 2; }
// The first record of a file is an Event with file_version "brain.Event:2"; each scalar is then
// one Event with one Summary.Value.
#pragma once
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace strata::tb {

// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), as TFRecord uses it.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

// One TFRecord: the framing above around `payload`.
std::string tfrecord(std::string_view payload);

// Serialised Event messages.
std::string file_version_event(double wall_time);
std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value);

// Seconds since the Unix epoch, as Event.wall_time wants it.
double wall_time_now();

}  // namespace strata::tb

namespace strata {

// One event file. add_scalar buffers (stdio); flush makes everything written so far readable.
class TensorBoardWriter {
 public:
  // Creates `dir` and a new events.out.tfevents.<unix time>.<host> in it (".N" appended if that
  // name exists: a resumed run in the same second), and writes the file_version record.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void add_scalar(std::string_view tag, int64_t step, float value);
  // Every number in `record` as a scalar at `step`, tagged by its path: {"loss": 2.5, "mem":
  // {"params": 4096}} gives "loss" and "mem/params". Strings, booleans, nulls and arrays are not
  // scalars and are skipped, as is the top-level "step". A non-finite number (a NaN loss) is
  // written as it is.
  void add_json_scalars(const nlohmann::json& record, int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(std::string_view event);
  void add_tree(const nlohmann::json& node, const std::string& prefix, int64_t step);

  std::string path_;
  FILE* file_ = nullptr;
};

}  // namespace strata
