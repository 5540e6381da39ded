#include "train/async_checkpoint.h"

#include <chrono>
#include <cstring>

#include "core/clock.h"
#include "core/trace.h"

namespace strata {

namespace {
CheckpointWriteResult write_now(const std::string& path, const std::vector<SliceSource>& sources) {
  CheckpointWriteResult r;
  for (const SliceSource& s : sources)
    r.bytes += s.entry.count * static_cast<int64_t>(sizeof(float));
  TraceSpan span("checkpoint write", "checkpoint");
  span.arg("bytes", r.bytes);
  const auto t0 = Clock::now();
  try {
    write_slice_file(path, sources);
  } catch (const std::exception& e) {
    r.ok = false;
    r.error = e.what();
  }
  r.write_s = seconds_since(t0);
  return r;
}
}  // namespace

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

void AsyncCheckpointWriter::start(const std::string& path, const std::vector<SliceSource>& sources,
                                  bool async) {
  const auto t0 = Clock::now();
  if (in_flight_) wait();
  if (!async) {
    result_ = write_now(path, sources);
    result_.blocked_s = seconds_since(t0);
    finished_.store(true, std::memory_order_release);
    in_flight_ = true;
    return;
  }
  int64_t total = 0;
  for (const SliceSource& s : sources) total += s.entry.count;
  // Grown once to the largest save; later saves reuse it (no allocation in the step loop).
  if (static_cast<int64_t>(snapshot_.size()) < total) snapshot_.resize(static_cast<size_t>(total));
  std::vector<SliceSource> copies;
  copies.reserve(sources.size());
  float* cursor = snapshot_.data();
  for (const SliceSource& s : sources) {
    std::memcpy(cursor, s.data, static_cast<size_t>(s.entry.count) * sizeof(float));
    copies.push_back(SliceSource{s.entry, cursor});
    cursor += s.entry.count;
  }
  const double blocked = seconds_since(t0);
  finished_.store(false, std::memory_order_release);
  in_flight_ = true;
  thread_ = std::thread([this, path, copies = std::move(copies), blocked]() {
    trace::name_thread("checkpoint writer");
    result_ = write_now(path, copies);
    result_.blocked_s = blocked;
    finished_.store(true, std::memory_order_release);
  });
}

CheckpointWriteResult AsyncCheckpointWriter::wait() {
  if (thread_.joinable()) thread_.join();
  in_flight_ = false;
  return result_;
}

}  // namespace strata
