// Asynchronous checkpoint writes: the slices a rank saves are copied into a snapshot buffer that
// is allocated once (training blocks only for that copy), and a background thread writes them to
// the rank's file while the next steps run. One write is in flight at a time; starting another
// first waits for it.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "train/checkpoint_slices.h"

namespace strata {

struct CheckpointWriteResult {
  bool ok = true;
  std::string error;     // what failed (names the file)
  int64_t bytes = 0;     // slice bytes written
  double write_s = 0;    // background write time (file, fsync, rename)
  double blocked_s = 0;  // time training was blocked: waiting for the previous write + copy
};

class AsyncCheckpointWriter {
 public:
  AsyncCheckpointWriter() = default;
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  // Snapshots the sources' bytes and starts writing them to `path`. With async = false the write
  // happens before returning (nothing is copied). Either way the result is collected with
  // done() / wait().
  void start(const std::string& path, const std::vector<SliceSource>& sources, bool async);
  bool in_flight() const { return in_flight_; }
  bool done() const { return !in_flight_ || finished_.load(std::memory_order_acquire); }
  // Waits for the write in flight and returns its result (in_flight() is false afterwards).
  CheckpointWriteResult wait();
  // Allocates (and touches) room for snapshots of `floats` elements, so that the first save
  // does not pay for it.
  void reserve(int64_t floats) {
    if (static_cast<int64_t>(snapshot_.size()) < floats)
      snapshot_.resize(static_cast<size_t>(floats));
  }
  // Bytes reserved for snapshots (grown to the largest save seen; reused after that).
  int64_t snapshot_bytes() const { return static_cast<int64_t>(snapshot_.size() * sizeof(float)); }

 private:
  std::vector<float> snapshot_;
  std::thread thread_;
  std::atomic<bool> finished_{false};
  bool in_flight_ = false;
  CheckpointWriteResult result_;
};

}  // namespace strata
